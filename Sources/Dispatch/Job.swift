import Foundation
import PushgateCore

/// One accepted notification, shared by all of its deliveries (never copied per token).
public final class AcceptedNotification: Sendable {
    public let notifID: String
    public let notification: PushNotification
    /// The provider's rendering, made once at ingest (nil when reloaded from a store before re-preparing).
    public let prepared: (any PreparedPush)?
    /// The app it was accepted for (`apps[].id`, or `AppID.defaultApp`): its deliveries are sent with
    /// that app's providers and credentials, after a restart too.
    public let app: String
    /// Set when the notification's rendering was over the provider's limit and its `fallback` was
    /// accepted instead (`notification` is then the fallback).
    public let fallback: FallbackInfo?
    /// The W3C `traceparent` of the request's ingest span (nil: tracing off, or not traced): each
    /// delivery attempt's span is its child, after a restart or on another gateway too (the durable
    /// stores keep it with the notification, column `traceparent`).
    public let traceParent: String?

    public init(
        notifID: String, notification: PushNotification, prepared: (any PreparedPush)?, app: String = AppID.defaultApp,
        fallback: FallbackInfo? = nil, traceParent: String? = nil
    ) {
        self.notifID = notifID
        self.notification = notification
        self.prepared = prepared
        self.app = app
        self.fallback = fallback
        self.traceParent = traceParent
    }
}

/// Why a notification was sent as its `fallback`: the sizes of both renderings and the limit.
public struct FallbackInfo: Sendable, Codable, Equatable {
    /// The notification's own rendering, in bytes (over `limit`).
    public var payloadBytes: Int
    /// The provider's limit, in bytes.
    public var limit: Int
    /// The fallback's rendering, in bytes.
    public var fallbackBytes: Int

    public init(payloadBytes: Int, limit: Int, fallbackBytes: Int) {
        self.payloadBytes = payloadBytes
        self.limit = limit
        self.fallbackBytes = fallbackBytes
    }

    enum CodingKeys: String, CodingKey {
        case payloadBytes = "payload_bytes"
        case limit
        case fallbackBytes = "fallback_bytes"
    }

    /// `{"payload_bytes":N,"limit":N,"fallback_bytes":N}`.
    public func write(into w: inout JSONWriter) {
        var first = true
        w.raw("{")
        writeMembers(into: &w, first: &first)
        w.raw("}")
    }

    /// The three members, inside an object being written (the `fallbacks` entries of the push answer).
    public func writeMembers(into w: inout JSONWriter, first: inout Bool) {
        w.key("payload_bytes", first: &first)
        w.int(payloadBytes)
        w.key("limit", first: &first)
        w.int(limit)
        w.key("fallback_bytes", first: &first)
        w.int(fallbackBytes)
    }

    /// Compact JSON (the durable stores' `notifications.fallback` column).
    public var jsonString: String {
        var w = JSONWriter(reservingCapacity: 64)
        write(into: &w)
        return w.string
    }

    /// From `jsonString`; nil for anything else (a damaged column reads as no fallback).
    public init?(jsonString s: String) {
        guard let d = s.data(using: .utf8), let v = try? JSONDecoder().decode(FallbackInfo.self, from: d) else { return nil }
        self = v
    }
}

/// A notification of a request sent as its fallback (the `fallbacks` of the `/api/push` answer).
public struct FallbackUse: Sendable, Equatable {
    public var notifID: String
    public var platform: Platform
    public var info: FallbackInfo

    public init(notifID: String, platform: Platform, info: FallbackInfo) {
        self.notifID = notifID
        self.platform = platform
        self.info = info
    }
}

/// One delivery: one notification to one target, with its retry state.
public struct DeliveryJob: Sendable {
    /// Unique per delivery inside this process (and the store key for durable queues).
    public var id: UInt64
    /// Stable message identity across retries (sent as `apns-id`).
    public var messageID: String
    public var target: PushTarget
    public var accepted: AcceptedNotification
    /// Attempts made so far.
    public var attempts: Int
    public var maxAttempts: Int
    public var credentialRetryUsed: Bool
    /// Not to be sent before this time.
    public var notBefore: Date
    public var enqueuedAt: Date
    public var lastError: String?
    /// Sync-mode request waiting for this delivery, if any.
    public var waiterID: UInt64?
    /// Its position in that request (notification order, then token order): where the waiter keeps its
    /// outcome. In memory only, like `waiterID` (a durable queue gives the job its row id as `id`).
    public var waiterPosition: Int = 0
    /// The row of its notification in a durable queue's store (0: none). Set and read by the queue
    /// driver only: the SQLite store writes a job's row at its outcome and needs it there.
    public var storeRow: Int64 = 0
    /// Its index among its notification's targets (request order); -1 when not known (a job read
    /// back from a store: the event stream finds it in the notification).
    public var deliveryIndex: Int = -1
    /// Where the delivery is in its life (`DeliveryLifecycle`).
    public var state: DeliveryState

    public var platform: Platform { accepted.notification.platform }

    /// Waiting for a later time given at acceptance (`send_at`, `delay_seconds`, `deliver_between`),
    /// never attempted: left in a durable store until due, not held in memory.
    public var isScheduled: Bool { attempts == 0 && lastError == nil && notBefore > enqueuedAt }

    public init(
        id: UInt64, messageID: String, target: PushTarget, accepted: AcceptedNotification, maxAttempts: Int, now: Date, waiterID: UInt64? = nil
    ) {
        self.id = id
        self.messageID = messageID
        self.target = target
        self.accepted = accepted
        self.attempts = 0
        self.maxAttempts = maxAttempts
        self.credentialRetryUsed = false
        self.notBefore = now
        self.enqueuedAt = now
        self.lastError = nil
        self.waiterID = waiterID
        self.state = .queued
    }
}

