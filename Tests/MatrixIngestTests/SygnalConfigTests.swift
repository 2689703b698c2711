import GatewayCore
import PushgateCore
import XCTest

@testable import MatrixIngest

/// Sygnal's sygnal.yaml read as Pushgate's configuration.
final class SygnalConfigTests: XCTestCase {
    /// The shape of sygnal.yaml.sample with its example apps uncommented.
    static let sample = """
        log:
          setup:
            version: 1
            root:
              handlers: ["stderr"]
              level: "INFO"
          access:
            x_forwarded_for: false
        http:
          bind_addresses: ['127.0.0.1']
          port: 5000
        metrics:
          prometheus:
            enabled: false
            address: '127.0.0.1'
            port: 8000
          opentracing:
            enabled: false
          sentry:
            enabled: false
        apps:
          com.example.myapp.ios:
            type: apns
            keyfile: my_key.p8
            key_id: MY_KEY_ID
            team_id: MY_TEAM_ID
            topic: MY_TOPIC
            platform: sandbox
            inflight_request_limit: 512
          im.vector.app:
            type: gcm
            api_version: v1
            project_id: project-id
            service_account_file: /path/to/service_account.json
            fcm_options:
              android:
                priority: high
        """

    func raw(_ yaml: String) throws -> RawConfig {
        try RawConfig(yaml: yaml, environment: [:], dialects: [SygnalConfig.self])
    }

    func testSampleBecomesMatrixAppsAndPushgateApps() throws {
        let raw = try raw(Self.sample)
        let m = try MatrixSettings(raw: raw, environment: [:])
        XCTAssertTrue(m.enabled)
        XCTAssertEqual(m.address, "127.0.0.1")
        XCTAssertEqual(m.port, 5000)
        let ios = try XCTUnwrap(m.app(for: "com.example.myapp.ios"))
        XCTAssertEqual(ios.platform, .ios)
        XCTAssertEqual(ios.app, "com.example.myapp.ios")
        let android = try XCTUnwrap(m.app(for: "im.vector.app"))
        XCTAssertEqual(android.platform, .android)
        XCTAssertEqual(android.fcmOptions?["android"]?["priority"], .string("high"))
        let apps = Dictionary(uniqueKeysWithValues: raw.apps.map { ($0.id, $0) })
        XCTAssertEqual(apps["com.example.myapp.ios"]?.values["ios.key_path"], .string("my_key.p8"))
        XCTAssertEqual(apps["com.example.myapp.ios"]?.values["ios.team_id"], .string("MY_TEAM_ID"))
        XCTAssertEqual(apps["com.example.myapp.ios"]?.values["ios.production"], .bool(false))
        XCTAssertEqual(apps["im.vector.app"]?.values["android.key_path"], .string("/path/to/service_account.json"))
        XCTAssertTrue(raw.warnings.contains { $0.contains("inflight_request_limit") }, "\(raw.warnings)")
        XCTAssertFalse(raw.warnings.contains { $0.contains("unknown config key") }, "\(raw.warnings)")
    }

    func testRefusalsNameTheKey() {
        func problem(_ yaml: String) -> String? {
            do {
                _ = try raw(yaml)
                return nil
            } catch { return "\(error)" }
        }
        XCTAssertTrue(problem("apps:\n  a:\n    type: gcm\n    api_key: k\n")?.contains("apps.a.api_version") == true)
        XCTAssertTrue(problem("apps:\n  a:\n    type: apns\n")?.contains("apps.a.keyfile") == true)
        XCTAssertTrue(problem("apps:\n  a:\n    type: apns\n    keyfile: k.p8\n")?.contains("apps.a.key_id") == true)
        XCTAssertTrue(problem("apps:\n  a:\n    type: sygnal.custom.Pushkin\n")?.contains("apps.a.type") == true)
        XCTAssertTrue(problem("apps:\n  a:\n    type: apns\n    certfile: c.pem\n    platform: beta\n")?.contains("apps.a.platform") == true)
        XCTAssertTrue(problem("http:\n  port: 5000\nmetrics:\n  opentracing:\n    enabled: true\n")?.contains("metrics.opentracing.enabled") == true)
        XCTAssertTrue(
            problem("apps:\n  w:\n    type: webpush\n    vapid_private_key: /nonexistent.pem\n    vapid_contact_email: a@b\n")?
                .contains("apps.w.vapid_private_key") == true)
    }

    func testPushkinClassPathsAreTheirTypes() throws {
        let raw = try raw("apps:\n  a:\n    type: sygnal.gcmpushkin.GcmPushkin\n    api_version: v1\n    service_account_file: sa.json\n")
        XCTAssertEqual(try MatrixSettings(raw: raw, environment: [:]).app(for: "a")?.platform, .android)
    }

    func testPushgateConfigIsNotReadAsSygnals() throws {
        let raw = try raw("core:\n  port: 8088\napps:\n  - id: chat\n")
        XCTAssertEqual(raw.apps.map(\.id), ["chat"])
        XCTAssertNil(raw.adapterTrees["matrix"])
    }

    func testAppIDsAreMadeValidAndUnique() {
        var used: Set<String> = ["default"]
        XCTAssertEqual(SygnalConfig.appID(for: "com.example.*", used: &used), "com.example._")
        XCTAssertEqual(SygnalConfig.appID(for: "com.example.?", used: &used), "com.example._-2")
        XCTAssertEqual(SygnalConfig.appID(for: "default", used: &used), "default-2")
    }
}
