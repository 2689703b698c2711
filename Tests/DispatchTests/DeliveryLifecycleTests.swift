import Foundation
import PushgateCore
import XCTest

@testable import PushDispatch

/// The delivery state machine: plain unit tests, injected time, no sleeps, no queue.
final class DeliveryLifecycleTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_000_000)
    let lifecycle = DeliveryLifecycle(policy: RetryPolicy(baseDelay: 2, maxDelay: 60, jitter: 0)) { job, error in
        LogEntry(notifID: job.accepted.notifID, platform: job.platform.name, token: job.target.reportedToken, message: "m", error: error)
    }

    func job(maxAttempts: Int = 3, expiration: Int64? = nil, waiter: UInt64? = nil) -> DeliveryJob {
        var n = PushNotification(platform: .ios, tokens: ["tok"])
        n.expiration = expiration
        let a = AcceptedNotification(notifID: "n-1", notification: n, prepared: nil)
        return DeliveryJob(id: 7, messageID: "m-7", target: .token("tok"), accepted: a, maxAttempts: maxAttempts, now: t0, waiterID: waiter)
    }

    /// The effects as short names, in order.
    func names(_ t: DeliveryTransition) -> [String] {
        t.effects.map { e in
            switch e {
            case .enqueue: return "enqueue"
            case .recordFailedBeforeSending: return "record"
            case .reschedule: return "reschedule"
            case .complete(.delivered): return "complete:delivered"
            case .complete(.failed): return "complete:failed"
            case .complete(.skipped(let why)): return "complete:\(why.rawValue)"
            case .release: return "release"
            case .emit(.submitted): return "submitted"
            case .emit(.accepted): return "accepted"
            case .emit(.attempted): return "attempted"
            case .emit(.retrying): return "retrying"
            case .emit(.finished(_, _, let phase, _)): return "finished:\(phase)"
            }
        }
    }

    func finished(_ t: DeliveryTransition) -> (FinalOutcome, FinishPhase, LogEntry?)? {
        for case .emit(.finished(_, let o, let phase, let failure)) in t.effects { return (o, phase, failure) }
        return nil
    }

    func testAcceptedIsQueuedEnqueuedThenTold() {
        let t = lifecycle.step(job(), .accepted, now: t0)
        XCTAssertEqual(t.job.state, .queued)
        XCTAssertEqual(names(t), ["enqueue", "accepted"])
    }

    func testDeliveredOnFirstAttemptCompletesThenTells() {
        let t = lifecycle.step(job(), .attempted(.delivered(providerID: "apns-1"), started: t0), now: t0 + 0.2)
        XCTAssertEqual(t.job.attempts, 1)
        XCTAssertEqual(t.job.state, .delivered(providerID: "apns-1"))
        XCTAssertEqual(names(t), ["attempted", "complete:delivered", "finished:afterSending"])
        XCTAssertNil(finished(t)?.2, "no failure entry for a delivery")
        guard case .emit(.attempted(_, _, let started, let ended)) = t.effects[0] else { return XCTFail("attempted first") }
        XCTAssertEqual(ended.timeIntervalSince(started), 0.2, accuracy: 1e-6)
    }

    func testTransientOutcomeRetriesWithBackoffAndIsToldBeforeRescheduling() {
        let now = t0 + 1
        let t = lifecycle.step(job(), .attempted(.transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil), started: t0), now: now)
        XCTAssertEqual(t.job.attempts, 1)
        XCTAssertEqual(t.job.notBefore, now + 2, "baseDelay * 2^0, no jitter")
        XCTAssertEqual(t.job.lastError, "ServiceUnavailable")
        XCTAssertEqual(t.job.state, .retrying(nextTry: now + 2, lastError: "ServiceUnavailable"))
        XCTAssertEqual(names(t), ["attempted", "retrying", "reschedule"], "sinks hear of the retry before a worker can take the job again")

        let second = lifecycle.step(
            t.job, .attempted(.transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil), started: now + 2), now: now + 2)
        XCTAssertEqual(second.job.attempts, 2)
        XCTAssertEqual(second.job.notBefore, now + 2 + 4, "doubled")
    }

    func testRetryAfterIsAFloor() {
        let t = lifecycle.step(job(), .attempted(.transient(reason: "TooManyRequests", status: 429, retryAfter: 30), started: t0), now: t0)
        XCTAssertEqual(t.job.notBefore, t0 + 30)
    }

    func testLastAttemptFailsForGoodWithAFailureEntry() {
        var j = job(maxAttempts: 2)
        j.attempts = 1
        let t = lifecycle.step(j, .attempted(.transient(reason: "InternalServerError", status: 500, retryAfter: nil), started: t0), now: t0)
        XCTAssertEqual(t.job.attempts, 2)
        XCTAssertEqual(t.job.state, .failed(reason: "InternalServerError"))
        XCTAssertEqual(names(t), ["attempted", "complete:failed", "finished:afterSending"])
        XCTAssertEqual(finished(t)?.2?.error, "InternalServerError")
        XCTAssertEqual(finished(t)?.2?.notifID, "n-1")
    }

    func testNoRetryPastTheExpiration() {
        let t = lifecycle.step(
            job(expiration: Int64(t0.timeIntervalSince1970) + 1),
            .attempted(.transient(reason: "ServiceUnavailable", status: 503, retryAfter: 10), started: t0), now: t0)
        XCTAssertEqual(t.job.state, .failed(reason: "ServiceUnavailable (expired before retry)"))
        XCTAssertEqual(names(t), ["attempted", "complete:failed", "finished:afterSending"])
    }

    func testTokenDeadFailsAtOnceAndTellsTheFeedback() {
        let t = lifecycle.step(job(), .attempted(.tokenDead(reason: "Unregistered", status: 410), started: t0), now: t0)
        XCTAssertEqual(t.job.state, .failed(reason: "Unregistered"))
        guard let (outcome, phase, failure) = finished(t) else { return XCTFail("finished") }
        XCTAssertEqual(outcome, .failed(reason: "Unregistered", tokenDead: true))
        XCTAssertEqual(phase, .afterSending)
        XCTAssertEqual(failure?.error, "Unregistered")
    }

    func testStaleCredentialsRetryOnceAtOnceWithoutCountingTheAttempt() {
        let refused = SendOutcome.credentials(reason: "ExpiredProviderToken", status: 403)
        let t = lifecycle.step(job(), .attempted(refused, started: t0), now: t0 + 1)
        XCTAssertEqual(t.job.attempts, 0, "the refused attempt does not count")
        XCTAssertTrue(t.job.credentialRetryUsed)
        XCTAssertEqual(t.job.notBefore, t0 + 1, "at once")
        XCTAssertEqual(names(t), ["attempted", "retrying", "reschedule"])
        let again = lifecycle.step(t.job, .attempted(refused, started: t0 + 1), now: t0 + 2)
        XCTAssertEqual(again.job.state, .failed(reason: "ExpiredProviderToken"), "only once")
    }

    func testRejectedBeforeSendingIsStoredAndFinishedNeverEnqueued() {
        let served = lifecycle.step(job(), .rejected(reason: "PayloadTooLarge (5000 > 4096 bytes)", served: true), now: t0)
        XCTAssertEqual(served.job.state, .failed(reason: "PayloadTooLarge (5000 > 4096 bytes)"))
        XCTAssertEqual(names(served), ["record", "accepted", "finished:beforeSending"])
        XCTAssertEqual(served.job.attempts, 0)

        let notServed = lifecycle.step(job(), .rejected(reason: "platform ios is not enabled", served: false), now: t0)
        XCTAssertEqual(names(notServed), ["record", "accepted", "finished:notServed"])
        XCTAssertEqual(finished(notServed)?.2?.error, "platform ios is not enabled", "still answered in the sync logs")
    }

    func testUnpreparableStoredJobFails() {
        let t = lifecycle.step(job(), .unpreparable(reason: "bad topic"), now: t0)
        XCTAssertEqual(t.job.state, .failed(reason: "bad topic"))
        XCTAssertEqual(t.job.attempts, 0)
        XCTAssertEqual(names(t), ["complete:failed", "finished:afterSending"])
    }

    func testLeaseExpiryAndShutdownReleasePendingJobsOnly() {
        let pending = lifecycle.step(job(), .attempted(.transient(reason: "x", status: nil, retryAfter: nil), started: t0), now: t0).job
        for input in [DeliveryInput.leaseExpired, .shutdown] {
            let t = lifecycle.step(pending, input, now: t0)
            XCTAssertEqual(names(t), ["release"])
            XCTAssertEqual(t.job.state, pending.state, "attempts and next try are kept")
            XCTAssertEqual(t.job.attempts, 1)
        }
        let done = lifecycle.step(job(), .attempted(.delivered(providerID: nil), started: t0), now: t0).job
        XCTAssertEqual(names(lifecycle.step(done, .shutdown, now: t0)), [])
        XCTAssertEqual(names(lifecycle.step(done, .leaseExpired, now: t0)), [])
        XCTAssertEqual(
            names(lifecycle.step(done, .attempted(.delivered(providerID: nil), started: t0), now: t0)), [], "a finished job stays finished")
    }

    func testStoredStateCodesAreTheSchemaValues() {
        XCTAssertEqual(DeliveryState.Code.pending.rawValue, 0)
        XCTAssertEqual(DeliveryState.Code.delivered.rawValue, 1)
        XCTAssertEqual(DeliveryState.Code.failed.rawValue, 2)
        let at = t0 + 5
        XCTAssertEqual(DeliveryState.Code.duplicate.rawValue, 3)
        XCTAssertEqual(DeliveryState.Code.coalesced.rawValue, 4)
        let cases: [DeliveryState] = [
            .queued, .retrying(nextTry: at, lastError: "x"), .delivered(providerID: "p"), .failed(reason: "r"), .skipped(.duplicate),
            .skipped(.coalesced), .delivered(providerID: "p", detail: "X-WNS-Status: dropped"), .delivered(providerID: nil, detail: "d"),
        ]
        for s in cases {
            var attempts = 0
            var lastError: String?
            var providerID: String?
            switch s {
            case .queued: break
            case .retrying(_, let e):
                attempts = 1
                lastError = e
            case .delivered(let p, let detail):
                attempts = 1
                providerID = DeliveryState.storedProviderText(providerID: p, detail: detail)
            case .failed(let r):
                attempts = 1
                lastError = r
            case .skipped: break
            }
            XCTAssertEqual(DeliveryState(code: s.code, attempts: attempts, notBefore: at, lastError: lastError, providerID: providerID), s)
        }
        // A provider id stored before details were kept is read as it was.
        XCTAssertEqual(
            DeliveryState(code: .delivered, attempts: 1, notBefore: at, lastError: nil, providerID: "0a1b-2c"), .delivered(providerID: "0a1b-2c"))
    }

    /// Stats, the memory status records and sync waiters read the same events.
    func testSinksReadOneEventStream() async throws {
        let stats = Stats()
        let status = MemoryStatusStore(now: { Date(timeIntervalSince1970: 1_000_100) })
        let waiters = WaiterRegistry()
        let w = waiters.register(count: 1, budget: 1 << 20)
        let sinks: [any DeliveryEventSink] = [stats, status, waiters]
        func run(_ t: DeliveryTransition) { for case .emit(let e) in t.effects { for s in sinks { s.record(e) } } }

        for s in sinks { s.record(.submitted(counts: 1, queued: 1)) }
        let accepted = lifecycle.step(job(waiter: w), .accepted, now: t0)
        run(accepted)
        var records = try await status.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(records?.first?.state, .queued)

        let retry = lifecycle.step(accepted.job, .attempted(.transient(reason: "Busy", status: 503, retryAfter: nil), started: t0), now: t0)
        run(retry)
        records = try await status.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(records?.first?.state, .retrying)
        XCTAssertEqual(records?.first?.error, "Busy")
        XCTAssertEqual(records?.first?.nextTry, t0 + 2)

        let fail = lifecycle.step(retry.job, .attempted(.tokenDead(reason: "Unregistered", status: 410), started: t0 + 2), now: t0 + 2)
        run(fail)
        records = try await status.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(records?.first?.state, .failed)
        XCTAssertEqual(records?.first?.attempts, 2)
        XCTAssertEqual(records?.first?.finishedAt, Date(timeIntervalSince1970: 1_000_100))

        let answer = await waiters.wait(w, timeout: 5)
        XCTAssertEqual(answer.pending, 0)
        XCTAssertEqual(answer.logs.entries.map(\.error), ["Unregistered"])

        let snap = stats.snapshot
        XCTAssertEqual(snap.totalCount, 1)
        XCTAssertEqual(snap.submittedTasks, 1)
        XCTAssertEqual(snap.retries, 1)
        XCTAssertEqual(snap.counts(.ios).pushError, 1)
        XCTAssertEqual(stats.takeUnsaved(), snap, "increments kept for a durable engine to save")
        XCTAssertEqual(stats.takeUnsaved(), StatsSnapshot(), "taken once")
    }
    /// A job is visible to the workers once enqueued, before the submitting task publishes its
    /// acceptance: a fast answer may finish it first. The memory status keeps the outcome (the
    /// acceptance coming after does not make it queued again) and lists the jobs in id order.
    func testMemoryStatusKeepsAnOutcomeThatCameBeforeTheAcceptance() async throws {
        let status = MemoryStatusStore(now: { Date(timeIntervalSince1970: 1_000_100) })
        func run(_ t: DeliveryTransition) { for case .emit(let e) in t.effects { status.record(e) } }
        var first = job()
        first.id = 6
        let second = job()  // id 7
        let accepted = lifecycle.step(second, .accepted, now: t0)
        let failed = lifecycle.step(accepted.job, .attempted(.tokenDead(reason: "BadDeviceToken", status: 400), started: t0), now: t0)
        run(failed)  // the worker's outcome first
        run(lifecycle.step(first, .accepted, now: t0))
        run(accepted)  // then the submitting task's acceptances
        let records = try await status.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(records?.map(\.state), [.queued, .failed], "in job id order; the outcome kept")
        XCTAssertEqual(records?.last?.error, "BadDeviceToken")
        XCTAssertEqual(status.recordCount, 2)
    }
}
