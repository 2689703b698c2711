import Foundation
import PushgateCore

/// Where one delivery is in its life. The same enum in memory (`DeliveryJob.state`, the memory
/// engine's status records) and in both SQL stores (column `state` holds `code`, `not_before` and
/// `last_error` the retry details).
public enum DeliveryState: Sendable, Equatable {
    case queued
    case retrying(nextTry: Date, lastError: String?)
    /// `detail`: what the provider's answer told beyond the acceptance (`SendOutcome.delivered`).
    case delivered(providerID: String?, detail: String? = nil)
    case failed(reason: String)
    /// Not sent, not a failure: a duplicate (`dedup_key`) or replaced in its coalescing window.
    case skipped(SkipReason)

    /// The stored form (column `state`; values unchanged since schema version 1; 3 and 4 since 3;
    /// 5 and 6 are finished states an older gateway reads as finished too: it leases state 0 only).
    public enum Code: Int, Sendable {
        case pending = 0
        case delivered = 1
        case failed = 2
        case duplicate = 3
        case coalesced = 4
        case cancelled = 5
        case quietHours = 6
    }

    public var code: Code {
        switch self {
        case .queued, .retrying: return .pending
        case .delivered: return .delivered
        case .failed: return .failed
        case .skipped(.duplicate): return .duplicate
        case .skipped(.coalesced): return .coalesced
        case .skipped(.cancelled): return .cancelled
        case .skipped(.quietHours): return .quietHours
        }
    }

    public var isFinal: Bool { code != .pending }

    /// The state of a stored row.
    public init(code: Code, attempts: Int, notBefore: Date, lastError: String?, providerID: String?) {
        switch code {
        case .delivered:
            let (id, detail) = Self.splitStoredProviderText(providerID)
            self = .delivered(providerID: id, detail: detail)
        case .failed: self = .failed(reason: lastError ?? "")
        case .duplicate: self = .skipped(.duplicate)
        case .coalesced: self = .skipped(.coalesced)
        case .cancelled: self = .skipped(.cancelled)
        case .quietHours: self = .skipped(.quietHours)
        case .pending:
            self = attempts > 0 || lastError != nil ? .retrying(nextTry: notBefore, lastError: lastError) : .queued
        }
    }

    /// The separator of the provider id and the detail in a delivered delivery's stored text (a
    /// control character no provider id is kept with).
    static let detailSeparator: Character = "\u{1F}"

    /// A delivered delivery's provider id and detail as one stored text (the stores' `provider_id`
    /// column, the memory engine's status): the id, then, when there is a detail, U+001F and the
    /// detail. A text without U+001F (every store written before details were kept) is an id alone.
    public static func storedProviderText(providerID: String?, detail: String?) -> String? {
        guard let detail, !detail.isEmpty else { return providerID }
        let id = (providerID ?? "").filter { $0 != detailSeparator }
        return id + String(detailSeparator) + detail.filter { $0 != detailSeparator }
    }

    /// `storedProviderText`'s parts again (an empty id is nil).
    public static func splitStoredProviderText(_ text: String?) -> (providerID: String?, detail: String?) {
        guard let text, let sep = text.firstIndex(of: detailSeparator) else { return (text, nil) }
        let id = String(text[..<sep])
        let detail = String(text[text.index(after: sep)...])
        return (id.isEmpty ? nil : id, detail.isEmpty ? nil : detail)
    }

    public init(_ outcome: FinalOutcome) {
        switch outcome {
        case .delivered(let id, let detail): self = .delivered(providerID: id, detail: detail)
        case .failed(let reason, _): self = .failed(reason: reason)
        case .skipped(let why): self = .skipped(why)
        }
    }
}

/// How a finished delivery ended its life.
public enum FinishPhase: Sendable, Equatable {
    /// After one or more attempts (or when a stored notification could not be rendered again).
    case afterSending
    /// Refused before any network call (payload too large, bad token): counted, fed back, logged.
    case beforeSending
    /// Its platform is not served: reported in the answer and the status only.
    case notServed
    /// Not sent and not failed (`SkipReason`): in the status only; not counted, no feedback.
    case skipped
}

