import Foundation

/// How a provider answered one delivery attempt, classified. Every provider response maps to one of these.
public enum SendOutcome: Sendable, Equatable {
    /// Accepted by the provider. `providerID` is e.g. the `apns-id` or the FCM message `name`;
    /// `detail`, what the provider's answer tells of the notification beyond its acceptance (WNS:
    /// `X-WNS-Status: dropped, X-WNS-DeviceConnectionStatus: disconnected`), kept in the delivery's
    /// status and events.
    case delivered(providerID: String?, detail: String? = nil)
    /// The token/subscription is dead (APNs 410, FCM UNREGISTERED, Web Push 404/410): report, never retry.
    case tokenDead(reason: String, status: Int?)
    /// Will not succeed if retried (bad request, payload too large, configuration error).
    case permanent(reason: String, status: Int?)
    /// Worth retrying later; `retryAfter` (seconds) when the provider said so.
    case transient(reason: String, status: Int?, retryAfter: Double?)
    /// Our credentials were refused as stale (ExpiredProviderToken, FCM 401): re-mint and retry once.
    case credentials(reason: String, status: Int?)
    /// The app's daily quota with the provider is used up (vendors that count pushes per day):
    /// failed, not retried; the provider holds further sends until its day resets.
    case quotaExceeded(reason: String, status: Int?)

    /// Every class name, in this order: metrics, the status page and the live stats show each.
    public static let classNames = ["delivered", "token_dead", "permanent", "transient", "credentials", "quota_exceeded"]

    public var isDelivered: Bool { if case .delivered = self { return true } else { return false } }

    /// The short error name reported to clients (gorush's `error` field), e.g. `BadDeviceToken`.
    public var reason: String? {
        switch self {
        case .delivered: return nil
        case .tokenDead(let r, _), .permanent(let r, _), .transient(let r, _, _), .credentials(let r, _), .quotaExceeded(let r, _): return r
        }
    }

    public var status: Int? {
        switch self {
        case .delivered: return nil
        case .tokenDead(_, let s), .permanent(_, let s), .transient(_, let s, _), .credentials(_, let s), .quotaExceeded(_, let s): return s
        }
    }

    /// Its class's position in `classNames` (arrays indexed by it spare a lookup by name per attempt).
    public var classIndex: Int {
        switch self {
        case .delivered: return 0
        case .tokenDead: return 1
        case .permanent: return 2
        case .transient: return 3
        case .credentials: return 4
        case .quotaExceeded: return 5
        }
    }

    /// A label for metrics: one of `classNames`.
    public var className: String {
        switch self {
        case .delivered: return "delivered"
        case .tokenDead: return "token_dead"
        case .permanent: return "permanent"
        case .transient: return "transient"
        case .credentials: return "credentials"
        case .quotaExceeded: return "quota_exceeded"
        }
    }
}

/// A failure found before any network call (validation, payload size, disabled platform).
public struct PushFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    /// Set for a payload over the provider's limit (`payloadTooLarge`): the rendering's size in bytes.
    public var size: Int?
    /// Set with `size`: the provider's limit in bytes.
    public var limit: Int?
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }

    /// Whether this is a rendering over the provider's size limit (a `fallback` may then be sent).
    public var isPayloadTooLarge: Bool { size != nil && limit != nil }

    public static func payloadTooLarge(size: Int, limit: Int) -> PushFailure {
        var f = PushFailure("PayloadTooLarge (\(size) > \(limit) bytes)")
        f.size = size
        f.limit = limit
        return f
    }

    /// The notification and its fallback are both over the limit.
    public static func payloadTooLarge(size: Int, limit: Int, fallbackSize: Int, fallbackLimit: Int) -> PushFailure {
        var f = PushFailure("PayloadTooLarge (\(size) > \(limit) bytes; fallback \(fallbackSize) > \(fallbackLimit) bytes)")
        f.size = size
        f.limit = limit
        return f
    }
}

