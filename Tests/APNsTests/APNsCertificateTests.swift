import APNs
import Foundation
import HTTP2Pool
import Logging
import MockProviders
import NIOCore
import NIOPosix
import ProviderKit
import PushgateCore
import TestSupport
import XCTest

/// Certificate-based trust: `.p12` (Keychain legacy, OpenSSL 3 AES) and `.pem`
/// (plain, encrypted PKCS#8, traditional `Proc-Type` encryption) client certificates, loaded from
/// `ios.key_path` / `ios.key_base64` with `ios.password`, presented to a mock APNs that verifies
/// them against the test CA over real TLS.
final class APNsCertificateTests: XCTestCase {
    func temporaryDirectory() throws -> String {
        let dir = NSTemporaryDirectory() + "pushgate-apns-cert-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        return dir
    }

    func makeCertificate(
        bundleID: String = "com.example.app", notValidBefore: Date? = nil, notValidAfter: Date? = nil
    ) throws -> TestAPNsCertificate {
        try TestAPNsCertificate.make(
            in: try temporaryDirectory(), bundleID: bundleID, password: "correct horse", notValidBefore: notValidBefore, notValidAfter: notValidAfter)
    }

    func section(_ values: [String: ConfigValue]) -> SectionValues { SectionValues(name: "ios", values: values) }

    func configuration(path: String, password: String, extra: [String: ConfigValue] = [:]) throws -> APNsConfiguration {
        var values: [String: ConfigValue] = ["key_path": .string(path), "password": .string(password)]
        values.merge(extra) { _, new in new }
        return try APNsModule.configuration(section(values))
    }

