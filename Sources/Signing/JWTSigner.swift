import Crypto
import Foundation
import _CryptoExtras

/// Base64url without padding (RFC 7515 section 2).
///
/// Table-driven, without Foundation string round trips: Web Push parses a subscription's
/// `p256dh` and `auth` for every delivery and VAPID/JWT headers are built from these.
public enum Base64URL {
    static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// 6-bit value of a base64url or standard base64 character; 0xFF otherwise.
    static let values: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "+"))] = 62
        t[Int(UInt8(ascii: "/"))] = 63
        return t
    }()

    public static func encode<D: DataProtocol>(_ data: D) -> String {
        if let s = data.withContiguousStorageIfAvailable({ encode(bytes: UnsafeRawBufferPointer($0)) }) { return s }
        return Array(data).withUnsafeBytes { encode(bytes: $0) }
    }

    public static func encode(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { encode(bytes: $0) }
    }

    static func encode(bytes: UnsafeRawBufferPointer) -> String {
        let n = bytes.count
        let outCount = (n / 3) * 4 + [0, 2, 3][n % 3]
        return String(unsafeUninitializedCapacity: outCount) { out in
            alphabet.withUnsafeBufferPointer { a in
                var i = 0
                var o = 0
                while i + 3 <= n {
                    let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
                    out[o] = a[Int(v >> 18)]
                    out[o + 1] = a[Int((v >> 12) & 63)]
                    out[o + 2] = a[Int((v >> 6) & 63)]
                    out[o + 3] = a[Int(v & 63)]
                    i += 3
                    o += 4
                }
                if n - i == 1 {
                    let v = UInt32(bytes[i]) << 16
                    out[o] = a[Int(v >> 18)]
                    out[o + 1] = a[Int((v >> 12) & 63)]
                } else if n - i == 2 {
                    let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
                    out[o] = a[Int(v >> 18)]
                    out[o + 1] = a[Int((v >> 12) & 63)]
                    out[o + 2] = a[Int((v >> 6) & 63)]
                }
            }
            return outCount
        }
    }

    /// Decodes base64url (padding optional); also accepts standard base64.
    public static func decode(_ string: String) -> Data? {
        decodeBytes(string).map { Data($0) }
    }

    /// `decode` as bytes. Leading and trailing whitespace is ignored, as are trailing `=`;
    /// any other character outside the two alphabets, or a length of 1 mod 4, gives nil.
    public static func decodeBytes(_ string: String) -> [UInt8]? {
        var string = string
        return string.withUTF8 { utf8 -> [UInt8]? in
            var lo = 0
            var hi = utf8.count
            while lo < hi, isASCIIWhitespace(utf8[lo]) { lo += 1 }
            while hi > lo, isASCIIWhitespace(utf8[hi - 1]) { hi -= 1 }
            // Non-ASCII whitespace (e.g. U+00A0) at either end: the Unicode-aware slow path.
            if lo < hi && (utf8[lo] >= 0x80 || utf8[hi - 1] >= 0x80) { return nil }
            while hi > lo, utf8[hi - 1] == UInt8(ascii: "=") { hi -= 1 }
            return decode(UnsafeBufferPointer(rebasing: utf8[lo..<hi]))
        } ?? slowDecode(string)
    }

    static func isASCIIWhitespace(_ b: UInt8) -> Bool { b == 0x20 || (b >= 0x09 && b <= 0x0D) }

    /// Characters only (no padding, no whitespace): nil on a bad character or a length of 1 mod 4.
    static func decode(_ chars: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let n = chars.count
        if n % 4 == 1 { return nil }
        let outCount = (n / 4) * 3 + [0, 0, 1, 2][n % 4]
        var ok = true
        let out = [UInt8](unsafeUninitializedCapacity: outCount) { buf, initialized in
            values.withUnsafeBufferPointer { t in
                var i = 0
                var o = 0
                while i + 4 <= n {
                    let a = t[Int(chars[i])]
                    let b = t[Int(chars[i + 1])]
                    let c = t[Int(chars[i + 2])]
                    let d = t[Int(chars[i + 3])]
                    if (a | b | c | d) & 0xC0 != 0 {
                        ok = false
                        break
                    }
                    let v = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    buf[o] = UInt8(truncatingIfNeeded: v >> 16)
                    buf[o + 1] = UInt8(truncatingIfNeeded: v >> 8)
                    buf[o + 2] = UInt8(truncatingIfNeeded: v)
                    i += 4
                    o += 3
                }
                if ok && n - i >= 2 {
                    let a = t[Int(chars[i])]
                    let b = t[Int(chars[i + 1])]
                    let c = n - i == 3 ? t[Int(chars[i + 2])] : 0
                    if (a | b | c) & 0xC0 != 0 {
                        ok = false
                    } else {
                        let v = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                        buf[o] = UInt8(truncatingIfNeeded: v >> 16)
                        if n - i == 3 { buf[o + 1] = UInt8(truncatingIfNeeded: v >> 8) }
                    }
                }
            }
            initialized = ok ? outCount : 0
        }
        return ok ? out : nil
    }

    /// The previous Foundation implementation, kept for strings with non-ASCII whitespace at the ends.
    static func slowDecode(_ string: String) -> [UInt8]? {
        var s = string.trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "-", with: "+")
            .replacingOccurrences(of: "_", with: "/")
        while s.hasSuffix("=") { s.removeLast() }
        switch s.count % 4 {
        case 0: break
        case 2: s += "=="
        case 3: s += "="
        default: return nil
        }
        return Data(base64Encoded: s).map { Array($0) }
    }
}

