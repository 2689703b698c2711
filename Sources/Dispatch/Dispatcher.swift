import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore

/// A provider and how the dispatcher drives it.
public struct ProviderSlot: Sendable {
    public var provider: any PushProvider
    /// `<provider>.max_retry`: retries after the first attempt.
    public var maxRetry: Int
    /// Deliveries in flight at once for this provider.
    public var concurrency: Int
    /// `<platform>.coalesce_seconds`: the coalescing window of background pushes with a
    /// `collapse_id` that do not set `coalesce_seconds` (0: none).
    public var coalesceSeconds: Int

    public init(provider: any PushProvider, maxRetry: Int = 3, concurrency: Int = 256, coalesceSeconds: Int = 0) {
        self.provider = provider
        self.maxRetry = maxRetry
        self.concurrency = max(1, concurrency)
        self.coalesceSeconds = max(0, coalesceSeconds)
    }
}

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

/// Fans requests out to per-provider worker pools fed by the queue, steps each delivery through
/// `DeliveryLifecycle`, carries out its effects and publishes its events to one list of sinks
/// (stats, metrics, the engine's status records, feedback hook, logs, sync waiters).
public final class Dispatcher: Sendable {
    public let queue: any QueueDriver
    public let stats: Stats
    /// Where `GET /api/push/{notif_id}` reads (nil: the engine keeps no records).
    public let statusSource: (any DeliveryStatusSource)?
    /// Where `Idempotency-Key`s are kept (the engine's; a memory store when none was given).
    public let idempotency: any IdempotencyStore
    /// Every app's providers by app id (replaced on reload, `setApps`).
    private let apps: NIOLockedValueBox<[String: AppProviders]>
    private let appPending = AppPendingCounts()
    /// Platforms with a worker loop, and where new loops are asked for (`run` starts them).
    private let feeds = NIOLockedValueBox<Set<Platform>>([])
    private let feedRequests: AsyncStream<Platform>.Continuation
    private let feedStream: AsyncStream<Platform>
    private let lifecycle: DeliveryLifecycle
    private let sinks: [any DeliveryEventSink]
    private let metricsSink: MetricsSink
    private let logger: Logger
    private let now: @Sendable () -> Date
    private let random: @Sendable () -> Double
    private let waiters = WaiterRegistry()
    private let nextJobID = NIOLockedValueBox<UInt64>(1)
    private let inFlight = NIOLockedValueBox<Int>(0)

    /// Deliveries being sent right now, all providers (gorush's `busy_workers`).
    public var busyWorkers: Int { inFlight.withLockedValue { $0 } }
    private let answer: AnswerLimits
    /// Deliveries run on these (the providers' event loops, in turn); empty: the global executor.
    private let executors: [EventLoopTaskExecutor]

    /// How much of a request's failures a sync answer (and each feedback post) carries.
    public struct AnswerLimits: Sendable {
        /// The notification's message is repeated in each failed entry: cut to this many bytes.
        public var maxMessageBytes: Int
        /// The failed entries of one sync answer stop at about this many bytes (the rest are counted).
        public var maxAnswerBytes: Int
        /// A sync request answers after this many seconds with what is known.
        public var syncTimeout: Double
        /// `log.hide_messages`: entries carry "(message redacted)" instead of the message, as gorush's.
        public var hideMessages: Bool
        public init(maxMessageBytes: Int = 1024, maxAnswerBytes: Int = 1 << 20, syncTimeout: Double = 60, hideMessages: Bool = false) {
            self.maxMessageBytes = maxMessageBytes
            self.maxAnswerBytes = maxAnswerBytes
            self.syncTimeout = syncTimeout
            self.hideMessages = hideMessages
        }
    }

    /// A dispatcher over one queue engine.
    public convenience init(
        providers: [ProviderSlot],
        unavailable: [Platform: String] = [:],
        engine: any QueueEngine,
        apps: [AppProviders] = [],
        policy: RetryPolicy = RetryPolicy(),
        feedback: FeedbackSender? = nil,
        hideToken: Bool = true,
        answer: AnswerLimits = AnswerLimits(),
        logger: Logger = Logger(label: "pushgate.dispatch")
    ) {
        self.init(
            apps: [AppProviders(id: AppID.defaultApp, slots: providers, unavailable: unavailable)] + apps, queue: engine.driver, policy: policy,
            stats: engine.stats,
            feedback: feedback, sinks: engine.sinks, statusSource: engine.statusSource, idempotency: engine.idempotency, hideToken: hideToken,
            answer: answer, logger: logger)
    }

