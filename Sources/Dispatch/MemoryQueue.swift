import DequeModule
import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// In-memory queue driver: per-platform FIFO of ready jobs, a min-heap of jobs waiting to retry,
/// and waiting workers handed jobs directly. Bounded by `capacity`.
public final class MemoryQueue: QueueDriver {
    private struct State {
        var queues: [Platform: PlatformJobs] = [:]
        var pending = 0
        var shutdown = false
        var guards: MemoryGuards
        /// When the sleeping timer wakes (nil while it is awake), and its sleep to cut short.
        var timerWake: Date?
        var sleeper: Task<Void, Never>?
    }

    /// The timer's longest sleep when no retry is waiting (a placed retry wakes it sooner).
    static let idleSleep: Double = 3600

    private let state: NIOLockedValueBox<State>

    /// Runs `body` on the platform's queue in place (no copy-on-write of its arrays).
    @inline(__always)
    private static func withQueue<R>(_ s: inout State, _ platform: Platform, _ body: (inout PlatformJobs) -> R) -> R {
        body(&s.queues[platform, default: PlatformJobs()])
    }
    public let capacity: Int
    private let now: @Sendable () -> Date
    private let pollInterval: Duration
    private let timerTask = NIOLockedValueBox<Task<Void, Never>?>(nil)

    /// - Parameter dedupTTL: how long a `dedup_key` claim holds (`core.idempotency_ttl`).
    public init(
        capacity: Int, pollInterval: Duration = .milliseconds(10), dedupTTL: TimeInterval = 86_400, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.state = NIOLockedValueBox(State(guards: MemoryGuards(ttl: dedupTTL)))
        self.capacity = capacity
        self.now = now
        self.pollInterval = pollInterval
        // The timer sleeps until the earliest retry is due (at least `pollInterval`), or until a
        // retry due earlier is placed: an idle queue does not wake.
        let task = Task { [weak self] in
            while !Task.isCancelled {
                guard let sleeper = self?.armTimer() else { return }
                await withTaskCancellationHandler {
                    await sleeper.value
                } onCancel: {
                    sleeper.cancel()
                }
                guard let self else { return }
                if self.promoteDue() { return }
            }
        }
        timerTask.withLockedValue { $0 = task }
    }

    deinit { timerTask.withLockedValue { $0?.cancel() } }

    public var pendingCount: Int { state.withLockedValue { $0.pending } }

    @discardableResult
    public func enqueue(_ jobs: [DeliveryJob]) async throws -> [EnqueueDisposition] {
        try enqueueSync(jobs)
    }

    @discardableResult
    func enqueueSync(_ jobs: [DeliveryJob]) throws -> [EnqueueDisposition] {
        var toResume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        let guarded = jobs.contains { $0.dedupKey != nil || $0.coalesceSeconds != nil }
        let dispositions: [EnqueueDisposition] = try state.withLockedValue { s in
            if s.pending + jobs.count > capacity {
                throw QueueFullError(pending: s.pending, capacity: capacity)
            }
            let t = now()
            var jobs = jobs
            let d = guarded ? s.guards.admit(&jobs, now: t) : jobs.map { .queued(notBefore: $0.notBefore) }
            for (i, job) in jobs.enumerated() {
                guard case .queued = d[i] else { continue }
                s.pending += 1
                // Mutated in place (a copy out of the dictionary would make every append copy the whole ready list).
                if let w = Self.withQueue(&s, job.platform, { $0.place(job, now: t) }) {
                    toResume.append((w, job))
                }
                Self.wakeTimerIfEarlier(job, now: t, in: &s)
            }
            return d
        }
        for (c, job) in toResume { c.resume(returning: job) }
        return dispositions
    }

    public func wasReplaced(_ job: DeliveryJob) async -> Bool {
        state.withLockedValue { $0.guards.takeReplaced(job) }
    }

    public func next(platform: Platform) async -> DeliveryJob? {
        await withCheckedContinuation { (c: CheckedContinuation<DeliveryJob?, Never>) in
            let job: DeliveryJob?? = state.withLockedValue { s in
                if s.shutdown { return .some(nil) }
                return Self.withQueue(&s, platform) { q -> DeliveryJob?? in
                    if let j = q.ready.popFirst() { return .some(j) }
                    q.waiters.append(c)
                    return .none
                }
            }
            if let job { c.resume(returning: job) }
        }
    }

