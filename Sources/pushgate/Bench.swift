import ArgumentParser
import AsyncHTTPClient
import Foundation
import GatewayCore
import Histogram
import Hummingbird
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import PushgateCore
import ServiceLifecycle

/// `pushgate bench`: drives a gateway through `POST /api/push` exactly as a client would and
/// measures what reaches the (mock) providers.
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load-test a gateway through its HTTP API (starts mocks + a gateway in-process unless --gateway-url).",
        discussion: """
            Every delivery goes to its own bench token (64 hex: bbbbbbbb... live, dddddddd... dead when
            --error-rate picks it); the payload data carries "pgbt": the send time on CLOCK_MONOTONIC, so
            the mock measures client-send -> provider-receive latency. Exits 2 when live deliveries are
            missing after --drain-timeout.
            """
    )

    // Target.
    @Option(help: "An external gateway, e.g. http://127.0.0.1:8088 (default: start mocks and a gateway in this process).")
    var gatewayURL: String?
    @Option(help: "Control URL of an external `pushgate mock` (e.g. http://127.0.0.1:8446), for delivered/s and latency.")
    var mockURL: String?

    // Mix.
    @Option(help: "Platforms, comma-separated, taken in turn per request: \(Bench.benchPlatforms.map(\.name).joined(separator: ", ")).")
    var platforms: String = "ios"
    @Option(help: "Tokens per notification.") var tokens: Int = 1
    @Option(help: "Notifications per request.") var notifications: Int = 1
    @Option(help: "Approximate size of the message text in bytes (the payload grows by this much).") var payloadBytes: Int = 32
    @Option(help: "Fraction (0..1) of tokens the mock answers as dead (410 Unregistered / UNREGISTERED / HMS 80300007 / 410 Gone).")
    var errorRate: Double = 0
    @Flag(help: "Send with \"sync\": true (the request waits for its deliveries).") var sync = false

    // Load shape.
    @Option(help: "Target deliveries per second (0: as fast as possible).") var rate: Double = 0
    @Option(help: "Seconds of sending (ignored with --count).") var duration: Double = 10
    @Option(help: "Deliveries to send in total (overrides --duration).") var count: Int?
    @Option(help: "Concurrent HTTP/1.1 keep-alive connections (requests in flight).") var concurrency: Int = 8
    @Option(help: "Seconds to wait for the deliveries after the last request.") var drainTimeout: Double = 60

    // In-process gateway and mocks.
    @Option(help: "YAML config for the in-process gateway (mock keys are overridden).") var config: String?
    @Option(name: .customLong("set"), help: "Config override for the in-process gateway, key=value (repeatable), e.g. --set ios.connections=4.")
    var overrides: [String] = []
    @Option(help: "In-process mock APNs: fraction of requests answered --mock-error-status (retried by the gateway).") var mockErrorRate: Double = 0
    @Option(help: "In-process mocks: status of injected failures.") var mockErrorStatus: Int = 503
    @Option(help: "In-process mocks: latency (ms) before every answer.") var mockLatencyMs: Int = 0

    // Output.
    @Flag(help: "Print the report as JSON on stdout.") var json = false
    @Flag(help: "No progress line.") var quiet = false
    @Option(help: "Send for this app (the body's top-level \"app_id\"; apps[].id of the gateway's config).") var app: String?
    @Option(help: "API key sent as Authorization: Bearer (a key of --app, or an admin key); default: $PUSHGATE_API_KEY.")
    var apiKey: String?

    func validate() throws {
        if tokens < 1 || notifications < 1 { throw ValidationError("--tokens and --notifications must be >= 1") }
        if concurrency < 1 { throw ValidationError("--concurrency must be >= 1") }
        if !(0...1).contains(errorRate) { throw ValidationError("--error-rate is a fraction 0..1") }
        for p in platformList where !Self.benchPlatforms.contains(p) {
            throw ValidationError("--platforms: \(p.name) is not supported by the bench")
        }
        if platformList.isEmpty {
            throw ValidationError("--platforms: give at least one of \(Bench.benchPlatforms.map(\.name).joined(separator: ", "))")
        }
        if let app, !AppID.isValid(app) { throw ValidationError("--app: 1-64 characters of A-Z a-z 0-9 . _ -") }
    }

    /// The platforms a registered mock receives (`MockRegistry`; each counts bench tokens) and the gateway serves.
    static let benchPlatforms: [Platform] = MockRegistry.platforms.filter { ProviderRegistry.platforms.contains($0) }

    var platformList: [Platform] {
        platforms.split(separator: ",").compactMap { Platform(name: $0.trimmingCharacters(in: .whitespaces).lowercased()) }
    }

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .warning
            return h
        }
        let perRequest = tokens * notifications
        let plan = BenchPlan(
            platforms: platformList, tokensPerNotification: tokens, notificationsPerRequest: notifications,
            message: String(repeating: "x", count: max(1, payloadBytes)),
            deadEvery: errorRate > 0 ? max(1, Int((1 / errorRate).rounded())) : nil,
            sync: sync)
        plan.app = app
        plan.apiKey = apiKey ?? ProcessInfo.processInfo.environment["PUSHGATE_API_KEY"]
        let totalRequests: Int? = count.map { ($0 + perRequest - 1) / perRequest }

        // Target: external gateway, or mocks + gateway here.
        var local: LocalGateway?
        let gatewayBase: String
        let control: MockControl
        if let gatewayURL {
            gatewayBase = gatewayURL.hasSuffix("/") ? String(gatewayURL.dropLast()) : gatewayURL
            if let mockURL {
                control = .remote(mockURL.hasSuffix("/") ? String(mockURL.dropLast()) : mockURL)
            } else {
                control = .none
                log("no --mock-url: delivered/s and latency cannot be measured (only accepted/s)")
            }
        } else {
            let l = try await LocalGateway.start(
                configPath: config, overrides: overrides, mockErrorRate: mockErrorRate,
                mockErrorStatus: mockErrorStatus, mockLatencyMs: mockLatencyMs)
            local = l
            gatewayBase = "http://127.0.0.1:\(l.port)"
            control = .local(l.recorder, l.mocks)
        }

        var httpConfig = HTTPClient.Configuration()
        httpConfig.httpVersion = .http1Only
        httpConfig.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: concurrency)
        httpConfig.timeout = .init(connect: .seconds(5), read: .seconds(120))
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfig)

        // Web Push subscriptions for the bench ids.
        let maxSeq: Int = {
            if let count { return count + perRequest }
            if rate > 0 { return Int(rate * duration * 1.2) + perRequest }
            return 2_000_000
        }()
        // The platforms whose mock needs the bench's subscribers first (Web Push keys: each id registered).
        let subscriptions = plan.platforms.compactMap { MockRegistry.module(for: $0)?.benchSubscriptions[$0] }
        if !subscriptions.isEmpty {
            do {
                plan.webpush = try await control.registerWebPush(count: subscriptions.contains(true) ? min(maxSeq, 2_000_000) : 0, client: client)
            } catch {
                fail("cannot prepare Web Push subscriptions: \(error)")
            }
        }

        try? await control.reset(client: client)
        let runner = BenchRunner(
            client: client, pushURL: gatewayBase + "/api/push", plan: plan, concurrency: concurrency,
            rate: rate, duration: count == nil ? duration : nil, totalRequests: totalRequests, maxSeq: maxSeq)
        let gatewayRSS = RSSSampler(gatewayBase: local == nil ? gatewayBase : nil, client: client)
        let progress = Task {
            var last = (t: 0.0, accepted: 0, ok: 0)
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                if Task.isCancelled { break }
                await gatewayRSS.sample()
                if quiet { continue }
                let s = runner.counters
                let m = try? await control.stats(client: client)
                let t = Double(monotonicNanos() - runner.startNanos) / 1e9
                let ok = m?.ok ?? 0
                let dt = max(0.001, t - last.t)
                let line = String(
                    format: "t=%5.1fs requests=%d accepted=%d (%.0f/s) delivered=%d (%.0f/s) errors=%d inflight=%d",
                    t, s.requests, s.acceptedDeliveries, Double(s.acceptedDeliveries - last.accepted) / dt,
                    ok, Double(ok - last.ok) / dt, s.errorTotal, s.inFlight)
                last = (t, s.acceptedDeliveries, ok)
                progressLine(line)
            }
        }
        await runner.run()
        let sendEnd = monotonicNanos()

        // Drain: wait until every accepted live delivery reached the mock.
        let expectedLive = runner.counters.acceptedLive
        let expectedDead = runner.counters.acceptedDead
        var stats: MockStats? = try? await control.stats(client: client)
        if control.available {
            let deadline = monotonicNanos() + UInt64(drainTimeout * 1e9)
            while let s = stats, s.okDistinct < expectedLive || s.dead < expectedDead, monotonicNanos() < deadline {
                try? await Task.sleep(for: .milliseconds(100))
                stats = try? await control.stats(client: client)
            }
        }
        progress.cancel()
        await gatewayRSS.sample()
        if !quiet { progressLine(nil) }

        let report = BenchReport.make(
            bench: self, runner: runner, sendEnd: sendEnd, stats: stats, expectedLive: expectedLive,
            gatewayStats: try? await fetchJSON(client, gatewayBase + "/api/stat/app"),
            rss: local != nil ? ProcessMemory.read() : await gatewayRSS.snapshot(),
            rssScope: local != nil ? "this process (bench client + mocks + gateway)" : "gateway process (/api/stat/go)",
            missingSample: await control.missing(below: runner.counters.maxSeqAccepted, deadEvery: plan.deadEvery, client: client))
        if json {
            print(report.json)
        } else {
            print(report.text)
        }
        fflush(nil)
        try? await client.shutdown()
        if let local { await local.stop() }
        if report.missing > 0 { throw ExitCode(2) }
    }

    func log(_ s: String) { FileHandle.standardError.write(Data("pushgate bench: \(s)\n".utf8)) }
}

