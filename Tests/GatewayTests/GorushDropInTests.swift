import AsyncHTTPClient
import Foundation
import GorushRPC
import Hummingbird
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// A gorush operator's config, flags and habits work unchanged.
final class GorushDropInTests: XCTestCase {
    /// gorush v1.22's testdata `config.yml`: its keys, values and layout (our text), ios/android
    /// left as a user who has not set them up yet would (ios disabled, android credentials absent).
    static let gorushConfig = """
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
            - x-gorush-token:4e989115e09680f44a645519fed6a976
          mode: "release"
          ssl: false
          cert_path: "cert.pem"
          key_path: "key.pem"
          cert_base64: ""
          key_base64: ""
          pid:
            enabled: false
            path: "gorush.pid"
            override: true
          auto_tls:
            enabled: false
            folder: ".cache"
            host: ""
        grpc:
          enabled: false
          port: 9000
        api:
          push_uri: "/api/push"
          stat_go_uri: "/api/stat/go"
          stat_app_uri: "/api/stat/app"
          config_uri: "/api/config"
          sys_stat_uri: "/sys/stats"
          metric_uri: "/metrics"
          health_uri: "/healthz"
        android:
          max_retry: 0
        huawei:
          enabled: false
          appsecret: "YOUR_APP_SECRET"
          appid: "YOUR_APP_ID"
          max_retry: 0
        queue:
          engine: "local"
          nsq:
            addr: 127.0.0.1:4150
            topic: gorush
            channel: gorush
          nats:
            addr: 127.0.0.1:4222
            subj: gorush
            queue: gorush
          redis:
            addr: 127.0.0.1:6379
            group: gorush
            consumer: gorush
            stream_name: gorush
            username: ""
            password: ""
            with_tls: false
            db: 0
        ios:
          enabled: false
          key_path: "key.pem"
          key_base64: ""
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
          access_level: "debug"
          error_log: "stderr"
          error_level: "error"
          hide_token: true
          hide_messages: false
        stat:
          engine: "memory"
          redis:
            cluster: false
            addr: "localhost:6379"
            username: ""
            password: ""
            db: 0
          boltdb:
            path: "bolt.db"
            bucket: "gorush"
          buntdb:
            path: "bunt.db"
          leveldb:
            path: "level.db"
          badgerdb:
            path: "badger.db"
        """

    func testGorushTestdataConfigLoadsAndEveryKeyNotActedOnIsWarned() throws {
        let raw = try RawConfig(yaml: Self.gorushConfig, environment: [:])
        let settings = try GatewaySettings(raw)
        XCTAssertEqual(settings.port, 8088, "gorush writes the port as a string")
        XCTAssertEqual(settings.queueEngine, "memory", "queue.engine local is the memory engine")
        XCTAssertEqual(settings.maxNotification, 100)
        XCTAssertNil(settings.tls)
        XCTAssertNil(try GRPCSettings(raw.section("grpc"), corePort: settings.port).port, "grpc.enabled: false")
        XCTAssertFalse(raw.warnings.contains { $0.hasPrefix("unknown config key") }, "\(raw.warnings)")
        // One warning per group of keys Pushgate accepts and does not act on, each naming its keys.
        for group in ["core.auto_tls.*", "queue.nsq.*", "queue.nats.*", "queue.redis.*", "stat.redis.*", "stat.boltdb.*"] {
            XCTAssertTrue(raw.warnings.contains { $0.hasPrefix(group + " accepted but not acted on") }, "no warning for \(group): \(raw.warnings)")
        }
        XCTAssertTrue(raw.warnings.contains { $0.contains("queue.redis.password") })
        // Keys that matter and are acted on give no warning.
        for key in ["core.ssl", "core.pid", "log.format", "log.access_log", "log.hide_messages", "api.push_uri", "grpc"] {
            XCTAssertFalse(raw.warnings.contains { $0.hasPrefix(key) || $0.contains("(\(key)") }, "\(key) is acted on: \(raw.warnings)")
        }
        // Set to a value that would matter in gorush: warned.
        let inert = try RawConfig(yaml: "core:\n  worker_num: 8\n  mode: debug\n  enabled: false\nstat:\n  engine: redis\n", environment: [:])
        XCTAssertEqual(inert.warnings.count, 4, "\(inert.warnings)")
        // A key neither Pushgate nor gorush knows: one warning naming it, the rest starts.
        let unknown = try RawConfig(
            yaml: Self.gorushConfig.replacingOccurrences(of: "  hide_messages: false", with: "  hide_messages: false\n  brand_new_key: 1"),
            environment: [:])
        XCTAssertEqual(unknown.warnings.filter { $0.hasPrefix("unknown") }, ["unknown config key log.brand_new_key ignored"])
    }

