import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// Tuning of a durable queue.
public struct DurableQueueOptions: Sendable {
    /// `queue.max_pending`: jobs in the store not yet complete (from every process).
    public var capacity: Int
    /// How long a process's leases outlive its last heartbeat (a crashed process's jobs are handed
    /// out again after this). Heartbeats run every quarter of it.
    public var leaseTimeout: TimeInterval = 60
    /// Finished deliveries are kept this long for `GET /api/push/{notif_id}`.
    public var statusRetention: TimeInterval = 86_400
    /// How often idle workers look in the store for jobs this process does not hold.
    public var pollInterval: TimeInterval = 1
    /// Most jobs leased from the store at once (per platform).
    public var leaseBatch: Int = 256
    /// Async jobs enqueued here are leased to this process at once and kept in memory (SQLite:
    /// one process). When false (PostgreSQL) they are left in the store for any process to lease;
    /// sync-mode jobs are always leased locally (their waiter lives here).
    public var leaseOnEnqueue: Bool = true
    public var statsInterval: TimeInterval = 1
    /// How often finished deliveries past `statusRetention` (or beyond `statusMaxRecords`) are
    /// deleted. A pass deletes at most `pruneBatch` rows per table per transaction and goes on in the
    /// next transactions until less than that was left, so pruning keeps up with any delivery rate
    /// while no transaction holds the writer for long.
    public var pruneInterval: TimeInterval = 60
    /// Most rows of one table one prune transaction deletes.
    public var pruneBatch: Int = 5_000
    /// When the first prune pass after start runs (then every `pruneInterval`): soon, so a store
    /// that grew while the gateway was down is trimmed early.
    public var firstPruneAfter: TimeInterval = 5
    /// `queue.status_max_records`: most finished deliveries kept for `GET /api/push/{notif_id}`
    /// (the oldest finished are pruned first, before `statusRetention` if need be); 0: no limit
    /// but the retention. Pending deliveries are the queue (bounded by `capacity`), never pruned.
    public var statusMaxRecords: Int = 1_000_000
    /// Timer resolution for retries coming due: the shortest sleep of the timer. It sleeps until the
    /// next thing due (a retry, a poll of the store, a heartbeat, the counters, pruning) and a job
    /// placed with an earlier due time wakes it, so an idle queue wakes about once a second.
    public var tick: Duration = .milliseconds(10)
    /// The timer's longest sleep.
    public var maxSleep: TimeInterval = 1
    /// How long a `dedup_key` claim holds (`core.idempotency_ttl`).
    public var dedupTTL: TimeInterval = 86_400
    /// Most jobs this process holds in memory (leased: ready, in flight, retrying). Async jobs
    /// enqueued beyond it stay in the store and are leased in batches as workers free up, so a
    /// backlog of millions costs disk, not memory. Sync-mode jobs are always held (their waiter is here).
    public var maxHeld: Int = DurableQueueOptions.defaultMaxHeld
    /// `maxHeld`'s default (`queue.max_held`): a held job costs ~430 bytes (100-token notifications,
    /// measured: docs/benchmarks.md), so ~21 MB at most. A job beyond it is read back from the store
    /// before it is sent, which costs the SQLite engine ~1.7 µs of CPU per job (decoding its
    /// `jobs_data` entry and making the job again): ~3 % of its throughput while a backlog is drained.
    public static let defaultMaxHeld = 50_000
    /// Most notification renderings kept for jobs left in the store (beyond it a leased job's
    /// notification is read back from the store).
    public var maxCachedNotifications: Int = 2_000
    /// Most bytes of stored notification bodies (JSON, token lists included) those renderings may
    /// stand for: a notification's memory grows with its tokens, so a count alone bounds nothing
    /// (2,000 notifications of 100 tokens held ~30 MB; of 1,000 tokens ten times that).
    public var maxCachedNotificationBytes: Int = 2_000_000
    /// Completions and reschedules (nobody waits for them) are committed at most this long after the
    /// first of them, or once `updateBatch` are gathered, or sooner with any write somebody waits
    /// for (an enqueue, a status lookup's flush, a lease). Committing each trickle of completions in
    /// its own transaction cost most of the SQLite engine's time (1,400 transactions a second of
    /// ~25 rows each at 35k deliveries/s, every one rewriting the same pages into the WAL). A crash
    /// loses at most this much of completions: those deliveries are sent again (at-least-once).
    public var updateDelay: TimeInterval = 0.01
    /// Completions and reschedules that are committed at once without waiting for `updateDelay`.
    public var updateBatch: Int = 2_000
    /// `queue.store_timeout`: longest wait for a write of a store that can hang (a database server
    /// that went away: its connection pool waits for a connection); past it the write is given up
    /// and ingest answers 503. A store this process alone uses (SQLite) answers or fails at once.
    public var storeTimeout: TimeInterval = 5
    /// Backoff of the writes retried while the store refuses them (completions kept in memory, and a
    /// probe write that tells when the store takes writes again): first delay, doubled up to the last.
    public var faultRetryDelay: ClosedRange<TimeInterval> = 0.25...2

    public init(capacity: Int) { self.capacity = max(1, capacity) }
}

public struct QueueClosedError: Error, CustomStringConvertible, Sendable {
    public var description: String { "the queue is shut down" }
}

/// A `QueueDriver` over a store (SQLite or PostgreSQL).
///
/// - `enqueue` returns once the jobs are committed (one transaction per batch of requests: group commit).
/// - Jobs are leased by this process (owner id + the owner's lease expiry, renewed by heartbeats);
///   leased jobs are held in memory (ready FIFO, retry heap) like `MemoryQueue`.
/// - `complete` / `reschedule` return once their change is committed (group commit across workers).
/// - Jobs this process does not hold (left by a crashed or stopped process, or enqueued by another
///   process sharing the store) are leased from the store in batches when workers are idle.
/// - `shutdown()` stops handing out jobs; once every job handed out is completed or rescheduled, the
///   remaining leases are released, counters saved and the store closed; then waiting `next` calls return nil.
public final class DurableQueue: QueueDriver, DeliveryStatusSource, IdempotencyStore, @unchecked Sendable {
    // @unchecked: every mutable field is inside `state` (a lock); the rest is immutable after init.

    private struct PlatformState {
        var jobs = PlatformJobs()
        var fetching = false
        var storeMayHaveWork = true
        var lastPoll: Double = 0
        /// Jobs leased to this process on enqueue but left in the store (`parksJobs`), oldest first.
        var parked = ParkedJobIDs()
        /// A read of parked jobs is under way.
        var readingParked = false
        /// When the last read of parked jobs failed (the next waits `pollInterval`).
        var parkedReadFailed: Double = 0
    }

    typealias Inserted = (ids: [(notifRow: Int64, jobIDs: [Int64])], guarded: [Int64: GuardOutcome])

    private struct InsertGroup {
        var count: Int
        var continuation: Resumption<Inserted>
    }

    private struct Work {
        var batch = WriteBatch()
        var insertGroups: [InsertGroup] = []
        /// One per `batch.idempotency` entry, in order.
        var idempotencyWaiters: [Resumption<IdempotencyClaim?>] = []
        var updateWaiters: [CheckedContinuation<Void, Never>] = []
        var leaseLimits: [Int] = []
        /// Nothing in it but completions, reschedules and counters: nobody waits for its commit.
        var onlyUnwaited: Bool {
            insertGroups.isEmpty && idempotencyWaiters.isEmpty && updateWaiters.isEmpty && batch.holdsOnlyUnwaited
        }
    }

    private struct State {
        var platforms: [Platform: PlatformState] = [:]
        var work = Work()
        var pendingBase = 0
        var pendingDelta = 0
        var outstanding = 0
        var held = 0
        /// Sum of the platforms' `parked.count` (changed through `changeParked` only).
        var parked = 0
        var shutdown = false
        var finalizeRequested = false
        var finalized = false
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
        /// Renderings of notifications whose jobs were left in the store, by notification row.
        var notifications: [Int64: CachedNotification] = [:]
        /// Sum of `notifications[…].bytes`.
        var cachedBytes = 0
        /// How many of `notifications` were read back from the store (`leftInStore` nil): the ones a
        /// full cache can give up for a new notification.
        var cachedReadBack = 0
        var lastHeartbeat: Double = 0
        var lastStats: Double = 0
        var lastPrune: Double = 0
        /// `statusMaxRecords` has cut a prune pass short of `statusRetention` (logged once).
        var capReached = false
        var stats: Stats?
        /// When the sleeping timer wakes (0 while it is awake), and its sleep to cut short.
        var tickerWake: Double = 0
        var tickerSleeper: Task<Void, Never>?
        /// A wake of the writer is scheduled for the unwaited updates (`updateDelay`).
        var updateWakeScheduled = false
        /// That wake came: the updates gathered are committed now.
        var updatesDue = false
        /// The store refused the last write for a fault of its own (full disk, I/O error,
        /// unreachable): requests are refused with it at once, without waiting for the writer, until
        /// a write succeeds again (the timer probes the store with backoff). Readiness reads it.
        var fault: StoreUnavailableError?
        /// Completions and reschedules the store refused, oldest first: kept (never dropped, or the
        /// jobs would stay pending in the store and be sent again at the next start) and written
        /// ahead of the newer ones in every transaction until one commits. Bounded: no jobs are
        /// leased or read back while they fill the `maxHeld` window.
        var retained: [JobUpdate] = []
        /// When the timer next writes to the store while `fault` or `retained` is set, and the delay after that.
        var faultRetryAt: Double = 0
        var faultRetryDelay: Double = 0

