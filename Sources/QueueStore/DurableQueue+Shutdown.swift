import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// Shutting down: once every job handed out is answered, the last writes, the leases released and the store closed.
extension DurableQueue {
    public func shutdown() {
        let go: Bool = state.withLockedValue { s in
            if s.shutdown { return false }
            s.shutdown = true
            return checkFinalize(&s)
        }
        if go { signal.yield() }
    }

    /// Shuts down and waits until the leases are released and the store is closed.
    public func close() async {
        shutdown()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done: Bool = state.withLockedValue { s in
                if s.finalized { return true }
                s.closeWaiters.append(c)
                return false
            }
            if done { c.resume() }
        }
    }

    /// Test hook: stops the queue as a crash would (no lease release, no counters saved) and closes the store.
    func abandonForTesting() async {
        tasks.withLockedValue { for t in $0 { t.cancel() } }
        let waiters: [CheckedContinuation<DeliveryJob?, Never>] = state.withLockedValue { s in
            s.finalized = true
            var all: [CheckedContinuation<DeliveryJob?, Never>] = []
            for p in s.platforms.keys { all += s.platforms[p]!.jobs.takeWaiters() }
            return all
        }
        for w in waiters { w.resume(returning: nil) }
        signal.finish()
        await backend.close()
    }

    func checkFinalize(_ s: inout State) -> Bool {
        guard s.shutdown, s.outstanding <= 0, !s.finalizeRequested, !s.finalized else { return false }
        s.finalizeRequested = true
        return true
    }

    func finalizeStore() async {
        var batch = WriteBatch()
        batch.release = true
        // Updates the store refused until now: a last try (a job whose outcome is not written is
        // pending in the store and sent again at the next start).
        // With the store refusing writes the writer leaves its gathered work here (`writerLoop`).
        let (retained, leftover, stats, known, fault): ([JobUpdate], Work, Stats?, Int, StoreUnavailableError?) = state.withLockedValue { s in
            defer {
                s.retained = []
                s.work = Work()
            }
            return (s.retained, s.work, s.stats, max(0, s.pendingBase + s.pendingDelta), s.fault)
        }
        var left = leftover
        refuseWaiting(&left, fault.map { $0 as any Error } ?? QueueClosedError())
        let retainedUpdates = retained + leftover.batch.updates
        batch.updates = retainedUpdates
        batch.statsDelta = leftover.batch.statsDelta
        if let stats { batch.statsDelta.merge(StatsCodec.increments(stats.takeUnsaved()), uniquingKeysWith: Int64.saturatingSum) }
        do {
            _ = try await commitBounded(batch, now: now().timeIntervalSince1970)
            // What the next start finds, read from the store (another process may share it).
            if let left = try? await backend.pendingAtRest() {
                logger.info("queue store closed; \(left) deliveries left in the store for the next start")
            } else {
                logger.info("queue store closed; about \(known) deliveries left in the store for the next start")
            }
        } catch {
            // Completions not written: their jobs are still pending in the store.
            let unwritten = retainedUpdates.filter { if case .complete = $0 { return true } else { return false } }.count
            logger.error(
                "cannot write to the queue store on shutdown: \(unwritten) delivery outcomes not written (sent again at the next start), about \(known + unwritten) deliveries left in the store; leases expire after \(options.leaseTimeout) s: \(error)"
            )
        }
        for c in leftover.updateWaiters { c.resume() }
        await backend.close()
        let (waiters, closeWaiters): ([CheckedContinuation<DeliveryJob?, Never>], [CheckedContinuation<Void, Never>]) = state.withLockedValue { s in
            s.finalized = true
            var all: [CheckedContinuation<DeliveryJob?, Never>] = []
            for p in s.platforms.keys { all += s.platforms[p]!.jobs.takeWaiters() }
            let cw = s.closeWaiters
            s.closeWaiters = []
            return (all, cw)
        }
        for w in waiters { w.resume(returning: nil) }
        for c in closeWaiters { c.resume() }
        signal.finish()
        tasks.withLockedValue { for t in $0 { t.cancel() } }
    }
}
