import Foundation
import Logging
import PushgateCore

/// What `/api/push` answers.
public struct SubmitResult: Sendable {
    /// gorush's `counts`.
    public var counts: Int
    /// Failed entries (sync mode; empty in async mode), held to `core.max_sync_answer_bytes`.
    public var logs: [LogEntry]
    /// Failed entries left out of `logs` for the size cap.
    public var omittedLogs: Int = 0
    /// Sync mode: deliveries not ended when `core.sync_timeout` ran out (they go on).
    public var pending: Int = 0
    /// The notif_id of each notification, given or generated, in request order ("" for a skipped one).
    public var notifIDs: [String]
    /// Names the request: a notification without `notif_id` gets `<requestID>-<index in the request>`.
    public var requestID: String
    /// Notifications sent as their `fallback` (over the provider's limit), in request order; at most
    /// one per notification.
    public var fallbacks: [FallbackUse] = []
    /// Fallbacks left out of `fallbacks` for the size cap (`core.max_sync_answer_bytes`).
    public var omittedFallbacks: Int = 0
    /// With `outcomes: true`: every delivery's final outcome (or `.pending` at the timeout), in request
    /// order, failures before sending included. Empty otherwise.
    public var outcomes: [DeliveryOutcome] = []
}

/// What a request comes to before anything is queued (`Dispatcher.plan`): the deliveries to queue,
/// those that fail before any network call, and what the answer says about the request.
struct SubmitPlan {
    /// The deliveries to queue, one per notification and target, in request order.
    var jobs: [DeliveryJob] = []
    /// Deliveries that fail before any network call: in the sync logs, in the delivery status,
    /// and (when the platform is served) counted, sent to the feedback hook and logged.
    var early: [(job: DeliveryJob, reason: String, served: Bool)] = []
    /// The position in the request of each entry of `jobs` and `early` (for `outcomes`).
    var jobPositions: [Int] = []
    var earlyPositions: [Int] = []
    /// gorush's `counts`: the served notifications' deliveries.
    var counts = 0
    /// In body order; a skipped notification (no, 0 or an unknown platform) has an empty slot.
    var notifIDs: [String]
    /// Notifications sent as their fallback, held to the answer's byte budget.
    var fallbacks: [FallbackUse] = []
    var fallbackBytes = 0
    var omittedFallbacks = 0
    /// What the planning found worth a log line or a metric, in request order (`announce` tells it).
    var notices: [Notice] = []

    enum Notice {
        /// A notification for a platform the app does not serve (or an app not configured).
        case notServed(notifID: String, reason: String)
        /// A notification over its provider's limit, sent as its fallback.
        case fallback(notifID: String, platform: Platform, info: FallbackInfo)
    }

    init(notifIDs count: Int) { notifIDs = [String](repeating: "", count: count) }

    /// The next position in the request (`jobs` and `early` together).
    private var position: Int { jobs.count + early.count }

    mutating func queue(_ job: DeliveryJob) {
        jobPositions.append(position)
        jobs.append(job)
    }

    mutating func failEarly(
        _ accepted: AcceptedNotification, _ target: PushTarget, _ reason: String, served: Bool = true, at t: Date, index: Int = -1
    ) {
        var job = DeliveryJob(id: 0, messageID: RandomID.uuid(), target: target, accepted: accepted, maxAttempts: 1, now: t)
        job.deliveryIndex = index
        earlyPositions.append(position)
        early.append((job, reason, served))
    }
}

/// A request's deliveries as `Dispatcher.enqueue` left them: stored (or failed before sending) and
/// stepped through their first transition, with the events to publish.
struct SubmittedDeliveries {
    /// The sync waiter of the request's deliveries (nil: nobody waits).
    var waiterID: UInt64?
    /// The queued deliveries' `accepted` events.
    var accepted: [DeliveryEvent] = []
    /// The failures before sending, as events (final at once).
    var rejected: [DeliveryEvent] = []
    /// The queue's answer for each job of the plan (`.duplicate`: not queued).
    var dispositions: [EnqueueDisposition] = []
}

