import Foundation
import Logging
import NIOConcurrencyHelpers
import PushDispatch
import PushgateCore
import SQLiteNIO
import TestSupport
import XCTest

@testable import QueueStore

#if canImport(Glibc)
    import Glibc
#endif

struct TestPrepared: PreparedPush {}

/// A new directory under the system's temporary one, removed when the test process exits (the
/// stores the tests write would otherwise pile up there, run after run).
func tempDir() -> String {
    let d = NSTemporaryDirectory() + "pushgate-qs-\(UUID().uuidString)"
    try? FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
    TempDirs.remember(d)
    return d
}

private enum TempDirs {
    nonisolated(unsafe) private static var made: [String] = []
    private static let lock = NSLock()
    private static let removedAtExit: Void = {
        atexit {
            TempDirs.lock.lock()
            defer { TempDirs.lock.unlock() }
            for d in TempDirs.made { try? FileManager.default.removeItem(atPath: d) }
        }
    }()

    static func remember(_ d: String) {
        lock.lock()
        defer { lock.unlock() }
        _ = removedAtExit
        made.append(d)
    }
}

func makeJobs(
    _ n: Int, notifID: String = UUID().uuidString, platform: Platform = .ios, waiter: UInt64? = nil, maxAttempts: Int = 3,
    traceParent: String? = nil
) -> [DeliveryJob] {
    var note = PushNotification(platform: platform, tokens: (0..<n).map { "tok\($0)" })
    note.message = "hello"
    note.notifID = notifID
    note.data = JSONObject([("k", .string("v"))])
    let a = AcceptedNotification(notifID: notifID, notification: note, prepared: TestPrepared(), traceParent: traceParent)
    return (0..<n).map { i in
        DeliveryJob(
            id: UInt64(i + 1), messageID: UUID().uuidString.lowercased(), target: .token("tok\(i)"), accepted: a,
            maxAttempts: maxAttempts, now: Date(), waiterID: waiter)
    }
}

func options(_ capacity: Int = 10_000, lease: Double = 60) -> DurableQueueOptions {
    var o = DurableQueueOptions(capacity: capacity)
    o.leaseTimeout = lease
    o.pollInterval = 0.05
    o.tick = .milliseconds(5)
    // A store that answers slowly on a loaded machine is not what these tests look at (StoreFaultTests
    // sets its own timeout): a large write must not be refused for taking longer than the default 5 s.
    o.storeTimeout = 600
    return o
}

/// `next` with a deadline (nil when nothing came). A `next` that loses the race stays parked and
/// its job goes to the next call on the same taker (use one taker per worker, sequentially).
final class Taker: Sendable {
    let queue: any QueueDriver
    let platform: Platform
    private let parked = NIOLockedValueBox<Task<DeliveryJob?, Never>?>(nil)
    init(_ q: any QueueDriver, _ p: Platform = .ios) {
        queue = q
        platform = p
    }

    func next(timeout: Double = 5) async -> DeliveryJob? {
        let q = queue
        let p = platform
        let task = parked.withLockedValue { t in
            if let t { return t }
            let n = Task { await q.next(platform: p) }
            t = n
            return n
        }
        final class Once: @unchecked Sendable {
            let lock = NIOLock()
            var c: CheckedContinuation<(DeliveryJob?, Bool), Never>?
            init(_ c: CheckedContinuation<(DeliveryJob?, Bool), Never>) { self.c = c }
            func resume(_ j: DeliveryJob?, fromQueue: Bool) -> Bool {
                let c = lock.withLock { () -> CheckedContinuation<(DeliveryJob?, Bool), Never>? in
                    let x = self.c
                    self.c = nil
                    return x
                }
                c?.resume(returning: (j, fromQueue))
                return c != nil
            }
        }
        let (job, fromQueue) = await withCheckedContinuation { (c: CheckedContinuation<(DeliveryJob?, Bool), Never>) in
            let once = Once(c)
            Task { _ = once.resume(await task.value, fromQueue: true) }
            Task {
                try? await Task.sleep(for: .seconds(timeout))
                _ = once.resume(nil, fromQueue: false)
            }
        }
        if fromQueue { parked.withLockedValue { $0 = nil } }
        return job
    }
}

func nextJob(_ q: any QueueDriver, _ p: Platform = .ios, timeout: Double = 5) async -> DeliveryJob? {
    await Taker(q, p).next(timeout: timeout)
}

struct NoJob: Error {}

/// Counters seeded with what `q` read from its store and saved by it, as the gateway wires them.
func persistedStats(_ q: DurableQueue) -> Stats {
    let stats = Stats(initial: q.storedStats)
    q.persist(stats: stats)
    return stats
}