        /// Updates the store has not taken: refused ones, and those gathered while it refuses writes
        /// (they count against the `maxHeld` window: memory stays bounded while the store is down).
        var unwritten: Int { retained.count + (fault == nil ? 0 : work.batch.updates.count) }

        /// Changes `platform`'s parked ids and `parked` (their total) with them.
        mutating func changeParked<R>(_ platform: Platform, _ body: (inout ParkedJobIDs) -> R) -> R {
            let before = platforms[platform]?.parked.count ?? 0
            let r = body(&platforms[platform, default: PlatformState()].parked)
            parked += platforms[platform, default: PlatformState()].parked.count - before
            return r
        }
    }

    private struct CachedNotification {
        var accepted: AcceptedNotification
        var at: Double
        /// Its stored body's size (the cache's budget: `maxCachedNotificationBytes`).
        var bytes: Int
        /// Its jobs this process left in the store and has not leased back yet (nil: unknown, read
        /// back from the store for a lease). At 0 it is dropped: nothing here needs it any more.
        var leftInStore: Int?
    }

    private let state = NIOLockedValueBox(State())
    let backend: any QueueBackend
    public let options: DurableQueueOptions
    /// This process's lease owner id.
    public let owner: String
    /// Counters as stored when the queue was opened (seed `Stats(initial:)` with it).
    public let storedStats: StatsSnapshot
    private let logger: Logger
    private let now: @Sendable () -> Date
    private let signal: AsyncStream<Void>.Continuation
    private let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])
    /// Async jobs beyond `maxHeld` are leased to this process as they are inserted and read back by id
    /// as workers free up (`ParkedJobIDs`), instead of being left free and leased back with an update
    /// of each row: the backlog costs one write per job, as a held job does, and is read back ahead of
    /// the workers (while `leaseBatch` or fewer are ready), so they never wait for it. Only on a store
    /// this process uses alone (SQLite with its lock), where leaving jobs for others has no use.
    private let parksJobs: Bool
    /// The store may not have written a leased job's row yet (`WrittenOnce`: SQLite alone on its
    /// file): its retries and outcomes carry the job as held (`storedRow`).
    private let rowAtOutcome: Bool

    public var capacity: Int { options.capacity }

    init(backend: any QueueBackend, options: DurableQueueOptions, logger: Logger, now: @escaping @Sendable () -> Date = { Date() }) async throws {
        self.backend = backend
        self.options = options
        self.logger = logger
        self.now = now
        self.owner = UUID().uuidString.lowercased()
        self.parksJobs = backend.exclusive && options.leaseOnEnqueue
        self.rowAtOutcome = backend.exclusive
        let t = now().timeIntervalSince1970
        let started = try await backend.start(owner: owner, now: t, leaseTimeout: options.leaseTimeout, adoptParked: parksJobs)
        self.storedStats = StatsCodec.snapshot(started.stats)
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.signal = continuation
        state.withLockedValue { s in
            s.pendingBase = started.pending
            for (platform, ids) in started.adopted where !ids.isEmpty {
                s.changeParked(platform) { $0 = ids }
            }
            s.lastHeartbeat = t
            s.lastStats = t
            s.lastPrune = t - options.pruneInterval + min(max(0, options.firstPruneAfter), options.pruneInterval)
        }
        let writer: Task<Void, Never>
        if #available(macOS 15.0, iOS 18.0, *), let loop = backend.eventLoop {
            writer = Task(executorPreference: EventLoopTaskExecutor(loop)) { [self] in await self.writerLoop(stream) }
        } else {
            writer = Task { [self] in await self.writerLoop(stream) }
        }
        let ticker = Task { [self] in await self.tickerLoop() }
        tasks.withLockedValue { $0 = [writer, ticker] }
        if started.pending > 0 { logger.info("durable queue opened with \(started.pending) pending deliveries", metadata: ["owner": "\(owner)"]) }
    }

    /// Saves the increments of `stats` into the store periodically and on shutdown (added to the
    /// stored counters, so processes sharing a store add up).
    public func persist(stats: Stats) {
        state.withLockedValue { $0.stats = stats }
    }

    public var pendingCount: Int { state.withLockedValue { max(0, $0.pendingBase + $0.pendingDelta) } }

    public var isDurable: Bool { true }

    /// Jobs leased by this process and held in memory (ready, retry-waiting or in a worker).
    public var heldCount: Int { state.withLockedValue { $0.held } }

    // MARK: QueueDriver

    @discardableResult
    public func enqueue(_ jobs: [DeliveryJob]) async throws -> [EnqueueDisposition] {
        try await enqueue(jobs, failedBeforeSending: [])
    }

    /// The jobs and the status records of the request's deliveries that failed before sending, in
    /// one transaction: both are stored or neither.
    @discardableResult
    public func enqueue(_ jobs: [DeliveryJob], failedBeforeSending failures: [(job: DeliveryJob, reason: String)]) async throws
        -> [EnqueueDisposition]
    {
        guard !jobs.isEmpty else {
            try await recordFailedBeforeSending(failures)
            return []
        }
        let n = jobs.count
        // Room in memory for leasing on enqueue (approximate across concurrent enqueues: the
        // window is a memory bound, not an exact count).
        // Platforms with parked jobs: their new async jobs are parked behind them (first in, first out).
        let (room, parkedPlatforms): (Int, [Platform]) = try state.withLockedValue { s in
            if s.finalized || s.finalizeRequested { throw QueueClosedError() }
            if let fault = s.fault { throw fault }
            let pending = max(0, s.pendingBase + s.pendingDelta)
            if pending + n > options.capacity { throw QueueFullError(pending: pending, capacity: options.capacity) }
            s.pendingDelta += n
            let parked = s.parked > 0 ? s.platforms.compactMap { $0.value.parked.isEmpty ? nil : $0.key } : []
            return (max(0, options.maxHeld - s.held - s.unwritten), parked)
        }
        var leasing = 0
        var hold = [Bool](repeating: false, count: n)
        let t = now().timeIntervalSince1970
        let inserts: [NotificationInsert]
        let groups: [(accepted: AcceptedNotification, jobs: [Int])]
        let dedupUntil = t + options.dedupTTL
        do {
            (inserts, groups) = try Self.notificationInserts(jobs, createdAt: t) { j, i in
                // Held in memory: sync-mode jobs (their waiter is here) and async ones within the window.
                let held =
                    j.waiterID != nil || (options.leaseOnEnqueue && leasing < room && !parkedPlatforms.contains(j.platform))
                if held { leasing += 1 }
                hold[i] = held
                var row = JobInsert(
                    target: j.target, messageID: j.messageID, attempts: j.attempts, maxAttempts: j.maxAttempts,
                    notBefore: j.notBefore.timeIntervalSince1970, enqueuedAt: j.enqueuedAt.timeIntervalSince1970,
                    leased: held || parksJobs)
                row.dedupKey = j.dedupKey
                row.dedupUntil = dedupUntil
                row.coalesceSeconds = j.coalesceSeconds
                return row
            }
        } catch {
            state.withLockedValue { $0.pendingDelta -= n }
            throw error
        }
        let ids: [(notifRow: Int64, jobIDs: [Int64])]
        let guarded: [Int64: GuardOutcome]
        do {
            // The failed deliveries' rows come after the jobs' (their ids are not read).
            (ids, guarded) = try await commit(failures.isEmpty ? inserts : inserts + (try failedInserts(failures)))
        } catch {
            state.withLockedValue { $0.pendingDelta -= n }
            throw error
        }
        let tNow = now()
        var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        var fetch = false
        var reads: [(Platform, [ClosedRange<Int64>])] = []
        var dispositions = jobs.map { EnqueueDisposition.queued(notBefore: $0.notBefore) }
        state.withLockedValue { s in
            for (gi, g) in groups.enumerated() {
                let (notifRow, jobIDs) = ids[gi]
                var leftInStore = 0
                for (k, i) in g.jobs.enumerated() {
                    var job = jobs[i]
                    job.id = UInt64(jobIDs[k])
                    job.storeRow = notifRow
                    switch guarded[jobIDs[k]] {
                    case .duplicate:
                        // Stored as duplicate in the insert: never queued.
                        dispositions[i] = .duplicate
                        s.pendingDelta -= 1
                        continue
                    case .heldUntil(let until):
                        job.notBefore = Date(timeIntervalSince1970: until)
                        dispositions[i] = .queued(notBefore: job.notBefore)
                    case nil:
                        break
                    }
                    if hold[i] {
                        s.held += 1
                        place(job, in: &s, now: tNow, resume: &resume)
                    } else {
                        leftInStore += 1
                        if parksJobs {
                            s.changeParked(job.platform) { $0.append(jobIDs[k]) }
                        }
                    }
                }
                if leftInStore > 0 {
                    // Keep the rendering for when a worker here leases these jobs back (a bounded
                    // number: beyond it the lease reads the notification back from the store).
                    // Without its targets (`storedForm`): the body's size is then what it holds.
                    let a = g.accepted
                    let kept = AcceptedNotification(
                        notifID: a.notifID, notification: Self.storedForm(a.notification), prepared: a.prepared, app: a.app, fallback: a.fallback)
                    cache(
                        notifRow,
                        CachedNotification(
                            accepted: kept, at: t, bytes: inserts[gi].body.utf8.count + (a.prepared?.payloadBytes ?? 0), leftInStore: leftInStore),
                        in: &s)
                    let p = g.accepted.notification.platform
                    if parksJobs {
                        if let r = readParkedIfNeeded(p, in: &s, now: t) { reads.append((p, r)) }
                    } else {
                        s.platforms[p, default: PlatformState()].storeMayHaveWork = true
                        if requestLeaseIfNeeded(p, in: &s, now: t) { fetch = true }
                    }
                }
            }
        }
        for (c, j) in resume { c.resume(returning: j) }
        if fetch { signal.yield() }
        for (p, r) in reads { startReadingParked(p, r) }
        return dispositions
    }

    public func wasReplaced(_ job: DeliveryJob) async -> Bool {
        do {
            return try await backend.jobState(Int64(job.id)) == DeliveryState.Code.coalesced.rawValue
        } catch {
            logger.warning("cannot read whether a coalesced push was replaced (sending it): \(error)")
            return false
        }
    }

    // MARK: IdempotencyStore

    public func claim(app: String, key: String, bodyHash: String, now: Date, ttl: TimeInterval, abandonAfter: TimeInterval) async throws
        -> IdempotencyClaim
    {
        let t = now.timeIntervalSince1970
        let op = IdempotencyOp.claim(app: app, key: key, bodyHash: bodyHash, now: t, expires: t + ttl, abandonBefore: t - abandonAfter)
        guard let claim = try await idempotency(op) else { throw QueueStoreError("the store answered no idempotency claim") }
        return claim
    }

    public func finish(app: String, key: String, answer: IdempotentAnswer) async throws {
        _ = try await idempotency(.finish(app: app, key: key, answer: answer))
    }

    public func release(app: String, key: String) async {
        do {
            _ = try await idempotency(.release(app: app, key: key))
        } catch {
            logger.warning("could not release an Idempotency-Key (it is held until core.idempotency_ttl): \(error)")
        }
    }

    /// Hands an idempotency operation to the writer's next group commit.
    private func idempotency(_ op: IdempotencyOp) async throws -> IdempotencyClaim? {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<IdempotencyClaim?, any Error>) in
            let r = Resumption(c)
            let refused: (any Error)? = state.withLockedValue { s in
                if s.finalized { return QueueClosedError() }
                if let fault = s.fault { return fault }
                s.work.batch.idempotency.append(op)
                s.work.idempotencyWaiters.append(r)
                return nil
            }
            if let refused {
                r.resume(throwing: refused)
                return
            }
            signal.yield()
            startDeadline(r) { s in
                guard let i = s.work.idempotencyWaiters.firstIndex(where: { $0 === r }) else { return }
                s.work.idempotencyWaiters.remove(at: i)
                s.work.batch.idempotency.remove(at: i)
            }
        }
    }

    public func recordFailedBeforeSending(_ failures: [(job: DeliveryJob, reason: String)]) async throws {
        guard !failures.isEmpty else { return }
        _ = try await commit(try failedInserts(failures))
    }

    /// The stored form of deliveries that failed before sending: finished rows, for the status.
    private func failedInserts(_ failures: [(job: DeliveryJob, reason: String)]) throws -> [NotificationInsert] {
        try Self.notificationInserts(failures.map(\.job), createdAt: now().timeIntervalSince1970) { j, i in
            JobInsert(
                target: j.target, messageID: j.messageID, attempts: 0, maxAttempts: j.maxAttempts,
                notBefore: j.notBefore.timeIntervalSince1970, enqueuedAt: j.enqueuedAt.timeIntervalSince1970,
                leased: false, failedReason: StoreText.clean(failures[i].reason))
        }.inserts
    }

    /// One stored notification (body encoded once) per accepted notification, in order of first
    /// appearance, holding its jobs' rows; `groups[k].jobs` are the indices in `jobs` of insert k's rows.
    private static func notificationInserts(_ jobs: [DeliveryJob], createdAt t: Double, _ row: (DeliveryJob, Int) -> JobInsert) throws
        -> (inserts: [NotificationInsert], groups: [(accepted: AcceptedNotification, jobs: [Int])])
    {
        var groupIndex: [ObjectIdentifier: Int] = [:]
        var groups: [(accepted: AcceptedNotification, jobs: [Int])] = []
        for (i, j) in jobs.enumerated() {
            let key = ObjectIdentifier(j.accepted)
            if let g = groupIndex[key] {
                groups[g].jobs.append(i)
            } else {
                groupIndex[key] = groups.count
                groups.append((j.accepted, [i]))
            }
        }
        var inserts: [NotificationInsert] = []
        inserts.reserveCapacity(groups.count)
        let encoder = JSONEncoder()
        for g in groups {
            let body = String(decoding: try encoder.encode(storedForm(g.accepted.notification)), as: UTF8.self)
            var ins = NotificationInsert(
                notifID: g.accepted.notifID, app: g.accepted.app, platform: g.accepted.notification.platform, body: body, createdAt: t, jobs: [],
                fallback: g.accepted.fallback?.jsonString)
            ins.collapseID = g.accepted.notification.collapseID
            ins.jobs.reserveCapacity(g.jobs.count)
            for i in g.jobs { ins.jobs.append(row(jobs[i], i)) }
            inserts.append(ins)
        }
        return (inserts, groups)
    }

    /// A notification as stored and kept for its jobs left in the store: without its targets (tokens,
    /// subscriptions, channels), which its jobs carry one each (their rows or `jobs_data`). With
    /// them, the body stored each target a second time (100 tokens: ~7 KB of ~7.5), and encoding
    /// them was most of the cost of encoding it.
    static func storedForm(_ n: PushNotification) -> PushNotification {
        var n = n
        n.tokens = []
        n.subscriptions = nil
        n.channels = nil
        return n
    }

    /// Hands inserts to the writer's next group commit; returns each notification's row and job ids.
    private func commit(_ inserts: [NotificationInsert]) async throws -> Inserted {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Inserted, any Error>) in
            let r = Resumption(c)
            let refused: (any Error)? = state.withLockedValue { s in
                if s.finalized { return QueueClosedError() }
                if let fault = s.fault { return fault }
                s.work.batch.inserts += inserts
                s.work.insertGroups.append(InsertGroup(count: inserts.count, continuation: r))
                return nil
            }
            if let refused {
                r.resume(throwing: refused)
                return
            }
            signal.yield()
            startDeadline(r) { s in
                guard let i = s.work.insertGroups.firstIndex(where: { $0.continuation === r }) else { return }
                let offset = s.work.insertGroups[..<i].reduce(0) { $0 + $1.count }
                s.work.batch.inserts.removeSubrange(offset..<(offset + s.work.insertGroups[i].count))
                s.work.insertGroups.remove(at: i)
            }
        }
    }

    /// On a store that can hang (`exclusive` false), a request waits for its write at most
    /// `storeTimeout` even when the writer is stuck in a transaction the store does not answer (a
    /// server that stopped answering on open connections ignores the cancellation of
    /// `commitBounded`). Still gathered: taken out of the batch (`unqueue`), nothing is written.
    /// Already in a transaction: refused all the same (if that transaction commits later, its
    /// async jobs are sent: at-least-once). Either way the store is marked as not answering, so
    /// the next requests are refused at once until a write succeeds.
    private func startDeadline<T>(_ r: Resumption<T>, unqueue: @escaping @Sendable (inout State) -> Void) {
        guard !backend.exclusive else { return }
        let timeout = options.storeTimeout
        let sleeper = Task { [weak self] in
            do { try await Task.sleep(nanoseconds: UInt64(max(0, timeout) * 1e9)) } catch { return }
            guard let self else { return }
            let fault = StoreUnavailableError(.timeout)
            let t = self.now().timeIntervalSince1970
            let first: Bool = self.state.withLockedValue { s in
                guard !r.isResumed else { return false }
                unqueue(&s)
                let first = s.fault == nil
                if first {
                    s.fault = fault
                    s.faultRetryDelay = self.options.faultRetryDelay.lowerBound
                    s.faultRetryAt = t + s.faultRetryDelay
                }
                return first
            }
            if r.resume(throwing: fault), first {
                self.logger.error(
                    "queue store did not answer a write within queue.store_timeout (\(timeout) s): requests are answered 503 until it does")
            }
        }
        r.onResume { sleeper.cancel() }
    }

    public func next(platform: Platform) async -> DeliveryJob? {
        await withCheckedContinuation { (c: CheckedContinuation<DeliveryJob?, Never>) in
            let t = now().timeIntervalSince1970
            var fetch = false
            var read: [ClosedRange<Int64>]?
            let immediate: DeliveryJob?? = state.withLockedValue { s in
                if s.finalized { return .some(nil) }
                if !s.shutdown, let j = s.platforms[platform]?.jobs.ready.popFirst() {
                    s.outstanding += 1
                    return .some(j)
                }
                s.platforms[platform, default: PlatformState()].jobs.waiters.append(c)
                if !s.shutdown {
                    fetch = requestLeaseIfNeeded(platform, in: &s, now: t)
                    read = readParkedIfNeeded(platform, in: &s, now: t)
                }
                return .none
            }
            if let immediate { c.resume(returning: immediate) }
            if fetch { signal.yield() }
            if let read { startReadingParked(platform, read) }
        }
    }

    public func nextIfReady(platform: Platform) -> DeliveryJob? {
        var read: [ClosedRange<Int64>]?
        let job: DeliveryJob? = state.withLockedValue { s in
            guard !s.finalized, !s.shutdown, let j = s.platforms[platform]?.jobs.ready.popFirst() else { return nil }
            s.outstanding += 1
            if s.parked > 0 { read = readParkedIfNeeded(platform, in: &s, now: nil) }
            return j
        }
        if let read { startReadingParked(platform, read) }
        return job
    }

    public func reschedule(_ job: DeliveryJob) async {
        // The new attempt count and time go to the store with the next group commit; the worker does
        // not wait for it (after a crash the job is retried from its last committed state).
        let update = JobUpdate.reschedule(
            id: Int64(job.id), attempts: job.attempts, notBefore: job.notBefore.timeIntervalSince1970,
            lastError: StoreText.clean(job.lastError), credentialRetryUsed: job.credentialRetryUsed,
            row: storedRow(job))
        let tNow = now()
        var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        let wake: Bool = state.withLockedValue { s in
            let first = addUpdate(update, in: &s)
            s.outstanding -= 1
            place(job, in: &s, now: tNow, resume: &resume)
            return checkFinalize(&s) || first
        }
        for (c, j) in resume { c.resume(returning: j) }
        if wake { signal.yield() }
    }

    public func complete(_ job: DeliveryJob, outcome: FinalOutcome) async {
        // Group commit without waiting: a completion lost in a crash means one duplicate delivery
        // (at-least-once), never a lost one. Shutdown commits every pending write before closing.
        let t = now().timeIntervalSince1970
        let update = JobUpdate.completion(
            id: Int64(job.id), outcome: outcome, attempts: job.attempts, finishedAt: t,
            row: rowAtOutcome && job.storeRow != 0 ? OutcomeRow(job) : nil)
        var read: [ClosedRange<Int64>]?
        let wake: Bool = state.withLockedValue { s in
            let first = addUpdate(update, in: &s)
            s.outstanding -= 1
            s.held -= 1
            s.pendingDelta -= 1
            if s.parked > 0 { read = readParkedIfNeeded(job.platform, in: &s, now: t) }
            return checkFinalize(&s) || first
        }
        if wake { signal.yield() }
        if let read { startReadingParked(job.platform, read) }
    }

    /// The row a retry or an outcome of `job` carries to a store that may not have written it yet
    /// (nil: not such a store, or a job not from this queue's store).
    private func storedRow(_ job: DeliveryJob) -> StoredJob? {
        rowAtOutcome && job.storeRow != 0 ? StoredJob(job) : nil
    }

    /// Adds a completion or reschedule to the next commit. True when the writer must look at it:
    /// the first of a batch (it schedules the commit `updateDelay` later) or a full batch.
    private func addUpdate(_ u: JobUpdate, in s: inout State) -> Bool {
        guard !s.finalized else { return false }
        s.work.batch.updates.append(u)
        return s.work.batch.updates.count == 1 || s.work.batch.updates.count == options.updateBatch
    }

    public func shutdown() {
        let go: Bool = state.withLockedValue { s in
            if s.shutdown { return false }
            s.shutdown = true
            return checkFinalize(&s)
        }
        if go { signal.yield() }
    }

    /// Shuts down and waits until the leases are released and the store is closed.
    public func close() async {
        shutdown()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done: Bool = state.withLockedValue { s in
                if s.finalized { return true }
                s.closeWaiters.append(c)
                return false
            }
            if done { c.resume() }
        }
    }

    /// Test hook: stops the queue as a crash would (no lease release, no counters saved) and closes the store.
    func abandonForTesting() async {
        tasks.withLockedValue { for t in $0 { t.cancel() } }
        let waiters: [CheckedContinuation<DeliveryJob?, Never>] = state.withLockedValue { s in
            s.finalized = true
            var all: [CheckedContinuation<DeliveryJob?, Never>] = []
            for p in s.platforms.keys { all += s.platforms[p]!.jobs.takeWaiters() }
            return all
        }
        for w in waiters { w.resume(returning: nil) }
        signal.finish()
        await backend.close()
    }

    // MARK: status

    public func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]? {
        await flush()  // read this process's own changes
        guard let stored = try await backend.status(notifID: notifID) else { return nil }
        // Updates the store refused are not in it yet: what happened is what this process holds.
        let pending: [Int64: JobUpdate] = state.withLockedValue { s in
            guard !s.retained.isEmpty else { return [:] }
            var byJob: [Int64: JobUpdate] = [:]
            for u in s.retained { byJob[u.jobID] = u }  // the last of a job's updates
            return byJob
        }
        return stored.map { row in pending[row.jobID].map { Self.overlay($0, on: row.record) } ?? row.record }
    }

    /// A stored record as an update not written yet leaves it.
    static func overlay(_ u: JobUpdate, on r: DeliveryStatusRecord) -> DeliveryStatusRecord {
        var out = r
        switch u {
        case .reschedule(_, let attempts, let notBefore, let lastError, _, _):
            out.state = .retrying
            out.attempts = attempts
            out.nextTry = Date(timeIntervalSince1970: notBefore)
            out.error = lastError
        case .complete(_, let code, let attempts, let info, let finishedAt, _):
            let state = DeliveryState(code: code, attempts: attempts, notBefore: Date(timeIntervalSince1970: 0), lastError: info, providerID: info)
            out = DeliveryStatusRecord(
                platform: r.platform, token: r.token, state: state, attempts: attempts, finishedAt: Date(timeIntervalSince1970: finishedAt),
                app: r.app, fallback: r.fallback)
        }
        return out
    }

    // MARK: internals (call with the lock held)

    /// Keeps a rendering for jobs leased from the store later, within `maxCachedNotifications` and
    /// `maxCachedNotificationBytes`. When it does not fit, the renderings read back for earlier
    /// leases are dropped first (leases go in job order: their notifications are behind).
    private func cache(_ row: Int64, _ entry: CachedNotification, in s: inout State) {
        guard s.notifications[row] == nil, entry.bytes <= options.maxCachedNotificationBytes else { return }
        func fits(_ s: State) -> Bool {
            s.notifications.count < options.maxCachedNotifications && s.cachedBytes + entry.bytes <= options.maxCachedNotificationBytes
        }
        if !fits(s) {
            // Nothing to give up: no scan of the whole cache for each notification that does not fit.
            guard s.cachedReadBack > 0 else { return }
            keepCached(in: &s) { $0.leftInStore != nil }
            if !fits(s) { return }
        }
        s.notifications[row] = entry
        s.cachedBytes += entry.bytes
        if entry.leftInStore == nil { s.cachedReadBack += 1 }
    }

    /// Keeps only the renderings `keep` accepts (and their byte count with them).
    private func keepCached(in s: inout State, where keep: (CachedNotification) -> Bool) {
        s.notifications = s.notifications.filter { keep($0.value) }
        s.cachedBytes = 0
        s.cachedReadBack = 0
        for c in s.notifications.values {
            s.cachedBytes += c.bytes
            if c.leftInStore == nil { s.cachedReadBack += 1 }
        }
    }

    /// One job of notification `row` leased back: its rendering is dropped once no job left here needs it.
    private func leasedBack(_ row: Int64, in s: inout State) {
        guard let left = s.notifications[row]?.leftInStore else { return }
        if left <= 1 {
            s.cachedBytes -= s.notifications.removeValue(forKey: row)?.bytes ?? 0
        } else {
            s.notifications[row]!.leftInStore = left - 1
        }
    }

    /// Test hook: renderings kept, their stored bytes, how many of them wait for jobs left in the
    /// store, and how many were read back from the store (as counted, not recounted).
    var cachedNotifications: (count: Int, bytes: Int, waiting: Int, readBack: Int) {
        state.withLockedValue { s in
            (s.notifications.count, s.cachedBytes, s.notifications.values.filter { $0.leftInStore != nil }.count, s.cachedReadBack)
        }
    }

    /// Puts a job this process holds where a worker will find it.
    private func place(_ job: DeliveryJob, in s: inout State, now t: Date, resume: inout [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)]) {
        let p = job.platform
        if s.platforms[p] == nil { s.platforms[p] = PlatformState() }
        let handToWaiter = !s.shutdown
        // Mutated in place (a copy of the platform state would copy its arrays on every job).
        if let handed = s.platforms[p]!.jobs.place(job, now: t, handToWaiter: handToWaiter) {
            resume.append((handed, job))
            s.outstanding += 1
        }
        // A retry due before the sleeping timer wakes: wake it now (it sleeps again until then).
        let due = job.notBefore.timeIntervalSince1970
        if due > t.timeIntervalSince1970, s.tickerWake > 0, due < s.tickerWake {
            s.tickerWake = 0
            s.tickerSleeper?.cancel()
        }
    }

    /// When the store may next be asked for jobs of a platform: at once when it may have some, else
    /// `queue.poll_interval` after the last poll; nil when polling cannot find any. A store this
    /// process alone uses (SQLite with its lock) gets jobs only from here: it is polled only while it
    /// holds jobs this process does not (retries left by the last run, not yet due), so an idle
    /// gateway makes no query.
    private func nextPoll(_ ps: PlatformState, in s: State) -> Double? {
        if ps.storeMayHaveWork { return 0 }
        guard !backend.exclusive || s.pendingBase + s.pendingDelta > s.held + s.parked else { return nil }
        return ps.lastPoll + options.pollInterval
    }

    /// When the timer has something to do next (call with the lock held).
    private func nextTimerDue(_ s: State, heartbeatEvery: Double) -> Double {
        var due = min(s.lastHeartbeat + heartbeatEvery, s.lastPrune + options.pruneInterval)
        if s.fault != nil || !s.retained.isEmpty { due = min(due, s.faultRetryAt) }
        if s.stats != nil { due = min(due, s.lastStats + options.statsInterval) }
        for ps in s.platforms.values {
            if let top = ps.jobs.delayed.peek { due = min(due, top.notBefore.timeIntervalSince1970) }
            // A poll of the store for workers waiting with nothing held.
            if !ps.fetching, !ps.jobs.waiters.isEmpty, ps.jobs.ready.count == 0, let poll = nextPoll(ps, in: s) {
                due = min(due, poll)
            }
            // A read of parked jobs to try again after a failure.
            if ps.parkedReadFailed > 0, !ps.readingParked, !ps.parked.isEmpty { due = min(due, ps.parkedReadFailed + options.pollInterval) }
        }
        return due
    }

    /// Adds a lease request for `platform` to the next transaction when workers wait and the store may have jobs.
    private func requestLeaseIfNeeded(_ platform: Platform, in s: inout State, now t: Double) -> Bool {
        guard !s.shutdown, !s.finalizeRequested, let ps = s.platforms[platform] else { return false }
        // Not while the store refuses writes (a lease is one), nor while its refused updates fill the window.
        guard s.fault == nil, s.unwritten < options.maxHeld else { return false }
        guard !ps.fetching, !ps.jobs.waiters.isEmpty, ps.jobs.ready.count == 0 else { return false }
        guard let poll = nextPoll(ps, in: s), poll <= t else { return false }
        // One lease of up to `leaseBatch` rows: the dispatcher waits here with one feed loop per
        // platform (not one waiter per worker), so the waiter count says nothing about its free capacity.
        let limit = options.leaseBatch
        s.platforms[platform]!.fetching = true
        s.platforms[platform]!.lastPoll = t
        s.work.batch.leases.append(LeaseRequest(platform: platform, limit: limit))
        s.work.leaseLimits.append(limit)
        return true
    }

    /// Takes the next parked jobs of `platform` to read back when few are ready and the window has
    /// room (call with the lock held; hand the result to `startReadingParked` after unlocking).
    /// `now` nil: no failed read to wait for is checked (the hot path; a failure is retried by the timer).
    private func readParkedIfNeeded(_ platform: Platform, in s: inout State, now t: Double?) -> [ClosedRange<Int64>]? {
        guard parksJobs, !s.shutdown, !s.finalizeRequested, let ps = s.platforms[platform] else { return nil }
        guard !ps.readingParked, !ps.parked.isEmpty, ps.jobs.ready.count < options.leaseBatch else { return nil }
        if ps.parkedReadFailed > 0 {
            guard let t, t >= ps.parkedReadFailed + options.pollInterval else { return nil }
        }
        let n = min(options.leaseBatch, options.maxHeld - s.held - s.unwritten)
        guard n > 0 else { return nil }
        s.platforms[platform]!.readingParked = true
        return s.changeParked(platform) { $0.take(n) }
    }

    private func startReadingParked(_ platform: Platform, _ ranges: [ClosedRange<Int64>]) {
        Task { await self.readParked(platform, ranges) }
    }

    private func readParked(_ platform: Platform, _ ranges: [ClosedRange<Int64>]) async {
        let rows: [StoredJob]
        do {
            rows = try await backend.parkedJobs(ranges, owner: owner)
        } catch {
            logger.error("cannot read back deliveries left in the store (retried in \(options.pollInterval) s): \(error)")
            let t = now().timeIntervalSince1970
            state.withLockedValue { s in
                s.changeParked(platform) { $0.putBack(ranges) }
                s.platforms[platform]!.readingParked = false
                s.platforms[platform]!.parkedReadFailed = t
            }
            return
        }
        await handleLeased(rows, platform: platform, from: .parked)
    }

    private func checkFinalize(_ s: inout State) -> Bool {
        guard s.shutdown, s.outstanding <= 0, !s.finalizeRequested, !s.finalized else { return false }
        s.finalizeRequested = true
        return true
    }

    /// Waits until every change made so far is committed.
    public func flush() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let closed: Bool = state.withLockedValue { s in
                if s.finalized { return true }
                s.work.updateWaiters.append(c)
                return false
            }
            if closed { c.resume() } else { signal.yield() }
        }
    }

    // MARK: writer (group commit)

    private func writerLoop(_ stream: AsyncStream<Void>) async {
        for await _ in stream {
            while true {
                let taken: (work: Work, finalize: Bool)? = state.withLockedValue { s in
                    let finalize = s.finalizeRequested && !s.finalized
                    if s.fault != nil {
                        // The store refuses writes. Shutting down: what is left goes into the one
                        // last try of `finalizeStore`. Else what nobody waits for is kept for the
                        // timer's next try (a heartbeat, with backoff), not tried on every completion.
                        if finalize { return (Work(), true) }
                        if !s.work.batch.heartbeat, s.work.insertGroups.isEmpty, s.work.idempotencyWaiters.isEmpty, s.work.updateWaiters.isEmpty {
                            return nil
                        }
                    }
                    if !finalize, !s.shutdown, !s.work.batch.updates.isEmpty, s.work.batch.updates.count < options.updateBatch,
                        s.work.onlyUnwaited
                    {
                        // Only completions nobody waits for: gather more, for `updateDelay`
                        // (wall-clock time: the injected clock may stand still in tests).
                        if !s.updatesDue {
                            if !s.updateWakeScheduled {
                                s.updateWakeScheduled = true
                                let delay = Int64(min(max(options.updateDelay, 0), 1) * 1e9)
                                let wake: @Sendable () -> Void = { [self] in
                                    state.withLockedValue { s in
                                        s.updateWakeScheduled = false
                                        s.updatesDue = true
                                    }
                                    signal.yield()
                                }
                                // A timer of the writer's own event loop, where the writer runs: no
                                // task, no timer thread, no hop through the global executor (each
                                // was a thread wake-up per batch of completions).
                                if let loop = backend.eventLoop {
                                    loop.scheduleTask(in: .nanoseconds(delay), wake)
                                } else {
                                    Task {
                                        try? await Task.sleep(nanoseconds: UInt64(delay))
                                        wake()
                                    }
                                }
                            }
                            return nil
                        }
                    }
                    s.updatesDue = false
                    var w = s.work
                    s.work = Work()
                    if !s.retained.isEmpty, !w.batch.isEmpty {
                        // Refused earlier: written first, so a job's changes reach the store in order
                        // (alone they wait for the timer's next try: no loop on a failing store).
                        w.batch.updates = s.retained + w.batch.updates
                        s.retained = []
                    }
                    // The next batch likely holds as many updates: no regrowing (and copying) the array
                    // from empty while the workers append to it under the lock.
                    s.work.batch.updates.reserveCapacity(min(w.batch.updates.count, options.updateBatch))
                    return (w, finalize)
                }
                guard let (work, finalize) = taken else { break }
                if !work.batch.isEmpty || !work.insertGroups.isEmpty || !work.updateWaiters.isEmpty || !work.idempotencyWaiters.isEmpty {
                    await execute(work)
                    continue
                }
                if finalize { await finalizeStore() }
                break
            }
            if state.withLockedValue({ $0.finalized }) { break }
        }
    }

    private func execute(_ work: Work) async {
        var work = work
        let t = now().timeIntervalSince1970
        if let fault = state.withLockedValue({ $0.fault }) {
            // Gathered before the store was found failing: refused at once, not after another wait
            // for a store known to fail (the timer's probe finds when it takes writes again).
            refuseWaiting(&work, fault)
            if work.batch.isEmpty {
                for c in work.updateWaiters { c.resume() }
                return
            }
            if !work.batch.heartbeat {
                // Only the timer's tries (a heartbeat, with backoff) go to a store known to refuse
                // writes; the rest is kept for them (on PostgreSQL each would wait `storeTimeout`).
                storeRefused(work, fault, error: nil, now: t, tried: false)
                return
            }
        }
        let result: WriteResult
        do {
            let platforms = work.batch.leases.map(\.platform)
            let limits = work.leaseLimits
            result = try await commitBounded(work.batch, now: t) { [self] late in
                await self.takeLateLeases(late, platforms: platforms, limits: limits)
            }
        } catch {
            if let cause = StoreFaults.cause(of: error) {
                storeRefused(work, StoreUnavailableError(cause), error: error, now: t)
                return
            }
            logger.error("queue store transaction failed: \(error); retrying its parts one by one")
            await isolate(work, now: t)
            return
        }
        storeAccepted()
        var k = 0
        for g in work.insertGroups {
            g.continuation.resume(returning: (Array(result.inserted[k..<(k + g.count)]), result.guarded))
            k += g.count
        }
        resumeIdempotency(work, claims: result.claims)
        await finishMaintenance(work, result)
    }

    /// One transaction, given up after `storeTimeout` on a store that can hang (a database server
    /// gone: the pool waits for a connection). A store this process alone uses answers or fails at
    /// once and is called directly (its writer runs on the store's event loop).
    private func commitBounded(
        _ batch: WriteBatch, now t: Double, late: (@Sendable (WriteResult) async -> Void)? = nil
    ) async throws -> WriteResult {
        let backend = self.backend
        let owner = self.owner
        let lease = options.leaseTimeout
        if backend.exclusive { return try await backend.commit(batch, owner: owner, now: t, leaseTimeout: lease) }
        let timeout = options.storeTimeout
        // Not a task group: a group waits for its children, and a transaction that waits for a
        // connection the pool cannot make (the server gone) was seen not to end when cancelled, which
        // left the writer stuck and no probe ever finding the store back. Past the timeout the writer
        // goes on; the cancelled transaction ends when it ends. Should it commit after all, its
        // requests were refused already (their jobs are sent: at-least-once), its delivery updates,
        // kept, are written again (the same values), and `late` takes what it leased to this process.
        return try await withCheckedThrowingContinuation { c in
            let r = Resumption<WriteResult>(c)
            let commit = Task {
                do {
                    let result = try await backend.commit(batch, owner: owner, now: t, leaseTimeout: lease)
                    if !r.resume(returning: result) { await late?(result) }
                } catch {
                    r.resume(throwing: error)
                }
            }
            let timer = Task {
                do { try await Task.sleep(nanoseconds: UInt64(max(0, timeout) * 1e9)) } catch { return }
                if r.resume(throwing: StoreUnavailableError(.timeout)) { commit.cancel() }
            }
            r.onResume { timer.cancel() }
        }
    }

    /// A transaction given up at `storeTimeout` committed after all: the jobs it leased to this process
    /// are taken as a lease's answer (else they would wait in the store for the lease timeout).
    private func takeLateLeases(_ result: WriteResult, platforms: [Platform], limits: [Int]) async {
        let taken = result.leased.reduce(0) { $0 + $1.count }
        guard taken > 0 else { return }
        logger.notice("a transaction given up at queue.store_timeout committed later: its \(taken) leased deliveries are taken")
        for (i, platform) in platforms.enumerated() where i < result.leased.count && i < limits.count {
            await handleLeased(result.leased[i], platform: platform, from: .lease(limit: limits[i]))
        }
    }

    /// A fault of the store as the error its waiters get; other errors as they are.
    private static func refusal(_ error: any Error) -> any Error {
        StoreFaults.cause(of: error).map { StoreUnavailableError($0) } ?? error
    }

    /// Refuses the requests and Idempotency-Key operations of `work` with `fault` (nothing of them
    /// is written) and takes them out of its batch.
    private func refuseWaiting(_ work: inout Work, _ fault: any Error) {
        for g in work.insertGroups { g.continuation.resume(throwing: fault) }
        for c in work.idempotencyWaiters { c.resume(throwing: fault) }
        work.insertGroups = []
        work.idempotencyWaiters = []
        work.batch.inserts = []
        work.batch.idempotency = []
    }

    /// The store refused a transaction for a fault of its own: the requests waiting for it get the
    /// fault (nothing of them was stored), its completions and reschedules are kept to be written
    /// again, its counter increments go back into the next batch, and the timer tries the store
    /// again with backoff. Until a write succeeds new requests are refused at once.
    /// `tried` false: the batch was not tried (the store was known to refuse): no backoff step, no log.
    private func storeRefused(_ work: Work, _ fault: StoreUnavailableError, error: (any Error)?, now t: Double, tried: Bool = true) {
        var work = work
        refuseWaiting(&work, fault)
        let (first, kept): (Bool, Int) = state.withLockedValue { s in
            let first = s.fault == nil
            s.fault = fault
            s.retained = work.batch.updates + s.retained
            s.work.batch.statsDelta.merge(work.batch.statsDelta, uniquingKeysWith: Int64.saturatingSum)
            for req in work.batch.leases { s.platforms[req.platform]?.fetching = false }
            guard tried else { return (false, s.retained.count) }
            let delays = options.faultRetryDelay
            s.faultRetryDelay = first ? delays.lowerBound : min(max(s.faultRetryDelay * 2, delays.lowerBound), delays.upperBound)
            s.faultRetryAt = t + s.faultRetryDelay
            if s.tickerWake > s.faultRetryAt {
                s.tickerWake = 0
                s.tickerSleeper?.cancel()
            }
            return (first, s.retained.count)
        }
        for c in work.updateWaiters { c.resume() }
        guard tried else { return }
        let why = error.map { ": \($0)" } ?? ""
        if first {
            logger.error(
                "queue store cannot take writes (\(fault.cause.rawValue))\(why); requests are answered \(fault.httpStatus) until it does, \(kept) delivery updates kept to be written then"
            )
        } else {
            logger.debug("queue store still refuses writes (\(fault.cause.rawValue))\(why); \(kept) delivery updates kept")
        }
    }

    /// A transaction committed: a fault found earlier is over.
    private func storeAccepted() {
        let was: StoreUnavailableError? = state.withLockedValue { s in
            defer { s.fault = nil }
            return s.fault
        }
        if let was { logger.notice("queue store takes writes again (it refused them: \(was.cause.rawValue))") }
    }

    /// Why the store cannot take writes now (nil: the last write succeeded).
    public var storeProblem: StoreUnavailableError? { state.withLockedValue { $0.fault } }

    /// Delivery updates the store refused, kept in memory to be written again.
    public var unwrittenUpdates: Int { state.withLockedValue { $0.unwritten } }

    /// Resumes the idempotency waiters after their operations were committed: each claim gets its answer.
    private func resumeIdempotency(_ work: Work, claims: [IdempotencyClaim]) {
        var c = 0
        for (i, op) in work.batch.idempotency.enumerated() where i < work.idempotencyWaiters.count {
            if case .claim = op {
                work.idempotencyWaiters[i].resume(returning: c < claims.count ? claims[c] : nil)
                c += 1
            } else {
                work.idempotencyWaiters[i].resume(returning: nil)
            }
        }
    }

    /// After this process's counter increments were saved: its totals become the store's, which add
    /// up every process sharing it (gorush's counters on a shared storage are the cluster's too),
    /// plus the increments taken for a batch not committed yet and those not taken yet. Never lower
    /// than before (the store only adds), so `/metrics` counters do not go back.
    private func rebaseStats(_ stored: [String: Int64]) {
        state.withLockedValue { s in
            guard let stats = s.stats else { return }
            let pending = s.work.batch.statsDelta
            stats.rebase { unsaved in
                var flat = stored
                flat.merge(pending, uniquingKeysWith: Int64.saturatingSum)
                flat.merge(StatsCodec.increments(unsaved), uniquingKeysWith: Int64.saturatingSum)
                return StatsCodec.snapshot(flat)
            }
        }
    }

    /// Resumes update waiters and hands out leased rows after a successful commit.
    private func finishMaintenance(_ work: Work, _ result: WriteResult) async {
        for c in work.updateWaiters { c.resume() }
        if let stored = result.storedStats { rebaseStats(stored) }
        if result.pruneMore, let p = work.batch.prune {
            // More rows to prune: another bounded pass in the next transaction (with whatever
            // work came meanwhile), so the writer is never held by one long delete.
            let go: Bool = state.withLockedValue { s in
                if s.finalized || s.finalizeRequested { return false }
                if s.work.batch.prune == nil { s.work.batch.prune = p }
                return true
            }
            if go { signal.yield() }
        }
        if result.reclaimed > 0 {
            logger.warning("released \(result.reclaimed) deliveries leased by a process whose lease expired")
            state.withLockedValue { s in for p in s.platforms.keys { s.platforms[p]!.storeMayHaveWork = true } }
        }
        for (i, req) in work.batch.leases.enumerated() {
            await handleLeased(result.leased[i], platform: req.platform, from: .lease(limit: work.leaseLimits[i]))
        }
        await backend.afterCommit()
    }

    /// A group commit failed: one client's bad value must not fail the others. Each client's inserts
    /// are committed alone (only the failing client gets the error), then the updates, leases and
    /// upkeep; if those fail again, the updates are applied one per transaction and a failing one is
    /// dropped (its job stays leased and is retried after the lease timeout).
    private func isolate(_ work: Work, now t: Double) async {
        var k = 0
        for g in work.insertGroups {
            var part = WriteBatch()
            part.inserts = Array(work.batch.inserts[k..<(k + g.count)])
            k += g.count
            do {
                let r = try await commitBounded(part, now: t)
                g.continuation.resume(returning: (r.inserted, r.guarded))
            } catch {
                logger.error("queue store refused one request's \(g.count) notification(s): \(error)")
                g.continuation.resume(throwing: Self.refusal(error))
            }
        }
        if !work.batch.idempotency.isEmpty {
            var part = WriteBatch()
            part.idempotency = work.batch.idempotency
            do {
                let r = try await commitBounded(part, now: t)
                resumeIdempotency(work, claims: r.claims)
            } catch {
                logger.error("queue store refused \(work.idempotencyWaiters.count) Idempotency-Key operation(s): \(error)")
                for c in work.idempotencyWaiters { c.resume(throwing: Self.refusal(error)) }
            }
        }
        var rest = work.batch
        rest.inserts = []
        rest.idempotency = []
        if rest.isEmpty {
            for c in work.updateWaiters { c.resume() }
            return
        }
        do {
            let r = try await commitBounded(rest, now: t)
            storeAccepted()
            await finishMaintenance(work, r)
            return
        } catch {
            if let cause = StoreFaults.cause(of: error) {
                var left = work
                left.batch = rest
                left.insertGroups = []
                left.idempotencyWaiters = []
                storeRefused(left, StoreUnavailableError(cause), error: error, now: t)
                return
            }
            logger.error("queue store transaction failed again without inserts: \(error)")
        }
        var kept = 0
        var refused: [JobUpdate] = []
        var fault: StoreUnavailableError?
        for u in rest.updates {
            if fault != nil {
                refused.append(u)
                continue
            }
            var one = WriteBatch()
            one.updates = [u]
            do {
                _ = try await commitBounded(one, now: t)
                kept += 1
            } catch {
                if let cause = StoreFaults.cause(of: error) {
                    // The store, not this update: it and the rest are kept and written again.
                    fault = StoreUnavailableError(cause)
                    refused.append(u)
                } else {
                    // This update's own value (the store took the others): it cannot ever be
                    // written; its job stays leased and is retried after the lease timeout.
                    logger.error("queue store refused one delivery update, dropped: \(error)")
                }
            }
        }
        rest.updates = []
        if let fault {
            var left = work
            left.batch = rest
            left.batch.updates = refused
            left.insertGroups = []
            left.idempotencyWaiters = []
            storeRefused(left, fault, error: nil, now: t)
            return
        }
        do {
            let r = rest.isEmpty ? WriteResult() : try await commitBounded(rest, now: t)
            await finishMaintenance(work, r)
        } catch {
            logger.error("queue store upkeep failed (\(kept) updates kept): \(error)")
            for c in work.updateWaiters { c.resume() }
            state.withLockedValue { s in
                for req in work.batch.leases { s.platforms[req.platform]?.fetching = false }
            }
        }
    }

    /// Where leased rows come from: a lease of up to `limit` free jobs, or parked jobs read back (`readParked`).
    private enum LeasedRows {
        case lease(limit: Int)
        case parked
    }

    /// Places leased rows.
    private func handleLeased(_ rows: [StoredJob], platform: Platform, from source: LeasedRows) async {
        var accepted: [Int64: AcceptedNotification] = [:]
        var missing: [Int64] = []
        state.withLockedValue { s in
            for r in rows where accepted[r.notifRow] == nil {
                if let a = s.notifications[r.notifRow] {
                    accepted[r.notifRow] = a.accepted
                } else if !missing.contains(r.notifRow) {
                    missing.append(r.notifRow)
                }
            }
        }
        var unreadable: [StoredJob] = []
        if !missing.isEmpty {
            let t = now().timeIntervalSince1970
            do {
                let bodies = try await backend.notifications(missing)
                let decoder = JSONDecoder()
                var loaded: [Int64: AcceptedNotification] = [:]
                var sizes: [Int64: Int] = [:]
                for (row, stored) in bodies {
                    if let n = try? decoder.decode(PushNotification.self, from: Data(stored.body.utf8)) {
                        loaded[row] = AcceptedNotification(notifID: stored.notifID, notification: n, prepared: nil, app: stored.app)
                        sizes[row] = stored.body.utf8.count
                    }
                }
                state.withLockedValue { s in
                    // For the next lease batches of the same notifications (leases go in job order).
                    for (row, a) in loaded {
                        // Read back meanwhile by another batch (a lease and a read of parked jobs
                        // at once): one notification, one copy.
                        if let cached = s.notifications[row] {
                            loaded[row] = cached.accepted
                            continue
                        }
                        cache(row, CachedNotification(accepted: a, at: t, bytes: sizes[row] ?? 0, leftInStore: nil), in: &s)
                    }
                }
                accepted.merge(loaded) { a, _ in a }
            } catch {
                logger.error("cannot load stored notifications: \(error)")
            }
        }
        let tNow = now()
        var jobs: [DeliveryJob] = []
        jobs.reserveCapacity(rows.count)
        for r in rows {
            guard let a = accepted[r.notifRow] else {
                unreadable.append(r)
                continue
            }
            var j = DeliveryJob(
                id: UInt64(r.id), messageID: r.messageID, target: r.target, accepted: a, maxAttempts: r.maxAttempts,
                now: Date(timeIntervalSince1970: r.enqueuedAt))
            j.storeRow = r.notifRow
            j.attempts = r.attempts
            j.credentialRetryUsed = r.credentialRetryUsed
            j.notBefore = Date(timeIntervalSince1970: r.notBefore)
            j.lastError = r.lastError
            j.state = DeliveryState(code: .pending, attempts: r.attempts, notBefore: j.notBefore, lastError: r.lastError, providerID: nil)
            jobs.append(j)
        }
        var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        var read: [ClosedRange<Int64>]?
        let more: Bool = state.withLockedValue { s in
            s.held += rows.count
            for r in rows { leasedBack(r.notifRow, in: &s) }
            if s.platforms[platform] == nil { s.platforms[platform] = PlatformState() }
            switch source {
            case .parked:
                s.platforms[platform]!.readingParked = false
                s.platforms[platform]!.parkedReadFailed = 0
            case .lease(let limit):
                s.platforms[platform]!.fetching = false
                s.platforms[platform]!.storeMayHaveWork = rows.count >= limit
            }
            for j in jobs { place(j, in: &s, now: tNow, resume: &resume) }
            s.outstanding += unreadable.count
            read = readParkedIfNeeded(platform, in: &s, now: tNow.timeIntervalSince1970)
            return requestLeaseIfNeeded(platform, in: &s, now: tNow.timeIntervalSince1970)
        }
        for (c, j) in resume { c.resume(returning: j) }
        if more { signal.yield() }
        if let read { startReadingParked(platform, read) }
        for r in unreadable {
            // A stored notification that no longer decodes cannot be sent: report it failed.
            let a = AcceptedNotification(notifID: "", notification: PushNotification(platform: platform), prepared: nil)
            var j = DeliveryJob(id: UInt64(r.id), messageID: r.messageID, target: r.target, accepted: a, maxAttempts: r.maxAttempts, now: tNow)
            j.attempts = r.attempts
            Task { await self.complete(j, outcome: .failed(reason: "stored notification unreadable", tokenDead: false)) }
        }
    }

    private func finalizeStore() async {
        var batch = WriteBatch()
        batch.release = true
        // Updates the store refused until now: a last try (a job whose outcome is not written is
        // pending in the store and sent again at the next start).
        // With the store refusing writes the writer leaves its gathered work here (`writerLoop`).
        let (retained, leftover, stats, known, fault): ([JobUpdate], Work, Stats?, Int, StoreUnavailableError?) = state.withLockedValue { s in
            defer {
                s.retained = []
                s.work = Work()
            }
            return (s.retained, s.work, s.stats, max(0, s.pendingBase + s.pendingDelta), s.fault)
        }
        var left = leftover
        refuseWaiting(&left, fault.map { $0 as any Error } ?? QueueClosedError())
        let retainedUpdates = retained + leftover.batch.updates
        batch.updates = retainedUpdates
        batch.statsDelta = leftover.batch.statsDelta
        if let stats { batch.statsDelta.merge(StatsCodec.increments(stats.takeUnsaved()), uniquingKeysWith: Int64.saturatingSum) }
        do {
            _ = try await commitBounded(batch, now: now().timeIntervalSince1970)
            // What the next start finds, read from the store (another process may share it).
            if let left = try? await backend.pendingAtRest() {
                logger.info("queue store closed; \(left) deliveries left in the store for the next start")
            } else {
                logger.info("queue store closed; about \(known) deliveries left in the store for the next start")
            }
        } catch {
            // Completions not written: their jobs are still pending in the store.
            let unwritten = retainedUpdates.filter { if case .complete = $0 { return true } else { return false } }.count
            logger.error(
                "cannot write to the queue store on shutdown: \(unwritten) delivery outcomes not written (sent again at the next start), about \(known + unwritten) deliveries left in the store; leases expire after \(options.leaseTimeout) s: \(error)"
            )
        }
        for c in leftover.updateWaiters { c.resume() }
        await backend.close()
        let (waiters, closeWaiters): ([CheckedContinuation<DeliveryJob?, Never>], [CheckedContinuation<Void, Never>]) = state.withLockedValue { s in
            s.finalized = true
            var all: [CheckedContinuation<DeliveryJob?, Never>] = []
            for p in s.platforms.keys { all += s.platforms[p]!.jobs.takeWaiters() }
            let cw = s.closeWaiters
            s.closeWaiters = []
            return (all, cw)
        }
        for w in waiters { w.resume(returning: nil) }
        for c in closeWaiters { c.resume() }
        signal.finish()
        tasks.withLockedValue { for t in $0 { t.cancel() } }
    }

    // MARK: timer: retries coming due, polling the store, heartbeats, counters, pruning

    private func tickerLoop() async {
        let heartbeatEvery = max(0.05, options.leaseTimeout / 4)
        let tick = Double(options.tick.components.seconds) + Double(options.tick.components.attoseconds) / 1e18
        while !Task.isCancelled {
            // Sleep until the next thing due (at least `tick`, at most `maxSleep`); `place` cuts the
            // sleep short for a retry due earlier.
            let sleeper: Task<Void, Never>? = state.withLockedValue { s in
                if s.finalized || s.finalizeRequested { return nil }
                let t = now().timeIntervalSince1970
                let wait = min(max(nextTimerDue(s, heartbeatEvery: heartbeatEvery) - t, tick), max(tick, options.maxSleep))
                s.tickerWake = t + wait
                let task = Task { _ = try? await Task.sleep(nanoseconds: UInt64(wait * 1e9)) }
                s.tickerSleeper = task
                return task
            }
            guard let sleeper else { return }
            await withTaskCancellationHandler {
                await sleeper.value
            } onCancel: {
                sleeper.cancel()
            }
            let tNow = now()
            let t = tNow.timeIntervalSince1970
            var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
            var refreshPending = false
            var pruneBefore: Double?
            var reads: [(Platform, [ClosedRange<Int64>])] = []
            let (stop, go): (Bool, Bool) = state.withLockedValue { s in
                s.tickerWake = 0
                s.tickerSleeper = nil
                if s.finalized || s.finalizeRequested { return (true, false) }
                var go = false
                if !s.shutdown {
                    for p in Array(s.platforms.keys) {
                        if let top = s.platforms[p]!.jobs.delayed.peek, top.notBefore <= tNow {
                            let handed = s.platforms[p]!.jobs.promoteDue(now: tNow)
                            s.outstanding += handed.count
                            resume += handed
                        }
                        if requestLeaseIfNeeded(p, in: &s, now: t) { go = true }
                        if let r = readParkedIfNeeded(p, in: &s, now: t) { reads.append((p, r)) }
                    }
                }
                if s.fault != nil || !s.retained.isEmpty, t >= s.faultRetryAt {
                    // A write (the heartbeat) to find whether the store takes writes again; the
                    // refused updates ride along. Not again before the backoff's delay.
                    s.faultRetryAt = t + max(s.faultRetryDelay, options.faultRetryDelay.lowerBound)
                    s.work.batch.heartbeat = true
                    go = true
                }
                if t - s.lastHeartbeat >= heartbeatEvery {
                    s.lastHeartbeat = t
                    s.work.batch.heartbeat = true
                    refreshPending = !backend.exclusive
                    // Forget renderings kept for jobs another process may have taken.
                    keepCached(in: &s) { t - $0.at < 600 }
                    go = true
                }
                if let stats = s.stats, t - s.lastStats >= options.statsInterval {
                    s.lastStats = t
                    let d = StatsCodec.increments(stats.takeUnsaved())
                    if !d.isEmpty {
                        s.work.batch.statsDelta.merge(d, uniquingKeysWith: Int64.saturatingSum)
                        go = true
                    } else if !backend.exclusive {
                        // Shared store: take in the other processes' counts (a process alone on
                        // its store reads nothing while idle).
                        s.work.batch.readStats = true
                        go = true
                    }
                }
                if t - s.lastPrune >= options.pruneInterval {
                    s.lastPrune = t
                    pruneBefore = t - options.statusRetention
                }
                return (false, go)
            }
            for (c, j) in resume { c.resume(returning: j) }
            if go { signal.yield() }
            for (p, r) in reads { startReadingParked(p, r) }
            if stop { return }
            if let pruneBefore { await startPrune(retentionCutoff: pruneBefore) }
            if refreshPending {
                if let c = try? await backend.pendingCount() {
                    state.withLockedValue { s in
                        s.pendingBase = c
                        s.pendingDelta = 0
                    }
                }
            }
        }
    }
}

