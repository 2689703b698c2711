import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import MockProviders
import NIOCore
import NIOPosix
import ProviderKit
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// A gateway configured with an APNs client certificate (`ios.key_path` .p12 + `ios.password`)
/// against a mock APNs that verifies client certificates: delivery over mutual TLS, the
/// days-to-expiry gauge on `/metrics`, the password hidden from `/api/config`, an expired
/// certificate refused at start.
final class GatewayAPNsCertificateTests: XCTestCase {
    struct Setup {
        let directory: String
        let pki: TestPKI
        let certificate: TestAPNsCertificate
        let apns: MockAPNs

        func yaml(keyPath: String, password: String) -> String {
            """
            core:
              address: "127.0.0.1"
              port: 0
              ca_file: "\(directory)/ca.pem"
            ios:
              enabled: true
              key_path: "\(keyPath)"
              key_type: "pem"
              password: "\(password)"
              endpoint: "\(apns.baseURL)"
            android:
              enabled: false
            queue:
              engine: memory
            """
        }
    }

    func makeSetup(notValidAfter: Date? = nil, notValidBefore: Date? = nil) async throws -> Setup {
        let directory = NSTemporaryDirectory() + "pushgate-gw-cert-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let pki = try TestPKI.generate()
        try pki.caCertificatePEM.write(toFile: directory + "/ca.pem", atomically: true, encoding: .utf8)
        let certificate = try TestAPNsCertificate.make(
            in: directory + "/apns", password: "p12-pass", notValidBefore: notValidBefore, notValidAfter: notValidAfter)
        var options = MockAPNs.Options(key: TestAPNsKey.generate(), tls: try pki.serverTLSConfiguration())
        options.clientCertificateRootsPEM = [certificate.caCertificatePEM]
        let apns = MockAPNs(options: options, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await apns.start()
        let setup = Setup(directory: directory, pki: pki, certificate: certificate, apns: apns)
        addTeardownBlock {
            try? await apns.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }
        return setup
    }

    func testGatewayDeliversWithACertificateAndExposesItsExpiry() async throws {
        let setup = try await makeSetup()
        let raw = try RawConfig(yaml: setup.yaml(keyPath: setup.certificate.p12LegacyPath, password: "p12-pass"), environment: [:])
        XCTAssertTrue(
            raw.warnings.isEmpty || !raw.warnings.contains { $0.contains("ios.password") }, "ios.password is a real key: \(raw.warnings)")
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        let token = String(repeating: "5a", count: 32)
        try await gateway.makeApplication().test(.live) { client in
            let r = try await client.push(#"{"notifications":[{"tokens":["\#(token)"],"platform":1,"message":"hi"}],"sync":true}"#)
            XCTAssertEqual(r.status, 200, r.body)
            XCTAssertEqual((jsonObject(r.body)["logs"] as? [Any])?.count, 0, r.body)
            let requests = setup.apns.requests
            XCTAssertEqual(requests.count, 1)
            XCTAssertEqual(requests.first?.status, 200)
            XCTAssertNil(requests.first?.header("authorization"), "no JWT with certificate auth")
            XCTAssertEqual(requests.first?.topic, "com.example.app", "the topic defaults to the certificate's bundle id")
            XCTAssertTrue(
                requests.first?.clientCertificateSubject?.contains("CN=Apple Push Services: com.example.app") == true,
                "\(requests.first?.clientCertificateSubject ?? "nil")")

            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let line = metrics.split(separator: "\n").first { $0.hasPrefix("pushgate_apns_certificate_expiry_days{") }
            let value = line.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
            XCTAssertTrue(line?.contains(#"topic="com.example.app""#) == true, "\(line ?? "no gauge line in \(metrics)")")
            XCTAssertEqual(value ?? 0, 365, accuracy: 0.01, "days until the certificate's notAfter")

            let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertFalse(config.contains("p12-pass"), "the password is a secret")
        }
    }

    func testExpiredCertificateStopsTheStartWithOneLine() async throws {
        let setup = try await makeSetup(notValidAfter: Date().addingTimeInterval(-3600), notValidBefore: Date().addingTimeInterval(-86400 * 365))
        let raw = try RawConfig(yaml: setup.yaml(keyPath: setup.certificate.pemPath, password: ""), environment: [:])
        XCTAssertThrowsError(try GatewayBuilder.build(raw: raw, logger: Logger(label: "test"))) { error in
            let text = "\(error)"
            XCTAssertTrue(text.hasPrefix("config error: ios.key_path: the APNs certificate "), text)
            XCTAssertTrue(text.contains("expired on"), text)
            XCTAssertFalse(text.contains("\n"), text)
        }
    }

    func testWrongPasswordStopsTheStartNamingThePasswordKey() async throws {
        let setup = try await makeSetup()
        let raw = try RawConfig(yaml: setup.yaml(keyPath: setup.certificate.p12AESPath, password: "not-it"), environment: [:])
        XCTAssertThrowsError(try GatewayBuilder.build(raw: raw, logger: Logger(label: "test"))) { error in
            XCTAssertEqual("\(error)", "config error: ios.password: wrong password for \(setup.certificate.p12AESPath)")
        }
    }
}
