import Crypto
import Foundation
import NIOCore
import NIOSSL
import X509

/// Ephemeral dev PKI made in memory with swift-certificates + swift-crypto:
/// a P-256 CA and a P-256 leaf (serverAuth + clientAuth) for the given DNS names / IP addresses.
public struct TestPKI: Sendable {
    public let caCertificatePEM: String
    public let leafCertificatePEM: String
    public let leafPrivateKeyPEM: String
    public let caPrivateKeyPEM: String

    public static func generate(
        commonName: String = "Pushgate Dev CA",
        hosts: [String] = ["localhost", "127.0.0.1", "::1"]
    ) throws -> TestPKI {
        let now = Date()
        let notBefore = now.addingTimeInterval(-3600)
        let notAfter = now.addingTimeInterval(3600 * 24 * 365)

        let caKey = P256.Signing.PrivateKey()
        let caPrivateKey = Certificate.PrivateKey(caKey)
        let caName = try DistinguishedName {
            OrganizationName("Pushgate")
            CommonName(commonName)
        }
        let caCertificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: caPrivateKey.publicKey,
            notValidBefore: notBefore,
            notValidAfter: notAfter,
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: caPrivateKey.publicKey)
            },
            issuerPrivateKey: caPrivateKey
        )

        let leafKey = P256.Signing.PrivateKey()
        let leafPrivateKey = Certificate.PrivateKey(leafKey)
        let leafName = try DistinguishedName {
            OrganizationName("Pushgate")
            CommonName(hosts.first ?? "localhost")
        }
        var sans: [GeneralName] = []
        for host in hosts {
            if let bytes = Self.ipAddressBytes(host) {
                sans.append(.ipAddress(.init(contentBytes: bytes[...])))
            } else {
                sans.append(.dnsName(host))
            }
        }
        let sanList = sans
        let leafCertificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: leafPrivateKey.publicKey,
            notValidBefore: notBefore,
            notValidAfter: notAfter,
            issuer: caName,
            subject: leafName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
                SubjectKeyIdentifier(hash: leafPrivateKey.publicKey)
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: caPrivateKey.publicKey).keyIdentifier)
                SubjectAlternativeNames(sanList)
            },
            issuerPrivateKey: caPrivateKey
        )

        return TestPKI(
            caCertificatePEM: try caCertificate.serializeAsPEM().pemString,
            leafCertificatePEM: try leafCertificate.serializeAsPEM().pemString,
            leafPrivateKeyPEM: leafKey.pemRepresentation,
            caPrivateKeyPEM: caKey.pemRepresentation
        )
    }

    init(caCertificatePEM: String, leafCertificatePEM: String, leafPrivateKeyPEM: String, caPrivateKeyPEM: String) {
        self.caCertificatePEM = caCertificatePEM
        self.leafCertificatePEM = leafCertificatePEM
        self.leafPrivateKeyPEM = leafPrivateKeyPEM
        self.caPrivateKeyPEM = caPrivateKeyPEM
    }

    /// Server TLS configuration presenting the leaf (chain: leaf, CA) with the given ALPN protocols.
    public func serverTLSConfiguration(alpn: [String] = ["h2", "http/1.1"]) throws -> TLSConfiguration {
        let leaf = try NIOSSLCertificate(bytes: Array(self.leafCertificatePEM.utf8), format: .pem)
        let ca = try NIOSSLCertificate(bytes: Array(self.caCertificatePEM.utf8), format: .pem)
        let key = try NIOSSLPrivateKey(bytes: Array(self.leafPrivateKeyPEM.utf8), format: .pem)
        var config = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(leaf), .certificate(ca)],
            privateKey: .privateKey(key)
        )
        config.applicationProtocols = alpn
        return config
    }

    /// Client TLS configuration trusting this CA only (full verification, hostname checked).
    public func clientTLSConfiguration() throws -> TLSConfiguration {
        let ca = try NIOSSLCertificate(bytes: Array(self.caCertificatePEM.utf8), format: .pem)
        var config = TLSConfiguration.makeClientConfiguration()
        config.trustRoots = .certificates([ca])
        config.certificateVerification = .fullVerification
        return config
    }

    /// Writes the PEM files into a directory (for `pushgate mock` / curl): ca.pem, cert.pem, key.pem.
    public func write(to directory: String) throws {
        let dir = URL(fileURLWithPath: directory, isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try self.caCertificatePEM.write(to: dir.appendingPathComponent("ca.pem"), atomically: true, encoding: .utf8)
        try self.leafCertificatePEM.write(to: dir.appendingPathComponent("cert.pem"), atomically: true, encoding: .utf8)
        try self.leafPrivateKeyPEM.write(to: dir.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
    }

    static func ipAddressBytes(_ host: String) -> [UInt8]? {
        guard let address = try? SocketAddress(ipAddress: host, port: 0) else { return nil }
        switch address {
        case .v4(let a):
            var sin = a.address.sin_addr
            return withUnsafeBytes(of: &sin) { Array($0) }
        case .v6(let a):
            var sin6 = a.address.sin6_addr
            return withUnsafeBytes(of: &sin6) { Array($0) }
        default:
            return nil
        }
    }
}
