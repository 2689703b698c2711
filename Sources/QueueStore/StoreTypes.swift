import Crypto
import Foundation
import NIOCore
import PushDispatch
import PushgateCore

/// A notification row as read back (to send its jobs after a restart).
struct StoredNotification: Sendable {
    var notifID: String
    var body: String
    var app: String
    /// The request's ingest span as a W3C `traceparent` (column `traceparent`; nil: not traced).
    var traceParent: String? = nil
}

/// One job row as stored (the durable form of a `DeliveryJob`).
struct StoredJob: Sendable {
    var id: Int64
    var notifRow: Int64
    var platform: Platform
    var target: PushTarget
    var messageID: String
    var attempts: Int
    var maxAttempts: Int
    var credentialRetryUsed: Bool
    var notBefore: Double
    var enqueuedAt: Double
    var lastError: String?
}

/// A notification to insert, with its jobs.
struct NotificationInsert: Sendable {
    var notifID: String
    var app: String = AppID.defaultApp
    var platform: Platform
    var body: String
    var createdAt: Double
    var jobs: [JobInsert]
    /// The notification's `collapse_id` when its jobs coalesce.
    var collapseID: String? = nil
    /// `FallbackInfo.jsonString` when the notification was sent as its fallback (column `fallback`).
    var fallback: String? = nil
    /// `AcceptedNotification.traceParent` (column `traceparent`).
    var traceParent: String? = nil
}

struct JobInsert: Sendable {
    var target: PushTarget
    var messageID: String
    var attempts: Int
    var maxAttempts: Int
    var notBefore: Double
    var enqueuedAt: Double
    /// Inserted already leased by this process (its workers hold it in memory).
    var leased: Bool
    /// Failed before any network call (payload too large, bad token, platform not enabled):
    /// stored finished, for the delivery status, in the same transaction.
    var failedReason: String? = nil
    /// `dedup_key`, claimed in the insert transaction until `dedupUntil`.
    var dedupKey: String? = nil
    var dedupUntil: Double = 0
    /// The coalescing window (seconds) when the job coalesces (`Coalescing`).
    var coalesceSeconds: Double? = nil

    /// The update that finishes this job as failed in the transaction that inserts it as row `id`
    /// (nil unless it failed before sending).
    func failedBeforeSendingUpdate(id: Int64) -> JobUpdate? {
        failedReason.map { .complete(id: id, state: .failed, attempts: 0, info: $0, finishedAt: enqueuedAt) }
    }
}

/// Text from providers and failure reasons on its way into store columns: PostgreSQL's `text`
/// cannot hold NUL (one such value would fail the whole group commit), and a provider's error text
/// is worth a line, not megabytes.
enum StoreText {
    static let maxBytes = 1024

    static func clean(_ s: String?) -> String? { s.map { clean(text: $0) } }

    static func clean(text s: String) -> String {
        // Bytes, not characters: String.contains(Character) walks grapheme clusters (5 % of the
        // gateway's CPU when it ran for every delivery's apns-id); memchr over the contiguous UTF-8
        // rather than the view's byte-by-byte iterator (this runs for every outcome).
        let hasNUL =
            s.utf8.withContiguousStorageIfAvailable { b in b.baseAddress.map { memchr($0, 0, b.count) != nil } ?? false } ?? s.utf8.contains(0)
        let t = hasNUL ? s.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : s
        return t.utf8.count > maxBytes ? t.prefix(utf8Bytes: maxBytes) + "…" : t
    }
}

/// What the insert transaction decided for a job with a `dedup_key` or a coalescing window.
enum GuardOutcome: Sendable, Equatable {
    /// Stored as `duplicate`, not queued.
    case duplicate
    /// Queued, held until this time (the end of its coalescing window).
    case heldUntil(Double)
}

/// The keys of the dedup and coalescing tables: SHA-256 of the parts (targets can be kilobytes long).
enum GuardKey {
    static func make(app: String, platform: Platform, target: PushTarget, key: String) -> String {
        let t = TargetCodec.encode(target)
        var bytes: [UInt8] = []
        for part in [app, String(platform.rawValue), String(t.kind), t.value, key] {
            bytes += Array(part.utf8)
            bytes.append(0)
        }
        return Hex.encode(SHA256.hash(data: bytes))
    }
}

