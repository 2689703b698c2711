import ArgumentParser
import Foundation
import GatewayCore
import MockProviders
import NIOCore
import NIOPosix
import PushgateCore
import Signing

/// `pushgate mock`: the mock providers as a standalone process, for external gateways and load tools.
struct MockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock",
        abstract: "Run the mock providers (APNs, FCM + OAuth, HMS + OAuth, Web Push/UnifiedPush) on loopback for an external gateway.",
        discussion: """
            Prints the mock URLs and the config snippet that points a gateway at them, and writes the
            throwaway CA (core.ca_file), the APNs .p8, the FCM service account and the snippet to --dir.
            A plain-HTTP control port (--stats-port) serves GET /__mock/stats (counts, per-token with
            ?tokens=1, ingest->mock latency of bench payloads), POST /__mock/reset,
            POST /__mock/failures?provider=apns&rate=1&status=503 (change injected failures at run time), GET /__mock/config,
            POST /__mock/webpush/subscribe?count=N (fresh subscriptions as JSON).
            """
    )

    @Option(help: "Directory for mock-ca.pem, mock-apns.p8, mock-fcm.json and gateway-snippet.yml (kept on exit).")
    var dir: String = "mock-providers"

    @Option(help: "Mock APNs port (0: any free port).") var apnsPort: Int = 8443
    @Option(help: "Mock FCM (+OAuth token endpoint) port.") var fcmPort: Int = 8444
    @Option(help: "Mock Web Push / UnifiedPush port.") var webpushPort: Int = 8445
    @Option(help: "Mock Huawei HMS (+OAuth token endpoint) port.") var hmsPort: Int = 8447
    @Option(help: "Plain-HTTP control port for /__mock/stats (0: any free port, -1: none).") var statsPort: Int = 8446

    @Option(help: "Fraction (0..1) of APNs requests answered with --apns-error-status.") var apnsErrorRate: Double = 0
    @Option(help: "Status of injected APNs failures (503 ServiceUnavailable, 429, 500, 410 ...).") var apnsErrorStatus: Int = 503
    @Option(help: "Fraction of FCM sends answered with --fcm-error-status.") var fcmErrorRate: Double = 0
    @Option(help: "Status of injected FCM failures (503 UNAVAILABLE, 429, 500, 404 UNREGISTERED ...).") var fcmErrorStatus: Int = 503
    @Option(help: "Fraction of Web Push requests answered with --webpush-error-status.") var webpushErrorRate: Double = 0
    @Option(help: "Status of injected Web Push failures.") var webpushErrorStatus: Int = 503

    @Option(help: "Latency (ms) added before every APNs answer.") var apnsLatencyMs: Int = 0
    @Option(help: "Latency (ms) added before every FCM answer.") var fcmLatencyMs: Int = 0
    @Option(help: "Latency (ms) added before every Web Push answer.") var webpushLatencyMs: Int = 0

    @Option(help: "Any registered mock, by name: NAME=PORT (repeatable; overrides --<name>-port).") var port: [String] = []
    @Option(help: "Any registered mock: NAME=MS latency (repeatable).") var latency: [String] = []
    @Option(
        name: .customLong("max-concurrent-streams"),
        help: "Any registered mock: NAME=N, the SETTINGS_MAX_CONCURRENT_STREAMS of its connections (repeatable; default 1000).")
    var maxConcurrentStreams: [String] = []
    @Option(help: "Any registered mock: NAME=RATE:STATUS injected failures (repeatable), e.g. fcm=0.01:503.") var failure: [String] = []

    @Flag(help: "Keep every request in memory (grows without bound; for debugging).") var record = false

    @Option(help: "PEM CA file: the mock APNs also accepts client certificates from this CA (certificate-based trust, no JWT).")
    var apnsClientCA: String?
    @Option(help: "Also run a loopback HTTP CONNECT proxy on this port for core.http_proxy (0: any free port, -1: none).")
    var proxyPort: Int = -1

    @Flag(
        name: [.customLong("apns-certificate"), .customLong("apns-client-certificates")],
        help: """
            Make a throwaway APNs client certificate in --dir (apns-client/: Keychain-style .p12, OpenSSL 3 .p12, .pem;             needs the openssl command) and have the mock APNs accept it (certificate-based trust, no JWT).
            """)
    var apnsCertificate = false

    /// `NAME=VALUE` options by registered mock name.
    func byName(_ list: [String], option: String) throws -> [String: String] {
        var out: [String: String] = [:]
        for item in list {
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2, MockRegistry.module(named: kv[0]) != nil else {
                throw ValidationError(
                    "--\(option) \(item): expected NAME=VALUE with NAME one of \(MockRegistry.modules.map(\.name).joined(separator: ", "))")
            }
            out[kv[0]] = kv[1]
        }
        return out
    }

    func run() async throws {
        var failures: [MockRecorder.Provider: MockRecorder.Failure] = [
            .apns: .init(rate: apnsErrorRate, status: apnsErrorStatus),
            .fcm: .init(rate: fcmErrorRate, status: fcmErrorStatus),
            .webpush: .init(rate: webpushErrorRate, status: webpushErrorStatus),
        ]
        var ports = ["apns": apnsPort, "fcm": fcmPort, "hms": hmsPort, "webpush": webpushPort]
        var latencies = ["apns": apnsLatencyMs, "fcm": fcmLatencyMs, "webpush": webpushLatencyMs]
        for (name, v) in try byName(port, option: "port") {
            guard let p = Int(v) else { throw ValidationError("--port \(name)=\(v): not a port number") }
            ports[name] = p
        }
        for (name, v) in try byName(latency, option: "latency") {
            guard let ms = Int(v), ms >= 0 else { throw ValidationError("--latency \(name)=\(v): not a number of milliseconds") }
            latencies[name] = ms
        }
        for (name, v) in try byName(failure, option: "failure") {
            let parts = v.split(separator: ":").map(String.init)
            guard let rate = Double(parts[0]), (0...1).contains(rate), let provider = MockRecorder.Provider(rawValue: name) else {
                throw ValidationError("--failure \(name)=\(v): expected RATE (0..1) or RATE:STATUS")
            }
            failures[provider] = .init(rate: rate, status: parts.count > 1 ? Int(parts[1]) ?? 503 : 503)
        }
        var streams: [String: Int] = [:]
        for (name, v) in try byName(maxConcurrentStreams, option: "max-concurrent-streams") {
            guard let n = Int(v), (1...Int(Int32.max)).contains(n) else {
                throw ValidationError("--max-concurrent-streams \(name)=\(v): not a number of streams (1 or more)")
            }
            streams[name] = n
        }
        let recorder = MockRecorder(failures: failures)
        let absoluteDir = dir.hasPrefix("/") ? dir : FileManager.default.currentDirectoryPath + "/" + dir
        var apnsClientCAPEM: [String] = []
        if let apnsClientCA {
            guard let pem = try? String(contentsOfFile: apnsClientCA, encoding: .utf8), pem.contains("-----BEGIN CERTIFICATE-----") else {
                fail("--apns-client-ca \(apnsClientCA): not a readable PEM certificate file")
            }
            apnsClientCAPEM = [pem]
        }
        var clientCertificate: TestAPNsCertificate?
        if apnsCertificate {
            do {
                let made = try TestAPNsCertificate.make(in: absoluteDir + "/apns-client")
                apnsClientCAPEM.append(made.caCertificatePEM)
                clientCertificate = made
            } catch {
                fail("--apns-certificate: \(error)")
            }
        }
        var settings = MockStack.Settings(
            ports: ports, directory: absoluteDir, latencyMs: latencies, recordRequests: record, recorder: recorder, apnsClientCAPEM: apnsClientCAPEM)
        settings.maxConcurrentStreams = streams
        let stack: MockStack
        do {
            stack = try await MockStack.start(settings)
        } catch {
            fail("cannot start the mock providers: \(error)")
        }
        var proxy: MockConnectProxy?
        if proxyPort >= 0 {
            var options = MockConnectProxy.Options()
            options.port = proxyPort
            let p = MockConnectProxy(options: options)
            do {
                try await p.start()
            } catch {
                fail("cannot start the CONNECT proxy on port \(proxyPort): \(error)")
            }
            proxy = p
        }
        var control: MockControlServer?
        if statsPort >= 0 {
            do {
                control = try await MockControlServer.start(stack: stack, recorder: recorder, proxy: proxy, port: statsPort)
            } catch {
                fail("cannot start the control port \(statsPort): \(error)")
            }
        }
        print(stack.banner, terminator: "")
        if let proxy { print("  proxy      \(proxy.url)   (core.http_proxy; CONNECT to loopback targets only)") }
        if let control {
            print("  control    \(control.baseURL)/__mock/stats   (POST /__mock/reset, GET /__mock/config, GET /__mock/apns-jwt,")
            let records = ["apns-requests", "fcm-messages"] + stack.mocks.flatMap { $0.records.map(\.name) }
            print("             GET \(records.map { "/__mock/" + $0 }.joined(separator: ", ")) with --record,")
            print("             GET /__mock/proxy with --proxy-port)")
        }
        if let c = clientCertificate {
            print("  APNs client certificate (topics \(c.topics.joined(separator: ", ")), password \(c.password)):")
            print("             \(c.p12LegacyPath) (Keychain-style), \(c.p12AESPath) (OpenSSL 3), \(c.pemPath)")
        }
        let injected = MockRecorder.Provider.allCases.compactMap { p -> String? in
            guard let f = failures[p], f.rate > 0 else { return nil }
            return "\(MockRegistry.module(named: p.rawValue)?.title ?? p.rawValue) \(Int(f.rate * 100))%->\(f.status)"
        }
        if !injected.isEmpty { print("  injected failures: \(injected.joined(separator: ", "))") }
        print("  tokens starting with dddddddd (64 hex) are answered as dead (410 / UNREGISTERED / HMS 80300007)")
        print("\n# gateway config snippet (also in \(absoluteDir)/gateway-snippet.yml):")
        print(stack.configSnippet)
        fflush(nil)

        // Run until SIGINT / SIGTERM.
        let signals = AsyncStream<Int32> { continuation in
            for sig in [SIGINT, SIGTERM] {
                signal(sig, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
                source.setEventHandler { continuation.yield(sig) }
                source.resume()
                MockCommand.keep.append(source)
            }
        }
        for await _ in signals { break }
        try? await proxy?.stop()
        try? await control?.stop()
        try? await stack.stop()
    }

    nonisolated(unsafe) static var keep: [any DispatchSourceSignal] = []
}

