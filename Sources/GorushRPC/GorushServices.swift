import GRPCCore
import GatewayCore
import PushDispatch
import PushgateCore

/// `proto.Gorush/Send`: gorush's mapping (`rpc/server.go`), then `POST /api/push`'s parser, checks,
/// rate limit, queue and status records. Always asynchronous, as gorush's `Send` is: the reply says
/// the notification was accepted and counts its tokens (gorush's `counts`).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
struct GorushSendService: Proto_Gorush.ServiceProtocol {
    let gateway: Gateway

    /// Metadata naming the app (the `app_id` of the JSON body; gorush.proto has no such field).
    static let appIDKey = "app-id"
    /// Metadata with an idempotency key, as HTTP's `Idempotency-Key` header (bound to the decoded
    /// request); a replay answers the first reply's metadata with `idempotent-replayed: true`.
    static let idempotencyKey = "idempotency-key"

    func send(request: ServerRequest<Proto_NotificationRequest>, context: ServerContext) async throws -> ServerResponse<Proto_NotificationReply> {
        let caller = try Self.authenticate(request.metadata, gateway: gateway)
        let r = request.message
        let parsed: PushRequest
        do {
            parsed = try RequestParser.parse(try GorushMapping.body(r), limits: gateway.settings.limits)
        } catch {
            throw Self.rpcError(error)
        }
        if let problem = Self.check(parsed) { throw Self.rpcError(problem) }
        let requestedApp = request.metadata[stringValues: Self.appIDKey].first { _ in true }
        if let id = requestedApp, id.utf8.count > 256 {
            throw RPCError(code: .invalidArgument, message: "Unknown app. (app-id: \(id.utf8.count) bytes, longer than any app id)")
        }
        var options = IngestOptions(sync: false, app: requestedApp)
        if gateway.tracingEnabled {
            options.trace = IngestTrace(
                operation: "proto.Gorush/Send", traceParents: Array(request.metadata[stringValues: "traceparent"]),
                traceStates: Array(request.metadata[stringValues: "tracestate"]))
        }
        let keys = Array(request.metadata[stringValues: Self.idempotencyKey])
        if let raw = keys.first {
            guard keys.count == 1 else { throw Self.rpcError(Gateway.invalidIdempotencyKey(field: Self.idempotencyKey)) }
            switch Gateway.idempotencyKey(raw, field: Self.idempotencyKey) {
            case .success(let key): options.idempotency = (key, nil)
            case .failure(let refusal): throw Self.rpcError(refusal)
            }
        }
        switch await gateway.accept(parsed, from: caller, options: options) {
        case .accepted(let result, _):
            var reply = Proto_NotificationReply()
            reply.success = true
            // gorush: `counts, err := safeIntToInt32(len(notification.Tokens))` (the tokens, not the topic).
            reply.counts = Int32(clamping: r.tokens.count)
            var metadata: Metadata = [:]
            metadata.addString(result.requestID, forKey: "x-pushgate-request-id")
            // As the HTTP header: a client's own id percent-encoded outside visible ASCII (and "%", ",").
            if let ids = Gateway.notifIDsList(result.notifIDs) { metadata.addString(ids, forKey: "x-pushgate-notif-ids") }
            return ServerResponse(message: reply, metadata: metadata)
        case .replay(let answer):
            // The same request as the key's first: its reply again, nothing queued.
            var reply = Proto_NotificationReply()
            reply.success = true
            reply.counts = Int32(clamping: r.tokens.count)
            var metadata: Metadata = [:]
            metadata.addString(answer.requestID, forKey: "x-pushgate-request-id")
            if !answer.notifIDs.isEmpty { metadata.addString(answer.notifIDs, forKey: "x-pushgate-notif-ids") }
            metadata.addString("true", forKey: "idempotent-replayed")
            return ServerResponse(message: reply, metadata: metadata)
        case .refused(let refused):
            throw Self.rpcError(refused)
        }
    }

