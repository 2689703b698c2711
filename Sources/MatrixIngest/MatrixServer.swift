import GatewayCore
import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore
import ServiceLifecycle

/// The `matrix` section in force: read by each request, replaced by a reload (`matrix.apps`, their
/// options, `sync_timeout`, `max_devices`, `max_body_bytes`; the listeners keep their addresses and
/// port until a restart).
public final class MatrixRuntime: Sendable {
    private let current: NIOLockedValueBox<MatrixSettings>
    /// What the listeners were started with (a reload changing it needs a restart).
    public let started: MatrixSettings

    public init(_ settings: MatrixSettings) {
        current = NIOLockedValueBox(settings)
        started = settings
    }

    public var settings: MatrixSettings { current.withLockedValue { $0 } }

    func replace(_ s: MatrixSettings) { current.withLockedValue { $0 = s } }
}

/// The Matrix Push Gateway API (Sygnal's) on listeners of its own, each of `matrix.address` (one
/// address or a list, Sygnal's `http.bind_addresses`) on `matrix.port` (Sygnal's `http.port`):
/// `POST /_matrix/push/v1/notify` and Sygnal's `GET /health`. Like Sygnal it takes no API key
/// (homeservers do not send one): bind it to addresses only homeservers reach. Off unless
/// `matrix.enabled`. Its section shows in `/api/config`; a reload applies its apps and limits.
public struct MatrixServer: IngestProtocol {
    public static let configKey = "matrix.port"

    public static let notifyPath = "/_matrix/push/v1/notify"

    public static func services(gateway: Gateway) throws -> [any Service] {
        let settings = try MatrixSettings(raw: gateway.raw)
        let runtime = MatrixRuntime(settings)
        register(runtime, gateway: gateway)
        guard settings.enabled else { return [] }
        try check(settings, apps: Set(gateway.dispatcher.appIDs))
        // Slow and many clients, as on the gateway's own port: a connection that sends nothing is
        // closed after core.idle_timeout, a body must arrive within core.read_timeout (the route),
        // past core.max_connections new connections wait in the listen backlog (per listener).
        let core = gateway.settings
        return settings.addresses.map { address in
            Application(
                router: makeRouter(gateway: gateway, runtime: runtime),
                server: .http1(configuration: .init(idleTimeout: .seconds(Int64(core.idleTimeout)))),
                configuration: ApplicationConfiguration(
                    address: .hostname(address, port: settings.port), serverName: "pushgate/\(PushgateVersion.version)", backlog: 1024,
                    availableConnectionsDelegate: .maximum(core.maxConnections, logger: gateway.logger)),
                onServerRunning: { channel in
                    gateway.logger.info("Matrix Push Gateway API listening on http://\(channel.localAddress.map { "\($0)" } ?? "?")\(notifyPath)")
                },
                logger: gateway.logger)
        }
    }

    /// Shows the section in `/api/config` and re-reads it on a reload: the apps and limits are
    /// applied; `enabled`, `address` and `port` need a restart (said in the reload's log line).
    public static func register(_ runtime: MatrixRuntime, gateway: Gateway) {
        gateway.register(
            AdapterSection(
                name: "matrix", show: { raw in (try? MatrixSettings(raw: raw))?.shown ?? runtime.settings.shown },
                reload: { raw, apps in
                    let new = try MatrixSettings(raw: raw)
                    if new.enabled { try check(new, apps: apps) }
                    let old = runtime.started
                    var restart: [String] = []
                    if new.enabled != old.enabled { restart.append("matrix.enabled") }
                    if new.addresses != old.addresses { restart.append("matrix.address") }
                    if new.port != old.port { restart.append("matrix.port") }
                    return AdapterReload(
                        apply: {
                            let before = runtime.settings
                            runtime.replace(new)
                            if before != new {
                                gateway.logger.notice(
                                    "matrix: \(new.apps.count) apps (\(new.apps.map(\.pattern).joined(separator: ", ").logSafe(max: 512))) and limits reloaded"
                                )
                            }
                        }, needsRestart: restart)
                }))
    }