/// A SQLite queue holding at most `maxHeld` jobs in memory, leasing `leaseBatch` at a time.
func openSQLiteWindow(maxHeld: Int, leaseBatch: Int, _ tune: (inout DurableQueueOptions) -> Void = { _ in }) async throws -> DurableQueue {
    var o = options()
    o.maxHeld = maxHeld
    o.leaseBatch = leaseBatch
    tune(&o)
    return try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: o)
}

/// Enqueues one job, reschedules it twice (errors "ExpiredProviderToken", then "ServiceUnavailable")
/// and delivers it at attempt 3 (provider id "p-3"), then flushes: with a long `updateDelay` all of it
/// is one batch. Returns the job.
func retriedTwiceThenDeliveredInOneBatch(_ q: DurableQueue) async throws -> DeliveryJob {
    try await q.enqueue(makeJobs(1))
    var job = try await take(q)
    for (attempt, error) in [(1, "ExpiredProviderToken"), (2, "ServiceUnavailable")] {
        job.attempts = attempt
        job.lastError = error
        job.credentialRetryUsed = true
        job.notBefore = Date()
        await q.reschedule(job)
        job = try await take(q)
    }
    job.attempts = 3
    await q.complete(job, outcome: .delivered(providerID: "p-3"))
    await q.flush()
    return job
}

/// The next job, or a thrown error after `timeout` seconds.
func take(_ q: any QueueDriver, _ p: Platform = .ios, timeout: Double = 5) async throws -> DeliveryJob {
    guard let j = await nextJob(q, p, timeout: timeout) else { throw NoJob() }
    return j
}

final class SQLiteQueueTests: XCTestCase {
    /// A scheduled job (clock injected) is stored with a row and no lease, is not handed out before
    /// its time, survives a restart, is handed out once due; a cancel ends a scheduled one in the
    /// store, and one held in memory (not yet taken by a worker) under the lock.
    func testScheduledJobsWaitInTheStoreAcrossARestartAndCancel() async throws {
        let path = tempDir() + "/q.sqlite"
        let clock = NIOLockedValueBox(Date())
        let now: @Sendable () -> Date = { clock.withLockedValue { $0 } }
        let t0 = now()
        do {
            let q = try await SQLiteQueue.open(path: path, options: options(), now: now)
            var jobs = makeJobs(1, notifID: "later")
            jobs[0].notBefore = t0.addingTimeInterval(600)
            var doomed = makeJobs(1, notifID: "doomed")
            doomed[0].notBefore = t0.addingTimeInterval(600)
            try await q.enqueue(jobs + doomed)
            XCTAssertEqual(q.heldCount, 0)
            let early = await Taker(q).next(timeout: 0.5)
            XCTAssertNil(early, "not handed out before its time")
            let c = try await q.cancel(notifID: "doomed", app: nil)
            XCTAssertEqual(c.jobs.count, 1)
            XCTAssertEqual(q.pendingCount, 1)
            // An ordinary job is held in memory: cancelled there, before any worker takes it.
            try await q.enqueue(makeJobs(2, notifID: "held"))
            let h = try await q.cancel(notifID: "held", app: nil)
            XCTAssertEqual(h.jobs.count, 2)
            try await waitUntil("the held jobs' cancel committed", timeout: 30) {
                try await q.deliveryStatus(notifID: "held")?.map(\.state) == [.cancelled, .cancelled]
            }
            await q.close()
        }
        let q = try await SQLiteQueue.open(path: path, options: options(), now: now)
        XCTAssertEqual(q.pendingCount, 1, "the scheduled job is still pending after the restart")
        let taker = Taker(q)
        let stillEarly = await taker.next(timeout: 0.5)
        XCTAssertNil(stillEarly)
        // A second past its time (a time read back from the store may differ from the one given in
        // its last bit: the clock stands still here).
        clock.withLockedValue { $0 = t0.addingTimeInterval(601) }
        let due = await taker.next(timeout: 10)
        XCTAssertEqual(due?.accepted.notifID, "later")
        if let due { await q.complete(due, outcome: .delivered(providerID: nil)) }
        let doomed = try await q.deliveryStatus(notifID: "doomed")
        XCTAssertEqual(doomed?.map(\.state), [.cancelled])
        await q.close()
    }

