import Foundation
import PushgateCore

/// What cancelling a notification came to (`DELETE /api/push/{notif_id}`).
public struct CancelSummary: Sendable, Equatable {
    /// Deliveries ended by this cancel (never sent).
    public var cancelled = 0
    /// Deliveries delivered before it.
    public var alreadySent = 0
    /// Deliveries over before it otherwise (failed, duplicate, coalesced, quiet_hours, or cancelled earlier).
    public var alreadyOver = 0
    /// Deliveries a worker holds now (here, or in another gateway sharing the store): they are sent
    /// or fail as usual; cancel does not touch them.
    public var inFlight = 0

    public init() {}
}

extension Dispatcher {
    /// Cancels every delivery of `notifID` (of `app`; nil: any app) not yet sent: the queue takes
    /// them out (a durable store in one transaction) and each ends `skipped(cancelled)`, told to the
    /// sinks like any finished delivery (the status record, the `cancelled` event, the metric). A
    /// delivery a worker holds is left to end as it ends: never both sent and cancelled.
    /// Nil when the notification is unknown (to this app), as the status route answers 404.
    public func cancel(notifID: String, app: String?) async throws -> CancelSummary? {
        guard let source = statusSource else { return nil }
        func records() async throws -> [DeliveryStatusRecord]? {
            guard var r = try await source.deliveryStatus(notifID: notifID) else { return nil }
            if let app { r.removeAll { $0.app != app } }
            return r
        }
        guard let before = try await records(), !before.isEmpty else { return nil }
        let taken = try await queue.cancel(notifID: notifID, app: app)
        let t = now()
        for job in taken.jobs {
            // The queue has taken the job out already: only the events are told (no `complete`).
            for case .emit(let e) in lifecycle.step(job, .skipped(.cancelled), now: t).effects { publish(e) }
        }
        var summary = CancelSummary()
        summary.cancelled = taken.jobs.count
        let after = try await records() ?? []
        var pending = 0
        var cancelledNow = 0
        for r in after {
            switch r.state {
            case .delivered: summary.alreadySent += 1
            case .failed, .duplicate, .coalesced, .quietHours: summary.alreadyOver += 1
            case .cancelled: cancelledNow += 1
            case .queued, .retrying, .scheduled: pending += 1
            }
        }
        // Cancelled before this call: over already.
        summary.alreadyOver += max(0, cancelledNow - summary.cancelled)
        summary.inFlight = taken.inFlight ?? pending
        return summary
    }
}
