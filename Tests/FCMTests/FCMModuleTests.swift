import AsyncHTTPClient
import FCM
import HTTP2Pool
import NIOPosix
import ProviderKit
import XCTest

/// The `android:` section read by `FCMModule` (config typed per section).
final class FCMModuleTests: XCTestCase {
    func testSectionKeysAndOneLineErrors() throws {
        let section = FCMModule().sections[0]
        XCTAssertEqual(section.name, "android")
        XCTAssertEqual(section.keys.first { $0.name == "credential" }?.secrecy, .secret)
        XCTAssertEqual(section.keys.first { $0.name == "key_path" }?.secrecy, .identifier)
        XCTAssertEqual(section.keys.first { $0.name == "endpoint" }?.defaultValue, .string(FCMConfiguration.defaultEndpoint))

        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        defer { try? client.syncShutdown() }
        let context = ProviderBuildContext(
            poolConfiguration: HTTP2PoolConfiguration(), httpClient: client,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        func build(_ values: [String: ConfigValue]) throws -> ProviderBuild {
            try FCMModule().build(
                ProviderConfig(
                    sections: ["android": SectionValues(name: "android", values: values, sources: values.mapValues { _ in "file" })], environment: [:]
                ),
                context: context)
        }
        XCTAssertTrue(try build([:]).providers.isEmpty, "enabled by default (gorush) but no credentials: nothing built")
        XCTAssertTrue(try build(["enabled": .bool(false), "key_path": .string("/nonexistent.json")]).providers.isEmpty, "disabled: nothing built")
        XCTAssertThrowsError(try build(["enabled": .bool(true)])) { e in
            XCTAssertEqual(
                "\(e)",
                "config error: android.enabled: is true but FCM has no credentials: set android.key_path or android.credential (or GOOGLE_APPLICATION_CREDENTIALS)"
            )
        }
        XCTAssertThrowsError(try build(["key_path": .string("/nonexistent.json")]), "credentials given: enabled by default, and checked") { e in
            XCTAssertTrue("\(e)".contains("file does not exist"), "\(e)")
        }
        XCTAssertThrowsError(try build(["enabled": .bool(true), "credential": .string("{not json")])) { e in
            XCTAssertTrue("\(e)".hasPrefix("config error: android: FCM service account (android.credential): "), "\(e)")
        }
        XCTAssertEqual(FCMModule().deliveredIDLabel(for: .android), "name")
    }
}