    /// The store holds tokens, message bodies and subscription keys: owner-only from the first write.
    func testStoreFilesAreOwnerOnly() async throws {
        let dir = tempDir()
        let path = dir + "/made/q.sqlite"
        let old = umask(0o022)
        defer { umask(old) }
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue(makeJobs(2))
        await q.flush()
        func mode(_ p: String) -> Int? {
            (try? FileManager.default.attributesOfItem(atPath: p)[.posixPermissions] as? Int)
        }
        XCTAssertEqual(mode(dir + "/made"), 0o700)
        for f in [path, path + "-wal", path + "-shm", path + ".lock"] {
            XCTAssertEqual(mode(f), 0o600, f)
        }
        await q.close()
        // An existing store made world-readable is tightened at the next open.
        chmod(path, 0o644)
        let again = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(mode(path), 0o600)
        await again.close()
    }

    /// Completions nobody waits for are gathered: not committed one by one, but `updateDelay` after
    /// the first of them, or at once with a write somebody waits for (here an enqueue).
    func testCompletionsAreCommittedTogetherWithinTheUpdateDelay() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.updateDelay = 30  // longer than the test: only the enqueue below can commit the completion
        let q = try await SQLiteQueue.open(path: path, options: o)
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        try await q.enqueue(makeJobs(2))
        let first = try await take(q)
        await q.complete(first, outcome: .delivered(providerID: "p-1"))
        try await Task.sleep(for: .milliseconds(300))
        let stateCode = { (id: UInt64) async throws -> Int? in try await b.jobState(Int64(id)) }
        var stored = try await stateCode(first.id)
        XCTAssertNil(stored, "a lone completion waits for company (a pending job has no row of its own: WrittenOnce)")
        try await q.enqueue(makeJobs(1))
        stored = try await stateCode(first.id)
        XCTAssertEqual(stored, DeliveryState.Code.delivered.rawValue, "committed with the enqueue")
        await q.close()

        // The default delay (10 ms): committed soon without anything else happening.
        let q2 = try await SQLiteQueue.open(path: tempDir() + "/q2.sqlite", options: options())
        let b2 = try XCTUnwrap(q2.backend as? SQLiteBackend)
        try await q2.enqueue(makeJobs(1))
        let only = try await take(q2)
        await q2.complete(only, outcome: .delivered(providerID: "p-2"))
        var code: Int?
        for _ in 0..<200 {
            code = try await b2.jobState(Int64(only.id))
            if code == DeliveryState.Code.delivered.rawValue { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        XCTAssertEqual(code, DeliveryState.Code.delivered.rawValue)
        await q2.close()
    }

    /// One batch holding a job's two retries and then its delivery stores the delivery, with the
    /// attempt count of the last try and the error of the last retry.
    func testRetriesAndTheDeliveryOfOneJobInOneBatchEndDelivered() async throws {
        var o = options()
        o.updateDelay = 30  // everything below lands in one transaction (the flush)
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: o)
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        let job = try await retriedTwiceThenDeliveredInOneBatch(q)
        let row = try await b.reader.query("SELECT state, attempts, last_error, provider_id FROM jobs WHERE id = ?", [.integer(Int(job.id))]).first
        XCTAssertEqual(row?.column("state")?.integer, DeliveryState.Code.delivered.rawValue)
        XCTAssertEqual(row?.column("attempts")?.integer, 3)
        XCTAssertEqual(row?.column("last_error")?.string, "ServiceUnavailable")
        XCTAssertEqual(row?.column("provider_id")?.string, "p-3")
        await q.close()
    }

    /// Both stores get a batch's updates with only the last reschedule of each job; completions and
    /// the order of the rest stay as they came, and a batch without repeats is passed on as it is.
    func testOnlyTheLastRescheduleOfAJobInABatchIsApplied() {
        func r(_ id: Int64, _ attempts: Int) -> JobUpdate {
            .reschedule(id: id, attempts: attempts, notBefore: 0, lastError: "e\(attempts)", credentialRetryUsed: false)
        }
        func c(_ id: Int64) -> JobUpdate { .complete(id: id, state: .delivered, attempts: 3, info: nil, finishedAt: 0) }
        func shape(_ us: [JobUpdate]) -> [String] {
            us.map {
                switch $0 {
                case .reschedule(let id, let attempts, _, _, _, _): return "r\(id)@\(attempts)"
                case .complete(let c): return "c\(c.id)"
                }
            }
        }
        XCTAssertEqual(shape(JobUpdate.lastReschedulePerJob([r(1, 1), c(2), r(3, 1), r(1, 2), c(1)])), ["c2", "r3@1", "r1@2", "c1"])
        XCTAssertEqual(shape(JobUpdate.lastReschedulePerJob([c(1), r(2, 1), r(3, 1)])), ["c1", "r2@1", "r3@1"])
        XCTAssertEqual(shape(JobUpdate.lastReschedulePerJob([])), [])
    }

