import PushDispatch
import XCTest

@testable import QueueStore

/// How a stored Idempotency-Key row is read back, including rows no gateway of this version wrote.
final class IdempotencyDecisionTests: XCTestCase {
    func decide(status: Int?, body: String? = "{}", hash: String = "h", claimedAt: Double = 100) -> IdempotencyClaim? {
        IdempotencyClaim.decide(
            storedHash: "h", status: status, body: body, requestID: "r", notifIDs: "", claimedAt: claimedAt, expires: 1000,
            bodyHash: hash, now: 200, abandonBefore: 150)
    }

    func testStoredRowsAreDecided() {
        XCTAssertEqual(decide(status: 200), .replay(IdempotentAnswer(status: 200, body: Array("{}".utf8), requestID: "r", notifIDs: "")))
        XCTAssertEqual(decide(status: 200, hash: "other"), .mismatch)
        XCTAssertEqual(decide(status: nil, claimedAt: 190), .inProgress)
        XCTAssertNil(decide(status: nil, claimedAt: 100), "abandoned: taken over")
    }

    func testAStatusOutsideHTTPsRangeIsNeverServed() {
        for bad in [Int.min, -1, 0, 99, 600, 1000, Int.max] {
            XCTAssertEqual(decide(status: bad, claimedAt: 190), .inProgress, "\(bad)")
            XCTAssertNil(decide(status: bad, claimedAt: 100), "\(bad)")
        }
    }
}
