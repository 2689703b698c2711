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
            let tokens = n.tokens.count + (n.subscriptions?.count ?? 0) + (n.channels?.count ?? 0)
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
