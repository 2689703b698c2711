import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// The last minutes of the delivery event stream, for the status page (`/ui`, `/api/stat/live`):
/// per provider and 5-second bucket, the provider's answers by class and the deliveries that ended
/// delivered or failed; the dead tokens seen last; and when the deliveries still pending in this
/// process were accepted (the age of the oldest). Fixed-size: a ring of buckets, a short list of
/// dead tokens, and one counter per acceptance second of pending deliveries.
///
/// A delivery's `accepted` and `finished` events may come in either order: the job is visible to
/// the workers once the queue holds it, before the submitting task publishes its acceptance, and a
/// provider that refuses it without a network call (an APNs token that is not hex) finishes it
/// first. A finish that finds no pending delivery of its acceptance second is kept for a while
/// (`earlyFinishWindow`) and cancels the acceptance that follows it, so a delivery is never left
/// pending; one that no acceptance follows (resumed from a store, or queued by another gateway on a
/// shared queue) is forgotten after that window.
public final class RecentActivity: DeliveryEventSink {
    /// Seconds per bucket, and buckets kept (10 minutes).
    public static let bucketSeconds = 5
    public static let bucketCount = 120
    /// Dead tokens listed (the newest first); their count since start is kept apart.
    public static let keptDeadTokens = 20
    /// Provider answer classes (`SendOutcome.className`), then the two ends of a delivery.
    public static let classes = SendOutcome.classNames
    /// Seconds a finish that came before its acceptance waits for it (the acceptance is published
    /// as soon as the queue's `enqueue` returns: well within this).
    public static let earlyFinishWindow: Int64 = 600

    /// One bucket's counts of one platform.
    public struct Counts: Sendable, Equatable {
        /// Provider answers by class, in `RecentActivity.classes` order.
        public var answers = [Int](repeating: 0, count: RecentActivity.classes.count)
        /// Deliveries that ended delivered / failed (those refused before sending included).
        public var delivered = 0
        public var failed = 0
    }

    /// A token a provider called dead. `token` is as the failure log entry has it (masked per
    /// `log.hide_token`).
    public struct DeadToken: Sendable, Equatable {
        public var at: Date
        public var app: String
        public var platform: Platform
        public var token: String
        public var reason: String
    }

    /// What `/api/stat/live` reads.
    public struct Snapshot: Sendable {
        /// The start of the oldest bucket (epoch seconds, a multiple of `bucketSeconds`); buckets
        /// follow in order, the last one being the current (partial) one.
        public var firstBucketStart: Int
        /// Per platform, `bucketCount` buckets, oldest first.
        public var buckets: [Platform: [Counts]]
        /// Provider answers by class since start, per platform.
        public var answersTotal: [Platform: [Int64]]
        public var deadTokensTotal: Int64
        public var recentDeadTokens: [DeadToken]
        /// When the oldest delivery still pending in this process was accepted (nil: none).
        public var oldestPendingSince: Date?
        /// Deliveries accepted by this process and not finished here.
        public var pendingTracked: Int
    }

    private struct State {
        /// Columns per platform: one per tracked platform, and a last one for any other.
        let platformCount: Int
        /// Bucket index (epoch seconds / bucketSeconds) of each ring slot, and its counts per platform.
        var slotIndex = [Int](repeating: -1, count: RecentActivity.bucketCount)
        var slots: [[Counts]]
        var answersTotal: [[Int64]]

        init(platformCount: Int) {
            self.platformCount = platformCount
            slots = [[Counts]](repeating: [Counts](repeating: Counts(), count: platformCount), count: RecentActivity.bucketCount)
            answersTotal = [[Int64]](repeating: [Int64](repeating: 0, count: RecentActivity.classes.count), count: platformCount)
        }
        var deadTotal: Int64 = 0
        var dead: [DeadToken] = []
        /// Acceptance second -> deliveries accepted then and not finished.
        var pendingSince: [Int64: Int] = [:]
        var pendingTracked = 0
        /// Acceptance second -> finishes seen while no delivery accepted then was pending: each
        /// cancels one later acceptance of that second (at most `earlyFinishWindow` seconds kept).
        var finishedFirst: [Int64: Int] = [:]
        /// The second `finishedFirst` was last pruned.
        var lastPrune: Int64 = 0

        /// Forgets the early finishes no acceptance came for within the window (once a second at most:
        /// `finishedFirst` holds at most one key per second of the window).
        mutating func pruneEarlyFinishes(now: Int64) {
            guard now != lastPrune, !finishedFirst.isEmpty else { return }
            lastPrune = now
            finishedFirst = finishedFirst.filter { $0.key >= now - RecentActivity.earlyFinishWindow }
        }

