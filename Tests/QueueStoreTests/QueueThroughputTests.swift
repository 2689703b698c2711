import Foundation
import NIOConcurrencyHelpers
import PushDispatch
import PushgateCore
import XCTest

@testable import QueueStore

/// Queue-level figures: enqueue (batches of 500, 4 producers) + lease + complete (64 workers).
/// Prints jobs/s for the memory engine and SQLite; the gateway-level comparison is `pushgate bench`.
final class QueueThroughputTests: XCTestCase {
    func run(_ q: any QueueDriver, jobs total: Int) async throws -> (enqueue: Double, all: Double) {
        let done = NIOLockedValueBox(0)
        let start = Date()
        var enqueued = Date()
        try await withThrowingTaskGroup(of: Void.self) { g in
            for _ in 0..<64 {
                g.addTask {
                    let taker = Taker(q)
                    while done.withLockedValue({ $0 }) < total {
                        guard let j = await taker.next(timeout: 0.2) else { continue }
                        await q.complete(j, outcome: .delivered(providerID: "x"))
                        done.withLockedValue { $0 += 1 }
                    }
                }
            }
            try await withThrowingTaskGroup(of: Void.self) { p in
                for w in 0..<4 {
                    p.addTask {
                        for _ in 0..<(total / 500 / 4) { try await q.enqueue(makeJobs(500, notifID: "bench-\(w)")) }
                    }
                }
                try await p.waitForAll()
            }
            enqueued = Date()
            try await g.waitForAll()
        }
        let end = Date()
        return (Double(total) / enqueued.timeIntervalSince(start), Double(total) / end.timeIntervalSince(start))
    }

    func testThroughputFigures() async throws {
        let total = 20_000
        let mem = MemoryQueue(capacity: 1_000_000)
        let m = try await run(mem, jobs: total)
        mem.shutdown()
        let sq = try await SQLiteQueue.open(path: tempDir() + "/bench.sqlite", options: options(1_000_000))
        let s = try await run(sq, jobs: total)
        XCTAssertEqual(sq.pendingCount, 0)
        await sq.close()
        let sqFull = try await SQLiteQueue.open(path: tempDir() + "/bench.sqlite", synchronous: "full", options: options(1_000_000))
        let f = try await run(sqFull, jobs: total)
        await sqFull.close()
        print(
            String(
                format:
                    "queue throughput (%d jobs): memory enqueue %.0f/s, end-to-end %.0f/s; sqlite(normal) enqueue %.0f/s, end-to-end %.0f/s; sqlite(full) enqueue %.0f/s, end-to-end %.0f/s",
                total, m.enqueue, m.all, s.enqueue, s.all, f.enqueue, f.all))
        XCTAssertGreaterThan(s.all, 2000, "sqlite queue below 2000 jobs/s")
    }
}