    func testJobsSurviveACrashAndKeepTheirIdentity() async throws {
        let dir = tempDir()
        let path = dir + "/sub/q.sqlite"
        let q1 = try await SQLiteQueue.open(path: path, options: options())
        let jobs = makeJobs(3, waiter: 7)
        try await q1.enqueue(jobs)
        XCTAssertEqual(q1.pendingCount, 3)
        let first = try await take(q1)
        XCTAssertEqual(first.waiterID, 7, "jobs enqueued here keep their sync waiter")
        XCTAssertNotNil(first.accepted.prepared, "jobs enqueued here keep their rendering")
        var retried = first
        retried.attempts = 1
        retried.lastError = "ServiceUnavailable"
        retried.notBefore = Date()
        await q1.reschedule(retried)
        await q1.flush()  // the retry state is committed (group commit, not awaited by workers)
        await q1.abandonForTesting()  // kill -9

        let q2 = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(q2.pendingCount, 3)
        var got: [DeliveryJob] = []
        for _ in 0..<3 { got.append(try await take(q2)) }
        XCTAssertEqual(Set(got.map(\.messageID)), Set(jobs.map(\.messageID)), "message ids (apns-id) are kept")
        XCTAssertEqual(Set(got.map(\.target)), Set(jobs.map(\.target)))
        for j in got {
            XCTAssertNil(j.waiterID, "a reloaded job has no waiter")
            XCTAssertNil(j.accepted.prepared, "reloaded jobs are re-prepared by the dispatcher")
            // Stored without its targets: each job carries its own.
            XCTAssertEqual(j.accepted.notification, DurableQueue.storedForm(jobs[0].accepted.notification))
            XCTAssertEqual(j.accepted.notification.tokens, [])
            XCTAssertEqual(j.accepted.notification.message, "hello")
            XCTAssertEqual(j.accepted.notifID, jobs[0].accepted.notifID)
            XCTAssertEqual(j.maxAttempts, 3)
        }
        let r = try XCTUnwrap(got.first { $0.messageID == first.messageID })
        XCTAssertEqual(r.attempts, 1)
        XCTAssertEqual(r.lastError, "ServiceUnavailable")
        XCTAssertTrue(got.allSatisfy { $0.accepted === got[0].accepted }, "one notification decoded once")
        for j in got { await q2.complete(j, outcome: .delivered(providerID: j.messageID)) }
        XCTAssertEqual(q2.pendingCount, 0)
        await q2.close()
        let q3 = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(q3.pendingCount, 0)
        let none = await nextJob(q3, timeout: 0.3)
        XCTAssertNil(none, "completed jobs are not handed out again")
        await q3.close()
    }

    func testLeasesOfAStoppedProcessExpireWhenTheFileIsShared() async throws {
        let path = tempDir() + "/q.sqlite"
        let a = try await SQLiteQueue.open(path: path, options: options(lease: 0.4))
        let b = try await SQLiteQueue.open(path: path, options: options(lease: 0.4))
        XCTAssertTrue((a.backend as! SQLiteBackend).exclusive)
        XCTAssertFalse((b.backend as! SQLiteBackend).exclusive)
        try await a.enqueue(makeJobs(2))
        let tb = Taker(b)
        let early = await tb.next(timeout: 0.2)
        XCTAssertNil(early, "jobs leased by a live process are not handed out elsewhere")
        await a.abandonForTesting()  // stops heartbeating
        let start = Date()
        let j1 = await tb.next(timeout: 5)
        let j2 = await tb.next(timeout: 5)
        XCTAssertNotNil(j1)
        XCTAssertNotNil(j2)
        XCTAssertGreaterThan(Date().timeIntervalSince(start), 0.1)
        await b.complete(j1!, outcome: .delivered(providerID: nil))
        await b.complete(j2!, outcome: .delivered(providerID: nil))
        await b.close()
    }