extension DurableQueue {
    /// Starts a prune pass now of the finished deliveries older than `cutoff` (seconds since 1970),
    /// as the timer does every `pruneInterval` with the retention's cutoff; `statusMaxRecords` applies.
    public func prune(finishedBefore cutoff: Double) async {
        await startPrune(retentionCutoff: cutoff)
    }

    /// Starts a prune pass: finished deliveries older than the retention, or older than the newest
    /// `statusMaxRecords` finished ones (read outside the writer's transactions).
    fileprivate func startPrune(retentionCutoff: Double) async {
        var cutoff = retentionCutoff
        var capped = false
        if options.statusMaxRecords > 0 {
            do {
                if let c = try await backend.finishedCutoff(keeping: options.statusMaxRecords), c > cutoff {
                    cutoff = c
                    capped = true
                }
            } catch {
                logger.warning("cannot read which status records are beyond queue.status_max_records: \(error)")
            }
        }
        let (go, first): (Bool, Bool) = state.withLockedValue { s in
            if s.finalized || s.finalizeRequested { return (false, false) }
            s.work.batch.prune = PruneRequest(
                finishedBefore: max(cutoff, s.work.batch.prune?.finishedBefore ?? cutoff), limit: max(1, options.pruneBatch))
            let first = capped && !s.capReached
            if capped { s.capReached = true }
            return (true, first)
        }
        if first {
            logger.notice(
                "more than queue.status_max_records (\(options.statusMaxRecords)) finished deliveries are stored: the oldest are pruned before queue.status_retention (\(Int(options.statusRetention)) s)"
            )
        }
        if go { signal.yield() }
    }
}

