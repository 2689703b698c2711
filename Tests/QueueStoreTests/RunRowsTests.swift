import Foundation
import PushDispatch
import PushgateCore
import TestSupport
import XCTest

@testable import QueueStore

/// Run rows (`WrittenOnce`, schema version 7): consecutive jobs of one notification delivered in
/// one commit, each with its message id as provider id, are one row. Everything a row per job gave
/// must hold: status, closing the notification, the pending counts, a crash, and the status cap.
extension WrittenOnceTests {
    func runRows(_ path: String) async throws -> Int {
        try await rawCount(path, "SELECT count(*) AS n FROM jobs WHERE run_first IS NOT NULL")
    }

    /// Six jobs delivered in one commit: 0-2 and 4-5 with their message ids (two runs), 3 with
    /// another provider id (a row of its own). Status reads each job as it was; a prune pass closes
    /// the notification; nothing is pending, before or after a restart.
    func testJobsDeliveredTogetherShareARunRow() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.pruneInterval = 0.1
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(6, notifID: "n-run"))
        var jobs: [DeliveryJob] = []
        for _ in 0..<6 { jobs.append(try await take(q)) }
        XCTAssertEqual(tokens(jobs), (0..<6).map { "tok\($0)" })
        for (k, j) in jobs.enumerated() {
            await q.complete(j, outcome: .delivered(providerID: k == 3 ? "other-id" : j.messageID))
        }
        await q.flush()
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rows, 3, "two run rows and the row of the job with another provider id")
        let runs = try await runRows(path)
        XCTAssertEqual(runs, 2)

        let read = try await q.deliveryStatus(notifID: "n-run")
        let status = try XCTUnwrap(read)
        XCTAssertEqual(status.map(\.token), (0..<6).map { "tok\($0)" })
        XCTAssertEqual(status.map(\.state), Array(repeating: .delivered, count: 6))
        XCTAssertEqual(status.map(\.providerID), jobs.enumerated().map { $0.offset == 3 ? "other-id" : $0.element.messageID })
        XCTAssertEqual(status.map(\.attempts), jobs.map(\.attempts))
        XCTAssertTrue(status.allSatisfy { $0.finishedAt != nil })

        try await waitUntil { try await self.rawCount(path, "SELECT count(*) AS n FROM open_notifs") == 0 }
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        let pending = try await b.pendingCount()
        XCTAssertEqual(pending, 0)
        let atRest = try await b.pendingAtRest()
        XCTAssertEqual(atRest, 0)
        await q.close()

        let again = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertEqual(again.pendingCount, 0)
        let extra = await nextJob(again, timeout: 0.2)
        XCTAssertNil(extra, "a job of a run came back")
        await again.close()
    }

    /// A crash after part of a notification was delivered as a run: the next start hands out the
    /// other jobs once each and none of the run's, before and after the notification is taken over.
    func testARunSurvivesACrashBesideTheJobsStillPending() async throws {
        let path = tempDir() + "/q.sqlite"
        let o = options()
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(8, notifID: "n-crash"))
        var jobs: [DeliveryJob] = []
        for _ in 0..<8 { jobs.append(try await take(q)) }
        for j in jobs[1..<5] { await q.complete(j, outcome: .delivered(providerID: j.messageID)) }
        await q.flush()
        let runs = try await runRows(path)
        XCTAssertEqual(runs, 1)
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        let atRest = try await b.pendingAtRest()
        XCTAssertEqual(atRest, 4, "the run's four jobs are not pending")
        let open = try await rawCount(path, "SELECT count(*) AS n FROM (\(WrittenOnce.virtualJobs(where: "1")))")
        XCTAssertEqual(open, 4, "four jobs without a row")
        await q.abandonForTesting()

        let again = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertEqual(again.pendingCount, 4)
        var back: [DeliveryJob] = []
        for _ in 0..<4 { back.append(try await take(again)) }
        XCTAssertEqual(Set(tokens(back)), ["tok0", "tok5", "tok6", "tok7"])
        let extra = await nextJob(again, timeout: 0.2)
        XCTAssertNil(extra, "a job of the run came back")
        for j in back { await again.complete(j, outcome: .failed(reason: "BadDeviceToken", tokenDead: true)) }
        await again.flush()
        let states = try await self.states(again, "n-crash")
        XCTAssertEqual(
            states,
            ["tok0:failed", "tok1:delivered", "tok2:delivered", "tok3:delivered", "tok4:delivered", "tok5:failed", "tok6:failed", "tok7:failed"])
        await again.close()
    }

    /// Jobs that could share a run where one of them has a row (retried): the run is split around it,
    /// the retried job's row is updated, and a piece of one job gets a row of its own.
    func testNoRunIsWrittenOverARetriedJobsRow() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue(makeJobs(4, notifID: "n-retry"))
        var jobs: [DeliveryJob] = []
        for _ in 0..<4 { jobs.append(try await take(q)) }
        jobs[1].attempts = 1
        jobs[1].lastError = "ServiceUnavailable"
        jobs[1].notBefore = Date()
        await q.reschedule(jobs[1])
        await q.flush()
        let retried = try await take(q)
        XCTAssertEqual(retried.id, jobs[1].id)
        jobs[1] = retried
        for i in jobs.indices { jobs[i].attempts = 1 }
        // The retried job's error is cleared as the other's (a run carries none).
        jobs[1].lastError = nil
        for j in jobs { await q.complete(j, outcome: .delivered(providerID: j.messageID)) }
        await q.flush()
        let runs = try await runRows(path)
        XCTAssertEqual(runs, 1, "jobs 2-3: the retried job's row splits the run")
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rows, 3, "job 0's row, the retried job's, the run's")
        let read = try await q.deliveryStatus(notifID: "n-retry")
        let status = try XCTUnwrap(read)
        XCTAssertEqual(status.map(\.state), Array(repeating: .delivered, count: 4))
        XCTAssertEqual(status.map(\.providerID), jobs.map(\.messageID))
        await q.close()
    }

    /// The cap on finished deliveries kept (`status_max_records`) counts a run row's jobs: with two
    /// runs of six, the 6 newest deliveries are the second run's, the 7th to 12th the first's (all 12 fit a cap of 12).
    func testTheStatusCapCountsTheJobsOfRuns() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        for name in ["n-a", "n-b"] {
            try await q.enqueue(makeJobs(6, notifID: name))
            var jobs: [DeliveryJob] = []
            for _ in 0..<6 { jobs.append(try await take(q)) }
            for j in jobs { await q.complete(j, outcome: .delivered(providerID: j.messageID)) }
            await q.flush()
        }
        let runs = try await runRows(path)
        XCTAssertEqual(runs, 2)
        let readA = try await q.deliveryStatus(notifID: "n-a")
        let readB = try await q.deliveryStatus(notifID: "n-b")
        let a = try XCTUnwrap(readA?.first?.finishedAt).timeIntervalSince1970
        let b = try XCTUnwrap(readB?.first?.finishedAt).timeIntervalSince1970
        XCTAssertLessThan(a, b)
        let backend = try XCTUnwrap(q.backend as? SQLiteBackend)
        for (keep, expected) in [(1, b), (6, b), (7, a), (11, a)] {
            let cutoff = try await backend.finishedCutoff(keeping: keep)
            XCTAssertEqual(try XCTUnwrap(cutoff, "keeping \(keep)"), expected, accuracy: 1e-6, "keeping \(keep)")
        }
        let none = try await backend.finishedCutoff(keeping: 12)
        XCTAssertNil(none, "12 deliveries are kept whole")
        await q.close()
    }
    /// Runs are written `SQLiteBackend.runRowsPerStatement` to a statement and the rest one to a
    /// statement, and the rows in their ids are read a span at a time (`runCheckSpan`): in one commit,
    /// 11 runs of three (every fourth job with another provider id) at the start of a notification
    /// of 5,000 and two at its end, where a retried job's row splits what would be one run.
    func testManyRunsInOneCommitAndRunsFarApart() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        let n = 5_000
        XCTAssertGreaterThan(Int64(n), SQLiteBackend.runCheckSpan)
        try await q.enqueue(makeJobs(n, notifID: "n-many"))
        var jobs: [DeliveryJob] = []
        for _ in 0..<n { jobs.append(try await take(q)) }
        jobs[n - 3].attempts = 1
        jobs[n - 3].notBefore = Date()
        await q.reschedule(jobs[n - 3])
        await q.flush()
        let retried = try await take(q)
        XCTAssertEqual(retried.id, jobs[n - 3].id)
        jobs[n - 3] = retried
        jobs[n - 3].attempts = 0
        jobs[n - 3].lastError = nil
        let first = Array(jobs[0..<44]) + Array(jobs[(n - 6)...])
        for (k, j) in first.enumerated() {
            await q.complete(j, outcome: .delivered(providerID: k < 44 && k % 4 == 3 ? "other-\(k)" : j.messageID))
        }
        await q.flush()
        let runs = try await runRows(path)
        XCTAssertEqual(runs, 11 + 2, "11 runs of three, and the three jobs before the retried one and the two after it")
        let retriedRow = try await rawCount(path, "SELECT count(*) AS n FROM jobs WHERE id = \(retried.id) AND run_first IS NULL AND state = 1")
        XCTAssertEqual(retriedRow, 1, "the retried job's own row is updated")
        let read = try await q.deliveryStatus(notifID: "n-many")
        let status = try XCTUnwrap(read)
        XCTAssertEqual(status.count, n)
        for (k, j) in first.enumerated() {
            let index = k < 44 ? k : n - 6 + (k - 44)
            XCTAssertEqual(status[index].token, "tok\(index)")
            XCTAssertEqual(status[index].state, .delivered, "tok\(index)")
            XCTAssertEqual(status[index].providerID, k < 44 && k % 4 == 3 ? "other-\(k)" : j.messageID, "tok\(index)")
        }
        XCTAssertEqual(status.filter { $0.state == .queued }.count, n - first.count)
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        let atRest = try await b.pendingAtRest()
        XCTAssertEqual(atRest, n - first.count)
        // The jobs still taken are never finished: a graceful close would wait for them.
        await q.abandonForTesting()
    }

    /// A run row is pruned as any finished row past the retention, and its notification with it.
    func testRunRowsArePrunedWithTheirNotification() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.statusRetention = 0.05
        o.pruneInterval = 0.1
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(4, notifID: "n-pruned"))
        for _ in 0..<4 {
            let j = try await take(q)
            await q.complete(j, outcome: .delivered(providerID: j.messageID))
        }
        await q.flush()
        try await waitUntil { try await self.rawCount(path, "SELECT count(*) AS n FROM notifications") == 0 }
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rows, 0)
        let status = try await q.deliveryStatus(notifID: "n-pruned")
        XCTAssertNil(status)
        await q.close()
    }
}
