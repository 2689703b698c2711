import Foundation
import GatewayCore
import Logging
import NIOConcurrencyHelpers
import NIOSSL
@_exported import Providers
import PushDispatch
@_exported import PushgateCore
import QueueStore

/// What went wrong, in one line.
public enum PushgateError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The configuration value cannot be used: the key (`ios.key_id`, `queue.sqlite.path`,
    /// `trustRootsPEM[0]`) and the problem. `description` is the YAML path's one-line error.
    case invalidConfiguration(key: String, problem: String)
    /// The request is refused as `/api/push` refuses it (400): gorush's message, and the field
    /// (`notifications[0].collapse_id: …`) in `detail`.
    case invalidNotification(message: String, detail: String?)
    /// The queue (or the app's share of it) is full: nothing was queued; try again after `retryAfter` seconds.
    case queueFull(retryAfter: Int, detail: String)
    /// The app's `rate_limit`: try again after `retryAfter` seconds.
    case rateLimited(retryAfter: Int, detail: String)
    /// No such app is configured.
    case unknownApp(String)
    /// `shutdown()` was called.
    case shutDown
    /// The queue engine failed (a database error): the request was not queued.
    case storage(String)
    /// With keys configured, `apiKey` is missing or not one of them (HTTP's 401).
    case unauthorized(String)
    /// The key may not act for the app named (HTTP's 403).
    case forbidden(String)
    /// A request with this idempotency key is being processed: try again after `retryAfter` seconds (HTTP's 409).
    case idempotencyConflict(retryAfter: Int, detail: String)
    /// The idempotency key was used with another request (HTTP's 422).
    case idempotencyMismatch(String)

    public var description: String {
        switch self {
        case .invalidConfiguration(let key, let problem): return "config error: \(key): \(problem)"
        case .invalidNotification(let message, let detail): return detail.map { "\(message) (\($0))" } ?? message
        case .queueFull(let retryAfter, let detail): return "queue full (retry after \(retryAfter) s): \(detail)"
        case .rateLimited(let retryAfter, let detail): return "rate limited (retry after \(retryAfter) s): \(detail)"
        case .unknownApp(let id): return "app \(id) is not configured"
        case .shutDown: return "the gateway is shut down"
        case .storage(let what): return "the queue engine failed: \(what)"
        case .unauthorized(let detail): return "unauthorized: \(detail)"
        case .forbidden(let detail): return "forbidden: \(detail)"
        case .idempotencyConflict(let retryAfter, let detail): return "idempotency key in use (retry after \(retryAfter) s): \(detail)"
        case .idempotencyMismatch(let detail): return "idempotency key reused with another request: \(detail)"
        }
    }
}

/// What `submit` answers at once.
public struct Submission: Sendable, Equatable {
    /// The `notif_id` of each notification, given or generated (`<requestID>-<index>`), in order:
    /// what `status(notifID:)` takes.
    public var notifIDs: [String]
    /// Names the request.
    public var requestID: String
    /// gorush's `counts`: one per token (and topic) of the platforms served.
    public var counts: Int
    /// The answer kept for an idempotency key given before with the same request: nothing was queued
    /// this time (`notifIDs` is empty when the first request had more than fit a header).
    public var replayed = false
}

/// The final outcome of one delivery (one token of one notification): delivered (with the
/// provider's id), failed (`tokenDead`: the provider says the token is gone, delete it), still
/// pending when the wait ended (follow it with `status(notifID:)`), or skipped (a `dedup_key`
/// duplicate, or replaced in its coalescing window).
public typealias TokenOutcome = DeliveryOutcome

/// The state of one delivery, as `GET /api/push/{notif_id}` reports it (the token masked per
/// `log.hide_token`, as the HTTP route does).
public typealias DeliveryStatus = DeliveryStatusRecord

