import Foundation
import Logging

/// Polls `count` every `interval` until it is 0 or `timeout` seconds passed; returns the last count.
/// The one wait of every shutdown: the memory queue's pending deliveries, a retired app's sends.
public func waitForZero(timeout: Double, interval: Duration = .milliseconds(20), _ count: () -> Int) async -> Int {
    let deadline = Date().addingTimeInterval(timeout)
    while count() > 0, Date() < deadline {
        try? await Task.sleep(for: interval)
    }
    return count()
}

extension Dispatcher {
    /// Stops taking work once what was accepted is sent or kept: a durable queue keeps what is not
    /// sent (its shutdown finishes the sends in flight, commits and releases leases); the memory queue
    /// is drained for up to `timeout` seconds first (what is left then is lost, and logged).
    public func drainAndShutdown(timeout: Double, logger: Logger) async {
        if !queue.isDurable {
            let left = await waitForZero(timeout: timeout) { self.queue.pendingCount }
            if left > 0 { logger.warning("shutdown timeout reached with \(left) deliveries pending") }
        }
        shutdown()
    }
}
