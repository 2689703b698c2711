import Crypto
import Foundation
import Signing

/// A configuration or key error with a one-line message naming the configuration key.
public struct WebPushConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The application server's VAPID key pair (RFC 8292): a P-256 key, given as the base64url raw
/// 32-byte private scalar (`webpush.vapid_private_key`); the public key is derived.
public struct VAPIDKeys: Sendable {
    public let privateKey: P256.Signing.PrivateKey
    /// base64url (no padding) of the raw 32-byte private scalar.
    public let privateKeyBase64URL: String
    /// base64url (no padding) of the 65-byte uncompressed public point: the `k=` parameter and the
    /// `applicationServerKey` browsers and UnifiedPush distributors subscribe with.
    public let publicKeyBase64URL: String

    public init(privateKey: P256.Signing.PrivateKey) {
        self.privateKey = privateKey
        self.privateKeyBase64URL = Base64URL.encode(privateKey.rawRepresentation)
        self.publicKeyBase64URL = Base64URL.encode(privateKey.publicKey.x963Representation)
    }

    /// Parses `webpush.vapid_private_key`: base64url (or base64) of the 32-byte P-256 private scalar.
    /// A PEM (PKCS#8 / SEC1) key is accepted too, for keys made with `openssl ecparam`.
    public init(privateKeyBase64URL string: String) throws {
        let trimmed = string.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.isEmpty {
            throw WebPushConfigurationError("webpush.vapid_private_key is empty (generate a pair with `pushgate vapid-keys`)")
        }
        if trimmed.hasPrefix("-----BEGIN") {
            do { self.init(privateKey: try P256.Signing.PrivateKey(pemRepresentation: trimmed)) } catch {
                throw WebPushConfigurationError("webpush.vapid_private_key: not a P-256 PEM private key")
            }
            return
        }
        guard let raw = Base64URL.decode(trimmed) else {
            throw WebPushConfigurationError("webpush.vapid_private_key: not base64url")
        }
        guard raw.count == 32 else {
            throw WebPushConfigurationError(
                "webpush.vapid_private_key: expected the 32-byte raw P-256 private key in base64url, got \(raw.count) bytes")
        }
        do { self.init(privateKey: try P256.Signing.PrivateKey(rawRepresentation: raw)) } catch {
            throw WebPushConfigurationError("webpush.vapid_private_key: not a valid P-256 private key")
        }
    }

    /// A new random key pair (for `pushgate vapid-keys`).
    public static func generate() -> VAPIDKeys { VAPIDKeys(privateKey: P256.Signing.PrivateKey()) }

    /// The text `pushgate vapid-keys` prints: the config line and the public key for clients.
    public var summary: String {
        """
        webpush:
          vapid_private_key: "\(privateKeyBase64URL)"
        # public key (applicationServerKey for PushManager.subscribe / UnifiedPush VAPID):
        # \(publicKeyBase64URL)
        """
    }
}

/// Validates `webpush.vapid_subject`: a `mailto:` address or an `https:` URL (RFC 8292 section 2.1).
public func validateVAPIDSubject(_ subject: String) throws {
    let s = subject.trimmingCharacters(in: .whitespaces)
    if s.isEmpty { throw WebPushConfigurationError("webpush.vapid_subject is empty (use mailto:you@example.com or an https: URL)") }
    if s.lowercased().hasPrefix("mailto:") {
        let addr = s.dropFirst(7)
        guard let at = addr.firstIndex(of: "@"), at != addr.startIndex, addr.index(after: at) != addr.endIndex,
            !addr.contains(where: { $0 == " " })
        else {
            throw WebPushConfigurationError("webpush.vapid_subject: \"\(s)\" is not a mailto: address")
        }
        return
    }
    if s.lowercased().hasPrefix("https://") {
        guard s.count > 8, let url = URL(string: s), let host = url.host, !host.isEmpty else {
            throw WebPushConfigurationError("webpush.vapid_subject: \"\(s)\" is not a valid https: URL")
        }
        return
    }
    throw WebPushConfigurationError("webpush.vapid_subject must start with mailto: or https: (got \"\(s)\")")
}

/// Mints and caches the VAPID `Authorization` header per push-service origin.
///
/// The JWT is `{"typ":"JWT","alg":"ES256"}` / `{"aud":origin,"exp":now+validity,"sub":subject}`;
/// a cached header is reused until `refreshMargin` before its `exp`.
public final class VAPIDAuthorizer: @unchecked Sendable {
    public let keys: VAPIDKeys
    public let subject: String
    public let validity: TimeInterval
    public let refreshMargin: TimeInterval
    /// Cap on cached origins (endpoints come from users); the cache is cleared when exceeded.
    public let maxCachedOrigins: Int
    private let signer: JWTSigner
    private let now: @Sendable () -> Date
    private let lock = NSLock()
    private var cache: [String: (header: String, expires: Int64)] = [:]

    public init(
        keys: VAPIDKeys, subject: String, validity: TimeInterval = 12 * 3600, refreshMargin: TimeInterval = 3600,
        maxCachedOrigins: Int = 10_000, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.keys = keys
        self.subject = subject
        self.validity = validity
        self.refreshMargin = refreshMargin
        self.maxCachedOrigins = maxCachedOrigins
        self.signer = JWTSigner(key: .es256(keys.privateKey))
        self.now = now
    }

    /// `vapid t=<jwt>, k=<public key>` for the given origin (`scheme://host[:port]`).
    public func authorization(origin: String) throws -> String {
        let t = Int64(now().timeIntervalSince1970)
        lock.lock()
        if let hit = cache[origin], TimeInterval(hit.expires - t) > refreshMargin {
            lock.unlock()
            return hit.header
        }
        lock.unlock()
        let exp = t + Int64(validity)
        let jwt = try signer.sign(
            header: [("typ", .string("JWT"))],
            claims: [("aud", .string(origin)), ("exp", .int(exp)), ("sub", .string(subject))])
        let header = "vapid t=\(jwt), k=\(keys.publicKeyBase64URL)"
        lock.lock()
        if cache.count >= maxCachedOrigins { cache.removeAll(keepingCapacity: true) }
        cache[origin] = (header, exp)
        lock.unlock()
        return header
    }

    /// Forgets the cached header of an origin (after a 401/403, so the next send re-mints).
    public func invalidate(origin: String) {
        lock.lock()
        cache[origin] = nil
        lock.unlock()
    }

    public var cachedOrigins: Int {
        lock.lock()
        defer { lock.unlock() }
        return cache.count
    }
}