    public func nextIfReady(platform: Platform) -> DeliveryJob? {
        state.withLockedValue { s in
            if s.shutdown { return nil }
            return Self.withQueue(&s, platform) { $0.ready.popFirst() }
        }
    }

    public func reschedule(_ job: DeliveryJob) async {
        var resume: CheckedContinuation<DeliveryJob?, Never>?
        let t = now()
        state.withLockedValue { s in
            resume = Self.withQueue(&s, job.platform) { $0.place(job, now: t) }
            Self.wakeTimerIfEarlier(job, now: t, in: &s)
        }
        resume?.resume(returning: job)
    }

    public func complete(_ job: DeliveryJob, outcome: FinalOutcome) async {
        state.withLockedValue { $0.pending -= 1 }
    }

    /// Takes the jobs of `notifID` (of `app`; nil: any app) still waiting here (ready, scheduled or
    /// waiting to retry) out of the queue; those a worker holds are sending now (`inFlight`).
    public func cancel(notifID: String, app: String?) async throws -> CancelledDeliveries {
        let match = CancelledDeliveries.matcher(notifID: notifID, app: app)
        return state.withLockedValue { s in
            var out = CancelledDeliveries()
            for p in Array(s.queues.keys) {
                Self.withQueue(&s, p) { q in
                    out.jobs += q.ready.remove(where: match)
                    out.jobs += q.delayed.remove(where: match)
                }
            }
            s.pending -= out.jobs.count
            return out
        }
    }

    /// Starts the timer's sleep until the earliest delayed job is due; nil once shut down.
    private func armTimer() -> Task<Void, Never>? {
        state.withLockedValue { s in
            if s.shutdown { return nil }
            let t = now()
            var due = t.addingTimeInterval(Self.idleSleep)
            for q in s.queues.values { if let top = q.delayed.peek, top.notBefore < due { due = top.notBefore } }
            let minimum = Double(pollInterval.components.seconds) + Double(pollInterval.components.attoseconds) / 1e18
            let wait = max(minimum, due.timeIntervalSince(t))
            s.timerWake = t.addingTimeInterval(wait)
            let task = Task { _ = try? await Task.sleep(nanoseconds: UInt64(wait * 1e9)) }
            s.sleeper = task
            return task
        }
    }

    /// After placing `job` (lock held): a job delayed past now but due before the timer wakes wakes it.
    private static func wakeTimerIfEarlier(_ job: DeliveryJob, now t: Date, in s: inout State) {
        guard job.notBefore > t, let wake = s.timerWake, job.notBefore < wake else { return }
        s.timerWake = nil
        s.sleeper?.cancel()
    }

    /// Moves due retries to the ready lists. Returns true once shut down.
    @discardableResult
    func promoteDue() -> Bool {
        var toResume: [(CheckedContinuation<DeliveryJob?, Never>, DeliveryJob)] = []
        let stop: Bool = state.withLockedValue { s in
            s.timerWake = nil
            s.sleeper = nil
            if s.shutdown { return true }
            let t = now()
            for platform in Array(s.queues.keys) {
                guard let top = s.queues[platform]?.delayed.peek, top.notBefore <= t else { continue }
                toResume += Self.withQueue(&s, platform) { $0.promoteDue(now: t) }
            }
            return false
        }
        for (c, job) in toResume { c.resume(returning: job) }
        return stop
    }

    public func shutdown() {
        let waiters: [CheckedContinuation<DeliveryJob?, Never>] = state.withLockedValue { s in
            s.shutdown = true
            var all: [CheckedContinuation<DeliveryJob?, Never>] = []
            for k in s.queues.keys { all += s.queues[k]!.takeWaiters() }
            return all
        }
        for w in waiters { w.resume(returning: nil) }
        timerTask.withLockedValue { $0?.cancel() }
        state.withLockedValue { $0.sleeper?.cancel() }
    }

    /// Jobs waiting for a time after `date` (scheduled, or retries), all platforms. O(n).
    public func waitingCount(dueAfter date: Date) -> Int {
        state.withLockedValue { s in s.queues.values.reduce(0) { $0 + $1.delayed.count { $0.notBefore > date } } }
    }

    /// Ready + delayed jobs per platform (for stats and tests).
    public func depth(platform: Platform) -> (ready: Int, delayed: Int) {
        state.withLockedValue { s in
            let q = s.queues[platform]
            return (q?.ready.count ?? 0, q?.delayed.count ?? 0)
        }
    }
}

