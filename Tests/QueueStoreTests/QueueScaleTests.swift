import Foundation
import PostgresNIO
import PushDispatch
import PushgateCore
import SQLiteNIO
import XCTest

@testable import QueueStore

/// Issue 17: the queue's upkeep on a store holding many finished (status) rows.

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
            XCTAssertTrue(line.contains("INDEX jobs_free") || line.contains("INDEX jobs_owner"), "not on a pending index: \(plan)")
        }
        let pending = try await b.pendingCount()
        XCTAssertEqual(pending, 3)
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
