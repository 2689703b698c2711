import NIOConcurrencyHelpers
import PushgateCore
import XCTest

@testable import PushDispatch

final class MemoryQueueTests: XCTestCase {
    struct Prepared: PreparedPush {}

    func job(_ id: UInt64, notBefore: Date = Date(), platform: Platform = .ios) -> DeliveryJob {
        let a = AcceptedNotification(notifID: "n", notification: PushNotification(platform: platform, tokens: ["t"]), prepared: Prepared())
        var j = DeliveryJob(id: id, messageID: "m\(id)", target: .token("t\(id)"), accepted: a, maxAttempts: 3, now: Date())
        j.notBefore = notBefore
        return j
    }

    func testFIFOAndCapacity() async throws {
        let q = MemoryQueue(capacity: 3)
        try await q.enqueue([job(1), job(2)])
        do {
            try await q.enqueue([job(3), job(4)])
            XCTFail("expected full")
        } catch let e as QueueFullError {
            XCTAssertEqual(e.capacity, 3)
        }
        XCTAssertEqual(q.pendingCount, 2)
        let a = await q.next(platform: .ios)
        let b = await q.next(platform: .ios)
        XCTAssertEqual(a?.id, 1)
        XCTAssertEqual(b?.id, 2)
        await q.complete(a!, outcome: .delivered(providerID: nil))
        XCTAssertEqual(q.pendingCount, 1)
        q.shutdown()
    }

    /// A worker's non-waiting take: ready jobs in order, never a delayed one or another platform's,
    /// nil once shut down.
    func testNextIfReadyTakesOnlyReadyJobsWithoutWaiting() async throws {
        let q = MemoryQueue(capacity: 10)
        try await q.enqueue([job(1), job(2, notBefore: Date().addingTimeInterval(60)), job(3), job(4, platform: .android)])
        XCTAssertEqual(q.nextIfReady(platform: .ios)?.id, 1)
        XCTAssertEqual(q.nextIfReady(platform: .ios)?.id, 3)
        XCTAssertNil(q.nextIfReady(platform: .ios), "job 2 is not due")
        XCTAssertEqual(q.depth(platform: .ios).delayed, 1)
        XCTAssertEqual(q.pendingCount, 4, "taken is not complete")
        q.shutdown()
        XCTAssertNil(q.nextIfReady(platform: .android), "shut down")
    }

    func testDelayedJobWaitsUntilDue() async throws {
        let q = MemoryQueue(capacity: 10, pollInterval: .milliseconds(5))
        let due = Date().addingTimeInterval(0.3)
        try await q.enqueue([job(1, notBefore: due)])
        XCTAssertEqual(q.depth(platform: .ios).delayed, 1)
        let got = await q.next(platform: .ios)
        XCTAssertNotNil(got)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(due), 0, "handed out before it was due")
        q.shutdown()
    }

    func testShutdownWakesWaiters() async {
        let q = MemoryQueue(capacity: 10)
        async let waiting = q.next(platform: .android)
        try? await Task.sleep(for: .milliseconds(50))
        q.shutdown()
        let r = await waiting
        XCTAssertNil(r)
    }
}
