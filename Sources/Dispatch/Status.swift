import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// The state of one delivery, as `GET /api/push/{notif_id}` reports it.
public struct DeliveryStatusRecord: Sendable, Equatable {
    public enum State: String, Sendable {
        case queued, retrying, delivered, failed
        /// Not sent: another notification with the same `dedup_key` went to this token (not a failure).
        case duplicate
        /// Not sent: a later push with the same `collapse_id` replaced it in its window (not a failure).
        case coalesced
        /// Not sent: cancelled (`DELETE /api/push/{notif_id}`) before it was sent.
        case cancelled
        /// Not sent: due outside its `deliver_between` window with `"quiet": "drop"`.
        case quietHours = "quiet_hours"
        /// Waiting for its time (`send_at`, `delay_seconds`, `deliver_between`, the end of a
        /// coalescing window): a queued delivery whose `nextTry` is ahead (`scheduled(now:)`).
        case scheduled

        /// Over: delivered, failed, duplicate, coalesced, cancelled or quiet_hours.
        public var isFinal: Bool { self != .queued && self != .retrying && self != .scheduled }

        /// The states told in a status answer only when some delivery is in them (gorush's four always).
        public var isExtension: Bool {
            switch self {
            case .queued, .retrying, .delivered, .failed: return false
            case .duplicate, .coalesced, .cancelled, .quietHours, .scheduled: return true
            }
        }
    }
    public var platform: Platform
    /// The token (or Web Push endpoint), unmasked; the route masks it per `log.hide_token`.
    public var token: String
    public var state: State
    /// Attempts made so far.
    public var attempts: Int
    /// Retrying: when the next attempt is due; queued: when it may be sent (its `send_at`).
    public var nextTry: Date?
    /// Retrying: the last error; failed: the reason.
    public var error: String?
    /// Delivered: the provider's id (`apns-id`, FCM message `name`).
    public var providerID: String?
    /// Delivered or failed: when.
    public var finishedAt: Date?
    /// The app the notification was accepted for (the status route shows an app key only its own).
    public var app: String = AppID.defaultApp
    /// Set when the notification was sent as its `fallback` (its own rendering over the limit).
    public var fallback: FallbackInfo?
    /// The notification's `analytics_label`.
    public var analyticsLabel: String?

    public init(
        platform: Platform, token: String, state: State, attempts: Int, nextTry: Date? = nil, error: String? = nil, providerID: String? = nil,
        finishedAt: Date? = nil
    ) {
        self.platform = platform
        self.token = token
        self.state = state
        self.attempts = attempts
        self.nextTry = nextTry
        self.error = error
        self.providerID = providerID
        self.finishedAt = finishedAt
    }

    /// The record of a delivery in `state` (the one mapping used by every engine).
    public init(
        platform: Platform, token: String, state: DeliveryState, attempts: Int, finishedAt: Date?, app: String = AppID.defaultApp,
        fallback: FallbackInfo? = nil, notBefore: Date? = nil, analyticsLabel: String? = nil
    ) {
        switch state {
        case .queued:
            self.init(platform: platform, token: token, state: .queued, attempts: 0, nextTry: notBefore)
        case .retrying(let next, let error):
            self.init(platform: platform, token: token, state: .retrying, attempts: attempts, nextTry: next, error: error)
        case .delivered(let id):
            self.init(platform: platform, token: token, state: .delivered, attempts: attempts, providerID: id, finishedAt: finishedAt)
        case .failed(let reason):
            self.init(platform: platform, token: token, state: .failed, attempts: attempts, error: reason, finishedAt: finishedAt)
        case .skipped(let why):
            self.init(platform: platform, token: token, state: State(why), attempts: attempts, finishedAt: finishedAt)
        }
        self.app = app
        self.fallback = fallback
        self.analyticsLabel = analyticsLabel
    }

    /// As seen at `now`: a queued delivery whose time is ahead is `scheduled`.
    public func scheduled(now: Date) -> DeliveryStatusRecord {
        guard state == .queued, let t = nextTry, t > now else { return self }
        var r = self
        r.state = .scheduled
        return r
    }
}

