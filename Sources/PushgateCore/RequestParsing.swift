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

    /// Parses a `/api/push` body as gorush reads it, with a `detail` naming the offending field where
    /// gorush's message would not: linear time whatever its shape, the JSON and per-field limits of
    /// `limits` enforced, every number range-checked, each member read as `limits.platforms` says.
    /// The request's limits and rules as a whole (reserved `data` keys, deliveries in all) are the
    /// gateway's (`IngestValidation`), checked once for every way in.
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
        // The request's limits and each notification's rules are checked by the gateway
        // (`IngestValidation`), once, for every way in.
        return request
    }
}

/// The rules a decoded request is held to as a whole, whatever way it came in (the gateway runs
/// them once, `IngestValidation`; the parser only parses): in gorush's order, the notification
/// count, the reserved `data` keys of each platform (a fallback's data included), the targets of
/// each notification and the bytes of each token, and the deliveries of the request.
extension RequestLimits {
    public func check(_ request: PushRequest) -> RequestError? {
        if let problem = checkCount(request) { return problem }
        for (i, n) in request.notifications.enumerated() {
            if let problem = checkReservedKeys(n, at: i) { return problem }
        }
        for (i, n) in request.notifications.enumerated() {
            if let problem = checkTargets(n, at: i) { return problem }
        }
        return checkDeliveries(request)
    }

    public func checkCount(_ request: PushRequest) -> RequestError? {
        if request.notifications.isEmpty, request.skipped.isEmpty { return RequestError(message: RequestError.emptyNotifications) }
        let count = request.notifications.count + request.skipped.count
        if maxNotifications > 0, count > maxNotifications {
            return RequestError(message: "Number of notifications(\(count)) over limit(\(maxNotifications))")
        }
        return nil
    }

    public func checkReservedKeys(_ n: PushNotification, at i: Int) -> RequestError? {
        guard let rules = platforms[n.platform] else { return nil }
        if let r = rules.reservedKey(in: n.data) { return PlatformRules.reservedKeyError(r, at: "notifications[\(i)]") }
        if let r = rules.reservedKey(in: n.fallback?.notification.data) {
            return PlatformRules.reservedKeyError(r, at: "notifications[\(i)].fallback")
        }
        return nil
    }

    /// `<platform>.max_tokens` and `core.max_token_bytes`.
    public func checkTargets(_ n: PushNotification, at i: Int) -> RequestError? {
        let tokens = n.targetCount(platforms[n.platform])
        let maxTokens = maxTokens(for: n.platform)
        if tokens > maxTokens {
            return RequestError(
                message: RequestParser.overLimit,
                detail: "notifications[\(i)].tokens: \(tokens) tokens, over the limit of \(maxTokens) (\(n.platform.name).max_tokens)")
        }
        for (k, t) in n.tokens.enumerated() where t.utf8.count > maxTokenBytes {
            return RequestError(
                message: RequestParser.overLimit,
                detail: "notifications[\(i)].tokens[\(k)]: \(t.utf8.count) bytes, over the limit of \(maxTokenBytes) (core.max_token_bytes)")
        }
        return nil
    }

    /// `core.max_deliveries_per_request`.
    public func checkDeliveries(_ request: PushRequest) -> RequestError? {
        let deliveries = request.notifications.reduce(0) { $0 + $1.deliveryCount(platforms[$1.platform]) }
        if deliveries > maxDeliveries {
            return RequestError(
                message: RequestParser.overLimit,
                detail:
                    "notifications: \(deliveries) deliveries in one request, over the limit of \(maxDeliveries) (core.max_deliveries_per_request)"
            )
        }
        return nil
    }
}