    /// - Parameters:
    ///   - unavailable: platforms not served, with the reason given to clients (e.g. "platform ios is not enabled").
    ///   - sinks: further readers of the delivery events (after stats and metrics, before feedback, logs and waiters).
    ///   - statusSource: defaults to the queue when it keeps status records.
    public convenience init(
        providers: [ProviderSlot],
        unavailable: [Platform: String] = [:],
        queue: any QueueDriver,
        policy: RetryPolicy = RetryPolicy(),
        stats: Stats = Stats(),
        feedback: FeedbackSender? = nil,
        sinks: [any DeliveryEventSink] = [],
        statusSource: (any DeliveryStatusSource)? = nil,
        hideToken: Bool = true,
        answer: AnswerLimits = AnswerLimits(),
        logger: Logger = Logger(label: "pushgate.dispatch"),
        now: @escaping @Sendable () -> Date = { Date() },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.init(
            apps: [AppProviders(id: AppID.defaultApp, slots: providers, unavailable: unavailable)], queue: queue, policy: policy, stats: stats,
            feedback: feedback, sinks: sinks, statusSource: statusSource, hideToken: hideToken, answer: answer, logger: logger, now: now,
            random: random)
    }

    /// A dispatcher serving several apps, each with its own providers (`apps[]`, the default app first).
    public init(
        apps: [AppProviders],
        queue: any QueueDriver,
        policy: RetryPolicy = RetryPolicy(),
        stats: Stats = Stats(),
        feedback: FeedbackSender? = nil,
        sinks: [any DeliveryEventSink] = [],
        statusSource: (any DeliveryStatusSource)? = nil,
        idempotency: (any IdempotencyStore)? = nil,
        hideToken: Bool = true,
        answer: AnswerLimits = AnswerLimits(),
        logger: Logger = Logger(label: "pushgate.dispatch"),
        eventLoops: [any EventLoop] = [],
        now: @escaping @Sendable () -> Date = { Date() },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.executors = eventLoops.map(EventLoopTaskExecutor.init)
        self.idempotency = idempotency ?? (queue as? any IdempotencyStore) ?? MemoryIdempotencyStore()
        var byID: [String: AppProviders] = [:]
        for a in apps where byID[a.id] == nil { byID[a.id] = a }
        self.apps = NIOLockedValueBox(byID)
        (feedStream, feedRequests) = AsyncStream<Platform>.makeStream()
        self.queue = queue
        self.stats = stats
        self.statusSource = statusSource ?? (queue as? any DeliveryStatusSource)
        self.answer = answer
        self.logger = logger
        self.now = now
        self.random = random
        let maxMessageBytes = answer.maxMessageBytes
        let hideMessages = answer.hideMessages
        lifecycle = DeliveryLifecycle(policy: policy) { job, error in
            Self.entry(
                notifID: job.accepted.notifID, notification: job.accepted.notification, target: job.target, error: error,
                hideToken: hideToken, hideMessages: hideMessages, maxMessageBytes: maxMessageBytes)
        }
        metricsSink = MetricsSink()
        var all: [any DeliveryEventSink] = [stats, metricsSink]
        all += sinks
        if let feedback { all.append(feedback) }
        all.append(LogSink(logger: logger))
        all.append(waiters)
        self.sinks = all
        startFeeds()
    }

    /// The providers of `app`, nil when no such app is configured.
    public func app(_ id: String) -> AppProviders? { apps.withLockedValue { $0[id] } }

    /// Every configured app's providers.
    public var allApps: [AppProviders] { apps.withLockedValue { Array($0.values) } }

    /// Every configured app id, sorted.
    public var appIDs: [String] { apps.withLockedValue { $0.keys.sorted() } }

    /// Replaces the set of apps (a reload). Deliveries already queued go on with the app of the same id
    /// (its new providers); those of an app no longer configured fail with that reason. Returns the
    /// replaced `AppProviders` for the caller to `retire` (close once their sends are over).
    public func setApps(_ new: [AppProviders]) -> [AppProviders] {
        var byID: [String: AppProviders] = [:]
        for a in new where byID[a.id] == nil { byID[a.id] = a }
        let old = apps.withLockedValue { current in
            defer { current = byID }
            return current
        }
        startFeeds()
        return old.values.filter { byID[$0.id] !== $0 }
    }