/// The plain-HTTP control port of `pushgate mock` (HTTP/1.1 and h2c, 127.0.0.1).
final class MockControlServer: Sendable {
    let server: MockHTTPServer

    private init(server: MockHTTPServer) { self.server = server }

    var baseURL: String { server.baseURL }

    static func start(stack: MockStack, recorder: MockRecorder, proxy: MockConnectProxy? = nil, port: Int) async throws -> MockControlServer {
        var options = MockHTTPServer.Options()
        options.port = port
        let server = MockHTTPServer(
            options: options, eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            syncHandler: { request in
                handle(request, stack: stack, recorder: recorder, proxy: proxy)
            })
        try await server.start()
        return MockControlServer(server: server)
    }

    func stop() async throws { try await server.stop() }

    static func query(_ path: String) -> [String: String] {
        guard let q = path.split(separator: "?", maxSplits: 1).dropFirst().first else { return [:] }
        var out: [String: String] = [:]
        for pair in q.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            out[String(kv[0])] = kv.count > 1 ? String(kv[1]).removingPercentEncoding ?? String(kv[1]) : ""
        }
        return out
    }

    static func handle(_ request: MockRequest, stack: MockStack, recorder: MockRecorder, proxy: MockConnectProxy? = nil) -> MockResponse {
        let path = String(request.path.split(separator: "?", maxSplits: 1).first ?? "")
        let q = query(request.path)
        if request.method == "GET", path.hasPrefix("/__mock/"),
            let kept = stack.mocks.lazy.flatMap(\.records).first(where: { "/__mock/" + $0.name == path })
        {
            return .json(200, kept.json())
        }
        switch (request.method, path) {
        case ("GET", "/__mock/stats"):
            return .json(200, recorder.statsJSON(tokens: q["tokens"] == "1" || q["tokens"] == "true"))
        case ("GET", "/__mock/missing"):
            // Bench sequence numbers below `below` never answered OK (dead tokens every `dead_every` skipped).
            let below = Int(q["below"] ?? "") ?? 0
            let missing = recorder.missing(below: below, deadEvery: Int(q["dead_every"] ?? ""))
            return .json(200, "{\"missing\":[\(missing.map(String.init).joined(separator: ","))]}")
        case ("POST", "/__mock/failures"):
            // Changes the scripted failures at run time: ?provider=apns|fcm|webpush&rate=0..1&status=503.
            guard let provider = MockRecorder.Provider(rawValue: q["provider"] ?? "") else {
                let names = MockRegistry.modules.map(\.name)
                return .json(400, "{\"error\":\"provider must be \(names.dropLast().joined(separator: ", ")) or \(names.last ?? "")\"}")
            }
            guard let rate = Double(q["rate"] ?? ""), rate >= 0, rate <= 1 else {
                return .json(400, "{\"error\":\"rate must be a number from 0 to 1\"}")
            }
            let status = Int(q["status"] ?? "503") ?? 0
            guard (400...599).contains(status) else {
                return .json(400, "{\"error\":\"status must be an HTTP error status (400-599)\"}")
            }
            recorder.setFailure(provider, .init(rate: rate, status: status))
            return .json(200, "{\"provider\":\"\(provider.rawValue)\",\"rate\":\(rate),\"status\":\(status)}")
        case ("POST", "/__mock/reset"):
            recorder.reset()
            return .json(200, "{\"reset\":true}")
        case ("GET", "/__mock/apns-jwt"):
            // A fresh APNs provider token for load tools (h2load / curl straight at the mock APNs).
            return MockResponse(status: 200, headers: [("content-type", "text/plain")], body: Array((stack.apnsProviderToken() + "\n").utf8))
        case ("GET", "/__mock/apns-requests"):
            // What the mock APNs saw (kept with --record): how each request authenticated, and the answer.
            var w = JSONWriter()
            w.raw("[")
            for (i, r) in (stack.apns?.mock.requests ?? []).enumerated() {
                var first = true
                w.raw(i == 0 ? "{" : ",{")
                w.key("token", first: &first)
                w.string(r.token)
                w.key("topic", first: &first)
                w.string(r.topic ?? "")
                w.key("status", first: &first)
                w.int(r.status)
                w.key("reason", first: &first)
                w.string(r.reason ?? "")
                w.key("authorization", first: &first)
                w.raw(r.header("authorization") == nil ? "false" : "true")
                w.key("kid", first: &first)
                if let kid = r.providerKeyID { w.string(kid) } else { w.raw("null") }
                w.key("client_certificate_subject", first: &first)
                if let subject = r.clientCertificateSubject { w.string(subject) } else { w.raw("null") }
                w.key("payload", first: &first)
                w.string(String(decoding: r.body, as: UTF8.self))
                w.raw("}")
            }
            w.raw("]")
            return .json(200, w.string)
        case ("GET", "/__mock/fcm-messages"):
            // What the mock FCM accepted (kept with --record): each message's target and its `message` object.
            var w = JSONWriter()
            w.raw("[")
            for (i, m) in (stack.fcm?.mock.messages ?? []).enumerated() {
                var first = true
                w.raw(i == 0 ? "{" : ",{")
                w.key("target", first: &first)
                w.string(m.target)
                w.key("message", first: &first)
                w.raw(m.messageJSON)
                w.raw("}")
            }
            w.raw("]")
            return .json(200, w.string)
        case ("GET", "/__mock/proxy"):
            guard let proxy else { return .json(404, "{\"error\":\"no proxy: start with --proxy-port\"}") }
            var w = JSONWriter()
            w.raw("{\"connects\":[")
            for (i, c) in proxy.connects.enumerated() {
                var first = true
                w.raw(i == 0 ? "{" : ",{")
                w.key("target", first: &first)
                w.string(c.target)
                w.key("status", first: &first)
                w.int(c.status)
                w.raw("}")
            }
            w.raw("]}")
            return .json(200, w.string)
        case ("GET", "/__mock/config"):
            return MockResponse(status: 200, headers: [("content-type", "application/yaml")], body: Array(stack.configSnippet.utf8))
        case ("POST", "/__mock/webpush/subscribe"):
            let count = max(1, min(10_000, Int(q["count"] ?? "1") ?? 1))
            var parts: [String] = []
            for _ in 0..<count {
                let (sub, _) = stack.webpush.makeSubscription()
                parts.append(
                    "{\"endpoint\":\"\(sub.endpoint)\",\"keys\":{\"p256dh\":\"\(sub.keys?.p256dh ?? "")\",\"auth\":\"\(sub.keys?.auth ?? "")\"}}")
            }
            return .json(200, "[" + parts.joined(separator: ",") + "]")
        case ("POST", "/__mock/webpush/bench"):
            // Registers bench subscription ids [from, from+count) (live and dead forms) sharing one key pair.
            let from = Int(q["from"] ?? "0") ?? 0
            let count = max(0, min(5_000_000, Int(q["count"] ?? "0") ?? 0))
            let keys = stack.registerBenchSubscribers(from: from, count: count)
            return .json(200, "{\"endpoint_prefix\":\"\(stack.webpush.baseURL)/push/\",\"p256dh\":\"\(keys.p256dh)\",\"auth\":\"\(keys.auth)\"}")
        default:
            return .json(404, "{\"error\":\"no such control route \(path)\"}")
        }
    }
}

