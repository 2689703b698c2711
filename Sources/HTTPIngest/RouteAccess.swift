import GatewayCore
import HTTPTypes
import Hummingbird
import PushgateCore

/// What a route needs once any key is configured: declared where the route is registered
/// (`GatewayRouter.on(_:_:access:)`) and checked on the route the router matched, before the
/// handler runs (and so before any body is read). A spelling of a path the router folds onto a
/// route (`//`, a trailing `/`) gets that route's check; one it does not fold answers 401/404.
public enum RouteAccess: Sendable, Equatable {
    /// No key: the health and readiness checks, `/version`, `/metrics` for scrapers.
    case open
    /// Any valid key, an app's or an admin's (push, delivery status, provider routes).
    case key
    /// An admin key (`core.admin_keys`): configuration, process and request statistics, reload.
    case admin
}

extension IngestAuth {
    /// The key a request presents: `Authorization: Bearer <key>` or `X-API-Key: <key>`.
    static func presentedKey(_ headers: HTTPFields) -> String? {
        presentedKey(authorization: headers[.authorization], apiKey: HTTPField.Name("X-API-Key").flatMap { headers[$0] })
    }

    /// The role of the presented key, nil when none matches (or none was presented).
    public func identify(_ headers: HTTPFields) -> Role? {
        identify(presented: Self.presentedKey(headers))
    }
}

/// The context of a request on the gateway's router: Hummingbird's, plus the caller the route's
/// access check authenticated (once per request; handlers read it instead of the headers).
public struct GatewayRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// `.open` on open routes and when no keys are configured; else the key's role.
    public var caller: IngestCaller = .open

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }
}

extension GatewayRequestContext {
    /// The app an app key acts for: the notification routes (`GET` and `DELETE /api/push/{notif_id}`)
    /// show and change its deliveries only. Nil for an admin key, or when no keys are configured: all.
    var scopedApp: String? {
        if case .key(.app(let own)) = caller { return own }
        return nil
    }
}

/// The check of one route's `RouteAccess`: 401 without a valid key (`WWW-Authenticate: Bearer`),
/// 403 when an app key asks for an admin route. Added to the route's own middleware group, so it
/// runs on the matched route only.
struct RouteAccessMiddleware: RouterMiddleware {
    typealias Context = GatewayRequestContext
    let access: RouteAccess
    let gateway: Gateway

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        switch gateway.admit(access, headers: request.headers, route: context.endpointPath) {
        case .failure(let refusal): return refusal.response
        case .success(let caller):
            var context = context
            context.caller = caller
            return try await next(request, context)
        }
    }
}

/// An answer refusing a request before its handler (a `Response` is not an `Error`).
struct AccessRefusal: Error {
    var response: Response
}

extension Gateway {
    /// The caller `access` admits, or the answer refusing it.
    func admit(_ access: RouteAccess, headers: HTTPFields, route: String?) -> Result<IngestCaller, AccessRefusal> {
        guard access != .open else { return .success(.open) }
        let caller: IngestCaller
        switch authenticate(presentedKey: IngestAuth.presentedKey(headers)) {
        case .success(let c): caller = c
        case .failure: return .failure(AccessRefusal(response: unauthorized(headers)))
        }
        if access == .admin, case .key(let role) = caller, role != .admin {
            return .failure(
                AccessRefusal(
                    response: error(
                        RequestError(
                            status: 403, message: "Forbidden.",
                            detail: "\((route ?? "this route").logSafe(max: 128)) needs an admin key (core.admin_keys)"))))
        }
        return .success(caller)
    }

    /// 401 JSON with `WWW-Authenticate`; the detail says whether a key was sent (never which).
    func unauthorized(_ headers: HTTPFields) -> Response {
        var response = error(Self.unauthenticated(keySent: IngestAuth.presentedKey(headers) != nil).error)
        response.headers[.wwwAuthenticate] = "Bearer realm=\"pushgate\""
        return response
    }
}

/// The gateway's router with each route registered beside the access it needs.
struct GatewayRouter {
    let router: Router<GatewayRequestContext>
    let gateway: Gateway

    func on(
        _ method: HTTPRequest.Method, _ path: String, access: RouteAccess,
        use handler: @escaping @Sendable (Request, GatewayRequestContext) async throws -> Response
    ) {
        let group = router.group()
        if access != .open { group.add(middleware: RouteAccessMiddleware(access: access, gateway: gateway)) }
        group.on(RouterPath(path), method: method, use: handler)
    }
}