/// Pushgate in-process: the gateway's queue, workers, providers, retries, feedback hook and delivery
/// status, without its HTTP listener. Build it from a `PushgateConfiguration`, `submit` or `send`
/// notifications (the gorush request model), read `status`, and `shutdown()` before exit.
///
/// ```swift
/// let gateway = try await PushgateGateway(configuration: config)
/// var n = PushNotification(platform: .ios, tokens: [token])
/// n.message = "Hello"
/// let outcomes = try await gateway.send([n])
/// await gateway.shutdown()
/// ```
public final class PushgateGateway: Sendable {
    let gateway: Gateway
    private let logger: Logger
    private let state = NIOLockedValueBox(RunState())

    private struct RunState {
        var accepting = true
        var workers: Task<Void, Never>?
        var feedback: Task<Void, Never>?
        /// The delivery event stream's writer and webhook (`events.*`).
        var events: Task<Void, Never>?
        var shutdown: Task<Void, Never>?
    }

    /// Builds the providers and the queue from `configuration` and starts the workers. A durable queue
    /// (sqlite, postgres) picks up what an earlier run left pending.
    ///
    /// - Throws: `PushgateError.invalidConfiguration` naming the key.
    public init(configuration: PushgateConfiguration, logger: Logger = Logger(label: "pushgate")) async throws {
        for key in configuration.settings.keys.sorted() where RawConfig.defaults[key] == nil {
            throw PushgateError.invalidConfiguration(key: key, problem: "not a Pushgate configuration key")
        }
        for (i, pem) in configuration.trustRootsPEM.enumerated() {
            let parsed = try? NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))
            if parsed?.isEmpty ?? true {
                throw PushgateError.invalidConfiguration(key: "trustRootsPEM[\(i)]", problem: "holds no PEM certificate")
            }
        }
        let environment = configuration.environment
        let roots = configuration.trustRootsPEM
        let log = logger
        // Off the cooperative pool: building opens files and databases and may block a thread.
        let built: Result<Gateway, any Error> = await withCheckedContinuation { c in
            DispatchQueue.global().async {
                c.resume(
                    returning: Result {
                        let raw = try RawConfig(tree: configuration.tree(), environment: environment)
                        return try GatewayBuilder.build(raw: raw, logger: log, environment: environment, extraTrustRootsPEM: roots)
                    })
            }
        }
        do {
            gateway = try built.get()
        } catch let e as ConfigError {
            throw PushgateError.invalidConfiguration(key: e.key, problem: e.problem)
        } catch let e as BlockingStartup.TimedOut {
            throw PushgateError.invalidConfiguration(key: "queue", problem: e.description)
        }
        self.logger = logger
        let dispatcher = gateway.dispatcher
        let feedback = gateway.feedback
        state.withLockedValue { s in
            s.workers = Task { await dispatcher.run() }
            if let feedback { s.feedback = Task { await feedback.run() } }
            if let events = gateway.events {
                let webhook = gateway.eventWebhook
                s.events = Task {
                    await withTaskGroup(of: Void.self) { group in
                        group.addTask { await events.run() }
                        if let webhook { group.addTask { await webhook.run() } }
                    }
                }
            }
        }
    }

    /// This API over a gateway its host runs (workers, shutdown): the same `submit` as an embedded
    /// gateway, beside the host's other ways in.
    package init(serving gateway: Gateway) {
        self.gateway = gateway
        self.logger = gateway.logger
    }

    /// The app ids configured (`"default"` and `apps[].id`).
    public var apps: [String] { gateway.dispatcher.appIDs }

    /// Queues the notifications and answers at once with their ids; the deliveries go on in the
    /// background (retries, feedback hook, status records).
    ///
    /// - Throws: `PushgateError.invalidNotification` (nothing queued), `.queueFull`, `.unknownApp`, `.shutDown`, `.storage`.
    @discardableResult
    public func submit(_ notifications: [PushNotification], app: String = "default") async throws -> Submission {
        let result = try await run(PushRequest(notifications: notifications), app: app, outcomes: false, timeout: nil)
        return Submission(notifIDs: result.notifIDs, requestID: result.requestID, counts: result.counts)
    }

    /// Queues the notifications and waits for every delivery's final outcome (retries included), up to
    /// `timeout` seconds (default `sendTimeout`, 60): deliveries still under way then are `.pending`.
    /// The outcomes are in request order: notification by notification, token by token.
    public func send(_ notifications: [PushNotification], app: String = "default", timeout: Double? = nil) async throws -> [TokenOutcome] {
        try await send(PushRequest(notifications: notifications), app: app, timeout: timeout)
    }

    /// `send` for a request decoded with `PushgateGateway.decodeRequest` (its `app_id`, when set, is the app).
    public func send(_ request: PushRequest, app: String? = nil, timeout: Double? = nil) async throws -> [TokenOutcome] {
        let result = try await run(request, app: app ?? request.appID ?? "default", outcomes: true, timeout: timeout)
        return result.outcomes
    }

    /// `submit` for a request decoded with `PushgateGateway.decodeRequest`.
    ///
    /// - Parameters:
    ///   - idempotencyKey: as HTTP's `Idempotency-Key` (1-255 visible ASCII characters, per app):
    ///     the same key with the same request within `core.idempotency_ttl` answers the first
    ///     request's submission again (`replayed`) and queues nothing; with another request it throws
    ///     `.idempotencyMismatch`, while the first is processed `.idempotencyConflict`.
    ///   - apiKey: for a server that lets its own callers push with the gateway's keys
    ///     (`core.api_keys`, `apps[].api_keys`, `core.admin_keys`): authorized as the HTTP API
    ///     authorizes that key (an app's key acts for its app only). Nil: the embedding process,
    ///     which acts for any app.
    @discardableResult
    public func submit(_ request: PushRequest, app: String? = nil, idempotencyKey: String? = nil, apiKey: String? = nil) async throws
        -> Submission
    {
        var options = IngestOptions(sync: false, app: app ?? request.appID)
        if let raw = idempotencyKey {
            switch Gateway.idempotencyKey(raw, field: "idempotencyKey") {
            case .success(let key): options.idempotency = (key, nil)
            case .failure(let refusal): throw Self.error(refusal)
            }
        }
        var caller = IngestCaller.embedder
        if let apiKey {
            switch gateway.authenticate(presentedKey: apiKey) {
            case .success(let c): caller = c
            case .failure(let refusal): throw Self.error(refusal)
            }
        }
        switch try await decide(request, caller: caller, options: options) {
        case .accepted(let result, _):
            return Submission(notifIDs: result.notifIDs, requestID: result.requestID, counts: result.counts)
        case .replay(let answer):
            return Submission(
                notifIDs: Gateway.notifIDs(fromList: answer.notifIDs), requestID: answer.requestID,
                counts: SubmitResult.counts(inGorushAnswer: answer.body) ?? 0, replayed: true)
        case .refused(let refusal): throw Self.error(refusal)
        }
    }

    /// A gorush `/api/push` body (`{"notifications":[…]}`) decoded and checked exactly as the HTTP route
    /// does, with this gateway's limits (`core.max_notification`, …).
    ///
    /// - Throws: `PushgateError.invalidNotification` naming the field.
    public func decodeRequest(_ json: [UInt8]) throws -> PushRequest {
        do {
            return try RequestParser.parse(json, limits: gateway.settings.limits)
        } catch {
            throw PushgateError.invalidNotification(message: error.message, detail: error.detail)
        }
    }

    private func run(_ request: PushRequest, app: String, outcomes: Bool, timeout: Double?) async throws -> SubmitResult {
        switch try await decide(request, caller: .embedder, options: IngestOptions(sync: false, app: app, outcomes: outcomes, timeout: timeout)) {
        case .accepted(let result, _): return result
        case .replay: throw PushgateError.storage("unexpected idempotent replay")
        case .refused(let refusal): throw Self.error(refusal)
        }
    }

    private func decide(_ request: PushRequest, caller: IngestCaller, options: IngestOptions) async throws -> IngestDecision {
        guard state.withLockedValue({ $0.accepting }) else { throw PushgateError.shutDown }
        return await gateway.accept(request, from: caller, options: options)
    }

    /// The gateway's refusal as this API's error.
    static func error(_ refused: IngestRefusal) -> PushgateError {
        let e = refused.error
        switch refused.kind {
        case .unknownApp(let id): return .unknownApp(id)
        case .queueFull: return .queueFull(retryAfter: refused.retryAfter ?? 1, detail: e.detail ?? e.message)
        case .rateLimited: return .rateLimited(retryAfter: refused.retryAfter ?? 1, detail: e.detail ?? e.message)
        case .draining: return .shutDown
        case .storeUnavailable: return .storage(e.description)
        case .unauthenticated: return .unauthorized(e.detail ?? e.message)
        case .forbidden: return .forbidden(e.detail ?? e.message)
        case .idempotencyConflict: return .idempotencyConflict(retryAfter: refused.retryAfter ?? 1, detail: e.detail ?? e.message)
        case .idempotencyMismatch: return .idempotencyMismatch(e.detail ?? e.message)
        case .invalid: return .invalidNotification(message: e.message, detail: e.detail)
        }
    }

    public func status(notifID: String) async throws -> [DeliveryStatus]? {
        guard let source = gateway.dispatcher.statusSource else { return nil }
        let records: [DeliveryStatusRecord]?
        do {
            records = try await source.deliveryStatus(notifID: notifID)
        } catch {
            throw PushgateError.storage(String(describing: error))
        }
        let hide = gateway.settings.hideToken
        let t = gateway.now
        return records?.map { record in
            var r = record.scheduled(now: t)
            r.token = TokenMask.apply(r.token, hide: hide)
            return r
        }
    }

    /// Cancels the deliveries of `notifID` not yet sent (of `app`; nil: any app), as
    /// `DELETE /api/push/{notif_id}` does. Nil when the notification is unknown (to that app).
    public func cancel(notifID: String, app: String? = nil) async throws -> CancelSummary? {
        do {
            return try await gateway.dispatcher.cancel(notifID: notifID, app: app)
        } catch {
            throw PushgateError.storage(String(describing: error))
        }
    }

    /// Deliveries accepted and not finished.
    public var pendingCount: Int { gateway.dispatcher.queue.pendingCount }

    /// Stops accepting (`submit` throws `.shutDown`), then as the server on SIGTERM: the memory queue
    /// drains for up to `shutdownTimeout` seconds; a durable queue finishes the sends in flight and keeps
    /// the rest for the next start. Then the feedback hook sends what it holds, and the providers'
    /// connections close. Safe to call more than once (later calls wait for the first).
    public func shutdown() async {
        let task: Task<Void, Never> = state.withLockedValue { s in
            s.accepting = false
            if let t = s.shutdown { return t }
            let workers = s.workers
            let feedback = s.feedback
            let events = s.events
            let gateway = self.gateway
            let logger = self.logger
            let t = Task {
                await gateway.dispatcher.drainAndShutdown(timeout: Double(gateway.settings.shutdownTimeout), logger: logger)
                await workers?.value
                gateway.feedback?.finish()
                await feedback?.value
                // The events of the drain stored, the webhook given the stop grace for what is left.
                if let stream = gateway.events {
                    stream.finish()
                    gateway.eventWebhook?.stop()
                    await events?.value
                    await gateway.eventWebhook?.reportUnposted()
                    await stream.store.close()
                }
                await gateway.runShutdownHooks()
            }
            s.shutdown = t
            return t
        }
        await task.value
    }
}
