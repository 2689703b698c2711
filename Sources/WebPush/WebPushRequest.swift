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
    public static let absoluteExpirationThreshold: Int64 = 1_000_000_000
    public static let urgencies: Set<String> = ["very-low", "low", "normal", "high"]
    /// Largest legacy (unencrypted) UnifiedPush body.
    public static let maxLegacyBodySize = 4096

    /// nil when the notification is acceptable, else a one-line message naming the field
    /// (e.g. `collapse_id: must be at most 32 URL-safe base64 characters ...`). Other platforms: nil.
    public static func validate(_ n: PushNotification) -> String? {
        guard n.platform == .webpush || n.platform == .unifiedpush else { return nil }
        if let why = checkHeaders(n) { return why }
        if n.platform == .webpush {
            if let why = checkDeclarative(n) { return why }
            if let f = n.fallback?.notification, let why = checkDeclarative(f) { return "fallback." + why }
        }
        if n.platform == .webpush, !n.tokens.isEmpty {
            return
                "tokens: platform webpush takes \"subscriptions\" ({\"endpoint\",\"keys\":{\"p256dh\",\"auth\"}}); bare endpoint URLs are only accepted for platform unifiedpush"
        }
        if n.platform == .unifiedpush {
            for (i, t) in n.tokens.enumerated() where WebPushEndpoint(t) == nil {
                return "tokens[\(i)]: not an absolute http(s) endpoint URL"
            }
            // With a `fallback`, an oversized rendering is what the fallback is for (sent instead).
            if n.fallback == nil, let why = checkUnifiedPushSize(n) { return why }
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

    /// UnifiedPush's limit on what a distributor's push server takes: 4096 bytes (AND_3 / RFC 8291:
    /// at most 3993 bytes of plaintext once encrypted for a subscription with keys; 4096 bytes as
    /// they are for a bare legacy endpoint). Names the field the plaintext came from.
    static func checkUnifiedPushSize(_ n: PushNotification) -> String? {
        let size = plaintext(of: n).count
        let field = n.payload != nil ? "payload" : "message"
        if (n.subscriptions ?? []).contains(where: { $0.keys != nil }) {
            let encrypted = size + WebPushCrypto.overhead
            if encrypted > maxLegacyBodySize {
                return
                    "\(field): the UnifiedPush message would be \(encrypted) bytes encrypted (\(size) bytes of plaintext), over the 4096-byte limit (3993 bytes of plaintext)"
            }
        } else if size > maxLegacyBodySize {
            return "\(field): the UnifiedPush message is \(size) bytes, over the 4096-byte limit"
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

    // MARK: Declarative Web Push (docs/declarative-web-push.md)

    /// The `web_push` member of a declarative push message (W3C Push API, "declarative push message").
    public static let declarativeMarker = 8030

    /// Whether `n` is sent as a declarative push message: platform webpush and `"declarative": true`, or
    /// neither `declarative` nor `payload` given and `webpush.declarative` (`byDefault`) on.
    public static func isDeclarative(_ n: PushNotification, byDefault: Bool) -> Bool {
        guard n.platform == .webpush else { return false }
        if let explicit = n.declarative { return explicit }
        return byDefault && n.payload == nil
    }

    /// Ingest checks of the declarative members of a platform webpush notification (the `webpush.declarative`
    /// default is the app's, unknown here: a notification that leaves `declarative` out is checked when sent).
    static func checkDeclarative(_ n: PushNotification) -> String? {
        let extra = n.navigate != nil ? "navigate" : n.silent != nil ? "silent" : nil
        if n.payload != nil {
            if n.declarative == true {
                return
                    "payload: not with \"declarative\": true (Pushgate renders the declarative message from title, message, navigate or data.url, badge, silent, collapse_id and data)"
            }
            if let extra { return "\(extra): only for a declarative Web Push message, not with payload (sent byte for byte)" }
        }
        if n.declarative == false, let extra { return "\(extra): only for a declarative Web Push message, and \"declarative\" is false" }
        if n.declarative == true, case .failure(let f) = declarativeNavigate(n) { return f.reason }
        if let url = n.navigate, let why = urlProblem(url) { return "navigate: " + why }
        return nil
    }

    /// The URL a click on `n`'s declarative message opens (`navigate`, else `data.url`), or why `n`
    /// cannot be a declarative message: a one-line message naming the field (title, navigate, data.url, badge).
    public static func declarativeNavigate(_ n: PushNotification) -> Result<String, PushFailure> {
        guard let title = n.title, !title.isEmpty else {
            return .failure(PushFailure("title: required (a non-empty string) for a declarative Web Push message"))
        }
        let url: String
        if let navigate = n.navigate {
            if let why = urlProblem(navigate) { return .failure(PushFailure("navigate: " + why)) }
            url = navigate
        } else if let fromData = n.data?["url"], fromData != .null {
            guard case .string(let s) = fromData else {
                return .failure(PushFailure("data.url: must be a string (the URL a declarative Web Push message opens)"))
            }
            if let why = urlProblem(s) { return .failure(PushFailure("data.url: " + why)) }
            url = s
        } else {
            return .failure(
                PushFailure("navigate: required for a declarative Web Push message (the URL a click opens): give navigate or data.url"))
        }
        if let badge = n.badge, badge < 0 {
            return .failure(PushFailure("badge: must be 0 or more for a declarative Web Push message's app_badge (got \(badge))"))
        }
        return .success(url)
    }

    /// Why `s` is not an absolute http(s) URL (no user info, no spaces or control characters), or nil.
    /// Absolute: Safari parses `navigate` without a base URL, so a relative one would not open anything.
    static func urlProblem(_ s: String) -> String? {
        if isAbsoluteHTTPURL(s) { return nil }
        return
            "must be an absolute http or https URL such as https://example.com/inbox (no user info, spaces or control characters), got \"\(s.prefix(80))\""
    }

    /// `http://` or `https://` (any case), then a host (a name, an IPv4 address or a bracketed IPv6 one;
    /// non-ASCII names allowed), an optional port 1-65535, then anything up to the end: no user info and
    /// no byte below 0x21 or 0x7F anywhere. Linear in the bytes.
    static func isAbsoluteHTTPURL(_ s: String) -> Bool {
        let u = Array(s.utf8)
        if u.contains(where: { $0 <= 0x20 || $0 == 0x7F }) { return false }
        func lower(_ b: UInt8) -> UInt8 { b >= 0x41 && b <= 0x5A ? b | 0x20 : b }
        let prefix: Int
        if u.count > 8, u[0..<8].map(lower).elementsEqual("https://".utf8) {
            prefix = 8
        } else if u.count > 7, u[0..<7].map(lower).elementsEqual("http://".utf8) {
            prefix = 7
        } else {
            return false
        }
        var end = prefix
        while end < u.count, u[end] != UInt8(ascii: "/"), u[end] != UInt8(ascii: "?"), u[end] != UInt8(ascii: "#") { end += 1 }
        let authority = u[prefix..<end]
        if authority.isEmpty || authority.contains(UInt8(ascii: "@")) || authority.contains(UInt8(ascii: "\\")) { return false }
        var host = authority
        var port: ArraySlice<UInt8>?
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")), close > authority.startIndex + 1 else { return false }
            host = authority[authority.startIndex...close]
            let after = authority[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { return false }
                port = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
            host = authority[..<colon]
            port = authority[(colon + 1)...]
        }
        if host.isEmpty { return false }
        if let port {
            guard (1...5).contains(port.count), port.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
            let value = port.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            guard (1...65535).contains(value) else { return false }
        }
        return true
    }

    /// The declarative push message of `n` opening `navigate` (from `declarativeNavigate`):
    /// `{"web_push":8030,"notification":{"title","body","navigate","tag","silent","data"},"app_badge":N}`
    /// with `body` from `message`, `tag` from `collapse_id`, `app_badge` from `badge`, only the members set.
    public static func declarativePlaintext(of n: PushNotification, navigate: String) -> [UInt8] {
        var w = JSONWriter(reservingCapacity: 256)
        var first = true
        w.raw("{\"web_push\":")
        w.int(declarativeMarker)
        w.raw(",\"notification\":{")
        w.key("title", first: &first)
        w.string(n.title ?? "")
        if let m = n.message {
            w.key("body", first: &first)
            w.string(m)
        }
        w.key("navigate", first: &first)
        w.string(navigate)
        if let tag = n.collapseID {
            w.key("tag", first: &first)
            w.string(tag)
        }
        if let silent = n.silent {
            w.key("silent", first: &first)
            if silent { w.raw("true") } else { w.raw("false") }
        }
        if let d = n.data {
            w.key("data", first: &first)
            w.write(d)
        }
        w.raw("}")
        if let badge = n.badge {
            w.raw(",\"app_badge\":")
            w.int(badge)
        }
        w.raw("}")
        return w.bytes
    }

    /// Renders the notification (headers checked, plaintext built, size limit applied): the declarative
    /// push message when `isDeclarative(n, byDefault: declarativeDefault)`, else `plaintext(of:)`.
    /// Throws `PushFailure` (naming the field, or `PayloadTooLarge (N > 3993 bytes)`).
    public static func prepare(
        _ n: PushNotification, defaultTTL: Int = WebPushConfiguration.standardDefaultTTL, declarativeDefault: Bool = false
    ) throws(PushFailure) -> PreparedWebPush {
        if let why = checkHeaders(n) { throw PushFailure(why) }
        let plaintext: [UInt8]
        if isDeclarative(n, byDefault: declarativeDefault) {
            if n.payload != nil { throw PushFailure("payload: not with \"declarative\": true") }
            switch declarativeNavigate(n) {
            case .failure(let f): throw f
            case .success(let url): plaintext = declarativePlaintext(of: n, navigate: url)
            }
        } else {
            if n.platform == .webpush, n.navigate != nil || n.silent != nil {
                throw PushFailure(
                    "\(n.navigate != nil ? "navigate" : "silent"): only for a declarative Web Push message: set \"declarative\": true (or webpush.declarative: true)"
                )
            }
            plaintext = Self.plaintext(of: n)
        }
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
        // UnifiedPush distributors act on Urgency (AND_3): say RFC 8030's default rather than omit it.
        if urgency == nil, n.platform == .unifiedpush { urgency = "normal" }
        return PreparedWebPush(platform: n.platform, plaintext: plaintext, ttl: ttl, urgency: urgency, topic: n.collapseID)
    }
}
