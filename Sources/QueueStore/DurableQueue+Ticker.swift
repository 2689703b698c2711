import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// The timer: retries coming due, polling the store, heartbeats, counters and pruning.
extension DurableQueue {
    /// The timer's task: sleeps until the next thing due, then promotes the retries come due, asks
    /// for leases and reads of parked jobs, probes a store that refuses writes, renews the leases
    /// (heartbeat), saves the counters and starts a prune pass, as each falls due.
    func tickerLoop() async {
        let heartbeatEvery = max(0.05, options.leaseTimeout / 4)
        let tick = Double(options.tick.components.seconds) + Double(options.tick.components.attoseconds) / 1e18
        while !Task.isCancelled {
            // Sleep until the next thing due (at least `tick`, at most `maxSleep`); `place` cuts the
            // sleep short for a retry due earlier.
            let sleeper: Task<Void, Never>? = state.withLockedValue { s in
                if s.finalized || s.finalizeRequested { return nil }
                let t = now().timeIntervalSince1970
                let wait = min(max(nextTimerDue(s, heartbeatEvery: heartbeatEvery) - t, tick), max(tick, options.maxSleep))
                s.tickerWake = t + wait
                let task = Task { _ = try? await Task.sleep(nanoseconds: UInt64(wait * 1e9)) }
                s.tickerSleeper = task
                return task
            }
            guard let sleeper else { return }
            await withTaskCancellationHandler {
                await sleeper.value
            } onCancel: {
                sleeper.cancel()
            }
            let tNow = now()
            let t = tNow.timeIntervalSince1970
            var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
            var refreshPending = false
            var pruneBefore: Double?
            var reads: [(Platform, [ClosedRange<Int64>])] = []
            let (stop, go): (Bool, Bool) = state.withLockedValue { s in
                s.tickerWake = 0
                s.tickerSleeper = nil
                if s.finalized || s.finalizeRequested { return (true, false) }
                var go = false
                if !s.shutdown {
                    for p in Array(s.platforms.keys) {
                        if let top = s.platforms[p]!.jobs.delayed.peek, top.notBefore <= tNow {
                            let handed = s.platforms[p]!.jobs.promoteDue(now: tNow)
                            s.outstanding += handed.count
                            resume += handed
                        }
                        if requestLeaseIfNeeded(p, in: &s, now: t) { go = true }
                        if let r = readParkedIfNeeded(p, in: &s, now: t) { reads.append((p, r)) }
                    }
                }
                if s.fault != nil || !s.retained.isEmpty, t >= s.faultRetryAt {
                    // A write (the heartbeat) to find whether the store takes writes again; the
                    // refused updates ride along. Not again before the backoff's delay.
                    s.faultRetryAt = t + max(s.faultRetryDelay, options.faultRetryDelay.lowerBound)
                    s.work.batch.heartbeat = true
                    go = true
                }
                if t - s.lastHeartbeat >= heartbeatEvery {
                    s.lastHeartbeat = t
                    s.work.batch.heartbeat = true
                    refreshPending = !backend.exclusive
                    // Forget renderings kept for jobs another process may have taken.
                    s.notifications.keep { t - $0.at < 600 }
                    go = true
                }
                if let stats = s.stats, t - s.lastStats >= options.statsInterval {
                    s.lastStats = t
                    let d = StatsCodec.increments(stats.takeUnsaved())
                    if !d.isEmpty {
                        s.work.batch.statsDelta.merge(d, uniquingKeysWith: Int64.saturatingSum)
                        go = true
                    } else if !backend.exclusive {
                        // Shared store: take in the other processes' counts (a process alone on
                        // its store reads nothing while idle).
                        s.work.batch.readStats = true
                        go = true
                    }
                }
                if t - s.lastPrune >= options.pruneInterval {
                    s.lastPrune = t
                    pruneBefore = t - options.statusRetention
                }
                return (false, go)
            }
            for (c, j) in resume { c.resume(returning: j) }
            if go { signal.yield() }
            for (p, r) in reads { startReadingParked(p, r) }
            if stop { return }
            if let pruneBefore { await startPrune(retentionCutoff: pruneBefore) }
            if refreshPending {
                if let c = try? await backend.pendingCount() {
                    state.withLockedValue { s in
                        s.pendingBase = c
                        s.pendingDelta = 0
                    }
                }
            }
        }
    }

    /// When the timer has something to do next (call with the lock held).
    private func nextTimerDue(_ s: State, heartbeatEvery: Double) -> Double {
        var due = min(s.lastHeartbeat + heartbeatEvery, s.lastPrune + options.pruneInterval)
        if s.fault != nil || !s.retained.isEmpty { due = min(due, s.faultRetryAt) }
        if s.stats != nil { due = min(due, s.lastStats + options.statsInterval) }
        for ps in s.platforms.values {
            if let top = ps.jobs.delayed.peek { due = min(due, top.notBefore.timeIntervalSince1970) }
            // A poll of the store for workers waiting with nothing held.
            if !ps.fetching, !ps.jobs.waiters.isEmpty, ps.jobs.ready.count == 0, let poll = nextPoll(ps, in: s) {
                due = min(due, poll)
            }
            // A read of parked jobs to try again after a failure.
            if ps.parkedReadFailed > 0, !ps.readingParked, !ps.parked.isEmpty { due = min(due, ps.parkedReadFailed + options.pollInterval) }
        }
        return due
    }

    /// Starts a prune pass now of the finished deliveries older than `cutoff` (seconds since 1970),
    /// as the timer does every `pruneInterval` with the retention's cutoff; `statusMaxRecords` applies.
    public func prune(finishedBefore cutoff: Double) async {
        await startPrune(retentionCutoff: cutoff)
    }

    /// Starts a prune pass: finished deliveries older than the retention, or older than the newest
    /// `statusMaxRecords` finished ones (read outside the writer's transactions).
    private func startPrune(retentionCutoff: Double) async {
        var cutoff = retentionCutoff
        var capped = false
        if options.statusMaxRecords > 0 {
            do {
                if let c = try await backend.finishedCutoff(keeping: options.statusMaxRecords), c > cutoff {
                    cutoff = c
                    capped = true
                }
            } catch {
                logger.warning("cannot read which status records are beyond queue.status_max_records: \(error)")
            }
        }
        let (go, first): (Bool, Bool) = state.withLockedValue { s in
            if s.finalized || s.finalizeRequested { return (false, false) }
            s.work.batch.prune = PruneRequest(
                finishedBefore: max(cutoff, s.work.batch.prune?.finishedBefore ?? cutoff), limit: max(1, options.pruneBatch))
            let first = capped && !s.capReached
            if capped { s.capReached = true }
            return (true, first)
        }
        if first {
            logger.notice(
                "more than queue.status_max_records (\(options.statusMaxRecords)) finished deliveries are stored: the oldest are pruned before queue.status_retention (\(Int(options.statusRetention)) s)"
            )
        }
        if go { signal.yield() }
    }
}