    /// Asks `run` for a worker loop for each platform some app serves that has none yet.
    private func startFeeds() {
        let served = apps.withLockedValue { Set($0.values.flatMap { $0.slots.keys }) }
        let new: [Platform] = feeds.withLockedValue { started in
            let n = served.subtracting(started).sorted { $0.rawValue < $1.rawValue }
            started.formUnion(n)
            return n
        }
        for p in new { feedRequests.yield(p) }
    }

    /// Per-app figure for `/api/stat/app`: deliveries of `app` accepted and not finished.
    public func pendingCount(app: String) -> Int { appPending.count(app, queuePending: queue.pendingCount) }

    private func publish(_ event: DeliveryEvent) {
        if case .finished(let job, _, let phase, _) = event, phase == .afterSending || phase == .skipped { appPending.release(job.accepted.app) }
        for sink in sinks { sink.record(event) }
    }

    private func makeJobIDs(_ n: Int) -> UInt64 {
        nextJobID.withLockedValue { id in
            let first = id
            id += UInt64(n)
            return first
        }
    }

    private static func entry(
        notifID: String, notification n: PushNotification, target: PushTarget, error: String,
        hideToken: Bool, hideMessages: Bool, maxMessageBytes: Int
    ) -> LogEntry {
        LogEntry(
            notifID: notifID,
            platform: n.platform.name,
            token: TokenMask.apply(target.reportedToken, hide: hideToken),
            message: hideMessages ? "(message redacted)" : Self.cut(n.message ?? "", to: maxMessageBytes),
            error: error
        )
    }

    /// The first `max` bytes of `s` on a character boundary, marked when cut.
    static func cut(_ s: String, to max: Int) -> String {
        let n = s.utf8.count
        return n > max ? s.prefix(utf8Bytes: max) + "… (\(n) bytes)" : s
    }

