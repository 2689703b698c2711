import PushgateCore
import XCTest

final class SendOutcomeClassTests: XCTestCase {
    /// Metrics and the live stats index arrays by `classIndex` and label them from `classNames`:
    /// each outcome's index is its own name's position.
    func testClassIndexIsThePositionOfTheClassName() {
        let outcomes: [SendOutcome] = [
            .delivered(providerID: nil), .tokenDead(reason: "r", status: 410), .permanent(reason: "r", status: 400),
            .transient(reason: "r", status: 503, retryAfter: nil), .credentials(reason: "r", status: 403),
            .quotaExceeded(reason: "r", status: 429),
        ]
        XCTAssertEqual(outcomes.map(\.classIndex), Array(SendOutcome.classNames.indices))
        for o in outcomes { XCTAssertEqual(SendOutcome.classNames[o.classIndex], o.className) }
    }
}
