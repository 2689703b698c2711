import Crypto
import Foundation
import MockKit
import SwiftASN1
import X509
import _CryptoExtras

/// An APNs client certificate made for tests, shaped like Apple's "Apple Push Services" ones: an
/// RSA-2048 key, the subject `UID=<bundle id>, CN=Apple Push Services: <bundle id>, OU=<team>`,
/// the development and production markers (1.2.840.113635.100.6.3.1 / .2) and the topics extension
/// (1.2.840.113635.100.6.3.6), issued by a throwaway CA (give `caCertificatePEM` to the mock APNs).
///
/// `make(in:)` writes the files an operator would have (nothing is committed: made at test time):
/// - `apns-legacy.p12`: as the macOS Keychain exports (certificates pbeWithSHAAnd40BitRC2-CBC, key
///   pbeWithSHAAnd3-KeyTripleDES-CBC, SHA-1 MAC), made with `openssl pkcs12 -export -legacy`;
/// - `apns-aes.p12`: as OpenSSL 3 makes by default (PBES2 AES-256-CBC, PBKDF2 hmacWithSHA256, SHA-256 MAC);
/// - `apns.pem`: certificate, CA and unencrypted PKCS#8 key;
/// - `apns-encrypted.pem`: `openssl pkcs12 -in apns-aes.p12 -out …` (the documented conversion):
///   `-----BEGIN ENCRYPTED PRIVATE KEY-----` (PKCS#8, AES-256-CBC) after the certificates;
/// - `apns-legacy-encrypted.pem`: certificate + `-----BEGIN RSA PRIVATE KEY-----` with
///   `Proc-Type: 4,ENCRYPTED` / `DEK-Info: DES-EDE3-CBC` (the traditional OpenSSL form).
///
/// The `.p12` and encrypted `.pem` files need the `openssl` command (OpenSSL 3).
public struct TestAPNsCertificate: Sendable {
    public let bundleID: String
    /// The UID first, then the topics extension's entries.
    public let topics: [String]
    public let teamID: String
    public let password: String
    public let notValidBefore: Date
    public let notValidAfter: Date
    public let caCertificatePEM: String
    public let certificatePEM: String
    /// Unencrypted PKCS#8.
    public let privateKeyPEM: String
    public let directory: String

    public var p12LegacyPath: String { directory + "/apns-legacy.p12" }
    public var p12AESPath: String { directory + "/apns-aes.p12" }
    public var pemPath: String { directory + "/apns.pem" }
    public var encryptedPEMPath: String { directory + "/apns-encrypted.pem" }
    public var legacyEncryptedPEMPath: String { directory + "/apns-legacy-encrypted.pem" }
    public var caPath: String { directory + "/apns-client-ca.pem" }

