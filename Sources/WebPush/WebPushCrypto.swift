import Crypto
import Foundation
import PushgateCore
import Signing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Errors from RFC 8291 / RFC 8188 encryption and decryption.
public enum WebPushCryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidPublicKey(String)
    case invalidAuthSecret(String)
    case invalidSalt
    case plaintextTooLarge(size: Int, limit: Int)
    case malformedBody(String)
    case decryptionFailed(String)

    public var description: String {
        switch self {
        case .invalidPublicKey(let why): return "invalid p256dh key: \(why)"
        case .invalidAuthSecret(let why): return "invalid auth secret: \(why)"
        case .invalidSalt: return "salt must be 16 bytes"
        case .plaintextTooLarge(let size, let limit): return "plaintext too large (\(size) > \(limit) bytes)"
        case .malformedBody(let why): return "malformed aes128gcm body: \(why)"
        case .decryptionFailed(let why): return "aes128gcm decryption failed: \(why)"
        }
    }
}

/// The receiving user agent's keys from a `PushSubscription` (`keys.p256dh`, `keys.auth`), parsed once.
public struct WebPushReceiverKeys: Sendable {
    public let publicKey: P256.KeyAgreement.PublicKey
    /// The 65-byte uncompressed point (`0x04 || X || Y`), as used in the RFC 8291 key info.
    public let publicKeyBytes: [UInt8]
    /// The 16-byte authentication secret.
    public let authSecret: [UInt8]

    public init(publicKey: P256.KeyAgreement.PublicKey, authSecret: [UInt8]) throws {
        guard authSecret.count == 16 else {
            throw WebPushCryptoError.invalidAuthSecret("expected 16 bytes, got \(authSecret.count)")
        }
        self.publicKey = publicKey
        self.publicKeyBytes = Array(publicKey.x963Representation)
        self.authSecret = authSecret
    }

    /// Parses the base64url `p256dh` (65-byte uncompressed P-256 point) and `auth` (16 bytes) strings.
    public init(p256dh: String, auth: String) throws {
        guard let point = Base64URL.decodeBytes(p256dh) else { throw WebPushCryptoError.invalidPublicKey("not base64url") }
        guard point.count == 65, point.first == 0x04 else {
            throw WebPushCryptoError.invalidPublicKey("expected a 65-byte uncompressed P-256 point, got \(point.count) bytes")
        }
        let key: P256.KeyAgreement.PublicKey
        do { key = try P256.KeyAgreement.PublicKey(x963Representation: point) } catch {
            throw WebPushCryptoError.invalidPublicKey("not a point on P-256")
        }
        guard let secret = Base64URL.decodeBytes(auth) else { throw WebPushCryptoError.invalidAuthSecret("not base64url") }
        guard secret.count == 16 else {
            throw WebPushCryptoError.invalidAuthSecret("expected 16 bytes, got \(secret.count)")
        }
        self.publicKey = key
        self.publicKeyBytes = point
        self.authSecret = secret
    }

    public init(_ keys: WebPushSubscription.Keys) throws {
        try self.init(p256dh: keys.p256dh, auth: keys.auth)
    }

    /// Like `init(_:)`, but a subscription parsed recently (at ingest, then again at send, or in
    /// many notifications) is taken from a small process-wide cache instead of being decoded and
    /// point-checked again. Invalid keys are not cached (each call throws the same error).
    public static func cached(_ keys: WebPushSubscription.Keys) throws -> WebPushReceiverKeys {
        try ReceiverKeyCache.shared.keys(p256dh: keys.p256dh, auth: keys.auth)
    }
}

/// Parsed receiver keys by their base64url strings: two generations of at most `capacity / 2`
/// entries each (the older one is dropped when the newer one fills), so at most `capacity` entries.
final class ReceiverKeyCache: @unchecked Sendable {
    static let shared = ReceiverKeyCache(capacity: 4096)

    struct Key: Hashable {
        let p256dh: String
        let auth: String
    }

