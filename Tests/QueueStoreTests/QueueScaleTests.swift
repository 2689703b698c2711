import Foundation
import Logging
import PostgresNIO
import PushDispatch
import PushgateCore
import SQLiteNIO
import TestSupport
import XCTest

@testable import QueueStore

/// The queue's upkeep on a store holding many finished (status) rows.

/// `n` deliveries of one notification stored finished (failed before sending), never queued.
func storeFinished(_ q: DurableQueue, _ n: Int, notifID: String) async throws {
    let jobs = makeJobs(n, notifID: notifID)
    try await q.recordFailedBeforeSending(jobs.map { ($0, "BadDeviceToken") })
}

extension SQLiteQueueTests {
    func sqliteCount(_ q: DurableQueue, _ sql: String) async throws -> Int {
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        return try await b.reader.query(sql).first?.column("n")?.integer ?? -1
    }

    /// The pending count (heartbeats, start-up) reads only the pending rows' partial indexes.
    func testPendingCountUsesThePendingIndexes() async throws {
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: options())
        try await storeFinished(q, 2000, notifID: "done")
        try await q.enqueue(makeJobs(3, notifID: "queued"))
        await q.flush()
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        _ = try await b.reader.query("ANALYZE")
        let plan = try await b.reader.query("EXPLAIN QUERY PLAN " + SQLiteBackend.pendingCountSQL).compactMap { $0.column("detail")?.string }
        let onJobs = plan.filter { $0.contains("jobs") }
        XCTAssertEqual(onJobs.count, 2, "\(plan)")
        for line in onJobs {
            XCTAssertTrue(line.contains("INDEX jobs_free") || line.contains("INDEX jobs_leased"), "not on a pending index: \(plan)")
        }
        let pending = try await b.pendingCount()
        XCTAssertEqual(pending, 3)
        await q.close()
    }

    /// The SQLite store has no index by finish time (its entries were a fifth of the WAL): one left
    /// by an older version goes when the store opens, and a prune pass reads the jobs by id, up to
    /// the first notification accepted at or after its cutoff; the finished ones before it go.
    func testPruneReadsJobsByIdWithoutAnIndexByFinishTime() async throws {
        let path = tempDir() + "/q.sqlite"
        let finishedIndex = "SELECT count(*) AS n FROM sqlite_master WHERE name = 'jobs_finished'"
        var q = try await SQLiteQueue.open(path: path, options: options())
        var n = try await sqliteCount(q, finishedIndex)
        XCTAssertEqual(n, 0)
        await q.close()
        let raw = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        _ = try await raw.query("CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state <> 0")  // as version 5 had it
        try await raw.close()
        q = try await SQLiteQueue.open(path: path, options: onePruneOptions())
        n = try await sqliteCount(q, finishedIndex)
        XCTAssertEqual(n, 0, "dropped when the store opens")

        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        let plan = try await b.reader.query(
            "EXPLAIN QUERY PLAN " + SQLiteBackend.pruneJobsSQL, [.float(Date().timeIntervalSince1970), .integer(1000)]
        ).compactMap { $0.column("detail")?.string }
        XCTAssertTrue(plan.contains { $0.contains("SEARCH jobs USING INTEGER PRIMARY KEY (rowid<?)") }, "\(plan)")
        XCTAssertTrue(plan.contains { $0.contains("notifications USING INDEX notifications_created") }, "\(plan)")
        XCTAssertFalse(plan.contains { $0.contains("SCAN jobs") }, "\(plan)")

        // "old" finished before the cutoff, "new" after it: the pass started with that cutoff takes
        // "old" only (the sleeps order the finish times around the cutoff; nothing waits on speed).
        try await storeFinished(q, 50, notifID: "old")
        await q.flush()
        try await Task.sleep(for: .milliseconds(20))
        let cutoff = Date().timeIntervalSince1970
        try await Task.sleep(for: .milliseconds(20))
        try await storeFinished(q, 30, notifID: "new")
        await q.flush()
        await q.prune(finishedBefore: cutoff)
        try await waitUntil("old pruned", timeout: 30) { try await q.deliveryStatus(notifID: "old") == nil }
        let old = try await q.deliveryStatus(notifID: "old")
        XCTAssertNil(old, "finished before the cutoff: pruned")
        let new = try await q.deliveryStatus(notifID: "new")
        XCTAssertEqual(new?.count, 30, "finished after the cutoff: kept")
        await q.close()
    }
}

extension PostgresQueueTests {
    func pgLines(_ q: DurableQueue, _ sql: String) async throws -> [String] {
        let b = try XCTUnwrap(q.backend as? PostgresBackend)
        var out: [String] = []
        for try await line in try await b.client.query(PostgresQuery(unsafeSQL: sql)).decode(String.self) { out.append(line) }
        return out
    }