/// What happened to a delivery: the one stream that stats, metrics, feedback, sync waiters, the
/// memory engine's status records and the logs read (`DeliveryEventSink`).
public enum DeliveryEvent: Sendable {
    /// A request was taken: gorush's `counts` and the deliveries queued.
    case submitted(counts: Int, queued: Int)
    /// A delivery exists (queued, or about to be finished before sending).
    case accepted(DeliveryJob)
    /// One attempt came back (the job holds the attempt count after it).
    case attempted(DeliveryJob, outcome: SendOutcome, started: Date, ended: Date)
    /// The delivery goes back to the queue until `job.notBefore` (reason in `job.lastError`).
    case retrying(DeliveryJob, outcome: SendOutcome)
    /// Over for good. `failure` is the gorush log entry of a failed delivery.
    case finished(DeliveryJob, FinalOutcome, phase: FinishPhase, failure: LogEntry?)
}

/// A reader of the delivery event stream. Called in line by the dispatcher: keep it short.
public protocol DeliveryEventSink: Sendable {
    /// Told every event of every delivery, several per delivery: `borrowing`, and read with
    /// `switch`, so that matching a case does not copy the job out of the event (`if case`, or a
    /// parameter taken the default way, copied the case's whole payload, a retain and release of
    /// each field of the job, per sink and event).
    func record(_ event: borrowing DeliveryEvent)
}

/// What happens to a delivery (the input of `DeliveryLifecycle.step`).
public enum DeliveryInput: Sendable, Equatable {
    /// The request was taken.
    case accepted
    /// Refused before any network call; `served` is false when its platform is not enabled.
    case rejected(reason: String, served: Bool)
    /// The provider answered attempt `job.attempts + 1`, started at `started` (ended at `now`).
    case attempted(SendOutcome, started: Date)
    /// A job reloaded from a store cannot be rendered again.
    case unpreparable(reason: String)
    /// This process's lease on the job ran out: another process may take it.
    case leaseExpired
    /// The gateway stops before the job ended.
    case shutdown
    /// Not to be sent: a duplicate found when it was queued (already stored so by the queue),
    /// replaced in its coalescing window when its turn came, cancelled, or due outside its
    /// `deliver_between` window with `"quiet": "drop"`.
    case skipped(SkipReason)
    /// Due outside its `deliver_between` window: it waits, unattempted, until `until`.
    case deferred(until: Date)
}

/// What the caller of `step` must do, in order.
public enum DeliveryEffect: Sendable {
    /// Hand the job to the queue driver (all jobs of a request at once).
    case enqueue
    /// Store the job as failed before sending (status record only, never sent).
    case recordFailedBeforeSending(reason: String)
    /// Put the job back in the queue for a later attempt.
    case reschedule
    /// The queue forgets the job (the store marks it finished).
    case complete(FinalOutcome)
    /// Leave the job pending where it is stored (for another process or the next start).
    case release
    /// Tell the sinks.
    case emit(DeliveryEvent)
}

/// The next state of a delivery and what to do about it.
public struct DeliveryTransition: Sendable {
    public var job: DeliveryJob
    public var effects: [DeliveryEffect]
}

/// One delivery's life as a pure function: a job plus an input gives the next job and the effects.
/// No clock, random source or I/O inside: the caller passes the time and the random draw.
public struct DeliveryLifecycle: Sendable {
    public var policy: RetryPolicy
    /// Makes the gorush log entry of a failed delivery (token masking, message cut).
    public var report: @Sendable (DeliveryJob, String) -> LogEntry

    /// The provider modules' rules of each platform (a deadline from `expiration`).
    public var rules: [Platform: PlatformRules]

