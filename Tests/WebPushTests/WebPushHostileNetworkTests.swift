import Foundation
import HTTP2Pool
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ProviderKit
import PushgateCore
import Signing
import TestSupport
import XCTest

@testable import WebPush

/// Hostile push services and DNS, over real sockets on loopback only.
///
/// Tests may not leave the machine, so "public" is simulated: the SSRF guard's classifier is told that
/// 127.0.0.2 is public (everything else keeps its real class, 127.0.0.1 stays loopback). The
/// legitimate push service listens on 127.0.0.2; a trap listens on 127.0.0.1, same port.
final class WebPushHostileNetworkTests: XCTestCase {
    static let serviceHost = "push.rebind.test"
    static let allowed: [UInt8] = [127, 0, 0, 2]
    static let loopback: [UInt8] = [127, 0, 0, 1]
    static let names = [serviceHost] + (0..<24).map { "o\($0).rebind.test" }

    var group: MultiThreadedEventLoopGroup!
    var pki: TestPKI!
    var engines: [WebPushEngine] = []
    var stoppers: [@Sendable () async -> Void] = []

    override func setUp() async throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        pki = try TestPKI.generate(hosts: Self.names)
    }

    override func tearDown() async throws {
        for e in engines { await e.shutdown() }
        engines = []
        for s in stoppers.reversed() { await s() }
        stoppers = []
        try await group.shutdownGracefully()
    }

    // MARK: helpers

    /// The classifier of these tests: 127.0.0.2 is public, the rest as in production.
    static let classifier: @Sendable ([UInt8]) -> IPAddressClass = { bytes in
        bytes == allowed ? .public : IPAddressClassifier.classify(bytes: bytes)
    }

    /// A TCP listener that counts accepted connections and closes them.
    final class Trap: @unchecked Sendable {
        let accepted = NIOLockedValueBox(0)
        var channel: (any Channel)?
        func start(host: String, port: Int, group: any EventLoopGroup) async throws {
            let accepted = self.accepted
            channel = try await ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { ch in
                    accepted.withLockedValue { $0 += 1 }
                    ch.close(promise: nil)
                    return ch.eventLoop.makeSucceededVoidFuture()
                }
                .bind(host: host, port: port).get()
        }
        func stop() async { try? await channel?.close() }
        var count: Int { accepted.withLockedValue { $0 } }
    }

    /// The push service on 127.0.0.2 (addressed as `push.rebind.test`) and the trap on 127.0.0.1:same port.
    func startServiceAndTrap(alpn: [String] = ["h2", "http/1.1"], sni: NIOLockedValueBox<[String?]>? = nil) async throws -> (MockWebPush, Trap) {
        var tls = try pki.serverTLSConfiguration(alpn: alpn)
        if let sni {
            tls.sslContextCallback = { values, promise in
                sni.withLockedValue { $0.append(values.serverHostname) }
                promise.succeed(NIOSSLContextConfigurationOverride())
            }
        }
        var options = MockWebPush.Options(tls: tls)
        options.host = "127.0.0.2"
        options.publicHost = Self.serviceHost
        let mock = MockWebPush(options: options, eventLoopGroup: group)
        try await mock.start()
        stoppers.append { try? await mock.stop() }
        let trap = Trap()
        try await trap.start(host: "127.0.0.1", port: mock.port, group: group)
        stoppers.append { await trap.stop() }
        return (mock, trap)
    }

    func makeEngine(
        resolver: @escaping @Sendable (String, Int) async throws -> [[UInt8]], maxOrigins: Int = 512,
        originIdleTimeout: TimeAmount = .seconds(300),
        configure: (inout WebPushConfiguration) -> Void = { _ in }
    ) throws -> WebPushEngine {
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:ops@pushgate.test")
        config.allowPrivateEndpoints = false  // the SSRF guard is on
        config.requestTimeoutSeconds = 10
        config.resolutionCacheSeconds = 0  // every send resolves: the rebinding attacker gets every chance
        configure(&config)
        let engine = try WebPushEngine(
            configuration: config, tlsConfiguration: try pki.clientTLSConfiguration(),
            eventLoopGroup: group, resolver: resolver, addressClassifier: Self.classifier,
            maxOrigins: maxOrigins, originIdleTimeout: originIdleTimeout)
        engines.append(engine)
        return engine
    }

    /// A resolver answering `first` on the first lookup and `then` on every later one.
    final class RebindingResolver: Sendable {
        let calls = NIOLockedValueBox(0)
        let first: [[UInt8]]
        let then: [[UInt8]]
        init(first: [[UInt8]], then: [[UInt8]]) {
            self.first = first
            self.then = then
        }
        func resolve(_ host: String, _ port: Int) async throws -> [[UInt8]] {
            let n = calls.withLockedValue { c -> Int in
                c += 1
                return c
            }
            return n == 1 ? first : then
        }
        var count: Int { calls.withLockedValue { $0 } }
    }

    let ctx = DeliveryContext(messageID: "m-1")

    func payload(_ engine: WebPushEngine, _ text: String = "x") throws -> any PreparedPush {
        var n = PushNotification(platform: .webpush)
        n.payload = text
        return try engine.prepare(n)
    }

    // MARK: rebinding

    func testRebindingSecondAnswerLoopbackIsNeverConnectedHTTP2() async throws {
        try await rebindingScenario(alpn: ["h2", "http/1.1"], expect: .http2)
    }

    func testRebindingSecondAnswerLoopbackIsNeverConnectedHTTP1() async throws {
        try await rebindingScenario(alpn: ["http/1.1"], expect: .http1)
    }

    func rebindingScenario(alpn: [String], expect: WebPushTransport.OriginProtocol) async throws {
        let sni = NIOLockedValueBox<[String?]>([])
        let (mock, trap) = try await startServiceAndTrap(alpn: alpn, sni: sni)
        let dns = RebindingResolver(first: [Self.allowed], then: [Self.loopback])
        let engine = try makeEngine(resolver: { try await dns.resolve($0, $1) })
        let provider = WebPushProvider(engine: engine)
        let (sub, subscriber) = mock.makeSubscription(id: "victim")
        XCTAssertTrue(sub.endpoint.hasPrefix("https://push.rebind.test:"), sub.endpoint)
        let prepared = try payload(engine, "first")

        // First send: one lookup (127.0.0.2, allowed), connected there, delivered.
        let o1 = await provider.send(prepared, to: .subscription(sub), context: ctx)
        XCTAssertTrue(o1.isDelivered, "\(o1) \(mock.rejections)")
        XCTAssertEqual(dns.count, 1, "resolved once per send; the connection used that answer")
        let push = try XCTUnwrap(mock.pushes(id: subscriber.id).first)
        XCTAssertEqual(push.header("host"), "push.rebind.test:\(mock.port)", "Host / :authority carry the name, not the address")
        XCTAssertEqual(push.plaintextString, "first")
        XCTAssertEqual(push.vapidAudience, "https://push.rebind.test:\(mock.port)")
        XCTAssertEqual(sni.withLockedValue { $0 }.first ?? nil, Self.serviceHost, "SNI is the host name")
        XCTAssertEqual(engine.transport.learntProtocol(origin: mock.baseURL), expect)

        // Later sends: DNS now answers 127.0.0.1. Refused before any connection; the trap stays empty.
        for _ in 0..<3 {
            let o = await provider.send(prepared, to: .subscription(sub), context: ctx)
            XCTAssertEqual(
                o,
                .permanent(
                    reason:
                        "endpoint refused: push.rebind.test resolves to 127.0.0.1, a loopback address (set webpush.allow_private_endpoints to allow)",
                    status: nil))
        }
        XCTAssertEqual(dns.count, 4)
        XCTAssertEqual(mock.pushes(id: subscriber.id).count, 1)
        XCTAssertEqual(trap.count, 0, "nothing may ever connect to the loopback trap")
        XCTAssertGreaterThanOrEqual(mock.connectionsAccepted, 1)
    }

    func testMixedAnswerWithLoopbackIsRefusedAndTrapUntouched() async throws {
        let (mock, trap) = try await startServiceAndTrap()
        // One answer listing an allowed and a loopback address: refused as a whole (any bad address).
        let engine = try makeEngine(resolver: { _, _ in [Self.allowed, Self.loopback] })
        let (sub, _) = mock.makeSubscription()
        let o = await WebPushProvider(engine: engine).send(try payload(engine), to: .subscription(sub), context: ctx)
        XCTAssertEqual(
            o.reason, "endpoint refused: push.rebind.test resolves to 127.0.0.1, a loopback address (set webpush.allow_private_endpoints to allow)")
        XCTAssertEqual(trap.count, 0)
        XCTAssertEqual(mock.connectionsAccepted, 0)
    }

    func testConnectionIsMadeToTheCheckedAddressNotARelookup() async throws {
        // The service answers on 127.0.0.2 only. A client that looked the name up again (system DNS)
        // could not even find push.rebind.test; delivery proves the checked address was used.
        let (mock, trap) = try await startServiceAndTrap()
        let dns = RebindingResolver(first: [Self.allowed], then: [Self.allowed])
        let engine = try makeEngine(resolver: { try await dns.resolve($0, $1) }) { $0.resolutionCacheSeconds = 60 }
        let provider = WebPushProvider(engine: engine)
        let (sub, _) = mock.makeSubscription()
        let prepared = try payload(engine)
        for _ in 0..<5 {
            let o = await provider.send(prepared, to: .subscription(sub), context: ctx)
            XCTAssertTrue(o.isDelivered, "\(o)")
        }
        XCTAssertEqual(dns.count, 1, "answers are cached for resolution_cache_seconds")
        XCTAssertEqual(trap.count, 0)
    }

    // MARK: redirects

    func testRedirectsAreReportedNotFollowed() async throws {
        for alpn in [["h2", "http/1.1"], ["http/1.1"]] {
            let (mock, trap) = try await startServiceAndTrap(alpn: alpn)
            let engine = try makeEngine(resolver: { _, _ in [Self.allowed] })
            let provider = WebPushProvider(engine: engine)
            let target = mock.endpoint(id: "elsewhere")
            for status in [301, 302, 307, 308] {
                let (sub, _) = mock.makeSubscription(id: "moved\(status)")
                mock.script(id: "moved\(status)", replies: [.custom(status: status, body: "", headers: ["location": target])])
                let o = await provider.send(try payload(engine), to: .subscription(sub), context: ctx)
                XCTAssertEqual(o, .permanent(reason: "RedirectNotFollowed: \(status) to \(target)", status: status), "\(alpn)")
            }
            XCTAssertEqual(mock.pushes(id: "elsewhere").count, 0, "a redirect is never followed")
            XCTAssertEqual(mock.requestCount, 4)
            XCTAssertEqual(trap.count, 0)
        }
    }

    // MARK: response bodies

    func testHugeResponseBodyIsCappedAndClassified() async throws {
        let huge = String(repeating: "A", count: 4 << 20)  // 4 MiB
        for alpn in [["h2", "http/1.1"], ["http/1.1"]] {
            let (mock, _) = try await startServiceAndTrap(alpn: alpn)
            let engine = try makeEngine(resolver: { _, _ in [Self.allowed] })
            let (ok, _) = mock.makeSubscription(id: "ok")
            let (bad, _) = mock.makeSubscription(id: "bad")
            mock.script(id: "ok", replies: [.custom(status: 201, body: huge, headers: [:])])
            mock.script(id: "bad", replies: [.custom(status: 503, body: huge, headers: ["retry-after": "9"])])
            let provider = WebPushProvider(engine: engine)
            let o1 = await provider.send(try payload(engine), to: .subscription(ok), context: ctx)
            XCTAssertEqual(o1, .delivered(providerID: nil), "\(alpn)")
            let o2 = await provider.send(try payload(engine), to: .subscription(bad), context: ctx)
            guard case .transient(let reason, 503, 9) = o2 else { return XCTFail("\(alpn): \(o2)") }
            XCTAssertEqual(reason, "ServerError 503: " + String(repeating: "A", count: 200) + "…")

            // What the transport keeps of the answer: at most 64 KiB.
            mock.script(id: "bad", replies: [.custom(status: 500, body: huge, headers: [:])])
            let request = try engine.render(
                payload(engine) as! PreparedWebPush,
                .encrypted(WebPushEndpoint(bad.endpoint)!, try WebPushReceiverKeys(bad.keys!)))
            let addresses = [try SocketAddress(ipAddress: "127.0.0.2", port: mock.port)]
            let r = try await engine.transport.post(
                WebPushEndpoint(bad.endpoint)!, headers: request.headers, body: request.body,
                addresses: addresses)
            XCTAssertEqual(r.status, 500)
            XCTAssertEqual(r.body.count, WebPushTransport.maxResponseBodyBytes, "\(alpn)")
            // The connection (h2) or the next one (h1) still works.
            let o3 = await provider.send(try payload(engine), to: .subscription(ok), context: ctx)
            XCTAssertTrue(o3.isDelivered, "\(o3)")
        }
    }

    // MARK: bounded pools

    func testDistinctOriginsKeepABoundedNumberOfPoolsAndIdlePoolsClose() async throws {
        // 24 distinct origins (o0...o23.rebind.test, one service behind them), at most 4 pools.
        let (mock, trap) = try await startServiceAndTrap()
        let engine = try makeEngine(resolver: { _, _ in [Self.allowed] }, maxOrigins: 4, originIdleTimeout: .milliseconds(300))
        let up = WebPushProvider(engine: engine, platform: .unifiedpush)
        var n = PushNotification(platform: .unifiedpush)
        n.payload = "wake"
        let prepared = try up.prepare(n)
        for i in 0..<24 {
            let endpoint = "https://o\(i).rebind.test:\(mock.port)/push/t\(i)"
            let o = await up.send(prepared, to: .token(endpoint), context: ctx)
            XCTAssertTrue(o.isDelivered, "\(endpoint): \(o)")
            XCTAssertLessThanOrEqual(engine.transport.pools.count, 4)
        }
        XCTAssertEqual(mock.pushes.count, 24)
        XCTAssertEqual(Set(mock.pushes.compactMap { $0.header("host") }).count, 24)
        XCTAssertEqual(engine.transport.pools.count, 4)
        XCTAssertGreaterThanOrEqual(engine.transport.pools.evictedCount, 20)
        XCTAssertLessThanOrEqual(engine.transport.learntOrigins, engine.transport.maxProtocolEntries)
        // Evicted pools closed their connections: at most the 4 live pools keep one each.
        try await waitUntil { mock.openConnections <= 4 }
        // Idle pools are closed by the timer, with their connections.
        try await waitUntil(timeout: 10) { engine.transport.pools.count == 0 && mock.openConnections == 0 }
        XCTAssertEqual(trap.count, 0)
    }

    // MARK: DNS

    func testDNSRunsOnItsOwnBoundedThreadPoolWithATimeout() async throws {
        let release = DispatchSemaphore(value: 0)
        let calls = NIOLockedValueBox<[String]>([])
        let dns = DNSResolver(threads: 2, maxLookups: 3, timeout: .milliseconds(300), eventLoopGroup: group) { host, _ in
            calls.withLockedValue { $0.append(host) }
            if host.hasPrefix("slow") { release.wait() }
            return [[127, 0, 0, 2]]
        }
        XCTAssertFalse(dns.threadPool === NIOThreadPool.singleton, "never the pool sqlite-nio uses")
        // A stuck lookup: the caller gets a timeout, the slot stays taken until it returns.
        let start = ContinuousClock.now
        do {
            _ = try await dns.resolve("slow1.test", port: 443)
            XCTFail("expected a timeout")
        } catch {
            XCTAssertTrue("\(error)".contains("timed out"), "\(error)")
        }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(30), "the timeout, not the stuck lookup")
        // Concurrent lookups of one host share one call.
        async let a = dns.resolve("slow2.test", port: 443)
        async let b = dns.resolve("slow2.test", port: 443)
        try await Task.sleep(for: .milliseconds(50))
        XCTAssertEqual(dns.lookupsInFlight, 2)
        // A third distinct lookup fits (bound 3), a fourth is refused at once.
        async let c: [[UInt8]]? = try? dns.resolve("slow3.test", port: 443)
        try await Task.sleep(for: .milliseconds(50))
        do {
            _ = try await dns.resolve("fast.test", port: 443)
            XCTFail("expected the bound to refuse")
        } catch {
            XCTAssertTrue("\(error)".contains("DNS lookups in flight"), "\(error)")
        }
        for _ in 0..<3 { release.signal() }
        _ = try? await a
        _ = try? await b
        _ = await c
        try await waitUntil { dns.lookupsInFlight == 0 }
        XCTAssertEqual(calls.withLockedValue { $0.filter { $0 == "slow2.test" }.count }, 1)
        let answer = try await dns.resolve("fast.test", port: 443)
        XCTAssertEqual(answer, [[127, 0, 0, 2]])
        await dns.shutdown()
    }

    func testDefaultResolverIsTheDedicatedOne() async throws {
        let keys = VAPIDKeys.generate()
        let config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:ops@pushgate.test")
        let engine = try WebPushEngine(configuration: config, eventLoopGroup: group)
        engines.append(engine)
        XCTAssertFalse(engine.dns.threadPool === NIOThreadPool.singleton)
        // "localhost" answers from /etc/hosts (nothing leaves the machine): loopback, refused.
        guard case .refused(let f) = await engine.resolve(WebPushEndpoint("https://localhost:9/x")!) else {
            return XCTFail("localhost must be refused")
        }
        XCTAssertTrue(f.reason.contains("loopback"), f.reason)
    }
}
