import Foundation
import NIOConcurrencyHelpers
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

    /// Every check a decoded request is held to beyond its JSON types, in one place for every way in
    /// (the parser only parses): the request's rules as a whole (`RequestLimits.check`), then each notification's
    /// fields (`validate(notification:at:)`). The first problem, naming the field as the route's 400 does.
    public static func validate(request: PushRequest, limits: RequestLimits) -> RequestError? {
        if let problem = limits.check(request) { return problem }
        for (i, n) in request.notifications.enumerated() {
            if let problem = validate(notification: n, at: i) { return problem }
        }
        return nil
    }

    /// One notification's field checks (the gateway's, then its provider module's), named as the
    /// `i`th of its request.
    public static func validate(notification n: PushNotification, at i: Int) -> RequestError? {
        validate(n).map { RequestError(message: $0.message, detail: "notifications[\(i)].\($0.detail)") }
    }

    /// The checks of `validate(request:limits:)`, but a notification that fails its own (reserved
    /// keys, targets, fields) is moved to `skipped` (the problem its reason) so that the others are
    /// queued: the Matrix API answers per device. The request's count and deliveries still refuse
    /// it whole.
    public static func skippingRefused(_ request: PushRequest, limits: RequestLimits) -> Result<PushRequest, RequestError> {
        if let problem = limits.checkCount(request) { return .failure(problem) }
        var kept: [PushNotification] = []
        var skipped: [SkippedNotification] = []
        kept.reserveCapacity(request.notifications.count)
        var earlier = request.skipped.makeIterator()
        var nextEarlier = earlier.next()
        for (k, (i, n)) in zip(request.bodyIndices, request.notifications).enumerated() {
            while let s = nextEarlier, s.index < i {
                skipped.append(s)
                nextEarlier = earlier.next()
            }
            if let problem = limits.checkReservedKeys(n, at: k) ?? limits.checkTargets(n, at: k) ?? validate(notification: n, at: k) {
                skipped.append(SkippedNotification(index: i, notifID: n.notifID, reason: "refused: \(problem.detail ?? problem.message)"))
            } else {
                kept.append(n)
            }
        }
        while let s = nextEarlier {
            skipped.append(s)
            nextEarlier = earlier.next()
        }
        var out = request
        out.notifications = kept
        out.skipped = skipped
        if let problem = limits.checkDeliveries(out) { return .failure(problem) }
        return .success(out)
    }
}

extension IngestValidation {
    /// The app's providers' own checks (`PushProvider.checkIngest`: rules that need the app's
    /// configuration), run once the app is known. The first problem refuses the request, naming the
    /// field; with `alone` (the Matrix API) that notification is moved to `skipped` instead.
    public static func checkProviders(
        _ request: PushRequest, alone: Bool, provider: (Platform) -> (any PushProvider)?
    ) -> Result<PushRequest, RequestError> {
        var refused: [(Int, IngestProblem)] = []
        for (k, n) in request.notifications.enumerated() {
            guard let problem = provider(n.platform)?.checkIngest(n) else { continue }
            if !alone { return .failure(RequestError(message: problem.message, detail: "notifications[\(k)].\(problem.detail)")) }
            refused.append((k, problem))
        }
        return .success(skipping(refused, of: request))
    }

    /// How long `checkProvidersAsync` waits for the providers' answers before it accepts.
    public static let asyncCheckDeadline: Duration = .seconds(2)

    /// The app's providers' checks that wait on the network (`PushProvider.checkIngestAsync`), run
    /// after every synchronous check passed: each provider once, with its notifications of the
    /// request, all at once. Problems as `checkProviders`' (with `alone`, the notification is moved
    /// to `skipped`). Waits at most `deadline`: past it, or when a provider cannot tell (a DNS
    /// failure), the request goes on and the send-time checks decide.
    public static func checkProvidersAsync(
        _ request: PushRequest, alone: Bool, provider: (Platform) -> (any PushProvider)?, deadline: Duration = asyncCheckDeadline
    ) async -> Result<PushRequest, RequestError> {
        // Each provider's notifications, by their index in the request.
        var groups: [(provider: any PushProvider, indices: [Int])] = []
        var groupOf: [Platform: Int] = [:]
        var without: Set<Platform> = []
        for (k, n) in request.notifications.enumerated() where !without.contains(n.platform) {
            if let g = groupOf[n.platform] {
                groups[g].indices.append(k)
            } else if let p = provider(n.platform), p.checksIngestAsync {
                groupOf[n.platform] = groups.count
                groups.append((p, [k]))
            } else {
                without.insert(n.platform)
            }
        }
        guard !groups.isEmpty else { return .success(request) }
        let notifications = request.notifications
        let work = groups
        let answers = await firstOf(deadline: deadline) { () async -> [(Int, IngestProblem)] in
            await withTaskGroup(of: [(Int, IngestProblem)].self) { group in
                for g in work {
                    group.addTask {
                        let problems = await g.provider.checkIngestAsync(g.indices.map { notifications[$0] })
                        return problems.compactMap { i, p in g.indices.indices.contains(i) ? (g.indices[i], p) : nil }
                    }
                }
                var all: [(Int, IngestProblem)] = []
                for await part in group { all += part }
                return all
            }
        }
        guard let refused = answers?.sorted(by: { $0.0 < $1.0 }), !refused.isEmpty else { return .success(request) }
        if !alone, let (k, problem) = refused.first {
            return .failure(RequestError(message: problem.message, detail: "notifications[\(k)].\(problem.detail)"))
        }
        return .success(skipping(refused, of: request))
    }

    /// `work`'s answer, or nil once `deadline` passed first. The work is not awaited past the
    /// deadline: it goes on alone and its answer is dropped (its own bounds end it).
    static func firstOf<T: Sendable>(deadline: Duration, _ work: @escaping @Sendable () async -> T) async -> T? {
        let done = NIOLockedValueBox<CheckedContinuation<T?, Never>?>(nil)
        return await withCheckedContinuation { (c: CheckedContinuation<T?, Never>) in
            done.withLockedValue { $0 = c }
            @Sendable func finish(_ value: T?) {
                let waiting = done.withLockedValue { c -> CheckedContinuation<T?, Never>? in
                    defer { c = nil }
                    return c
                }
                waiting?.resume(returning: value)
            }
            let task = Task { await work() }
            let timer = Task {
                guard (try? await Task.sleep(for: deadline)) != nil else { return }
                finish(nil)
                task.cancel()
            }
            Task {
                finish(await task.value)
                timer.cancel()
            }
        }
    }

    /// `request` with the notifications at `refused` (indices into its notifications) moved to
    /// `skipped`, each with its problem as the reason.
    static func skipping(_ refused: [(Int, IngestProblem)], of request: PushRequest) -> PushRequest {
        guard !refused.isEmpty else { return request }
        var out = request
        let indices = request.bodyIndices
        var skipped = request.skipped
        for (k, problem) in refused {
            let n = request.notifications[k]
            skipped.append(
                SkippedNotification(index: indices[k], notifID: n.notifID, reason: "refused: notifications[\(k)].\(problem.detail)"))
        }
        skipped.sort { $0.index < $1.index }
        let refusedAt = Set(refused.map(\.0))
        out.notifications = request.notifications.enumerated().filter { !refusedAt.contains($0.offset) }.map(\.element)
        out.skipped = skipped
        return out
    }

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