extension Dispatcher {
    /// Validates, renders and queues every delivery of the request. In sync mode waits for them all.
    /// Throws `QueueFullError` (nothing was queued then).
    ///
    /// Three steps: `plan` (the request as deliveries, nothing changed yet), `enqueue` (stored all
    /// or nothing) and `report` (the events told, the answer built, waited for in sync mode).
    ///
    /// - Parameters:
    ///   - requestID: names the request (`X-Pushgate-Request-Id`); generated when nil.
    ///   - outcomes: also wait for every delivery (as in sync mode) and report each one's final outcome
    ///     in `SubmitResult.outcomes` (the embedding API). The failed entries in `logs` are as in sync mode.
    ///   - timeout: how long a waiting submission waits (default `core.sync_timeout`).
    ///   - traceParent: the W3C `traceparent` of the request's ingest span, kept with each accepted
    ///     notification: its delivery attempts' spans are its children (`DeliveryTracing.swift`).
    public func submit(
        _ request: PushRequest, sync: Bool, app appID: String = AppID.defaultApp, requestID: String? = nil,
        outcomes reportOutcomes: Bool = false, timeout: Double? = nil, traceParent: String? = nil
    ) async throws -> SubmitResult {
        let sync = sync || reportOutcomes
        let t = now()
        let app = self.app(appID)
        let requestID = requestID ?? RandomID.timeOrdered()
        var plan = Self.plan(
            request, app: app, rules: platformRules, appID: appID, requestID: requestID, fallbackBudget: answer.maxAnswerBytes,
            traceParent: traceParent, at: t)
        announce(plan, skipped: request.skipped, requestID: requestID, app: appID)
        let submitted = try await enqueue(&plan, app: app, appID: appID, sync: sync, reportOutcomes: reportOutcomes, at: t)
        return await report(plan, submitted, requestID: requestID, sync: sync, reportOutcomes: reportOutcomes, timeout: timeout, at: t)
    }

    /// The request as deliveries, deciding everything but storing nothing (only ids are drawn):
    /// per notification its notif_id, whether its platform is served, the platform's default
    /// coalescing window, its rendering or its fallback's (over the provider's limit), its attempts;
    /// per target a job, or a failure before sending (no targets, no rendering, a target the
    /// provider refuses). Logs and metrics are left to `announce`.
    static func plan(
        _ request: PushRequest, app: AppProviders?, rules platformRules: [Platform: PlatformRules], appID: String, requestID: String,
        fallbackBudget: Int, traceParent: String? = nil, at t: Date
    ) -> SubmitPlan {
        let slots = app?.slots ?? [:]
        let unavailable = app?.unavailable ?? [:]
        var plan = SubmitPlan(notifIDs: request.notifications.count + request.skipped.count)
        let bodyIndices = request.bodyIndices

        for (i, requested) in request.notifications.enumerated() {
            var n = requested
            let index = bodyIndices[i]
            let notifID = n.notifID ?? "\(requestID)-\(index)"
            if index < plan.notifIDs.count { plan.notifIDs[index] = notifID }
            let rules = platformRules[n.platform]
            let targets = n.targets(rules)
            guard let slot = slots[n.platform] else {
                let reason = app == nil ? "app \(appID) is not configured" : unavailable[n.platform] ?? "platform \(n.platform.name) is not enabled"
                plan.notices.append(.notServed(notifID: notifID, reason: reason))
                let rejected = AcceptedNotification(notifID: notifID, notification: n, prepared: nil, app: appID)
                for target in targets { plan.failEarly(rejected, target, reason, served: false, at: t) }
                continue
            }
            plan.counts += n.gorushCount
            if n.coalesceSeconds == nil, slot.coalesceSeconds > 0, !(n.collapseID ?? "").isEmpty, n.isBackgroundPush(rules), !n.hasSchedule {
                // The platform's default window for background pushes (kept with the notification).
                n.coalesceSeconds = slot.coalesceSeconds
            }
            if targets.isEmpty {
                plan.failEarly(
                    AcceptedNotification(notifID: notifID, notification: n, prepared: nil, app: appID), .token(""), "tokens must not be nil or empty",
                    at: t)
                continue
            }
            let prepared: any PreparedPush
            var sent: PushNotification
            let fallback: FallbackInfo?
            switch prepare(n, with: slot.provider) {
            case .failure(let failure):
                let rejected = AcceptedNotification(notifID: notifID, notification: n, prepared: nil, app: appID)
                for target in targets { plan.failEarly(rejected, target, failure.reason, at: t) }
                continue
            case .success(let r):
                (sent, prepared, fallback) = r
            }
            // A fallback is dedup'd and coalesced as its notification (the platform default included).
            sent.dedupKey = n.dedupKey
            sent.coalesceSeconds = n.coalesceSeconds
            // Its time, absolute (`delay_seconds` counts from now; the stored notification keeps
            // `send_at` for a restart), and its delivery window.
            sent.sendAt = n.sendAt ?? n.delaySeconds.map { t.timeIntervalSince1970 + Double($0) }
            sent.deliverBetween = n.deliverBetween
            sent.quiet = n.quiet
            let start = Self.firstSendTime(sent, acceptedAt: t)
            if let fallback {
                // Held to the answer's byte budget, as the logs are (a notif_id is up to max_field_bytes).
                plan.fallbackBytes += notifID.utf8.count + 96
                if plan.fallbackBytes <= fallbackBudget {
                    plan.fallbacks.append(FallbackUse(notifID: notifID, platform: n.platform, info: fallback))
                } else {
                    plan.omittedFallbacks += 1
                }
                plan.notices.append(.fallback(notifID: notifID, platform: n.platform, info: fallback))
            }
            // Sent as its fallback: the fallback is what is stored (and re-rendered after a restart).
            let accepted = AcceptedNotification(
                notifID: notifID, notification: sent, prepared: prepared, app: appID, fallback: fallback, traceParent: traceParent)
            let maxAttempts = RetryPolicy.maxAttempts(requestRetry: n.retry, providerMaxRetry: slot.maxRetry)
            for (k, target) in targets.enumerated() {
                if let failure = slot.provider.validate(target: target, of: prepared) {
                    plan.failEarly(accepted, target, failure.reason, at: t, index: k)
                    continue
                }
                let messageID = prepared.messageID ?? RandomID.uuid()
                var job = DeliveryJob(id: 0, messageID: messageID, target: target, accepted: accepted, maxAttempts: maxAttempts, now: t)
                job.deliveryIndex = k
                job.notBefore = start
                plan.queue(job)
            }
        }
        return plan
    }