    /// Every `matrix.apps` entry names an app the gateway has (`apps`: their ids).
    public static func check(_ settings: MatrixSettings, apps: Set<String>) throws {
        for app in settings.apps {
            let id = app.app ?? AppID.defaultApp
            guard apps.contains(id) else {
                throw ConfigError(key: "matrix.apps[\(app.pattern)].app", problem: "no app \(id) is configured (apps[].id)")
            }
        }
    }

    /// Every `matrix.apps` entry names an app the gateway has, with its platform's provider.
    public static func check(_ settings: MatrixSettings, gateway: Gateway) throws {
        try check(settings, apps: Set(gateway.dispatcher.appIDs))
    }

    /// The routes, for the listener and for tests.
    public static func makeRouter(gateway: Gateway, settings: MatrixSettings) -> Router<BasicRequestContext> {
        makeRouter(gateway: gateway, runtime: MatrixRuntime(settings))
    }

    /// The routes, reading the section in force at each request.
    public static func makeRouter(gateway: Gateway, runtime: MatrixRuntime) -> Router<BasicRequestContext> {
        let handler = MatrixNotifyHandler(gateway: gateway, runtime: runtime)
        let router = Router()
        router.post(RouterPath(notifyPath)) { request, _ -> Response in
            var request = request
            let settings = runtime.settings
            if let declared = request.headers[.contentLength], let n = Int(declared), n > settings.maxBodyBytes {
                return tooLarge(settings)
            }
            let body: ByteBuffer
            do {
                body = try await collect(request, upTo: settings.maxBodyBytes, timeout: gateway.settings.readTimeout)
            } catch is ReadTimeout {
                return answer(
                    408,
                    MatrixRequestError(
                        status: 408, "M_UNKNOWN", "the body did not arrive within core.read_timeout (\(gateway.settings.readTimeout) s)"))
            } catch {
                return tooLarge(settings)
            }
            var trace: IngestTrace?
            if gateway.tracingEnabled, let parent = HTTPField.Name("traceparent"), let state = HTTPField.Name("tracestate") {
                trace = IngestTrace(
                    operation: "POST \(notifyPath)", traceParents: request.headers[values: parent], traceStates: request.headers[values: state])
            }
            let answer = await handler.handle(body: Array(body.readableBytesView), trace: trace)
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            if let r = answer.retryAfter { headers[.retryAfter] = String(r) }
            if let ids = Gateway.notifIDsList(answer.notifIDs), let name = HTTPField.Name("X-Pushgate-Notif-Ids") { headers[name] = ids }
            return Response(status: .init(code: answer.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
        }
        // Sygnal's health check: an empty 200.
        router.get("/health") { _, _ in Response(status: .ok) }
        return router
    }

    static func tooLarge(_ settings: MatrixSettings) -> Response {
        answer(413, MatrixRequestError(status: 413, "M_TOO_LARGE", "the body exceeds matrix.max_body_bytes (\(settings.maxBodyBytes) bytes)"))
    }

    static func answer(_ status: Int, _ e: MatrixRequestError) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: e.json)))
    }

    struct ReadTimeout: Error {}

    /// The body, up to `max` bytes, within `timeout` seconds (a client trickling it is answered 408).
    static func collect(_ request: Request, upTo max: Int, timeout: Int) async throws -> ByteBuffer {
        try await withThrowingTaskGroup(of: ByteBuffer.self) { group in
            group.addTask {
                var r = request
                return try await r.collectBody(upTo: max)
            }
            group.addTask {
                try await Task.sleep(for: .seconds(timeout))
                throw ReadTimeout()
            }
            defer { group.cancelAll() }
            guard let body = try await group.next() else { throw ReadTimeout() }
            return body
        }
    }
}