    private let lock = NSLock()
    private let generationSize: Int
    private var current: [Key: WebPushReceiverKeys] = [:]
    private var previous: [Key: WebPushReceiverKeys] = [:]

    init(capacity: Int) { generationSize = max(1, capacity / 2) }

    func keys(p256dh: String, auth: String) throws -> WebPushReceiverKeys {
        let key = Key(p256dh: p256dh, auth: auth)
        lock.lock()
        if let hit = current[key] {
            lock.unlock()
            return hit
        }
        if let hit = previous[key] {
            insertLocked(key, hit)
            lock.unlock()
            return hit
        }
        lock.unlock()
        let parsed = try WebPushReceiverKeys(p256dh: p256dh, auth: auth)
        lock.lock()
        insertLocked(key, parsed)
        lock.unlock()
        return parsed
    }

    private func insertLocked(_ key: Key, _ value: WebPushReceiverKeys) {
        if current.count >= generationSize {
            previous = current
            current = [:]
            current.reserveCapacity(generationSize)
        }
        current[key] = value
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return current.count + previous.count
    }
}

/// RFC 8291 message encryption for Web Push with the RFC 8188 `aes128gcm` content coding.
///
/// The body is one record: `salt(16) || rs(4, big endian) || idlen(1)=65 || as_public(65) ||
/// AES-128-GCM(plaintext || 0x02)`, with `rs` = 4096, so at most 3993 bytes of plaintext.
public enum WebPushCrypto {
    /// The record size written in the header (RFC 8291 section 4: the push message must fit in 4096 bytes).
    public static let recordSize = 4096
    /// Header: salt 16 + rs 4 + idlen 1 + key id 65.
    public static let headerSize = 86
    /// Largest plaintext: 4096 - 86 (header) - 16 (tag) - 1 (delimiter).
    public static let maxPlaintextSize = 3993
    /// Bytes encryption adds to a plaintext: salt (16), record size (4), key id length (1), key id
    /// (65), the padding delimiter (1) and the AES-GCM tag (16). 3993 + 103 = 4096.
    public static let overhead = 103

    static let keyInfoPrefix: [UInt8] = Array("WebPush: info".utf8) + [0]
    static let cekInfo: [UInt8] = Array("Content-Encoding: aes128gcm".utf8) + [0]
    static let nonceInfo: [UInt8] = Array("Content-Encoding: nonce".utf8) + [0]

    /// The derived values of RFC 8291 section 3.4 (exposed for tests against the RFC's intermediate values).
    public struct DerivedKeys: Sendable {
        public let ikm: [UInt8]
        public let contentEncryptionKey: [UInt8]
        public let nonce: [UInt8]
    }