/// An `Idempotency-Key` operation, run in the writer's transaction.
enum IdempotencyOp: Sendable {
    case claim(app: String, key: String, bodyHash: String, now: Double, expires: Double, abandonBefore: Double)
    case finish(app: String, key: String, answer: IdempotentAnswer)
    case release(app: String, key: String)
}

extension StoredJob {
    /// The row of a job the durable queue holds (the SQLite store alone on its file writes it at the
    /// job's first retry or its outcome: `WrittenOnce`).
    /// (`borrowing`: an initializer takes its arguments owned, so the caller copied the whole job,
    /// a retain and release of each of its fields, to hand it over; here and in `OutcomeRow`.)
    init(_ job: borrowing DeliveryJob) {
        self.init(
            id: Int64(job.id), notifRow: job.storeRow, platform: job.platform, target: job.target, messageID: job.messageID,
            attempts: job.attempts, maxAttempts: job.maxAttempts, credentialRetryUsed: job.credentialRetryUsed,
            notBefore: job.notBefore.timeIntervalSince1970, enqueuedAt: job.enqueuedAt.timeIntervalSince1970,
            lastError: StoreText.clean(job.lastError))
    }
}

/// What an outcome's row needs of its job when the store may not have written the row yet: a
/// narrow row (`SQLiteBackend.makeUpsertOutcomes`) takes the rest from `jobs_data`. Nothing in it
/// but `lastError` is counted by reference (almost always nil): the writer reads it for every
/// delivery, and a copy of a job's fields (its message id, its `Platform` with its aliases)
/// retained and released each of them.
struct OutcomeRow: Sendable {
    var notifRow: Int64
    /// `Platform.rawValue`.
    var platform: Int
    /// The outcome's provider id is the job's message id (APNs answers with the apns-id it was
    /// sent): the row stores neither (`WrittenOnce.RowsJSON.providerIDIsMessageID`).
    var providerIDIsMessageID: Bool
    var lastError: String?

    init(notifRow: Int64, platform: Int, providerIDIsMessageID: Bool, lastError: String?) {
        self.notifRow = notifRow
        self.platform = platform
        self.providerIDIsMessageID = providerIDIsMessageID
        self.lastError = lastError
    }

    /// `job`'s row; whether its outcome's provider id is its message id is decided with the outcome
    /// (`JobUpdate.completion`).
    init(_ job: borrowing DeliveryJob) {
        self.init(
            notifRow: job.storeRow, platform: job.accepted.notification.platform.rawValue, providerIDIsMessageID: false,
            lastError: StoreText.clean(job.lastError))
    }
}

/// A state change of a leased job. `row`: the job as held, for a store that may not have written its
/// row yet (nil: the row exists).
enum JobUpdate: Sendable {
    case reschedule(id: Int64, attempts: Int, notBefore: Double, lastError: String?, credentialRetryUsed: Bool, row: StoredJob? = nil)
    case complete(Completion)

    /// A job's outcome. A struct, not the case's own list of values: the writer reads it for every
    /// delivery, and a payload of six values was copied out through the generic tuple copy of the
    /// runtime (0.4 % of the SQLite engine's CPU), a struct by its own copy.
    struct Completion: Sendable {
        var id: Int64
        /// `.delivered` or `.failed` (or a skip's state).
        var state: DeliveryState.Code
        var attempts: Int
        /// The provider id (delivered) or the reason (failed).
        var info: String?
        var finishedAt: Double
        var row: OutcomeRow?
    }

    static func complete(
        id: Int64, state: DeliveryState.Code, attempts: Int, info: String?, finishedAt: Double, row: OutcomeRow? = nil
    ) -> JobUpdate {
        .complete(Completion(id: id, state: state, attempts: attempts, info: info, finishedAt: finishedAt, row: row))
    }

