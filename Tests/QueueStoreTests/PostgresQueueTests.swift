import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import PushDispatch
import PushgateCore
import TestSupport
import XCTest

@testable import QueueStore

/// Needs a PostgreSQL server: `eval "$(scripts/start-postgres.sh)"` sets PUSHGATE_TEST_POSTGRES_URL.
final class PostgresQueueTests: XCTestCase {
    var url: String = ""

    override func setUp() async throws {
        guard let u = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"], !u.isEmpty else {
            throw XCTSkip("PUSHGATE_TEST_POSTGRES_URL is not set (scripts/start-postgres.sh)")
        }
        url = u
        // A clean schema for each test.
        let client = PostgresClient(configuration: try PostgresBackend.configuration(url: u))
        let run = Task { await client.run() }
        try await client.query(
            """
            DROP TABLE IF EXISTS pushgate_jobs, pushgate_notifications, pushgate_owners, pushgate_stats, pushgate_meta, pushgate_dedup,
              pushgate_coalesce_windows, pushgate_idempotency
            """)
        try await client.query("DROP SEQUENCE IF EXISTS pushgate_job_seq, pushgate_notif_seq")
        run.cancel()
    }

    func open(lease: Double = 60, batch: Int = 256) async throws -> DurableQueue {
        var o = options(lease: lease)
        o.leaseBatch = batch
        return try await PostgresQueue.open(url: url, options: o)
    }

    /// Two gateways on one database: a `dedup_key` claimed by one holds for the other, a coalescing
    /// window opened by one holds the other's push and replaces the one it held, and an
    /// Idempotency-Key claimed by one is in progress, then replayed, for the other.
    func testDeliveryControlsHoldAcrossGatewaysSharingTheDatabase() async throws {
        let a = try await open()
        let b = try await open()
        func job(_ id: String, dedup: String? = nil, coalesce: Int? = nil) -> DeliveryJob {
            var n = PushNotification(platform: .ios, tokens: ["tok-shared"])
            n.message = id
            n.dedupKey = dedup
            if let coalesce {
                n.collapseID = "sync"
                n.coalesceSeconds = coalesce
            }
            let acc = AcceptedNotification(notifID: id, notification: n, prepared: TestPrepared())
            return DeliveryJob(id: 1, messageID: UUID().uuidString, target: .token("tok-shared"), accepted: acc, maxAttempts: 3, now: Date())
        }
        // dedup
        let first = try await a.enqueue([job("d1", dedup: "stmt")])
        XCTAssertEqual(first.count, 1)
        guard case .queued = first[0] else { return XCTFail("\(first)") }
        let dup = try await b.enqueue([job("d2", dedup: "stmt")])
        XCTAssertEqual(dup, [.duplicate])
        let dupStatus = try await b.deliveryStatus(notifID: "d2")
        XCTAssertEqual(dupStatus?.map(\.state), [.duplicate])
        // coalescing: a's push goes at once, b's two wait for the window's end; the first of them is replaced.
        let c1 = try await a.enqueue([job("c1", coalesce: 3)])
        let c2 = try await b.enqueue([job("c2", coalesce: 3)])
        let c3 = try await a.enqueue([job("c3", coalesce: 3)])
        guard case .queued(let at1) = c1[0], case .queued(let at2) = c2[0], case .queued(let at3) = c3[0] else { return XCTFail() }
        XCTAssertLessThanOrEqual(at1.timeIntervalSinceNow, 0.5)
        XCTAssertGreaterThan(at2.timeIntervalSince(at1), 2.5)
        XCTAssertEqual(at2, at3, "both held for the same window end")
        let c2Status = try await b.deliveryStatus(notifID: "c2")
        XCTAssertEqual(c2Status?.map(\.state), [.coalesced], "replaced by c3 in the same transaction that queued c3")
        // idempotency
        let t = Date()
        let claimA = try await a.claim(app: "default", key: "k1", bodyHash: "h1", now: t, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(claimA, .claimed)
        let claimB = try await b.claim(app: "default", key: "k1", bodyHash: "h1", now: t, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(claimB, .inProgress)
        let other = try await b.claim(app: "default", key: "k1", bodyHash: "h2", now: t, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(other, .mismatch)
        let otherApp = try await b.claim(app: "chat", key: "k1", bodyHash: "h2", now: t, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(otherApp, .claimed, "keys are per app")
        let answer = IdempotentAnswer(status: 200, body: Array(#"{"counts":1}"#.utf8), requestID: "rid-1", notifIDs: "n1")
        try await a.finish(app: "default", key: "k1", answer: answer)
        let replay = try await b.claim(app: "default", key: "k1", bodyHash: "h1", now: t, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(replay, .replay(answer))
        // A claim its gateway never answered is taken over after `abandonAfter`; an expired key is free.
        _ = try await a.claim(app: "default", key: "k2", bodyHash: "h", now: t, ttl: 60, abandonAfter: 30)
        let takeover = try await b.claim(app: "default", key: "k2", bodyHash: "h", now: t.addingTimeInterval(31), ttl: 60, abandonAfter: 30)
        XCTAssertEqual(takeover, .claimed)
        let expired = try await b.claim(app: "default", key: "k1", bodyHash: "h9", now: t.addingTimeInterval(61), ttl: 60, abandonAfter: 30)
        XCTAssertEqual(expired, .claimed)
        await a.close()
        await b.close()
    }

    func testSchemaIsCreatedAndJobsSurviveACrash() async throws {
        let a = try await open(batch: 1)
        let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        let jobs = makeJobs(3, notifID: "pg-1", traceParent: traceParent)
        try await a.enqueue(jobs)
        let first = try await take(a)
        XCTAssertNotNil(first.accepted.prepared, "leased back by the process that enqueued it: rendering kept")
        await a.abandonForTesting()
        let b = try await open(lease: 0.3)  // a's lease (60 s) still runs: only the two unleased jobs
        let tb = Taker(b)
        var got: [DeliveryJob] = []
        for _ in 0..<2 { if let j = await tb.next(timeout: 3) { got.append(j) } }
        XCTAssertEqual(got.count, 2)
        let third = await tb.next(timeout: 0.5)
        XCTAssertNil(third, "the crashed process's lease has not expired yet")
        for j in got {
            XCTAssertNil(j.accepted.prepared)
            XCTAssertEqual(j.accepted.traceParent, traceParent, "the ingest span's context is read back by another gateway")
            // Stored without its targets (`DurableQueue.storedForm`): each job carries its own.
            XCTAssertEqual(j.accepted.notification, DurableQueue.storedForm(jobs[0].accepted.notification))
            XCTAssertTrue(jobs.contains { $0.target == j.target })
            await b.complete(j, outcome: .delivered(providerID: "p"))
        }
        let st = try await b.deliveryStatus(notifID: "pg-1")
        XCTAssertEqual(st?.filter { $0.state == .delivered }.count, 2)
        XCTAssertEqual(st?.count, 3)
        await b.close()
    }

    /// A value PostgreSQL cannot store (NUL in text) fails only the request that carries it, never
    /// the other clients' deliveries committed in the same group commit.
    func testOneBadValueFailsOnlyItsOwnRequest() async throws {
        let q = try await open()
        var badJobs = makeJobs(1, notifID: "pg-bad")
        badJobs[0].target = .token("nul\u{0}token")
        let bad = badJobs
        let good = (0..<8).map { makeJobs(3, notifID: "pg-good-\($0)") }
        let outcomes = await withTaskGroup(of: (String, Bool).self) { group in
            group.addTask {
                do {
                    try await q.enqueue(bad)
                    return ("pg-bad", true)
                } catch { return ("pg-bad", false) }
            }
            for g in good {
                group.addTask {
                    do {
                        try await q.enqueue(g)
                        return (g[0].accepted.notifID, true)
                    } catch { return (g[0].accepted.notifID, false) }
                }
            }
            var out: [String: Bool] = [:]
            for await (id, ok) in group { out[id] = ok }
            return out
        }
        XCTAssertEqual(outcomes["pg-bad"], false, "the NUL value is refused")
        for i in 0..<8 { XCTAssertEqual(outcomes["pg-good-\(i)"], true, "request \(i) was committed despite the bad one") }
        for i in 0..<8 {
            let st = try await q.deliveryStatus(notifID: "pg-good-\(i)")
            XCTAssertEqual(st?.count, 3)
        }
        // A provider's failure text with NUL (and megabytes of it) is stored cleaned, not refused.
        let j = try await take(q)
        await q.complete(j, outcome: .failed(reason: "Bad\u{0}" + String(repeating: "x", count: 100_000), tokenDead: false))
        await q.flush()
        let st = try await q.deliveryStatus(notifID: j.accepted.notifID)
        let failed = st?.first { $0.state == .failed }
        XCTAssertEqual(failed?.error?.hasPrefix("Bad\u{FFFD}xxx"), true)
        XCTAssertLessThanOrEqual(failed?.error?.utf8.count ?? .max, 1100)
        await q.close()
    }

    /// After this instance's lease expired and another instance took the job, a late completion from
    /// the first does not overwrite the row.
    /// One batch holding a job's two retries and then its delivery stores the delivery, with the
    /// attempt count of the last try and the error of the last retry.
    func testRetriesAndTheDeliveryOfOneJobInOneBatchEndDelivered() async throws {
        var o = options()
        o.updateDelay = 30  // everything lands in one transaction (the flush)
        let q = try await PostgresQueue.open(url: url, options: o)
        let job = try await retriedTwiceThenDeliveredInOneBatch(q)
        let b = try XCTUnwrap(q.backend as? PostgresBackend)
        var row: (Int, Int, String?, String?)?
        for try await r in try await b.client.query(
            "SELECT state, attempts, last_error, provider_id FROM pushgate_jobs WHERE id = \(Int64(job.id))"
        ).decode((Int, Int, String?, String?).self) { row = r }
        XCTAssertEqual(row?.0, DeliveryState.Code.delivered.rawValue)
        XCTAssertEqual(row?.1, 3)
        XCTAssertEqual(row?.2, "ServiceUnavailable")
        XCTAssertEqual(row?.3, "p-3")
        await q.close()
    }

    func testCompletionsOnlyTouchRowsStillLeased() async throws {
        let a = try await open(lease: 0.3, batch: 1)
        try await a.enqueue(makeJobs(1, notifID: "pg-lease"))
        let ja = try await take(a)
        await a.abandonForTesting()  // a stops heartbeating: its lease runs out
        let b = try await open(lease: 0.3, batch: 1)
        let jb = try await take(b, timeout: 5)
        XCTAssertEqual(ja.messageID, jb.messageID)
        // a comes back late with a completion through a fresh instance that does not hold the lease
        let late = try await open(lease: 60)
        await late.complete(ja, outcome: .failed(reason: "late", tokenDead: false))
        await late.flush()
        var st = try await b.deliveryStatus(notifID: "pg-lease")
        XCTAssertEqual(st?.first?.state, .queued, "the late completion did not touch b's leased row")
        await b.complete(jb, outcome: .delivered(providerID: "p-b"))
        await b.flush()
        st = try await b.deliveryStatus(notifID: "pg-lease")
        XCTAssertEqual(st?.first?.state, .delivered)
        await late.close()
        await b.close()
    }

    func testFailedBeforeSendingIsRecordedNotQueued() async throws {
        try await checkFailedBeforeSending(try await open())
    }

    func testExpiredLeasesAreHandedOutAgain() async throws {
        let a = try await open(lease: 0.4)
        let b = try await open(lease: 0.4)
        try await a.enqueue(makeJobs(1, notifID: "pg-2"))
        let held = try await take(a)
        let tb = Taker(b)
        let none = await tb.next(timeout: 0.2)
        XCTAssertNil(none)
        await a.abandonForTesting()  // a stops heartbeating: its lease expires after 0.4 s
        let again = await tb.next(timeout: 5)
        XCTAssertEqual(again?.messageID, held.messageID, "same message id on the new attempt")
        await b.complete(again!, outcome: .delivered(providerID: nil))
        await b.close()
    }

    /// Two processes on one queue share the work; no job is handed to both.
    func testTwoProcessesShareWithoutDuplicates() async throws {
        let a = try await open()
        let b = try await open()
        let total = 3000
        for i in 0..<(total / 500) {
            try await (i % 2 == 0 ? a : b).enqueue(makeJobs(500))
        }
        let seen = NIOLockedValueBox<[UInt64: Int]>([:])
        let perQueue = NIOLockedValueBox<[Int]>([0, 0])
        await withTaskGroup(of: Void.self) { g in
            for (qi, q) in [a, b].enumerated() {
                for _ in 0..<8 {
                    g.addTask {
                        let taker = Taker(q)
                        while seen.withLockedValue({ $0.count }) < total {
                            guard let j = await taker.next(timeout: 0.5) else { continue }
                            seen.withLockedValue { $0[j.id, default: 0] += 1 }
                            perQueue.withLockedValue { $0[qi] += 1 }
                            await q.complete(j, outcome: .delivered(providerID: nil))
                        }
                    }
                }
            }
        }
        let s = seen.withLockedValue { $0 }
        XCTAssertEqual(s.count, total)
        XCTAssertTrue(s.values.allSatisfy { $0 == 1 }, "a job was handed to two processes")
        let shares = perQueue.withLockedValue { $0 }
        XCTAssertGreaterThan(shares[0], 0)
        XCTAssertGreaterThan(shares[1], 0)
        // The last completions are committed a moment after they were made.
        try await waitUntil("every completion committed", timeout: 30) { try await a.backend.pendingCount() == 0 }
        await a.close()
        await b.close()
    }

    /// Gateways on one database: each one's counters (`/api/stat/app`, `/metrics`) are the sum of
    /// all, read back every stats interval, as gorush's on a shared storage.
    func testEachGatewayShowsTheCountersOfAll() async throws {
        let a = try await open()
        let b = try await open()
        let sa = persistedStats(a)
        let sb = persistedStats(b)
        let base = sa.snapshot.totalCount
        sa.accepted(count: 3)
        sb.accepted(count: 5)
        sb.finished(platform: .android, delivered: true)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, sa.snapshot.totalCount != base + 8 || sb.snapshot.totalCount != base + 8 {
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertEqual(sa.snapshot.totalCount, base + 8)
        XCTAssertEqual(sb.snapshot.totalCount, base + 8)
        XCTAssertEqual(sa.snapshot.counts(.android).pushSuccess, sb.snapshot.counts(.android).pushSuccess)
        await a.close()
        await b.close()
    }

    func testSyncJobsStayWithTheirProcessAndStatsAreShared() async throws {
        let a = try await open()
        let b = try await open()
        try await a.enqueue(makeJobs(2, waiter: 9))
        let tb = Taker(b)
        let stolen = await tb.next(timeout: 0.5)
        XCTAssertNil(stolen, "sync-mode jobs are leased by the process whose request waits")
        let j = try await take(a)
        XCTAssertEqual(j.waiterID, 9)
        await a.reschedule(j)
        let stats = persistedStats(a)
        stats.accepted(count: 2)
        stats.finished(platform: .ios, delivered: true)
        await a.close()
        await b.close()
        let c = try await open()
        XCTAssertEqual(c.storedStats.totalCount, 2)
        XCTAssertEqual(c.storedStats.counts(.ios).pushSuccess, 1)
        XCTAssertEqual(c.pendingCount, 2, "the unfinished job and the released one stay in the store")
        await c.close()
    }

    /// A job scheduled by one gateway is sent by another when due (clocks injected: not leased while
    /// its time is ahead, leased once it has come), and a cancel made on a third ends a scheduled job
    /// in the store so that no gateway sends it.
    func testScheduledJobsAreSentByAnyGatewayWhenDueAndCancelledInTheStore() async throws {
        let clock = NIOLockedValueBox(Date())
        let now: @Sendable () -> Date = { clock.withLockedValue { $0 } }
        let a = try await PostgresQueue.open(url: url, options: options(), now: now)
        let b = try await PostgresQueue.open(url: url, options: options(), now: now)
        let c = try await PostgresQueue.open(url: url, options: options(), now: now)
        let t0 = now()
        var sched = makeJobs(1, notifID: "pg-sched")
        sched[0].notBefore = t0.addingTimeInterval(3600)
        var doomed = makeJobs(2, notifID: "pg-doomed")
        for i in doomed.indices { doomed[i].notBefore = t0.addingTimeInterval(3600) }
        try await a.enqueue(sched)
        try await a.enqueue(doomed)
        XCTAssertEqual(a.heldCount, 0, "a scheduled job is not held by the gateway that took it")
        let tb = Taker(b)
        let early = await tb.next(timeout: 0.5)
        XCTAssertNil(early, "not handed out before its time")
        // Cancelled on c: both rows end in the store; b never gets them.
        let cancelled = try await c.cancel(notifID: "pg-doomed", app: nil)
        XCTAssertEqual(cancelled.jobs.count, 2)
        XCTAssertEqual(Set(cancelled.jobs.map(\.target.reportedToken)), ["tok0", "tok1"])
        let none = try await c.cancel(notifID: "pg-sched", app: "another-app")
        XCTAssertEqual(none.jobs.count, 0, "another app's notification is not cancelled")
        // A second past its time (a time read back from the store may differ in its last bit).
        clock.withLockedValue { $0 = t0.addingTimeInterval(3601) }
        let due = await tb.next(timeout: 10)
        XCTAssertEqual(due?.accepted.notifID, "pg-sched")
        XCTAssertGreaterThanOrEqual(due.map { now().timeIntervalSince($0.notBefore) } ?? -1, 0)
        let more = await tb.next(timeout: 0.5)
        XCTAssertNil(more, "the cancelled jobs are never leased")
        // Leased by b: a cancel now leaves it (in flight) and it ends as b reports it.
        let late = try await c.cancel(notifID: "pg-sched", app: nil)
        XCTAssertEqual(late.jobs.count, 0)
        if let due { await b.complete(due, outcome: .delivered(providerID: "p")) }
        try await waitUntil("the delivery committed", timeout: 30) {
            try await c.deliveryStatus(notifID: "pg-sched")?.first?.state == .delivered
        }
        let doomedStatus = try await c.deliveryStatus(notifID: "pg-doomed") ?? []
        XCTAssertEqual(doomedStatus.map(\.state), [.cancelled, .cancelled])
        await a.close()
        await b.close()
        await c.close()
    }
}