    func pgCount(_ q: DurableQueue, _ sql: String) async throws -> Int {
        let b = try XCTUnwrap(q.backend as? PostgresBackend)
        var n: Int64 = -1
        for try await c in try await b.client.query(PostgresQuery(unsafeSQL: sql)).decode(Int64.self) { n = c }
        return Int(n)
    }

    /// The pending count every gateway runs at every heartbeat reads the pending rows' partial
    /// indexes, not the whole table of retained finished rows.
    func testPendingCountUsesAnIndexNotASequentialScan() async throws {
        let q = try await open()
        try await storeFinished(q, 20_000, notifID: "done")
        try await q.enqueue(makeJobs(3, notifID: "queued"))
        await q.flush()
        _ = try await pgLines(q, "ANALYZE pushgate_jobs")
        let plan = try await pgLines(q, "EXPLAIN " + PostgresBackend.pendingCountSQL)
        XCTAssertFalse(plan.joined(separator: "\n").contains("Seq Scan"), plan.joined(separator: "\n"))
        let b = try XCTUnwrap(q.backend as? PostgresBackend)
        let pending = try await b.pendingCount()
        XCTAssertEqual(pending, 3)
        await q.close()
    }
}

/// Store rows counted by SQL (`t` prefixes the table names).
typealias RowCount = (_ sql: (_ t: String) -> String) async throws -> Int

/// No prune pass but those the test starts (`DurableQueue.prune(finishedBefore:)`).
func onePruneOptions() -> DurableQueueOptions {
    var o = options()
    o.pruneInterval = 3600
    o.firstPruneAfter = 3600
    return o
}

/// 25,000 finished deliveries past the retention, more than one bounded statement
/// deletes (20,000 before): one prune pass deletes them all, in bounded transactions; pending
/// deliveries stay.
func checkOnePrunePassKeepsUp(_ q: DurableQueue, _ count: @escaping RowCount) async throws {
    try await q.enqueue(makeJobs(3, notifID: "still-queued"))
    for k in 0..<5 { try await storeFinished(q, 5_000, notifID: "old-\(k)") }
    await q.flush()
    let finished = { try await count { "SELECT count(*) AS n FROM \($0)jobs WHERE state <> 0" } }
    let stored = try await finished()
    XCTAssertEqual(stored, 25_000)
    // Every finished delivery is before a cutoff a minute ahead: one pass, started here, takes them all.
    await q.prune(finishedBefore: Date().timeIntervalSince1970 + 60)
    try await waitUntil("every finished row pruned", timeout: 60) { try await finished() == 0 }
    let left = try await finished()
    XCTAssertEqual(left, 0, "one prune pass deletes every finished delivery past the retention")
    let pending = try await q.deliveryStatus(notifID: "still-queued")
    XCTAssertEqual(pending?.map(\.state), [.queued, .queued, .queued], "pending deliveries are never pruned")
    try await waitUntil("the emptied notifications pruned", timeout: 60) { try await count { "SELECT count(*) AS n FROM \($0)notifications" } == 1 }
    let notifications = try await count { "SELECT count(*) AS n FROM \($0)notifications" }
    XCTAssertEqual(notifications, 1, "the notifications left without deliveries go too")
    XCTAssertEqual(q.pendingCount, 3)
    await q.close()
}

/// `queue.status_max_records` bounds the finished deliveries a durable store keeps: the oldest
/// finished go first, within the retention; pending deliveries (even older ones) stay.
func checkStatusMaxRecords(_ q: DurableQueue, _ count: @escaping RowCount) async throws {
    try await q.enqueue(makeJobs(2, notifID: "queued-first"))
    for k in 0..<3 {
        try await storeFinished(q, 100, notifID: "c-\(k)")
        try await Task.sleep(for: .milliseconds(20))
    }
    await q.flush()
    let finished = { try await count { "SELECT count(*) AS n FROM \($0)jobs WHERE state <> 0" } }
    let stored = try await finished()
    XCTAssertEqual(stored, 300)
    // A retention cutoff long past: only status_max_records decides what this pass prunes.
    await q.prune(finishedBefore: 0)
    try await waitUntil("status_max_records kept", timeout: 60) { try await finished() <= 100 }
    let kept = try await finished()
    XCTAssertEqual(kept, 100, "the newest status_max_records finished deliveries are kept")
    let newest = try await q.deliveryStatus(notifID: "c-2")
    XCTAssertEqual(newest?.count, 100)
    let oldest = try await q.deliveryStatus(notifID: "c-0")
    XCTAssertNil(oldest, "the oldest finished deliveries are pruned before the retention")
    let queued = try await q.deliveryStatus(notifID: "queued-first")
    XCTAssertEqual(queued?.map(\.state), [.queued, .queued], "pending deliveries are never pruned")
    XCTAssertEqual(q.pendingCount, 2)
    await q.close()
}