/// A durable engine (`queue.engine: sqlite` or `postgres`): the queue is its own status source and
/// saves the counters' increments, seeded from the store.
public struct DurableEngine: QueueEngine {
    public let queue: DurableQueue
    public let stats: Stats

    public init(_ queue: DurableQueue) {
        self.queue = queue
        stats = Stats(initial: queue.storedStats)
        queue.persist(stats: stats)
    }

    public var driver: any QueueDriver { queue }
    public var statusSource: (any DeliveryStatusSource)? { queue }
    public var sinks: [any DeliveryEventSink] { [] }
    public var idempotency: any IdempotencyStore { queue }
}

/// A continuation resumed once, by whichever comes first: the writer's answer or the request's
/// deadline (`startDeadline`); the later one is ignored.
final class Resumption<T: Sendable>: @unchecked Sendable {
    // @unchecked: every field is behind `lock`.
    private let lock = NIOLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var onResumed: (@Sendable () -> Void)?

    init(_ c: CheckedContinuation<T, any Error>) { continuation = c }

    var isResumed: Bool { lock.withLock { continuation == nil } }

    /// Runs `body` once resumed (at once if it already is).
    func onResume(_ body: @escaping @Sendable () -> Void) {
        let now: Bool = lock.withLock {
            if continuation == nil { return true }
            onResumed = body
            return false
        }
        if now { body() }
    }

    @discardableResult
    func resume(returning value: T) -> Bool { finish(.success(value)) }

    @discardableResult
    func resume(throwing error: any Error) -> Bool { finish(.failure(error)) }

    private func finish(_ result: Result<T, any Error>) -> Bool {
        let (c, after): (CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?) = lock.withLock {
            defer {
                continuation = nil
                onResumed = nil
            }
            return (continuation, onResumed)
        }
        guard let c else { return false }
        c.resume(with: result)
        after?()
        return true
    }
}