    /// What gorush's `CheckMessage` refuses and the HTTP API lets through as gorush's router does
    /// (a notification of no or an unknown platform is skipped there; an empty token list counts 0):
    /// a `Send` carries one notification, so these are the caller's mistake.
    static func check(_ parsed: PushRequest) -> RequestError? {
        if let skipped = parsed.skipped.first {
            return RequestError(
                message: "Invalid platform.",
                detail: "notifications[0].platform: \(skipped.reason)")
        }
        guard let n = parsed.notifications.first else { return RequestError(message: RequestError.emptyNotifications) }
        let topicSend = ProviderRegistry.platformRules[n.platform]?.topicSends == true && !(n.topic ?? "").isEmpty
        if n.tokens.isEmpty, !topicSend {
            return RequestError(message: "please provide at least one device token", detail: "notifications[0].tokens: empty (\(Self.topicSendNote))")
        }
        if let k = n.tokens.firstIndex(where: \.isEmpty) {
            return RequestError(message: "the device token cannot be empty", detail: "notifications[0].tokens[\(k)]: empty")
        }
        return nil
    }

    /// "only an Android or Huawei topic send needs none": the platforms whose rules have topic sends.
    static let topicSendNote: String = {
        let titles = ProviderRegistry.presentations.filter { ProviderRegistry.platformRules[$0.platform]?.topicSends == true }.map(
            \.presentation.title)
        return titles.isEmpty ? "no platform sends to topics" : "only an \(ProviderRegistry.alternatives(titles)) topic send needs none"
    }()

    /// The caller of the `authorization: Bearer <key>` (or `x-api-key`) metadata, as the HTTP API
    /// reads its headers (the port's admission checked it on the HEADERS frame already).
    static func authenticate(_ metadata: Metadata, gateway: Gateway) throws(RPCError) -> IngestCaller {
        let presented = IngestAuth.presentedKey(
            authorization: metadata[stringValues: "authorization"].first { _ in true },
            apiKey: metadata[stringValues: "x-api-key"].first { _ in true })
        switch gateway.authenticate(presentedKey: presented) {
        case .success(let caller): return caller
        case .failure(let refusal): throw rpcError(refusal)
        }
    }

    /// A refusal as a gRPC status: the code for its kind, the message the HTTP error's
    /// `message (detail)`, and `retry-after` metadata when trying again later may work.
    static func rpcError(_ refused: IngestRefusal) -> RPCError {
        let code: RPCError.Code
        switch refused.kind {
        case .invalid, .unknownApp: code = .invalidArgument
        case .unauthenticated: code = .unauthenticated
        case .forbidden: code = .permissionDenied
        case .rateLimited, .queueFull: code = .resourceExhausted
        // The store cannot take writes, or shutting down: retry later or on another instance.
        case .storeUnavailable, .draining: code = .unavailable
        // The key's first request is still being processed: retry (gRPC's "retry at a higher level").
        case .idempotencyConflict: code = .aborted
        case .idempotencyMismatch: code = .failedPrecondition
        }
        var e = RPCError(
            code: code, message: refused.kind == .draining ? "the gateway is shutting down; retry on another instance" : refused.error.description)
        if let wait = refused.retryAfter { e.metadata.addString(String(wait), forKey: "retry-after") }
        return e
    }

    /// A check's 400 as a gRPC status (INVALID_ARGUMENT).
    static func rpcError(_ e: RequestError) -> RPCError {
        rpcError(IngestRefusal(.invalid, e))
    }
}

/// `proto.Health/Check`: SERVING while the gateway takes work, NOT_SERVING as `/readyz` answers 503
/// (graceful shutdown started, the queue's store refuses writes, no provider enabled). The service
/// names it knows are "" (the server) and those it serves.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
struct GorushHealthService: Proto_Health.SimpleServiceProtocol {
    let gateway: Gateway

    static let known: Set<String> = ["", "proto.Gorush", "proto.Health"]

    func check(request: Proto_HealthCheckRequest, context: ServerContext) async throws -> Proto_HealthCheckResponse {
        guard Self.known.contains(request.service) else { throw RPCError(code: .notFound, message: "unknown service") }
        var response = Proto_HealthCheckResponse()
        response.status = gateway.notReadyReason == nil ? .serving : .notServing
        return response
    }
}
