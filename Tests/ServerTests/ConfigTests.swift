import Foundation
import XCTest

@testable import Server

final class ConfigTests: XCTestCase {
    func testGorushConfigStartsWithWarningsOnly() throws {
        let gorush = """
            core:
              enabled: true
              address: ""
              shutdown_timeout: 30
              port: "8088"
              worker_num: 0
              queue_num: 0
              max_notification: 100
              sync: false
              feedback_hook_url: ""
              feedback_timeout: 10
              feedback_header:
              mode: "release"
              ssl: false
              cert_path: "cert.pem"
              key_path: "key.pem"
              pid:
                enabled: false
                path: "gorush.pid"
                override: true
            grpc:
              enabled: false
              port: 9000
            api:
              push_uri: "/api/push"
              health_uri: "/healthz"
            android:
              enabled: false
              key_path: ""
              credential: ""
              max_retry: 0
            ios:
              enabled: false
              key_path: "key.pem"
              key_type: "pem"
              password: ""
              production: false
              max_concurrent_pushes: 100
              max_retry: 0
              key_id: ""
              team_id: ""
            log:
              format: "string"
              access_log: "stdout"
              hide_token: true
              brand_new_key: 1
            queue:
              engine: "local"
            """
        let raw = try RawConfig(yaml: gorush, environment: [:])
        XCTAssertEqual(raw.int("core.port"), 8088, "gorush writes the port as a string")
        XCTAssertEqual(raw.warnings.filter { $0.hasPrefix("unknown") }, ["unknown config key log.brand_new_key ignored"])
        // gorush keys Pushgate does not act on are each named in a warning (GorushDropInTests has them all).
        XCTAssertTrue(raw.warnings.contains { $0.hasPrefix("grpc.* accepted but not acted on (grpc.enabled, grpc.port)") }, "\(raw.warnings)")
        let s = try GatewaySettings(raw)
        XCTAssertEqual(s.port, 8088)
        XCTAssertEqual(s.queueEngine, "memory")
        XCTAssertEqual(s.maxNotification, 100)
    }

    func testEnvironmentOverrides() throws {
        let raw = try RawConfig(
            yaml: "core:\n  port: 1000\n", environment: ["GORUSH_CORE_PORT": "2000", "PUSHGATE_IOS_MAX_RETRY": "7", "GORUSH_CORE_SYNC": "true"])
        XCTAssertEqual(raw.int("core.port"), 2000)
        XCTAssertEqual(raw.int("ios.max_retry"), 7)
        XCTAssertTrue(raw.bool("core.sync"))
        let both = try RawConfig(yaml: nil, environment: ["GORUSH_CORE_PORT": "2000", "PUSHGATE_CORE_PORT": "3000"])
        XCTAssertEqual(both.int("core.port"), 3000, "PUSHGATE_ wins over GORUSH_")
    }

    func testBadValuesNameTheKey() {
        XCTAssertThrowsError(try RawConfig(yaml: "core:\n  port: eighty\n", environment: [:])) { e in
            XCTAssertEqual("\(e)", #"config error: core.port: expected an integer, got "eighty""#)
        }
        XCTAssertThrowsError(try GatewaySettings(RawConfig(yaml: "core:\n  port: 70000\n", environment: [:]))) { e in
            XCTAssertTrue("\(e)".hasPrefix("config error: core.port:"))
        }
        XCTAssertThrowsError(try RawConfig(yaml: "core: [1, 2\n", environment: [:])) { e in
            XCTAssertTrue("\(e)".contains("not valid YAML"))
        }
    }

    func testProviderConfigErrorsAreOneLineNamingTheKey() throws {
        let dir = NSTemporaryDirectory() + "pushgate-cfg-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n".write(toFile: dir + "/bad.p8", atomically: true, encoding: .utf8)
        let cases: [(String, String)] = [
            ("ios:\n  enabled: true\n  key_path: \(dir)/missing.p8\n  key_id: K\n  team_id: T\n", "ios.key_path"),
            ("ios:\n  enabled: true\n  key_path: \(dir)/bad.p8\n  key_id: K\n  team_id: T\n", "ios.key_path"),
            ("android:\n  enabled: true\n", "android"),
            // The queue is opened after the providers and their HTTP client: a bad queue closes them
            // (an HTTP client dropped open traps in debug builds) and names the key.
            ("queue:\n  engine: sqlite\n  sqlite:\n    path: /proc/pushgate-no-such-dir/q.sqlite\n", "queue.sqlite.path"),
            ("queue:\n  engine: postgres\n", "queue.postgres.url"),
        ]
        for (yaml, key) in cases {
            XCTAssertThrowsError(try GatewayBuilder.build(raw: RawConfig(yaml: yaml, environment: [:]))) { e in
                let text = "\(e)"
                XCTAssertTrue(text.hasPrefix("config error: \(key)"), text)
                XCTAssertFalse(text.contains("\n"), "one line: \(text)")
            }
        }
    }

    func testSetAssignmentConvertsLikeTheEnvironment() throws {
        var raw = try RawConfig(yaml: nil, environment: [:])
        try raw.set(assignment: "core.port=9000")
        try raw.set(assignment: "core.sync=true")
        try raw.set(assignment: "webpush.host_allowlist=a.example,b.example")
        XCTAssertEqual(raw.int("core.port"), 9000)
        XCTAssertTrue(raw.bool("core.sync"))
        XCTAssertEqual(raw.list("webpush.host_allowlist"), ["a.example", "b.example"])
        XCTAssertThrowsError(try raw.set(assignment: "core.port=ninety"))
        XCTAssertThrowsError(try raw.set(assignment: "no.such_key=1"))
        XCTAssertThrowsError(try raw.set(assignment: "core.port"))
    }

    func testRedactedConfig() throws {
        let raw = try RawConfig(yaml: "android:\n  credential: '{\"private_key\":\"hunter2\"}'\n", environment: [:])
        let yaml = raw.redactedYAML()
        XCTAssertTrue(yaml.contains("[REDACTED]"))
        XCTAssertFalse(yaml.contains("hunter2"))
    }
}