    /// A backlog stays in the store: at most `maxHeld` jobs are held in memory, the rest are leased
    /// in batches as they are completed, and every one is handed out exactly once.
    func testBacklogBeyondTheMemoryWindowStaysInTheStore() async throws {
        let q = try await openSQLiteWindow(maxHeld: 20, leaseBatch: 16) { $0.maxCachedNotifications = 2 }
        for k in 0..<10 { try await q.enqueue(makeJobs(30, notifID: "n-\(k)")) }
        XCTAssertEqual(q.pendingCount, 300)
        XCTAssertLessThanOrEqual(q.heldCount, 20, "only the window is held in memory")
        var seen = Set<UInt64>()
        var maxHeld = 0
        for _ in 0..<300 {
            let j = try await take(q)
            XCTAssertTrue(seen.insert(j.id).inserted, "job \(j.id) handed out twice")
            XCTAssertEqual(j.accepted.notification.message, "hello", "the notification read back from the store")
            maxHeld = max(maxHeld, q.heldCount)
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        XCTAssertEqual(seen.count, 300)
        XCTAssertLessThanOrEqual(maxHeld, 20 + 16, "the window plus one lease batch")
        for _ in 0..<500 where q.pendingCount > 0 { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(q.pendingCount, 0)
        await q.close()
    }

    /// Parked jobs are read back up to `parkedReadBatch` at a time (within the room under `maxHeld`),
    /// not a `leaseBatch` at a time: each read is a few statements and a decode of the notifications'
    /// `jobs_data`. Every job still comes out once, oldest first, and the window holds.
    func testParkedJobsAreReadBackInBatchesLargerThanALease() async throws {
        let q = try await openSQLiteWindow(maxHeld: 200, leaseBatch: 8) { $0.parkedReadBatch = 64 }
        for k in 0..<10 { try await q.enqueue(makeJobs(100, notifID: "n-\(k)")) }
        XCTAssertEqual(q.pendingCount, 1000)
        XCTAssertLessThanOrEqual(q.heldCount, 200, "only the window is held in memory")
        var last: UInt64 = 0
        var mostHeldOnceReading = 0
        for k in 0..<1000 {
            let j = try await take(q)
            XCTAssertGreaterThan(j.id, last, "oldest first, each once")
            last = j.id
            // The window's first 200 jobs are held from the start; after them, what is held was read back.
            if k >= 200 { mostHeldOnceReading = max(mostHeldOnceReading, q.heldCount) }
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        XCTAssertGreaterThan(mostHeldOnceReading, 8 + 8, "reads brought more than a lease batch at a time")
        XCTAssertLessThanOrEqual(mostHeldOnceReading, 200, "the window holds")
        for _ in 0..<500 where q.pendingCount > 0 { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(q.pendingCount, 0)
        await q.close()
    }

    /// Jobs beyond the memory window of a process alone on its SQLite file are leased to it
    /// as they are inserted and read back by id, oldest first, while few are ready: no second write
    /// of each row (a lease), and the window is never exceeded. A crash frees them for the next start.
    func testJobsBeyondTheWindowAreLeasedToThisProcessAndReadBackOldestFirst() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.maxHeld = 20
        o.leaseBatch = 8
        let q = try await SQLiteQueue.open(path: path, options: o)
        for k in 0..<4 { try await q.enqueue(makeJobs(30, notifID: "p-\(k)")) }
        XCTAssertEqual(q.heldCount, 20)
        let check = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        // Leased to `owner`: its pending rows, and its jobs without a row yet (`WrittenOnce`).
        func leasedTo(_ owner: String) async throws -> Int {
            try await check.query(
                """
                SELECT (SELECT count(*) FROM jobs WHERE state = 0 AND lease_owner = ?1)
                  + (SELECT count(*) FROM (\(WrittenOnce.virtualJobs(where: "o.owner = ?1")))) AS n
                """, [.text(owner)]
            ).first?.column("n")?.integer ?? -1
        }
        let rows = try await check.query("SELECT count(*) AS n FROM jobs").first?.column("n")?.integer
        XCTAssertEqual(rows, 0, "a queued job has no row of its own until it is retried or over")
        let free = try await check.query("SELECT count(*) AS n FROM jobs WHERE state = 0 AND lease_owner IS NULL").first?.column("n")?.integer
        XCTAssertEqual(free, 0, "nothing is left free for another process to lease")
        let leased = try await leasedTo(q.owner)
        XCTAssertEqual(leased, 120, "the 100 left in the store are leased to this process too")
        var ids: [UInt64] = []
        var most = 0
        for _ in 0..<60 {
            let j = try await take(q)
            ids.append(j.id)
            most = max(most, q.heldCount)
            XCTAssertEqual(j.accepted.notification.message, "hello")
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        XCTAssertEqual(ids, ids.sorted(), "handed out oldest first")
        XCTAssertEqual(Set(ids).count, 60)
        XCTAssertLessThanOrEqual(most, 20, "never more than the window in memory")
        await q.flush()
        await q.abandonForTesting()  // kill -9 with 60 jobs pending, most of them parked

        let q2 = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertEqual(q2.pendingCount, 60)
        let stale = try await leasedTo(q.owner)
        XCTAssertEqual(stale, 0, "the crashed process's jobs were freed at start")
        var rest = Set<UInt64>()
        for _ in 0..<60 {
            let j = try await take(q2)
            XCTAssertTrue(rest.insert(j.id).inserted, "job \(j.id) handed out twice")
            XCTAssertFalse(ids.contains(j.id), "job \(j.id) was completed before the crash")
            await q2.complete(j, outcome: .delivered(providerID: nil))
        }
        let nothing = await nextJob(q2, timeout: 0.2)
        XCTAssertNil(nothing)
        await q2.flush()
        let left = try await check.query("SELECT count(*) AS n FROM jobs WHERE state = 0").first?.column("n")?.integer
        XCTAssertEqual(left, 0)
        try await check.close()
        await q2.close()
    }

    /// A worker going on with `nextIfReady` (as the dispatcher's workers do) gets each job once,
    /// never waits, and the backlog beyond the window still drains through the waiting `next`.
    func testNextIfReadyHandsOutEachJobOnceAndTheBacklogStillDrains() async throws {
        let q = try await openSQLiteWindow(maxHeld: 20, leaseBatch: 16)
        for k in 0..<5 { try await q.enqueue(makeJobs(30, notifID: "r-\(k)")) }
        var seen = Set<UInt64>()
        var viaReady = 0
        while seen.count < 150 {
            let j: DeliveryJob
            if let r = q.nextIfReady(platform: .ios) {
                j = r
                viaReady += 1
            } else {
                j = try await take(q)
            }
            XCTAssertTrue(seen.insert(j.id).inserted, "job \(j.id) handed out twice")
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        XCTAssertNil(q.nextIfReady(platform: .ios), "nothing left")
        XCTAssertGreaterThan(viaReady, 0)
        for _ in 0..<500 where q.pendingCount > 0 { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(q.pendingCount, 0)
        await q.close()
    }

    func testCapacityAndQueueFull() async throws {
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: options(3))
        try await q.enqueue(makeJobs(2))
        do {
            try await q.enqueue(makeJobs(2))
            XCTFail("expected QueueFullError")
        } catch let e as QueueFullError {
            XCTAssertEqual(e.capacity, 3)
            XCTAssertEqual(e.pending, 2)
        }
        XCTAssertEqual(q.pendingCount, 2)
        await q.close()
    }

    func testStatusRecordsQueuedRetryingDeliveredFailed() async throws {
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: options())
        try await q.enqueue(makeJobs(4, notifID: "n-1"))
        var js: [DeliveryJob] = []
        for _ in 0..<3 { js.append(try await take(q)) }
        js.sort { $0.id < $1.id }
        var a = js[0]
        a.attempts = 1
        await q.complete(a, outcome: .delivered(providerID: "apns-1"))
        var b = js[1]
        b.attempts = 2
        await q.complete(b, outcome: .failed(reason: "BadDeviceToken", tokenDead: true))
        var c = js[2]
        c.attempts = 1
        c.lastError = "TooManyRequests"
        c.notBefore = Date().addingTimeInterval(30)
        await q.reschedule(c)
        let stOpt = try await q.deliveryStatus(notifID: "n-1")
        let st = try XCTUnwrap(stOpt)
        XCTAssertEqual(st.map(\.state), [.delivered, .failed, .retrying, .queued])
        XCTAssertEqual(st[0].providerID, "apns-1")
        XCTAssertEqual(st[1].error, "BadDeviceToken")
        XCTAssertEqual(st[2].attempts, 1)
        XCTAssertEqual(st[2].error, "TooManyRequests")
        XCTAssertEqual(st[2].nextTry!.timeIntervalSince1970, c.notBefore.timeIntervalSince1970, accuracy: 0.01)
        XCTAssertEqual(st.map(\.token), ["tok0", "tok1", "tok2", "tok3"])
        let unknown = try await q.deliveryStatus(notifID: "nope")
        XCTAssertNil(unknown)
        await q.close()
    }

    func testFailedBeforeSendingIsRecordedNotQueued() async throws {
        try await checkFailedBeforeSending(try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: options()))
    }

    func testRetryWaitsUntilDue() async throws {
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: options())
        try await q.enqueue(makeJobs(1))
        var j = try await take(q)
        let due = Date().addingTimeInterval(0.3)
        j.attempts = 1
        j.notBefore = due
        await q.reschedule(j)
        let again = try await take(q)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(due), 0, "handed out before it was due")
        XCTAssertEqual(again.attempts, 1)
        await q.complete(again, outcome: .delivered(providerID: nil))
        await q.close()
    }

    func testShutdownWaitsForInFlightThenReleasesLeases() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue(makeJobs(5))
        let inFlight = try await take(q)
        q.shutdown()
        async let waiting = q.next(platform: .ios)
        try await Task.sleep(for: .milliseconds(100))
        XCTAssertEqual(q.pendingCount, 5, "shutdown waits for the job in flight")
        await q.complete(inFlight, outcome: .delivered(providerID: nil))
        let after = await waiting
        XCTAssertNil(after, "no new job after shutdown")
        // Leases are released: the store says nobody holds the 4 left.
        let b = (q.backend as! SQLiteBackend)
        _ = b
        let check = try await SQLiteQueue.open(path: path + "", options: options())
        XCTAssertEqual(check.pendingCount, 4)
        await check.close()
    }