    /// Derives IKM, CEK and NONCE from the ECDH secret, the auth secret, both public keys and the salt.
    ///
    /// Every HKDF here has L <= 32, so each expand is a single HMAC-SHA-256 block:
    /// PRK_key = HMAC(auth_secret, ecdh_secret); IKM = HMAC(PRK_key, key_info || 0x01);
    /// PRK = HMAC(salt, IKM); CEK = HMAC(PRK, cek_info || 0x01)[0..<16]; NONCE = HMAC(PRK, nonce_info || 0x01)[0..<12].
    public static func deriveKeys(ecdhSecret: some ContiguousBytes, authSecret: [UInt8], uaPublic: [UInt8], asPublic: [UInt8], salt: [UInt8])
        -> DerivedKeys
    {
        let prkKey = ecdhSecret.withUnsafeBytes { secret in
            HMAC<SHA256>.authenticationCode(for: secret, using: SymmetricKey(data: authSecret))
        }
        var h = HMAC<SHA256>(key: SymmetricKey(data: prkKey))
        h.update(data: keyInfoPrefix)
        h.update(data: uaPublic)
        h.update(data: asPublic)
        h.update(data: one)
        let ikm = Array(h.finalize())
        let prk = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: ikm, using: SymmetricKey(data: salt)))
        let cek = HMAC<SHA256>.authenticationCode(for: cekInfoBlock, using: prk)
        let nonce = HMAC<SHA256>.authenticationCode(for: nonceInfoBlock, using: prk)
        return DerivedKeys(ikm: ikm, contentEncryptionKey: Array(Array(cek).prefix(16)), nonce: Array(Array(nonce).prefix(12)))
    }

    static let one: [UInt8] = [1]
    static let cekInfoBlock: [UInt8] = cekInfo + [1]
    static let nonceInfoBlock: [UInt8] = nonceInfo + [1]

    /// Encrypts `plaintext` for the receiver. A fresh sender key pair and a random 16-byte salt are
    /// used unless given (tests inject them to reproduce RFC 8291 Appendix A).
    public static func encrypt(
        _ plaintext: some Collection<UInt8>,
        for receiver: WebPushReceiverKeys,
        senderKey: P256.KeyAgreement.PrivateKey? = nil,
        salt: [UInt8]? = nil
    ) throws -> [UInt8] {
        guard plaintext.count <= maxPlaintextSize else {
            throw WebPushCryptoError.plaintextTooLarge(size: plaintext.count, limit: maxPlaintextSize)
        }
        let salt = salt ?? randomBytes(16)
        guard salt.count == 16 else { throw WebPushCryptoError.invalidSalt }
        let asKey = senderKey ?? ephemeralKey()
        let asPublic = Array(asKey.publicKey.x963Representation)
        let shared: SharedSecret
        do { shared = try asKey.sharedSecretFromKeyAgreement(with: receiver.publicKey) } catch {
            throw WebPushCryptoError.invalidPublicKey("ECDH failed: \(error)")
        }
        let keys = shared.withUnsafeBytes { secret in
            deriveKeys(
                ecdhSecret: secret, authSecret: receiver.authSecret, uaPublic: receiver.publicKeyBytes,
                asPublic: asPublic, salt: salt)
        }
        var record = [UInt8]()
        record.reserveCapacity(plaintext.count + 1)
        record.append(contentsOf: plaintext)
        record.append(0x02)  // last-record delimiter, no padding
        let sealed = try AES.GCM.seal(
            record, using: SymmetricKey(data: keys.contentEncryptionKey),
            nonce: try AES.GCM.Nonce(data: keys.nonce))
        var out = [UInt8]()
        out.reserveCapacity(headerSize + record.count + 16)
        out.append(contentsOf: salt)
        let rs = UInt32(recordSize)
        out.append(UInt8(truncatingIfNeeded: rs >> 24))
        out.append(UInt8(truncatingIfNeeded: rs >> 16))
        out.append(UInt8(truncatingIfNeeded: rs >> 8))
        out.append(UInt8(truncatingIfNeeded: rs))
        out.append(UInt8(asPublic.count))
        out.append(contentsOf: asPublic)
        out.append(contentsOf: sealed.ciphertext)
        out.append(contentsOf: sealed.tag)
        return out
    }

    /// A fresh ephemeral P-256 key for one message: a uniformly random scalar in [1, n-1] by
    /// rejection sampling (what `EC_KEY_generate_key` does). `P256.KeyAgreement.PrivateKey()` would
    /// add swift-crypto's FIPS pairwise-consistency self-test (an ECDSA sign and verify, about
    /// twice the cost of the key itself) to every message.
    static func ephemeralKey() -> P256.KeyAgreement.PrivateKey {
        for _ in 0..<8 {
            // Rejected only when the 32 bytes are 0 or >= n (probability about 2^-32).
            if let key = try? P256.KeyAgreement.PrivateKey(rawRepresentation: randomBytes(32)) { return key }
        }
        return P256.KeyAgreement.PrivateKey()
    }

    /// Decrypts an `aes128gcm` body with the receiver's private key and auth secret (RFC 8291 +
    /// RFC 8188, any record size and number of records, padding removed).
    public static func decrypt(_ body: [UInt8], receiverPrivateKey: P256.KeyAgreement.PrivateKey, authSecret: [UInt8]) throws -> [UInt8] {
        guard authSecret.count == 16 else { throw WebPushCryptoError.invalidAuthSecret("expected 16 bytes, got \(authSecret.count)") }
        guard body.count >= 21 else { throw WebPushCryptoError.malformedBody("shorter than the 21-byte header") }
        let salt = Array(body[0..<16])
        let rs = Int(body[16]) << 24 | Int(body[17]) << 16 | Int(body[18]) << 8 | Int(body[19])
        guard rs >= 18 else { throw WebPushCryptoError.malformedBody("record size \(rs) < 18") }
        let idlen = Int(body[20])
        guard idlen == 65, body.count >= 21 + idlen else {
            throw WebPushCryptoError.malformedBody("key id must be the 65-byte sender public key (idlen \(idlen))")
        }
        let asPublicBytes = Array(body[21..<(21 + idlen)])
        let asPublic: P256.KeyAgreement.PublicKey
        do { asPublic = try P256.KeyAgreement.PublicKey(x963Representation: asPublicBytes) } catch {
            throw WebPushCryptoError.malformedBody("key id is not a P-256 point")
        }
        let shared: SharedSecret
        do { shared = try receiverPrivateKey.sharedSecretFromKeyAgreement(with: asPublic) } catch {
            throw WebPushCryptoError.decryptionFailed("ECDH failed")
        }
        let uaPublic = Array(receiverPrivateKey.publicKey.x963Representation)
        let keys = shared.withUnsafeBytes { secret in
            deriveKeys(ecdhSecret: secret, authSecret: authSecret, uaPublic: uaPublic, asPublic: asPublicBytes, salt: salt)
        }
        let cek = SymmetricKey(data: keys.contentEncryptionKey)
        var offset = 21 + idlen
        guard offset < body.count else { throw WebPushCryptoError.malformedBody("no records") }
        var out = [UInt8]()
        var seq: UInt64 = 0
        while offset < body.count {
            let end = min(offset + rs, body.count)
            let isLast = end == body.count
            let chunk = body[offset..<end]
            guard chunk.count > 16 else { throw WebPushCryptoError.malformedBody("record shorter than the tag") }
            var nonce = keys.nonce
            for i in 0..<8 { nonce[11 - i] ^= UInt8(truncatingIfNeeded: seq >> (8 * UInt64(i))) }
            let box: AES.GCM.SealedBox
            let plain: Data
            do {
                box = try AES.GCM.SealedBox(
                    nonce: AES.GCM.Nonce(data: nonce),
                    ciphertext: chunk.dropLast(16), tag: chunk.suffix(16))
                plain = try AES.GCM.open(box, using: cek)
            } catch {
                throw WebPushCryptoError.decryptionFailed("record \(seq) does not authenticate")
            }
            // Strip padding: trailing zeros, then the delimiter (0x02 last record, 0x01 others).
            guard let delimiterIndex = plain.lastIndex(where: { $0 != 0 }) else {
                throw WebPushCryptoError.decryptionFailed("record \(seq) has no delimiter")
            }
            let delimiter = plain[delimiterIndex]
            if isLast {
                guard delimiter == 0x02 else { throw WebPushCryptoError.decryptionFailed("last record delimiter is \(delimiter), expected 2") }
            } else {
                guard delimiter == 0x01 else { throw WebPushCryptoError.decryptionFailed("record \(seq) delimiter is \(delimiter), expected 1") }
            }
            out.append(contentsOf: plain[plain.startIndex..<delimiterIndex])
            offset = end
            seq += 1
        }
        return out
    }

    static func bytes(_ key: SymmetricKey) -> [UInt8] {
        key.withUnsafeBytes { (p: UnsafeRawBufferPointer) in [UInt8](p) }
    }

    /// `n` bytes from the kernel CSPRNG in one `getentropy` call (n <= 256).
    static func randomBytes(_ n: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: n)
        let ok = n <= 256 && out.withUnsafeMutableBytes { getentropy($0.baseAddress, $0.count) == 0 }
        if !ok {
            var g = SystemRandomNumberGenerator()
            for i in 0..<n { out[i] = UInt8(truncatingIfNeeded: g.next()) }
        }
        return out
    }
}
