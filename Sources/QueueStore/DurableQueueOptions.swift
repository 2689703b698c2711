import Foundation

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
    /// measured: docs/benchmarks.md), so ~4.3 MB at most; five times the default deliveries in flight
    /// of a provider (2,048), so workers never wait on the store. A job beyond it is read back from the
    /// store before it is sent, which costs the SQLite engine ~1.7 µs of CPU per job (decoding its
    /// `jobs_data` entry and making the job again): ~3 % of its throughput while a backlog is drained,
    /// the same whatever the window (50,000 held cost 20 MB more with a backlog and drained at the
    /// same rate: docs/benchmarks.md, "Backlog").
    public static let defaultMaxHeld = 10_000
    /// Most parked jobs read back from the store at once (bounded by the room under `maxHeld`), once
    /// fewer than `leaseBatch` are ready. Each read is a few queries, prepared each time, and decodes
    /// the `jobs_data` of every notification the ids overlap: reading 1,024 rather than 256 at a
    /// time made a drained backlog's read-back cost about a quarter as many queries and decodes.
    public var parkedReadBatch: Int = 1_024
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
