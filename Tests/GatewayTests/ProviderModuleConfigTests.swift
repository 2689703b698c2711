import Foundation
import PushgateCore
import WebPush
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// The provider modules' sections as the config loader sees them.
final class ProviderModuleConfigTests: XCTestCase {
    func testWebPushTimeoutAndConnectionsPerOriginAreKnownAndWired() throws {
        let raw = try RawConfig(yaml: "webpush:\n  timeout: 5\n  connections_per_origin: 4\n", environment: ["PUSHGATE_WEBPUSH_DEFAULT_TTL": "60"])
        XCTAssertEqual(raw.warnings, [], "documented keys are not unknown")
        let config = WebPushModule.configuration(raw.section("webpush"))
        XCTAssertEqual(config.requestTimeoutSeconds, 5)
        XCTAssertEqual(config.connectionsPerOrigin, 4)
        XCTAssertEqual(config.defaultTTL, 60)
        let defaults = WebPushModule.configuration(try RawConfig(yaml: nil, environment: [:]).section("webpush"))
        XCTAssertEqual(defaults.requestTimeoutSeconds, 30)
        XCTAssertEqual(defaults.connectionsPerOrigin, 2)
        XCTAssertThrowsError(try RawConfig(yaml: "webpush:\n  connections_per_origin: 0\n", environment: [:])) { e in
            XCTAssertEqual("\(e)", "config error: webpush.connections_per_origin: 0 is out of range (1...1000)")
        }
        XCTAssertThrowsError(try RawConfig(yaml: nil, environment: ["GORUSH_WEBPUSH_TIMEOUT": "0"])) { e in
            XCTAssertEqual("\(e)", "config error: webpush.timeout: 0 is out of range (1...3600)")
        }
    }

    func testProviderKeysKeepTheirDefaultsRangesAndSecrecy() throws {
        let d = RawConfig.defaults
        XCTAssertEqual(d["ios.max_tokens"], .int(10000))
        XCTAssertEqual(d["ios.connections"], .int(2))
        XCTAssertEqual(d["android.endpoint"], .string("https://fcm.googleapis.com"))
        XCTAssertEqual(d["huawei.max_retry"], .int(0))
        XCTAssertEqual(d["webpush.default_ttl"], .int(86400))
        XCTAssertEqual(d["webpush.max_concurrent_pushes"], .int(2048))
        XCTAssertEqual(d["unifiedpush.max_tokens"], .int(1000))
        let r = RawConfig.intRanges
        XCTAssertEqual(r["ios.connections"], 1...1000)
        XCTAssertEqual(r["webpush.default_ttl"], 0...Int(Int32.max))
        for p in ["ios", "android", "huawei", "webpush", "unifiedpush"] {
            XCTAssertEqual(r["\(p).max_retry"], 0...100, p)
            XCTAssertEqual(r["\(p).max_tokens"], 1...1_000_000, p)
        }
        for p in ["ios", "android", "webpush"] { XCTAssertEqual(r["\(p).max_concurrent_pushes"], 1...100_000, p) }
        XCTAssertThrowsError(try RawConfig(yaml: "ios:\n  connections: 0\n", environment: [:])) { e in
            XCTAssertEqual("\(e)", "config error: ios.connections: 0 is out of range (1...1000)")
        }
        XCTAssertTrue(
            RawConfig.secretKeys.isSuperset(of: [
                "ios.key_base64", "android.credential", "huawei.appsecret", "webpush.vapid_private_key",
                "queue.postgres.url", "core.key_base64", "core.feedback_header",
            ]))
        XCTAssertTrue(
            RawConfig.redactedIdentifiers.isSuperset(of: ["ios.key_path", "ios.key_id", "android.key_path", "core.key_path", "core.cert_path"]))
        // gorush's ios.password is accepted without a warning.
        XCTAssertEqual(try RawConfig(yaml: "ios:\n  password: x\n", environment: [:]).warnings, [])
        let yaml = try RawConfig(yaml: "ios:\n  key_id: ABC123\n  key_path: /etc/k.p8\nwebpush:\n  vapid_private_key: s3cret\n", environment: [:])
            .redactedYAML()
        XCTAssertFalse(yaml.contains("ABC123") || yaml.contains("/etc/k.p8") || yaml.contains("s3cret"), yaml)
    }

    /// Every key gorush 1.22's `SanitizedCopy` hides is hidden in `/api/config` when Pushgate keeps it.
    func testAPIConfigRedactsWhatGorushRedacts() throws {
        XCTAssertTrue(
            RawConfig.secretKeys.isSuperset(of: [
                "core.cert_base64", "core.key_base64", "core.http_proxy", "core.cert_path", "core.key_path", "core.feedback_header",
                "android.key_path", "android.credential", "huawei.appsecret", "ios.key_path", "ios.key_base64", "ios.password",
                "ios.key_id", "ios.team_id", "queue.redis.username", "queue.redis.password", "stat.redis.username",
                "stat.redis.password",
            ]))
        // Every one of them that is a key of the effective configuration shows [REDACTED], never its value.
        var raw = try RawConfig(yaml: nil, environment: [:])
        var planted: [String: String] = [:]
        for key in RawConfig.gorushRedactedKeys {
            guard let def = RawConfig.defaults[key] else { continue }
            let value = "planted-\(key.replacingOccurrences(of: ".", with: "-"))"
            planted[key] = value
            if case .list = def { raw.set(key, .list(["X-Token: " + value])) } else { raw.set(key, .string(value)) }
        }
        XCTAssertTrue(planted.keys.contains("ios.team_id"), "ios.team_id is a Pushgate key")
        let yaml = raw.redactedYAML()
        for (key, value) in planted { XCTAssertFalse(yaml.contains(value), "\(key) leaks: \(yaml)") }
        XCTAssertTrue(yaml.contains("team_id: '[REDACTED]'"), yaml)
        XCTAssertTrue(yaml.contains("feedback_header:\n  - '[REDACTED]'"), yaml)
    }

