import Foundation
import HTTP2Pool
import MockProviders
import NIOCore
import NIOPosix
import ProviderKit
import PushgateCore
import Signing
import TestSupport
import XCTest

@testable import WebPush

/// Web Push through an outbound CONNECT proxy, over real sockets on loopback only.
///
/// As in `WebPushHostileNetworkTests`, "public" is simulated: the SSRF guard's classifier calls
/// 127.0.0.2 public; the push service listens there as `push.proxy.test`.
final class WebPushProxyTests: XCTestCase {
    static let serviceHost = "push.proxy.test"
    static let allowed: [UInt8] = [127, 0, 0, 2]
    static let classifier: @Sendable ([UInt8]) -> IPAddressClass = { bytes in
        bytes == allowed ? .public : IPAddressClassifier.classify(bytes: bytes)
    }

    var group: MultiThreadedEventLoopGroup!
    var pki: TestPKI!
    var stoppers: [@Sendable () async -> Void] = []
    let ctx = DeliveryContext(messageID: "m-1")

    override func setUp() async throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        pki = try TestPKI.generate(hosts: [Self.serviceHost, "localhost", "127.0.0.1"])
    }

    override func tearDown() async throws {
        for s in stoppers.reversed() { await s() }
        stoppers = []
        try await group.shutdownGracefully()
    }

    func startService(alpn: [String], onAllowedAddress: Bool) async throws -> MockWebPush {
        var options = MockWebPush.Options(tls: try pki.serverTLSConfiguration(alpn: alpn))
        if onAllowedAddress {
            options.host = "127.0.0.2"
            options.publicHost = Self.serviceHost
        }
        let mock = MockWebPush(options: options, eventLoopGroup: group)
        try await mock.start()
        stoppers.append { try? await mock.stop() }
        return mock
    }

    func startProxy(port: Int = 0) async throws -> MockConnectProxy {
        var options = MockConnectProxy.Options()
        options.port = port
        let proxy = MockConnectProxy(options: options, eventLoopGroup: group)
        try await proxy.start()
        stoppers.append { try? await proxy.stop() }
        return proxy
    }

    func makeProvider(proxyPort: Int, guarded: Bool, resolver: (@Sendable (String, Int) async throws -> [[UInt8]])? = nil) throws
        -> WebPushProvider
    {
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:ops@pushgate.test")
        config.allowPrivateEndpoints = !guarded
        config.requestTimeoutSeconds = 10
        var pool = HTTP2PoolConfiguration()
        pool.tlsConfiguration = try pki.clientTLSConfiguration()
        pool.connectTimeout = .seconds(5)
        pool.proxy = OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: proxyPort))
        let engine = try WebPushEngine(
            configuration: config, poolConfiguration: pool, eventLoopGroup: group, resolver: resolver,
            addressClassifier: guarded ? Self.classifier : nil)
        stoppers.append { await engine.shutdown() }
        return WebPushProvider(engine: engine)
    }

    func payload(_ provider: WebPushProvider) throws -> any PreparedPush {
        var n = PushNotification(platform: .webpush)
        n.payload = "through the proxy"
        return try provider.prepare(n)
    }

    func testGuardedSendTunnelsToTheCheckedAddressNotTheName() async throws {
        for alpn in [["h2", "http/1.1"], ["http/1.1"]] {
            let mock = try await startService(alpn: alpn, onAllowedAddress: true)
            let proxy = try await startProxy()
            let provider = try makeProvider(proxyPort: proxy.port, guarded: true, resolver: { _, _ in [Self.allowed] })
            let (sub, _) = mock.makeSubscription(id: "b-1")
            XCTAssertTrue(sub.endpoint.hasPrefix("https://\(Self.serviceHost):"), sub.endpoint)
            for _ in 0..<2 {
                let o = await provider.send(try payload(provider), to: .subscription(sub), context: ctx)
                XCTAssertTrue(o.isDelivered, "\(alpn): \(o)")
            }
            XCTAssertEqual(mock.pushes(id: "b-1").count, 2, "\(alpn)")
            let targets = proxy.tunnelledTargets
            XCTAssertFalse(targets.isEmpty, "\(alpn): nothing went through the proxy")
            XCTAssertEqual(Set(targets), ["127.0.0.2:\(mock.port)"], "\(alpn): CONNECT names the vetted address, never the name")
        }
    }

    func testSSRFGuardStillRefusesAPrivateTargetBeforeAnyConnect() async throws {
        let mock = try await startService(alpn: ["h2", "http/1.1"], onAllowedAddress: true)
        let proxy = try await startProxy()
        // The name now resolves to loopback: refused by the guard, the proxy is never asked.
        let provider = try makeProvider(proxyPort: proxy.port, guarded: true, resolver: { _, _ in [[127, 0, 0, 1]] })
        let (sub, _) = mock.makeSubscription(id: "b-2")
        let o = await provider.send(try payload(provider), to: .subscription(sub), context: ctx)
        XCTAssertEqual(
            o.reason, "endpoint refused: \(Self.serviceHost) resolves to 127.0.0.1, a loopback address (set webpush.allow_private_endpoints to allow)"
        )
        XCTAssertEqual(proxy.connects, [], "the proxy cannot be used to reach a private address")
        XCTAssertEqual(mock.requestCount, 0)
    }

    func testPrivateEndpointsAllowedStillGoThroughTheProxy() async throws {
        // Unguarded (allow_private_endpoints): AsyncHTTPClient would connect directly; with a proxy the
        // tunnelling clients are used instead, CONNECT naming the endpoint's host.
        for alpn in [["h2", "http/1.1"], ["http/1.1"]] {
            let mock = try await startService(alpn: alpn, onAllowedAddress: false)
            let proxy = try await startProxy()
            let provider = try makeProvider(proxyPort: proxy.port, guarded: false)
            let (sub, _) = mock.makeSubscription(id: "u-1")
            let o = await provider.send(try payload(provider), to: .subscription(sub), context: ctx)
            XCTAssertTrue(o.isDelivered, "\(alpn): \(o)")
            // An HTTP/1.1-only origin costs one h2 attempt first (ALPN), then the HTTP/1.1 client: both tunnelled.
            XCTAssertEqual(Set(proxy.tunnelledTargets), ["127.0.0.1:\(mock.port)"], "\(alpn)")
        }
    }

    func testProxyDownIsATransientFailureNamingTheProxy() async throws {
        for alpn in [["h2", "http/1.1"], ["http/1.1"]] {
            let mock = try await startService(alpn: alpn, onAllowedAddress: true)
            let stopped = try await startProxy()
            let port = stopped.port
            try await stopped.stop()
            let provider = try makeProvider(proxyPort: port, guarded: true, resolver: { _, _ in [Self.allowed] })
            let (sub, _) = mock.makeSubscription(id: "d-1")
            let o = await provider.send(try payload(provider), to: .subscription(sub), context: ctx)
            guard case .transient(let reason, _, _) = o else { return XCTFail("\(alpn): \(o)") }
            XCTAssertTrue(reason.contains("proxy 127.0.0.1:\(port)"), "\(alpn): \(reason)")
            XCTAssertEqual(mock.requestCount, 0)
        }
    }
}