    /// gorush's `grpc.enabled` / `grpc.port` (a string in gorush's config, default "9000") are acted on.
    func testGRPCKeysAreGorushs() throws {
        func grpc(_ raw: RawConfig) throws -> GRPCSettings { try GRPCSettings(raw.section("grpc"), corePort: try GatewaySettings(raw).port) }
        let on = try grpc(try RawConfig(yaml: "grpc:\n  enabled: true\n  port: \"9001\"\n", environment: [:]))
        XCTAssertEqual(on.port, 9001)
        let byDefault = try grpc(try RawConfig(yaml: nil, environment: ["GORUSH_GRPC_ENABLED": "true"]))
        XCTAssertEqual(byDefault.port, 9000)
        XCTAssertThrowsError(try grpc(try RawConfig(yaml: "core:\n  port: 9000\ngrpc:\n  enabled: true\n", environment: [:]))) {
            XCTAssertEqual("\($0)", "config error: grpc.port: 9000 is also core.port; gRPC needs a port of its own")
        }
        XCTAssertThrowsError(try RawConfig(yaml: "grpc:\n  port: 70000\n", environment: [:]))
    }

    func testUnsupportedGorushEnginesAndAutoTLSAreOneLineErrors() throws {
        for engine in ["redis", "nats", "nsq"] {
            let raw = try RawConfig(yaml: "queue:\n  engine: \(engine)\n", environment: [:])
            XCTAssertThrowsError(try GatewaySettings(raw)) { error in
                let text = "\(error)"
                XCTAssertTrue(text.contains("queue.engine") && text.contains("postgres"), text)
                XCTAssertFalse(text.contains("\n"))
            }
        }
        XCTAssertThrowsError(try RawConfig(yaml: "core:\n  auto_tls:\n    enabled: true\n", environment: [:])) { error in
            XCTAssertTrue("\(error)".contains("core.auto_tls.enabled"), "\(error)")
            XCTAssertTrue("\(error)".contains("core.ssl"), "\(error)")
        }
    }