/// One platform's jobs held in memory: ready FIFO, retry heap, and the workers waiting for a job.
/// Shared by the memory queue and the durable queues' lease buffer. Hand-offs to waiters are
/// returned, to be resumed after the caller's lock is released.
public struct PlatformJobs: Sendable {
    public typealias Waiter = CheckedContinuation<DeliveryJob?, Never>

    public var ready = JobFIFO()
    public var delayed = JobHeap()
    public var waiters: [Waiter] = []

    public init() {}

    /// Files a job: into the retry heap when not due yet, else to a waiting worker (returned) when
    /// `handToWaiter`, else onto the ready list.
    public mutating func place(_ job: DeliveryJob, now: Date, handToWaiter: Bool = true) -> Waiter? {
        if job.notBefore > now {
            delayed.push(job)
        } else if handToWaiter, !waiters.isEmpty {
            return waiters.removeFirst()
        } else {
            ready.append(job)
        }
        return nil
    }

    /// Moves retries that are due to waiting workers (returned) or the ready list.
    public mutating func promoteDue(now: Date) -> [(Waiter, DeliveryJob)] {
        var handed: [(Waiter, DeliveryJob)] = []
        while let top = delayed.peek, top.notBefore <= now {
            let job = delayed.pop()!
            if !waiters.isEmpty {
                handed.append((waiters.removeFirst(), job))
            } else {
                ready.append(job)
            }
        }
        return handed
    }

    /// Removes and returns every waiting worker (shutdown).
    public mutating func takeWaiters() -> [Waiter] {
        defer { waiters = [] }
        return waiters
    }
}

/// A FIFO of ready jobs (swift-collections' `Deque`: a pop moves the job out, no copy, no shifting).
/// Shared by the memory queue and the durable queues' in-memory lease buffer.
public struct JobFIFO: Sendable {
    private var items = Deque<DeliveryJob>()
    public init() {}
    public var count: Int { items.count }

    public mutating func append(_ job: DeliveryJob) { items.append(job) }

    /// Removes and returns the jobs `match` picks, keeping the others in order. O(n).
    public mutating func remove(where match: (DeliveryJob) -> Bool) -> [DeliveryJob] {
        guard items.contains(where: match) else { return [] }
        let removed = Array(items.lazy.filter(match))
        items.removeAll(where: match)
        return removed
    }

    public mutating func popFirst() -> DeliveryJob? { items.popFirst() }
}

/// A binary min-heap of jobs by `notBefore` (ties by id, so equal times stay FIFO).
/// Shared by the memory queue and the durable queues' in-memory retry schedule.
public struct JobHeap: Sendable {
    private var items: [DeliveryJob] = []
    public init() {}
    public var count: Int { items.count }
    public var peek: DeliveryJob? { items.first }

    private static func less(_ a: DeliveryJob, _ b: DeliveryJob) -> Bool {
        a.notBefore < b.notBefore || (a.notBefore == b.notBefore && a.id < b.id)
    }

    public mutating func push(_ job: DeliveryJob) {
        items.append(job)
        var i = items.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            if Self.less(items[i], items[p]) {
                items.swapAt(i, p)
                i = p
            } else {
                break
            }
        }
    }

    /// How many jobs `match` picks. O(n).
    public func count(where match: (DeliveryJob) -> Bool) -> Int { items.reduce(0) { $0 + (match($1) ? 1 : 0) } }

    /// Removes and returns the jobs `match` picks (the heap is rebuilt when any is removed). O(n).
    public mutating func remove(where match: (DeliveryJob) -> Bool) -> [DeliveryJob] {
        guard items.contains(where: match) else { return [] }
        let removed = items.filter(match)
        let kept = items.filter { !match($0) }
        items = []
        items.reserveCapacity(kept.count)
        for j in kept { push(j) }
        return removed
    }

    public mutating func pop() -> DeliveryJob? {
        guard !items.isEmpty else { return nil }
        items.swapAt(0, items.count - 1)
        let top = items.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1
            let r = l + 1
            var m = i
            if l < items.count, Self.less(items[l], items[m]) { m = l }
            if r < items.count, Self.less(items[r], items[m]) { m = r }
            if m == i { break }
            items.swapAt(i, m)
            i = m
        }
        return top
    }
}
