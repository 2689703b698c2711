import Foundation
import NIOConcurrencyHelpers

/// A clock the test moves.
final class TestClock: Sendable {
    let t: NIOLockedValueBox<Double>
    init(_ start: Double) { t = NIOLockedValueBox(start) }
    func set(_ s: Double) { t.withLockedValue { $0 = s } }
    var now: @Sendable () -> Date { { Date(timeIntervalSince1970: self.t.withLockedValue { $0 }) } }
}