    /// The job it changes.
    var jobID: Int64 {
        switch self {
        case .reschedule(let id, _, _, _, _, _): return id
        case .complete(let c): return c.id
        }
    }

    /// It carries its job for a store that may not have written the job's row yet.
    var carriesRow: Bool { isRetryWithRow || isOutcomeWithRow }

    /// A reschedule carrying its job. (Matched with `switch`: `if case` copies the payload out.)
    var isRetryWithRow: Bool {
        switch self {
        case .reschedule(_, _, _, _, _, let row): return row != nil
        case .complete: return false
        }
    }

    /// An outcome carrying its job.
    var isOutcomeWithRow: Bool {
        switch self {
        case .complete(let c): return c.row != nil
        case .reschedule: return false
        }
    }

    /// `updates` without the reschedules a later reschedule of the same job replaces: a job retried
    /// twice within one batch (a fresh-credentials retry goes at once) keeps its last, where one
    /// UPDATE given two rows of one id would apply either. Unchanged (no copy) when no job repeats.
    static func lastReschedulePerJob(_ updates: [JobUpdate]) -> [JobUpdate] {
        var last: [Int64: Int] = [:]
        var reschedules = 0
        for (i, u) in updates.enumerated() {
            if case .reschedule(let id, _, _, _, _, _) = u {
                last[id] = i
                reschedules += 1
            }
        }
        guard last.count < reschedules else { return updates }
        return updates.enumerated().compactMap { i, u in
            if case .reschedule(let id, _, _, _, _, _) = u, last[id] != i { return nil }
            return u
        }
    }

    /// The completion of a job, as stored. `messageID`: the job's, with its `row`: a delivery whose
    /// stored provider id is the message id is marked so in the row (the row stores neither).
    static func completion(
        id: Int64, outcome: FinalOutcome, attempts: Int, finishedAt: Double, row: OutcomeRow? = nil, messageID: String? = nil
    ) -> JobUpdate {
        switch outcome {
        case .delivered(let providerID, let detail):
            let text = StoreText.clean(DeliveryState.storedProviderText(providerID: providerID, detail: detail))
            var row = row
            if text != nil, text == messageID { row?.providerIDIsMessageID = true }
            return .complete(id: id, state: .delivered, attempts: attempts, info: text, finishedAt: finishedAt, row: row)
        case .failed(let reason, _):
            return .complete(id: id, state: .failed, attempts: attempts, info: StoreText.clean(reason), finishedAt: finishedAt, row: row)
        case .skipped(let why):
            return .complete(id: id, state: DeliveryState.skipped(why).code, attempts: attempts, info: nil, finishedAt: finishedAt, row: row)
        }
    }
}

/// One bounded pass of status upkeep: finished deliveries (then notifications left without any)
/// older than `finishedBefore`, and expired dedup claims, coalescing windows and idempotency keys;
/// each statement deletes at most `limit` rows. When one deleted `limit`, more may be left:
/// `WriteResult.pruneMore`, and the queue runs another pass in its next transaction.
struct PruneRequest: Sendable, Equatable {
    var finishedBefore: Double
    var limit: Int
}

/// Cancels the pending deliveries of a notification that no process holds (`DurableQueue.cancel`).
struct CancelRequest: Sendable {
    var notifID: String
    /// Only this app's (nil: any app's).
    var app: String?
}

/// A job row `CancelRequest` ended, with its notification's app.
struct CancelledRow: Sendable {
    var job: StoredJob
    var app: String
}

struct LeaseRequest: Sendable {
    var platform: Platform
    var limit: Int
}

/// Everything one transaction does (group commit).
struct WriteBatch: Sendable {
    var inserts: [NotificationInsert] = []
    var updates: [JobUpdate] = []
    var leases: [LeaseRequest] = []
    var heartbeat = false
    var statsDelta: [String: Int64] = [:]
    /// Read the stored counters back (`WriteResult.storedStats`) even with no increments to add: a
    /// shared store's totals move with the other processes' saves.
    var readStats = false
    var prune: PruneRequest?
    /// Release every lease of this owner and remove the owner (graceful shutdown).
    var release = false
    var idempotency: [IdempotencyOp] = []
    /// After the updates (a job this process held and cancelled is completed in the same or an earlier batch).
    var cancels: [CancelRequest] = []