    func testIngestChecksComeFromTheModuleOfThePlatform() throws {
        func first(_ json: String) throws -> PushNotification {
            try RequestParser.parse(Array(json.utf8), limits: ProviderRegistry.requestLimits).notifications[0]
        }
        let longID = String(repeating: "c", count: 65)
        let ios = try first(#"{"notifications":[{"platform":1,"tokens":["a"],"collapse_id":"\#(longID)"}]}"#)
        XCTAssertEqual(
            IngestValidation.validate(ios),
            IngestProblem(message: "Invalid collapse_id.", detail: "collapse_id: apns-collapse-id is at most 64 bytes"))
        let android = try first(#"{"notifications":[{"platform":2,"tokens":["a"],"collapse_id":"\#(longID)"}]}"#)
        XCTAssertNil(IngestValidation.validate(android))
        let web = try first(#"{"notifications":[{"platform":5,"tokens":["https://push.example/x"],"urgency":"now"}]}"#)
        XCTAssertEqual(IngestValidation.validate(web)?.message, "Invalid Web Push notification.")
        XCTAssertTrue(IngestValidation.validate(web)?.detail.hasPrefix("urgency: ") ?? false)
        // Any priority string is accepted, as gorush does (the providers ignore what they do not know).
        let priority = try first(#"{"notifications":[{"platform":2,"tokens":["a"],"priority":"urgent"}]}"#)
        XCTAssertNil(IngestValidation.validate(priority))
    }

    func testEveryRegisteredPlatformHasItsSection() {
        let sections = Set(ProviderRegistry.sections.map(\.name))
        for p in ProviderRegistry.platforms { XCTAssertTrue(sections.contains(p.name), p.name) }
        XCTAssertEqual(Set(ProviderRegistry.platforms), Set(Platform.registered))
        XCTAssertEqual(ProviderRegistry.tools.map(\.name), ["vapid-keys"])
    }

    /// Outside the provider folders and MockProviders, only the registry imports a provider module.
    func testOnlyTheRegistryImportsProviderModules() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources")
        let providers = ["APNs", "FCM", "Huawei", "Harmony", "WebPush", "WNS", "Honor", "Xiaomi", "Oppo", "Vivo"]
        var importers: [String] = []
        let files = FileManager.default.enumerator(atPath: sources.path)?.compactMap { $0 as? String } ?? []
        XCTAssertFalse(files.isEmpty)
        for file in files where file.hasSuffix(".swift") {
            let folder = String(file.split(separator: "/").first ?? "")
            if providers.contains(folder) || folder == "MockProviders" { continue }
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n")
            where providers.contains(where: { line.trimmingCharacters(in: .whitespaces).hasSuffix("import \($0)") }) {
                importers.append("\(file): \(line)")
            }
        }
        XCTAssertEqual(Set(importers.map { String($0.split(separator: ":")[0]) }), ["Providers/ProviderRegistry.swift"], "\(importers)")
    }
}

/// `<platform>.max_tokens` is counted alike on both ways in: the JSON decoder and the checks of a
/// request built in code (`IngestValidation`, the embedding API), gorush's `to` included where the
/// platform takes it as a token.
final class TargetCountTests: XCTestCase {
    func testLegacyToCountsAgainstMaxTokensOnBothWaysIn() throws {
        var limits = RequestLimits()
        limits.platforms = ProviderRegistry.platformRules
        limits.maxTokens[.android] = 2
        var n = PushNotification(platform: .android, tokens: ["token-a", "token-b"])
        n.message = "hi"
        n.to = "token-c"
        XCTAssertEqual(n.targetCount(limits.platforms[.android]), 3)
        let inCode = IngestValidation.validate(request: PushRequest(notifications: [n]), limits: limits)
        XCTAssertEqual(inCode?.detail, "notifications[0].tokens: 3 tokens, over the limit of 2 (android.max_tokens)")

        let json = #"{"notifications":[{"platform":2,"tokens":["token-a","token-b"],"to":"token-c","message":"hi"}]}"#
        XCTAssertThrowsError(try RequestParser.parse(Array(json.utf8), limits: limits)) { error in
            XCTAssertTrue("\(error)".contains("android.max_tokens"), "\(error)")
        }

        n.to = nil
        XCTAssertNil(IngestValidation.validate(request: PushRequest(notifications: [n]), limits: limits))
    }
}
