import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// The failed entries of one sync answer, held to a byte budget: entries past it are counted, not kept,
/// so a request with thousands of failing tokens cannot make an answer (or the memory behind it) huge.
public struct BoundedLogs: Sendable {
    public private(set) var entries: [LogEntry] = []
    /// Entries left out because the budget was spent.
    public private(set) var omitted = 0
    private var bytes = 0
    let budget: Int

    public init(budget: Int) { self.budget = budget }

    /// About the size of the entry's JSON (escaping aside).
    static func size(_ e: LogEntry) -> Int {
        96 + e.notifID.utf8.count + e.platform.utf8.count + e.token.utf8.count + e.message.utf8.count + e.error.utf8.count
    }

    public mutating func append(_ e: LogEntry) {
        let n = Self.size(e)
        if bytes + n > budget {
            omitted += 1
        } else {
            bytes += n
            entries.append(e)
        }
    }

    public mutating func append(contentsOf other: BoundedLogs) {
        for e in other.entries { append(e) }
        omitted += other.omitted
    }
}

/// Sync-mode requests waiting for all of their deliveries to end.
final class WaiterRegistry: Sendable {
    /// What a waiter learnt: failed entries (bounded) and how many deliveries had not ended.
    struct Result: Sendable {
        var logs: BoundedLogs
        var pending: Int
    }

    private struct Waiter {
        var remaining: Int
        var logs: BoundedLogs
        var continuation: CheckedContinuation<Result, Never>?
    }

    private struct State {
        var nextID: UInt64 = 1
        var waiters: [UInt64: Waiter] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Registers a waiter for `count` deliveries; failures are kept up to `budget` bytes.
    func register(count: Int, budget: Int) -> UInt64 {
        state.withLockedValue { s in
            let id = s.nextID
            s.nextID += 1
            s.waiters[id] = Waiter(remaining: count, logs: BoundedLogs(budget: budget), continuation: nil)
            return id
        }
    }

    /// Waits until every delivery of the waiter has ended, or `timeout` seconds: then answers what is
    /// known, with the number of deliveries still under way (they go on; the waiter is dropped).
    func wait(_ id: UInt64, timeout: Double) async -> Result {
        let timer = Task {
            try? await Task.sleep(for: .seconds(timeout))
            if !Task.isCancelled { self.expire(id) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { (c: CheckedContinuation<Result, Never>) in
            let ready: Result? = state.withLockedValue { s in
                guard var w = s.waiters[id] else { return Result(logs: BoundedLogs(budget: 0), pending: 0) }
                if w.remaining <= 0 {
                    s.waiters[id] = nil
                    return Result(logs: w.logs, pending: 0)
                }
                w.continuation = c
                s.waiters[id] = w
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
    }

    /// The sync timeout: answer with what is known.
    private func expire(_ id: UInt64) {
        let resume: (CheckedContinuation<Result, Never>, Result)? = state.withLockedValue { s in
            guard let w = s.waiters[id], let c = w.continuation else { return nil }
            s.waiters[id] = nil
            return (c, Result(logs: w.logs, pending: max(0, w.remaining)))
        }
        if let (c, r) = resume { c.resume(returning: r) }
    }

    /// Drops a waiter whose jobs never got queued.
    func cancel(_ id: UInt64) {
        _ = state.withLockedValue { $0.waiters.removeValue(forKey: id) }
    }

    func finished(_ id: UInt64, failure: LogEntry?) {
        let resume: (CheckedContinuation<Result, Never>, Result)? = state.withLockedValue { s in
            guard var w = s.waiters[id] else { return nil }
            if let failure { w.logs.append(failure) }
            w.remaining -= 1
            if w.remaining <= 0, let c = w.continuation {
                s.waiters[id] = nil
                return (c, Result(logs: w.logs, pending: 0))
            }
            s.waiters[id] = w
            return nil
        }
        if let (c, r) = resume { c.resume(returning: r) }
    }
}

extension WaiterRegistry: DeliveryEventSink {
    /// A sync request's delivery ended: one fewer to wait for.
    func record(_ event: DeliveryEvent) {
        if case .finished(let job, _, _, let failure) = event, let w = job.waiterID { finished(w, failure: failure) }
    }
}