    /// The four forms `ios.key_path` takes, with whether each needs `ios.password`.
    public var keyFiles: [(path: String, needsPassword: Bool)] {
        [(p12LegacyPath, true), (p12AESPath, true), (pemPath, false), (encryptedPEMPath, true), (legacyEncryptedPEMPath, true)]
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// - Parameters:
    ///   - development, production: which environment markers the certificate carries (Apple's
    ///     "Apple Push Services" certificates carry both).
    ///   - extraTopics: further topics of the topics extension (the bundle id and its `.voip` and
    ///     `.complication` topics are always there, as in Apple's universal certificates).
    ///   - validFor: the validity window relative to now (default: from an hour ago to a year ahead).
    public static func make(
        in directory: String, bundleID: String = "com.example.app", extraTopics: [String] = [], teamID: String = "TEAMID1234",
        password: String = "pushgate-test", notValidBefore: Date? = nil, notValidAfter: Date? = nil, development: Bool = true,
        production: Bool = true, openssl: String? = nil
    ) throws -> TestAPNsCertificate {
        let now = Date()
        let notBefore = notValidBefore ?? now.addingTimeInterval(-3600)
        let notAfter = notValidAfter ?? now.addingTimeInterval(365 * 86400)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)

        let caKey = P256.Signing.PrivateKey()
        let caPrivateKey = Certificate.PrivateKey(caKey)
        let caName = try DistinguishedName {
            OrganizationName("Pushgate Test")
            CommonName("Pushgate Test APNs Client CA")
        }
        let caCertificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: caPrivateKey.publicKey,
            notValidBefore: min(notBefore, now.addingTimeInterval(-7200)), notValidAfter: max(notAfter, now.addingTimeInterval(86400)),
            issuer: caName, subject: caName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: caPrivateKey.publicKey)
            },
            issuerPrivateKey: caPrivateKey)

        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let leafKey = Certificate.PrivateKey(key)
        let subject = DistinguishedName([
            RelativeDistinguishedName(.init(type: [0, 9, 2342, 19_200_300, 100, 1, 1], utf8String: bundleID)),
            RelativeDistinguishedName(.init(type: ASN1ObjectIdentifier.RDNAttributeType.commonName, utf8String: "Apple Push Services: \(bundleID)")),
            RelativeDistinguishedName(.init(type: ASN1ObjectIdentifier.RDNAttributeType.organizationalUnitName, utf8String: teamID)),
            RelativeDistinguishedName(.init(type: ASN1ObjectIdentifier.RDNAttributeType.organizationName, utf8String: "Pushgate Test")),
        ])
        var topicList = [bundleID, bundleID + ".voip", bundleID + ".complication"]
        for t in extraTopics where !topicList.contains(t) { topicList.append(t) }
        let topicsValue = try Self.topicsExtensionValue(topicList)
        // Apple's environment markers (values: NULL).
        var markers: [Certificate.Extension] = []
        if development { markers.append(Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 3, 1], critical: false, value: [0x05, 0x00])) }
        if production { markers.append(Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 3, 2], critical: false, value: [0x05, 0x00])) }
        let environmentMarkers = markers
        let leaf = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: leafKey.publicKey,
            notValidBefore: notBefore, notValidAfter: notAfter, issuer: caName, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.clientAuth])
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: caPrivateKey.publicKey).keyIdentifier)
                for marker in environmentMarkers { marker }
                Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 3, 6], critical: false, value: topicsValue[...])
            },
            issuerPrivateKey: caPrivateKey)

        let made = TestAPNsCertificate(
            bundleID: bundleID, topics: topicList, teamID: teamID, password: password, notValidBefore: notBefore, notValidAfter: notAfter,
            caCertificatePEM: try caCertificate.serializeAsPEM().pemString, certificatePEM: try leaf.serializeAsPEM().pemString,
            privateKeyPEM: key.pkcs8PEMRepresentation, directory: directory)
        try made.writeFiles(openssl: openssl ?? Self.findOpenSSL())
        return made
    }

    /// The topics extension's value as Apple encodes it: SEQUENCE { UTF8String topic, SEQUENCE { UTF8String kind }, ... }.
    static func topicsExtensionValue(_ topics: [String]) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { s in
            for topic in topics {
                try s.serialize(ASN1UTF8String(topic))
                let kind = topic.hasSuffix(".voip") ? "voip" : topic.hasSuffix(".complication") ? "complication" : "app"
                try s.appendConstructedNode(identifier: .sequence) { k in try k.serialize(ASN1UTF8String(kind)) }
            }
        }
        return serializer.serializedBytes
    }

    func writeFiles(openssl: String) throws {
        let certPath = directory + "/apns-cert.pem"
        let keyPath = directory + "/apns-key.pem"
        try certificatePEM.write(toFile: certPath, atomically: true, encoding: .utf8)
        try (privateKeyPEM + "\n").write(toFile: keyPath, atomically: true, encoding: .utf8)
        try caCertificatePEM.write(toFile: caPath, atomically: true, encoding: .utf8)
        try (certificatePEM + "\n" + caCertificatePEM + "\n" + privateKeyPEM + "\n").write(toFile: pemPath, atomically: true, encoding: .utf8)
        let pass = "pass:" + password
        try Self.run(
            openssl,
            [
                "pkcs12", "-export", "-legacy", "-certpbe", "PBE-SHA1-RC2-40", "-keypbe", "PBE-SHA1-3DES", "-macalg", "sha1",
                "-in", certPath, "-inkey", keyPath, "-certfile", caPath, "-name", "Apple Push Services: \(bundleID)",
                "-passout", pass, "-out", p12LegacyPath,
            ])
        try Self.run(
            openssl,
            [
                "pkcs12", "-export", "-in", certPath, "-inkey", keyPath, "-certfile", caPath, "-name", "Apple Push Services: \(bundleID)",
                "-passout", pass, "-out", p12AESPath,
            ])
        try Self.run(openssl, ["pkcs12", "-in", p12AESPath, "-passin", pass, "-passout", pass, "-out", encryptedPEMPath])
        let legacyKeyPath = directory + "/apns-key-legacy.pem"
        try Self.run(openssl, ["rsa", "-in", keyPath, "-des3", "-traditional", "-passout", pass, "-out", legacyKeyPath])
        let legacyKey = try String(contentsOfFile: legacyKeyPath, encoding: .utf8)
        try (certificatePEM + "\n" + caCertificatePEM + "\n" + legacyKey).write(toFile: legacyEncryptedPEMPath, atomically: true, encoding: .utf8)
        for scratch in [certPath, keyPath, legacyKeyPath] { try? FileManager.default.removeItem(atPath: scratch) }
    }

    /// The `openssl` command: `$OPENSSL`, else the first in /usr/bin, /usr/local/bin, /opt/homebrew/bin, else `$PATH`.
    public static func findOpenSSL() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        var candidates = [environment["OPENSSL"]].compactMap { $0 }
        candidates += ["/usr/bin/openssl", "/usr/local/bin/openssl", "/opt/homebrew/bin/openssl"]
        candidates += (environment["PATH"] ?? "").split(separator: ":").map { $0 + "/openssl" }
        for c in candidates where FileManager.default.isExecutableFile(atPath: c) { return c }
        throw Failure(description: "the openssl command (OpenSSL 3) is needed to make the test .p12 files; set OPENSSL to its path")
    }

    @discardableResult
    public static func run(_ command: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(command) \(arguments.prefix(2).joined(separator: " ")) failed: \(text)")
        }
        return text
    }

    /// The bytes of a file, base64 (for `ios.key_base64`).
    public func base64(of path: String) throws -> String {
        try Data(contentsOf: URL(fileURLWithPath: path)).base64EncodedString()
    }
}
