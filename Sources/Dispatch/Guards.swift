import Foundation
import PushgateCore

/// What the queue did with one job handed to `enqueue` (docs/delivery-controls.md).
public enum EnqueueDisposition: Sendable, Equatable {
    /// Queued, to be sent from `notBefore` (later than now when a coalescing window holds it).
    case queued(notBefore: Date)
    /// Not queued: a notification with the same app, platform, token and `dedup_key` was queued
    /// inside the TTL. The queue stored it as `duplicate` (durable engines) and does not count it.
    case duplicate
}

/// The coalescing state of one (app, platform, token, collapse id): when the current window ends
/// and which job waits for that moment.
public struct CoalesceWindow: Sendable, Equatable {
    /// Seconds since 1970: no push of this key goes out before it, except the one waiting for it.
    public var end: Double
    /// The job (the latest push) that goes out at `end`; nil when none waits.
    public var held: UInt64?
    /// The window's length in seconds.
    public var seconds: Double

    public init(end: Double, held: UInt64?, seconds: Double) {
        self.end = end
        self.held = held
        self.seconds = seconds
    }

    /// When the state no longer changes what happens to a new push (it can be forgotten).
    public var expires: Double { held == nil ? end : end + seconds }
}

/// Coalesced wake-ups as a pure function (no clock, no I/O): both engines run it, the memory
/// queue on its dictionaries and the SQL stores inside the insert transaction.
///
/// The first push of a key goes out at once and opens a window of `seconds`. Pushes arriving inside
/// the window wait for its end, each replacing the one waiting before it (that one ends
/// `coalesced`). The push sent at the end opens the next window, so a token gets at most one push
/// per window: two at most for any burst shorter than a window.
public enum Coalescing {
    public struct Arrival: Sendable, Equatable {
        /// When the new push may go out (`now` = at once).
        public var notBefore: Double
        /// The job it replaces (to end as `coalesced`).
        public var replaced: UInt64?
        /// The key's state after the arrival.
        public var window: CoalesceWindow
    }

    public static func arrive(_ w: CoalesceWindow?, now: Double, seconds: Double, job: UInt64) -> Arrival {
        guard let w else { return Arrival(notBefore: now, replaced: nil, window: CoalesceWindow(end: now + seconds, held: nil, seconds: seconds)) }
        if now < w.end {
            // Inside the window: wait for its end, replacing whatever waited for it.
            return Arrival(notBefore: w.end, replaced: w.held, window: CoalesceWindow(end: w.end, held: job, seconds: w.seconds))
        }
        if w.held != nil {
            // The push that waited went out at `w.end` and opened the next window.
            let next = w.end + w.seconds
            if now < next {
                return Arrival(notBefore: next, replaced: nil, window: CoalesceWindow(end: next, held: job, seconds: w.seconds))
            }
        }
        return Arrival(notBefore: now, replaced: nil, window: CoalesceWindow(end: now + seconds, held: nil, seconds: seconds))
    }
}

/// Where a job's dedup and coalescing keys come from.
extension DeliveryJob {
    /// The `dedup_key` of its notification (nil: no dedup).
    public var dedupKey: String? { accepted.notification.dedupKey }

    /// The coalescing window length, when its notification coalesces (`coalesce_seconds` with a
    /// `collapse_id`; the platform default was written into the notification at submit).
    public var coalesceSeconds: Double? {
        let n = accepted.notification
        guard let s = n.coalesceSeconds, s > 0, let c = n.collapseID, !c.isEmpty else { return nil }
        return Double(s)
    }

    /// A job held for the end of a coalescing window (the only kind that can be replaced).
    public var isHeldForCoalescing: Bool { coalesceSeconds != nil && attempts == 0 && notBefore > enqueuedAt }
}

/// The memory engine's dedup claims and coalescing windows (kept under the queue's lock). Entries
/// are forgotten once they can no longer matter; at most `maxEntries` of each are kept (the oldest
/// claims are dropped first).
struct MemoryGuards {
    struct DedupKey: Hashable {
        var app: String
        var platform: Platform
        var target: PushTarget
        var key: String
    }
    struct CoalesceKey: Hashable {
        var app: String
        var platform: Platform
        var target: PushTarget
        var collapseID: String
    }

    var dedup: [DedupKey: Double] = [:]
    var windows: [CoalesceKey: CoalesceWindow] = [:]
    /// Jobs replaced in their window, waiting in the queue to be ended as `coalesced`.
    var replaced: Set<UInt64> = []
    var lastPrune: Double = 0
    let ttl: Double
    let maxEntries: Int

    init(ttl: Double, maxEntries: Int = 1_000_000) {
        self.ttl = ttl
        self.maxEntries = maxEntries
    }

    /// Applies dedup and coalescing to jobs about to be queued; `jobs` get their `notBefore`.
    mutating func admit(_ jobs: inout [DeliveryJob], now t: Date) -> [EnqueueDisposition] {
        let now = t.timeIntervalSince1970
        if now - lastPrune > 10 || dedup.count > maxEntries || windows.count > maxEntries { prune(now: now) }
        var out: [EnqueueDisposition] = []
        out.reserveCapacity(jobs.count)
        for i in jobs.indices {
            let job = jobs[i]
            if let key = job.dedupKey {
                let k = DedupKey(app: job.accepted.app, platform: job.platform, target: job.target, key: key)
                if let until = dedup[k], until > now {
                    out.append(.duplicate)
                    continue
                }
                dedup[k] = now + ttl
            }
            if let seconds = job.coalesceSeconds, let collapse = job.accepted.notification.collapseID {
                let k = CoalesceKey(app: job.accepted.app, platform: job.platform, target: job.target, collapseID: collapse)
                let a = Coalescing.arrive(windows[k], now: now, seconds: seconds, job: job.id)
                windows[k] = a.window
                if let r = a.replaced { replaced.insert(r) }
                if a.notBefore > now { jobs[i].notBefore = Date(timeIntervalSince1970: a.notBefore) }
            }
            out.append(.queued(notBefore: jobs[i].notBefore))
        }
        return out
    }

    /// True (once) when `job` was replaced in its window.
    mutating func takeReplaced(_ job: DeliveryJob) -> Bool { replaced.remove(job.id) != nil }

    mutating func prune(now: Double) {
        lastPrune = now
        dedup = dedup.filter { $0.value > now }
        windows = windows.filter { $0.value.expires > now }
        if dedup.count > maxEntries {
            // Over the cap with every claim still live: drop the ones closest to expiry.
            let keep = dedup.sorted { $0.value > $1.value }.prefix(maxEntries)
            dedup = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
        }
        if windows.count > maxEntries {
            let keep = windows.sorted { $0.value.expires > $1.value.expires }.prefix(maxEntries)
            windows = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
        }
    }
}
