import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

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
///
/// This file holds the type, its state and its start; each facet is an extension in its own file:
/// `+Enqueue` (accepting jobs), `+Leases` (handing jobs to workers, leasing from the store, parked
/// jobs), `+Outcomes` (retries and final outcomes), `+Writer` (the group commit), `+StoreFaults`
/// (a store that refuses writes), `+Ticker` (the timer: retries due, polls, heartbeats, counters,
/// pruning), `+Status`, `+Idempotency` and `+Shutdown`.
public final class DurableQueue: QueueDriver, DeliveryStatusSource, IdempotencyStore, @unchecked Sendable {
    // @unchecked: every mutable field is inside `state` (a lock); the rest is immutable after init.

    struct PlatformState {
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

        /// Whether parked jobs are to be read back now: some are parked, none are being read, fewer than
        /// `leaseBatch` are ready, and no read failed, or the last failed at least `retryAfter` before
        /// `now` (nil, the hot path: not after a failure; the timer tries again).
        func parkedReadDue(leaseBatch: Int, now t: Double?, retryAfter: Double) -> Bool {
            guard !readingParked, !parked.isEmpty, jobs.ready.count < leaseBatch else { return false }
            if parkedReadFailed > 0 {
                guard let t, t >= parkedReadFailed + retryAfter else { return false }
            }
            return true
        }
    }

    typealias Inserted = (ids: [(notifRow: Int64, jobIDs: [Int64])], guarded: [Int64: GuardOutcome])

    struct InsertGroup {
        var count: Int
        var continuation: Resumption<Inserted>
    }

    struct Work {
        var batch = WriteBatch()
        var insertGroups: [InsertGroup] = []
        /// One per `batch.idempotency` entry, in order.
        var idempotencyWaiters: [Resumption<IdempotencyClaim?>] = []
        /// One per `batch.cancels` entry, in order.
        var cancelWaiters: [Resumption<[CancelledRow]>] = []
        var updateWaiters: [CheckedContinuation<Void, Never>] = []
        /// The requests waiting for this work's transaction (its `CommitGate`).
        var waiting: [any CommitHold] {
            insertGroups.map(\.continuation) + idempotencyWaiters + cancelWaiters
        }
        /// Nothing in it but completions, reschedules and counters: nobody waits for its commit.
        var onlyUnwaited: Bool {
            insertGroups.isEmpty && idempotencyWaiters.isEmpty && cancelWaiters.isEmpty && updateWaiters.isEmpty && batch.holdsOnlyUnwaited
        }
    }

    struct State {
        /// Changed through `inPlace` on the hot paths.
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
        var notifications = NotificationCache()
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

    let state = NIOLockedValueBox(State())
    let backend: any QueueBackend
    public let options: DurableQueueOptions
    /// This process's lease owner id.
    public let owner: String
    /// Counters as stored when the queue was opened (seed `Stats(initial:)` with it).
    public let storedStats: StatsSnapshot
    let logger: Logger
    let now: @Sendable () -> Date
    let signal: AsyncStream<Void>.Continuation
    let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])
    /// Async jobs beyond `maxHeld` are leased to this process as they are inserted and read back by id
    /// as workers free up (`ParkedJobIDs`), instead of being left free and leased back with an update
    /// of each row: the backlog costs one write per job, as a held job does, and is read back ahead of
    /// the workers (while `leaseBatch` or fewer are ready), so they never wait for it. Only on a store
    /// this process uses alone (SQLite with its lock), where leaving jobs for others has no use.
    let parksJobs: Bool
    /// The store may not have written a leased job's row yet (`WrittenOnce`: SQLite alone on its
    /// file): its retries and outcomes carry the job as held (`storedRow`).
    let rowAtOutcome: Bool

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
            s.notifications.maxCount = options.maxCachedNotifications
            s.notifications.maxBytes = options.maxCachedNotificationBytes
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

    /// Test hook: renderings kept, their stored bytes, how many of them wait for jobs left in the
    /// store, and how many were read back from the store (as counted, not recounted).
    var cachedNotifications: (count: Int, bytes: Int, waiting: Int, readBack: Int) {
        state.withLockedValue { s in
            let c = s.notifications
            return (c.entries.count, c.bytes, c.entries.values.filter { $0.leftInStore != nil }.count, c.readBack)
        }
    }
}

extension DurableQueue.State {
    /// Runs `body` on the state of `platform` where it is stored (nil: the platform has none). The
    /// dictionary's own subscript moves the value out into an optional and back for a change made
    /// through it (`platforms[p]?.x = …`, `platforms[p]!.x = …`), a copy of the whole platform state
    /// per call; its values view changes the value in place. Used on every job handed out and
    /// every completion.
    mutating func inPlace<R>(_ platform: Platform, _ body: (inout DurableQueue.PlatformState) -> R) -> R? {
        guard let i = platforms.index(forKey: platform) else { return nil }
        return body(&platforms.values[i])
    }
}