extension MockStack.Settings {
    /// The command line's mocks: `recorder` (when given) decides every answer and counts it; the mock
    /// APNs accepts client certificates chaining to `apnsClientCAPEM` (certificate-based trust).
    init(
        ports: [String: Int] = [:], directory: String? = nil, latencyMs: [String: Int] = [:], recordRequests: Bool = true,
        recorder: MockRecorder?, apnsClientCAPEM: [String] = []
    ) {
        self.init(ports: ports, directory: directory, latencyMs: latencyMs, recordRequests: recordRequests) { name, run in
            if name == ProviderMockModule.apns.name { run.clientCertificateRootsPEM = apnsClientCAPEM }
            if let recorder, let provider = MockRecorder.Provider(rawValue: name) {
                run.verdict = { token, body in
                    switch recorder.observe(provider, token: token, body: body) {
                    case .ok: return .ok
                    case .dead: return .dead
                    case .injected(let status): return .injected(status: status)
                    }
                }
            }
        }
    }
}

extension MockStack {
    /// The mocks at the ports of the `mock:` section (`mock.<name>_port`, 0: any free port).
    static func start(raw: RawConfig) async throws -> MockStack {
        var settings = Settings()
        for module in MockRegistry.modules { settings.ports[module.name] = raw.section("mock")[MockConfig.port(module.name)] }
        return try await start(settings)
    }

