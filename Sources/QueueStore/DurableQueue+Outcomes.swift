import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// A worker's questions and answers: whether a push held for coalescing was replaced, and retries and
/// final outcomes, gathered for the writer's next commit (nobody waits for them).
extension DurableQueue {
    public func wasReplaced(_ job: DeliveryJob) async -> Bool {
        do {
            return try await backend.jobState(Int64(job.id)) == DeliveryState.Code.coalesced.rawValue
        } catch {
            logger.warning("cannot read whether a coalesced push was replaced (sending it): \(error)")
            return false
        }
    }

    public func reschedule(_ job: DeliveryJob) async {
        // The new attempt count and time go to the store with the next group commit; the worker does
        // not wait for it (after a crash the job is retried from its last committed state).
        let update = JobUpdate.reschedule(
            id: Int64(job.id), attempts: job.attempts, notBefore: job.notBefore.timeIntervalSince1970,
            lastError: StoreText.clean(job.lastError), credentialRetryUsed: job.credentialRetryUsed,
            row: storedRow(job))
        let tNow = now()
        var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        let wake: Bool = state.withLockedValue { s in
            let first = addUpdate(update, in: &s)
            s.outstanding -= 1
            place(job, in: &s, now: tNow, resume: &resume)
            return checkFinalize(&s) || first
        }
        for (c, j) in resume { c.resume(returning: j) }
        if wake { signal.yield() }
    }

    public func complete(_ job: DeliveryJob, outcome: FinalOutcome) async {
        // Group commit without waiting: a completion lost in a crash means one duplicate delivery
        // (at-least-once), never a lost one. Shutdown commits every pending write before closing.
        let t = now().timeIntervalSince1970
        // Taken out of the optional into the batch (a move): appending a `let` copied it.
        var update: JobUpdate? = JobUpdate.completion(
            id: Int64(job.id), outcome: outcome, attempts: job.attempts, finishedAt: t,
            row: rowAtOutcome && job.storeRow != 0 ? OutcomeRow(job) : nil, messageID: job.messageID)
        // The closure takes the platform only, not the whole job.
        let platform = job.platform
        var read: [ClosedRange<Int64>]?
        let wake: Bool = state.withLockedValue { s in
            guard let u = update.take() else { return false }
            let first = addUpdate(u, in: &s)
            s.outstanding -= 1
            s.held -= 1
            s.pendingDelta -= 1
            if s.parked > 0 { read = readParkedIfNeeded(platform, in: &s, now: t) }
            return checkFinalize(&s) || first
        }
        if wake { signal.yield() }
        if let read { startReadingParked(platform, read) }
    }

    /// The row a retry or an outcome of `job` carries to a store that may not have written it yet
    /// (nil: not such a store, or a job not from this queue's store).
    func storedRow(_ job: DeliveryJob) -> StoredJob? {
        rowAtOutcome && job.storeRow != 0 ? StoredJob(job) : nil
    }

    /// Adds a completion or reschedule to the next commit. True when the writer must look at it:
    /// the first of a batch (it schedules the commit `updateDelay` later) or a full batch.
    private func addUpdate(_ u: consuming JobUpdate, in s: inout State) -> Bool {
        guard !s.finalized else { return false }
        s.work.batch.updates.append(u)
        return s.work.batch.updates.count == 1 || s.work.batch.updates.count == options.updateBatch
    }
}