/// The signing key behind a JWS: ES256 (APNs provider tokens, VAPID), RS256 (FCM OAuth assertion)
/// or PS256 (RSASSA-PSS with SHA-256, as service-account JWTs of some push services are).
public enum JWTSigningKey: Sendable {
    case es256(P256.Signing.PrivateKey)
    case rs256(_RSA.Signing.PrivateKey)
    case ps256(_RSA.Signing.PrivateKey)

    public var algorithm: String {
        switch self {
        case .es256: return "ES256"
        case .rs256: return "RS256"
        case .ps256: return "PS256"
        }
    }
}

public enum JWTError: Error, CustomStringConvertible, Equatable {
    case malformed(String)
    case badSignature
    case unsupportedAlgorithm(String)

    public var description: String {
        switch self {
        case .malformed(let why): return "malformed JWT: \(why)"
        case .badSignature: return "JWT signature does not verify"
        case .unsupportedAlgorithm(let alg): return "unsupported JWT algorithm \(alg)"
        }
    }
}

/// One small JWS compact-serialisation signer used by APNs, FCM and VAPID alike.
///
/// Header and claims are given as already-ordered key/value lists and written as compact JSON,
/// so the exact bytes are predictable (and numbers stay numbers: APNs wants a numeric `iat`).
public struct JWTSigner: Sendable {
    public let key: JWTSigningKey

    public init(key: JWTSigningKey) { self.key = key }

    /// A JSON value for header and claims.
    public enum Value: Sendable, Equatable {
        case string(String)
        case int(Int64)
    }

    public func sign(header extraHeader: [(String, Value)] = [], claims: [(String, Value)]) throws -> String {
        var header: [(String, Value)] = [("alg", .string(key.algorithm))]
        header.append(contentsOf: extraHeader)
        let signingInput = Base64URL.encode(Array(Self.json(header).utf8)) + "." + Base64URL.encode(Array(Self.json(claims).utf8))
        let message = Data(signingInput.utf8)
        let signature: Data
        switch key {
        case .es256(let k):
            signature = try k.signature(for: message).rawRepresentation  // r||s, 64 bytes
        case .rs256(let k):
            signature = try k.signature(for: message, padding: .insecurePKCS1v1_5).rawRepresentation
        case .ps256(let k):
            // RSASSA-PSS, SHA-256, MGF1 with SHA-256, salt as long as the hash (RFC 7518 section 3.5).
            signature = try k.signature(for: message, padding: .PSS).rawRepresentation
        }
        return signingInput + "." + Base64URL.encode(signature)
    }

