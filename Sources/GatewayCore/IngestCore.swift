import Crypto
import Foundation
import PushDispatch
import PushgateCore
import QueueStore

/// Who sends a request, as its way in (HTTP, gRPC, the embedding API) authenticated it.
public enum IngestCaller: Sendable, Equatable {
    /// No keys are configured: every app is open, as in gorush.
    case open
    /// A configured key's role: an app's key acts for its app, an admin key for any.
    case key(IngestAuth.Role)
    /// The process embedding the gateway (`PushgateKit`): acts for any app, as an admin key does.
    case embedder

    /// The role `resolveApp` decides with (nil: any app may be named).
    public var role: IngestAuth.Role? {
        if case .key(let role) = self { return role }
        return nil
    }
}

/// What a way in asks of `accept` beyond the request itself.
public struct IngestOptions: Sendable {
    /// Wait for the deliveries' outcomes (up to `core.sync_timeout`, or `timeout`).
    public var sync: Bool
    /// The app asked for (`app_id`, gRPC metadata `app-id`, the embedding API's `app:`); nil: the
    /// key's app, else the default app.
    public var app: String?
    /// An `Idempotency-Key` and the SHA-256 (hex) of the request it came with (nil: of the decoded
    /// request, `Gateway.requestHash`; HTTP hashes the body as received).
    public var idempotency: (key: String, requestHash: String?)?
    /// Every token's outcome in the result (the embedding API's `send`).
    public var outcomes: Bool
    /// How long a sync request waits (nil: `core.sync_timeout`).
    public var timeout: Double?
    /// The trace context received with the request and its span's name (set by a way in only when
    /// `Gateway.tracingEnabled`; nil then: a span named `pushgate.ingest` starting a new trace).
    public var trace: IngestTrace?
    /// A notification whose fields fail is refused alone (skipped, its `notifIDs` slot empty, the
    /// problem in the log) and the others are queued; the request's own limits still refuse it
    /// whole. The Matrix API answers so, per device; gorush's API refuses the request.
    public var refuseNotificationsAlone: Bool

    public init(
        sync: Bool, app: String? = nil, idempotency: (key: String, requestHash: String?)? = nil, outcomes: Bool = false, timeout: Double? = nil,
        trace: IngestTrace? = nil, refuseNotificationsAlone: Bool = false
    ) {
        self.refuseNotificationsAlone = refuseNotificationsAlone
        self.sync = sync
        self.app = app
        self.idempotency = idempotency
        self.outcomes = outcomes
        self.timeout = timeout
        self.trace = trace
    }
}

/// Why a request was not queued, with the answer every way in gives it (an HTTP status and gorush's
/// error JSON; gRPC and the embedding API map the kind).
public struct IngestRefusal: Error, Sendable {
    public enum Kind: Sendable, Equatable {
        /// No valid key, with keys configured (401).
        case unauthenticated
        /// A field or a limit (400), naming it.
        case invalid
        /// The key may not act for the app it names (403).
        case forbidden
        /// No such app (400 naming `app_id`).
        case unknownApp(String)
        /// The `Idempotency-Key` is in use by a request being processed (409) or was used with another request (422).
        case idempotencyConflict
        case idempotencyMismatch
        /// The app's `rate_limit` (429).
        case rateLimited
        /// The queue or the app's share of it is full (503).
        case queueFull
        /// The store cannot take writes: a full disk (507), an I/O error, a database unreachable or too slow (503).
        case storeUnavailable
        /// Shutting down (503): retry on another instance.
        case draining
    }

    public var kind: Kind
    public var error: RequestError
    /// Seconds to wait before trying again (nil: the request itself must change).
    public var retryAfter: Int?

    public init(_ kind: Kind, _ error: RequestError, retryAfter: Int? = nil) {
        self.kind = kind
        self.error = error
        self.retryAfter = retryAfter
    }

    /// Shutting down: 503, retry on another instance.
    static let shuttingDown = IngestRefusal(
        .draining, RequestError(status: 503, message: "The gateway is shutting down.", detail: "retry on another instance"), retryAfter: 1)
}

