import NIOConcurrencyHelpers
import PushgateCore

/// Sync-mode requests waiting for all of their deliveries to end.
final class WaiterRegistry: Sendable {
    private struct Waiter {
        var remaining: Int
        var logs: [LogEntry]
        var continuation: CheckedContinuation<[LogEntry], Never>?
    }

    private struct State {
        var nextID: UInt64 = 1
        var waiters: [UInt64: Waiter] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Registers a waiter for `count` deliveries, with entries already known (pre-network failures).
    func register(count: Int, initialLogs: [LogEntry]) -> UInt64 {
        state.withLockedValue { s in
            let id = s.nextID
            s.nextID += 1
            s.waiters[id] = Waiter(remaining: count, logs: initialLogs, continuation: nil)
            return id
        }
    }

    /// Waits until every delivery of the waiter has ended; returns the failed entries.
    func wait(_ id: UInt64) async -> [LogEntry] {
        await withCheckedContinuation { (c: CheckedContinuation<[LogEntry], Never>) in
            let ready: [LogEntry]? = state.withLockedValue { s in
                guard var w = s.waiters[id] else { return [] }
                if w.remaining <= 0 {
                    s.waiters[id] = nil
                    return w.logs
                }
                w.continuation = c
                s.waiters[id] = w
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
    }

    /// Drops a waiter whose jobs never got queued.
    func cancel(_ id: UInt64) {
        _ = state.withLockedValue { $0.waiters.removeValue(forKey: id) }
    }

    func finished(_ id: UInt64, failure: LogEntry?) {
        let resume: (CheckedContinuation<[LogEntry], Never>, [LogEntry])? = state.withLockedValue { s in
            guard var w = s.waiters[id] else { return nil }
            if let failure { w.logs.append(failure) }
            w.remaining -= 1
            if w.remaining <= 0, let c = w.continuation {
                s.waiters[id] = nil
                return (c, w.logs)
            }
            s.waiters[id] = w
            return nil
        }
        if let (c, logs) = resume { c.resume(returning: logs) }
    }
}