    func testAndroidEnabledFollowsGorushDefault() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let logger = Logger(label: "test")
        // Credentials present, enabled not written: FCM is on (gorush's default is true).
        let withKey = try RawConfig(
            yaml: "android:\n  key_path: \"\(env.directory)/mock-fcm.json\"\n  endpoint: \"\(env.fcm.baseURL)\"\n", environment: [:])
        let on = try ProviderSet.make(raw: withKey, logger: logger)
        XCTAssertEqual(on.slots.map { $0.provider.platform }, [.android])
        for hook in on.hooks { await hook() }
        try await on.httpClient.shutdown()
        // Nothing written: off, no error.
        let none = try ProviderSet.make(raw: try RawConfig(yaml: "", environment: [:]), logger: logger)
        XCTAssertTrue(none.slots.isEmpty)
        try await none.httpClient.shutdown()
        // Enabled on purpose without credentials: a one-line error naming the key.
        XCTAssertThrowsError(try ProviderSet.make(raw: try RawConfig(yaml: "android:\n  enabled: true\n", environment: [:]), logger: logger)) {
            XCTAssertTrue("\($0)".hasPrefix("config error: android.enabled: is true but FCM has no credentials"), "\($0)")
        }
    }

    func testGorushFlagsAreRewrittenForArgumentParser() {
        let subs: Set<String> = ["serve", "send", "mock", "bench", "vapid-keys", "help"]
        XCTAssertEqual(
            GorushFlags.normalize(["-c", "it.yml", "-ios", "-m", "hi", "-t", "abc", "-topic", "com.example.app"], subcommands: subs),
            ["-c", "it.yml", "--ios", "-m", "hi", "-t", "abc", "--topic", "com.example.app"])
        XCTAssertEqual(GorushFlags.normalize(["--config=it.yml", "-ping"], subcommands: subs), ["--config", "it.yml", "--ping"])
        XCTAssertEqual(GorushFlags.normalize(["-c=it.yml", "-android=true", "-production=false"], subcommands: subs), ["-c", "it.yml", "--android"])
        XCTAssertEqual(GorushFlags.normalize(["-key-id", "K", "-hk", "s"], subcommands: subs), ["--key-id", "K", "--hk", "s"])
        // Subcommands keep their own syntax; `--` ends flag rewriting; unknown flags pass through.
        XCTAssertEqual(GorushFlags.normalize(["send", "-ios"], subcommands: subs), ["send", "-ios"])
        XCTAssertEqual(GorushFlags.normalize(["-m", "--", "-ios"], subcommands: subs), ["-m", "--", "-ios"])
        XCTAssertEqual(GorushFlags.normalize(["-xyz"], subcommands: subs), ["-xyz"])
    }

    func testIngestTLSServesHTTP1AndHTTP2AndIPv6AndIPv4() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try env.pki.leafCertificatePEM.write(toFile: env.directory + "/cert.pem", atomically: true, encoding: .utf8)
        try env.pki.leafPrivateKeyPEM.write(toFile: env.directory + "/key.pem", atomically: true, encoding: .utf8)
        let raw = try RawConfig(
            yaml: env.yaml(),
            environment: [
                "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_SSL": "true", "PUSHGATE_CORE_ADDRESS": "",
                "PUSHGATE_CORE_CERT_PATH": env.directory + "/cert.pem", "PUSHGATE_CORE_KEY_PATH": env.directory + "/key.pem",
            ])
        XCTAssertEqual(raw.string("core.address"), "")
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        XCTAssertNotNil(gateway.settings.tls)
        // Run as `serve` runs it (the testing framework would bind localhost instead of core.address).
        try await withRunningGateway(gateway) { port in
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(env.pki.caCertificatePEM.utf8)))
            for (version, host) in [(HTTPClient.Configuration.HTTPVersion.http1Only, "127.0.0.1"), (.automatic, "localhost"), (.automatic, "[::1]")] {
                var config = HTTPClient.Configuration(tlsConfiguration: tls)
                config.httpVersion = version
                var request = HTTPClientRequest(url: "https://\(host):\(port)/api/push")
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                let token = String(repeating: "ab", count: 32)
                request.body = .bytes(ByteBuffer(string: #"{"notifications":[{"tokens":["\#(token)"],"platform":1,"message":"hi"}]}"#))
                let sent = request
                let (response, body) = try await withHTTPClient(config) { http in
                    let response: HTTPClientResponse
                    do {
                        response = try await http.execute(sent, timeout: .seconds(10))
                    } catch {
                        XCTFail("\(host) \(version): \(error)")
                        throw error
                    }
                    return (response, String(buffer: try await response.body.collect(upTo: 1 << 20)))
                }
                XCTAssertEqual(response.status, .ok, body)
                XCTAssertEqual(response.version, version == .http1Only ? .http1_1 : .http2, "ALPN picks HTTP/2 when the client offers it (\(host))")
            }
            let delivered = await eventually { env.apns.requestCount == 3 }
            XCTAssertTrue(delivered, "3 pushes over TLS ingest, got \(env.apns.requestCount)")
            // Plain HTTP to the TLS port is refused, not answered in clear text.
            let answered = try await withHTTPClient(HTTPClient.Configuration()) { plain in
                (try? await plain.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/healthz"), timeout: .seconds(5))) != nil
            }
            XCTAssertFalse(answered, "plain HTTP answered on the TLS port")
        }
    }

    func testIngestTLSConfigErrorsAreOneLine() throws {
        let dir = NSTemporaryDirectory() + "pushgate-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let a = try TestPKI.generate()
        let b = try TestPKI.generate()
        try a.leafCertificatePEM.write(toFile: dir + "/cert.pem", atomically: true, encoding: .utf8)
        try b.leafPrivateKeyPEM.write(toFile: dir + "/other-key.pem", atomically: true, encoding: .utf8)
        func error(_ core: String) -> String {
            do {
                _ = try GatewaySettings(try RawConfig(yaml: "core:\n  ssl: true\n" + core, environment: [:]))
                return "no error"
            } catch { return "\(error)" }
        }
        XCTAssertTrue(error("  cert_path: \(dir)/missing.pem\n").hasPrefix("config error: core.cert_path"))
        XCTAssertTrue(error("  cert_path: \(dir)/cert.pem\n  key_path: \(dir)/other-key.pem\n").hasPrefix("config error: core.key_path"))
        XCTAssertTrue(error("  cert_base64: \"!!\"\n").hasPrefix("config error: core.cert_base64"))
        // base64 of the PEM files, gorush's other form, works.
        let certB64 = Data(a.leafCertificatePEM.utf8).base64EncodedString()
        let keyB64 = Data(a.leafPrivateKeyPEM.utf8).base64EncodedString()
        XCTAssertEqual(error("  cert_base64: \(certB64)\n  key_base64: \(keyB64)\n"), "no error")
    }

    func testCustomRoutesPIDFileAndHiddenMessages() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let pidPath = env.directory + "/run/gorush.pid"
        let extra = """
            api:
              push_uri: "/gorush/push"
              health_uri: "/up"
            log:
              hide_messages: true
            """
        let environment = ["PUSHGATE_CORE_SYNC": "true", "PUSHGATE_CORE_PID_ENABLED": "true", "PUSHGATE_CORE_PID_PATH": pidPath]
        try await env.withGateway(extra, environment: environment) { client, gateway in
            let pid = try XCTUnwrap(PIDFile.create(raw: gateway.raw, pid: 4242))
            XCTAssertEqual(try String(contentsOfFile: pidPath, encoding: .utf8), "4242")
            pid.remove()
            XCTAssertFalse(FileManager.default.fileExists(atPath: pidPath))
            // A Huawei notification fails at once (huawei not enabled here): its log entry carries the message.
            let answer = try await client.execute(
                uri: "/gorush/push", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(string: #"{"notifications":[{"tokens":["hw-1"],"platform":3,"message":"secret words"}]}"#)
            ) { r in (Int(r.status.code), String(buffer: r.body)) }
            XCTAssertEqual(answer.0, 200, answer.1)
            XCTAssertTrue(answer.1.contains("(message redacted)"), answer.1)
            XCTAssertFalse(answer.1.contains("secret words"), answer.1)
            let old = try await client.execute(uri: "/api/push", method: .post, body: ByteBuffer(string: "{}")) { Int($0.status.code) }
            XCTAssertEqual(old, 404, "the default route is replaced by api.push_uri")
            let up = try await client.execute(uri: "/up", method: .get) { Int($0.status.code) }
            XCTAssertEqual(up, 200)
        }
        // override: false refuses an existing file.
        try "1".write(toFile: pidPath, atomically: true, encoding: .utf8)
        let refuse = try RawConfig(yaml: "core:\n  pid:\n    enabled: true\n    override: false\n    path: \"\(pidPath)\"\n", environment: [:])
        XCTAssertThrowsError(try PIDFile.create(raw: refuse)) { XCTAssertTrue("\($0)".contains("already exists"), "\($0)") }
    }

    func testLogOutputJSONLinesLevelsAndFiles() throws {
        let dir = NSTemporaryDirectory() + "pushgate-log-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let raw = try RawConfig(
            yaml: """
                log:
                  format: json
                  access_log: "\(dir)/log/access.log"
                  access_level: info
                  error_log: "\(dir)/log/error.log"
                  error_level: warn
                """, environment: [:])
        let settings = try LogOutputSettings(raw)
        let handler = GatewayLogHandler(label: "pushgate", settings: settings)
        var logger = Logger(label: "pushgate", factory: { _ in handler })
        logger.logLevel = handler.logLevel
        logger.debug("not written")
        logger.info("queue ready", metadata: ["pending": "0"])
        logger.warning("feedback hook answered 500")
        let access = try String(contentsOfFile: dir + "/log/access.log", encoding: .utf8)
        let errors = try String(contentsOfFile: dir + "/log/error.log", encoding: .utf8)
        XCTAssertFalse(access.contains("not written"))
        let line = try XCTUnwrap(access.split(separator: "\n").first)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(object["msg"] as? String, "queue ready")
        XCTAssertEqual(object["level"] as? String, "info")
        XCTAssertEqual(object["pending"] as? String, "0")
        XCTAssertNotNil(object["time"] as? String)
        XCTAssertTrue(errors.contains("\"level\":\"warning\""), errors)
        XCTAssertFalse(access.contains("feedback hook"), "warnings go to the error log at error_level warn")
        XCTAssertThrowsError(try LogOutputSettings(try RawConfig(yaml: "log:\n  format: xml\n", environment: [:]))) {
            XCTAssertTrue("\($0)".hasPrefix("config error: log.format"))
        }
        XCTAssertThrowsError(try LogOutputSettings(try RawConfig(yaml: "log:\n  access_level: loud\n", environment: [:]))) {
            XCTAssertTrue("\($0)".hasPrefix("config error: log.access_level"))
        }
    }
}

