import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// Accepting jobs: the request's jobs and its failures before sending, stored in one
/// transaction, then held here (sync-mode jobs and those within `maxHeld`) or left in the store.
extension DurableQueue {
    @discardableResult
    public func enqueue(_ jobs: [DeliveryJob]) async throws -> [EnqueueDisposition] {
        try await enqueue(jobs, failedBeforeSending: [])
    }

    /// The jobs and the status records of the request's deliveries that failed before sending, in
    /// one transaction: both are stored or neither.
    @discardableResult
    public func enqueue(_ jobs: [DeliveryJob], failedBeforeSending failures: [(job: DeliveryJob, reason: String)]) async throws
        -> [EnqueueDisposition]
    {
        guard !jobs.isEmpty else {
            try await recordFailedBeforeSending(failures)
            return []
        }
        let n = jobs.count
        let (room, parkedPlatforms) = try reserve(n)
        var leasing = 0
        var hold = [Bool](repeating: false, count: n)
        let t = now().timeIntervalSince1970
        let inserts: [NotificationInsert]
        let groups: [(accepted: AcceptedNotification, jobs: [Int])]
        let dedupUntil = t + options.dedupTTL
        do {
            (inserts, groups) = try Self.notificationInserts(jobs, createdAt: t) { j, i in
                // Held in memory: sync-mode jobs (their waiter is here) and async ones within the window.
                // A scheduled job is left in the store, leased by nobody, until it is due: any process
                // sharing the store may send it, a restart finds it, and a cancel ends it there.
                let scheduled = j.isScheduled
                let held =
                    !scheduled
                    && (j.waiterID != nil || (options.leaseOnEnqueue && leasing < room && !parkedPlatforms.contains(j.platform)))
                if held { leasing += 1 }
                hold[i] = held
                var row = JobInsert(
                    target: j.target, messageID: j.messageID, attempts: j.attempts, maxAttempts: j.maxAttempts,
                    notBefore: j.notBefore.timeIntervalSince1970, enqueuedAt: j.enqueuedAt.timeIntervalSince1970,
                    leased: held || (parksJobs && !scheduled))
                row.dedupKey = j.dedupKey
                row.dedupUntil = dedupUntil
                row.coalesceSeconds = j.coalesceSeconds
                return row
            }
        } catch {
            state.withLockedValue { $0.pendingDelta -= n }
            throw error
        }
        let committed: Inserted
        do {
            // The failed deliveries' rows come after the jobs' (their ids are not read).
            committed = try await commit(failures.isEmpty ? inserts : inserts + (try failedInserts(failures)))
        } catch {
            state.withLockedValue { $0.pendingDelta -= n }
            throw error
        }
        return takeCommitted(jobs, groups: groups, inserts: inserts, committed: committed, hold: hold, at: t)
    }

    /// Counts `n` new jobs as pending, or refuses them (the queue closed or full, the store refusing
    /// writes). Returns the room in memory for holding async jobs on enqueue (approximate across
    /// concurrent enqueues: the window is a memory bound, not an exact count) and the platforms
    /// with parked jobs (their new async jobs are parked behind them: first in, first out).
    private func reserve(_ n: Int) throws -> (room: Int, parkedPlatforms: [Platform]) {
        try state.withLockedValue { s in
            if s.finalized || s.finalizeRequested { throw QueueClosedError() }
            if let fault = s.fault { throw fault }
            let pending = max(0, s.pendingBase + s.pendingDelta)
            if pending + n > options.capacity { throw QueueFullError(pending: pending, capacity: options.capacity) }
            s.pendingDelta += n
            let parked = s.parked > 0 ? s.platforms.compactMap { $0.value.parked.isEmpty ? nil : $0.key } : []
            return (max(0, options.maxHeld - s.held - s.unwritten), parked)
        }
    }

