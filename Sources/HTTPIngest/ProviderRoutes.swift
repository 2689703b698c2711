import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore
import ProviderKit
import PushgateCore

/// The routes provider modules add (`ProviderModule.routes`, e.g. APNs broadcast channels), behind
/// the same API keys as `/api/push`: an app's key reaches its own app's provider, an admin key (or
/// no keys configured) any app's through `app_id`.
extension Gateway {
    func registerProviderRoutes(_ routes: GatewayRouter) {
        for module in ProviderRegistry.modules {
            for route in module.routes {
                let names = route.path.split(separator: "/").filter { $0.hasPrefix(":") }.map { String($0.dropFirst()) }
                routes.on(HTTPRequest.Method(route.method) ?? .get, route.path, access: .key) { request, context in
                    await self.handleProviderRoute(route, names: names, request, context)
                }
            }
        }
    }

    func handleProviderRoute(_ route: ProviderRoute, names: [String], _ request: Request, _ context: GatewayRequestContext) async -> Response {
        var request = request
        var body: [UInt8] = []
        if route.maxBodyBytes > 0 {
            do {
                body = Array(try await request.collectBody(upTo: route.maxBodyBytes).readableBytesView)
            } catch {
                return self.error(
                    RequestError(status: 413, message: "Request body too large.", detail: "this request is at most \(route.maxBodyBytes) bytes"))
            }
        }
        var parameters: [String: String] = [:]
        for name in names { parameters[name] = context.parameters.get(name) }
        var query: [String: String] = [:]
        for (k, v) in request.uri.queryParameters where query[String(k)] == nil { query[String(k)] = String(v) }
        let caller = context.caller
        var appScoped = false
        if case .key(.app) = caller { appScoped = true }
        let routeRequest = ProviderRouteRequest(body: body, parameters: parameters, query: query, appScoped: appScoped) { platform, appID in
            switch self.resolveApp(role: caller.role, requested: appID).mapError(\.error) {
            case .failure(let e): return .failure(e)
            case .success(let app):
                guard let slot = self.dispatcher.app(app)?.slots[platform] else {
                    return .failure(
                        RequestError(
                            message: "\(platform.name) is not enabled.",
                            detail: "\(platform.name).enabled: app \(app) does not send to \(platform.name)"))
                }
                return .success(slot.provider)
            }
        }
        let answer = await route.handle(routeRequest)
        var fields = Self.jsonHeaders
        if answer.body.isEmpty { fields[.contentType] = nil }
        for (name, value) in answer.headers {
            if let n = HTTPField.Name(name) { fields[n] = value }
        }
        requestCounters.count(answer.status)
        return Response(
            status: HTTPResponse.Status(code: answer.status), headers: fields,
            body: answer.body.isEmpty ? .init() : .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }
}
