import Foundation
import NIOSSL
import SwiftASN1
import X509

/// How `ios.key_path` / `ios.key_base64` is read (`ios.key_type`): an APNs auth key (`.p8`, token
/// auth) or a client certificate with its private key (`.p12`, `.pem`, certificate auth).
public enum APNsKeyType: String, Sendable, CaseIterable {
    case p8, p12, pem

    /// The type a file name's extension names (`.p8`, `.p12`, `.pem`, any case), as gorush reads `ios.key_path`.
    public static func of(path: String) -> APNsKeyType? {
        let ext = (path as NSString).pathExtension.lowercased()
        return APNsKeyType(rawValue: ext)
    }

    /// A guess from the bytes, for `ios.key_base64` without `ios.key_type`: PEM text holding a
    /// certificate is `.pem`, PEM text with a key only is `.p8`, DER (a SEQUENCE) is `.p12`.
    public static func sniff(_ bytes: [UInt8]) -> APNsKeyType? {
        let text = String(decoding: bytes.prefix(64 * 1024), as: UTF8.self)
        if text.contains("-----BEGIN CERTIFICATE-----") { return .pem }
        if text.contains("PRIVATE KEY-----") { return .p8 }
        if bytes.first == 0x30 { return .p12 }
        return nil
    }
}