    static func json(_ pairs: [(String, Value)]) -> String {
        var out = "{"
        for (i, (k, v)) in pairs.enumerated() {
            if i > 0 { out += "," }
            out += jsonString(k) + ":"
            switch v {
            case .string(let s): out += jsonString(s)
            case .int(let n): out += String(n)
            }
        }
        return out + "}"
    }

    static func jsonString(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20:
                let hex: [Character] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b", "c", "d", "e", "f"]
                out += "\\u00"
                out.append(hex[Int(c.value >> 4)])
                out.append(hex[Int(c.value & 15)])
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// A decoded (and optionally verified) JWS, used by the mock providers and tests.
public struct DecodedJWT: @unchecked Sendable {  // immutable JSON values from JSONSerialization
    public let header: [String: Any]
    public let claims: [String: Any]
    public let signingInput: String
    public let signature: Data

    public init(_ token: String) throws {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw JWTError.malformed("expected 3 parts, got \(parts.count)") }
        guard let h = Base64URL.decode(String(parts[0])),
            let c = Base64URL.decode(String(parts[1])),
            let sig = Base64URL.decode(String(parts[2]))
        else { throw JWTError.malformed("bad base64url") }
        guard let hj = try? JSONSerialization.jsonObject(with: h) as? [String: Any] else { throw JWTError.malformed("header is not a JSON object") }
        guard let cj = try? JSONSerialization.jsonObject(with: c) as? [String: Any] else { throw JWTError.malformed("claims are not a JSON object") }
        header = hj
        claims = cj
        signingInput = parts[0] + "." + parts[1]
        signature = sig
    }

    public var algorithm: String? { header["alg"] as? String }

    public func verify(es256 publicKey: P256.Signing.PublicKey) throws {
        guard algorithm == "ES256" else { throw JWTError.unsupportedAlgorithm(algorithm ?? "none") }
        guard let sig = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            publicKey.isValidSignature(sig, for: Data(signingInput.utf8))
        else { throw JWTError.badSignature }
    }

    public func verify(rs256 publicKey: _RSA.Signing.PublicKey) throws {
        guard algorithm == "RS256" else { throw JWTError.unsupportedAlgorithm(algorithm ?? "none") }
        let sig = _RSA.Signing.RSASignature(rawRepresentation: signature)
        guard publicKey.isValidSignature(sig, for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5) else { throw JWTError.badSignature }
    }

    public func verify(ps256 publicKey: _RSA.Signing.PublicKey) throws {
        guard algorithm == "PS256" else { throw JWTError.unsupportedAlgorithm(algorithm ?? "none") }
        let sig = _RSA.Signing.RSASignature(rawRepresentation: signature)
        guard publicKey.isValidSignature(sig, for: Data(signingInput.utf8), padding: .PSS) else { throw JWTError.badSignature }
    }
}

/// PEM key loading with errors that say what is wrong.
public enum KeyLoading {
    public enum Failure: Error, CustomStringConvertible {
        case unreadable(path: String, String)
        case notP256(String)
        public var description: String {
            switch self {
            case .unreadable(let path, let why): return "cannot read key file \(path): \(why)"
            case .notP256(let why): return "not a P-256 PKCS#8 private key (\(why))"
            }
        }
    }

    public static func p256PrivateKey(pem: String) throws -> P256.Signing.PrivateKey {
        do { return try P256.Signing.PrivateKey(pemRepresentation: pem) } catch { throw Failure.notP256("\(error)") }
    }

    public static func p256PrivateKey(path: String) throws -> P256.Signing.PrivateKey {
        let pem: String
        do { pem = try String(contentsOfFile: path, encoding: .utf8) } catch { throw Failure.unreadable(path: path, "\(error.localizedDescription)") }
        return try p256PrivateKey(pem: pem)
    }
}