    /// Validates, renders and queues every delivery of the request. In sync mode waits for them all.
    /// Throws `QueueFullError` (nothing was queued then).
    ///
    /// - Parameters:
    ///   - requestID: names the request (`X-Pushgate-Request-Id`); generated when nil.
    ///   - outcomes: also wait for every delivery (as in sync mode) and report each one's final outcome
    ///     in `SubmitResult.outcomes` (the embedding API). The failed entries in `logs` are as in sync mode.
    ///   - timeout: how long a waiting submission waits (default `core.sync_timeout`).
    public func submit(
        _ request: PushRequest, sync: Bool, app appID: String = AppID.defaultApp, requestID: String? = nil,
        outcomes reportOutcomes: Bool = false, timeout: Double? = nil
    ) async throws -> SubmitResult {
        let sync = sync || reportOutcomes
        let t = now()
        let app = self.app(appID)
        let slots = app?.slots ?? [:]
        let unavailable = app?.unavailable ?? [:]
        var jobs: [DeliveryJob] = []
        // Deliveries that fail before any network call: in the sync logs, in the delivery status,
        // and (when the platform is served) counted, sent to the feedback hook and logged.
        var early: [(job: DeliveryJob, reason: String, served: Bool)] = []
        // The position in the request of each entry of `jobs` and `early` (for `outcomes`).
        var jobPositions: [Int] = []
        var earlyPositions: [Int] = []
        var position = 0
        func failEarly(_ accepted: AcceptedNotification, _ target: PushTarget, _ reason: String, served: Bool = true) {
            let job = DeliveryJob(id: 0, messageID: RandomID.uuid(), target: target, accepted: accepted, maxAttempts: 1, now: t)
            early.append((job, reason, served))
            earlyPositions.append(position)
            position += 1
        }
        var counts = 0
        var fallbacks: [FallbackUse] = []
        var fallbackBytes = 0
        var omittedFallbacks = 0
        let requestID = requestID ?? RandomID.timeOrdered()
        // In body order; a skipped notification (no, 0 or an unknown platform) has an empty slot.
        var notifIDs = [String](repeating: "", count: request.notifications.count + request.skipped.count)
        if let first = request.skipped.first {
            // One line per request (a body of 100 such notifications must not make 100 lines).
            logger.warning(
                "notifications skipped: \(first.reason.logSafe())",
                metadata: [
                    "count": "\(request.skipped.count)",
                    "notif_ids":
                        "\(request.skipped.prefix(5).map { ($0.notifID ?? "\(requestID)-\($0.index)").logSafe(max: 128) }.joined(separator: ","))",
                ])
        }
        let bodyIndices = request.bodyIndices

        for (i, requested) in request.notifications.enumerated() {
            var n = requested
            let index = bodyIndices[i]
            let notifID = n.notifID ?? "\(requestID)-\(index)"
            if index < notifIDs.count { notifIDs[index] = notifID }
            let targets = n.targets
            guard let slot = slots[n.platform] else {
                let reason = app == nil ? "app \(appID) is not configured" : unavailable[n.platform] ?? "platform \(n.platform.name) is not enabled"
                logger.warning("notification skipped: \(reason)", metadata: ["notif_id": "\(notifID.logSafe())"])
                let rejected = AcceptedNotification(notifID: notifID, notification: n, prepared: nil, app: appID)
                for target in targets { failEarly(rejected, target, reason, served: false) }
                continue
            }
            counts += n.gorushCount
            if n.coalesceSeconds == nil, slot.coalesceSeconds > 0, !(n.collapseID ?? "").isEmpty, n.isBackgroundPush {
                // The platform's default window for background pushes (kept with the notification).
                n.coalesceSeconds = slot.coalesceSeconds
            }
            if targets.isEmpty {
                failEarly(
                    AcceptedNotification(notifID: notifID, notification: n, prepared: nil, app: appID), .token(""), "tokens must not be nil or empty")
                continue
            }
            let prepared: any PreparedPush
            var sent: PushNotification
            let fallback: FallbackInfo?
            switch Self.prepare(n, with: slot.provider) {
            case .failure(let failure):
                let rejected = AcceptedNotification(notifID: notifID, notification: n, prepared: nil, app: appID)
                for target in targets { failEarly(rejected, target, failure.reason) }
                continue
            case .success(let r):
                (sent, prepared, fallback) = r
            }
            // A fallback is dedup'd and coalesced as its notification (the platform default included).
            sent.dedupKey = n.dedupKey
            sent.coalesceSeconds = n.coalesceSeconds
            if let fallback {
                // Held to the answer's byte budget, as the logs are (a notif_id is up to max_field_bytes).
                fallbackBytes += notifID.utf8.count + 96
                if fallbackBytes <= answer.maxAnswerBytes {
                    fallbacks.append(FallbackUse(notifID: notifID, platform: n.platform, info: fallback))
                } else {
                    omittedFallbacks += 1
                }
                metricsSink.fallback(app: appID, platform: n.platform)
                logger.debug(
                    "payload over the limit: sending the fallback",
                    metadata: [
                        "notif_id": "\(notifID.logSafe())", "platform": "\(n.platform.name)", "payload_bytes": "\(fallback.payloadBytes)",
                        "limit": "\(fallback.limit)", "fallback_bytes": "\(fallback.fallbackBytes)",
                    ])
            }
            // Sent as its fallback: the fallback is what is stored (and re-rendered after a restart).
            let accepted = AcceptedNotification(notifID: notifID, notification: sent, prepared: prepared, app: appID, fallback: fallback)
            let maxAttempts = RetryPolicy.maxAttempts(requestRetry: n.retry, providerMaxRetry: slot.maxRetry)
            for target in targets {
                if let failure = slot.provider.validate(target: target, of: prepared) {
                    failEarly(accepted, target, failure.reason)
                    continue
                }
                let messageID = n.apnsID ?? RandomID.uuid()
                jobs.append(DeliveryJob(id: 0, messageID: messageID, target: target, accepted: accepted, maxAttempts: maxAttempts, now: t))
                jobPositions.append(position)
                position += 1
            }
        }

        let firstID = makeJobIDs(jobs.count + early.count)
        for i in jobs.indices { jobs[i].id = firstID + UInt64(i) }
        for i in early.indices { early[i].job.id = firstID + UInt64(jobs.count + i) }

        var waiterID: UInt64?
        if sync {
            var expected: [Int: DeliveryOutcome]?
            if reportOutcomes {
                expected = [:]
                for (i, job) in jobs.enumerated() { expected?[jobPositions[i]] = DeliveryOutcome(job, nil, position: jobPositions[i]) }
            }
            let id = waiters.register(count: jobs.count, budget: answer.maxAnswerBytes, outcomes: expected)
            waiterID = id
            for i in jobs.indices {
                jobs[i].waiterID = id
                jobs[i].waiterPosition = jobPositions[i]
            }
        }
        var accepted: [DeliveryEvent] = []
        var dispositions: [EnqueueDisposition] = []
        for i in jobs.indices {
            let step = lifecycle.step(jobs[i], .accepted, now: t)
            jobs[i] = step.job
            for case .emit(let e) in step.effects { accepted.append(e) }
        }
        // Failures found before any network call are final at once: stored for the status in the
        // same write as the request's queued deliveries (all or nothing: a request answered 200 has
        // every status record), then told to the sinks. Deliveries to a platform that is not
        // served are reported in the logs only (not counted, no feedback).
        var rejected: [(job: DeliveryJob, reason: String)] = []
        var rejectedEvents: [DeliveryEvent] = []
        for f in early {
            let step = lifecycle.step(f.job, .rejected(reason: f.reason, served: f.served), now: t)
            for effect in step.effects {
                switch effect {
                case .recordFailedBeforeSending(let reason): rejected.append((step.job, reason))
                case .emit(let e): rejectedEvents.append(e)
                default: break
                }
            }
        }
        if !jobs.isEmpty || !rejected.isEmpty {
            // The app's own share first (one app cannot fill the queue for the others), then the queue.
            if !jobs.isEmpty, let full = appPending.reserve(appID, jobs.count, limit: app?.maxPending ?? 0, queuePending: queue.pendingCount) {
                if let waiterID { waiters.cancel(waiterID) }
                throw QueueFullError(pending: full, capacity: app?.maxPending ?? 0, app: appID)
            }
            do {
                dispositions = try await queue.enqueue(jobs, failedBeforeSending: rejected)
            } catch {
                if !jobs.isEmpty { appPending.release(appID, jobs.count) }
                if let waiterID { waiters.cancel(waiterID) }
                throw error
            }
        }
        // Duplicates (`dedup_key`) were not queued: they end here, not sent and not failed.
        var duplicates: [DeliveryEvent] = []
        for (i, d) in dispositions.enumerated() where i < jobs.count && d == .duplicate {
            for case .emit(let e) in lifecycle.step(jobs[i], .skipped(.duplicate), now: t).effects { duplicates.append(e) }
        }
        publish(.submitted(counts: counts, queued: jobs.count - duplicates.count))
        for e in accepted { publish(e) }
        for e in duplicates { publish(e) }

        var unavailableEntries = BoundedLogs(budget: sync ? answer.maxAnswerBytes : 0)
        var failedNow = BoundedLogs(budget: sync ? answer.maxAnswerBytes : 0)
        var earlyOutcomes: [DeliveryOutcome] = []
        if reportOutcomes {
            let positionOfJob = Dictionary(uniqueKeysWithValues: early.indices.map { (early[$0].job.id, earlyPositions[$0]) })
            for case .finished(let job, let final, _, _) in rejectedEvents {
                earlyOutcomes.append(DeliveryOutcome(job, final, position: positionOfJob[job.id] ?? 0))
            }
        }
        for e in rejectedEvents {
            publish(e)
            guard case .finished(_, _, let phase, let entry?) = e else { continue }
            if phase == .notServed { unavailableEntries.append(entry) } else { failedNow.append(entry) }
        }

        var result = SubmitResult(counts: counts, logs: [], notifIDs: notifIDs, requestID: requestID, fallbacks: fallbacks)
        result.omittedFallbacks = omittedFallbacks
        if let waiterID {
            let waited = await waiters.wait(waiterID, timeout: timeout ?? answer.syncTimeout)
            var logs = BoundedLogs(budget: answer.maxAnswerBytes)
            logs.append(contentsOf: unavailableEntries)
            logs.append(contentsOf: failedNow)
            logs.append(contentsOf: waited.logs)
            result.logs = logs.entries
            result.omittedLogs = logs.omitted
            result.pending = waited.pending
            if reportOutcomes { result.outcomes = (earlyOutcomes + waited.outcomes).sorted { $0.position < $1.position } }
        }
        return result
    }