    public init(
        policy: RetryPolicy, rules: [Platform: PlatformRules] = [:], report: @escaping @Sendable (DeliveryJob, String) -> LogEntry
    ) {
        self.policy = policy
        self.rules = rules
        self.report = report
    }

    public func step(_ job: DeliveryJob, _ input: DeliveryInput, now: Date, random: Double = 0) -> DeliveryTransition {
        var job = job
        switch input {
        case .accepted:
            job.state = .queued
            return DeliveryTransition(job: job, effects: [.enqueue, .emit(.accepted(job))])

        case .rejected(let reason, let served):
            job.state = .failed(reason: reason)
            let final = FinalOutcome.failed(reason: reason, tokenDead: false)
            return DeliveryTransition(
                job: job,
                effects: [
                    .recordFailedBeforeSending(reason: reason),
                    .emit(.accepted(job)),
                    .emit(.finished(job, final, phase: served ? .beforeSending : .notServed, failure: report(job, reason))),
                ])

        case .unpreparable(let reason):
            return finish(job, .failed(reason: reason, tokenDead: false), before: [])

        case .attempted(let outcome, let started):
            guard !job.state.isFinal else { return DeliveryTransition(job: job, effects: []) }
            job.attempts += 1
            let attempted = DeliveryEffect.emit(.attempted(job, outcome: outcome, started: started, ended: now))
            let decision = policy.decide(
                outcome: outcome, attempt: job.attempts, maxAttempts: job.maxAttempts,
                credentialRetryUsed: job.credentialRetryUsed, now: now,
                deadline: job.accepted.notification.retryDeadline(acceptedAt: job.enqueuedAt, rules: rules[job.platform]), random: random)
            switch decision {
            case .finish(let final):
                return finish(job, final, before: [attempted])
            case .retry(let at, let reason):
                job.notBefore = at
                job.lastError = reason
                job.state = .retrying(nextTry: at, lastError: reason)
                // Told before the job is back in the queue: a worker may finish it at once.
                return DeliveryTransition(job: job, effects: [attempted, .emit(.retrying(job, outcome: outcome)), .reschedule])
            case .retryWithFreshCredentials(let reason):
                // The refused attempt does not count: the provider has new credentials.
                job.credentialRetryUsed = true
                job.attempts -= 1
                job.lastError = reason
                job.notBefore = now
                job.state = .retrying(nextTry: now, lastError: reason)
                return DeliveryTransition(job: job, effects: [attempted, .emit(.retrying(job, outcome: outcome)), .reschedule])
            }

        case .skipped(let why):
            guard !job.state.isFinal else { return DeliveryTransition(job: job, effects: []) }
            job.state = .skipped(why)
            let final = FinalOutcome.skipped(why)
            return DeliveryTransition(job: job, effects: [.complete(final), .emit(.finished(job, final, phase: .skipped, failure: nil))])

        case .deferred(let until):
            guard !job.state.isFinal else { return DeliveryTransition(job: job, effects: []) }
            job.notBefore = until
            job.state = job.attempts > 0 ? .retrying(nextTry: until, lastError: job.lastError) : .queued
            return DeliveryTransition(job: job, effects: [.reschedule])

        case .leaseExpired, .shutdown:
            // A pending job stays pending where it is stored; a finished one has nothing left to do.
            return DeliveryTransition(job: job, effects: job.state.isFinal ? [] : [.release])
        }
    }

    /// (`consuming`: `step`'s own copy of the job is handed over, not copied again.)
    private func finish(_ job: consuming DeliveryJob, _ final: FinalOutcome, before: [DeliveryEffect]) -> DeliveryTransition {
        var job = job
        job.state = DeliveryState(final)
        var failure: LogEntry?
        if case .failed(let reason, _) = final { failure = report(job, reason) }
        return DeliveryTransition(
            job: job, effects: before + [.complete(final), .emit(.finished(job, final, phase: .afterSending, failure: failure))])
    }
}