/// Writes the live progress line to stderr (unbuffered): `\r` on a terminal, one line per tick otherwise.
func progressLine(_ line: String?) {
    let tty = isatty(2) != 0
    if let line {
        FileHandle.standardError.write(Data((tty ? "\r\u{1B}[K" + line : line + "\n").utf8))
    } else if tty {
        FileHandle.standardError.write(Data("\n".utf8))
    }
}

func fetchJSON(_ client: HTTPClient, _ url: String, method: HTTPMethod = .GET) async throws -> [String: Any] {
    var req = HTTPClientRequest(url: url)
    req.method = method
    let resp = try await client.execute(req, timeout: .seconds(10))
    let body = try await resp.body.collect(upTo: 64 << 20)
    guard resp.status == .ok else { throw BenchError("\(url): HTTP \(resp.status.code)") }
    return (try JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any] ?? [:]
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// What one bench run sends.
final class BenchPlan: @unchecked Sendable {
    let platforms: [Platform]
    let tokensPerNotification: Int
    let notificationsPerRequest: Int
    let message: String
    /// Every `deadEvery`-th token (by sequence number) is a dead token.
    let deadEvery: Int?
    let sync: Bool
    /// Set before the run (read-only afterwards).
    var webpush: BenchSubscriber?
    /// `--app`: the body's `app_id`; `--api-key`: sent as a bearer token.
    var app: String?
    var apiKey: String?

    init(platforms: [Platform], tokensPerNotification: Int, notificationsPerRequest: Int, message: String, deadEvery: Int?, sync: Bool) {
        self.platforms = platforms
        self.tokensPerNotification = tokensPerNotification
        self.notificationsPerRequest = notificationsPerRequest
        self.message = message
        self.deadEvery = deadEvery
        self.sync = sync
    }

    var perRequest: Int { tokensPerNotification * notificationsPerRequest }

    func isDead(_ seq: Int) -> Bool { BenchToken.isDead(seq, every: deadEvery) }

    /// The gorush JSON body of request `index` (tokens `index * perRequest ..<`), stamped now.
    func body(index: Int) -> (bytes: [UInt8], live: Int, dead: Int) {
        let platform = platforms[index % platforms.count]
        var seq = index * perRequest
        var live = 0
        var dead = 0
        var s = ""
        s.reserveCapacity(128 + perRequest * 150 + message.utf8.count * notificationsPerRequest)
        s += app.map { "{\"app_id\":\"\($0)\",\"notifications\":[" } ?? "{\"notifications\":["
        let stamp = monotonicNanos()
        let targets = MockRegistry.module(for: platform)?.benchTargets ?? ProviderMockModule.tokenTargets
        for n in 0..<notificationsPerRequest {
            if n > 0 { s += "," }
            s += "{\"platform\":\(platform.rawValue),"
            var tokenList: [String] = []
            tokenList.reserveCapacity(tokensPerNotification)
            for _ in 0..<tokensPerNotification {
                let d = isDead(seq)
                if d { dead += 1 } else { live += 1 }
                tokenList.append(BenchToken.make(UInt64(seq), dead: d))
                seq += 1
            }
            s += targets(platform, tokenList, webpush) + ","
            s += "\"title\":\"Bench\",\"message\":\"\(message)\",\"data\":{\"pgbt\":\(stamp)}}"
        }
        s += "]"
        if sync { s += ",\"sync\":true" }
        s += "}"
        return (Array(s.utf8), live, dead)
    }
}

/// Where the mock's counts come from.
enum MockControl: Sendable {
    case none
    case local(MockRecorder, MockStack)
    case remote(String)

    var available: Bool { if case .none = self { return false } else { return true } }

    func reset(client: HTTPClient) async throws {
        switch self {
        case .none: break
        case .local(let r, _): r.reset()
        case .remote(let base): _ = try await fetchJSON(client, base + "/__mock/reset", method: .POST)
        }
    }

    func stats(client: HTTPClient) async throws -> MockStats? {
        switch self {
        case .none: return nil
        case .local(let r, _):
            return MockStats(json: (try JSONSerialization.jsonObject(with: Data(r.statsJSON(tokens: false).utf8))) as? [String: Any] ?? [:])
        case .remote(let base):
            return MockStats(json: try await fetchJSON(client, base + "/__mock/stats"))
        }
    }

    func missing(below: Int, deadEvery: Int?, client: HTTPClient) async -> [Int] {
        switch self {
        case .none: return []
        case .local(let r, _): return r.missing(below: below, deadEvery: deadEvery, limit: 20)
        case .remote(let base):
            let d = deadEvery.map { "&dead_every=\($0)" } ?? ""
            let j = try? await fetchJSON(client, base + "/__mock/missing?below=\(below)\(d)")
            return Array(((j?["missing"] as? [Int]) ?? []).prefix(20))
        }
    }

    func registerWebPush(count: Int, client: HTTPClient) async throws -> BenchSubscriber {
        switch self {
        case .none: throw BenchError("Web Push needs the mock (--mock-url) to register subscriptions")
        case .local(_, let stack):
            let keys = stack.registerBenchSubscribers(from: 0, count: count)
            return BenchSubscriber(endpointPrefix: stack.webpush.baseURL + "/push/", p256dh: keys.p256dh, auth: keys.auth)
        case .remote(let base):
            let j = try await fetchJSON(client, base + "/__mock/webpush/bench?from=0&count=\(count)", method: .POST)
            return BenchSubscriber(
                endpointPrefix: j["endpoint_prefix"] as? String ?? "", p256dh: j["p256dh"] as? String ?? "", auth: j["auth"] as? String ?? "")
        }
    }
}

struct MockStats {
    var received = 0, ok = 0, dead = 0, injected = 0, okDistinct = 0
    var latency: [String: Int] = [:]
    var firstOK: UInt64 = 0, lastOK: UInt64 = 0
    var perProvider: [String: [String: Int]] = [:]

    init(json: [String: Any]) {
        received = json["received"] as? Int ?? 0
        ok = json["ok"] as? Int ?? 0
        for p in MockRecorder.Provider.allCases {
            let c = json[p.rawValue] as? [String: Int] ?? [:]
            perProvider[p.rawValue] = c
            dead += c["dead"] ?? 0
            injected += c["injected"] ?? 0
        }
        okDistinct = (json["bench_tokens"] as? [String: Int])?["ok_distinct"] ?? 0
        latency = json["latency_us"] as? [String: Int] ?? [:]
        firstOK = (json["first_ok_ns"] as? NSNumber)?.uint64Value ?? 0
        lastOK = (json["last_ok_ns"] as? NSNumber)?.uint64Value ?? 0
    }
}

/// Client-side counters of a run.
struct BenchCounters: Sendable {
    var requests = 0
    var acceptedRequests = 0
    var acceptedDeliveries = 0
    var acceptedLive = 0
    var acceptedDead = 0
    var maxSeqAccepted = 0
    var statuses: [Int: Int] = [:]
    var transportErrors: [String: Int] = [:]
    var inFlight = 0
    var errorTotal: Int { statuses.filter { $0.key != 200 }.values.reduce(0, +) + transportErrors.values.reduce(0, +) }
}

/// Sends the requests: `concurrency` workers over keep-alive HTTP/1.1 connections, paced by `rate`.
final class BenchRunner: Sendable {
    let client: HTTPClient
    let pushURL: String
    let plan: BenchPlan
    let concurrency: Int
    let rate: Double
    let duration: Double?
    let totalRequests: Int?
    let maxSeq: Int
    let startNanos = monotonicNanos()
    private let next = NIOLockedValueBox(0)
    private let state = NIOLockedValueBox(BenchCounters())
    private let responseTimes = NIOLockedValueBox(
        Histogram<UInt64>(lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three))
    private let endNanos = NIOLockedValueBox<UInt64>(0)

    init(client: HTTPClient, pushURL: String, plan: BenchPlan, concurrency: Int, rate: Double, duration: Double?, totalRequests: Int?, maxSeq: Int) {
        self.client = client
        self.pushURL = pushURL
        self.plan = plan
        self.concurrency = concurrency
        self.rate = rate
        self.duration = duration
        self.totalRequests = totalRequests
        self.maxSeq = maxSeq
    }

    var counters: BenchCounters { state.withLockedValue { $0 } }
    var responseTimeHistogram: Histogram<UInt64> { responseTimes.withLockedValue { $0 } }
    /// When the last request was answered.
    var sendingSeconds: Double { Double(max(endNanos.withLockedValue { $0 }, startNanos) - startNanos) / 1e9 }

    func run() async {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask { await self.worker() }
            }
        }
        endNanos.withLockedValue { $0 = monotonicNanos() }
    }

    private func worker() async {
        let perRequest = plan.perRequest
        let interval: Double = rate > 0 ? Double(perRequest) / rate : 0
        let deadline: UInt64? = duration.map { startNanos + UInt64($0 * 1e9) }
        while true {
            let index = next.withLockedValue { v -> Int in
                defer { v += 1 }
                return v
            }
            if let totalRequests, index >= totalRequests { return }
            if (index + 1) * perRequest > maxSeq { return }
            if interval > 0 {
                let due = startNanos + UInt64(Double(index) * interval * 1e9)
                let now = monotonicNanos()
                if let deadline, due >= deadline { return }
                if due > now { try? await Task.sleep(nanoseconds: due - now) }
            }
            if let deadline, monotonicNanos() >= deadline { return }
            let (bytes, live, dead) = plan.body(index: index)
            var req = HTTPClientRequest(url: pushURL)
            req.method = .POST
            req.headers.add(name: "content-type", value: "application/json")
            if let key = plan.apiKey { req.headers.add(name: "authorization", value: "Bearer \(key)") }
            req.body = .bytes(ByteBuffer(bytes: bytes))
            state.withLockedValue {
                $0.requests += 1
                $0.inFlight += 1
            }
            let t0 = monotonicNanos()
            do {
                let resp = try await client.execute(req, timeout: .seconds(120))
                _ = try await resp.body.collect(upTo: 16 << 20)
                let t1 = monotonicNanos()
                responseTimes.withLockedValue { _ = $0.record(max(1, (t1 - t0) / 1000)) }
                let code = Int(resp.status.code)
                state.withLockedValue { s in
                    s.inFlight -= 1
                    s.statuses[code, default: 0] += 1
                    if code == 200 {
                        s.acceptedRequests += 1
                        s.acceptedDeliveries += live + dead
                        s.acceptedLive += live
                        s.acceptedDead += dead
                        s.maxSeqAccepted = max(s.maxSeqAccepted, (index + 1) * perRequest)
                    }
                }
            } catch {
                let name = "\(type(of: error)): \(error)".prefix(80)
                state.withLockedValue { s in
                    s.inFlight -= 1
                    s.transportErrors[String(name), default: 0] += 1
                }
            }
        }
    }
}

