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
            // Deliveries not due before the timeout (scheduled ones, late retries) cannot be sent
            // by then: not waited for.
            let end = Date().addingTimeInterval(timeout)
            let memory = queue as? MemoryQueue
            let later = memory?.waitingCount(dueAfter: end) ?? 0
            let left = await waitForZero(timeout: timeout) {
                max(0, self.queue.pendingCount - (memory?.waitingCount(dueAfter: end) ?? 0))
            }
            if left > 0 || later > 0 {
                logger.warning("shutdown with \(left + later) deliveries pending (\(later) not due before core.shutdown_timeout)")
            }
        }
        shutdown()
    }
}