    /// Two processes on one store: once saved, each one's counters are the sum of both (as gorush's
    /// on a shared storage), and they never go back meanwhile. A process sharing the file reads the
    /// totals every stats interval; the one holding the lock (it cannot tell whether others share)
    /// takes them in whenever it saves its own.
    func testCountersOfProcessesSharingTheStoreAddUp() async throws {
        let path = tempDir() + "/q.sqlite"
        let a = try await SQLiteQueue.open(path: path, options: options())
        let b = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertTrue((a.backend as! SQLiteBackend).exclusive)
        XCTAssertFalse((b.backend as! SQLiteBackend).exclusive)
        let sa = persistedStats(a)
        let sb = persistedStats(b)
        sa.accepted(count: 3)
        sa.finished(platform: .ios, delivered: true)
        sb.accepted(count: 5)
        sb.finished(platform: .ios, delivered: false)
        var seen: [Int64] = []
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, sb.snapshot.totalCount != 8 {
            seen.append(sb.snapshot.totalCount)
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertEqual(sb.snapshot.totalCount, 8)
        XCTAssertEqual(sb.snapshot.counts(.ios).pushSuccess, 1)
        XCTAssertEqual(sb.snapshot.counts(.ios).pushError, 1)
        XCTAssertEqual(seen, seen.sorted(), "a counter never goes back")
        // The lock holder takes in b's counts with its next save (which may already have run: 3
        // or 8 here); counted meanwhile stays counted.
        let before = sa.snapshot.totalCount
        XCTAssertTrue(before == 3 || before == 8, "\(before)")
        sa.accepted(count: 1)
        XCTAssertEqual(sa.snapshot.totalCount, before + 1)
        while Date() < deadline, sa.snapshot.totalCount != 9 { try await Task.sleep(for: .milliseconds(50)) }
        XCTAssertEqual(sa.snapshot.totalCount, 9)
        XCTAssertEqual(sa.snapshot.counts(.ios).pushError, 1)
        while Date() < deadline, sb.snapshot.totalCount != 9 { try await Task.sleep(for: .milliseconds(50)) }
        XCTAssertEqual(sb.snapshot.totalCount, 9)
        await a.close()
        await b.close()
        let c = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(c.storedStats.totalCount, 9)
        await c.close()
    }

    func testStoredCountersAddWithoutOverflow() {
        XCTAssertEqual(Int64.saturatingSum(2, 3), 5)
        XCTAssertEqual(Int64.saturatingSum(.max - 1, 5), .max)
        XCTAssertEqual(Int64.saturatingSum(.min + 1, -5), .min)
        let stats = Stats(initial: StatsCodec.snapshot(["total_count": .max - 1]))
        stats.accepted(count: 1)
        stats.rebase { unsaved in
            StatsCodec.snapshot(["total_count": .max].merging(StatsCodec.increments(unsaved), uniquingKeysWith: Int64.saturatingSum))
        }
        XCTAssertEqual(stats.snapshot.totalCount, .max)
        // Counted on top of a total read back at the bound: held there, no trap.
        stats.accepted(count: 5)
        stats.finished(platform: .ios, delivered: true)
        XCTAssertEqual(stats.snapshot.totalCount, .max)
    }

    /// SQLite stores an integer sum past Int64.max as a REAL: read back, it is held at the bound
    /// (converting it with `Int64(_:)` would trap at every start and every stats read).
    func testACounterPastInt64IsReadAtTheBound() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        let stats = persistedStats(q)
        stats.accepted(count: 1)
        await q.close()
        let raw = try await SQLiteConnection.open(storage: .file(path: path))
        _ = try await raw.query("UPDATE stats SET value = value + 9223372036854775807 WHERE key = 'total_count'")
        let kind = try await raw.query("SELECT typeof(value) AS t FROM stats WHERE key = 'total_count'").first?.column("t")?.string
        XCTAssertEqual(kind, "real")
        try await raw.close()
        let q2 = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(q2.storedStats.totalCount, .max)
        XCTAssertEqual(SQLiteBackend.storedCounter(.float(-1e30)), .min)
        XCTAssertNil(SQLiteBackend.storedCounter(.float(.nan)))
        await q2.close()
    }

