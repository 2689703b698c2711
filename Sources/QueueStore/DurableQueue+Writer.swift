import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// The writer: one task that commits what requests, workers and the timer gathered, one transaction
/// at a time (group commit).
extension DurableQueue {
    /// Hands a write a caller waits for (a request's inserts, an Idempotency-Key operation) to the
    /// writer's next group commit and waits for its answer. `add` puts it into the gathered work
    /// (with the lock held); `unqueue` takes it out again should its deadline come before the writer
    /// took it (`startDeadline`). Refused at once while the queue is closed or the store refuses writes.
    func handToWriter<T: Sendable>(
        _ add: (inout State, Resumption<T>) -> Void,
        unqueue: @escaping @Sendable (inout State, Resumption<T>) -> Void
    ) async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            let r = Resumption(c)
            let refused: (any Error)? = state.withLockedValue { s in
                if s.finalized { return QueueClosedError() }
                if let fault = s.fault { return fault }
                add(&s, r)
                return nil
            }
            if let refused {
                r.resume(throwing: refused)
                return
            }
            signal.yield()
            startDeadline(r, unqueue: unqueue)
        }
    }

    /// On a store that can hang (`exclusive` false), a request waits for its write at most
    /// `storeTimeout` even when the writer is stuck in a transaction the store does not answer (a
    /// server that stopped answering on open connections ignores the cancellation of
    /// `commitBounded`). Still gathered: taken out of the batch (`unqueue`), nothing is written.
    /// Already in a transaction: refused all the same, and that transaction can no longer commit
    /// (`CommitGate`): it rolls back when the store answers again, so nothing of a refused request
    /// is ever sent. Only while the transaction is committing (past the gate) does the request wait
    /// for the COMMIT's answer, another `storeTimeout` at a time. Either way the store is marked as
    /// not answering, so the next requests are refused at once until a write succeeds.
    func startDeadline<T>(_ r: Resumption<T>, unqueue: @escaping @Sendable (inout State, Resumption<T>) -> Void) {
        guard !backend.exclusive else { return }
        let timeout = options.storeTimeout
        let sleeper = Task { [weak self] in
            while true {
                do { try await Task.sleep(nanoseconds: UInt64(max(0, timeout) * 1e9)) } catch { return }
                guard let self else { return }
                if r.isHeld { continue }
                let fault = StoreUnavailableError(.timeout)
                let t = self.now().timeIntervalSince1970
                let first: Bool = self.state.withLockedValue { s in
                    guard !r.isResumed, !r.isHeld else { return false }
                    unqueue(&s, r)
                    let first = s.fault == nil
                    if first {
                        s.fault = fault
                        s.faultRetryDelay = self.options.faultRetryDelay.lowerBound
                        s.faultRetryAt = t + s.faultRetryDelay
                    }
                    return first
                }
                if r.resumeUnlessHeld(throwing: fault) {
                    if first {
                        self.logger.error(
                            "queue store did not answer a write within queue.store_timeout (\(timeout) s): requests are answered 503 until it does")
                    }
                    return
                }
                // Committing since: the writer answers, with the COMMIT's outcome.
                if r.isResumed { return }
            }
        }
        r.onResume { sleeper.cancel() }
    }

    /// Waits until every change made so far is committed.
    public func flush() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let closed: Bool = state.withLockedValue { s in
                if s.finalized { return true }
                s.work.updateWaiters.append(c)
                return false
            }
            if closed { c.resume() } else { signal.yield() }
        }
    }

    /// The writer's task: on each signal, commits the gathered work until none is left (or it is to
    /// wait for `updateDelay`), and closes the store once shutting down is requested.
    func writerLoop(_ stream: AsyncStream<Void>) async {
        for await _ in stream {
            while true {
                let taken = state.withLockedValue { takeWork(&$0) }
                guard let (work, finalize) = taken else { break }
                if !work.batch.isEmpty || !work.insertGroups.isEmpty || !work.updateWaiters.isEmpty || !work.idempotencyWaiters.isEmpty
                    || !work.cancelWaiters.isEmpty
                {
                    await execute(work)
                    continue
                }
                if finalize { await finalizeStore() }
                break
            }
            if state.withLockedValue({ $0.finalized }) { break }
        }
    }

    /// Takes the work gathered for the next transaction, with whether the store is to be closed after
    /// it (shutting down), or nil when there is nothing to write now: the store refuses writes and
    /// nobody waits, or only completions nobody waits for were gathered (committed `updateDelay` later).
    private func takeWork(_ s: inout State) -> (work: Work, finalize: Bool)? {
        let finalize = s.finalizeRequested && !s.finalized
        if s.fault != nil {
            // The store refuses writes. Shutting down: what is left goes into the one
            // last try of `finalizeStore`. Else what nobody waits for is kept for the
            // timer's next try (a heartbeat, with backoff), not tried on every completion.
            if finalize { return (Work(), true) }
            if !s.work.batch.heartbeat, s.work.insertGroups.isEmpty, s.work.idempotencyWaiters.isEmpty, s.work.cancelWaiters.isEmpty,
                s.work.updateWaiters.isEmpty
            {
                return nil
            }
        }
        if !finalize, !s.shutdown, !s.work.batch.updates.isEmpty, s.work.batch.updates.count < options.updateBatch,
            s.work.onlyUnwaited
        {
            // Only completions nobody waits for: gather more, for `updateDelay`
            // (wall-clock time: the injected clock may stand still in tests).
            if !s.updatesDue {
                if !s.updateWakeScheduled {
                    s.updateWakeScheduled = true
                    scheduleUpdateWake()
                }
                return nil
            }
        }
        s.updatesDue = false
        var w = s.work
        s.work = Work()
        if !s.retained.isEmpty, !w.batch.isEmpty {
            // Refused earlier: written first, so a job's changes reach the store in order
            // (alone they wait for the timer's next try: no loop on a failing store).
            w.batch.updates = s.retained + w.batch.updates
            s.retained = []
        }
        // The next batch likely holds as many updates: no regrowing (and copying) the array
        // from empty while the workers append to it under the lock.
        s.work.batch.updates.reserveCapacity(min(w.batch.updates.count, options.updateBatch))
        return (w, finalize)
    }

    /// Wakes the writer `updateDelay` from now (wall-clock time: the injected clock may stand still in
    /// tests) to commit the completions gathered meanwhile.
    private func scheduleUpdateWake() {
        let delay = Int64(min(max(options.updateDelay, 0), 1) * 1e9)
        let wake: @Sendable () -> Void = { [self] in
            state.withLockedValue { s in
                s.updateWakeScheduled = false
                s.updatesDue = true
            }
            signal.yield()
        }
        // A timer of the writer's own event loop, where the writer runs: no
        // task, no timer thread, no hop through the global executor (each
        // was a thread wake-up per batch of completions).
        if let loop = backend.eventLoop {
            loop.scheduleTask(in: .nanoseconds(delay), wake)
        } else {
            Task {
                try? await Task.sleep(nanoseconds: UInt64(delay))
                wake()
            }
        }
    }

    /// Commits one batch of gathered work and answers its waiters; a store's fault or a failed
    /// transaction goes to `storeRefused` or `isolate`.
    func execute(_ work: Work) async {
        var work = work
        let t = now().timeIntervalSince1970
        if let fault = state.withLockedValue({ $0.fault }) {
            // Gathered before the store was found failing: refused at once, not after another wait
            // for a store known to fail (the timer's probe finds when it takes writes again).
            refuseWaiting(&work, fault)
            if work.batch.isEmpty {
                for c in work.updateWaiters { c.resume() }
                return
            }
            if !work.batch.heartbeat {
                // Only the timer's tries (a heartbeat, with backoff) go to a store known to refuse
                // writes; the rest is kept for them (on PostgreSQL each would wait `storeTimeout`).
                storeRefused(work, fault, error: nil, now: t, tried: false)
                return
            }
        }
        let result: WriteResult
        do {
            let leases = work.batch.leases
            result = try await commitBounded(work.batch, now: t, waiting: work.waiting) { [self] late in
                await self.takeLateLeases(late, leases: leases)
            }
        } catch {
            if let cause = StoreFaults.cause(of: error) {
                storeRefused(work, StoreUnavailableError(cause), error: error, now: t)
                return
            }
            logger.error("queue store transaction failed: \(error); retrying its parts one by one")
            await isolate(work, now: t)
            return
        }
        storeAccepted()
        var k = 0
        for g in work.insertGroups {
            g.continuation.resume(returning: (Array(result.inserted[k..<(k + g.count)]), result.guarded))
            k += g.count
        }
        resumeIdempotency(work, claims: result.claims)
        resumeCancels(work, result.cancelled)
        await finishMaintenance(work, result)
    }

    /// Resumes the cancel waiters with the rows each cancel ended.
    func resumeCancels(_ work: Work, _ cancelled: [[CancelledRow]]) {
        for (i, c) in work.cancelWaiters.enumerated() { c.resume(returning: i < cancelled.count ? cancelled[i] : []) }
    }

    /// One transaction, given up after `storeTimeout` on a store that can hang (a database server
    /// gone: the pool waits for a connection). A store this process alone uses answers or fails at
    /// once and is called directly (its writer runs on the store's event loop). `waiting`: the
    /// requests whose writes are in it; it commits only while all of them still wait (`CommitGate`).
    func commitBounded(
        _ batch: WriteBatch, now t: Double, waiting: [any CommitHold] = [], late: (@Sendable (WriteResult) async -> Void)? = nil
    ) async throws -> WriteResult {
        let backend = self.backend
        let owner = self.owner
        let lease = options.leaseTimeout
        if backend.exclusive {
            let gate = CommitGate(waiting)
            do {
                return try await backend.commit(batch, owner: owner, now: t, leaseTimeout: lease, gate: gate)
            } catch {
                gate.release()
                throw error
            }
        }
        let timeout = options.storeTimeout
        let logger = self.logger
        // Not a task group: a group waits for its children, and a transaction that waits for a
        // connection the pool cannot make (the server gone) was seen not to end when cancelled, which
        // left the writer stuck and no probe ever finding the store back. Past the timeout the writer
        // goes on; the given-up transaction cannot commit any more (its gate is closed: this
        // resumption is answered) and rolls back whenever it gets to run. Only a transaction past its
        // gate (COMMIT sent) is waited for, at most another `storeTimeout`: if that COMMIT still
        // succeeds later, its outcome was unknown when its requests were refused (their jobs are
        // sent: at-least-once), its delivery updates, kept, are written again (the same values), and
        // `late` takes what it leased to this process.
        return try await withCheckedThrowingContinuation { c in
            let r = Resumption<WriteResult>(c)
            let gate = CommitGate(waiting + [r])
            let commit = Task {
                do {
                    let result = try await backend.commit(batch, owner: owner, now: t, leaseTimeout: lease, gate: gate)
                    if !r.resume(returning: result) { await late?(result) }
                } catch {
                    gate.release()
                    r.resume(throwing: error)
                }
            }
            let timer = Task {
                do { try await Task.sleep(nanoseconds: UInt64(max(0, timeout) * 1e9)) } catch { return }
                if r.resumeUnlessHeld(throwing: StoreUnavailableError(.timeout)) {
                    commit.cancel()
                    return
                }
                do { try await Task.sleep(nanoseconds: UInt64(max(0, timeout) * 1e9)) } catch { return }
                if r.resume(throwing: StoreUnavailableError(.timeout)) {
                    logger.error(
                        "queue store did not answer a COMMIT within queue.store_timeout (\(timeout) s): its requests are refused, its outcome is unknown"
                    )
                }
            }
            r.onResume { timer.cancel() }
        }
    }

    /// Resumes the idempotency waiters after their operations were committed: each claim gets its answer.
    func resumeIdempotency(_ work: Work, claims: [IdempotencyClaim]) {
        var c = 0
        for (i, op) in work.batch.idempotency.enumerated() where i < work.idempotencyWaiters.count {
            if case .claim = op {
                work.idempotencyWaiters[i].resume(returning: c < claims.count ? claims[c] : nil)
                c += 1
            } else {
                work.idempotencyWaiters[i].resume(returning: nil)
            }
        }
    }

    /// After this process's counter increments were saved: its totals become the store's, which add
    /// up every process sharing it (gorush's counters on a shared storage are the cluster's too),
    /// plus the increments taken for a batch not committed yet and those not taken yet. Never lower
    /// than before (the store only adds), so `/metrics` counters do not go back.
    private func rebaseStats(_ stored: [String: Int64]) {
        state.withLockedValue { s in
            guard let stats = s.stats else { return }
            let pending = s.work.batch.statsDelta
            stats.rebase { unsaved in
                var flat = stored
                flat.merge(pending, uniquingKeysWith: Int64.saturatingSum)
                flat.merge(StatsCodec.increments(unsaved), uniquingKeysWith: Int64.saturatingSum)
                return StatsCodec.snapshot(flat)
            }
        }
    }

    /// Resumes update waiters and hands out leased rows after a successful commit.
    func finishMaintenance(_ work: Work, _ result: WriteResult) async {
        for c in work.updateWaiters { c.resume() }
        if let stored = result.storedStats { rebaseStats(stored) }
        if result.pruneMore, let p = work.batch.prune {
            // More rows to prune: another bounded pass in the next transaction (with whatever
            // work came meanwhile), so the writer is never held by one long delete.
            let go: Bool = state.withLockedValue { s in
                if s.finalized || s.finalizeRequested { return false }
                if s.work.batch.prune == nil { s.work.batch.prune = p }
                return true
            }
            if go { signal.yield() }
        }
        if result.reclaimed > 0 {
            logger.warning("released \(result.reclaimed) deliveries leased by a process whose lease expired")
            state.withLockedValue { s in for p in s.platforms.keys { s.platforms[p]!.storeMayHaveWork = true } }
        }
        for (i, req) in work.batch.leases.enumerated() {
            await handleLeased(result.leased[i], platform: req.platform, from: .lease(limit: req.limit))
        }
        await backend.afterCommit()
    }
}
