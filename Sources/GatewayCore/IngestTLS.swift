import Foundation
import NIOSSL
import ProviderKit

/// TLS on ingest from gorush's keys: `core.ssl`, `core.cert_path`/`core.key_path` or
/// `core.cert_base64`/`core.key_base64` (base64 of the PEM files; they win over the paths, as in gorush).
/// Loaded and checked at start: a missing file, a key that does not match the certificate or an
/// expired certificate is a one-line error naming the key.
public struct IngestTLS: Sendable {
    public var configuration: TLSConfiguration
    /// The leaf certificate's subject and expiry, for the start log.
    public var summary: String
    /// The PEM certificate chain and key as loaded (checked to match), for the gRPC listener.
    public var certificatePEM: [UInt8] = []
    public var keyPEM: [UInt8] = []
    /// `core.tls_min_version`: the lowest version a client may negotiate (1.2 or 1.3).
    public var minimumVersion: TLSVersion = .tlsv12

    static func load(_ core: SectionValues) throws -> IngestTLS? {
        typealias C = CoreConfig
        // Checked with TLS off too: a wrong value is an error before the day TLS is turned on.
        let minimumVersion = try Self.minimumVersion(core)
        guard core[C.ssl] else { return nil }
        let certPEM = try pem(core, base64: C.certBase64, path: C.certPath, what: "certificate")
        let keyPEM = try pem(core, base64: C.keyBase64, path: C.keyPath, what: "private key")
        let certKey = core[C.certBase64].isEmpty ? core.path(C.certPath) : core.path(C.certBase64)
        let keyKey = core[C.keyBase64].isEmpty ? core.path(C.keyPath) : core.path(C.keyBase64)
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(certPEM)
        } catch {
            throw ConfigError(key: certKey, problem: "not a PEM certificate")
        }
        guard let leaf = chain.first else { throw ConfigError(key: certKey, problem: "holds no PEM certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(bytes: keyPEM, format: .pem)
        } catch {
            throw ConfigError(key: keyKey, problem: "not a PEM private key (an encrypted key is not supported here)")
        }
        let notAfter = Date(timeIntervalSince1970: TimeInterval(leaf.notValidAfter))
        if notAfter < Date() {
            throw ConfigError(key: certKey, problem: "the certificate expired on \(ISO8601DateFormatter().string(from: notAfter))")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        // NIOSSL's server default accepts TLS 1.0 and 1.1, which have no secure cipher suites left.
        configuration.minimumTLSVersion = minimumVersion
        do {
            // Builds the context once now: a key that does not belong to the certificate fails here, at start.
            _ = try NIOSSLContext(configuration: configuration)
        } catch {
            throw ConfigError(key: keyKey, problem: "cannot serve TLS with this certificate and key (do they match?): \(error)")
        }
        let days = Int(notAfter.timeIntervalSinceNow / 86_400)
        return IngestTLS(
            configuration: configuration, summary: "certificate valid until \(ISO8601DateFormatter().string(from: notAfter)) (\(days) days)",
            certificatePEM: certPEM, keyPEM: keyPEM, minimumVersion: minimumVersion)
    }

    /// `core.tls_min_version`: "1.2" (the default) or "1.3"; anything lower or else is an error.
    static func minimumVersion(_ core: SectionValues) throws -> TLSVersion {
        switch core[CoreConfig.tlsMinVersion].trimmingCharacters(in: .whitespaces) {
        case "1.2": return .tlsv12
        case "1.3": return .tlsv13
        case let other:
            throw ConfigError(key: core.path(CoreConfig.tlsMinVersion), problem: "\"\(other)\" is not accepted: \"1.2\" or \"1.3\"")
        }
    }

    private static func pem(_ core: SectionValues, base64: Setting<String>, path: Setting<String>, what: String) throws -> [UInt8] {
        let b64 = core[base64].trimmingCharacters(in: .whitespacesAndNewlines)
        if !b64.isEmpty {
            guard let data = Data(base64Encoded: b64, options: .ignoreUnknownCharacters), !data.isEmpty else {
                throw ConfigError(key: core.path(base64), problem: "not base64 of a PEM \(what)")
            }
            return Array(data)
        }
        let file = core[path]
        guard !file.isEmpty else { throw ConfigError(key: core.path(path), problem: "core.ssl is true but no \(what) is given") }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw ConfigError(key: core.path(path), problem: "cannot read \(file) (core.ssl is true)")
        }
        return Array(data)
    }
}
