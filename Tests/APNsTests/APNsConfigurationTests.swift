import APNs
import Foundation
import MockProviders
import XCTest

final class APNsConfigurationTests: XCTestCase {
    func temporaryFile(_ contents: String) throws -> String {
        let path = NSTemporaryDirectory() + "pushgate-apns-\(UUID().uuidString).p8"
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
        return path
    }

    func message(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch { return "\(error)" }
    }

    func testLoadsP8AndDefaults() throws {
        let key = TestAPNsKey.generate()
        let path = try temporaryFile(key.p8PEM)
        let c = try APNsConfiguration(keyPath: path, keyID: "KEY", teamID: "TEAM")
        XCTAssertEqual(c.key?.publicKey.rawRepresentation, key.publicKey.rawRepresentation)
        XCTAssertFalse(c.production)
        XCTAssertEqual(c.maxRetry, 3)
        XCTAssertEqual(c.baseURL(production: true), "https://api.push.apple.com")
        XCTAssertEqual(c.baseURL(production: false), "https://api.sandbox.push.apple.com")
        var overridden = try APNsConfiguration(key: key.privateKey, keyID: "K", teamID: "T", endpoint: "https://localhost:8443")
        XCTAssertEqual(overridden.baseURL(production: true), "https://localhost:8443")
        XCTAssertEqual(overridden.baseURL(production: false), "https://localhost:8443")
        overridden.sandboxEndpoint = "https://127.0.0.1:9443"
        XCTAssertEqual(overridden.baseURL(production: false), "https://127.0.0.1:9443")
    }

    func testErrorsAreOneLineNamingTheKey() throws {
        let missing = message { _ = try APNsConfiguration(keyPath: "/nonexistent/AuthKey.p8", keyID: "K", teamID: "T") }
        XCTAssertEqual(missing?.hasPrefix("ios.key_path: cannot read /nonexistent/AuthKey.p8"), true, missing ?? "")
        let garbage = try temporaryFile("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        let notKey = message { _ = try APNsConfiguration(keyPath: garbage, keyID: "K", teamID: "T") }
        XCTAssertEqual(notKey, "ios.key_path: \(garbage) is not a P-256 PKCS#8 private key (an APNs .p8 auth key)")
        let key = TestAPNsKey.generate()
        XCTAssertEqual(message { _ = try APNsConfiguration(key: key.privateKey, keyID: "", teamID: "T") }?.hasPrefix("ios.key_id: missing"), true)
        XCTAssertEqual(message { _ = try APNsConfiguration(key: key.privateKey, keyID: "K", teamID: " ") }?.hasPrefix("ios.team_id: missing"), true)
        XCTAssertEqual(
            message { _ = try APNsConfiguration(key: key.privateKey, keyID: "K", teamID: "T", endpoint: "localhost:8443") }?.hasPrefix(
                "ios.endpoint:"), true)
        for m in [missing, notKey] { XCTAssertFalse(m?.contains("\n") ?? true) }
    }
}