extension SQLiteQueueTests {
    func sqliteRows(_ q: DurableQueue) -> RowCount {
        { sql in try await self.sqliteCount(q, sql("")) }
    }

    func testOnePrunePassKeepsUpWithAnyRate() async throws {
        var o = onePruneOptions()
        o.statusRetention = 0.2
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: o)
        try await checkOnePrunePassKeepsUp(q, sqliteRows(q))
    }

    func testStatusMaxRecordsBoundsTheFinishedDeliveries() async throws {
        var o = onePruneOptions()
        o.statusMaxRecords = 100
        let q = try await SQLiteQueue.open(path: tempDir() + "/q.sqlite", options: o)
        try await checkStatusMaxRecords(q, sqliteRows(q))
    }
}

extension PostgresQueueTests {
    func pgRows(_ q: DurableQueue) -> RowCount {
        { sql in try await self.pgCount(q, sql("pushgate_")) }
    }

    func testOnePrunePassKeepsUpWithAnyRate() async throws {
        var o = onePruneOptions()
        o.statusRetention = 0.2
        let q = try await PostgresQueue.open(url: url, options: o)
        try await checkOnePrunePassKeepsUp(q, pgRows(q))
    }

    func testStatusMaxRecordsBoundsTheFinishedDeliveries() async throws {
        var o = onePruneOptions()
        o.statusMaxRecords = 100
        let q = try await PostgresQueue.open(url: url, options: o)
        try await checkStatusMaxRecords(q, pgRows(q))
    }
}

extension SQLiteQueueTests {
    /// RSS grew with the backlog (~16 KB per 100-token notification) because the
    /// renderings kept for jobs left in the store were bounded by count only (2,000 notifications,
    /// whatever their token lists) and stayed after their jobs were leased back. They are bounded in
    /// stored bytes and dropped once every job left in the store was leased back. (Since then a
    /// notification is kept and stored without its targets, `storedForm`: ~150 bytes here.)
    func testRenderingsKeptForABacklogAreBoundedInBytesAndDroppedOnceLeasedBack() async throws {
        let q = try await openSQLiteWindow(maxHeld: 10, leaseBatch: 50) { $0.maxCachedNotificationBytes = 2_000 }
        for k in 0..<30 { try await q.enqueue(makeJobs(100, notifID: "big-\(k)")) }
        let filled = q.cachedNotifications
        XCTAssertGreaterThan(filled.count, 0, "renderings are still kept")
        XCTAssertLessThan(filled.count, 30, "not one per notification whatever its size")
        XCTAssertLessThanOrEqual(filled.bytes, 2_000)
        var seen = Set<UInt64>()
        for i in 0..<3000 {
            let j = try await take(q)
            XCTAssertTrue(seen.insert(j.id).inserted)
            XCTAssertEqual(j.accepted.notification.message, "hello")
            await q.complete(j, outcome: .delivered(providerID: nil))
            if i % 100 == 0 { XCTAssertLessThanOrEqual(q.cachedNotifications.bytes, 2_000) }
        }
        let drained = q.cachedNotifications
        XCTAssertEqual(drained.waiting, 0, "every job left in the store was leased back: no rendering is kept for them")
        XCTAssertLessThanOrEqual(drained.bytes, 2_000)
        XCTAssertEqual(drained.readBack, drained.count - drained.waiting)
        await q.close()
    }

    /// A full cache gives up renderings read back from the store for a new notification's, and skips
    /// a notification when it holds none to give up.
    func testAFullRenderingCacheGivesUpOnlyRenderingsReadBack() async throws {
        let q = try await openSQLiteWindow(maxHeld: 1, leaseBatch: 5) { $0.maxCachedNotifications = 2 }
        try await q.enqueue(makeJobs(5, notifID: "a"))
        try await q.enqueue(makeJobs(5, notifID: "b"))
        XCTAssertEqual(q.cachedNotifications.waiting, 2)
        try await q.enqueue(makeJobs(5, notifID: "c"))
        var c = q.cachedNotifications
        XCTAssertEqual(c.count, 2, "full, and nothing read back to give up: c is not kept")
        for _ in 0..<15 {
            let j = try await take(q)
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        c = q.cachedNotifications
        XCTAssertEqual(c.waiting, 0)
        XCTAssertEqual(c.readBack, 1, "c was read back from the store and kept")
        XCTAssertEqual(c.count, 1)
        try await q.enqueue(makeJobs(5, notifID: "d"))
        try await q.enqueue(makeJobs(5, notifID: "e"))
        c = q.cachedNotifications
        XCTAssertEqual(c.waiting, 2, "e took the place of c's read-back rendering")
        XCTAssertEqual(c.readBack, 0)
        XCTAssertEqual(c.count, 2)
        for _ in 0..<10 {
            let j = try await take(q)
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        await q.close()
    }
}