    /// Whether any app serves any provider.
    public var hasProviders: Bool { apps.withLockedValue { $0.values.contains { !$0.slots.isEmpty } } }

    /// Runs the worker pools until `shutdown()`: one per platform any app serves, and one more when a
    /// reload adds a platform. Call once.
    public func run() async {
        await withDiscardingTaskGroup { group in
            for await platform in feedStream {
                group.addTask { await self.feed(platform: platform) }
            }
        }
    }

    /// Stops handing out jobs; workers finish what they hold, then `run()` returns.
    public func shutdown() {
        feedRequests.finish()
        queue.shutdown()
    }

    /// The workers of one platform. With event loops (see `EventLoopTaskExecutor`): one feed loop per
    /// event loop, each with its share of `max_concurrent_pushes`, run with that loop as its task
    /// executor, so that the handoff from the queue, the send, the answer and the completion of a
    /// delivery all happen on one thread. Otherwise one feed loop on the global executor.
    private func feed(platform: Platform) async {
        // The platform's largest `max_concurrent_pushes` among the apps serving it when the loop starts.
        let concurrency = apps.withLockedValue { $0.values.compactMap { $0.slots[platform]?.concurrency }.max() } ?? 1
        let executors = self.executors
        if #available(macOS 15.0, iOS 18.0, *), !executors.isEmpty {
            let n = min(executors.count, concurrency)
            await withDiscardingTaskGroup { group in
                for i in 0..<n {
                    let share = concurrency / n + (i < concurrency % n ? 1 : 0)
                    group.addTask(executorPreference: executors[i]) { await self.feed(platform: platform, limit: share) }
                }
            }
        } else {
            await feed(platform: platform, limit: concurrency)
        }
    }

    /// A feed loop: starts a worker (a child task, which inherits the loop's executor) only while
    /// fewer than `limit` are running; a worker goes on with the next ready job and ends when none is
    /// ready now. Workers exist only while there is work: an idle gateway holds one parked task per
    /// feed loop instead of `max_concurrent_pushes` of them (each ~2.4 KB), and a busy one does not
    /// make a task per delivery.
    private func feed(platform: Platform, limit: Int) async {
        let gate = InFlightGate(limit: limit)
        await withDiscardingTaskGroup { group in
            while true {
                await gate.enter()
                guard let first = await queue.next(platform: platform) else {
                    gate.leave()
                    return
                }
                inFlight.withLockedValue { $0 += 1 }
                group.addTask {
                    var job = first
                    while true {
                        await self.process(job)
                        guard let next = self.queue.nextIfReady(platform: platform) else { break }
                        job = next
                    }
                    self.inFlight.withLockedValue { $0 -= 1 }
                    gate.leave()
                }
            }
        }
    }

    func process(_ job: DeliveryJob) async {
        // A push held for the end of its coalescing window and replaced since ends here, unsent
        // (asked first, so the memory queue's record of it is always consumed).
        if job.isHeldForCoalescing, await queue.wasReplaced(job) {
            await apply(lifecycle.step(job, .skipped(.coalesced), now: now()))
            return
        }
        // The job's own app's providers, as configured now (a reload may have replaced them).
        let appID = job.accepted.app
        guard let app = self.app(appID), let slot = app.slots[job.platform] else {
            let reason =
                self.app(appID) == nil
                ? "app \(appID) is no longer configured" : "platform \(job.platform.name) is no longer enabled for app \(appID)"
            await apply(lifecycle.step(job, .unpreparable(reason: reason), now: now()))
            return
        }
        app.enter()
        defer { app.leave() }
        let prepared: any PreparedPush
        if let p = job.accepted.prepared {
            prepared = p
        } else {
            // Re-rendered (a store's job after a restart): a notification accepted as its fallback is
            // stored as the fallback; one that fitted then and no longer does falls back here.
            switch Self.prepare(job.accepted.notification, with: slot.provider) {
            case .failure(let failure):
                await apply(lifecycle.step(job, .unpreparable(reason: failure.reason), now: now()))
                return
            case .success(let r):
                prepared = r.prepared
            }
        }
        let started = now()
        let context = DeliveryContext(messageID: job.messageID)
        let outcome = await slot.provider.send(prepared, to: job.target, context: context)
        // The jitter draw only matters for a retry: none for a delivered push (a getrandom(2) each).
        let draw = outcome.isDelivered ? 0 : random()
        await apply(lifecycle.step(job, .attempted(outcome, started: started), now: now(), random: draw))
    }

    /// Renders `n` for `provider`; when the rendering is over the provider's limit and `n` has a
    /// `fallback`, renders the fallback instead: returns what is sent, its rendering, and the sizes when
    /// it is the fallback. Both over the limit: a PayloadTooLarge failure naming both sizes.
    static func prepare(
        _ n: PushNotification, with provider: any PushProvider
    ) -> Result<(notification: PushNotification, prepared: any PreparedPush, fallback: FallbackInfo?), PushFailure> {
        let failure: PushFailure
        do {
            return .success((n, try provider.prepare(n), nil))
        } catch {
            failure = (error as? PushFailure) ?? PushFailure("\(error)")
        }
        guard let size = failure.size, let limit = failure.limit, let fallback = n.fallback?.notification else { return .failure(failure) }
        do {
            let prepared = try provider.prepare(fallback)
            let info = FallbackInfo(payloadBytes: size, limit: limit, fallbackBytes: prepared.payloadBytes ?? 0)
            return .success((fallback, prepared, info))
        } catch {
            let f = (error as? PushFailure) ?? PushFailure("\(error)")
            if let fallbackSize = f.size, let fallbackLimit = f.limit {
                return .failure(.payloadTooLarge(size: size, limit: limit, fallbackSize: fallbackSize, fallbackLimit: fallbackLimit))
            }
            var out = PushFailure("\(failure.reason); fallback: \(f.reason)")
            out.size = size
            out.limit = limit
            return .failure(out)
        }
    }

    /// Carries out a worker's transition, in order.
    private func apply(_ transition: DeliveryTransition) async {
        for effect in transition.effects {
            switch effect {
            case .emit(let e): publish(e)
            case .reschedule: await queue.reschedule(transition.job)
            case .complete(let outcome): await queue.complete(transition.job, outcome: outcome)
            case .enqueue, .recordFailedBeforeSending, .release: break  // submit's and the queue drivers' business
            }
        }
    }
}