    func testStatsSurviveRestart() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        let stats = persistedStats(q)
        stats.accepted(count: 5)
        stats.submitted(jobs: 5)
        stats.finished(platform: .ios, delivered: true)
        stats.finished(platform: .android, delivered: false)
        await q.close()
        let q2 = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(q2.storedStats, stats.snapshot)
        let stats2 = persistedStats(q2)
        stats2.accepted(count: 1)
        // The periodic save (every second) writes the count: read the store until it did.
        try await waitUntil("the periodic save", timeout: 30) {
            let raw = try await SQLiteConnection.open(storage: .file(path: path))
            defer { Task { try? await raw.close() } }
            return try await raw.query("SELECT value FROM stats WHERE key = 'total_count'").first?.column("value")?.integer == 6
        }
        await q2.abandonForTesting()
        let q3 = try await SQLiteQueue.open(path: path, options: options())
        XCTAssertEqual(q3.storedStats.totalCount, 6)
        XCTAssertEqual(q3.storedStats.counts(.ios).pushSuccess, 1)
        XCTAssertEqual(q3.storedStats.counts(.android).pushError, 1)
        await q3.close()
    }

    /// The timer's pass prunes what finished longer than the retention ago (here the retention is
    /// 0.2 s and a pass runs every 0.1 s, so the record goes whenever the machine gets to it).
    func testFinishedRecordsArePruned() async throws {
        var o = options()
        o.statusRetention = 0.2
        o.pruneInterval = 0.1
        o.firstPruneAfter = 0
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: o)
        try await q.enqueue(makeJobs(1, notifID: "p-1"))
        let j = try await take(q)
        await q.complete(j, outcome: .delivered(providerID: "x"))
        try await waitUntil("finished records older than the retention are pruned", timeout: 30) {
            try await q.deliveryStatus(notifID: "p-1") == nil
        }
        await q.close()
    }

    /// A finished record is there to read until a pass prunes it (no pass runs but the one started).
    func testFinishedRecordsAreReadableUntilPruned() async throws {
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: onePruneOptions())
        try await q.enqueue(makeJobs(1, notifID: "p-1"))
        let j = try await take(q)
        await q.complete(j, outcome: .delivered(providerID: "x"))
        await q.flush()
        let before = try await q.deliveryStatus(notifID: "p-1")
        XCTAssertEqual(before?.first?.state, .delivered)
        await q.prune(finishedBefore: Date().timeIntervalSince1970 + 60)
        try await waitUntil("the record pruned", timeout: 30) { try await q.deliveryStatus(notifID: "p-1") == nil }
        await q.close()
    }
}