    /// Nothing but completions, reschedules and counters: writes nobody waits for (next to `isEmpty`,
    /// so a new kind of write is placed in both).
    var holdsOnlyUnwaited: Bool {
        inserts.isEmpty && leases.isEmpty && !heartbeat && prune == nil && !release && idempotency.isEmpty && cancels.isEmpty
    }

    var isEmpty: Bool {
        inserts.isEmpty && updates.isEmpty && leases.isEmpty && !heartbeat && statsDelta.isEmpty && !readStats && prune == nil && !release
            && idempotency.isEmpty && cancels.isEmpty
    }
}

struct WriteResult: Sendable {
    /// Per insert, the row id of the notification and of each of its jobs (in order).
    var inserted: [(notifRow: Int64, jobIDs: [Int64])] = []
    /// Per lease request, the leased rows.
    var leased: [[StoredJob]] = []
    /// Jobs set free because their owner's lease expired (heartbeat only).
    var reclaimed = 0
    /// By job id: the jobs the dedup and coalescing rules changed.
    var guarded: [Int64: GuardOutcome] = [:]
    /// Per `.claim` of `WriteBatch.idempotency`, in order.
    var claims: [IdempotencyClaim] = []
    /// Per `WriteBatch.cancels` entry, the rows it ended.
    var cancelled: [[CancelledRow]] = []
    /// The prune pass deleted as many rows as its limit in some table: there may be more to delete.
    var pruneMore = false
    /// Every stored counter, read after this batch's increments were added (nil: the batch added none).
    var storedStats: [String: Int64]?
}

/// One delivery's status as read from a store, with its job's id (the queue overlays the updates
/// the store has not taken yet).
struct StoredStatus: Sendable {
    var jobID: Int64
    var record: DeliveryStatusRecord
}

/// One delivery's status as stored (the same columns in both SQL stores).
func storedStatusRecord(
    platform: Platform, target: PushTarget, state: Int, attempts: Int, notBefore: Double, lastError: String?,
    providerID: String?, finishedAt: Double?, app: String, fallback: String? = nil
) -> DeliveryStatusRecord {
    let s = DeliveryState(
        code: DeliveryState.Code(rawValue: state) ?? .pending, attempts: attempts,
        notBefore: Date(timeIntervalSince1970: notBefore), lastError: lastError, providerID: providerID)
    return DeliveryStatusRecord(
        platform: platform, token: target.reportedToken, state: s, attempts: attempts,
        finishedAt: finishedAt.map { Date(timeIntervalSince1970: $0) }, app: app, fallback: fallback.flatMap(FallbackInfo.init(jsonString:)),
        notBefore: Date(timeIntervalSince1970: notBefore))
}