extension DeliveryStatusRecord.State {
    public init(_ why: SkipReason) {
        switch why {
        case .duplicate: self = .duplicate
        case .coalesced: self = .coalesced
        case .cancelled: self = .cancelled
        case .quietHours: self = .quietHours
        }
    }
}

/// Answers delivery status queries.
public protocol DeliveryStatusSource: Sendable {
    /// The deliveries of `notifID`, in enqueue order; nil when unknown (never seen or pruned).
    func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]?
}

/// In-memory delivery status (memory engine), fed by the delivery event stream.
/// Records are kept `retention` seconds after the notification's last change, and at most
/// `maxRecords` deliveries (oldest notifications dropped first).
public final class MemoryStatusStore: DeliveryEventSink, DeliveryStatusSource {
    private struct Notif {
        var order: [UInt64] = []
        var entries: [UInt64: DeliveryStatusRecord] = [:]
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

    public func record(_ event: DeliveryEvent) {
        switch event {
        case .accepted(let job): accepted(job)
        case .retrying(let job, _), .finished(let job, _, _, _): update(job)
        case .submitted, .attempted: break
        }
    }

    private static func record(_ job: DeliveryJob, at t: Date) -> DeliveryStatusRecord {
        DeliveryStatusRecord(
            platform: job.platform, token: job.target.reportedToken, state: job.state, attempts: job.attempts,
            finishedAt: job.state.isFinal ? t : nil, app: job.accepted.app, fallback: job.accepted.fallback, notBefore: job.notBefore,
            analyticsLabel: job.accepted.notification.analyticsLabel)
    }

    /// A job's record as accepted. Its later events may come first: the job is visible to the
    /// workers once enqueued, before the submitting task publishes its acceptance, and a fast
    /// provider answer then finishes it before it is accepted here. An accepted event never
    /// overwrites such a record (a token would show queued for ever).
    private func accepted(_ job: DeliveryJob) { put(job, overwrite: false) }

    private func update(_ job: DeliveryJob) { put(job, overwrite: true) }

    private func put(_ job: DeliveryJob, overwrite: Bool) {
        let t = now()
        state.withLockedValue { s in
            let id = job.accepted.notifID
            if s.notifs[id] == nil {
                s.fifo.append(id)
                s.notifs[id] = Notif(updated: t)
            }
            // Mutated in place (`s.notifs[id]!.…`): copying the Notif out and back would copy its
            // entries on every job, O(tokens²) per notification.
            if s.notifs[id]!.entries[job.id] == nil {
                s.notifs[id]!.entries[job.id] = Self.record(job, at: t)
                // In job id order (request order); a record made by an event that came before its
                // acceptance may be inserted before later ones.
                if let last = s.notifs[id]!.order.last, last > job.id {
                    let at = s.notifs[id]!.order.firstIndex { $0 > job.id } ?? s.notifs[id]!.order.count
                    s.notifs[id]!.order.insert(job.id, at: at)
                } else {
                    s.notifs[id]!.order.append(job.id)
                }
                s.records += 1
            } else if overwrite {
                s.notifs[id]!.entries[job.id] = Self.record(job, at: t)  // in place, see above
            }
            s.notifs[id]!.updated = t
            if s.records > maxRecords || t.timeIntervalSince(s.lastPrune) > 10 { prune(&s, now: t) }
        }
    }

    public func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]? {
        state.withLockedValue { s in
            guard let n = s.notifs[notifID] else { return nil }
            return n.order.compactMap { n.entries[$0] }
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
            guard let n = s.notifs[id] else {
                i += 1
                continue
            }
            let over = s.records > maxRecords
            let expired = n.updated < cutoff && n.entries.values.allSatisfy { $0.state.isFinal }
            if over || expired {
                s.records -= n.entries.count
                s.notifs[id] = nil
                i += 1
                continue
            }
            if n.updated < cutoff {
                kept.append(id)
                i += 1
                continue
            }  // still pending: keep, look further
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
