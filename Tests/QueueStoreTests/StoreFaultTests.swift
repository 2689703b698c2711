import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import TestSupport
import XCTest

@testable import QueueStore

/// A store whose transactions fail as a full disk makes SQLite fail (`SQLITE_FULL`) while
/// `refusing` is set, and otherwise are the SQLite store's: faults injected, not timed.
final class RefusingBackend: QueueBackend, @unchecked Sendable {
    // @unchecked: `inner` is Sendable; the switch and the counter are in locks.
    let inner: any QueueBackend
    private let refusingBox = NIOLockedValueBox(false)
    private let refusedBox = NIOLockedValueBox(0)
    init(_ inner: any QueueBackend) { self.inner = inner }

    var refusing: Bool {
        get { refusingBox.withLockedValue { $0 } }
        set { refusingBox.withLockedValue { $0 = newValue } }
    }
    /// Transactions refused so far.
    var refused: Int { refusedBox.withLockedValue { $0 } }

    var exclusive: Bool { inner.exclusive }
    var eventLoop: (any EventLoop)? { inner.eventLoop }

    func commit(_ batch: WriteBatch, owner: String, now: Double, leaseTimeout: Double, gate: CommitGate) async throws -> WriteResult {
        if refusing {
            refusedBox.withLockedValue { $0 += 1 }
            throw QueueStoreError("SQLite error 13: database or disk is full", sqliteCode: 13)
        }
        return try await inner.commit(batch, owner: owner, now: now, leaseTimeout: leaseTimeout, gate: gate)
    }
    func start(owner: String, now: Double, leaseTimeout: Double, adoptParked: Bool) async throws -> StartedStore {
        try await inner.start(owner: owner, now: now, leaseTimeout: leaseTimeout, adoptParked: adoptParked)
    }
    func notifications(_ rows: [Int64]) async throws -> [Int64: StoredNotification] { try await inner.notifications(rows) }
    func status(notifID: String) async throws -> [StoredStatus]? { try await inner.status(notifID: notifID) }
    func pendingCount() async throws -> Int { try await inner.pendingCount() }
    func pendingAtRest() async throws -> Int { try await inner.pendingAtRest() }
    func finishedCutoff(keeping keep: Int) async throws -> Double? { try await inner.finishedCutoff(keeping: keep) }
    func jobState(_ id: Int64) async throws -> Int? { try await inner.jobState(id) }
    func close() async { await inner.close() }
    func afterCommit() async { await inner.afterCommit() }
    func parkedJobs(_ ranges: [ClosedRange<Int64>], owner: String) async throws -> [StoredJob] {
        try await inner.parkedJobs(ranges, owner: owner)
    }
}

/// A store shared with other processes (`exclusive` false: its writes are bounded by
/// `storeTimeout`) whose transactions never answer while `hanging` is set, as a database server that
/// went away leaves its connection pool waiting; they end only when cancelled.
final class HangingBackend: QueueBackend, @unchecked Sendable {
    // @unchecked: `inner` is Sendable; the switch is in a lock.
    let inner: any QueueBackend
    /// A transaction that does not end on cancellation either (a server that stopped answering on
    /// an open connection): only `hanging` set false ends it.
    let ignoresCancellation: Bool
    private let hangingBox = NIOLockedValueBox(false)
    init(_ inner: any QueueBackend, ignoresCancellation: Bool = false) {
        self.inner = inner
        self.ignoresCancellation = ignoresCancellation
    }

    var hanging: Bool {
        get { hangingBox.withLockedValue { $0 } }
        set { hangingBox.withLockedValue { $0 = newValue } }
    }

    var exclusive: Bool { false }

