import Foundation

/// A client error on `/api/push`: HTTP status, gorush's message, and (Pushgate) a detail naming the field.
public struct RequestError: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var message: String
    public var detail: String?

    public init(status: Int = 400, message: String, detail: String? = nil) {
        self.status = status
        self.message = message
        self.detail = detail
    }

    public var description: String { detail.map { "\(message) (\($0))" } ?? message }

    /// `{"code":400,"message":"..."}` plus `"detail"` when there is one.
    public var json: [UInt8] {
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("code", first: &first)
        w.int(status)
        w.key("message", first: &first)
        w.string(message)
        if let detail {
            w.key("detail", first: &first)
            w.string(detail)
        }
        w.raw("}")
        return w.bytes
    }

    public static let missingNotifications = "Missing notifications field."
    public static let emptyNotifications = "Notifications field is empty."
}

public enum RequestParser {
    /// Limits crossed answer 400 `"Request over a limit."` with the field and the configuration key.
    public static let overLimit = "Request over a limit."

    /// Parses and validates a `/api/push` body exactly as gorush answers it, with a `detail` naming
    /// the offending field where gorush's message would not: linear time whatever its shape, every
    /// limit of `limits` enforced, every number range-checked, the rules of `limits.platforms` applied
    /// (none without them: the server hands in the provider modules').
    public static func parse(_ body: [UInt8], limits: RequestLimits) throws(RequestError) -> PushRequest {
        if body.isEmpty || body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            throw RequestError(message: RequestError.missingNotifications, detail: "empty body")
        }
        let root: JSONValue
        do {
            root = try JSONParser.parse(body, limits: limits.json)
        } catch {
            switch error.kind {
            case .syntax, .numberOutOfRange:
                throw RequestError(message: RequestError.missingNotifications, detail: error.description)
            case .depth:
                throw RequestError(message: overLimit, detail: "\(error.description) (core.max_json_depth)")
            case .objectKeys:
                throw RequestError(message: overLimit, detail: "\(error.description) (core.max_object_keys)")
            case .stringBytes:
                throw RequestError(message: overLimit, detail: "\(error.description) (core.max_message_bytes)")
            case .values:
                // A fixed bound, not a configuration key: it keeps a flat 5 MB array from becoming millions of
                // values; naming core.max_body_bytes here sent operators to a key that does not change it.
                throw RequestError(message: overLimit, detail: "\(error.description) (a fixed limit)")
            }
        }
        // gorush's order: a missing/empty list and the notification count come before field errors.
        if case .object(let o) = root, case .array(let list) = FoldedMembers(o)["notifications"] ?? .null {
            if list.isEmpty { throw RequestError(message: RequestError.emptyNotifications) }
            if limits.maxNotifications > 0, list.count > limits.maxNotifications {
                throw RequestError(message: "Number of notifications(\(list.count)) over limit(\(limits.maxNotifications))")
            }
        }
        let request: PushRequest
        do {
            request = try PushRequestDecoder(limits: limits).request(root)
        } catch {
            if let limit = error.limit {
                throw RequestError(message: overLimit, detail: "\(error.field): \(error.problem) (\(limit))")
            }
            throw RequestError(message: RequestError.missingNotifications, detail: "\(error.field): \(error.problem)")
        }
        var deliveries = 0
        for (i, n) in request.notifications.enumerated() {
            if let rules = limits.platforms[n.platform] {
                if let r = rules.reservedKey(in: n.data) { throw PlatformRules.reservedKeyError(r, at: "notifications[\(i)]") }
                if let r = rules.reservedKey(in: n.fallback?.notification.data) {
                    throw PlatformRules.reservedKeyError(r, at: "notifications[\(i)].fallback")
                }
            }
            deliveries += n.deliveryCount(limits.platforms[n.platform])
        }
        if deliveries > limits.maxDeliveries {
            throw RequestError(
                message: overLimit,
                detail:
                    "notifications: \(deliveries) deliveries in one request, over the limit of \(limits.maxDeliveries) (core.max_deliveries_per_request)"
            )
        }
        return request
    }
}
