import Foundation
import MockProviders
import PushgateCore
import XCTest

@testable import FCM

/// The assertion the gateway sends verifies with Google's own `google-auth` (Python), against the
/// service account's X.509 certificate, audience = token_uri.
/// Runs when `PUSHGATE_INTEROP_PYTHON` names a python with google-auth installed; skipped otherwise.
final class FCMInteropTests: XCTestCase {
    static var scriptPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("interop/fcm_verify_assertion.py").path
    }

    func runVerifier(python: String, assertion: String, certPEM: String, tokenURI: String, kid: String, iss: String) throws -> (Int32, String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fcm-interop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let jwtFile = dir.appendingPathComponent("assertion.jwt")
        let certFile = dir.appendingPathComponent("cert.pem")
        try assertion.write(to: jwtFile, atomically: true, encoding: .utf8)
        try certPEM.write(to: certFile, atomically: true, encoding: .utf8)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [Self.scriptPath, jwtFile.path, certFile.path, tokenURI, kid, iss]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    func testAssertionVerifiesWithGoogleAuth() async throws {
        guard let python = ProcessInfo.processInfo.environment["PUSHGATE_INTEROP_PYTHON"], !python.isEmpty else {
            throw XCTSkip("set PUSHGATE_INTEROP_PYTHON to a python with google-auth to run the interop check")
        }
        let h = try await FCMHarness.make()
        let assertion: String
        do {
            let outcome = try await h.send(notification { $0.message = "interop" }, .token("t"))
            XCTAssertTrue(outcome.isDelivered, "\(outcome)")
            assertion = try XCTUnwrap(h.mock.assertions.first, "the mock token endpoint received no assertion")
        } catch {
            try? await h.shutdown()
            throw error
        }
        let tokenURI = h.mock.tokenURL
        try await h.shutdown()

        let account = Fixtures.account
        let (status, output) = try runVerifier(
            python: python, assertion: assertion, certPEM: try account.certificatePEM(),
            tokenURI: tokenURI, kid: account.privateKeyID, iss: account.clientEmail)
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.hasPrefix("OK "), output)

        // The check can fail: another key's certificate, or another audience, is refused.
        let (badKey, badKeyOutput) = try runVerifier(
            python: python, assertion: assertion, certPEM: try Fixtures.otherAccount.certificatePEM(),
            tokenURI: tokenURI, kid: account.privateKeyID, iss: account.clientEmail)
        XCTAssertNotEqual(badKey, 0, badKeyOutput)
        let (badAud, badAudOutput) = try runVerifier(
            python: python, assertion: assertion, certPEM: try account.certificatePEM(),
            tokenURI: "https://oauth2.googleapis.com/token", kid: account.privateKeyID, iss: account.clientEmail)
        XCTAssertNotEqual(badAud, 0, badAudOutput)
    }
}
