import Foundation
import NIOConcurrencyHelpers
import PushgateCore
import TestSupport
import XCTest

@testable import PushDispatch

/// The status page's "oldest pending" (`RecentActivity`): a delivery is tracked from its acceptance
/// to its end whichever of the two events is told first, and never left pending.
final class RecentActivityTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_000_000)
    let lifecycle = DeliveryLifecycle(policy: RetryPolicy(baseDelay: 2, maxDelay: 60, jitter: 0)) { job, error in
        LogEntry(notifID: job.accepted.notifID, platform: job.platform.name, token: job.target.reportedToken, message: "m", error: error)
    }

    func job(_ id: UInt64, at t: Date) -> DeliveryJob {
        let a = AcceptedNotification(notifID: "n-\(id)", notification: PushNotification(platform: .ios, tokens: ["tok"]), prepared: nil)
        return DeliveryJob(id: id, messageID: "m-\(id)", target: .token("tok"), accepted: a, maxAttempts: 1, now: t)
    }

    /// The `accepted` and `finished` events of a delivery refused by the provider without a network call.
    func events(_ id: UInt64, at t: Date) -> (accepted: DeliveryEvent, finished: DeliveryEvent) {
        let accepted = lifecycle.step(job(id, at: t), .accepted, now: t)
        let failed = lifecycle.step(accepted.job, .attempted(.tokenDead(reason: "BadDeviceToken", status: nil), started: t), now: t)
        var a: DeliveryEvent?
        var f: DeliveryEvent?
        for case .emit(let e) in accepted.effects { if case .accepted = e { a = e } }
        for case .emit(let e) in failed.effects { if case .finished = e { f = e } }
        return (a!, f!)
    }

    /// Accepted then finished, and finished then accepted (the worker's outcome told before the
    /// submitting task's acceptance): both leave nothing pending.
    func testEitherOrderLeavesNothingPending() {
        let clock = NIOLockedValueBox(t0)
        let activity = RecentActivity(now: { clock.withLockedValue { $0 } })

        let first = events(1, at: t0)
        activity.record(first.accepted)
        XCTAssertEqual(activity.snapshot.pendingTracked, 1)
        XCTAssertEqual(activity.snapshot.oldestPendingSince, t0)
        activity.record(first.finished)
        XCTAssertEqual(activity.snapshot.pendingTracked, 0, "accepted, then finished")
        XCTAssertNil(activity.snapshot.oldestPendingSince)

        clock.withLockedValue { $0 = t0 + 1 }
        let second = events(2, at: t0 + 1)
        activity.record(second.finished)
        XCTAssertEqual(activity.snapshot.pendingTracked, 0)
        activity.record(second.accepted)
        XCTAssertEqual(activity.snapshot.pendingTracked, 0, "finished, then accepted")
        XCTAssertNil(activity.snapshot.oldestPendingSince, "nothing pending: no oldest age")

        // Several of one second, interleaved: one still pending is the only one tracked.
        clock.withLockedValue { $0 = t0 + 2 }
        let (a, b, c) = (events(3, at: t0 + 2), events(4, at: t0 + 2), events(5, at: t0 + 2))
        activity.record(a.finished)
        activity.record(b.accepted)
        activity.record(a.accepted)
        activity.record(c.finished)
        activity.record(c.accepted)
        XCTAssertEqual(activity.snapshot.pendingTracked, 1)
        XCTAssertEqual(activity.snapshot.oldestPendingSince, t0 + 2)
        activity.record(b.finished)
        XCTAssertEqual(activity.snapshot.pendingTracked, 0)
        XCTAssertNil(activity.snapshot.oldestPendingSince)
        // Each delivery still counted once as failed.
        let failed = activity.snapshot.buckets[.ios]?.reduce(0) { $0 + $1.failed }
        XCTAssertEqual(failed, 5)
    }

    /// A finish no acceptance follows (a delivery resumed from a store, or queued by another gateway
    /// on a shared queue) is kept for `earlyFinishWindow` seconds at most: it does not hide a later
    /// delivery of that second, and one accepted before this process began is not kept at all.
    func testUnmatchedFinishesAreNotKept() {
        let clock = NIOLockedValueBox(t0)
        let activity = RecentActivity(now: { clock.withLockedValue { $0 } })

        activity.record(events(1, at: t0 - 30).finished)  // resumed: accepted before the start
        activity.record(events(2, at: t0 - 30).accepted)
        XCTAssertEqual(activity.snapshot.pendingTracked, 1, "a resumed delivery's finish cancels nothing")
        activity.record(events(2, at: t0 - 30).finished)
        XCTAssertEqual(activity.snapshot.pendingTracked, 0)

        activity.record(events(3, at: t0).finished)  // from another gateway
        clock.withLockedValue { $0 = t0 + Double(RecentActivity.earlyFinishWindow) + 1 }
        activity.record(events(4, at: t0 + Double(RecentActivity.earlyFinishWindow) + 1).finished)  // prunes
        activity.record(events(5, at: t0).accepted)  // a late acceptance of that second
        XCTAssertEqual(activity.snapshot.pendingTracked, 1, "the stale early finish was forgotten")
    }

    /// Holds `enqueue` until the worker has completed every job it queued: the dispatcher's worker
    /// then finishes the delivery before the submitting task tells its acceptance, the order a fast
    /// refusal (an APNs token that is not hex) can take, here forced.
    final class WorkerFirstQueue: QueueDriver {
        let inner = MemoryQueue(capacity: 100)
        let completed = NIOLockedValueBox<(done: Set<UInt64>, waiting: [(Set<UInt64>, CheckedContinuation<Void, Never>)])>(([], []))

        func enqueue(_ jobs: [DeliveryJob]) async throws -> [EnqueueDisposition] {
            let d = try await inner.enqueue(jobs)
            let ids = Set(jobs.map(\.id))
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = completed.withLockedValue { s -> Bool in
                    if ids.isSubset(of: s.done) { return true }
                    s.waiting.append((ids, c))
                    return false
                }
                if now { c.resume() }
            }
            return d
        }
        func next(platform: Platform) async -> DeliveryJob? { await inner.next(platform: platform) }
        func reschedule(_ job: DeliveryJob) async { await inner.reschedule(job) }
        func complete(_ job: DeliveryJob, outcome: FinalOutcome) async {
            await inner.complete(job, outcome: outcome)
            let ready = completed.withLockedValue { s -> [CheckedContinuation<Void, Never>] in
                s.done.insert(job.id)
                let done = s.done
                let ready = s.waiting.filter { $0.0.isSubset(of: done) }.map(\.1)
                s.waiting.removeAll { $0.0.isSubset(of: done) }
                return ready
            }
            for c in ready { c.resume() }
        }
        var pendingCount: Int { inner.pendingCount }
        var capacity: Int { inner.capacity }
        func shutdown() { inner.shutdown() }
    }

    /// Refuses every token at once, without a network call (as APNs does a token that is not hex).
    final class RefusingProvider: PushProvider {
        struct Prepared: PreparedPush {}
        let platform: Platform = .ios
        func prepare(_ notification: PushNotification) throws -> any PreparedPush { Prepared() }
        func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
            .tokenDead(reason: "BadDeviceToken", status: nil)
        }
        func shutdown() async {}
    }

    /// Through the dispatcher: the delivery is finished by the worker before `submit` tells its
    /// acceptance, and the status page's tracking is left empty.
    func testDispatcherWorkerFinishingFirstLeavesNothingPending() async throws {
        let queue = WorkerFirstQueue()
        let dispatcher = Dispatcher(providers: [ProviderSlot(provider: RefusingProvider(), concurrency: 2)], queue: queue)
        let running = Task { await dispatcher.run() }
        for i in 0..<3 {
            _ = try await dispatcher.submit(PushRequest(notifications: [PushNotification(platform: .ios, tokens: ["fcm-tok-\(i)"])]), sync: false)
        }
        // A worker completes a job in the queue (which lets `submit` return here) before it tells the
        // sinks the delivery finished: wait for the three finishes to be told, then for nothing to be
        // left pending (the old code kept one acceptance pending for ever).
        _ = await eventually {
            dispatcher.stats.snapshot.counts(.ios).pushError == 3 && dispatcher.activity.snapshot.pendingTracked == 0
        }
        let snap = dispatcher.activity.snapshot
        XCTAssertEqual(dispatcher.queue.pendingCount, 0)
        XCTAssertEqual(snap.pendingTracked, 0, "finished before its acceptance was told: not pending")
        XCTAssertNil(snap.oldestPendingSince)
        XCTAssertEqual(dispatcher.stats.snapshot.counts(.ios).pushError, 3)
        dispatcher.shutdown()
        await running.value
    }
}
