import Foundation
import PushgateCore

/// Field checks at ingest that turn into a 400 naming the field (beyond JSON types): the gateway's
/// own, then those of the provider module serving the notification's platform.
public enum IngestValidation {
    /// `priority` is any string, as in gorush: each provider maps the values it knows ("high"/"normal",
    /// "10"/"5") and ignores the rest.
    public static func validate(_ n: PushNotification) -> IngestProblem? {
        if let field = nulField(n) {
            return IngestProblem(message: "NUL characters (\\u0000) are not allowed", detail: "\(field): contains a NUL character (\\u0000)")
        }
        return ProviderRegistry.module(for: n.platform)?.checkIngest(n)
    }
}

extension IngestValidation {
    /// The first target field of `n` holding a NUL character (the JSON route refuses them while
    /// parsing; a gRPC string or a request built in code may carry one): a store column holds text up to its first
    /// NUL, so a target with one would be read back cut short and sent to another device.
    static func nulField(_ n: PushNotification) -> String? {
        func nul(_ s: String) -> Bool { s.utf8.contains(0) }
        if let k = n.tokens.firstIndex(where: nul) { return "tokens[\(k)]" }
        if let k = n.channels?.firstIndex(where: nul) { return "channels[\(k)]" }
        for (k, sub) in (n.subscriptions ?? []).enumerated() {
            if nul(sub.endpoint) { return "subscriptions[\(k)].endpoint" }
            if let keys = sub.keys, nul(keys.p256dh) || nul(keys.auth) { return "subscriptions[\(k)].keys" }
        }
        return nil
    }

    /// The checks `/api/push` makes on a request already decoded (a `PushRequest` built in code, the
    /// embedding API): the notification count, the reserved `data` keys of its platform (`PlatformRules`), tokens per notification and in all, token
    /// size, then each notification's field checks. The error names the field as the route's 400 does.
    public static func validate(request: PushRequest, limits: RequestLimits) -> RequestError? {
        if request.notifications.isEmpty, request.skipped.isEmpty { return RequestError(message: RequestError.emptyNotifications) }
        let count = request.notifications.count + request.skipped.count
        if limits.maxNotifications > 0, count > limits.maxNotifications {
            return RequestError(message: "Number of notifications(\(count)) over limit(\(limits.maxNotifications))")
        }
        var deliveries = 0
        for (i, n) in request.notifications.enumerated() {
            if let r = limits.platforms[n.platform]?.reservedKey(in: n.data) { return PlatformRules.reservedKeyError(r, at: "notifications[\(i)]") }
            let tokens = n.targetCount(limits.platforms[n.platform])
            let maxTokens = limits.maxTokens(for: n.platform)
            if tokens > maxTokens {
                return RequestError(
                    message: RequestParser.overLimit,
                    detail: "notifications[\(i)].tokens: \(tokens) tokens, over the limit of \(maxTokens) (\(n.platform.name).max_tokens)")
            }
            for (k, t) in n.tokens.enumerated() where t.utf8.count > limits.maxTokenBytes {
                return RequestError(
                    message: RequestParser.overLimit,
                    detail:
                        "notifications[\(i)].tokens[\(k)]: \(t.utf8.count) bytes, over the limit of \(limits.maxTokenBytes) (core.max_token_bytes)")
            }
            deliveries += n.deliveryCount(limits.platforms[n.platform])
            if let problem = validate(n) { return RequestError(message: problem.message, detail: "notifications[\(i)].\(problem.detail)") }
        }
        if deliveries > limits.maxDeliveries {
            return RequestError(
                message: RequestParser.overLimit,
                detail:
                    "notifications: \(deliveries) deliveries in one request, over the limit of \(limits.maxDeliveries) (core.max_deliveries_per_request)"
            )
        }
        return nil
    }
}

extension IngestValidation {
    /// `send_at` / `delay_seconds` against the clock: not beyond `core.max_schedule_horizon`, and
    /// not after the notification's own absolute `expiration` (it would be sent expired). A
    /// `send_at` in the past is sent now.
    public static func checkSchedule(request: PushRequest, limits: RequestLimits, now: Date) -> RequestError? {
        let horizon = Double(max(0, limits.maxScheduleHorizon))
        let t = now.timeIntervalSince1970
        for (i, n) in request.notifications.enumerated() {
            let field: String
            let at: Double
            if let s = n.sendAt {
                guard s.isFinite, s >= 0, s <= Schedule.maxUnixSeconds else {
                    return RequestError(
                        message: "send_at out of range", detail: "notifications[\(i)].send_at: out of range: must be between 1970 and 9999")
                }
                field = "send_at"
                at = s
            } else if let d = n.delaySeconds {
                guard d >= 0, Double(d) <= horizon else {
                    return RequestError(
                        message: "delay_seconds out of range",
                        detail: "notifications[\(i)].delay_seconds: out of range: must be between 0 and \(Int(horizon)) (core.max_schedule_horizon)")
                }
                field = "delay_seconds"
                at = t + Double(d)
            } else {
                continue
            }
            if at - t > horizon {
                return RequestError(
                    message: "send_at too far ahead",
                    detail:
                        "notifications[\(i)].\(field): more than \(Int(horizon)) seconds ahead (core.max_schedule_horizon)")
            }
            // (An `expiration` of 0 is APNs' "now or never": no deadline to hold a schedule to.)
            if (n.expiration ?? 0) > 0, let deadline = n.retryDeadline(acceptedAt: now, rules: limits.platforms[n.platform]),
                at > max(t, deadline.timeIntervalSince1970)
            {
                return RequestError(
                    message: "\(field) after expiration",
                    detail: "notifications[\(i)].\(field): after the notification's expiration (it would be sent expired)")
            }
        }
        return nil
    }
}