/// Runs `body` with a client that is shut down whatever happens.
func withHTTPClient<T: Sendable>(_ config: HTTPClient.Configuration, _ body: @Sendable (HTTPClient) async throws -> T) async throws -> T {
    let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
    do {
        let result = try await body(http)
        try await http.shutdown()
        return result
    } catch {
        try? await http.shutdown()
        throw error
    }
}

/// Runs the gateway's application as `pushgate serve` does (its own address and port) and gives
/// `body` the port it listens on; shuts it down afterwards.
func withRunningGateway(_ gateway: Gateway, _ body: @Sendable (Int) async throws -> Void) async throws {
    let port = NIOLockedValueBox<Int?>(nil)
    let app = try gateway.makeApplication(onServerRunning: { channel in port.withLockedValue { $0 = channel.localAddress?.port } })
    var logger = Logger(label: "test")
    logger.logLevel = .critical
    let services = ServiceGroup(configuration: .init(services: [app], logger: logger))
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await services.run() }
        let started = await eventually(timeout: 10) { port.withLockedValue { $0 } != nil }
        do {
            guard started, let p = port.withLockedValue({ $0 }) else { throw CancellationError() }
            try await body(p)
        } catch {
            await services.triggerGracefulShutdown()
            throw error
        }
        await services.triggerGracefulShutdown()
        try await group.waitForAll()
    }
}

final class ConfigDiscoveryTests: XCTestCase {
    func testGorushPlacesFirstThenPushgatesOwn() throws {
        let home = NSTemporaryDirectory() + "pushgate-home-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: home) }
        let c = ConfigDiscovery.candidates(environment: ["HOME": home])
        XCTAssertEqual(
            c,
            [
                "/etc/gorush/config.yml", "/etc/gorush/config.yaml", "\(home)/.gorush/config.yml", "\(home)/.gorush/config.yaml", "config.yml",
                "config.yaml", "config/pushgate.yml",
            ])
        try FileManager.default.createDirectory(atPath: home + "/.gorush", withIntermediateDirectories: true)
        try "core:\n  port: 9000\n".write(toFile: home + "/.gorush/config.yml", atomically: true, encoding: .utf8)
        if !FileManager.default.isReadableFile(atPath: "/etc/gorush/config.yml") {
            XCTAssertEqual(ConfigDiscovery.find(environment: ["HOME": home]), home + "/.gorush/config.yml")
        }
    }
}
