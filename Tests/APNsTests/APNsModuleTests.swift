import APNs
import Foundation
import MockProviders
import ProviderKit
import XCTest

/// The `ios:` section read by `APNsModule` (config typed per section).
final class APNsModuleTests: XCTestCase {
    func section(_ values: [String: ConfigValue]) -> SectionValues { SectionValues(name: "ios", values: values) }

    func testConfigurationFromTheSection() throws {
        let key = TestAPNsKey.generate()
        let b64 = Data(key.p8PEM.utf8).base64EncodedString()
        let c = try APNsModule.configuration(
            section([
                "key_base64": .string(b64), "key_id": .string(key.keyID), "team_id": .string(key.teamID),
                "connections": .int(3), "topic": .string("com.example.app"), "production": .bool(true),
            ]))
        XCTAssertEqual(c.keyID, key.keyID)
        XCTAssertEqual(c.connectionsPerEnvironment, 3)
        XCTAssertEqual(c.maxRetry, 3, "the section's default")
        XCTAssertEqual(c.topic, "com.example.app")
        XCTAssertTrue(c.production)
        XCTAssertThrowsError(try APNsModule.configuration(section(["key_base64": .string("%%%"), "key_id": .string("K"), "team_id": .string("T")]))) {
            e in
            XCTAssertEqual("\(e)", "ios.key_base64: not base64 of a .p8, .p12 or .pem file")
        }
        XCTAssertThrowsError(try APNsModule.configuration(section([:]))) { e in
            XCTAssertTrue("\(e)".hasPrefix("ios.key_path: missing"), "\(e)")
        }
    }

    func testSectionKeys() {
        let keys = APNsModule().sections[0].keys
        XCTAssertEqual(APNsModule().sections.map(\.name), ["ios"])
        XCTAssertEqual(keys.first { $0.name == "connections" }?.range, 1...1000)
        XCTAssertEqual(keys.first { $0.name == "key_base64" }?.secrecy, .secret)
        XCTAssertEqual(keys.first { $0.name == "key_id" }?.secrecy, .identifier)
    }
}
