import Foundation
import NIOConcurrencyHelpers
import PushDispatch
import PushgateCore

/// The state of one delivery, as `GET /api/push/{notif_id}` reports it.
public struct DeliveryStatusRecord: Sendable, Equatable {
    public enum State: String, Sendable {
        case queued, retrying, delivered, failed
    }
    public var platform: Platform
    /// The token (or Web Push endpoint), unmasked; the route masks it per `log.hide_token`.
    public var token: String
    public var state: State
    /// Attempts made so far.
    public var attempts: Int
    /// Retrying: when the next attempt is due.
    public var nextTry: Date?
    /// Retrying: the last error; failed: the reason.
    public var error: String?
    /// Delivered: the provider's id (`apns-id`, FCM message `name`).
    public var providerID: String?
    /// Delivered or failed: when.
    public var finishedAt: Date?

    public init(platform: Platform, token: String, state: State, attempts: Int, nextTry: Date? = nil, error: String? = nil, providerID: String? = nil, finishedAt: Date? = nil) {
        self.platform = platform
        self.token = token
        self.state = state
        self.attempts = attempts
        self.nextTry = nextTry
        self.error = error
        self.providerID = providerID
        self.finishedAt = finishedAt
    }
}

/// Answers delivery status queries.
public protocol DeliveryStatusSource: Sendable {
    /// The deliveries of `notifID`, in enqueue order; nil when unknown (never seen or pruned).
    func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]?
}

/// Finds the status source that belongs to a queue (the memory engine's observer is not reachable
/// from the gateway otherwise). Durable queues are their own source.
public enum DeliveryStatusRegistry {
    private final class WeakQueue: @unchecked Sendable {
        weak var queue: AnyObject?
        init(_ q: AnyObject) { queue = q }
    }
    private static let box = NIOLockedValueBox<[ObjectIdentifier: (WeakQueue, any DeliveryStatusSource)]>([:])

    public static func register(_ source: any DeliveryStatusSource, for queue: any QueueDriver & AnyObject) {
        box.withLockedValue { m in
            m = m.filter { $0.value.0.queue != nil }
            m[ObjectIdentifier(queue)] = (WeakQueue(queue), source)
        }
    }

    public static func source(for queue: any QueueDriver) -> (any DeliveryStatusSource)? {
        if let s = queue as? any DeliveryStatusSource { return s }
        let obj = queue as AnyObject
        return box.withLockedValue { m in
            guard let (w, s) = m[ObjectIdentifier(obj)], w.queue === obj else { return nil }
            return s
        }
    }
}

/// In-memory delivery status (memory engine), fed by the dispatcher's `DeliveryObserver` hook.
/// Records are kept `retention` seconds after the notification's last change, and at most
/// `maxRecords` deliveries (oldest notifications dropped first).
public final class MemoryStatusStore: DeliveryObserver, DeliveryStatusSource {
    private struct Entry {
        var platform: Platform
        var token: String
        var state: DeliveryStatusRecord.State
        var attempts: Int
        var nextTry: Date?
        var error: String?
        var providerID: String?
        var finishedAt: Date?
    }
    private struct Notif {
        var order: [UInt64] = []
        var entries: [UInt64: Entry] = [:]
        var updated: Date
    }
    private struct State {
        var notifs: [String: Notif] = [:]
        /// notif ids by first sight (pruning order); may hold ids already removed.
        var fifo: [String] = []
        var fifoHead = 0
        var records = 0
        var lastPrune = Date.distantPast
    }

    private let state = NIOLockedValueBox(State())
    public let retention: TimeInterval
    public let maxRecords: Int
    private let now: @Sendable () -> Date

    public init(retention: TimeInterval = 86_400, maxRecords: Int = 1_000_000, now: @escaping @Sendable () -> Date = { Date() }) {
        self.retention = retention
        self.maxRecords = max(1, maxRecords)
        self.now = now
    }

