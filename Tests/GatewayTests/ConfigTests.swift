import Foundation
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

final class ConfigTests: XCTestCase {
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
            // A NUL byte would have SQLite open `<dir>/q.sqlite` instead, with itself as its lock file.
            ("queue:\n  engine: sqlite\n  sqlite:\n    path: \"\(dir)/q.sqlite\\0.other\"\n", "queue.sqlite.path"),
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