/// The storage side of a durable queue: one transaction per `commit`, plus reads.
protocol QueueBackend: Sendable {
    /// True when this process is the only user of the store (SQLite file lock held): every lease
    /// left by an earlier process is stale and is released at once on startup.
    var exclusive: Bool { get }
    /// One transaction; it commits only if `gate.enter()` says so right before COMMIT (else it rolls
    /// back and throws `StoreUnavailableError(.timeout)`).
    func commit(_ batch: WriteBatch, owner: String, now: Double, leaseTimeout: Double, gate: CommitGate) async throws -> WriteResult
    /// Startup: registers the owner; in exclusive mode frees every earlier lease. With `adoptParked`
    /// (a queue that parks jobs: `parkedJobs`), a store this process uses alone hands over the jobs
    /// without a row of the notifications earlier processes left open as parked jobs of `owner` (read
    /// back as the workers free up), instead of writing a row for each of them in the startup
    /// transaction; other stores ignore it.
    func start(owner: String, now: Double, leaseTimeout: Double, adoptParked: Bool) async throws -> StartedStore
    func notifications(_ rows: [Int64]) async throws -> [Int64: StoredNotification]
    /// The deliveries of `notifID` with their job ids, in job order; nil when unknown.
    func status(notifID: String) async throws -> [StoredStatus]?
    func pendingCount() async throws -> Int
    /// The pending jobs the next start will find (read when the queue is closed, its leases released).
    func pendingAtRest() async throws -> Int
    /// `finished_at` of the `keep`-th newest finished delivery when more than `keep` are stored
    /// (deleting the finished ones before it keeps the newest `keep`), nil when at most `keep` are.
    /// Read outside the writer's transactions.
    func finishedCutoff(keeping keep: Int) async throws -> Double?
    /// The stored state code of a job (nil: no such row).
    func jobState(_ id: Int64) async throws -> Int?
    func close() async
    /// Called by the writer between transactions, after their waiters were resumed (store upkeep).
    func afterCommit() async
    /// The event loop the store's connection completes its queries on (nil: none in particular):
    /// the writer runs there, so a query's answer resumes it without waking another thread.
    var eventLoop: (any EventLoop)? { get }
    /// The pending jobs among `ranges` (job ids) leased to `owner`, in id order: jobs this process
    /// leased to itself when they were enqueued but left in the store (`ParkedJobIDs`). A read,
    /// outside the writer's transactions.
    func parkedJobs(_ ranges: [ClosedRange<Int64>], owner: String) async throws -> [StoredJob]
}

extension QueueBackend {
    /// A transaction nobody waits behind (the store's own upkeep, tests).
    func commit(_ batch: WriteBatch, owner: String, now: Double, leaseTimeout: Double) async throws -> WriteResult {
        try await commit(batch, owner: owner, now: now, leaseTimeout: leaseTimeout, gate: .open)
    }
    func pendingAtRest() async throws -> Int { try await pendingCount() }
    func afterCommit() async {}
    var eventLoop: (any EventLoop)? { nil }
    /// Only a store one process uses alone (`exclusive`) has jobs parked (PostgreSQL never is: its
    /// jobs beyond the memory window are left free for any process to lease).
    func parkedJobs(_ ranges: [ClosedRange<Int64>], owner: String) async throws -> [StoredJob] {
        throw QueueStoreError("this store does not park jobs (only a store one process uses alone does)")
    }
}

/// What `QueueBackend.start` found.
struct StartedStore: Sendable {
    var pending: Int
    var stats: [String: Int64]
    /// The jobs without a row of the notifications left open by earlier processes, taken over as
    /// this process's parked jobs (by platform, oldest first).
    var adopted: [Platform: ParkedJobIDs] = [:]
}

/// The statements of one queue transaction in one SQL dialect. `WriteBatch.run` is the commit
/// sequence both stores follow.
protocol QueueStatements {
    /// Inserts the notifications and their jobs; returns each notification's row and job ids.
    func insert(_ inserts: [NotificationInsert], owner: String) async throws -> [(notifRow: Int64, jobIDs: [Int64])]
    /// An update applies only while `owner` holds the job's lease (nil: unconditionally).
    func apply(_ updates: [JobUpdate], onlyLeasedBy owner: String?) async throws
    func renewLease(owner: String, until: Double) async throws
    /// Frees the jobs of owners whose lease expired; returns how many.
    func reclaimExpired(now: Double) async throws -> Int
    func lease(_ request: LeaseRequest, owner: String, now: Double) async throws -> [StoredJob]
    /// Adds the increments to the stored counters.
    func addStats(_ increments: [String: Int64]) async throws
    /// Every stored counter (all processes sharing the store).
    func readStats() async throws -> [String: Int64]
    /// Deletes at most `limit` finished jobs older than `cutoff`, then at most `limit` notifications
    /// older than it left without jobs; true when a statement deleted `limit` rows (more may be left).
    func prune(finishedBefore cutoff: Double, limit: Int) async throws -> Bool
    /// Frees every lease of `owner` and forgets the owner.
    func release(owner: String) async throws
    /// Claims dedup key `k` until `until` unless a live claim holds it; true when claimed.
    func claimDedup(_ k: String, until: Double, now: Double) async throws -> Bool
    /// The coalescing window of `k`, locked for this transaction (nil: none yet).
    func lockWindow(_ k: String) async throws -> CoalesceWindow?
    func saveWindow(_ k: String, _ w: CoalesceWindow) async throws
    /// Ends a pending job as `coalesced` (no-op when it is over already).
    func markCoalesced(job: Int64, at: Double) async throws
    func setNotBefore(job: Int64, _ t: Double) async throws
    func idempotency(_ op: IdempotencyOp) async throws -> IdempotencyClaim?
    /// Ends as `cancelled` the pending jobs of the notification that no process holds (no lease
    /// owner): one statement, so a job is leased or cancelled, never both.
    func cancel(_ request: CancelRequest, now: Double) async throws -> [CancelledRow]
    /// Deletes expired dedup claims, coalescing windows and idempotency keys, at most `limit` rows
    /// of each; true when a statement deleted `limit` rows.
    func pruneGuards(now: Double, limit: Int) async throws -> Bool
}

