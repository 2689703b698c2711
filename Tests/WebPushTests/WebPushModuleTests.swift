import Foundation
import ProviderKit
import PushgateCore
import XCTest

@testable import WebPush

/// The `webpush:` / `unifiedpush:` sections read by `WebPushModule`.
final class WebPushModuleTests: XCTestCase {
    func testSectionsUseTheDocumentedKeys() {
        let sections = WebPushModule().sections
        XCTAssertEqual(sections.map(\.name), ["webpush", "unifiedpush"])
        let names = Set(sections[0].keys.map(\.name))
        for key in [
            WebPushConfiguration.Key.vapidPrivateKey, WebPushConfiguration.Key.vapidSubject, WebPushConfiguration.Key.allowHTTP,
            WebPushConfiguration.Key.allowPrivateEndpoints, WebPushConfiguration.Key.hostAllowlist, WebPushConfiguration.Key.defaultTTL,
            WebPushConfiguration.Key.maxRetry, WebPushConfiguration.Key.timeout, WebPushConfiguration.Key.connectionsPerOrigin,
        ] {
            XCTAssertTrue(names.contains(key), key)
        }
        XCTAssertEqual(sections[0].keys.first { $0.name == "vapid_private_key" }?.secrecy, .secret)
    }

    func testConfigurationFromTheSection() {
        let c = WebPushModule.configuration(
            SectionValues(
                name: "webpush",
                values: [
                    "vapid_subject": .string("mailto:a@example.com"), "host_allowlist": .list(["push.example.com"]),
                    "timeout": .int(7), "connections_per_origin": .int(3), "allow_http": .bool(true),
                ]))
        XCTAssertEqual(c.vapidSubject, "mailto:a@example.com")
        XCTAssertEqual(c.hostAllowlist, ["push.example.com"])
        XCTAssertEqual(c.requestTimeoutSeconds, 7)
        XCTAssertEqual(c.connectionsPerOrigin, 3)
        XCTAssertTrue(c.allowHTTP)
        XCTAssertEqual(c.defaultTTL, WebPushConfiguration.standardDefaultTTL)
        XCTAssertNil(WebPushModule.configuration(SectionValues(name: "webpush", values: [:])).hostAllowlist)
    }

    func testSendOverridesGiveLegacyUnifiedPushAThrowawayKeyOnly() {
        let empty = ProviderConfig(sections: [:], environment: [:])
        let up = WebPushModule().sendOverrides(for: .unifiedpush, config: empty)
        XCTAssertEqual(up.map(\.key), ["webpush.vapid_private_key", "webpush.vapid_subject"])
        XCTAssertTrue(WebPushModule().sendOverrides(for: .webpush, config: empty).isEmpty)
        let keyed = ProviderConfig(
            sections: ["webpush": SectionValues(name: "webpush", values: ["vapid_private_key": .string("k")])], environment: [:])
        XCTAssertTrue(WebPushModule().sendOverrides(for: .unifiedpush, config: keyed).isEmpty)
    }
}
