import Crypto
import Foundation
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

final class RequestCounters: Sendable {
    private let box = NIOLockedValueBox<[Int: Int]>([:])
    func count(_ status: Int) { box.withLockedValue { $0[status, default: 0] += 1 } }
    var snapshot: [Int: Int] { box.withLockedValue { $0 } }
}

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
    /// Longer lists are left out (clients and proxies cap header sizes); the request id still names them.
    static let maxNotifIDsHeader = 8192

    func json(_ status: HTTPResponse.Status, _ bytes: [UInt8], extra: [(HTTPField.Name, String)] = []) -> Response {
        var headers = Self.jsonHeaders
        for (k, v) in extra { headers[k] = v }
        requestCounters.count(Int(status.code))
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    public static func headerEncoded(_ id: String) -> String {
        var out = ""
        for b in id.utf8 {
            if b > 0x20, b < 0x7F, b != UInt8(ascii: "%"), b != UInt8(ascii: ",") {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out += "%" + (b < 16 ? "0" : "") + String(b, radix: 16, uppercase: true)
            }
        }
        return out
    }

    func error(_ e: RequestError) -> Response {
        json(HTTPResponse.Status(code: e.status), e.json)
    }

    public func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
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
        routes.on(.post, r.push, access: .key) { request, _ in
            await self.handlePush(request)
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
            return Response(status: .ok, headers: h, body: .init(byteBuffer: ByteBuffer(string: self.raw.redactedYAML())))
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
        registerProviderRoutes(routes)
        return router
    }

    /// Admin-only: reads the configuration file again (as SIGHUP does).
    static let reloadRoute = "/api/reload"

    /// The app a request of a provider route is for (`resolveApp(role:requested:)` with the key the
    /// headers present), or the error to answer.
    func resolveApp(headers: HTTPFields, requested: String?) -> Result<String, RequestError> {
        let auth = self.auth
        return resolveApp(role: auth.enabled ? auth.identify(headers) : nil, requested: requested).mapError(\.error)
    }

    func handlePush(_ request: Request) async -> Response {
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
        switch Self.idempotencyKey(request.headers) {
        case .none: break
        case .some(.success(let key)): options.idempotency = (key, Hex.encode(SHA256.hash(data: body.readableBytesView)))
        case .some(.failure(let e)): return self.error(e)
        }
        let auth = self.auth
        let caller: IngestCaller = auth.enabled ? auth.identify(request.headers).map { .key($0) } ?? .open : .open
        let result: SubmitResult
        let app: String
        switch await accept(parsed, from: caller, options: options) {
        case .accepted(let r, let a): (result, app) = (r, a)
        case .replay(let a):
            var extra: [(HTTPField.Name, String)] = [(Self.requestIDHeader, a.requestID), (Self.idempotentReplayedHeader, "true")]
            if !a.notifIDs.isEmpty { extra.append((Self.notifIDsHeader, a.notifIDs)) }
            return json(HTTPResponse.Status(code: a.status), a.body, extra: extra)
        case .refused(let refused):
            return json(
                HTTPResponse.Status(code: refused.error.status), refused.error.json,
                extra: refused.retryAfter.map { [(.retryAfter, String($0))] } ?? [])
        }
        var w = JSONWriter(reservingCapacity: 64 + result.logs.count * 160)
        w.raw(#"{"counts":"#)
        w.int(result.counts)
        w.raw(#","logs":["#)
        for (i, e) in result.logs.enumerated() {
            if i > 0 { w.raw(",") }
            e.write(into: &w)
        }
        w.raw("]")
        // Pushgate additions, only when they say something: failures left out of the capped answer
        // (core.max_sync_answer_bytes), and deliveries still under way at core.sync_timeout.
        if result.omittedLogs > 0 {
            w.raw(#","logs_omitted":"#)
            w.int(result.omittedLogs)
        }
        if result.pending > 0 {
            w.raw(#","pending":"#)
            w.int(result.pending)
        }
        // Notifications over the provider's limit sent as their `fallback` (decided at ingest, so
        // in async mode too).
        if !result.fallbacks.isEmpty {
            w.raw(#","fallbacks":["#)
            for (i, u) in result.fallbacks.enumerated() {
                if i > 0 { w.raw(",") }
                var first = true
                w.raw("{")
                w.key("notif_id", first: &first)
                w.string(u.notifID)
                w.key("platform", first: &first)
                w.string(u.platform.name)
                u.info.writeMembers(into: &w, first: &first)
                w.raw("}")
            }
            w.raw("]")
        }
        if result.omittedFallbacks > 0 {
            w.raw(#","fallbacks_omitted":"#)
            w.int(result.omittedFallbacks)
        }
        w.raw(#","success":"ok"}"#)
        // The body stays byte-compatible with gorush; the notif_ids (given or generated) for
        // GET /api/push/{notif_id} ride in headers: generated ids are "<request id>-<index>".
        var extra: [(HTTPField.Name, String)] = [(Self.requestIDHeader, result.requestID)]
        // Comma-separated; in a client's own notif_id every byte outside visible ASCII, and "%" and
        // ",", is percent-encoded (so the header carries the exact id, CR/LF included).
        let ids = result.notifIDs.map(Self.headerEncoded).joined(separator: ",")
        if ids.utf8.count <= Self.maxNotifIDsHeader { extra.append((Self.notifIDsHeader, ids)) }
        if let (key, _) = options.idempotency {
            let kept = IdempotentAnswer(
                status: 200, body: w.bytes, requestID: result.requestID, notifIDs: ids.utf8.count <= Self.maxNotifIDsHeader ? ids : "")
            await keepIdempotentAnswer(app: app, key: key, kept)
        }
        return json(.ok, w.bytes, extra: extra)
    }

    func appStatsJSON() -> [UInt8] {
        let s = dispatcher.stats.snapshot
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("version", first: &first)
        w.string(PushgateVersion.version)
        // gorush's busy_workers: deliveries being sent right now (queued ones: gorush_queue_usage).
        w.key("busy_workers", first: &first)
        w.int(dispatcher.busyWorkers)
        w.key("success_tasks", first: &first)
        w.int(s.successTasks)
        w.key("failure_tasks", first: &first)
        w.int(s.failureTasks)
        w.key("submitted_tasks", first: &first)
        w.int(s.submittedTasks)
        w.key("total_count", first: &first)
        w.int(s.totalCount)
        for p in Platform.allCases {
            let c = s.counts(p)
            w.key(p.name, first: &first)
            w.raw(#"{"push_success":"#)
            w.int(c.pushSuccess)
            w.raw(#","push_error":"#)
            w.int(c.pushError)
            w.raw("}")
        }
        // Per app (only when apps are configured: a gorush config's answer stays gorush's).
        let apps = dispatcher.appIDs
        if apps.count > 1 || apps.first != AppID.defaultApp {
            w.key("apps", first: &first)
            w.raw("{")
            var fa = true
            for id in apps {
                w.key(id, first: &fa)
                var fp = true
                w.raw("{")
                w.key("pending", first: &fp)
                w.int(dispatcher.pendingCount(app: id))
                for p in Platform.allCases {
                    let c = s.counts(p, app: id)
                    w.key(p.name, first: &fp)
                    w.raw(#"{"push_success":"#)
                    w.int(c.pushSuccess)
                    w.raw(#","push_error":"#)
                    w.int(c.pushError)
                    w.raw("}")
                }
                w.raw("}")
            }
            w.raw("}")
        }
        w.raw("}")
        return w.bytes
    }

    func processStatsJSON() -> [UInt8] {
        let p = ProcessStats.read()
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("time", first: &first)
        w.int(Int64(Date().timeIntervalSince1970 * 1e9))
        w.key("swift_version", first: &first)
        w.string("6")
        w.key("pid", first: &first)
        w.int(Int(getpid()))
        w.key("uptime_seconds", first: &first)
        w.int(Int(Date().timeIntervalSince(startedAt)))
        w.key("cpu_num", first: &first)
        w.int(ProcessInfo.processInfo.activeProcessorCount)
        w.key("threads", first: &first)
        w.int(p.threads)
        w.key("memory_rss_bytes", first: &first)
        w.int(p.rssBytes)
        w.key("memory_virtual_bytes", first: &first)
        w.int(p.virtualBytes)
        w.key("memory_rss_peak_bytes", first: &first)
        w.int(p.peakRSSBytes)
        w.key("cpu_user_seconds", first: &first)
        w.double(p.userSeconds)
        w.key("cpu_system_seconds", first: &first)
        w.double(p.systemSeconds)
        w.key("queue_pending", first: &first)
        w.int(dispatcher.queue.pendingCount)
        w.key("queue_capacity", first: &first)
        w.int(dispatcher.queue.capacity)
        w.raw("}")
        return w.bytes
    }

    func sysStatsJSON() -> [UInt8] {
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("uptime_seconds", first: &first)
        w.int(Int(Date().timeIntervalSince(startedAt)))
        w.key("responses", first: &first)
        w.raw("{")
        var f2 = true
        for (status, n) in requestCounters.snapshot.sorted(by: { $0.key < $1.key }) {
            w.key(String(status), first: &f2)
            w.int(n)
        }
        w.raw("}}")
        return w.bytes
    }
}

/// Unknown routes and methods answer a JSON 404 with the version headers, like every other answer
/// (Hummingbird's own is an empty body).
struct JSONNotFoundMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
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

/// Process figures from /proc (Linux) and getrusage.
struct ProcessStats {
    var threads = 0
    var rssBytes = 0
    var virtualBytes = 0
    var peakRSSBytes = 0
    var userSeconds = 0.0
    var systemSeconds = 0.0

    static func read() -> ProcessStats {
        var s = ProcessStats()
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard parts.count >= 2, let v = Int(parts[1]) else { continue }
                switch parts[0] {
                case "Threads:": s.threads = v
                case "VmRSS:": s.rssBytes = v * 1024
                case "VmSize:": s.virtualBytes = v * 1024
                case "VmHWM:": s.peakRSSBytes = v * 1024
                default: break
                }
            }
        }
        var usage = rusage()
        if getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 {
            s.userSeconds = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            s.systemSeconds = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        }
        return s
    }
}