extension IdempotencyClaim {
    /// The decision for a stored key row (`claim`'s insert found the key taken).
    static func decide(
        storedHash: String, status: Int?, body: String?, requestID: String, notifIDs: String, claimedAt: Double, expires: Double,
        bodyHash: String, now: Double, abandonBefore: Double
    ) -> IdempotencyClaim? {
        guard expires > now else { return nil }  // expired: take it
        if storedHash != bodyHash { return .mismatch }
        // A status outside HTTP's range (a damaged row, or one written by something else in a shared
        // database) is treated as no answer (never served: `HTTPResponse.Status` would trap on it).
        if let status, IdempotentAnswer.statusRange.contains(status), let body {
            return .replay(IdempotentAnswer(status: status, body: Array(body.utf8), requestID: requestID, notifIDs: notifIDs))
        }
        if claimedAt > abandonBefore { return .inProgress }
        return nil  // abandoned by a gateway that stopped before answering: take it
    }
}

extension WriteBatch {
    /// The commit sequence, inside the caller's transaction.
    func run(_ s: some QueueStatements, owner: String, now: Double, leaseTimeout: Double) async throws -> WriteResult {
        var result = WriteResult()
        if !inserts.isEmpty { result.inserted = try await s.insert(inserts, owner: owner) }
        // Jobs failed before sending are finished in the transaction that inserts them; a leased
        // job's update applies only while this instance still holds the lease (after a lease
        // expired another instance may own the row and its outcome).
        var failedOnInsert: [JobUpdate] = []
        for (i, ins) in inserts.enumerated() {
            for (k, j) in ins.jobs.enumerated() {
                if let u = j.failedBeforeSendingUpdate(id: result.inserted[i].jobIDs[k]) { failedOnInsert.append(u) }
            }
        }
        if !failedOnInsert.isEmpty { try await s.apply(failedOnInsert, onlyLeasedBy: nil) }
        if !inserts.isEmpty { result.guarded = try await applyGuards(s, result.inserted, now: now) }
        if !updates.isEmpty { try await s.apply(JobUpdate.lastReschedulePerJob(updates), onlyLeasedBy: owner) }
        for c in cancels { result.cancelled.append(try await s.cancel(c, now: now)) }
        if heartbeat {
            try await s.renewLease(owner: owner, until: now + leaseTimeout)
            result.reclaimed = try await s.reclaimExpired(now: now)
        }
        for req in leases { result.leased.append(try await s.lease(req, owner: owner, now: now).sorted { $0.id < $1.id }) }
        if !statsDelta.isEmpty { try await s.addStats(statsDelta) }
        if !statsDelta.isEmpty || readStats { result.storedStats = try await s.readStats() }
        if let p = prune { result.pruneMore = try await s.prune(finishedBefore: p.finishedBefore, limit: p.limit) }
        if release { try await s.release(owner: owner) }
        for op in idempotency {
            if let claim = try await s.idempotency(op) { result.claims.append(claim) }
        }
        if let p = prune, try await s.pruneGuards(now: now, limit: p.limit) { result.pruneMore = true }
        return result
    }

