import GRPCCore
import PushDispatch
import PushgateCore
import Server

/// `proto.Gorush/Send`: gorush's mapping (`rpc/server.go`), then `POST /api/push`'s parser, checks,
/// rate limit, queue and status records. Always asynchronous, as gorush's `Send` is: the reply says
/// the notification was accepted and counts its tokens (gorush's `counts`).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
struct GorushSendService: Proto_Gorush.ServiceProtocol {
    let gateway: Gateway

    /// Metadata naming the app (the `app_id` of the JSON body; gorush.proto has no such field).
    static let appIDKey = "app-id"

    func send(request: ServerRequest<Proto_NotificationRequest>, context: ServerContext) async throws -> ServerResponse<Proto_NotificationReply> {
        let role = try Self.authenticate(request.metadata, auth: gateway.auth)
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
        switch await gateway.accept(parsed, from: role.map { .key($0) } ?? .open, options: IngestOptions(sync: false, app: requestedApp)) {
        case .accepted(let result, _):
            var reply = Proto_NotificationReply()
            reply.success = true
            // gorush: `counts, err := safeIntToInt32(len(notification.Tokens))` (the tokens, not the topic).
            reply.counts = Int32(clamping: r.tokens.count)
            var metadata: Metadata = [:]
            metadata.addString(result.requestID, forKey: "x-pushgate-request-id")
            // As the HTTP header: a client's own id percent-encoded outside visible ASCII (and "%", ",").
            metadata.addString(result.notifIDs.map(Gateway.headerEncoded).joined(separator: ","), forKey: "x-pushgate-notif-ids")
            return ServerResponse(message: reply, metadata: metadata)
        case .replay:
            // No idempotency key travels in gorush.proto: nothing to replay.
            throw RPCError(code: .internalError, message: "unexpected idempotent replay")
        case .refused(let refused):
            if refused.kind == .draining { throw RPCError(code: .unavailable, message: "the gateway is shutting down; retry on another instance") }
            var e = Self.rpcError(refused.error)
            if let wait = refused.retryAfter { e.metadata.addString(String(wait), forKey: "retry-after") }
            throw e
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
        let topicSend = (n.platform == .android || n.platform == .huawei) && !(n.topic ?? "").isEmpty
        if n.tokens.isEmpty, !topicSend {
            return RequestError(
                message: "please provide at least one device token",
                detail: "notifications[0].tokens: empty (only an Android or Huawei topic send needs none)")
        }
        if let k = n.tokens.firstIndex(where: \.isEmpty) {
            return RequestError(message: "the device token cannot be empty", detail: "notifications[0].tokens[\(k)]: empty")
        }
        return nil
    }

    /// With keys configured: the key of `authorization: Bearer <key>` (or `x-api-key`) metadata, as the
    /// HTTP API reads its headers. Nil: no keys configured (everything open, as in gorush).
    static func authenticate(_ metadata: Metadata, auth: IngestAuth) throws(RPCError) -> IngestAuth.Role? {
        guard auth.enabled else { return nil }
        let presented = IngestAuth.presentedKey(
            authorization: metadata[stringValues: "authorization"].first { _ in true },
            apiKey: metadata[stringValues: "x-api-key"].first { _ in true })
        guard let role = auth.identify(presented: presented) else {
            throw RPCError(
                code: .unauthenticated,
                message: presented == nil ? "send an API key: metadata authorization: Bearer <key>" : "the API key is not valid")
        }
        return role
    }

    /// The HTTP answer's status as a gRPC code; the message is the HTTP error's `message (detail)`.
    static func rpcError(_ e: RequestError) -> RPCError {
        let code: RPCError.Code
        switch e.status {
        case 400: code = .invalidArgument
        case 401: code = .unauthenticated
        case 403: code = .permissionDenied
        case 429, 503, 507: code = .resourceExhausted
        default: code = .internalError
        }
        return RPCError(code: code, message: e.description)
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