/// An APNs client certificate (certificate-based trust) with its private key and chain, as loaded
/// from a `.p12` (PKCS#12, the macOS Keychain's legacy RC2-40/3DES form or OpenSSL 3's AES/PBKDF2
/// form) or a `.pem` (certificate(s) + private key, the key optionally encrypted).
///
/// What APNs reads from it: the subject's UID (0.9.2342.19200300.100.1.1) is the app's bundle id,
/// the default topic; a universal "Apple Push Services" certificate lists every topic it may push
/// to in the extension 1.2.840.113635.100.6.3.6; 1.2.840.113635.100.6.3.1 / .2 mark it valid for
/// the development (sandbox) / production environment.
public struct APNsCertificate: Sendable {
    public static let topicsExtension: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 3, 6]
    public static let developmentExtension: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 3, 1]
    public static let productionExtension: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 3, 2]
    public static let userID: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]

    /// The client certificate first, then the intermediates that came with it.
    public let chain: [NIOSSLCertificate]
    public let privateKey: NIOSSLPrivateKey
    /// The subject in certificate order, as `openssl x509 -subject` shows it
    /// (`UID=com.example.app, CN=Apple Push Services: com.example.app, OU=TEAMID1234, O=…, C=US`).
    public let subject: String
    /// The subject's UID: the bundle id (nil when the certificate has none).
    public let bundleID: String?
    /// The topics this certificate may push to: the UID, then those of the topics extension.
    public let topics: [String]
    public let notValidBefore: Date
    public let notValidAfter: Date
    /// Which environments the certificate names (both false: it names none).
    public let development: Bool
    public let production: Bool

    /// Loads a certificate from the bytes of a `.p12` or `.pem`. `source` names the file in errors;
    /// `key` is the configuration key that gave the bytes (`ios.key_path` / `ios.key_base64`).
    /// The password never appears in an error.
    public static func load(
        type: APNsKeyType, bytes: [UInt8], password: String, source: String, key: String
    ) throws(APNsConfigurationError) -> APNsCertificate {
        let chain: [NIOSSLCertificate]
        let privateKey: NIOSSLPrivateKey
        switch type {
        case .p12:
            (chain, privateKey) = try loadP12(bytes, password: password, source: source, key: key)
        case .pem:
            (chain, privateKey) = try loadPEM(bytes, password: password, source: source, key: key)
        case .p8:
            throw APNsConfigurationError(key: key, "\(source) is a .p8 auth key, not a certificate")
        }
        guard let leaf = chain.first else {
            throw APNsConfigurationError(key: key, "\(source) holds no certificate")
        }
        // The key must belong to the first certificate: BoringSSL checks it when a context is made.
        do {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.certificateChain = chain.map { .certificate($0) }
            tls.privateKey = .privateKey(privateKey)
            _ = try NIOSSLContext(configuration: tls)
        } catch {
            throw APNsConfigurationError(key: key, "the private key in \(source) does not belong to its certificate")
        }
        return try describe(leaf: leaf, chain: chain, privateKey: privateKey, source: source, key: key)
    }

    /// Reads the subject, topics and dates of `leaf` with swift-certificates.
    static func describe(
        leaf: NIOSSLCertificate, chain: [NIOSSLCertificate], privateKey: NIOSSLPrivateKey, source: String, key: String
    ) throws(APNsConfigurationError) -> APNsCertificate {
        let certificate: Certificate
        do {
            certificate = try Certificate(derEncoded: try leaf.toDERBytes())
        } catch {
            throw APNsConfigurationError(key: key, "\(source): the certificate cannot be parsed (\(error))")
        }
        var bundleID: String?
        for rdn in certificate.subject {
            for attribute in rdn where attribute.type == userID {
                if bundleID == nil, let s = String(attribute.value), !s.isEmpty { bundleID = s }
            }
        }
        var topics: [String] = []
        if let bundleID { topics.append(bundleID) }
        if let ext = certificate.extensions[oid: topicsExtension] {
            for t in Self.topics(extensionValue: ext.value) where !topics.contains(t) {
                topics.append(t)
            }
        }
        return APNsCertificate(
            chain: chain, privateKey: privateKey, subject: Self.format(certificate.subject), bundleID: bundleID, topics: topics,
            notValidBefore: certificate.notValidBefore, notValidAfter: certificate.notValidAfter,
            development: certificate.extensions[oid: developmentExtension] != nil,
            production: certificate.extensions[oid: productionExtension] != nil)
    }

    /// The strings of the topics extension's value: a SEQUENCE alternating a topic (UTF8String) and
    /// a SEQUENCE of the push kinds it allows (`app`, `voip`, `complication`), which are skipped.
    /// Anything unparsable gives no topics (the UID still does).
    static func topics(extensionValue: ArraySlice<UInt8>) -> [String] {
        guard let root = try? DER.parse(extensionValue), case .constructed(let children) = root.content else { return [] }
        var topics: [String] = []
        for child in children {
            switch child.identifier {
            case .utf8String:
                if let s = try? ASN1UTF8String(derEncoded: child) { topics.append(String(s)) }
            case .printableString:
                if let s = try? ASN1PrintableString(derEncoded: child) { topics.append(String(s)) }
            case .ia5String:
                if let s = try? ASN1IA5String(derEncoded: child) { topics.append(String(s)) }
            default:
                continue
            }
        }
        return topics.filter { !$0.isEmpty && $0.utf8.count <= 255 }
    }

    /// Refuses a certificate that is expired or not yet valid, in one line naming `key`.
    public func checkValidity(at now: Date = Date(), key: String) throws(APNsConfigurationError) {
        if now > notValidAfter {
            throw APNsConfigurationError(
                key: key, "the APNs certificate \(subject) expired on \(Self.format(notValidAfter)); renew it in the Apple developer account")
        }
        if now < notValidBefore {
            throw APNsConfigurationError(key: key, "the APNs certificate \(subject) is not valid before \(Self.format(notValidBefore))")
        }
    }

    /// Days until `notValidAfter` (fractional; negative once expired).
    public func daysToExpiry(at now: Date = Date()) -> Double {
        notValidAfter.timeIntervalSince(now) / 86400
    }

    static let attributeNames: [ASN1ObjectIdentifier: String] = [
        userID: "UID", [2, 5, 4, 3]: "CN", [2, 5, 4, 11]: "OU", [2, 5, 4, 10]: "O", [2, 5, 4, 6]: "C", [2, 5, 4, 7]: "L", [2, 5, 4, 8]: "ST",
        [1, 2, 840, 113549, 1, 9, 1]: "emailAddress",
    ]

    /// `UID=…, CN=…, OU=…` in the order the certificate lists them.
    static func format(_ name: DistinguishedName) -> String {
        var parts: [String] = []
        for rdn in name {
            for attribute in rdn {
                let key = attributeNames[attribute.type] ?? attribute.type.description
                parts.append("\(key)=\(String(attribute.value) ?? attribute.value.description)")
            }
        }
        return parts.joined(separator: ", ")
    }

    static func format(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: date)
    }

    // MARK: - PKCS#12

    static func loadP12(
        _ bytes: [UInt8], password: String, source: String, key: String
    ) throws(APNsConfigurationError) -> ([NIOSSLCertificate], NIOSSLPrivateKey) {
        // NIOSSLPKCS12Bundle stops the process (fatalError) for a file that parses without a private
        // key or without a certificate for it; such files (a certificate exported without its key, a
        // key exported alone) are refused here first.
        switch PKCS12Scan.scan(bytes) {
        case .notPKCS12:
            throw APNsConfigurationError(key: key, "\(source) is not a PKCS#12 (.p12) file")
        case .noPrivateKey:
            throw APNsConfigurationError(
                key: key, "\(source) holds no private key (export the certificate together with its private key)")
        case .noCertificate:
            throw APNsConfigurationError(key: key, "\(source) holds no certificate (export the certificate together with its private key)")
        case .hasPrivateKey:
            break
        }
        let bundle: NIOSSLPKCS12Bundle
        do {
            bundle = try NIOSSLPKCS12Bundle(buffer: bytes, passphrase: Array(password.utf8))
        } catch {
            let text = "\(error)".uppercased()
            if text.contains("INCORRECT_PASSWORD") || text.contains("BAD_DECRYPT") {
                throw APNsConfigurationError(
                    key: "ios.password", password.isEmpty ? "\(source) is protected by a password: set ios.password" : "wrong password for \(source)")
            }
            throw APNsConfigurationError(key: key, "\(source) cannot be read as PKCS#12: \(Self.oneLine(error))")
        }
        return (bundle.certificateChain, bundle.privateKey)
    }

    // MARK: - PEM

    static func loadPEM(
        _ bytes: [UInt8], password: String, source: String, key: String
    ) throws(APNsConfigurationError) -> ([NIOSSLCertificate], NIOSSLPrivateKey) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.contains("-----BEGIN CERTIFICATE-----") else {
            throw APNsConfigurationError(key: key, "\(source) holds no certificate (-----BEGIN CERTIFICATE-----)")
        }
        guard text.contains("PRIVATE KEY-----") else {
            throw APNsConfigurationError(key: key, "\(source) holds no private key (-----BEGIN PRIVATE KEY-----)")
        }
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(bytes)
        } catch {
            throw APNsConfigurationError(key: key, "\(source): a certificate cannot be read: \(Self.oneLine(error))")
        }
        let encrypted = text.contains("ENCRYPTED")
        if encrypted && password.isEmpty {
            throw APNsConfigurationError(key: "ios.password", "the private key in \(source) is encrypted: set ios.password")
        }
        let privateKey: NIOSSLPrivateKey
        do {
            let passphrase = Array(password.utf8)
            privateKey = try NIOSSLPrivateKey(bytes: bytes, format: .pem) { (set: ([UInt8]) -> Void) in set(passphrase) }
        } catch {
            if encrypted {
                throw APNsConfigurationError(key: "ios.password", "wrong password for the private key in \(source)")
            }
            throw APNsConfigurationError(key: key, "\(source): the private key cannot be read: \(Self.oneLine(error))")
        }
        return (chain, privateKey)
    }

    static func oneLine(_ error: any Error) -> String {
        "\(error)".replacingOccurrences(of: "\n", with: " ")
    }
}

