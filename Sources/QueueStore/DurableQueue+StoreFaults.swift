import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// A store that refuses writes: the requests waiting get the fault, the delivery updates are kept
/// and written again, and a failed transaction is retried in parts so one bad value fails only its own.
extension DurableQueue {
    /// A fault of the store as the error its waiters get; other errors as they are.
    static func refusal(_ error: any Error) -> any Error {
        StoreFaults.cause(of: error).map { StoreUnavailableError($0) } ?? error
    }

    /// Refuses the requests and Idempotency-Key operations of `work` with `fault` (nothing of them
    /// is written) and takes them out of its batch.
    func refuseWaiting(_ work: inout Work, _ fault: any Error) {
        for g in work.insertGroups { g.continuation.resume(throwing: fault) }
        for c in work.idempotencyWaiters { c.resume(throwing: fault) }
        for c in work.cancelWaiters { c.resume(throwing: fault) }
        work.insertGroups = []
        work.idempotencyWaiters = []
        work.cancelWaiters = []
        work.batch.inserts = []
        work.batch.idempotency = []
        work.batch.cancels = []
    }

    /// The store refused a transaction for a fault of its own: the requests waiting for it get the
    /// fault (nothing of them was stored), its completions and reschedules are kept to be written
    /// again, its counter increments go back into the next batch, and the timer tries the store
    /// again with backoff. Until a write succeeds new requests are refused at once.
    /// `tried` false: the batch was not tried (the store was known to refuse): no backoff step, no log.
    func storeRefused(_ work: Work, _ fault: StoreUnavailableError, error: (any Error)?, now t: Double, tried: Bool = true) {
        var work = work
        refuseWaiting(&work, fault)
        let (first, kept): (Bool, Int) = state.withLockedValue { s in
            let first = s.fault == nil
            s.fault = fault
            s.retained = work.batch.updates + s.retained
            s.work.batch.statsDelta.merge(work.batch.statsDelta, uniquingKeysWith: Int64.saturatingSum)
            for req in work.batch.leases { s.platforms[req.platform]?.fetching = false }
            guard tried else { return (false, s.retained.count) }
            let delays = options.faultRetryDelay
            s.faultRetryDelay = first ? delays.lowerBound : min(max(s.faultRetryDelay * 2, delays.lowerBound), delays.upperBound)
            s.faultRetryAt = t + s.faultRetryDelay
            if s.tickerWake > s.faultRetryAt {
                s.tickerWake = 0
                s.tickerSleeper?.cancel()
            }
            return (first, s.retained.count)
        }
        for c in work.updateWaiters { c.resume() }
        guard tried else { return }
        let why = error.map { ": \($0)" } ?? ""
        if first {
            logger.error(
                "queue store cannot take writes (\(fault.cause.rawValue))\(why); requests are answered \(fault.httpStatus) until it does, \(kept) delivery updates kept to be written then"
            )
        } else {
            logger.debug("queue store still refuses writes (\(fault.cause.rawValue))\(why); \(kept) delivery updates kept")
        }
    }

    /// A transaction committed: a fault found earlier is over.
    func storeAccepted() {
        let was: StoreUnavailableError? = state.withLockedValue { s in
            defer { s.fault = nil }
            return s.fault
        }
        if let was { logger.notice("queue store takes writes again (it refused them: \(was.cause.rawValue))") }
    }

    /// Why the store cannot take writes now (nil: the last write succeeded).
    public var storeProblem: StoreUnavailableError? { state.withLockedValue { $0.fault } }

    /// Delivery updates the store refused, kept in memory to be written again.
    public var unwrittenUpdates: Int { state.withLockedValue { $0.unwritten } }

    /// A group commit failed: one client's bad value must not fail the others. Each client's inserts
    /// are committed alone (only the failing client gets the error), then the updates, leases and
    /// upkeep; if those fail again, the updates are applied one per transaction and a failing one is
    /// dropped (its job stays leased and is retried after the lease timeout).
    func isolate(_ work: Work, now t: Double) async {
        var k = 0
        for g in work.insertGroups {
            var part = WriteBatch()
            part.inserts = Array(work.batch.inserts[k..<(k + g.count)])
            k += g.count
            do {
                let r = try await commitBounded(part, now: t, waiting: [g.continuation])
                g.continuation.resume(returning: (r.inserted, r.guarded))
            } catch {
                logger.error("queue store refused one request's \(g.count) notification(s): \(error)")
                g.continuation.resume(throwing: Self.refusal(error))
            }
        }
        if !work.batch.idempotency.isEmpty {
            var part = WriteBatch()
            part.idempotency = work.batch.idempotency
            do {
                let r = try await commitBounded(part, now: t, waiting: work.idempotencyWaiters)
                resumeIdempotency(work, claims: r.claims)
            } catch {
                logger.error("queue store refused \(work.idempotencyWaiters.count) Idempotency-Key operation(s): \(error)")
                for c in work.idempotencyWaiters { c.resume(throwing: Self.refusal(error)) }
            }
        }
        if !work.batch.cancels.isEmpty {
            var part = WriteBatch()
            part.cancels = work.batch.cancels
            do {
                let r = try await commitBounded(part, now: t, waiting: work.cancelWaiters)
                resumeCancels(work, r.cancelled)
            } catch {
                logger.error("queue store refused \(work.cancelWaiters.count) cancel(s): \(error)")
                for c in work.cancelWaiters { c.resume(throwing: Self.refusal(error)) }
            }
        }
        var rest = work.batch
        rest.inserts = []
        rest.idempotency = []
        rest.cancels = []
        if rest.isEmpty {
            for c in work.updateWaiters { c.resume() }
            return
        }
        do {
            let r = try await commitBounded(rest, now: t)
            storeAccepted()
            await finishMaintenance(work, r)
            return
        } catch {
            if let cause = StoreFaults.cause(of: error) {
                var left = work
                left.batch = rest
                left.insertGroups = []
                left.idempotencyWaiters = []
                left.cancelWaiters = []
                storeRefused(left, StoreUnavailableError(cause), error: error, now: t)
                return
            }
            logger.error("queue store transaction failed again without inserts: \(error)")
        }
        var kept = 0
        var refused: [JobUpdate] = []
        var fault: StoreUnavailableError?
        for u in rest.updates {
            if fault != nil {
                refused.append(u)
                continue
            }
            var one = WriteBatch()
            one.updates = [u]
            do {
                _ = try await commitBounded(one, now: t)
                kept += 1
            } catch {
                if let cause = StoreFaults.cause(of: error) {
                    // The store, not this update: it and the rest are kept and written again.
                    fault = StoreUnavailableError(cause)
                    refused.append(u)
                } else {
                    // This update's own value (the store took the others): it cannot ever be
                    // written; its job stays leased and is retried after the lease timeout.
                    logger.error("queue store refused one delivery update, dropped: \(error)")
                }
            }
        }
        rest.updates = []
        if let fault {
            var left = work
            left.batch = rest
            left.batch.updates = refused
            left.insertGroups = []
            left.idempotencyWaiters = []
            left.cancelWaiters = []
            storeRefused(left, fault, error: nil, now: t)
            return
        }
        do {
            let r = rest.isEmpty ? WriteResult() : try await commitBounded(rest, now: t)
            await finishMaintenance(work, r)
        } catch {
            logger.error("queue store upkeep failed (\(kept) updates kept): \(error)")
            for c in work.updateWaiters { c.resume() }
            state.withLockedValue { s in
                for req in work.batch.leases { s.platforms[req.platform]?.fetching = false }
            }
        }
    }
}