/// What became of a request.
public enum IngestDecision: Sendable {
    /// Queued (with a sync request: answered as far as `core.sync_timeout`). With an idempotency key,
    /// the answer (`gorushAnswer`) is kept for the key's replays.
    case accepted(SubmitResult, app: String)
    /// The same `Idempotency-Key` and request as an earlier one: its answer again, nothing sent.
    case replay(IdempotentAnswer)
    case refused(IngestRefusal)
}

/// The one way a push request enters the gateway, whatever its transport: HTTP (`POST /api/push`),
/// gRPC (`proto.Gorush/Send`) and the embedding API decode their wire format, authenticate the
/// caller, and hand the request here; none repeats a step of it.
extension Gateway {
    /// Who presents `key` (a way in takes it from its headers or metadata before reading any body):
    /// `.open` without keys configured, the key's role, or 401 (the detail says whether a key was
    /// sent, never which).
    public func authenticate(presentedKey key: String?) -> Result<IngestCaller, IngestRefusal> {
        let auth = self.auth
        guard auth.enabled else { return .success(.open) }
        if let role = auth.identify(presented: key) { return .success(.key(role)) }
        return .failure(Self.unauthenticated(keySent: key != nil))
    }

    /// 401: no key, or one that is not valid (never which).
    public static func unauthenticated(keySent: Bool) -> IngestRefusal {
        IngestRefusal(
            .unauthenticated,
            RequestError(
                status: 401, message: "Unauthorized.",
                detail: keySent ? "the API key is not valid" : "send an API key: Authorization: Bearer <key> or X-API-Key: <key>"))
    }

    /// In order: shutdown, the request's limits and fields (the gateway's rules, then each
    /// notification's provider module), the app and whether the caller may act for it, the app's
    /// providers' checks (synchronous, then those that wait on the network, `checkProvidersAsync`), the
    /// idempotency key, the app's rate limit, the queue. Nothing is queued unless every step passed.
    /// With `tracing.enabled` all of it is one span (`acceptTraced`); without, no span is made.
    public func accept(_ request: PushRequest, from caller: IngestCaller, options: IngestOptions) async -> IngestDecision {
        if settings.tracing.enabled { return await acceptTraced(request, from: caller, options: options) }
        return await decide(request, from: caller, options: options, traceParent: nil)
    }

    /// `accept`'s steps; `traceParent` (the request's span) is kept with each accepted notification.
    func decide(_ request: PushRequest, from caller: IngestCaller, options: IngestOptions, traceParent: String?) async -> IngestDecision {
        if isDraining { return .refused(.shuttingDown) }
        var request = request
        if options.refuseNotificationsAlone {
            switch IngestValidation.skippingRefused(request, limits: settings.limits) {
            case .success(let kept): request = kept
            case .failure(let problem): return .refused(IngestRefusal(.invalid, problem))
            }
        } else if let problem = IngestValidation.validate(request: request, limits: settings.limits) {
            return .refused(IngestRefusal(.invalid, problem))
        }
        if let problem = IngestValidation.checkSchedule(
            request: request, limits: settings.limits, now: Date(timeIntervalSince1970: clock()))
        {
            return .refused(IngestRefusal(.invalid, problem))
        }
        let app: String
        switch resolveApp(role: caller.role, requested: options.app ?? request.appID) {
        case .success(let id): app = id
        case .failure(let refusal): return .refused(refusal)
        }
        if let providers = dispatcher.app(app) {
            switch IngestValidation.checkProviders(request, alone: options.refuseNotificationsAlone, provider: { providers.slots[$0]?.provider }) {
            case .success(let checked): request = checked
            case .failure(let problem): return .refused(IngestRefusal(.invalid, problem))
            }
            switch await IngestValidation.checkProvidersAsync(
                request, alone: options.refuseNotificationsAlone, provider: { providers.slots[$0]?.provider })
            {
            case .success(let checked): request = checked
            case .failure(let problem): return .refused(IngestRefusal(.invalid, problem))
            }
        }
        var requestID: String?
        if let (key, given) = options.idempotency {
            let hash = given ?? Self.requestHash(request)
            switch await claimIdempotency(app: app, key: key, requestHash: hash) {
            case .claimed(let id): requestID = id
            case .replay(let answer): return .replay(answer)
            case .refused(let refusal): return .refused(refusal)
            }
        }
        switch await admit(request, app: app, options: options, requestID: requestID, traceParent: traceParent) {
        case .success(let result):
            if let (key, _) = options.idempotency {
                let ids = Self.notifIDsList(result.notifIDs)
                await keepIdempotentAnswer(
                    app: app, key: key, IdempotentAnswer(status: 200, body: result.gorushAnswer, requestID: result.requestID, notifIDs: ids ?? ""))
            }
            return .accepted(result, app: app)
        case .failure(let refusal):
            if let (key, _) = options.idempotency { await dispatcher.idempotency.release(app: app, key: key) }
            return .refused(refusal)
        }
    }