    func configError(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return "\(error)"
        }
    }

    // MARK: - loading

    func testEveryKeyFileFormLoadsWithItsTopicsAndDates() throws {
        let cert = try makeCertificate()
        for (path, needsPassword) in cert.keyFiles {
            let c = try configuration(path: path, password: needsPassword ? cert.password : "")
            let loaded = try XCTUnwrap(c.certificate, path)
            XCTAssertEqual(loaded.bundleID, "com.example.app", path)
            XCTAssertEqual(loaded.topics, ["com.example.app", "com.example.app.voip", "com.example.app.complication"], path)
            XCTAssertEqual(loaded.subject, "UID=com.example.app, CN=Apple Push Services: com.example.app, OU=TEAMID1234, O=Pushgate Test", path)
            XCTAssertEqual(loaded.notValidAfter.timeIntervalSince1970, cert.notValidAfter.timeIntervalSince1970, accuracy: 1, path)
            XCTAssertTrue(loaded.development && loaded.production, "both environment markers are read")
            XCTAssertEqual(loaded.chain.count, 2, "\(path): the certificate and the CA that came with it")
            XCTAssertEqual(c.topic, "com.example.app", "the topic defaults to the certificate's UID")
            XCTAssertNil(c.key, "no JWT key with a certificate")
            XCTAssertEqual(c.keyID, "")
            XCTAssertEqual(loaded.daysToExpiry(), 365, accuracy: 0.01)
        }
        // ios.topic still wins over the certificate's UID.
        let explicit = try configuration(path: cert.pemPath, password: "", extra: ["topic": .string("com.example.app.voip")])
        XCTAssertEqual(explicit.topic, "com.example.app.voip")
    }

    func testTheFixturesHaveTheIntendedAlgorithms() throws {
        let cert = try makeCertificate()
        let openssl = try TestAPNsCertificate.findOpenSSL()
        let pass = "pass:" + cert.password
        let legacy = try TestAPNsCertificate.run(openssl, ["pkcs12", "-info", "-noout", "-legacy", "-in", cert.p12LegacyPath, "-passin", pass])
        XCTAssertTrue(legacy.contains("PKCS7 Encrypted data: pbeWithSHA1And40BitRC2-CBC"), legacy)
        XCTAssertTrue(legacy.contains("Shrouded Keybag: pbeWithSHA1And3-KeyTripleDES-CBC"), legacy)
        XCTAssertTrue(legacy.contains("MAC: sha1"), legacy)
        let aes = try TestAPNsCertificate.run(openssl, ["pkcs12", "-info", "-noout", "-in", cert.p12AESPath, "-passin", pass])
        XCTAssertTrue(aes.contains("PKCS7 Encrypted data: PBES2, PBKDF2, AES-256-CBC"), aes)
        XCTAssertTrue(aes.contains("Shrouded Keybag: PBES2, PBKDF2, AES-256-CBC"), aes)
        XCTAssertTrue(aes.contains("MAC: sha256"), aes)
        let encrypted = try String(contentsOfFile: cert.encryptedPEMPath, encoding: .utf8)
        XCTAssertTrue(encrypted.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        let traditional = try String(contentsOfFile: cert.legacyEncryptedPEMPath, encoding: .utf8)
        XCTAssertTrue(traditional.contains("Proc-Type: 4,ENCRYPTED") && traditional.contains("DEK-Info: DES-EDE3-CBC"))
        let plain = try String(contentsOfFile: cert.pemPath, encoding: .utf8)
        XCTAssertFalse(plain.contains("ENCRYPTED"))
    }

    func testKeyBase64TakesEveryFormWithOrWithoutKeyType() throws {
        let cert = try makeCertificate()
        for (path, needsPassword) in cert.keyFiles {
            let b64 = try cert.base64(of: path)
            let type = path.hasSuffix(".p12") ? "p12" : "pem"
            for keyType in ["", type] {
                let c = try APNsModule.configuration(
                    section([
                        "key_base64": .string(b64), "key_type": .string(keyType), "password": .string(needsPassword ? cert.password : ""),
                    ]))
                XCTAssertEqual(c.certificate?.bundleID, "com.example.app", "\(path) key_type \"\(keyType)\"")
            }
        }
    }

    func testWrongOrMissingPasswordIsOneLineNamingThePasswordKeyNeverThePassword() throws {
        let cert = try makeCertificate()
        for (path, needsPassword) in cert.keyFiles where needsPassword {
            let wrong = configError { _ = try configuration(path: path, password: "Tr0ub4dor&3") }
            XCTAssertNotNil(wrong, path)
            XCTAssertTrue(wrong?.hasPrefix("ios.password: wrong password for") == true, wrong ?? "")
            XCTAssertTrue(wrong?.contains((path as NSString).lastPathComponent) == true, wrong ?? "")
            XCTAssertFalse(wrong?.contains("Tr0ub4dor") == true)
            XCTAssertFalse(wrong?.contains("\n") == true)
            let missing = configError { _ = try configuration(path: path, password: "") }
            XCTAssertTrue(missing?.hasPrefix("ios.password: ") == true, missing ?? "")
        }
    }

    func testP12WithoutPassword() throws {
        // The Keychain lets a .p12 be exported with an empty password; gorush reads it with password "".
        let cert = try makeCertificate()
        let openssl = try TestAPNsCertificate.findOpenSSL()
        let unprotected = cert.directory + "/unprotected.p12"
        try TestAPNsCertificate.run(
            openssl, ["pkcs12", "-in", cert.p12AESPath, "-passin", "pass:" + cert.password, "-nodes", "-out", cert.directory + "/all.pem"])
        try TestAPNsCertificate.run(
            openssl,
            ["pkcs12", "-export", "-legacy", "-in", cert.directory + "/all.pem", "-passout", "pass:", "-out", unprotected])
        XCTAssertEqual(try configuration(path: unprotected, password: "").certificate?.bundleID, "com.example.app")
        XCTAssertEqual(configError { _ = try configuration(path: unprotected, password: "x") }, "ios.password: wrong password for \(unprotected)")
    }

    func testBadFilesAreOneLineErrorsNotCrashes() throws {
        let cert = try makeCertificate()
        let dir = cert.directory
        let openssl = try TestAPNsCertificate.findOpenSSL()
        // A .p12 holding the certificate only (exported without its key): NIOSSLPKCS12Bundle would
        // stop the process on it; the gateway refuses it first.
        let certOnly = dir + "/cert-only.p12"
        try cert.certificatePEM.write(toFile: dir + "/c.pem", atomically: true, encoding: .utf8)
        try TestAPNsCertificate.run(openssl, ["pkcs12", "-export", "-nokeys", "-in", dir + "/c.pem", "-passout", "pass:x", "-out", certOnly])
        XCTAssertEqual(
            configError { _ = try configuration(path: certOnly, password: "x") },
            "ios.key_path: \(certOnly) holds no private key (export the certificate together with its private key)")

        // A .p12 holding the key only (the Keychain exports a lone private key too).
        let keyOnly = dir + "/key-only.p12"
        try cert.privateKeyPEM.write(toFile: dir + "/k.pem", atomically: true, encoding: .utf8)
        try TestAPNsCertificate.run(openssl, ["pkcs12", "-export", "-nocerts", "-inkey", dir + "/k.pem", "-passout", "pass:x", "-out", keyOnly])
        XCTAssertEqual(
            configError { _ = try configuration(path: keyOnly, password: "x") },
            "ios.key_path: \(keyOnly) holds no certificate (export the certificate together with its private key)")

        let garbage = dir + "/garbage.p12"
        try Data("not a p12".utf8).write(to: URL(fileURLWithPath: garbage))
        XCTAssertEqual(configError { _ = try configuration(path: garbage, password: "x") }, "ios.key_path: \(garbage) is not a PKCS#12 (.p12) file")

        let keyless = dir + "/keyless.pem"
        try cert.certificatePEM.write(toFile: keyless, atomically: true, encoding: .utf8)
        XCTAssertTrue(
            configError { _ = try configuration(path: keyless, password: "") }?.hasPrefix("ios.key_path: \(keyless) holds no private key") == true)

        // A key that is not the certificate's.
        let other = try TestAPNsCertificate.make(in: dir + "/other")
        let mismatched = dir + "/mismatched.pem"
        try (cert.certificatePEM + "\n" + other.privateKeyPEM + "\n").write(toFile: mismatched, atomically: true, encoding: .utf8)
        XCTAssertEqual(
            configError { _ = try configuration(path: mismatched, password: "") },
            "ios.key_path: the private key in \(mismatched) does not belong to its certificate")

        let missingFile = dir + "/nope.p12"
        XCTAssertTrue(
            configError { _ = try configuration(path: missingFile, password: "") }?.hasPrefix("ios.key_path: cannot read \(missingFile)") == true)

        // Not a file a certificate lives in: refused, never read for ever.
        XCTAssertEqual(configError { _ = try configuration(path: "/dev/zero.p12", password: "") }?.hasPrefix("ios.key_path: cannot read"), true)
        let device = dir + "/zero.p12"
        try FileManager.default.createSymbolicLink(atPath: device, withDestinationPath: "/dev/zero")
        XCTAssertEqual(configError { _ = try configuration(path: device, password: "") }, "ios.key_path: \(device) is not a regular file")
        let link = dir + "/link.p12"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: cert.p12LegacyPath)
        XCTAssertEqual(try configuration(path: link, password: cert.password).certificate?.bundleID, "com.example.app", "a link to the file is read")
        let huge = dir + "/huge.pem"
        try Data(count: (1 << 20) + 1).write(to: URL(fileURLWithPath: huge))
        XCTAssertEqual(
            configError { _ = try configuration(path: huge, password: "") },
            "ios.key_path: \(huge) is \((1 << 20) + 1) bytes, more than a key file holds (at most \(1 << 20))")

        // The same for a .p8 path, and its own errors still name the file.
        let p8Device = dir + "/zero.p8"
        try FileManager.default.createSymbolicLink(atPath: p8Device, withDestinationPath: "/dev/zero")
        XCTAssertEqual(configError { _ = try configuration(path: p8Device, password: "") }, "ios.key_path: \(p8Device) is not a regular file")
        let notKey = dir + "/AuthKey_garbage.p8"
        try "garbage".write(toFile: notKey, atomically: true, encoding: .utf8)
        XCTAssertEqual(
            configError { _ = try configuration(path: notKey, password: "", extra: ["key_id": .string("K"), "team_id": .string("T")]) },
            "ios.key_path: \(notKey) is not a P-256 PKCS#8 private key (an APNs .p8 auth key)")

        // A truncated .p12 (hostile bytes): an error, never a trap.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: cert.p12AESPath))
        for cut in [1, 16, bytes.count / 2, bytes.count - 1] {
            let truncated = dir + "/truncated-\(cut).p12"
            try bytes.prefix(cut).write(to: URL(fileURLWithPath: truncated))
            let message = configError { _ = try configuration(path: truncated, password: cert.password) }
            XCTAssertNotNil(message, "cut at \(cut)")
            XCTAssertFalse(message?.contains("\n") == true)
        }
    }

    func testExpiredOrNotYetValidCertificateIsRefused() throws {
        let expired = try makeCertificate(notValidBefore: Date().addingTimeInterval(-86400 * 30), notValidAfter: Date().addingTimeInterval(-86400))
        let message = configError { _ = try configuration(path: expired.p12AESPath, password: expired.password) }
        XCTAssertTrue(message?.hasPrefix("ios.key_path: the APNs certificate ") == true, message ?? "")
        XCTAssertTrue(message?.contains(" expired on ") == true, message ?? "")
        XCTAssertFalse(message?.contains("\n") == true)

        let future = try makeCertificate(notValidBefore: Date().addingTimeInterval(86400), notValidAfter: Date().addingTimeInterval(86400 * 30))
        let early = configError { _ = try configuration(path: future.pemPath, password: "") }
        XCTAssertTrue(early?.contains("is not valid before") == true, early ?? "")
    }

    func testKeyTypeFromExtensionOrSetting() throws {
        let cert = try makeCertificate()
        // gorush's sample config says key_type "pem"; the .p12 extension decides, with a warning.
        var values: [String: ConfigValue] = [
            "key_path": .string(cert.p12AESPath), "key_type": .string("pem"), "password": .string(cert.password),
        ]
        XCTAssertNotNil(try APNsModule.configuration(section(values)).certificate)
        // A name without a known extension: key_type decides; without it, a one-line error.
        let renamed = cert.directory + "/apns-identity"
        try FileManager.default.copyItem(atPath: cert.p12AESPath, toPath: renamed)
        values["key_path"] = .string(renamed)
        values["key_type"] = .string("p12")
        XCTAssertNotNil(try APNsModule.configuration(section(values)).certificate)
        values["key_type"] = .string("")
        XCTAssertEqual(
            configError { _ = try APNsModule.configuration(section(values)) },
            "ios.key_type: cannot tell what \(renamed) holds: set it to p12, pem or p8")
        values["key_type"] = .string("jks")
        XCTAssertEqual(configError { _ = try APNsModule.configuration(section(values)) }, #"ios.key_type: must be p12, pem or p8, got "jks""#)
        // A .p8 still means token auth (key_id / team_id required).
        let key = TestAPNsKey.generate()
        let p8 = cert.directory + "/AuthKey.p8"
        try key.write(to: p8)
        let token = try APNsModule.configuration(
            section(["key_path": .string(p8), "key_type": .string("pem"), "key_id": .string(key.keyID), "team_id": .string(key.teamID)]))
        XCTAssertNotNil(token.key)
        XCTAssertNil(token.certificate)
        XCTAssertEqual(
            configError { _ = try APNsModule.configuration(section(["key_path": .string(p8)])) },
            "ios.key_id: missing (the Key ID of the .p8 auth key)")
        // An auth key saved as .pem (no certificate in it) is still token auth.
        let p8AsPEM = cert.directory + "/AuthKey.pem"
        try key.write(to: p8AsPEM)
        let stillToken = try APNsModule.configuration(
            section(["key_path": .string(p8AsPEM), "key_id": .string(key.keyID), "team_id": .string(key.teamID)]))
        XCTAssertEqual(stillToken.key?.publicKey.rawRepresentation, key.publicKey.rawRepresentation)
        XCTAssertNil(stillToken.certificate)
    }

    func testSectionKeys() {
        let keys = APNsModule().sections[0].keys
        XCTAssertEqual(keys.first { $0.name == "password" }?.secrecy, .secret)
        XCTAssertEqual(keys.first { $0.name == "key_type" }?.defaultValue, .string(""))
        XCTAssertEqual(APNsModule().sections[0].ignoredKeys, [])
    }

    // MARK: - over the wire

    /// Mock APNs servers (production, sandbox) that ask for client certificates from the test CA.
    struct CertificateHarness: ProviderHarness {
        let group: MultiThreadedEventLoopGroup
        let production: MockAPNs
        let sandbox: MockAPNs
        let provider: APNsProvider

        static func make(
            configuration base: APNsConfiguration, clientRoots: [String], checkEnvironments: Bool = false
        ) async throws -> CertificateHarness {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
            let pki = try TestPKI.generate(hosts: ["127.0.0.1", "localhost"])
            var options = MockAPNs.Options(key: TestAPNsKey.generate(), tls: try pki.serverTLSConfiguration())
            options.clientCertificateRootsPEM = clientRoots
            var productionOptions = options
            var sandboxOptions = options
            if checkEnvironments {
                productionOptions.production = true
                sandboxOptions.production = false
            }
            let production = MockAPNs(options: productionOptions, eventLoopGroup: group)
            let sandbox = MockAPNs(options: sandboxOptions, eventLoopGroup: group)
            try await production.start()
            try await sandbox.start()
            var configuration = base
            configuration.productionEndpoint = production.baseURL
            configuration.sandboxEndpoint = sandbox.baseURL
            var poolConfig = HTTP2PoolConfiguration()
            poolConfig.tlsConfiguration = try pki.clientTLSConfiguration()
            poolConfig.requestTimeout = .seconds(300)
            poolConfig.connectTimeout = .seconds(60)
            var logger = Logger(label: "test.apns.certificate")
            logger.logLevel = .warning
            let provider = try APNsProvider(configuration: configuration, poolConfiguration: poolConfig, eventLoopGroup: group, logger: logger)
            return CertificateHarness(group: group, production: production, sandbox: sandbox, provider: provider)
        }

        func shutdown() async throws {
            await provider.shutdown()
            try await production.stop()
            try await sandbox.stop()
            try await group.shutdownGracefully()
        }
    }

    func testEveryKeyFileDeliversOverMutualTLSWithoutAJWT() async throws {
        let cert = try makeCertificate()
        for (path, needsPassword) in cert.keyFiles {
            let configuration = try configuration(path: path, password: needsPassword ? cert.password : "")
            try await withHarness({ try await CertificateHarness.make(configuration: configuration, clientRoots: [cert.caCertificatePEM]) }) { h in
                let token = String(repeating: "ab", count: 32)
                // No topic anywhere: the certificate's bundle id is sent.
                let sandbox = try await h.attempt(.test(.ios, message: "hi"), to: .token(token))
                XCTAssertEqual(sandbox.isDelivered, true, "\(path): \(sandbox)")
                let production = try await h.attempt(.test(.ios, message: "hi") { $0.production = true }, to: .token(token))
                XCTAssertEqual(production.isDelivered, true, "\(path): \(production)")
                for mock in [h.sandbox, h.production] {
                    let requests = mock.requests
                    XCTAssertEqual(requests.count, 1, path)
                    XCTAssertEqual(requests.first?.status, 200)
                    XCTAssertNil(requests.first?.header("authorization"), "no JWT with certificate auth")
                    XCTAssertEqual(requests.first?.topic, "com.example.app")
                    XCTAssertTrue(requests.first?.clientCertificateSubject?.contains("Apple Push Services: com.example.app") == true)
                    XCTAssertEqual(requests.first?.clientCertificateTopics.first, "com.example.app")
                }
            }
        }
    }

    func testTopicOutsideTheCertificateIsRefusedByAPNsAndReported() async throws {
        let cert = try makeCertificate()
        let configuration = try configuration(path: cert.p12LegacyPath, password: cert.password)
        try await withHarness({ try await CertificateHarness.make(configuration: configuration, clientRoots: [cert.caCertificatePEM]) }) { h in
            let token = String(repeating: "cd", count: 32)
            let refused = try await h.attempt(.test(.ios, message: "hi") { $0.topic = "com.other.app" }, to: .token(token))
            guard case .permanent(let reason, let status) = refused else { return XCTFail("\(refused)") }
            XCTAssertEqual(reason, "TopicDisallowed")
            XCTAssertEqual(status, 400)
            // A VoIP push goes to <bundle>.voip, which the certificate lists.
            let voip = try await h.attempt(
                .test(.ios) {
                    $0.pushType = "voip"
                    $0.message = "call"
                }, to: .token(token))
            XCTAssertEqual(voip.isDelivered, true, "\(voip)")
            XCTAssertEqual(h.sandbox.requests.last?.topic, "com.example.app.voip")
        }
    }

    func testACertificateForOneEnvironmentIsRefusedByTheOtherAndWarnedAbout() async throws {
        let dir = try temporaryDirectory()
        let cert = try TestAPNsCertificate.make(in: dir, development: true, production: false)
        let (configuration, warnings) = try APNsModule.configurationAndWarnings(
            section(["key_path": .string(cert.pemPath), "production": .bool(true)]))
        XCTAssertEqual(configuration.certificate?.development, true)
        XCTAssertEqual(configuration.certificate?.production, false)
        XCTAssertEqual(
            warnings,
            [
                "the APNs certificate in \(cert.pemPath) is for the development (sandbox) environment only but ios.production is true: APNs will answer BadCertificateEnvironment"
            ])
        XCTAssertEqual(try APNsModule.configurationAndWarnings(section(["key_path": .string(cert.pemPath)])).warnings, [])
        try await withHarness({
            try await CertificateHarness.make(configuration: configuration, clientRoots: [cert.caCertificatePEM], checkEnvironments: true)
        }) { h in
            let token = String(repeating: "0f", count: 32)
            let refused = try await h.attempt(.test(.ios, message: "hi"), to: .token(token))
            XCTAssertEqual(refused, .permanent(reason: "BadCertificateEnvironment", status: 403))
            let sandbox = try await h.attempt(.test(.ios, message: "hi") { $0.development = true }, to: .token(token))
            XCTAssertEqual(sandbox.isDelivered, true, "\(sandbox)")
        }
    }

    func testACertificateFromAnotherCAFailsTheHandshake() async throws {
        let cert = try makeCertificate()
        let stranger = try TestAPNsCertificate.make(in: cert.directory + "/stranger")
        let configuration = try configuration(path: stranger.pemPath, password: "")
        try await withHarness({ try await CertificateHarness.make(configuration: configuration, clientRoots: [cert.caCertificatePEM]) }) { h in
            let outcome = try await h.attempt(.test(.ios, message: "hi"), to: .token(String(repeating: "ef", count: 32)))
            XCTAssertNotEqual(outcome.isDelivered, true, "\(outcome)")
            XCTAssertEqual(h.sandbox.requestCount, 0, "the mock never saw a request")
        }
    }

    func testTokenAuthStillWorksOnAMockThatAcceptsCertificates() async throws {
        let cert = try makeCertificate()
        let key = TestAPNsKey.generate()
        let configuration = try APNsConfiguration(keyPEM: key.p8PEM, keyID: key.keyID, teamID: key.teamID, topic: "com.example.app")
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pki = try TestPKI.generate(hosts: ["127.0.0.1"])
        var options = MockAPNs.Options(key: key, tls: try pki.serverTLSConfiguration())
        options.clientCertificateRootsPEM = [cert.caCertificatePEM]
        let mock = MockAPNs(options: options, eventLoopGroup: group)
        try await mock.start()
        var c = configuration
        c.endpoint = mock.baseURL
        var poolConfig = HTTP2PoolConfiguration()
        poolConfig.tlsConfiguration = try pki.clientTLSConfiguration()
        let provider = try APNsProvider(configuration: c, poolConfiguration: poolConfig, eventLoopGroup: group)
        let prepared = try provider.prepare(.test(.ios, message: "hi"))
        let outcome = await provider.send(
            prepared, to: .token(String(repeating: "01", count: 32)), context: DeliveryContext(messageID: UUID().uuidString))
        XCTAssertEqual(outcome.isDelivered, true, "\(outcome)")
        XCTAssertNotNil(mock.requests.first?.providerToken)
        XCTAssertNil(mock.requests.first?.clientCertificateSubject)
        await provider.shutdown()
        try await mock.stop()
        try await group.shutdownGracefully()
    }
}