    public var recordCount: Int { state.withLockedValue { $0.records } }

    public func accepted(_ job: DeliveryJob) {
        let t = now()
        state.withLockedValue { s in
            let id = job.accepted.notifID
            if s.notifs[id] == nil {
                s.fifo.append(id)
                s.notifs[id] = Notif(updated: t)
            }
            // Mutated in place (`s.notifs[id]!.…`): copying the Notif out and back would copy its
            // entries on every job, O(tokens²) per notification.
            let entry = Entry(platform: job.platform, token: job.target.reportedToken, state: .queued, attempts: 0)
            if s.notifs[id]!.entries.updateValue(entry, forKey: job.id) == nil {
                s.notifs[id]!.order.append(job.id)
                s.records += 1
            }
            s.notifs[id]!.updated = t
            if s.records > maxRecords || t.timeIntervalSince(s.lastPrune) > 10 { prune(&s, now: t) }
        }
    }

    public func attempted(_ job: DeliveryJob, outcome: SendOutcome, nextTry: Date?) {
        guard let nextTry else { return }   // final outcomes come through `finished`
        let t = now()
        update(job, at: t) { e in
            e.state = .retrying
            e.attempts = job.attempts
            e.nextTry = nextTry
            e.error = outcome.reason ?? job.lastError
        }
    }

    public func finished(_ job: DeliveryJob, outcome: FinalOutcome) {
        let t = now()
        update(job, at: t) { e in
            e.attempts = job.attempts
            e.nextTry = nil
            e.finishedAt = t
            switch outcome {
            case .delivered(let id):
                e.state = .delivered
                e.providerID = id
                e.error = nil
            case .failed(let reason, _):
                e.state = .failed
                e.error = reason
            }
        }
    }

    private func update(_ job: DeliveryJob, at t: Date, _ change: (inout Entry) -> Void) {
        state.withLockedValue { s in
            let id = job.accepted.notifID
            guard s.notifs[id]?.entries[job.id] != nil else { return }
            change(&s.notifs[id]!.entries[job.id]!)   // in place, see `accepted`
            s.notifs[id]!.updated = t
        }
    }

    public func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]? {
        state.withLockedValue { s in
            guard let n = s.notifs[notifID] else { return nil }
            return n.order.compactMap { id in
                guard let e = n.entries[id] else { return nil }
                return DeliveryStatusRecord(platform: e.platform, token: e.token, state: e.state, attempts: e.attempts,
                                            nextTry: e.nextTry, error: e.error, providerID: e.providerID, finishedAt: e.finishedAt)
            }
        }
    }

    /// Drops notifications idle for longer than `retention` whose deliveries are all over, and the
    /// oldest ones while over `maxRecords`.
    public func prune() { state.withLockedValue { prune(&$0, now: now()) } }

    private func prune(_ s: inout State, now t: Date) {
        s.lastPrune = t
        let cutoff = t.addingTimeInterval(-retention)
        var kept: [String] = []
        var i = s.fifoHead
        // Walk from the oldest; stop at the first notification still fresh (FIFO ~ age order).
        while i < s.fifo.count {
            let id = s.fifo[i]
            guard let n = s.notifs[id] else { i += 1; continue }
            let over = s.records > maxRecords
            let expired = n.updated < cutoff && n.entries.values.allSatisfy { $0.state == .delivered || $0.state == .failed }
            if over || expired {
                s.records -= n.entries.count
                s.notifs[id] = nil
                i += 1
                continue
            }
            if n.updated < cutoff { kept.append(id); i += 1; continue }   // still pending: keep, look further
            break
        }
        if !kept.isEmpty {
            // Re-queue the pending old ones at the tail.
            s.fifo.append(contentsOf: kept)
        }
        s.fifoHead = i
        if s.fifoHead > 4096, s.fifoHead * 2 > s.fifo.count {
            s.fifo.removeFirst(s.fifoHead)
            s.fifoHead = 0
        }
    }
}