    /// The app a request is for: the key's app (naming another is 403), or for an admin key, the
    /// embedder or a gateway without keys, the app named, else the default app.
    public func resolveApp(role: IngestAuth.Role?, requested: String?) -> Result<String, IngestRefusal> {
        if case .app(let own)? = role {
            if let requested, requested != own {
                return .failure(
                    IngestRefusal(
                        .forbidden,
                        RequestError(
                            status: 403, message: "Forbidden.",
                            detail: "app_id: this key belongs to app \(own), not \(requested.logSafe(max: 64)) (use that app's key or an admin key)"
                        )))
            }
            return .success(own)
        }
        let id = requested ?? AppID.defaultApp
        guard dispatcher.app(id) != nil else {
            return .failure(
                IngestRefusal(
                    .unknownApp(id), RequestError(message: "Unknown app.", detail: "app_id: no app \(id.logSafe(max: 64)) is configured (apps[].id)"))
            )
        }
        return .success(id)
    }

    enum IdempotencyClaimStep {
        case claimed(requestID: String)
        case replay(IdempotentAnswer)
        case refused(IngestRefusal)
    }

    /// Claims `key` for this request (per app): the first claim proceeds with a request id of its own,
    /// the same key with the same request replays the kept answer, with another request 422, while
    /// the first is processed 409; a store that fails 503.
    func claimIdempotency(app: String, key: String, requestHash: String) async -> IdempotencyClaimStep {
        let claim: IdempotencyClaim
        do {
            claim = try await dispatcher.idempotency.claim(
                app: app, key: key, bodyHash: requestHash, now: Date(), ttl: settings.idempotencyTTL,
                abandonAfter: Double(settings.syncTimeout) + 30)
        } catch {
            logger.error("idempotency store failed: \(error)")
            return .refused(
                IngestRefusal(
                    .storeUnavailable,
                    RequestError(status: 503, message: "Idempotency keys are unavailable, try again later.", detail: "nothing was queued"),
                    retryAfter: 1))
        }
        switch claim {
        case .claimed: return .claimed(requestID: RandomID.timeOrdered())
        case .replay(let answer): return .replay(answer)
        case .mismatch:
            return .refused(
                IngestRefusal(
                    .idempotencyMismatch,
                    RequestError(
                        status: 422, message: "Idempotency-Key reused with a different request.",
                        detail: "Idempotency-Key \(key.logSafe(max: 64)) was first used with another body (within core.idempotency_ttl)")))
        case .inProgress:
            return .refused(
                IngestRefusal(
                    .idempotencyConflict,
                    RequestError(
                        status: 409, message: "A request with this Idempotency-Key is being processed.",
                        detail: "retry after the first request with Idempotency-Key \(key.logSafe(max: 64)) was answered"),
                    retryAfter: 1))
        }
    }

    /// Longest idempotency key accepted (UUIDs and hashes fit many times over).
    public static let maxIdempotencyKeyBytes = 255