/// Records of deliveries that failed before any network call: stored finished, never handed out,
/// not counted as pending, next to the notification's queued deliveries in its status.
func checkFailedBeforeSending(_ q: DurableQueue) async throws {
    let jobs = makeJobs(3, notifID: "pre-1")
    try await q.enqueue([jobs[0]])
    try await q.recordFailedBeforeSending([(jobs[1], "PayloadTooLarge (4097 > 4096 bytes)"), (jobs[2], "BadDeviceToken")])
    XCTAssertEqual(q.pendingCount, 1)
    let stOpt = try await q.deliveryStatus(notifID: "pre-1")
    let st = try XCTUnwrap(stOpt)
    XCTAssertEqual(st.map(\.state), [.queued, .failed, .failed])
    XCTAssertEqual(st.map(\.token), ["tok0", "tok1", "tok2"])
    XCTAssertEqual(st[1].error, "PayloadTooLarge (4097 > 4096 bytes)")
    XCTAssertEqual(st[2].error, "BadDeviceToken")
    XCTAssertEqual(st[1].attempts, 0)
    XCTAssertNotNil(st[1].finishedAt)
    let taker = Taker(q)
    let first = await taker.next(timeout: 3)
    XCTAssertEqual(first?.target, .token("tok0"))
    let second = await taker.next(timeout: 0.5)
    XCTAssertNil(second, "a delivery that failed before sending is never handed out")
    if let first { await q.complete(first, outcome: .delivered(providerID: "x")) }
    await q.close()
}
