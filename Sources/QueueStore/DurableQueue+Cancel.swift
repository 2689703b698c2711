import Foundation
import PushDispatch
import PushgateCore

/// Cancelling a notification's deliveries not yet sent (`QueueDriver.cancel`).
extension DurableQueue {
    /// Two kinds of deliveries are cancelled: those this process holds in memory and no worker has
    /// taken (ready, or waiting to retry), taken out under the lock and completed as cancelled; and
    /// the store's pending rows no process holds (scheduled ones, those left by another process),
    /// ended in one transaction by a statement that skips every leased row. A delivery a worker
    /// holds, here or in another process, is left to end as it ends (the status tells it pending).
    public func cancel(notifID: String, app: String?) async throws -> CancelledDeliveries {
        let match = CancelledDeliveries.matcher(notifID: notifID, app: app)
        let held: [DeliveryJob] = state.withLockedValue { s in
            guard !s.finalized, !s.finalizeRequested else { return [] }
            var out: [DeliveryJob] = []
            for p in Array(s.platforms.keys) {
                out += s.platforms[p]!.jobs.ready.remove(where: match)
                out += s.platforms[p]!.jobs.delayed.remove(where: match)
            }
            // As if handed to a worker: `complete` takes each back.
            s.outstanding += out.count
            return out
        }
        // Their completions go to the writer before the cancel below: the same or an earlier commit.
        for j in held { await complete(j, outcome: .skipped(.cancelled)) }
        let rows: [CancelledRow] = try await handToWriter { s, r in
            s.work.batch.cancels.append(CancelRequest(notifID: notifID, app: app))
            s.work.cancelWaiters.append(r)
        } unqueue: { s, r in
            guard let i = s.work.cancelWaiters.firstIndex(where: { $0 === r }) else { return }
            s.work.cancelWaiters.remove(at: i)
            s.work.batch.cancels.remove(at: i)
        }
        let cached: [Int64: AcceptedNotification] = state.withLockedValue { s in
            s.pendingDelta -= rows.count
            var out: [Int64: AcceptedNotification] = [:]
            for r in rows where out[r.job.notifRow] == nil {
                if let e = s.notifications[r.job.notifRow] { out[r.job.notifRow] = e.accepted }
            }
            return out
        }
        var jobs = held
        for r in rows {
            let accepted =
                cached[r.job.notifRow]
                ?? AcceptedNotification(notifID: notifID, notification: PushNotification(platform: r.job.platform), prepared: nil, app: r.app)
            var j = DeliveryJob(
                id: UInt64(clamping: r.job.id), messageID: r.job.messageID, target: r.job.target, accepted: accepted, maxAttempts: r.job.maxAttempts,
                now: Date(timeIntervalSince1970: r.job.enqueuedAt))
            j.storeRow = r.job.notifRow
            j.attempts = r.job.attempts
            j.notBefore = Date(timeIntervalSince1970: r.job.notBefore)
            j.lastError = r.job.lastError
            jobs.append(j)
        }
        return CancelledDeliveries(jobs: jobs, inFlight: nil)
    }
}