    /// When a notification's deliveries may first be sent: its `send_at` (a past one: now), moved to
    /// the next start of its `deliver_between` window unless it drops deliveries due outside it
    /// (those are judged when due, `Dispatcher.process`).
    static func firstSendTime(_ n: PushNotification, acceptedAt t: Date) -> Date {
        var start = t
        if let s = n.sendAt, s > t.timeIntervalSince1970 { start = Date(timeIntervalSince1970: s) }
        if let w = n.deliverBetween, n.quiet != .drop { start = w.nextAllowed(atOrAfter: start) }
        return start
    }

    /// Tells what the planning found: one log line for the skipped notifications of a request (a
    /// body of 100 such notifications must not make 100 lines), one for each notification not
    /// served, and each fallback used (a metric and a debug line). Before anything is queued, so
    /// these are told for a request then refused (the queue full) as well.
    func announce(_ plan: SubmitPlan, skipped: [SkippedNotification], requestID: String, app appID: String) {
        if let first = skipped.first {
            logger.warning(
                "notifications skipped: \(first.reason.logSafe())",
                metadata: [
                    "count": "\(skipped.count)",
                    "notif_ids":
                        "\(skipped.prefix(5).map { ($0.notifID ?? "\(requestID)-\($0.index)").logSafe(max: 128) }.joined(separator: ","))",
                ])
        }
        for notice in plan.notices {
            switch notice {
            case .notServed(let notifID, let reason):
                logger.warning("notification skipped: \(reason)", metadata: ["notif_id": "\(notifID.logSafe())"])
            case .fallback(let notifID, let platform, let fallback):
                metricsSink.fallback(app: appID, platform: platform)
                logger.debug(
                    "payload over the limit: sending the fallback",
                    metadata: [
                        "notif_id": "\(notifID.logSafe())", "platform": "\(platform.name)", "payload_bytes": "\(fallback.payloadBytes)",
                        "limit": "\(fallback.limit)", "fallback_bytes": "\(fallback.fallbackBytes)",
                    ])
            }
        }
    }

    /// Gives the planned deliveries their ids, registers the sync waiter (in sync mode), steps each
    /// job through `accepted` and each failure before sending through `rejected`, and stores both in
    /// one write: a request answered 200 has every status record. The app's own share of the queue
    /// is reserved first (one app cannot fill the queue for the others). On `QueueFullError` or a
    /// store's refusal nothing is queued: the share and the waiter are given back and it throws.
    func enqueue(
        _ plan: inout SubmitPlan, app: AppProviders?, appID: String, sync: Bool, reportOutcomes: Bool, at t: Date
    ) async throws -> SubmittedDeliveries {
        let firstID = makeJobIDs(plan.jobs.count + plan.early.count)
        for i in plan.jobs.indices { plan.jobs[i].id = firstID + UInt64(i) }
        for i in plan.early.indices { plan.early[i].job.id = firstID + UInt64(plan.jobs.count + i) }

        var out = SubmittedDeliveries()
        if sync {
            // Scheduled deliveries are not waited for: the answer counts them as pending.
            var expected: [Int: DeliveryOutcome]?
            if reportOutcomes {
                expected = [:]
                for (i, job) in plan.jobs.enumerated() where !job.isScheduled {
                    expected?[plan.jobPositions[i]] = DeliveryOutcome(job, nil, position: plan.jobPositions[i])
                }
            }
            let waited = plan.jobs.reduce(0) { $0 + ($1.isScheduled ? 0 : 1) }
            let id = waiters.register(count: waited, budget: answer.maxAnswerBytes, outcomes: expected)
            out.waiterID = id
            for i in plan.jobs.indices where !plan.jobs[i].isScheduled {
                plan.jobs[i].waiterID = id
                plan.jobs[i].waiterPosition = plan.jobPositions[i]
            }
        }
        for i in plan.jobs.indices {
            let step = lifecycle.step(plan.jobs[i], .accepted, now: t)
            plan.jobs[i] = step.job
            for case .emit(let e) in step.effects { out.accepted.append(e) }
        }
        // Failures found before any network call are final at once: stored for the status in the
        // same write as the request's queued deliveries, then told to the sinks (`report`).
        // Deliveries to a platform that is not served are reported in the logs only (not counted,
        // no feedback).
        var rejected: [(job: DeliveryJob, reason: String)] = []
        for f in plan.early {
            let step = lifecycle.step(f.job, .rejected(reason: f.reason, served: f.served), now: t)
            for effect in step.effects {
                switch effect {
                case .recordFailedBeforeSending(let reason): rejected.append((step.job, reason))
                case .emit(let e): out.rejected.append(e)
                default: break
                }
            }
        }
        let jobs = plan.jobs
        if !jobs.isEmpty || !rejected.isEmpty {
            if !jobs.isEmpty, let full = appPending.reserve(appID, jobs.count, limit: app?.maxPending ?? 0, queuePending: queue.pendingCount) {
                if let waiterID = out.waiterID { waiters.cancel(waiterID) }
                throw QueueFullError(pending: full, capacity: app?.maxPending ?? 0, app: appID)
            }
            do {
                out.dispositions = try await queue.enqueue(jobs, failedBeforeSending: rejected)
            } catch {
                if !jobs.isEmpty { appPending.release(appID, jobs.count) }
                if let waiterID = out.waiterID { waiters.cancel(waiterID) }
                throw error
            }
        }
        return out
    }

