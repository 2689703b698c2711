import Crypto
import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import ProviderKit
import PushDispatch
import PushgateCore

#if canImport(Glibc)
    import Glibc
#endif

extension Gateway {
    static let jsonHeaders: HTTPFields = {
        var h = HTTPFields()
        h[.contentType] = "application/json; charset=utf-8"
        h[HTTPField.Name("X-Pushgate-Version")!] = PushgateVersion.version
        h[HTTPField.Name("X-Gorush-Version")!] = PushgateVersion.version
        return h
    }()

    static let requestIDHeader = HTTPField.Name("X-Pushgate-Request-Id")!
    static let notifIDsHeader = HTTPField.Name("X-Pushgate-Notif-Ids")!
    /// W3C Trace Context (read only with `tracing.enabled`).
    static let traceParentHeader = HTTPField.Name("traceparent")!
    static let traceStateHeader = HTTPField.Name("tracestate")!

    func json(_ status: HTTPResponse.Status, _ bytes: [UInt8], extra: [(HTTPField.Name, String)] = []) -> Response {
        var headers = Self.jsonHeaders
        for (k, v) in extra { headers[k] = v }
        requestCounters.count(Int(status.code))
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    func error(_ e: RequestError) -> Response {
        json(HTTPResponse.Status(code: e.status), e.json)
    }

    public func makeRouter() -> Router<GatewayRequestContext> {
        let router = Router(context: GatewayRequestContext.self)
        // Unknown routes and methods: 401 without a valid key (once keys are configured), else a JSON 404.
        router.add(middleware: JSONNotFoundMiddleware(gateway: self))
        let routes = GatewayRouter(router: router, gateway: self)
        let r = settings.routes
        routes.on(.get, "/", access: .key) { _, _ in
            self.json(.ok, Array(#"{"text":"Welcome to notification server."}"#.utf8))
        }
        routes.on(.get, r.health, access: .open) { _, _ in
            var h = Self.jsonHeaders
            h[.contentType] = nil
            return Response(status: .ok, headers: h)
        }
        routes.on(.head, r.health, access: .open) { _, _ in Response(status: .ok, headers: Self.jsonHeaders) }
        routes.on(.get, Self.readyRoute, access: .open) { _, _ in self.readiness() }
        routes.on(.head, Self.readyRoute, access: .open) { _, _ in self.readiness(head: true) }
        routes.on(.get, "/version", access: .open) { _, _ in
            var w = JSONWriter()
            var first = true
            w.raw("{")
            w.key("source", first: &first)
            w.string(PushgateVersion.source)
            w.key("version", first: &first)
            w.string(PushgateVersion.version)
            w.raw("}")
            return self.json(.ok, w.bytes)
        }
        routes.on(.post, r.push, access: .key) { request, context in
            await self.handlePush(request, caller: context.caller)
        }
        routes.on(.get, r.statApp, access: .admin) { _, _ in
            self.json(.ok, self.appStatsJSON())
        }
        routes.on(.get, r.statGo, access: .admin) { _, _ in
            self.json(.ok, self.processStatsJSON())
        }
        routes.on(.get, r.sysStats, access: .admin) { _, _ in
            self.json(.ok, self.sysStatsJSON())
        }
        routes.on(.get, r.config, access: .admin) { _, _ in
            var h = Self.jsonHeaders
            h[.contentType] = "application/yaml; charset=utf-8"
            return Response(status: .ok, headers: h, body: .init(byteBuffer: ByteBuffer(string: self.configYAML())))
        }
        // Open for scrapers unless core.metrics_admin_only.
        routes.on(.get, r.metrics, access: settings.auth.metricsAdminOnly ? .admin : .open) { _, _ in
            var h = Self.jsonHeaders
            h[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(status: .ok, headers: h, body: .init(byteBuffer: ByteBuffer(bytes: MetricsSetup.exposition(gateway: self))))
        }
        routes.on(.post, Self.reloadRoute, access: .admin) { _, _ in
            do {
                let summary = try await self.reload()
                var w = JSONWriter()
                var first = true
                w.raw("{")
                for (name, list) in [
                    ("added", summary.added), ("removed", summary.removed), ("rebuilt", summary.changed), ("needs_restart", summary.needsRestart),
                ] {
                    w.key(name, first: &first)
                    w.strings(list)
                }
                w.key("apps", first: &first)
                w.strings(self.dispatcher.appIDs)
                w.raw(#","success":"ok"}"#)
                return self.json(.ok, w.bytes)
            } catch {
                return self.error(RequestError(status: 409, message: "Reload refused; the running configuration is kept.", detail: "\(error)"))
            }
        }
        registerStatusRoutes(routes)
        registerEventRoutes(routes)
        registerProviderRoutes(routes)
        if settings.ui { registerStatusPage(routes) }
        return router
    }

    /// Admin-only: reads the configuration file again (as SIGHUP does).
    static let reloadRoute = "/api/reload"

    func handlePush(_ request: Request, caller: IngestCaller) async -> Response {
        var request = request
        // A declared length over the limit is answered at once, without reading (or waiting for) the body.
        if let declared = request.headers[.contentLength], let n = Int(declared), n > settings.maxBodyBytes {
            return self.error(
                RequestError(
                    status: 413, message: "Request body too large.",
                    detail: "Content-Length \(n) exceeds core.max_body_bytes (\(settings.maxBodyBytes) bytes)"))
        }
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: settings.maxBodyBytes)
        } catch {
            return self.error(
                RequestError(
                    status: 413, message: "Request body too large.", detail: "the body exceeds core.max_body_bytes (\(settings.maxBodyBytes) bytes)"))
        }
        let parsed: PushRequest
        do {
            parsed = try RequestParser.parse(Array(body.readableBytesView), limits: settings.limits)
        } catch {
            return self.error(error)
        }
        var options = IngestOptions(sync: parsed.sync ?? settings.sync)
        if tracingEnabled {
            options.trace = IngestTrace(
                operation: "POST \(settings.routes.push)", traceParents: request.headers[values: Self.traceParentHeader],
                traceStates: request.headers[values: Self.traceStateHeader])
        }
        switch Self.idempotencyKey(request.headers) {
        case .none: break
        case .some(.success(let key)): options.idempotency = (key, Hex.encode(SHA256.hash(data: body.readableBytesView)))
        case .some(.failure(let e)): return self.error(e)
        }
        let result: SubmitResult
        switch await accept(parsed, from: caller, options: options) {
        case .accepted(let r, _): result = r
        case .replay(let a):
            var extra: [(HTTPField.Name, String)] = [(Self.requestIDHeader, a.requestID), (Self.idempotentReplayedHeader, "true")]
            if !a.notifIDs.isEmpty { extra.append((Self.notifIDsHeader, a.notifIDs)) }
            return json(HTTPResponse.Status(code: a.status), a.body, extra: extra)
        case .refused(let refused):
            return json(
                HTTPResponse.Status(code: refused.error.status), refused.error.json,
                extra: refused.retryAfter.map { [(.retryAfter, String($0))] } ?? [])
        }
        let answer = result.gorushAnswer
        // The body stays byte-compatible with gorush; the notif_ids (given or generated) for
        // GET /api/push/{notif_id} ride in headers: generated ids are "<request id>-<index>".
        var extra: [(HTTPField.Name, String)] = [(Self.requestIDHeader, result.requestID)]
        if let ids = Self.notifIDsList(result.notifIDs) { extra.append((Self.notifIDsHeader, ids)) }
        return json(.ok, answer, extra: extra)
    }
}

/// Unknown routes and methods answer a JSON 404 with the version headers, like every other answer
/// (Hummingbird's own is an empty body).
struct JSONNotFoundMiddleware: RouterMiddleware {
    typealias Context = GatewayRequestContext
    let gateway: Gateway

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let e as HTTPError where e.status == .notFound {
            // No route matched, so none declared its access: any valid key is asked for, as on every
            // route but the open ones (a caller without one learns nothing of which routes exist).
            if gateway.auth.enabled, gateway.auth.identify(request.headers) == nil { return gateway.unauthorized(request.headers) }
            return gateway.error(
                RequestError(
                    status: 404, message: "Not found.",
                    detail: "no route for \(request.method) \(request.uri.path.logSafe(max: 256))"))
        }
    }
}
