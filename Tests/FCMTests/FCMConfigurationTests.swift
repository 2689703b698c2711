import Foundation
import MockProviders
import XCTest

@testable import FCM

final class FCMConfigurationTests: XCTestCase {
    func validJSON() -> [String: Any] {
        jsonObject(Array(Fixtures.account.json(tokenURI: "https://oauth2.example.test/token").utf8))
    }

    func text(_ object: [String: Any]) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    func assertConfigError(_ json: String, contains needle: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            _ = try ServiceAccount(json: json)
            XCTFail("expected an error containing \(needle)", file: file, line: line)
        } catch {
            XCTAssertTrue(error.description.contains(needle), "\(error.description) does not contain \(needle)", file: file, line: line)
            XCTAssertFalse(error.description.contains("\n"), "error must be one line: \(error.description)", file: file, line: line)
        }
    }

    func testParsesGoogleServiceAccountJSON() throws {
        let account = try ServiceAccount(json: Fixtures.account.json(tokenURI: "https://oauth2.example.test/token"))
        XCTAssertEqual(account.projectID, "pushgate-test")
        XCTAssertEqual(account.clientEmail, Fixtures.account.clientEmail)
        XCTAssertEqual(account.privateKeyID, Fixtures.account.privateKeyID)
        XCTAssertEqual(account.tokenURI, "https://oauth2.example.test/token")
        XCTAssertEqual(account.privateKey.publicKey.derRepresentation, Fixtures.account.publicKey.derRepresentation)
    }

    func testMissingFieldsNameTheField() {
        for field in ["project_id", "private_key_id", "private_key", "client_email", "token_uri"] {
            var o = validJSON()
            o[field] = nil
            assertConfigError(text(o), contains: "missing \"\(field)\"")
        }
        var o = validJSON()
        o["client_email"] = 42
        assertConfigError(text(o), contains: "\"client_email\" must be a string")
    }

    func testKeyThatIsNotRSAPKCS8IsRefused() {
        var o = validJSON()
        o["private_key"] = Fixtures.account.privateKey.pemRepresentation  // PKCS#1
        assertConfigError(text(o), contains: "PKCS#1")
        o["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
        assertConfigError(text(o), contains: "\"private_key\" is not an RSA PKCS#8 private key")
        o["private_key"] = "hello"
        assertConfigError(text(o), contains: "not an RSA PKCS#8 PEM")
    }

    func testNotJSONAndWrongType() {
        assertConfigError("{not json", contains: "not valid JSON")
        assertConfigError("", contains: "empty")
        assertConfigError("[1,2]", contains: "not a JSON object")
        var o = validJSON()
        o["type"] = "authorized_user"
        assertConfigError(text(o), contains: "expected \"service_account\"")
        o = validJSON()
        o["token_uri"] = "ftp://x"
        assertConfigError(text(o), contains: "token_uri")
    }

    func testResolutionOrderAndSources() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fcm-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let good = dir.appendingPathComponent("sa.json").path
        try Fixtures.account.json(tokenURI: "https://from-file.test/token").write(toFile: good, atomically: true, encoding: .utf8)
        let env = dir.appendingPathComponent("env.json").path
        try Fixtures.account.json(tokenURI: "https://from-env.test/token").write(toFile: env, atomically: true, encoding: .utf8)

        let fromFile = try FCMConfiguration(keyPath: good, credential: nil, environment: [:])
        XCTAssertEqual(fromFile.serviceAccount.tokenURI, "https://from-file.test/token")
        XCTAssertEqual(fromFile.endpoint, "https://fcm.googleapis.com")

        let inline = try FCMConfiguration(keyPath: good, credential: Fixtures.account.json(tokenURI: "https://inline.test/token"), environment: [:])
        XCTAssertEqual(inline.serviceAccount.tokenURI, "https://inline.test/token")

        let fromEnv = try FCMConfiguration(keyPath: nil, credential: "", environment: ["GOOGLE_APPLICATION_CREDENTIALS": env])
        XCTAssertEqual(fromEnv.serviceAccount.tokenURI, "https://from-env.test/token")

        XCTAssertThrowsError(try FCMConfiguration(keyPath: nil, credential: nil, environment: [:])) { error in
            XCTAssertTrue("\(error)".contains("missing credentials"), "\(error)")
        }
        XCTAssertThrowsError(try FCMConfiguration(keyPath: dir.appendingPathComponent("nope.json").path, credential: nil, environment: [:])) {
            error in
            XCTAssertTrue("\(error)".contains("android.key_path"), "\(error)")
            XCTAssertTrue("\(error)".contains("does not exist"), "\(error)")
        }
        let broken = dir.appendingPathComponent("broken.json").path
        try "{\"type\":\"service_account\"}".write(toFile: broken, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try FCMConfiguration(keyPath: nil, credential: nil, environment: ["GOOGLE_APPLICATION_CREDENTIALS": broken])) { error in
            XCTAssertTrue("\(error)".contains("GOOGLE_APPLICATION_CREDENTIALS"), "\(error)")
            XCTAssertTrue("\(error)".contains("missing \"project_id\""), "\(error)")
        }
    }

    func testEndpointAndSendPath() throws {
        let account = try Fixtures.serviceAccount()
        let c = try FCMConfiguration(serviceAccount: account, endpoint: "https://127.0.0.1:8443/prefix/", maxRetry: 3)
        XCTAssertEqual(c.sendPath, "/prefix/v1/projects/pushgate-test/messages:send")
        XCTAssertEqual(c.maxRetry, 3)
        let d = try FCMConfiguration(serviceAccount: account)
        XCTAssertEqual(d.sendPath, "/v1/projects/pushgate-test/messages:send")
        XCTAssertThrowsError(try FCMConfiguration(serviceAccount: account, endpoint: "fcm.googleapis.com")) { error in
            XCTAssertTrue("\(error)".contains("android.endpoint"), "\(error)")
        }
    }
}
