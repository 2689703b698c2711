import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// Handing jobs to the workers: the ready jobs held here, leases of jobs from the store, and the
/// parked jobs read back as workers free up.
extension DurableQueue {
    public func next(platform: Platform) async -> DeliveryJob? {
        await withCheckedContinuation { (c: CheckedContinuation<DeliveryJob?, Never>) in
            let t = now().timeIntervalSince1970
            var fetch = false
            var read: [ClosedRange<Int64>]?
            let immediate: DeliveryJob?? = state.withLockedValue { s in
                if s.finalized { return .some(nil) }
                if !s.shutdown, let j = s.inPlace(platform, { $0.jobs.ready.popFirst() }) ?? nil {
                    s.outstanding += 1
                    return .some(j)
                }
                s.platforms[platform, default: PlatformState()].jobs.waiters.append(c)
                if !s.shutdown {
                    fetch = requestLeaseIfNeeded(platform, in: &s, now: t)
                    read = readParkedIfNeeded(platform, in: &s, now: t)
                }
                return .none
            }
            if let immediate { c.resume(returning: immediate) }
            if fetch { signal.yield() }
            if let read { startReadingParked(platform, read) }
        }
    }

    public func nextIfReady(platform: Platform) -> DeliveryJob? {
        var read: [ClosedRange<Int64>]?
        // Popped straight into `job`: returned through the lock's closure and an optional of an
        // optional, the job was copied out three times more.
        var job: DeliveryJob?
        state.withLockedValue { s in
            guard !s.finalized, !s.shutdown else { return }
            s.inPlace(platform) { job = $0.jobs.ready.popFirst() }
            guard job != nil else { return }
            s.outstanding += 1
            if s.parked > 0 { read = readParkedIfNeeded(platform, in: &s, now: nil) }
        }
        if let read { startReadingParked(platform, read) }
        return job
    }