    /// The committed jobs, with their store ids: a duplicate (`dedup_key`) ends here, never queued;
    /// a push held for its coalescing window gets its time. Jobs held in memory (`hold`) are placed
    /// for the workers; the others are left in the store (parked, or for a lease) and their
    /// notification's rendering is kept for when a worker here takes them.
    private func takeCommitted(
        _ jobs: [DeliveryJob], groups: [(accepted: AcceptedNotification, jobs: [Int])], inserts: [NotificationInsert], committed: Inserted,
        hold: [Bool], at t: Double
    ) -> [EnqueueDisposition] {
        let (ids, guarded) = committed
        let tNow = now()
        var resume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        var fetch = false
        var reads: [(Platform, [ClosedRange<Int64>])] = []
        var dispositions = jobs.map { EnqueueDisposition.queued(notBefore: $0.notBefore) }
        state.withLockedValue { s in
            for (gi, g) in groups.enumerated() {
                let (notifRow, jobIDs) = ids[gi]
                var leftInStore = 0
                for (k, i) in g.jobs.enumerated() {
                    var heldUntil: Date?
                    switch guarded.isEmpty ? nil : guarded[jobIDs[k]] {
                    case .duplicate:
                        // Stored as duplicate in the insert: never queued.
                        dispositions[i] = .duplicate
                        s.pendingDelta -= 1
                        continue
                    case .heldUntil(let until):
                        let end = Date(timeIntervalSince1970: until)
                        heldUntil = end
                        dispositions[i] = .queued(notBefore: end)
                    case nil:
                        break
                    }
                    if hold[i] {
                        // Copied only when held (a copy retains each field of the job).
                        var job = jobs[i]
                        job.id = UInt64(jobIDs[k])
                        job.storeRow = notifRow
                        if let heldUntil { job.notBefore = heldUntil }
                        s.held += 1
                        place(job, in: &s, now: tNow, resume: &resume)
                    } else {
                        leftInStore += 1
                        if parksJobs && !jobs[i].isScheduled {
                            s.changeParked(g.accepted.notification.platform) { $0.append(jobIDs[k]) }
                        }
                    }
                }
                if leftInStore > 0 {
                    // Keep the rendering for when a worker here leases these jobs back (a bounded
                    // number: beyond it the lease reads the notification back from the store).
                    // Without its targets (`storedForm`): the body's size is then what it holds.
                    let a = g.accepted
                    let kept = AcceptedNotification(
                        notifID: a.notifID, notification: Self.storedForm(a.notification), prepared: a.prepared, app: a.app, fallback: a.fallback,
                        traceParent: a.traceParent)
                    s.notifications.add(
                        notifRow,
                        NotificationCache.Entry(
                            accepted: kept, at: t, bytes: inserts[gi].body.utf8.count + (a.prepared?.payloadBytes ?? 0), leftInStore: leftInStore))
                    let p = g.accepted.notification.platform
                    if parksJobs {
                        if let r = readParkedIfNeeded(p, in: &s, now: t) { reads.append((p, r)) }
                    } else {
                        s.platforms[p, default: PlatformState()].storeMayHaveWork = true
                        if requestLeaseIfNeeded(p, in: &s, now: t) { fetch = true }
                    }
                }
            }
        }
        for (c, j) in resume { c.resume(returning: j) }
        if fetch { signal.yield() }
        for (p, r) in reads { startReadingParked(p, r) }
        return dispositions
    }

    public func recordFailedBeforeSending(_ failures: [(job: DeliveryJob, reason: String)]) async throws {
        guard !failures.isEmpty else { return }
        _ = try await commit(try failedInserts(failures))
    }

    /// The stored form of deliveries that failed before sending: finished rows, for the status.
    private func failedInserts(_ failures: [(job: DeliveryJob, reason: String)]) throws -> [NotificationInsert] {
        try Self.notificationInserts(failures.map(\.job), createdAt: now().timeIntervalSince1970) { j, i in
            JobInsert(
                target: j.target, messageID: j.messageID, attempts: 0, maxAttempts: j.maxAttempts,
                notBefore: j.notBefore.timeIntervalSince1970, enqueuedAt: j.enqueuedAt.timeIntervalSince1970,
                leased: false, failedReason: StoreText.clean(failures[i].reason))
        }.inserts
    }

    /// One stored notification (body encoded once) per accepted notification, in order of first
    /// appearance, holding its jobs' rows; `groups[k].jobs` are the indices in `jobs` of insert k's rows.
    private static func notificationInserts(_ jobs: [DeliveryJob], createdAt t: Double, _ row: (DeliveryJob, Int) -> JobInsert) throws
        -> (inserts: [NotificationInsert], groups: [(accepted: AcceptedNotification, jobs: [Int])])
    {
        var groupIndex: [ObjectIdentifier: Int] = [:]
        var groups: [(accepted: AcceptedNotification, jobs: [Int])] = []
        for i in jobs.indices {
            let key = ObjectIdentifier(jobs[i].accepted)
            if let g = groupIndex[key] {
                groups[g].jobs.append(i)
            } else {
                groupIndex[key] = groups.count
                groups.append((jobs[i].accepted, [i]))
            }
        }
        var inserts: [NotificationInsert] = []
        inserts.reserveCapacity(groups.count)
        let encoder = JSONEncoder()
        for g in groups {
            let body = String(decoding: try encoder.encode(storedForm(g.accepted.notification)), as: UTF8.self)
            var ins = NotificationInsert(
                notifID: g.accepted.notifID, app: g.accepted.app, platform: g.accepted.notification.platform, body: body, createdAt: t, jobs: [],
                fallback: g.accepted.fallback?.jsonString, traceParent: g.accepted.traceParent)
            ins.collapseID = g.accepted.notification.collapseID
            ins.jobs.reserveCapacity(g.jobs.count)
            for i in g.jobs { ins.jobs.append(row(jobs[i], i)) }
            inserts.append(ins)
        }
        return (inserts, groups)
    }

    /// A notification as stored and kept for its jobs left in the store: without its targets (tokens,
    /// subscriptions, channels), which its jobs carry one each (their rows or `jobs_data`). With
    /// them, the body stored each target a second time (100 tokens: ~7 KB of ~7.5), and encoding
    /// them was most of the cost of encoding it.
    static func storedForm(_ n: PushNotification) -> PushNotification {
        var n = n
        n.tokens = []
        n.subscriptions = nil
        n.channels = nil
        return n
    }

    /// Hands inserts to the writer's next group commit; returns each notification's row and job ids.
    func commit(_ inserts: [NotificationInsert]) async throws -> Inserted {
        try await handToWriter { s, r in
            s.work.batch.inserts += inserts
            s.work.insertGroups.append(InsertGroup(count: inserts.count, continuation: r))
        } unqueue: { s, r in
            guard let i = s.work.insertGroups.firstIndex(where: { $0.continuation === r }) else { return }
            let offset = s.work.insertGroups[..<i].reduce(0) { $0 + $1.count }
            s.work.batch.inserts.removeSubrange(offset..<(offset + s.work.insertGroups[i].count))
            s.work.insertGroups.remove(at: i)
        }
    }
}
