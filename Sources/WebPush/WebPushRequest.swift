import Foundation
import PushgateCore

/// A Web Push / UnifiedPush notification rendered once: plaintext and the RFC 8030 headers.
public struct PreparedWebPush: PreparedPush, Sendable {
    public enum TTL: Sendable, Equatable {
        /// `time_to_live` (or the default): always this many seconds.
        case seconds(Int)
        /// `expiration` as an absolute UNIX time: the TTL shrinks as retries happen later.
        case until(epochSeconds: Int64)
    }

    public let platform: Platform
    /// The bytes delivered to the app (encrypted for subscriptions with keys, raw for legacy UnifiedPush).
    public let plaintext: [UInt8]
    public let ttl: TTL
    /// `very-low`, `low`, `normal` or `high`; nil = header omitted.
    public let urgency: String?
    /// `Topic` header (from `collapse_id`); nil = omitted.
    public let topic: String?

    /// The plaintext's size, which the limit applies to (3993 bytes encrypted, 4096 legacy).
    public var payloadBytes: Int? { plaintext.count }

    public init(platform: Platform, plaintext: [UInt8], ttl: TTL, urgency: String? = nil, topic: String? = nil) {
        self.platform = platform
        self.plaintext = plaintext
        self.ttl = ttl
        self.urgency = urgency
        self.topic = topic
    }

    /// The `TTL` header value at time `now`.
    public func ttlSeconds(now: Date = Date()) -> Int {
        switch ttl {
        case .seconds(let s): return s
        case .until(let t):
            let left = Double(t) - now.timeIntervalSince1970.rounded(.down)
            return left > 0 ? Int(min(left, Double(Int32.max))) : 0
        }
    }
}

/// Request-level rules for platforms `webpush` (4) and `unifiedpush` (5), usable at ingest
/// (`validate` returns the 400 detail naming the field) and by the providers (`prepare`).
public enum WebPushRequestValidator {
    /// `expiration` values below this are taken as relative seconds, above as a UNIX time (like APNs').
    public static let absoluteExpirationThreshold: Int64 = PushNotification.absoluteExpirationThreshold
    public static let urgencies: Set<String> = ["very-low", "low", "normal", "high"]
    /// Largest legacy (unencrypted) UnifiedPush body.
    public static let maxLegacyBodySize = 4096

    /// nil when the notification is acceptable, else a one-line message naming the field
    /// (e.g. `collapse_id: must be at most 32 URL-safe base64 characters ...`). Other platforms: nil.
    public static func validate(_ n: PushNotification) -> String? {
        guard n.platform == .webpush || n.platform == .unifiedpush else { return nil }
        if let why = checkHeaders(n) { return why }
        if n.platform == .webpush, !n.tokens.isEmpty {
            return
                "tokens: platform webpush takes \"subscriptions\" ({\"endpoint\",\"keys\":{\"p256dh\",\"auth\"}}); bare endpoint URLs are only accepted for platform unifiedpush"
        }
        if n.platform == .unifiedpush {
            for (i, t) in n.tokens.enumerated() where WebPushEndpoint(t) == nil {
                return "tokens[\(i)]: not an absolute http(s) endpoint URL"
            }
        }
        for (i, s) in (n.subscriptions ?? []).enumerated() {
            if WebPushEndpoint(s.endpoint) == nil { return "subscriptions[\(i)].endpoint: not an absolute https endpoint URL" }
            guard let keys = s.keys else {
                if n.platform == .webpush { return "subscriptions[\(i)].keys: required (p256dh and auth) for Web Push encryption" }
                continue
            }
            do { _ = try WebPushReceiverKeys.cached(keys) } catch let e as WebPushCryptoError {
                switch e {
                case .invalidAuthSecret(let why): return "subscriptions[\(i)].keys.auth: \(why)"
                case .invalidPublicKey(let why): return "subscriptions[\(i)].keys.p256dh: \(why)"
                default: return "subscriptions[\(i)].keys: \(e)"
                }
            } catch {
                return "subscriptions[\(i)].keys: \(error)"
            }
        }
        return nil
    }

    /// Checks of the header-producing fields only (`collapse_id`, `urgency`, `time_to_live`, `expiration`).
    public static func checkHeaders(_ n: PushNotification) -> String? {
        if let c = n.collapseID, !isValidTopic(c) {
            return "collapse_id: must be 1 to 32 URL-safe base64 characters (A-Z a-z 0-9 - _) for the Web Push Topic header, got \"\(c.prefix(40))\""
        }
        if let u = n.urgency, !urgencies.contains(u.lowercased()) {
            return "urgency: must be one of very-low, low, normal, high (got \"\(u.prefix(40))\")"
        }
        if let t = n.timeToLive, t < 0 { return "time_to_live: must be >= 0 seconds (got \(t))" }
        if let e = n.expiration, e < 0 { return "expiration: must be >= 0 (got \(e))" }
        return nil
    }

    /// RFC 8030 section 5.4: at most 32 characters from the URL and filename safe base64 alphabet.
    public static func isValidTopic(_ s: String) -> Bool {
        let u = s.utf8
        guard !u.isEmpty, u.count <= 32 else { return false }
        return u.allSatisfy { b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F
        }
    }

    /// The plaintext: `payload` byte for byte when given, else `{"title":..,"message":..,"data":{..}}`
    /// with only the fields that are set.
    public static func plaintext(of n: PushNotification) -> [UInt8] {
        if let p = n.payload { return Array(p.utf8) }
        var w = JSONWriter(reservingCapacity: 128)
        var first = true
        w.raw("{")
        if let t = n.title {
            w.key("title", first: &first)
            w.string(t)
        }
        if let m = n.message {
            w.key("message", first: &first)
            w.string(m)
        }
        if let d = n.data {
            w.key("data", first: &first)
            w.write(d)
        }
        w.raw("}")
        return w.bytes
    }

    /// Renders the notification (headers checked, plaintext built, size limit applied).
    /// Throws `PushFailure` (naming the field, or `PayloadTooLarge (N > 3993 bytes)`).
    public static func prepare(_ n: PushNotification, defaultTTL: Int = WebPushConfiguration.standardDefaultTTL) throws(PushFailure)
        -> PreparedWebPush
    {
        if let why = checkHeaders(n) { throw PushFailure(why) }
        let plaintext = plaintext(of: n)
        // Encrypted subscriptions fit 3993 bytes; a UnifiedPush request with only bare (legacy) endpoints 4096.
        let anyEncrypted = n.platform == .webpush || (n.subscriptions ?? []).contains { $0.keys != nil }
        let limit = anyEncrypted ? WebPushCrypto.maxPlaintextSize : maxLegacyBodySize
        if plaintext.count > limit { throw PushFailure.payloadTooLarge(size: plaintext.count, limit: limit) }
        let ttl: PreparedWebPush.TTL
        if let t = n.timeToLive {
            ttl = .seconds(Int(clamping: t))
        } else if let e = n.expiration {
            ttl = e >= absoluteExpirationThreshold ? .until(epochSeconds: e) : .seconds(Int(clamping: e))
        } else {
            ttl = .seconds(defaultTTL)
        }
        var urgency = n.urgency?.lowercased()
        if urgency == nil {
            switch n.priority?.lowercased() {
            case "high", "10": urgency = "high"
            case "normal", "5": urgency = "normal"
            default: break
            }
        }
        return PreparedWebPush(platform: n.platform, plaintext: plaintext, ttl: ttl, urgency: urgency, topic: n.collapseID)
    }
}