    /// Puts a job this process holds where a worker will find it.
    func place(_ job: DeliveryJob, in s: inout State, now t: Date, resume: inout [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)]) {
        let p = job.platform
        if s.platforms[p] == nil { s.platforms[p] = PlatformState() }
        let handToWaiter = !s.shutdown
        // Changed in place (a copy of the platform state would copy its arrays on every job).
        if let handed = s.inPlace(p, { $0.jobs.place(job, now: t, handToWaiter: handToWaiter) }) ?? nil {
            resume.append((handed, job))
            s.outstanding += 1
        }
        // A retry due before the sleeping timer wakes: wake it now (it sleeps again until then).
        let due = job.notBefore.timeIntervalSince1970
        if due > t.timeIntervalSince1970, s.tickerWake > 0, due < s.tickerWake {
            s.tickerWake = 0
            s.tickerSleeper?.cancel()
        }
    }

    /// When the store may next be asked for jobs of a platform: at once when it may have some, else
    /// `queue.poll_interval` after the last poll; nil when polling cannot find any. A store this
    /// process alone uses (SQLite with its lock) gets jobs only from here: it is polled only while it
    /// holds jobs this process does not (retries left by the last run, not yet due), so an idle
    /// gateway makes no query.
    func nextPoll(_ ps: PlatformState, in s: State) -> Double? {
        if ps.storeMayHaveWork { return 0 }
        guard !backend.exclusive || s.pendingBase + s.pendingDelta > s.held + s.parked else { return nil }
        return ps.lastPoll + options.pollInterval
    }

    /// Adds a lease request for `platform` to the next transaction when workers wait and the store may have jobs.
    func requestLeaseIfNeeded(_ platform: Platform, in s: inout State, now t: Double) -> Bool {
        guard !s.shutdown, !s.finalizeRequested, let ps = s.platforms[platform] else { return false }
        // Not while the store refuses writes (a lease is one), nor while its refused updates fill the window.
        guard s.fault == nil, s.unwritten < options.maxHeld else { return false }
        guard !ps.fetching, !ps.jobs.waiters.isEmpty, ps.jobs.ready.count == 0 else { return false }
        guard let poll = nextPoll(ps, in: s), poll <= t else { return false }
        // One lease of up to `leaseBatch` rows: the dispatcher waits here with one feed loop per
        // platform (not one waiter per worker), so the waiter count says nothing about its free capacity.
        let limit = options.leaseBatch
        s.platforms[platform]!.fetching = true
        s.platforms[platform]!.lastPoll = t
        s.work.batch.leases.append(LeaseRequest(platform: platform, limit: limit))
        return true
    }

    /// Takes the next parked jobs of `platform` to read back when few are ready and the window has
    /// room (call with the lock held; hand the result to `startReadingParked` after unlocking).
    /// `now` nil: no failed read to wait for is checked (the hot path; a failure is retried by the timer).
    func readParkedIfNeeded(_ platform: Platform, in s: inout State, now t: Double?) -> [ClosedRange<Int64>]? {
        // Asked in place (`State.inPlace`): this runs on every completion while jobs are parked, and
        // reading the platform's state out of the dictionary copies it (a retain and a release of
        // each of its buffers).
        let (leaseBatch, retry) = (options.leaseBatch, options.pollInterval)
        guard parksJobs, !s.shutdown, !s.finalizeRequested,
            s.inPlace(platform, { $0.parkedReadDue(leaseBatch: leaseBatch, now: t, retryAfter: retry) }) == true
        else { return nil }
        let n = min(options.parkedReadBatch, options.maxHeld - s.held - s.unwritten)
        guard n > 0 else { return nil }
        s.inPlace(platform) { $0.readingParked = true }
        return s.changeParked(platform) { $0.take(n) }
    }

    func startReadingParked(_ platform: Platform, _ ranges: [ClosedRange<Int64>]) {
        Task { await self.readParked(platform, ranges) }
    }

    private func readParked(_ platform: Platform, _ ranges: [ClosedRange<Int64>]) async {
        let rows: [StoredJob]
        do {
            rows = try await backend.parkedJobs(ranges, owner: owner)
        } catch {
            logger.error("cannot read back deliveries left in the store (retried in \(options.pollInterval) s): \(error)")
            let t = now().timeIntervalSince1970
            state.withLockedValue { s in
                s.changeParked(platform) { $0.putBack(ranges) }
                s.platforms[platform]!.readingParked = false
                s.platforms[platform]!.parkedReadFailed = t
            }
            return
        }
        await handleLeased(rows, platform: platform, from: .parked)
    }

    /// A transaction given up at `storeTimeout` committed after all: the jobs it leased to this process
    /// are taken as a lease's answer (else they would wait in the store for the lease timeout).
    func takeLateLeases(_ result: WriteResult, leases: [LeaseRequest]) async {
        let taken = result.leased.reduce(0) { $0 + $1.count }
        guard taken > 0 else { return }
        logger.notice("a transaction given up at queue.store_timeout committed later: its \(taken) leased deliveries are taken")
        for (i, req) in leases.enumerated() where i < result.leased.count {
            await handleLeased(result.leased[i], platform: req.platform, from: .lease(limit: req.limit))
        }
    }

    /// Where leased rows come from: a lease of up to `limit` free jobs, or parked jobs read back (`readParked`).
    enum LeasedRows {
        case lease(limit: Int)
        case parked
    }

    /// Places leased rows.
    func handleLeased(_ rows: [StoredJob], platform: Platform, from source: LeasedRows) async {
        var accepted: [Int64: AcceptedNotification] = [:]
        var missing: [Int64] = []
        state.withLockedValue { s in
            for r in rows where accepted[r.notifRow] == nil {
                if let a = s.notifications[r.notifRow] {
                    accepted[r.notifRow] = a.accepted
                } else if !missing.contains(r.notifRow) {
                    missing.append(r.notifRow)
                }
            }
        }
        var unreadable: [StoredJob] = []
        if !missing.isEmpty {
            let t = now().timeIntervalSince1970
            do {
                let bodies = try await backend.notifications(missing)
                let decoder = JSONDecoder()
                var loaded: [Int64: AcceptedNotification] = [:]
                var sizes: [Int64: Int] = [:]
                for (row, stored) in bodies {
                    if let n = try? decoder.decode(PushNotification.self, from: Data(stored.body.utf8)) {
                        loaded[row] = AcceptedNotification(
                            notifID: stored.notifID, notification: n, prepared: nil, app: stored.app, traceParent: stored.traceParent)
                        sizes[row] = stored.body.utf8.count
                    }
                }
                state.withLockedValue { s in
                    // For the next lease batches of the same notifications (leases go in job order).
                    for (row, a) in loaded {
                        // Read back meanwhile by another batch (a lease and a read of parked jobs
                        // at once): one notification, one copy.
                        if let cached = s.notifications[row] {
                            loaded[row] = cached.accepted
                            continue
                        }
                        s.notifications.add(row, NotificationCache.Entry(accepted: a, at: t, bytes: sizes[row] ?? 0, leftInStore: nil))
                    }
                }
                accepted.merge(loaded) { a, _ in a }
            } catch {
                logger.error("cannot load stored notifications: \(error)")
            }
        }
        let tNow = now()
        var jobs: [DeliveryJob] = []
        jobs.reserveCapacity(rows.count)
        for r in rows {
            guard let a = accepted[r.notifRow] else {
                unreadable.append(r)
                continue
            }
            var j = DeliveryJob(
                id: UInt64(r.id), messageID: r.messageID, target: r.target, accepted: a, maxAttempts: r.maxAttempts,
                now: Date(timeIntervalSince1970: r.enqueuedAt))
            j.storeRow = r.notifRow
            j.attempts = r.attempts
            j.credentialRetryUsed = r.credentialRetryUsed
            j.notBefore = Date(timeIntervalSince1970: r.notBefore)
            j.lastError = r.lastError
            j.state = DeliveryState(code: .pending, attempts: r.attempts, notBefore: j.notBefore, lastError: r.lastError, providerID: nil)
            jobs.append(j)
        }
        var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        var read: [ClosedRange<Int64>]?
        let more: Bool = state.withLockedValue { s in
            s.held += rows.count
            for r in rows { s.notifications.leasedBack(r.notifRow) }
            if s.platforms[platform] == nil { s.platforms[platform] = PlatformState() }
            switch source {
            case .parked:
                s.platforms[platform]!.readingParked = false
                s.platforms[platform]!.parkedReadFailed = 0
            case .lease(let limit):
                s.platforms[platform]!.fetching = false
                s.platforms[platform]!.storeMayHaveWork = rows.count >= limit
            }
            for i in jobs.indices { place(jobs[i], in: &s, now: tNow, resume: &resume) }
            s.outstanding += unreadable.count
            read = readParkedIfNeeded(platform, in: &s, now: tNow.timeIntervalSince1970)
            return requestLeaseIfNeeded(platform, in: &s, now: tNow.timeIntervalSince1970)
        }
        for (c, j) in resume { c.resume(returning: j) }
        if more { signal.yield() }
        if let read { startReadingParked(platform, read) }
        for r in unreadable {
            // A stored notification that no longer decodes cannot be sent: report it failed.
            let a = AcceptedNotification(notifID: "", notification: PushNotification(platform: platform), prepared: nil)
            var j = DeliveryJob(id: UInt64(r.id), messageID: r.messageID, target: r.target, accepted: a, maxAttempts: r.maxAttempts, now: tNow)
            j.attempts = r.attempts
            Task { await self.complete(j, outcome: .failed(reason: "stored notification unreadable", tokenDead: false)) }
        }
    }
}
