import NIOConcurrencyHelpers

/// How many answers of each status the gateway gave (`/sys/stats`), counted by its ways in.
package final class RequestCounters: Sendable {
    private let box = NIOLockedValueBox<[Int: Int]>([:])
    package func count(_ status: Int) { box.withLockedValue { $0[status, default: 0] += 1 } }
    package var snapshot: [Int: Int] { box.withLockedValue { $0 } }
    package init() {}
}