        mutating func slot(_ index: Int) -> Int {
            let s = index % RecentActivity.bucketCount
            if slotIndex[s] != index {
                slotIndex[s] = index
                slots[s] = [Counts](repeating: Counts(), count: platformCount)
            }
            return s
        }
    }

    private let state: NIOLockedValueBox<State>
    private let now: @Sendable () -> Date
    /// The platforms tracked, in the snapshot's order, and each one's column.
    private let platforms: [Platform]
    private let columns: [Platform: Int]

    /// When this process began tracking: a delivery accepted before then (resumed from a store) is
    /// never accepted here, so its finish is not kept for an acceptance.
    private let startSecond: Int64

    /// `platforms`: those tracked (default: every declared one); a delivery of another is counted
    /// in a column of its own that no snapshot shows.
    public init(platforms: [Platform] = Platform.registered, now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
        self.platforms = platforms
        columns = Dictionary(platforms.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        state = NIOLockedValueBox(State(platformCount: platforms.count + 1))
        startSecond = Self.second(now())
    }

    private func platformIndex(_ p: Platform) -> Int { columns[p] ?? platforms.count }
    private static func bucket(_ d: Date) -> Int { Int(max(0, d.timeIntervalSince1970)) / bucketSeconds }
    private static func second(_ d: Date) -> Int64 { Int64(max(0, min(d.timeIntervalSince1970, 1e12))) }

    public func record(_ event: borrowing DeliveryEvent) {
        switch event {
        case .accepted(let job):
            let second = Self.second(job.enqueuedAt)
            state.withLockedValue { s in
                // Finished before this acceptance was told: nothing left pending.
                if let n = s.finishedFirst[second] {
                    s.finishedFirst[second] = n > 1 ? n - 1 : nil
                    return
                }
                s.pendingSince[second, default: 0] += 1
                s.pendingTracked += 1
            }
        case .attempted(let job, let outcome, _, let ended):
            let c = outcome.classIndex
            let p = platformIndex(job.platform)
            state.withLockedValue { s in
                let slot = s.slot(Self.bucket(ended))
                s.slots[slot][p].answers[c] += 1
                s.answersTotal[p][c] += 1
            }
        case .finished(let job, let outcome, let phase, let failure):
            let p = platformIndex(job.platform)
            let second = Self.second(job.enqueuedAt)
            let t = now()
            let start = startSecond
            state.withLockedValue { s in
                s.pruneEarlyFinishes(now: Self.second(t))
                if let n = s.pendingSince[second] {
                    s.pendingSince[second] = n > 1 ? n - 1 : nil
                    s.pendingTracked = max(0, s.pendingTracked - 1)
                } else if second >= start, second >= Self.second(t) - Self.earlyFinishWindow {
                    // Its acceptance is still to be told (or it was queued by another gateway).
                    // One accepted before this process began (resumed from a store) is not counted.
                    s.finishedFirst[second, default: 0] += 1
                }
                guard phase == .afterSending || phase == .beforeSending else { return }
                let slot = s.slot(Self.bucket(t))
                switch outcome {
                case .delivered: s.slots[slot][p].delivered += 1
                case .failed(let reason, let tokenDead):
                    s.slots[slot][p].failed += 1
                    if tokenDead {
                        s.deadTotal += 1
                        s.dead.insert(
                            DeadToken(
                                at: t, app: job.accepted.app, platform: job.platform, token: failure?.token ?? "",
                                reason: String(reason.prefix(256))), at: 0)
                        if s.dead.count > Self.keptDeadTokens { s.dead.removeLast() }
                    }
                case .skipped: break
                }
            }
        case .submitted, .retrying:
            break
        }
    }

    public var snapshot: Snapshot {
        let current = Self.bucket(now())
        let first = current - Self.bucketCount + 1
        return state.withLockedValue { s in
            var buckets: [Platform: [Counts]] = [:]
            var totals: [Platform: [Int64]] = [:]
            for (pi, p) in platforms.enumerated() {
                var list: [Counts] = []
                list.reserveCapacity(Self.bucketCount)
                for index in first...current {
                    let slot = index % Self.bucketCount
                    list.append(s.slotIndex[slot] == index ? s.slots[slot][pi] : Counts())
                }
                buckets[p] = list
                totals[p] = s.answersTotal[pi]
            }
            let oldest = s.pendingSince.keys.min().map { Date(timeIntervalSince1970: Double($0)) }
            return Snapshot(
                firstBucketStart: first * Self.bucketSeconds, buckets: buckets, answersTotal: totals, deadTokensTotal: s.deadTotal,
                recentDeadTokens: s.dead, oldestPendingSince: oldest, pendingTracked: s.pendingTracked)
        }
    }
}