/// Peak RSS of an external gateway, sampled from `/api/stat/go`.
actor RSSSampler {
    let gatewayBase: String?
    let client: HTTPClient
    var current = 0
    var peak = 0
    var maxSampled = 0

    init(gatewayBase: String?, client: HTTPClient) {
        self.gatewayBase = gatewayBase
        self.client = client
    }

    func sample() async {
        guard let gatewayBase, let j = try? await fetchJSON(client, gatewayBase + "/api/stat/go") else { return }
        current = j["memory_rss_bytes"] as? Int ?? current
        peak = max(peak, j["memory_rss_peak_bytes"] as? Int ?? 0)
        maxSampled = max(maxSampled, current)
    }

    func snapshot() -> ProcessMemory { ProcessMemory(rssBytes: current, peakRSSBytes: max(peak, maxSampled)) }
}

struct ProcessMemory: Sendable {
    var rssBytes: Int
    var peakRSSBytes: Int

    static func read() -> ProcessMemory {
        var m = ProcessMemory(rssBytes: 0, peakRSSBytes: 0)
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard parts.count >= 2, let v = Int(parts[1]) else { continue }
                if parts[0] == "VmRSS:" { m.rssBytes = v * 1024 }
                if parts[0] == "VmHWM:" { m.peakRSSBytes = v * 1024 }
            }
        }
        return m
    }
}

