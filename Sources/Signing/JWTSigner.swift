import Crypto
import _CryptoExtras
import Foundation

/// Base64url without padding (RFC 7515 section 2).
public enum Base64URL {
    public static func encode<D: DataProtocol>(_ data: D) -> String {
        var s = Data(data).base64EncodedString()
        s = s.replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
        while s.hasSuffix("=") { s.removeLast() }
        return s
    }

    /// Decodes base64url (padding optional); also accepts standard base64.
    public static func decode(_ string: String) -> Data? {
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
        return Data(base64Encoded: s)
    }
}

/// The signing key behind a JWS: ES256 (APNs provider tokens, VAPID) or RS256 (FCM OAuth assertion).
public enum JWTSigningKey: Sendable {
    case es256(P256.Signing.PrivateKey)
    case rs256(_RSA.Signing.PrivateKey)

    public var algorithm: String {
        switch self {
        case .es256: return "ES256"
        case .rs256: return "RS256"
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
                out += String(format: "\\u%04x", c.value)
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
              let sig = Base64URL.decode(String(parts[2])) else { throw JWTError.malformed("bad base64url") }
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
              publicKey.isValidSignature(sig, for: Data(signingInput.utf8)) else { throw JWTError.badSignature }
    }

    public func verify(rs256 publicKey: _RSA.Signing.PublicKey) throws {
        guard algorithm == "RS256" else { throw JWTError.unsupportedAlgorithm(algorithm ?? "none") }
        let sig = _RSA.Signing.RSASignature(rawRepresentation: signature)
        guard publicKey.isValidSignature(sig, for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5) else { throw JWTError.badSignature }
    }
}

/// PEM key loading with errors that say what is wrong.
public enum KeyLoading {
    public enum Failure: Error, CustomStringConvertible {
        case unreadable(path: String, String)
        case notP256(String)
        case notRSA(String)
        public var description: String {
            switch self {
            case .unreadable(let path, let why): return "cannot read key file \(path): \(why)"
            case .notP256(let why): return "not a P-256 PKCS#8 private key (\(why))"
            case .notRSA(let why): return "not an RSA PKCS#8 private key (\(why))"
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

    public static func rsaPrivateKey(pem: String) throws -> _RSA.Signing.PrivateKey {
        do { return try _RSA.Signing.PrivateKey(pemRepresentation: pem) } catch { throw Failure.notRSA("\(error)") }
    }
}
