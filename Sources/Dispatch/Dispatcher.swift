import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore

/// Fans requests out to per-provider worker pools fed by the queue, steps each delivery through
/// `DeliveryLifecycle`, carries out its effects and publishes its events to one list of sinks
/// (stats, metrics, the engine's status records, feedback hook, logs, sync waiters).
///
/// This file holds the type, its apps and its sinks; `Dispatcher+Submit.swift` takes requests in
/// (plan, enqueue, report) and `Dispatcher+Workers.swift` runs the worker pools.
public final class Dispatcher: Sendable {
    public let queue: any QueueDriver
    public let stats: Stats
    /// Where `GET /api/push/{notif_id}` reads (nil: the engine keeps no records).
    public let statusSource: (any DeliveryStatusSource)?
    /// Where `Idempotency-Key`s are kept (the engine's; a memory store when none was given).
    public let idempotency: any IdempotencyStore
    /// Every app's providers by app id (replaced on reload, `setApps`).
    let apps: NIOLockedValueBox<[String: AppProviders]>
    let appPending = AppPendingCounts()
    /// Platforms with a worker loop, and where new loops are asked for (`run` starts them).
    private let feeds = NIOLockedValueBox<Set<Platform>>([])
    let feedRequests: AsyncStream<Platform>.Continuation
    let feedStream: AsyncStream<Platform>
    let lifecycle: DeliveryLifecycle
    /// What each platform's provider module says about its notifications: their targets, deadline
    /// and whether one is a background push (`ProviderModule.requestRules`); the lifecycle's.
    var platformRules: [Platform: PlatformRules] { lifecycle.rules }
    private let sinks: [any DeliveryEventSink]
    let metricsSink: MetricsSink
    /// The last minutes of deliveries, for the status page.
    public let activity: RecentActivity
    let logger: Logger
    let now: @Sendable () -> Date
    let random: @Sendable () -> Double
    let waiters = WaiterRegistry()
    private let nextJobID = NIOLockedValueBox<UInt64>(1)
    let inFlight = NIOLockedValueBox<Int>(0)

    /// Deliveries being sent right now, all providers (gorush's `busy_workers`).
    public var busyWorkers: Int { inFlight.withLockedValue { $0 } }
    let answer: AnswerLimits
    /// Deliveries run on these (the providers' event loops, in turn); empty: the global executor.
    let executors: [EventLoopTaskExecutor]
    /// Each delivery attempt is a span (`tracing.enabled`; `DeliveryTracing.swift`). Off: no span,
    /// no context read, nothing but this flag on the worker's path.
    public let tracing: Bool
    /// `log.hide_token`: a span carries the token only when tokens are shown.
    let hideToken: Bool

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
        platformRules: [Platform: PlatformRules] = [:],
        policy: RetryPolicy = RetryPolicy(),
        feedback: FeedbackSender? = nil,
        hideToken: Bool = true,
        answer: AnswerLimits = AnswerLimits(),
        logger: Logger = Logger(label: "pushgate.dispatch")
    ) {
        self.init(
            apps: [AppProviders(id: AppID.defaultApp, slots: providers, unavailable: unavailable)] + apps, queue: engine.driver,
            platformRules: platformRules, policy: policy,
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
        platformRules: [Platform: PlatformRules] = [:],
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
            apps: [AppProviders(id: AppID.defaultApp, slots: providers, unavailable: unavailable)], queue: queue, platformRules: platformRules,
            policy: policy, stats: stats,
            feedback: feedback, sinks: sinks, statusSource: statusSource, hideToken: hideToken, answer: answer, logger: logger, now: now,
            random: random)
    }

    /// A dispatcher serving several apps, each with its own providers (`apps[]`, the default app first).
    public init(
        apps: [AppProviders],
        queue: any QueueDriver,
        platformRules: [Platform: PlatformRules] = [:],
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
        tracing: Bool = false,
        now: @escaping @Sendable () -> Date = { Date() },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.executors = eventLoops.map(EventLoopTaskExecutor.init)
        self.tracing = tracing
        self.hideToken = hideToken
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
        lifecycle = DeliveryLifecycle(policy: policy, rules: platformRules) { job, error in
            Self.entry(
                notifID: job.accepted.notifID, notification: job.accepted.notification, target: job.target, error: error,
                hideToken: hideToken, hideMessages: hideMessages, maxMessageBytes: maxMessageBytes)
        }
        metricsSink = MetricsSink()
        activity = RecentActivity(now: now)
        var all: [any DeliveryEventSink] = [stats, metricsSink, activity]
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

    /// Tells the sinks `events`, in order: by index, from a synchronous function, not inlined (a
    /// for-in loop copies each event out, and so does an asynchronous caller reading them: a retain
    /// and release of each field of its job).
    @inline(never)
    func publish(_ events: borrowing [DeliveryEvent]) {
        for i in events.indices { publish(events[i]) }
    }

    /// Not inlined: inlined into a caller, matching a case copied the event out again.
    @inline(never)
    func publish(_ event: borrowing DeliveryEvent) {
        switch event {
        case .finished(let job, _, let phase, _) where phase == .afterSending || phase == .skipped: appPending.release(job.accepted.app)
        default: break
        }
        for sink in sinks { sink.record(event) }
    }

    func makeJobIDs(_ n: Int) -> UInt64 {
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

    /// Whether any app serves any provider.
    public var hasProviders: Bool { apps.withLockedValue { $0.values.contains { !$0.slots.isEmpty } } }

    /// Stops handing out jobs; workers finish what they hold, then `run()` returns.
    /// Declared in the type: declared in an extension, the unqualified `shutdown()` of Drain.swift
    /// resolved to the C library's `shutdown(_:_:)`.
    public func shutdown() {
        feedRequests.finish()
        queue.shutdown()
    }
}