    /// Dedup claims and coalescing windows of the inserted jobs, in insert order (a job's
    /// duplicates in the same transaction are found too).
    private func applyGuards(_ s: some QueueStatements, _ inserted: [(notifRow: Int64, jobIDs: [Int64])], now: Double) async throws
        -> [Int64: GuardOutcome]
    {
        var out: [Int64: GuardOutcome] = [:]
        var duplicates: [JobUpdate] = []
        for (i, ins) in inserts.enumerated() {
            for (k, j) in ins.jobs.enumerated() where j.failedReason == nil && (j.dedupKey != nil || j.coalesceSeconds != nil) {
                let id = inserted[i].jobIDs[k]
                if let key = j.dedupKey {
                    let dk = GuardKey.make(app: ins.app, platform: ins.platform, target: j.target, key: key)
                    if try await !s.claimDedup(dk, until: j.dedupUntil, now: now) {
                        out[id] = .duplicate
                        duplicates.append(.complete(id: id, state: .duplicate, attempts: 0, info: nil, finishedAt: now))
                        continue
                    }
                }
                if let seconds = j.coalesceSeconds, let collapse = ins.collapseID {
                    let wk = GuardKey.make(app: ins.app, platform: ins.platform, target: j.target, key: collapse)
                    let a = Coalescing.arrive(try await s.lockWindow(wk), now: now, seconds: seconds, job: UInt64(id))
                    try await s.saveWindow(wk, a.window)
                    if let r = a.replaced { try await s.markCoalesced(job: Int64(r), at: now) }
                    if a.notBefore > now {
                        try await s.setNotBefore(job: id, a.notBefore)
                        out[id] = .heldUntil(a.notBefore)
                    }
                }
            }
        }
        if !duplicates.isEmpty { try await s.apply(duplicates, onlyLeasedBy: nil) }
        return out
    }
}

/// Target encoding: kind 0 token, 1 topic, 2 subscription (value = endpoint, keys = JSON or nil),
/// 3 APNs broadcast channel (value = channel id).
enum TargetCodec {
    static func encode(_ t: PushTarget) -> (kind: Int, value: String, keys: String?) {
        switch t {
        case .token(let s): return (0, s, nil)
        case .topic: return (1, "", nil)
        case .subscription(let s):
            var keys: String?
            if let k = s.keys, let d = try? JSONEncoder().encode(k) { keys = String(decoding: d, as: UTF8.self) }
            return (2, s.endpoint, keys)
        case .channel(let id): return (3, id, nil)
        }
    }

    static func decode(kind: Int, value: String, keys: String?) -> PushTarget {
        switch kind {
        case 1: return .topic
        case 2:
            let k = keys.flatMap { try? JSONDecoder().decode(WebPushSubscription.Keys.self, from: Data($0.utf8)) }
            return .subscription(WebPushSubscription(endpoint: value, keys: k))
        case 3: return .channel(value)
        default: return .token(value)
        }
    }
}

/// Stats counters as flat keys (persisted additively, so several processes can share them).
enum StatsCodec {
    static func flatten(_ s: StatsSnapshot) -> [String: Int64] {
        var out: [String: Int64] = [
            "total_count": s.totalCount, "submitted_tasks": s.submittedTasks, "success_tasks": s.successTasks,
            "failure_tasks": s.failureTasks, "retries": s.retries, "scheduled": s.scheduled, "cancelled": s.cancelled,
        ]
        for (p, c) in s.platforms {
            out[p + ".push_success"] = c.pushSuccess
            out[p + ".push_error"] = c.pushError
        }
        for (app, platforms) in s.apps {
            for (p, c) in platforms {
                out["app/\(app)/\(p).push_success"] = c.pushSuccess
                out["app/\(app)/\(p).push_error"] = c.pushError
            }
        }
        return out
    }

