import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// One app's providers, built from its own configuration sections (its own credentials, token caches
/// and connection pools), and its share of the queue. Replaced as a whole when a reload changes the
/// app; the old one is closed once the deliveries it is sending are over (`inFlight`).
public final class AppProviders: Sendable {
    public let id: String
    public let slots: [Platform: ProviderSlot]
    /// Platforms answered with a failed entry, and why (filled in for every platform not served).
    public let unavailable: [Platform: String]
    /// `apps[].max_pending`: deliveries of this app accepted and not finished; 0 = only the queue's own
    /// capacity. A reload may change it without rebuilding the providers.
    public var maxPending: Int {
        get { limit.withLockedValue { $0 } }
        set { limit.withLockedValue { $0 = max(0, newValue) } }
    }
    private let limit: NIOLockedValueBox<Int>
    /// Closes what the providers opened (pools, token refreshers).
    public let shutdown: @Sendable () async -> Void
    private let sending = NIOLockedValueBox<Int>(0)

    public init(
        id: String, slots: [ProviderSlot], unavailable: [Platform: String] = [:], maxPending: Int = 0,
        shutdown: @escaping @Sendable () async -> Void = {}
    ) {
        self.id = id
        var s: [Platform: ProviderSlot] = [:]
        for slot in slots { s[slot.provider.platform] = slot }
        self.slots = s
        var u = unavailable
        for p in Platform.registered where s[p] == nil && u[p] == nil {
            u[p] = id == AppID.defaultApp ? "platform \(p.name) is not enabled" : "platform \(p.name) is not enabled for app \(id)"
        }
        self.unavailable = u
        self.limit = NIOLockedValueBox(max(0, maxPending))
        self.shutdown = shutdown
    }

    /// Deliveries being sent with these providers right now.
    public var inFlight: Int { sending.withLockedValue { $0 } }
    func enter() { sending.withLockedValue { $0 += 1 } }
    func leave() { sending.withLockedValue { $0 -= 1 } }

    /// Waits (up to `timeout` seconds) until nothing is sent with these providers, then closes them.
    public func retire(timeout: Double) async {
        _ = await waitForZero(timeout: timeout) { inFlight }
        await shutdown()
    }
}

/// Deliveries accepted per app and not yet seen finished, for `apps[].max_pending`. Counted by this
/// process (accepted here +, finished here -) and held to the queue's own pending count, which a
/// durable queue refreshes from its store: a delivery another gateway finished, or one recovered after
/// a restart, cannot leave an app's share stuck full.
final class AppPendingCounts: Sendable {
    private let box = NIOLockedValueBox<[String: Int]>([:])

    /// Adds `n` for `app` when that stays within `limit` (0: no limit), or when the app has nothing
    /// pending (a request larger than the whole share is taken alone, never refused for ever); else
    /// returns the count there is.
    func reserve(_ app: String, _ n: Int, limit: Int, queuePending: Int) -> Int? {
        box.withLockedValue { counts in
            let current = min(counts[app] ?? 0, max(0, queuePending))
            if limit > 0, n > 0, current > 0, current + n > limit { return current }
            counts[app] = current + n
            return nil
        }
    }

    func release(_ app: String, _ n: Int = 1) {
        box.withLockedValue { counts in
            guard let c = counts[app] else { return }
            counts[app] = c - n > 0 ? c - n : nil
        }
    }

    func count(_ app: String, queuePending: Int) -> Int {
        box.withLockedValue { min($0[app] ?? 0, max(0, queuePending)) }
    }
}
