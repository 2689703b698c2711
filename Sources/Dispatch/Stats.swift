import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// gorush's `/api/stat/app` counters, per platform (and its `/metrics` series).
///
/// - `totalCount`: gorush's `counts` of every accepted request, summed (`total_count`).
/// - `submittedTasks` / `successTasks` / `failureTasks`: deliveries queued, and queued deliveries that
///   ended delivered / failed (gorush counts queue tasks, one per notification; a Pushgate task is one
///   delivery, the unit it queues and retries).
/// - per platform `pushSuccess` / `pushError`: deliveries that ended delivered / failed, including those
///   refused before sending (payload too large); once per delivery, not per attempt.
public struct StatsSnapshot: Sendable, Codable, Equatable {
    public struct PlatformCounts: Sendable, Codable, Equatable {
        public var pushSuccess: Int64 = 0
        public var pushError: Int64 = 0
        enum CodingKeys: String, CodingKey {
            case pushSuccess = "push_success"
            case pushError = "push_error"
        }
        public init() {}

        mutating func count(delivered: Bool) {
            if delivered { pushSuccess.addSaturating(1) } else { pushError.addSaturating(1) }
        }
    }
    public var totalCount: Int64 = 0
    public var submittedTasks: Int64 = 0
    public var successTasks: Int64 = 0
    public var failureTasks: Int64 = 0
    public var retries: Int64 = 0
    /// Deliveries accepted to wait for a later time (`send_at`, `delay_seconds`, `deliver_between`).
    public var scheduled: Int64 = 0
    /// Deliveries cancelled before they were sent.
    public var cancelled: Int64 = 0
    public var platforms: [String: PlatformCounts] = [:]
    /// The same per-platform counts per app (`/api/stat/app`'s `apps`, the `app` label of the metrics).
    public var apps: [String: [String: PlatformCounts]] = [:]

    public init() {}

    public func counts(_ p: Platform) -> PlatformCounts { platforms[p.name] ?? PlatformCounts() }
    public func counts(_ p: Platform, app: String) -> PlatformCounts { apps[app]?[p.name] ?? PlatformCounts() }
}

extension Int64 {
    /// `a + b` held at Int64's bounds. Counters start from, and are reset to, totals read from a
    /// store other processes write too (`Stats.rebase`): `+` past Int64.max there would trap.
    package static func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
        let (r, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? .max : .min) : r
    }

    package mutating func addSaturating(_ b: Int64) { self = .saturatingSum(self, b) }
}

/// Thread-safe statistics, fed by the delivery event stream. Keeps the increments not yet saved
/// apart, so a durable engine stores increments (`takeUnsaved`) instead of diffing snapshots.
public final class Stats: DeliveryEventSink {
    private struct Counters {
        var total: StatsSnapshot
        var unsaved = StatsSnapshot()
    }
    private let box: NIOLockedValueBox<Counters>

    public init(initial: StatsSnapshot = StatsSnapshot()) { box = NIOLockedValueBox(Counters(total: initial)) }

    public var snapshot: StatsSnapshot { box.withLockedValue { $0.total } }

    /// The increments since the last call.
    public func takeUnsaved() -> StatsSnapshot {
        box.withLockedValue { c in
            defer { c.unsaved = StatsSnapshot() }
            return c.unsaved
        }
    }

    /// Sets the totals from the counters a shared store holds (every process's saved increments):
    /// `compute` gets the increments not taken yet and returns the new totals, under the same lock
    /// as the counting, so nothing counted meanwhile is lost.
    public func rebase(_ compute: (_ unsaved: StatsSnapshot) -> StatsSnapshot) {
        box.withLockedValue { c in c.total = compute(c.unsaved) }
    }

    private func change(_ body: (inout StatsSnapshot) -> Void) {
        box.withLockedValue { c in
            body(&c.total)
            body(&c.unsaved)
        }
    }

    public func accepted(count: Int) { change { $0.totalCount.addSaturating(Int64(count)) } }

    public func submitted(jobs: Int) { change { $0.submittedTasks.addSaturating(Int64(jobs)) } }

    public func retried() { change { $0.retries.addSaturating(1) } }

    /// One delivery ended. `queued`: it was a queued job (a task, in gorush's terms); a delivery refused
    /// before sending counts as the platform's push error but is no task.
    public func finished(platform: Platform, delivered: Bool, queued: Bool = true, app: String = AppID.defaultApp) {
        let name = platform.name
        change { s in
            // In place: one hash lookup per dictionary level (a read then a write would be two).
            s.platforms[name, default: .init()].count(delivered: delivered)
            s.apps[app, default: [:]][name, default: .init()].count(delivered: delivered)
            if queued {
                if delivered { s.successTasks.addSaturating(1) } else { s.failureTasks.addSaturating(1) }
            }
        }
    }

    public func record(_ event: borrowing DeliveryEvent) {
        switch event {
        case .submitted(let counts, let queued):
            change { s in
                s.totalCount.addSaturating(Int64(counts))
                s.submittedTasks.addSaturating(Int64(queued))
            }
        case .retrying:
            retried()
        case .accepted(let job) where job.isScheduled:
            change { $0.scheduled.addSaturating(1) }
        case .finished(_, .skipped(.cancelled), _, _):
            change { $0.cancelled.addSaturating(1) }
        case .finished(let job, let outcome, let phase, _) where phase != .notServed && phase != .skipped:
            finished(platform: job.platform, delivered: outcome.isDelivered, queued: phase == .afterSending, app: job.accepted.app)
        default:
            break
        }
    }
}