    static func snapshot(_ flat: [String: Int64]) -> StatsSnapshot {
        var s = StatsSnapshot()
        s.totalCount = flat["total_count"] ?? 0
        s.submittedTasks = flat["submitted_tasks"] ?? 0
        s.successTasks = flat["success_tasks"] ?? 0
        s.failureTasks = flat["failure_tasks"] ?? 0
        s.retries = flat["retries"] ?? 0
        s.scheduled = flat["scheduled"] ?? 0
        s.cancelled = flat["cancelled"] ?? 0
        for (k, v) in flat {
            if k.hasPrefix("app/") {
                // app/<id>/<platform>.<counter> (app ids hold no "/").
                let path = k.split(separator: "/", omittingEmptySubsequences: false)
                guard path.count == 3, let dot = path[2].lastIndex(of: ".") else { continue }
                let (app, p, name) = (String(path[1]), String(path[2][..<dot]), path[2][path[2].index(after: dot)...])
                var c = s.apps[app]?[p] ?? .init()
                if name == "push_success" { c.pushSuccess = v } else if name == "push_error" { c.pushError = v }
                s.apps[app, default: [:]][p] = c
                continue
            }
            let parts = k.split(separator: ".")
            guard parts.count == 2 else { continue }
            var c = s.platforms[String(parts[0])] ?? .init()
            if parts[1] == "push_success" { c.pushSuccess = v } else if parts[1] == "push_error" { c.pushError = v }
            s.platforms[String(parts[0])] = c
        }
        return s
    }

    /// The counters that changed (increments to add to the store).
    static func increments(_ s: StatsSnapshot) -> [String: Int64] {
        flatten(s).filter { $0.value != 0 }
    }
}

public struct QueueStoreError: Error, CustomStringConvertible, Sendable {
    public var description: String
    /// The SQLite (extended) result code of the statement that failed, when SQLite answered one.
    public var sqliteCode: Int32?
    public init(_ d: String, sqliteCode: Int32? = nil) {
        description = d
        self.sqliteCode = sqliteCode
    }
}

/// Ids of the jobs a process alone on its store (SQLite with its lock) leased to itself when they were
/// enqueued but left in the store, beyond `maxHeld`: oldest first, as ranges of consecutive ids (the
/// jobs of one enqueue get consecutive ids), so a backlog of millions costs a few bytes per request.
/// Taking them back is a read by id (`QueueBackend.parkedJobs`), not a lease: no row is written
/// twice, and nothing else can take them (they are leased to this process; a crash or stop frees them
/// for the next start).
struct ParkedJobIDs: Sendable {
    private var ranges: [ClosedRange<Int64>] = []
    private var head = 0
    /// How many ids it holds.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Adds the id after the newest one (ids only grow: the newest range is extended when it is the next id).
    mutating func append(_ id: Int64) {
        if head < ranges.count, let last = ranges.last, last.upperBound < Int64.max, last.upperBound + 1 == id {
            ranges[ranges.count - 1] = last.lowerBound...id
        } else {
            ranges.append(id...id)
        }
        count += 1
    }

    /// Takes the `n` oldest ids (fewer when it holds fewer).
    mutating func take(_ n: Int) -> [ClosedRange<Int64>] {
        var taken: [ClosedRange<Int64>] = []
        var left = max(0, n)
        while left > 0, head < ranges.count {
            let r = ranges[head]
            let size = r.upperBound - r.lowerBound  // one less than its count: no overflow for any range
            if size < Int64(left) {
                taken.append(r)
                head += 1
                left -= Int(size) + 1
            } else {
                let end = r.lowerBound + Int64(left - 1)
                taken.append(r.lowerBound...end)
                ranges[head] = (end + 1)...r.upperBound
                left = 0
            }
        }
        count -= max(0, n) - left
        if head >= 64, head * 2 >= ranges.count {
            ranges.removeFirst(head)
            head = 0
        }
        return taken
    }

    /// Gives back ids taken and not read (a failed read): they are the oldest again.
    mutating func putBack(_ taken: [ClosedRange<Int64>]) {
        ranges.replaceSubrange(head..<head, with: taken)
        for r in taken { count += Int(r.upperBound - r.lowerBound) + 1 }
    }
}