/// Mocks + gateway in this process.
final class LocalGateway: Sendable {
    let mocks: MockStack
    let recorder: MockRecorder
    let port: Int
    let group: ServiceGroup
    let task: Task<Void, Never>
    /// The throwaway directory of the in-process queue store, removed on stop.
    let storeDirectory: String?

    private init(mocks: MockStack, recorder: MockRecorder, port: Int, group: ServiceGroup, task: Task<Void, Never>, storeDirectory: String?) {
        self.storeDirectory = storeDirectory
        self.mocks = mocks
        self.recorder = recorder
        self.port = port
        self.group = group
        self.task = task
    }

    static func start(configPath: String?, overrides: [String], mockErrorRate: Double, mockErrorStatus: Int, mockLatencyMs: Int) async throws
        -> LocalGateway
    {
        let failure = MockRecorder.Failure(rate: mockErrorRate, status: mockErrorStatus)
        let recorder = MockRecorder(failures: Dictionary(uniqueKeysWithValues: MockRecorder.Provider.allCases.map { ($0, failure) }))
        var mockSettings = MockStack.Settings(recordRequests: false, recorder: recorder)
        for m in MockRecorder.Provider.allCases { mockSettings.latencyMs[m.rawValue] = mockLatencyMs }
        let mocks = try await MockStack.start(mockSettings)
        var raw: RawConfig
        do {
            raw = try RawConfig.load(path: configPath)
        } catch {
            fail("\(error)")
        }
        mocks.apply(to: &raw)
        raw.set("core", CoreConfig.address, "127.0.0.1")
        raw.set("core", CoreConfig.port, 0)
        raw.set("log", LogConfig.accessLevel, "warning")
        raw.set("core", CoreConfig.shutdownTimeout, 2)
        for o in overrides {
            do { try raw.set(assignment: o) } catch { fail("\(error)") }
        }
        // Unless a store was chosen explicitly, the bench's deliveries go to a throwaway SQLite file:
        // never into the default `data/pushgate.sqlite` of the directory it runs in, which a real
        // gateway there would share (and send the bench's tokens from).
        var storeDirectory: String?
        if raw.section("queue")[QueueConfig.sqlitePath] == QueueConfig.sqlitePath.defaultValue {
            let dir = NSTemporaryDirectory() + "pushgate-bench-\(UUID().uuidString)"
            raw.set("queue", QueueConfig.sqlitePath, dir + "/queue.sqlite")
            storeDirectory = dir
        }
        let logger = makeLogger("pushgate", level: "warning")
        let gateway: Gateway
        do {
            gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        } catch {
            fail("\(error)")
        }
        let (portStream, portContinuation) = AsyncStream<Int>.makeStream()
        let app = try gateway.makeApplication(onServerRunning: { channel in
            portContinuation.yield(channel.localAddress?.port ?? 0)
            portContinuation.finish()
        })
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let task = Task {
            do { try await group.run() } catch { FileHandle.standardError.write(Data("pushgate bench: gateway stopped: \(error)\n".utf8)) }
        }
        var port = 0
        for await p in portStream {
            port = p
            break
        }
        guard port > 0 else { fail("the in-process gateway did not start") }
        return LocalGateway(mocks: mocks, recorder: recorder, port: port, group: group, task: task, storeDirectory: storeDirectory)
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await task.value
        try? await mocks.stop()
        if let storeDirectory { try? FileManager.default.removeItem(atPath: storeDirectory) }
    }
}
