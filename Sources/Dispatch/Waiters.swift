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

/// The final outcome of one delivery of a request submitted with `Dispatcher.submit(_:sync:app:outcomes:)`
/// `outcomes: true` (the embedding API's per-token answer).
public struct DeliveryOutcome: Sendable, Equatable {
    public enum Result: Sendable, Equatable {
        /// Accepted by the provider; its id (`apns-id`, FCM message `name`) when it gave one.
        case delivered(providerID: String?)
        /// Over for good; `tokenDead` tells that the provider says the token is gone (delete it).
        case failed(reason: String, tokenDead: Bool)
        /// Not over when the wait ended (it goes on; `GET /api/push/{notif_id}` follows it).
        case pending
        /// Not sent and not a failure: a `dedup_key` duplicate, or replaced in its coalescing window.
        case skipped(SkipReason)
    }
    /// The notification's `notif_id` (given or generated).
    public var notifID: String
    public var platform: Platform
    /// The device token (or Web Push endpoint, or FCM topic/condition), as given: never masked.
    public var token: String
    public var result: Result
    /// Attempts made (0: failed before sending).
    public var attempts: Int
    /// Position of the delivery in the request (notification order, then token order).
    var position: Int

    public var isDelivered: Bool { if case .delivered = result { return true } else { return false } }

    public init(notifID: String, platform: Platform, token: String, result: Result, attempts: Int) {
        self.init(notifID: notifID, platform: platform, token: token, result: result, attempts: attempts, position: 0)
    }

    init(notifID: String, platform: Platform, token: String, result: Result, attempts: Int, position: Int) {
        self.notifID = notifID
        self.platform = platform
        self.token = token
        self.result = result
        self.attempts = attempts
        self.position = position
    }

    init(_ job: borrowing DeliveryJob, _ final: FinalOutcome?, position: Int) {
        let result: Result
        switch final {
        case .delivered(let id, _)?: result = .delivered(providerID: id)
        case .failed(let reason, let dead)?: result = .failed(reason: reason, tokenDead: dead)
        case .skipped(let why)?: result = .skipped(why)
        case nil: result = .pending
        }
        self.init(
            notifID: job.accepted.notifID, platform: job.platform, token: job.target.reportedToken, result: result, attempts: job.attempts,
            position: position)
    }
}

/// Sync-mode requests waiting for all of their deliveries to end.
final class WaiterRegistry: Sendable {
    /// What a waiter learnt: failed entries (bounded), how many deliveries had not ended, and (when
    /// registered with `outcomes`) every delivery's outcome, pending ones included, in request order.
    struct Result: Sendable {
        var logs: BoundedLogs
        var pending: Int
        var outcomes: [DeliveryOutcome] = []
    }

    private struct Waiter {
        var remaining: Int
        var logs: BoundedLogs
        var continuation: CheckedContinuation<Result, Never>?
        /// By position in the request (`DeliveryJob.waiterPosition`); nil: failures only (the HTTP API's sync mode).
        var outcomes: [Int: DeliveryOutcome]?

        func result(pending: Int) -> Result {
            Result(logs: logs, pending: pending, outcomes: (outcomes.map { Array($0.values) } ?? []).sorted { $0.position < $1.position })
        }
    }

    private struct State {
        var nextID: UInt64 = 1
        var waiters: [UInt64: Waiter] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Registers a waiter for `count` deliveries; failures are kept up to `budget` bytes. With
    /// `outcomes` (position in the request -> the delivery, pending), every delivery's final outcome is kept too.
    func register(count: Int, budget: Int, outcomes: [Int: DeliveryOutcome]? = nil) -> UInt64 {
        state.withLockedValue { s in
            let id = s.nextID
            s.nextID += 1
            s.waiters[id] = Waiter(remaining: count, logs: BoundedLogs(budget: budget), continuation: nil, outcomes: outcomes)
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
                    return w.result(pending: 0)
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
            return (c, w.result(pending: max(0, w.remaining)))
        }
        if let (c, r) = resume { c.resume(returning: r) }
    }

    /// Drops a waiter whose jobs never got queued.
    func cancel(_ id: UInt64) {
        _ = state.withLockedValue { $0.waiters.removeValue(forKey: id) }
    }

    func finished(_ id: UInt64, job: DeliveryJob? = nil, outcome: FinalOutcome? = nil, failure: LogEntry?) {
        let resume: (CheckedContinuation<Result, Never>, Result)? = state.withLockedValue { s in
            guard var w = s.waiters[id] else { return nil }
            if let failure { w.logs.append(failure) }
            if let job, let outcome, w.outcomes?[job.waiterPosition] != nil {
                w.outcomes?[job.waiterPosition] = DeliveryOutcome(job, outcome, position: job.waiterPosition)
            }
            w.remaining -= 1
            if w.remaining <= 0, let c = w.continuation {
                s.waiters[id] = nil
                return (c, w.result(pending: 0))
            }
            s.waiters[id] = w
            return nil
        }
        if let (c, r) = resume { c.resume(returning: r) }
    }
}

extension WaiterRegistry: DeliveryEventSink {
    /// A sync request's delivery ended: one fewer to wait for.
    func record(_ event: borrowing DeliveryEvent) {
        switch event {
        case .finished(let job, let outcome, _, let failure):
            if let w = job.waiterID { finished(w, job: job, outcome: outcome, failure: failure) }
        default:
            break
        }
    }
}