public struct QueueFullError: Error, Sendable, Equatable, CustomStringConvertible {
    public var pending: Int
    public var capacity: Int
    /// Seconds the client should wait before trying again.
    public var retryAfter: Int
    /// Set when an app's own share (`apps[].max_pending`) is full, not the whole queue.
    public var app: String?
    public init(pending: Int, capacity: Int, retryAfter: Int = 1, app: String? = nil) {
        self.pending = pending
        self.capacity = capacity
        self.retryAfter = retryAfter
        self.app = app
    }
    public var description: String {
        if let app { return "app \(app)'s share of the queue is full (\(pending) pending, max_pending \(capacity))" }
        return "queue is full (\(pending) pending, capacity \(capacity))"
    }
}

/// What `QueueDriver.cancel` did: the deliveries it ended (to be told as `cancelled`), and how many
/// of the notification's deliveries it left because a worker (here, or another gateway sharing the
/// store) holds them: those are sent or fail as usual, never both sent and cancelled.
public struct CancelledDeliveries: Sendable {
    public var jobs: [DeliveryJob] = []
    /// Held by a worker or leased by another process (nil: the engine does not know; the status tells).
    public var inFlight: Int?
    public init(jobs: [DeliveryJob] = [], inFlight: Int? = nil) {
        self.jobs = jobs
        self.inFlight = inFlight
    }

    /// Picks the jobs of `notifID` of `app` (nil: any app).
    public static func matcher(notifID: String, app: String?) -> @Sendable (DeliveryJob) -> Bool {
        { j in j.accepted.notifID == notifID && (app == nil || j.accepted.app == app) }
    }
}

/// The queue behind the workers. In-memory here; durable drivers (SQLite, PostgreSQL) implement the same.
public protocol QueueDriver: Sendable {
    /// Adds all jobs or none: throws `QueueFullError` when they would not fit. Applies `dedup_key`
    /// and coalescing in the same step (atomically with the insert in a durable store): returns one
    /// disposition per job, in order.
    @discardableResult
    func enqueue(_ jobs: [DeliveryJob]) async throws -> [EnqueueDisposition]
    /// The next job for `platform` whose `notBefore` has come; waits. Nil once the queue is shut down.
    func next(platform: Platform) async -> DeliveryJob?
    /// The next job for `platform` if one is ready now, without waiting (a worker that just finished
    /// a delivery takes it instead of ending and a new task being made for it); nil otherwise. The
    /// default: nil (the dispatcher then goes through `next`).
    func nextIfReady(platform: Platform) -> DeliveryJob?
    /// Puts a leased job back for a later attempt.
    func reschedule(_ job: DeliveryJob) async
    /// The job is over (delivered or failed for good).
    func complete(_ job: DeliveryJob, outcome: FinalOutcome) async
    /// Jobs accepted and not yet complete (queued, leased or waiting to retry).
    var pendingCount: Int { get }
    var capacity: Int { get }
    /// Wakes every waiting `next` with nil.
    func shutdown()
    /// True when jobs left at shutdown are kept (in a store) for the next start.
    var isDurable: Bool { get }
    /// Keeps a record of deliveries that failed before any network call (payload too large, bad
    /// token, platform not enabled) for the delivery status, each with its reason; they are never
    /// sent. Durable engines store them; the default does nothing (the memory engine's status comes
    /// from the delivery event stream).
    func recordFailedBeforeSending(_ failures: [(job: DeliveryJob, reason: String)]) async throws
    /// Whether a job held for the end of its coalescing window was replaced by a later push since
    /// (asked by the worker before sending it; `DeliveryJob.isHeldForCoalescing`).
    func wasReplaced(_ job: DeliveryJob) async -> Bool
    /// `enqueue` and `recordFailedBeforeSending` of one request together: a durable store writes
    /// both in one transaction, so a request is either stored whole (its failed deliveries' status
    /// included) or refused whole. The default does one after the other.
    @discardableResult
    func enqueue(_ jobs: [DeliveryJob], failedBeforeSending: [(job: DeliveryJob, reason: String)]) async throws -> [EnqueueDisposition]
    /// Why the store cannot take writes now (nil: it can, or there is no store). Readiness is down
    /// while it is set.
    var storeProblem: StoreUnavailableError? { get }
    /// Ends every delivery of `notifID` (of `app`; nil: any app) not yet sent and not held by a
    /// worker: taken out of the queue (a durable store marks their rows cancelled in one
    /// transaction) and returned, for the caller to tell as `cancelled`. The default cancels nothing.
    func cancel(notifID: String, app: String?) async throws -> CancelledDeliveries
}

extension QueueDriver {
    public var isDurable: Bool { false }
    public func nextIfReady(platform: Platform) -> DeliveryJob? { nil }
    public func recordFailedBeforeSending(_ failures: [(job: DeliveryJob, reason: String)]) async throws {}
    public func wasReplaced(_ job: DeliveryJob) async -> Bool { false }
    public var storeProblem: StoreUnavailableError? { nil }
    public func cancel(notifID: String, app: String?) async throws -> CancelledDeliveries { CancelledDeliveries() }
    @discardableResult
    public func enqueue(_ jobs: [DeliveryJob], failedBeforeSending: [(job: DeliveryJob, reason: String)]) async throws -> [EnqueueDisposition] {
        let d = jobs.isEmpty ? [] : try await enqueue(jobs)
        if !failedBeforeSending.isEmpty { try await recordFailedBeforeSending(failedBeforeSending) }
        return d
    }
}