/// swift-metrics instruments for one platform, made once.
/// A class: handed out per event, a struct of six dictionaries and three instruments cost a retain
/// and release of each member per copy.
final class PlatformMetrics: Sendable {
    let platform: Platform
    let attempts: [String: Counter]
    let finals: [String: Counter]
    let retries: Counter
    let skips: [SkipReason: Counter]
    /// Notifications sent as their `fallback` (over the provider's limit).
    let fallbacks: Counter
    let sendDuration: Timer
    let deliveryLatency: Timer

    init(platform: Platform, app: String = AppID.defaultApp) {
        self.platform = platform
        let p = ("provider", platform.name)
        let appLabel = ("app", app)
        var a: [String: Counter] = [:]
        for c in ["delivered", "token_dead", "permanent", "transient", "credentials"] {
            a[c] = Counter(label: "pushgate_provider_responses_total", dimensions: [appLabel, p, ("class", c)])
        }
        attempts = a
        var f: [String: Counter] = [:]
        f["delivered"] = Counter(label: "pushgate_push_success_total", dimensions: [appLabel, p])
        f["failed"] = Counter(label: "pushgate_push_error_total", dimensions: [appLabel, p])
        f["permanent"] = f["failed"]
        finals = f
        retries = Counter(label: "pushgate_push_retry_total", dimensions: [appLabel, p])
        var sk: [SkipReason: Counter] = [:]
        for why in [SkipReason.duplicate, .coalesced] {
            sk[why] = Counter(label: "pushgate_push_skipped_total", dimensions: [appLabel, p, ("reason", why.rawValue)])
        }
        skips = sk
        fallbacks = Counter(label: "pushgate_payload_fallbacks_total", dimensions: [appLabel, p])
        sendDuration = Timer(label: "pushgate_provider_request_duration_seconds", dimensions: [appLabel, p], preferredDisplayUnit: .seconds)
        deliveryLatency = Timer(label: "pushgate_delivery_latency_seconds", dimensions: [appLabel, p], preferredDisplayUnit: .seconds)
    }

    func attempt(className: String, seconds: Double) {
        attempts[className]?.increment()
        sendDuration.recordNanoseconds(Self.nanoseconds(seconds))
    }

    func latency(seconds: Double) { deliveryLatency.recordNanoseconds(Self.nanoseconds(seconds)) }

    /// Seconds as nanoseconds for a timer, 0 to 1e6 s: a clock step can make a difference negative or
    /// absurd, and `Int64(Double)` traps out of range.
    static func nanoseconds(_ seconds: Double) -> Int64 {
        guard seconds.isFinite, seconds > 0 else { return 0 }
        return Int64(min(seconds, 1e6) * 1e9)
    }
    func retried() { retries.increment() }
    func skipped(_ why: SkipReason) { skips[why]?.increment() }
    func finished(className: String) { finals[className]?.increment() }
}