    /// An idempotency key as a way in received it (`field`: the header or metadata naming it): an
    /// sf-string (`"abc"`, as the IETF httpapi draft writes it) or a bare token, 1-255 visible
    /// ASCII characters; else 400 naming `field`.
    public static func idempotencyKey(_ raw: String, field: String) -> Result<String, IngestRefusal> {
        var v = Substring(raw.trimmingCharacters(in: .whitespaces))
        if v.count >= 2, v.first == "\"", v.last == "\"" { v = v.dropFirst().dropLast() }
        guard !v.isEmpty, v.utf8.count <= maxIdempotencyKeyBytes, v.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(invalidIdempotencyKey(field: field))
        }
        return .success(String(v))
    }

    /// 400 for an idempotency key that is not one value of 1-255 visible ASCII characters.
    public static func invalidIdempotencyKey(field: String) -> IngestRefusal {
        IngestRefusal(
            .invalid,
            RequestError(
                message: "Invalid \(field) header.",
                detail: "\(field): one value of 1-\(maxIdempotencyKeyBytes) visible ASCII characters (optionally quoted)"))
    }

    /// The SHA-256 (hex) an idempotency key is bound to when the way in has no bytes of its own to
    /// hash (gRPC, the embedding API): of the decoded request in JSON with sorted keys, so the same
    /// request hashes the same whatever order its maps were built in.
    public static func requestHash(_ request: PushRequest) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "+inf", negativeInfinity: "-inf", nan: "nan")
        // Should a request not encode, its hash is one of its own: a retry with the key is then
        // refused as another request (422), never answered with another request's answer.
        guard let bytes = try? encoder.encode(request) else { return "unencodable-" + RandomID.timeOrdered() }
        return Hex.encode(SHA256.hash(data: bytes))
    }

    /// Keeps the answer given to the request that claimed `key`, for its replays. The deliveries are
    /// queued whatever happens here: a store that fails is logged, and a retry with the key sees it
    /// in progress until `sync_timeout + 30 s`, then is processed again (at-least-once).
    func keepIdempotentAnswer(app: String, key: String, _ answer: IdempotentAnswer) async {
        do {
            try await dispatcher.idempotency.finish(app: app, key: key, answer: answer)
        } catch {
            logger.error("could not keep the answer of Idempotency-Key \(key.logSafe(max: 64)): \(error)")
        }
    }

    /// The app's rate limit, then the queue. Refused: 429 over the app's rate, 503 the queue (or the
    /// app's share) full or the store unable to take writes (507 its disk full); nothing was queued
    /// then and the rate limiter is refunded.
    func admit(
        _ request: PushRequest, app: String, options: IngestOptions, requestID: String?, traceParent: String? = nil
    ) async -> Result<SubmitResult, IngestRefusal> {
        let limiter = runtime.withLockedValue { $0.limiters[app] }
        let deliveries = Self.deliveryCount(request)
        if let limiter, let wait = limiter.take(deliveries, now: clock()) {
            let e = RequestError(
                status: 429, message: "Too many requests, try again later.",
                detail: "app \(app) accepts \(limiter.rate) deliveries per second (rate_limit)")
            return .failure(IngestRefusal(.rateLimited, e, retryAfter: wait))
        }
        do {
            return .success(
                try await dispatcher.submit(
                    request, sync: options.sync, app: app, requestID: requestID, outcomes: options.outcomes, timeout: options.timeout,
                    traceParent: traceParent))
        } catch let full as QueueFullError {
            limiter?.refund(deliveries)  // nothing was queued
            let e = RequestError(
                status: 503, message: full.app == nil ? "Queue is full, try again later." : "App's share of the queue is full, try again later.",
                detail: full.description)
            return .failure(IngestRefusal(.queueFull, e, retryAfter: full.retryAfter))
        } catch let fault as StoreUnavailableError {
            // The store cannot take writes (full disk, I/O error, database unreachable or too slow):
            // nothing was queued; the client is told the cause, never the store's own message.
            limiter?.refund(deliveries)
            let e = RequestError(
                status: fault.httpStatus, message: "Not queued: \(fault), try again later.", detail: "store_\(fault.cause.rawValue)")
            return .failure(IngestRefusal(.storeUnavailable, e, retryAfter: fault.retryAfter))
        } catch is QueueClosedError {
            limiter?.refund(deliveries)
            return .failure(.shuttingDown)
        } catch {
            // Any other failure of the queue: nothing was queued and trying again may work. The
            // store's own error stays in the log (it can name tables, paths or values of other requests).
            limiter?.refund(deliveries)
            logger.error("push submission failed: \(error)")
            return .failure(
                IngestRefusal(
                    .storeUnavailable,
                    RequestError(status: 503, message: "Not queued, try again later.", detail: "the queue failed; see the gateway log"),
                    retryAfter: 1))
        }
    }
}