    func commit(_ batch: WriteBatch, owner: String, now: Double, leaseTimeout: Double, gate: CommitGate) async throws -> WriteResult {
        // Not answered while hanging: only cancellation ends the wait.
        while hanging {
            if ignoresCancellation {
                try? await Task.sleep(for: .milliseconds(5))
            } else {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        return try await inner.commit(batch, owner: owner, now: now, leaseTimeout: leaseTimeout, gate: gate)
    }
    func start(owner: String, now: Double, leaseTimeout: Double, adoptParked: Bool) async throws -> StartedStore {
        try await inner.start(owner: owner, now: now, leaseTimeout: leaseTimeout, adoptParked: false)
    }
    func notifications(_ rows: [Int64]) async throws -> [Int64: StoredNotification] { try await inner.notifications(rows) }
    func status(notifID: String) async throws -> [StoredStatus]? { try await inner.status(notifID: notifID) }
    func pendingCount() async throws -> Int { try await inner.pendingCount() }
    func finishedCutoff(keeping keep: Int) async throws -> Double? { try await inner.finishedCutoff(keeping: keep) }
    func jobState(_ id: Int64) async throws -> Int? { try await inner.jobState(id) }
    func close() async { await inner.close() }
}

final class StoreFaultTests: XCTestCase {
    /// A store that does not answer: the request is refused after `storeTimeout` (never a hang),
    /// the next ones at once, readiness is down; once it answers again requests are taken.
    func testAStoreThatDoesNotAnswerIsGivenUpAfterTheStoreTimeout() async throws {
        try await checkStoreTimeout(ignoresCancellation: false)
    }

    /// The same when the transaction does not even end when cancelled: the request's own deadline.
    func testARequestIsGivenUpAfterTheStoreTimeoutWhileTheWriterIsStuck() async throws {
        try await checkStoreTimeout(ignoresCancellation: true)
    }

    private func checkStoreTimeout(ignoresCancellation: Bool) async throws {
        let backend = HangingBackend(
            try await SQLiteBackend.open(path: tempDir() + "/q.sqlite", synchronous: "normal", logger: Logger(label: "test")),
            ignoresCancellation: ignoresCancellation)
        var o = options()
        o.storeTimeout = 0.2
        let q = try await DurableQueue(backend: backend, options: o, logger: Logger(label: "test"))
        backend.hanging = true
        do {
            try await q.enqueue(makeJobs(1, notifID: "n-1"))
            XCTFail("enqueue succeeded on a store that does not answer")
        } catch let e as StoreUnavailableError {
            XCTAssertEqual(e.cause, .timeout)
            XCTAssertEqual(e.httpStatus, 503)
        }
        XCTAssertEqual(q.storeProblem?.cause, .timeout)
        // Known: refused at once, without another wait.
        do {
            try await q.enqueue(makeJobs(1, notifID: "n-2"))
            XCTFail("enqueue succeeded on a store known not to answer")
        } catch let e as StoreUnavailableError {
            XCTAssertEqual(e.cause, .timeout)
        }
        backend.hanging = false
        try await waitUntil("the store answers again") { q.storeProblem == nil }
        try await q.enqueue(makeJobs(2, notifID: "n-3"))
        let statusRead = try await q.deliveryStatus(notifID: "n-3")
        XCTAssertEqual(try XCTUnwrap(statusRead).map(\.state), [.queued, .queued])
        // Nothing of the refused request is stored: cancelled before it wrote, or (a transaction
        // that ignores cancellation) rolled back when it ran on, its request being answered already.
        let refused = try await q.deliveryStatus(notifID: "n-1")
        XCTAssertNil(refused, "a request refused for the timeout left nothing in the store")
        let second = try await q.deliveryStatus(notifID: "n-2")
        XCTAssertNil(second, "a request refused at once left nothing in the store")
        await q.close()
    }

    private func open(_ path: String) async throws -> (DurableQueue, RefusingBackend) {
        let backend = RefusingBackend(try await SQLiteBackend.open(path: path, synchronous: "normal", logger: Logger(label: "test")))
        let q = try await DurableQueue(backend: backend, options: options(), logger: Logger(label: "test"))
        return (q, backend)
    }

    /// Outcomes the store refuses are kept, written again once it takes writes, and their jobs are
    /// neither handed out again meanwhile nor found pending by the next start.
    func testRefusedOutcomesAreKeptAndWrittenWhenTheStoreTakesWritesAgain() async throws {
        let path = tempDir() + "/q.sqlite"
        let (q, backend) = try await open(path)
        try await q.enqueue(makeJobs(3, notifID: "n-1"))
        let taker = Taker(q)
        var jobs: [DeliveryJob] = []
        for _ in 0..<3 {
            let j = await taker.next()
            jobs.append(try XCTUnwrap(j))
        }

        backend.refusing = true
        for (i, j) in jobs.enumerated() { await q.complete(j, outcome: .delivered(providerID: "p-\(i)")) }
        try await waitUntil("the store's refusal is known") { q.storeProblem == StoreUnavailableError(.full) }
        XCTAssertEqual(q.unwrittenUpdates, 3, "the refused outcomes are kept")
        // The status reads what happened, though the store does not hold it yet.
        let meanwhileRead = try await q.deliveryStatus(notifID: "n-1")
        let meanwhile = try XCTUnwrap(meanwhileRead)
        XCTAssertEqual(meanwhile.map(\.state), [.delivered, .delivered, .delivered])
        XCTAssertEqual(meanwhile.map(\.providerID), ["p-0", "p-1", "p-2"])
        // Tried again with backoff while refused (the timer's probe carries them).
        let refusedOnce = backend.refused
        try await waitUntil("the store is tried again") { backend.refused > refusedOnce }
        XCTAssertEqual(q.unwrittenUpdates, 3)

        // A request meanwhile is refused at once, naming the full disk; nothing of it is stored.
        do {
            try await q.enqueue(makeJobs(1, notifID: "n-2"))
            XCTFail("enqueue succeeded on a store that refuses writes")
        } catch let e as StoreUnavailableError {
            XCTAssertEqual(e.cause, .full)
            XCTAssertEqual(e.httpStatus, 507)
        }
        // The delivered jobs are not handed out again.
        let again = await taker.next(timeout: 0.3)
        XCTAssertNil(again)

        backend.refusing = false
        try await waitUntil("the kept outcomes are written") { q.storeProblem == nil && q.unwrittenUpdates == 0 }
        let recordsRead = try await q.deliveryStatus(notifID: "n-1")
        let records = try XCTUnwrap(recordsRead)
        XCTAssertEqual(records.map(\.state), [.delivered, .delivered, .delivered])
        XCTAssertEqual(records.map(\.providerID), ["p-0", "p-1", "p-2"])
        let refused = try await q.deliveryStatus(notifID: "n-2")
        XCTAssertNil(refused, "a refused request leaves no status")
        XCTAssertEqual(q.pendingCount, 0)
        await q.close()

        // The next start finds nothing to send.
        let (q2, _) = try await open(path)
        XCTAssertEqual(q2.pendingCount, 0)
        let resent = await nextJob(q2, timeout: 0.3)
        XCTAssertNil(resent, "a delivered job was handed out again after a restart")
        await q2.close()
    }

    /// A request's deliveries that failed before sending are stored with its queued ones or not at
    /// all: a refused request leaves no status, an accepted one has every record.
    func testFailedBeforeSendingIsStoredWithTheRequestOrNotAtAll() async throws {
        let (q, backend) = try await open(tempDir() + "/q.sqlite")
        let jobs = makeJobs(3, notifID: "n-1")
        let queued = Array(jobs[0..<2])
        let failed = [(job: jobs[2], reason: "bad token")]

        backend.refusing = true
        do {
            try await q.enqueue(queued, failedBeforeSending: failed)
            XCTFail("enqueue succeeded on a store that refuses writes")
        } catch let e as StoreUnavailableError {
            XCTAssertEqual(e.cause, .full)
        }
        let none = try await q.deliveryStatus(notifID: "n-1")
        XCTAssertNil(none)

        backend.refusing = false
        // Refused at once until a write succeeds: the timer's probe finds the store back.
        try await waitUntil("the store takes writes again") { q.storeProblem == nil }
        try await q.enqueue(queued, failedBeforeSending: failed)
        let recordsRead = try await q.deliveryStatus(notifID: "n-1")
        let records = try XCTUnwrap(recordsRead)
        XCTAssertEqual(records.map(\.state).sorted { $0.rawValue < $1.rawValue }, [.failed, .queued, .queued])
        XCTAssertEqual(q.pendingCount, 2)
        await q.close()
    }

    /// A reschedule and then the outcome of the same job, both refused: written in that order, so
    /// the job ends delivered (not pending again).
    func testRefusedUpdatesOfOneJobAreWrittenInOrder() async throws {
        let path = tempDir() + "/q.sqlite"
        let (q, backend) = try await open(path)
        try await q.enqueue(makeJobs(1, notifID: "n-1"))
        let taker = Taker(q)
        let first = await taker.next()
        var job = try XCTUnwrap(first)
        backend.refusing = true
        job.attempts = 1
        job.lastError = "TooManyRequests"
        await q.reschedule(job)
        let next = await taker.next()
        let retried = try XCTUnwrap(next)
        await q.complete(retried, outcome: .delivered(providerID: "p-1"))
        try await waitUntil("both updates are kept") { q.unwrittenUpdates == 2 }
        backend.refusing = false
        try await waitUntil("the kept updates are written") { q.storeProblem == nil && q.unwrittenUpdates == 0 }
        let recordsRead = try await q.deliveryStatus(notifID: "n-1")
        let records = try XCTUnwrap(recordsRead)
        XCTAssertEqual(records.map(\.state), [.delivered])
        await q.close()
        let (q2, _) = try await open(path)
        XCTAssertEqual(q2.pendingCount, 0)
        await q2.close()
    }

    func testStoreFaultClassification() {
        XCTAssertEqual(StoreFaults.cause(of: QueueStoreError("full", sqliteCode: 13)), .full)
        XCTAssertEqual(StoreFaults.cause(of: QueueStoreError("ioerr write", sqliteCode: 778)), .ioError)  // SQLITE_IOERR_WRITE
        XCTAssertNil(StoreFaults.cause(of: QueueStoreError("constraint", sqliteCode: 19)))
        XCTAssertNil(StoreFaults.cause(of: QueueStoreError("no code")))
        XCTAssertEqual(StoreFaults.cause(of: StoreUnavailableError(.timeout)), .timeout)
    }

    /// Without `sslmode` a host off this machine gets verified TLS; loopback keeps plain text; the
    /// URL's `sslmode` wins; an unknown one is an error naming the key.
    func testPostgresSSLModeDefaults() throws {
        XCTAssertTrue(PostgresBackend.isLoopback("127.0.0.1"))
        XCTAssertTrue(PostgresBackend.isLoopback("127.1.2.3"))
        XCTAssertTrue(PostgresBackend.isLoopback("localhost"))
        XCTAssertTrue(PostgresBackend.isLoopback("[::1]"))
        XCTAssertFalse(PostgresBackend.isLoopback("127.example.com"))
        XCTAssertFalse(PostgresBackend.isLoopback("db.example.com"))
        XCTAssertFalse(PostgresBackend.isLoopback("10.0.0.5"))
        // The TLS setting's case (its payload, the verifying client configuration, is the library's default).
        func mode(_ url: String) throws -> String {
            let tls = try PostgresBackend.configuration(url: url).tls
            guard let base = Mirror(reflecting: tls).descendant("base") else { return "?" }
            return Mirror(reflecting: base).children.first?.label ?? "\(base)"
        }
        XCTAssertEqual(try mode("postgres://u:p@db.example.com/q"), "require")
        XCTAssertEqual(try mode("postgres://u:p@10.0.0.5:5432/q"), "require")
        XCTAssertEqual(try mode("postgres://u:p@db.example.com/q?sslmode=prefer"), "prefer")
        XCTAssertEqual(try mode("postgres://u:p@db.example.com/q?sslmode=disable"), "disable")
        XCTAssertEqual(try mode("postgres://u:p@127.0.0.1:31329/q"), "disable")
        XCTAssertEqual(try mode("postgres://u:p@127.0.0.1:31329/q?sslmode=verify-full"), "require")
        XCTAssertThrowsError(try PostgresBackend.configuration(url: "postgres://u:p@db.example.com/q?sslmode=sometimes")) { e in
            XCTAssertTrue("\(e)".contains("queue.postgres.url"))
            XCTAssertFalse("\(e)".contains("u:p@"), "the URL's password is not in the error")
        }
    }
}