/// A look at a PKCS#12 file's outer structure (RFC 7292) without decrypting it: which bags are
/// visible in its unencrypted `data` safes. Keychain, OpenSSL and Java all put the (shrouded) key
/// bag in such a safe; the certificates are usually in an encrypted one.
enum PKCS12Scan {
    enum Result: Equatable { case notPKCS12, noPrivateKey, noCertificate, hasPrivateKey }

    static let data: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 7, 1]
    static let keyBag: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 12, 10, 1, 1]
    static let shroudedKeyBag: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 12, 10, 1, 2]
    static let certBag: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 12, 10, 1, 3]

    static func scan(_ bytes: [UInt8]) -> Result {
        // PFX ::= SEQUENCE { version INTEGER, authSafe ContentInfo, macData MacData OPTIONAL }
        guard let pfx = try? BER.parse(bytes), pfx.identifier == .sequence, case .constructed(let parts) = pfx.content else {
            return .notPKCS12
        }
        var it = parts.makeIterator()
        guard let version = it.next(), version.identifier == .integer, let authSafe = it.next(),
            let safes = contentInfoData(authSafe), let authenticated = try? BER.parse(safes),
            case .constructed(let contentInfos) = authenticated.content
        else { return .notPKCS12 }
        // AuthenticatedSafe ::= SEQUENCE OF ContentInfo; the `data` ones hold SafeContents in clear,
        // the others (encryptedData) cannot be looked into: they may hold the certificates.
        var hasKey = false
        var mayHaveCertificate = false
        for contentInfo in contentInfos {
            guard let safeContents = contentInfoData(contentInfo) else {
                mayHaveCertificate = true
                continue
            }
            guard let bags = try? BER.parse(safeContents), case .constructed(let safeBags) = bags.content else { continue }
            for bag in safeBags {
                // SafeBag ::= SEQUENCE { bagId OID, bagValue [0] EXPLICIT, bagAttributes SET OPTIONAL }
                guard case .constructed(let fields) = bag.content, let first = fields.first(where: { _ in true }),
                    let oid = try? ASN1ObjectIdentifier(berEncoded: first)
                else { continue }
                if oid == keyBag || oid == shroudedKeyBag { hasKey = true }
                if oid == certBag { mayHaveCertificate = true }
            }
        }
        if !hasKey { return .noPrivateKey }
        return mayHaveCertificate ? .hasPrivateKey : .noCertificate
    }

    /// The octets of a ContentInfo of type `data` (nil for any other type, e.g. encryptedData).
    static func contentInfoData(_ node: ASN1Node) -> [UInt8]? {
        // ContentInfo ::= SEQUENCE { contentType OID, content [0] EXPLICIT ANY }
        guard case .constructed(let fields) = node.content else { return nil }
        var it = fields.makeIterator()
        guard let typeNode = it.next(), let type = try? ASN1ObjectIdentifier(berEncoded: typeNode), type == data,
            let wrapper = it.next(), case .constructed(let inner) = wrapper.content,
            let octets = inner.first(where: { _ in true })
        else { return nil }
        return octetStringBytes(octets, depth: 0)
    }

    /// An OCTET STRING's bytes, primitive or (BER) constructed from segments.
    static func octetStringBytes(_ node: ASN1Node, depth: Int) -> [UInt8]? {
        guard node.identifier == .octetString, depth < 8 else { return nil }
        switch node.content {
        case .primitive(let bytes):
            return Array(bytes)
        case .constructed(let segments):
            var out: [UInt8] = []
            for segment in segments {
                guard let part = octetStringBytes(segment, depth: depth + 1) else { return nil }
                out.append(contentsOf: part)
            }
            return out
        }
    }
}