/// Why a delivery was not sent although nothing failed (docs/delivery-controls.md).
public enum SkipReason: String, Sendable, Equatable, Codable {
    /// Another notification with the same `dedup_key` went to this token inside the TTL.
    case duplicate
    /// A later push of the same `collapse_id` replaced it inside its coalescing window.
    case coalesced
    /// Cancelled before it was sent (`DELETE /api/push/{notif_id}`).
    case cancelled
    /// Due outside its `deliver_between` window with `"quiet": "drop"`.
    case quietHours = "quiet_hours"
}

/// The final state of one delivery, after retries.
public enum FinalOutcome: Sendable, Equatable {
    /// `detail`: `SendOutcome.delivered`'s.
    case delivered(providerID: String?, detail: String? = nil)
    /// `tokenDead` tells whether the feedback hook should treat the token as gone.
    case failed(reason: String, tokenDead: Bool)
    /// Not sent, and not a failure: no feedback, not counted as success or error.
    case skipped(SkipReason)

    public var isDelivered: Bool { if case .delivered = self { return true } else { return false } }
}

/// gorush's log entry, used in sync responses and feedback POSTs.
public struct LogEntry: Sendable, Codable, Equatable {
    public var notifID: String
    public var type: String
    public var platform: String
    public var token: String
    public var message: String
    public var error: String

    public init(notifID: String, type: String = "failed-push", platform: String, token: String, message: String, error: String) {
        self.notifID = notifID
        self.type = type
        self.platform = platform
        self.token = token
        self.message = message
        self.error = error
    }

    enum CodingKeys: String, CodingKey {
        case notifID = "notif_id"
        case type, platform, token, message, error
    }

    /// Compact JSON with gorush's key order.
    public var json: [UInt8] {
        var w = JSONWriter(reservingCapacity: 192)
        write(into: &w)
        return w.bytes
    }

    public func write(into w: inout JSONWriter) {
        var first = true
        w.raw("{")
        w.key("notif_id", first: &first)
        w.string(notifID)
        w.key("type", first: &first)
        w.string(type)
        w.key("platform", first: &first)
        w.string(platform)
        w.key("token", first: &first)
        w.string(token)
        w.key("message", first: &first)
        w.string(message)
        w.key("error", first: &first)
        w.string(error)
        w.raw("}")
    }
}

/// gorush's token masking: the first 10 and the last 10 characters become `**********`; a token
/// under 20 characters is starred whole.
public enum TokenMask {
    public static func mask(_ token: String) -> String {
        let chars = Array(token)
        if chars.count < 20 { return String(repeating: "*", count: chars.count) }
        return "**********" + String(chars[10..<(chars.count - 10)]) + "**********"
    }

    public static func apply(_ token: String, hide: Bool) -> String { hide ? mask(token) : token }
}

extension String {
    /// The longest prefix of at most `maxBytes` UTF-8 bytes that ends on a scalar boundary (the whole
    /// string when it fits).
    public func prefix(utf8Bytes maxBytes: Int) -> String {
        let u = utf8
        guard u.count > maxBytes else { return self }
        var end = u.index(u.startIndex, offsetBy: Swift.max(0, maxBytes))
        while end > u.startIndex, u[end] & 0xC0 == 0x80 { end = u.index(before: end) }
        return String(decoding: u[..<end], as: UTF8.self)
    }

    /// A URL's scheme, host and port, for log lines (never its path, query or userinfo: they may
    /// carry a token or a password); nil when it does not parse as a URL.
    public var urlOriginForLogs: String? {
        guard let c = URLComponents(string: self) else { return nil }
        return "\(c.scheme ?? "")://\(c.host ?? "")\(c.port.map { ":\($0)" } ?? "")"
    }

    /// For log lines: control characters escaped (`\n` in a client's notif_id must not forge a log
    /// line) and cut at `max` UTF-8 bytes.
    public func logSafe(max: Int = 512) -> String {
        var out = ""
        var bytes = 0
        for u in unicodeScalars {
            let piece: String
            switch u.value {
            case 0..<0x20, 0x7F, 0x80..<0xA0, 0x2028, 0x2029: piece = "\\u{" + String(u.value, radix: 16) + "}"
            default: piece = String(u)
            }
            bytes += piece.utf8.count
            if bytes > max { return out + "…" }
            out += piece
        }
        return out
    }
}