    /// Points `raw` at these mocks (the keys each mock sets, and those it sets only where left empty).
    func apply(to raw: inout RawConfig) {
        for (k, v) in overrides { raw.set(k, v) }
        for m in mocks {
            for (k, v) in m.configDefaults where raw.values[k] == .string("") { raw.set(k, v) }
            for (k, v) in m.configDefaults { raw.setInApps(k, v) }
        }
    }

    /// A provider token (ES256 JWT) the mock APNs accepts for the next hour.
    func apnsProviderToken() -> String {
        guard let apnsKey = apns?.key else { return "" }
        let signer = JWTSigner(key: .es256(apnsKey.privateKey))
        return
            (try? signer.sign(
                header: [("kid", .string(apnsKey.keyID))],
                claims: [("iss", .string(apnsKey.teamID)), ("iat", .int(Int64(Date().timeIntervalSince1970)))])) ?? ""
    }

    /// Registers bench subscription ids (live and dead forms of each sequence number) that share one key pair; returns the keys.
    func registerBenchSubscribers(from: Int, count: Int) -> WebPushSubscription.Keys {
        let shared = benchSubscriber
        for seq in from..<(from + count) {
            for dead in [false, true] {
                webpush.register(
                    TestWebPushSubscriber(id: BenchToken.make(UInt64(seq), dead: dead), privateKey: shared.privateKey, authSecret: shared.authSecret))
            }
        }
        return shared.keys
    }
}