    /// Tells the sinks what became of the request (its count, the accepted deliveries, the
    /// duplicates of a `dedup_key`, which end here unsent and not failed, and the failures before
    /// sending), then builds the answer: in sync mode after waiting for the deliveries' outcomes
    /// (at most `timeout`), with the failed entries and, with `outcomes`, each delivery's outcome.
    func report(
        _ plan: SubmitPlan, _ submitted: SubmittedDeliveries, requestID: String, sync: Bool, reportOutcomes: Bool, timeout: Double?,
        at t: Date
    ) async -> SubmitResult {
        let jobs = plan.jobs
        var duplicates: [DeliveryEvent] = []
        for (i, d) in submitted.dispositions.enumerated() where i < jobs.count && d == .duplicate {
            for case .emit(let e) in lifecycle.step(jobs[i], .skipped(.duplicate), now: t).effects { duplicates.append(e) }
        }
        publish(.submitted(counts: plan.counts, queued: jobs.count - duplicates.count))
        publish(submitted.accepted)
        publish(duplicates)

        var unavailableEntries = BoundedLogs(budget: sync ? answer.maxAnswerBytes : 0)
        var failedNow = BoundedLogs(budget: sync ? answer.maxAnswerBytes : 0)
        var earlyOutcomes: [DeliveryOutcome] = []
        if reportOutcomes {
            let early = plan.early
            let positionOfJob = Dictionary(uniqueKeysWithValues: early.indices.map { (early[$0].job.id, plan.earlyPositions[$0]) })
            for case .finished(let job, let final, _, _) in submitted.rejected {
                earlyOutcomes.append(DeliveryOutcome(job, final, position: positionOfJob[job.id] ?? 0))
            }
        }
        publish(submitted.rejected)
        for e in submitted.rejected {
            guard case .finished(_, _, let phase, let entry?) = e else { continue }
            if phase == .notServed { unavailableEntries.append(entry) } else { failedNow.append(entry) }
        }

        var result = SubmitResult(counts: plan.counts, logs: [], notifIDs: plan.notifIDs, requestID: requestID, fallbacks: plan.fallbacks)
        result.omittedFallbacks = plan.omittedFallbacks
        if let waiterID = submitted.waiterID {
            let waited = await waiters.wait(waiterID, timeout: timeout ?? answer.syncTimeout)
            var logs = BoundedLogs(budget: answer.maxAnswerBytes)
            logs.append(contentsOf: unavailableEntries)
            logs.append(contentsOf: failedNow)
            logs.append(contentsOf: waited.logs)
            result.logs = logs.entries
            result.omittedLogs = logs.omitted
            var scheduled: [DeliveryOutcome] = []
            for (i, job) in jobs.enumerated() where job.isScheduled && submitted.dispositions.indices.contains(i) {
                guard submitted.dispositions[i] != .duplicate else { continue }
                scheduled.append(DeliveryOutcome(job, nil, position: plan.jobPositions[i]))
            }
            result.pending = waited.pending + scheduled.count
            if reportOutcomes {
                result.outcomes = (earlyOutcomes + waited.outcomes + scheduled).sorted { $0.position < $1.position }
            }
        }
        return result
    }
}
