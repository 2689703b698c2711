import Crypto
import Foundation
import MockProviders
import NIOCore
import NIOPosix
import ProviderKit
import PushgateCore
import Signing
import XCTest

@testable import WebPush

/// End-to-end over real TLS sockets on 127.0.0.1 against `MockWebPush`.
final class WebPushProviderTests: XCTestCase {
    var group: MultiThreadedEventLoopGroup!
    var pki: TestPKI!
    var mock: MockWebPush!
    var engines: [WebPushEngine] = []

    override func setUp() async throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        pki = try TestPKI.generate()
        mock = try await startMock()
    }

    override func tearDown() async throws {
        for e in engines { await e.shutdown() }
        engines = []
        try? await mock?.stop()
        try await group.shutdownGracefully()
    }

    func startMock(alpn: [String] = ["h2", "http/1.1"], configure: (inout MockWebPush.Options) -> Void = { _ in }) async throws -> MockWebPush {
        var options = MockWebPush.Options(tls: try pki.serverTLSConfiguration(alpn: alpn))
        configure(&options)
        let m = MockWebPush(options: options, eventLoopGroup: group)
        try await m.start()
        return m
    }

    func makeEngine(
        allowPrivate: Bool = true, mode: WebPushTransportMode = .automatic,
        resolver: (@Sendable (String, Int) async throws -> [[UInt8]])? = nil,
        configure: (inout WebPushConfiguration) -> Void = { _ in }
    ) throws -> (WebPushEngine, VAPIDKeys) {
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:ops@pushgate.test")
        config.allowPrivateEndpoints = allowPrivate
        config.requestTimeoutSeconds = 10
        configure(&config)
        let engine = try WebPushEngine(
            configuration: config, tlsConfiguration: try pki.clientTLSConfiguration(),
            eventLoopGroup: group, transportMode: mode, resolver: resolver)
        engines.append(engine)
        return (engine, keys)
    }

    let ctx = DeliveryContext(messageID: "m-1")

    func testEncryptedDeliveryDecryptsVerifiesVAPIDAndSendsHeaders() async throws {
        let (engine, keys) = try makeEngine()
        let provider = WebPushProvider(engine: engine)
        // The subscriber's key pair and auth secret are made independently of the gateway.
        let subscriber = TestWebPushSubscriber(id: "browser-1")
        mock.register(subscriber)
        var n = PushNotification(platform: .webpush)
        n.title = "Hello"
        n.message = "New event"
        n.data = JSONObject([("kind", .int(1))])
        n.timeToLive = 600
        n.priority = "high"
        n.collapseID = "inbox"
        n.subscriptions = [mock.subscription(for: subscriber)]
        XCTAssertNil(WebPushRequestValidator.validate(n))
        let prepared = try provider.prepare(n)
        let target = n.targets(nil)[0]
        XCTAssertNil(provider.validate(target: target, of: prepared))
        let outcome = await provider.send(prepared, to: target, context: ctx)
        guard case .delivered(let id, _) = outcome else { return XCTFail("\(outcome); mock rejections: \(mock.rejections)") }
        XCTAssertEqual(id, "/message/browser-1-1")

        let push = try XCTUnwrap(mock.pushes.first)
        XCTAssertTrue(push.encrypted)
        XCTAssertEqual(push.plaintextString, #"{"title":"Hello","message":"New event","data":{"kind":1}}"#)
        XCTAssertEqual(push.ttl, 600)
        XCTAssertEqual(push.urgency, "high")
        XCTAssertEqual(push.topic, "inbox")
        XCTAssertEqual(push.header("content-encoding"), "aes128gcm")
        XCTAssertEqual(push.vapidKey, keys.publicKeyBase64URL)
        XCTAssertEqual(push.vapidAudience, mock.baseURL)
        XCTAssertEqual(push.vapidSubject, "mailto:ops@pushgate.test")
        let exp = try XCTUnwrap(push.vapidExpiry)
        XCTAssertLessThanOrEqual(exp, Int64(Date().timeIntervalSince1970) + 24 * 3600)
        // The gateway's own decryptor agrees with the mock's.
        XCTAssertEqual(
            try WebPushCrypto.decrypt(push.body, receiverPrivateKey: subscriber.privateKey, authSecret: subscriber.authSecret),
            push.plaintext)
    }

    func testPayloadSentByteForByteAndManySendsReuseHTTP2Pool() async throws {
        let (engine, _) = try makeEngine()
        let provider = WebPushProvider(engine: engine)
        let (sub, subscriber) = mock.makeSubscription(id: "pwa")
        var n = PushNotification(platform: .webpush)
        n.payload = "{\"nostr\":\"event\",  \"n\": 1}"
        n.subscriptions = [sub]
        let prepared = try provider.prepare(n)
        for _ in 0..<20 {
            let outcome = await provider.send(prepared, to: .subscription(sub), context: ctx)
            XCTAssertTrue(outcome.isDelivered, "\(outcome) \(mock.rejections)")
        }
        XCTAssertEqual(engine.transport.learntProtocol(origin: mock.baseURL), .http2)
        let pushes = mock.pushes(id: subscriber.id)
        XCTAssertEqual(pushes.count, 20)
        XCTAssertTrue(pushes.allSatisfy { $0.plaintextString == n.payload })
        XCTAssertEqual(pushes[0].ttl, 86_400, "default TTL")
        // One VAPID JWT reused for the origin.
        XCTAssertEqual(Set(pushes.map { $0.header("authorization") ?? "" }).count, 1)
        // Concurrent sends over the pool.
        let context = ctx
        let outcomes = await withTaskGroup(of: SendOutcome.self) { g in
            for _ in 0..<50 { g.addTask { await provider.send(prepared, to: .subscription(sub), context: context) } }
            var all: [SendOutcome] = []
            for await o in g { all.append(o) }
            return all
        }
        XCTAssertEqual(outcomes.filter(\.isDelivered).count, 50)
    }

    func testHTTP1OnlyEndpointAndAsyncHTTPClientMode() async throws {
        let h1 = try await startMock(alpn: ["http/1.1"])
        defer { Task { [h1] in try? await h1.stop() } }
        for mode in [WebPushTransportMode.automatic, .asyncHTTPClient] {
            let (engine, _) = try makeEngine(mode: mode)
            let provider = WebPushProvider(engine: engine)
            let (sub, _) = h1.makeSubscription()
            var n = PushNotification(platform: .webpush)
            n.payload = "h1 \(mode)"
            let prepared = try provider.prepare(n)
            for _ in 0..<3 {
                let outcome = await provider.send(prepared, to: .subscription(sub), context: ctx)
                XCTAssertTrue(outcome.isDelivered, "\(mode): \(outcome) \(h1.rejections)")
            }
            if mode == .automatic { XCTAssertEqual(engine.transport.learntProtocol(origin: h1.baseURL), .http1) }
        }
        XCTAssertEqual(h1.pushes.count, 6)
        XCTAssertEqual(h1.pushes.last?.plaintextString, "h1 asyncHTTPClient")
    }

    func testLegacyUnifiedPushRawPost() async throws {
        let (engine, _) = try makeEngine()
        let provider = WebPushProvider(engine: engine, platform: .unifiedpush)
        mock.script(id: "ntfy-topic", replies: [.ntfyOK])
        var n = PushNotification(platform: .unifiedpush, tokens: [mock.endpoint(id: "ntfy-topic")])
        n.payload = "wake up"
        XCTAssertNil(WebPushRequestValidator.validate(n))
        let prepared = try provider.prepare(n)
        let outcome = await provider.send(prepared, to: n.targets(nil)[0], context: ctx)
        XCTAssertEqual(outcome, .delivered(providerID: nil))
        let push = try XCTUnwrap(mock.pushes.first)
        XCTAssertFalse(push.encrypted)
        XCTAssertEqual(push.body, Array("wake up".utf8))
        XCTAssertNil(push.header("content-encoding"))
        XCTAssertNil(push.header("authorization"))
        XCTAssertNotNil(push.ttl)

        // Encrypted UnifiedPush (distributor with keys) goes through the Web Push path.
        let (sub, _) = mock.makeSubscription(id: "up-encrypted")
        var e = PushNotification(platform: .unifiedpush)
        e.message = "hi"
        e.subscriptions = [sub]
        let o2 = await provider.send(try provider.prepare(e), to: .subscription(sub), context: ctx)
        XCTAssertTrue(o2.isDelivered, "\(o2)")
        XCTAssertEqual(mock.pushes(id: "up-encrypted").first?.plaintextString, #"{"message":"hi"}"#)
    }

    func testErrorStatusesAreClassified() async throws {
        let (engine, _) = try makeEngine()
        let provider = WebPushProvider(engine: engine)
        let up = WebPushProvider(engine: engine, platform: .unifiedpush)
        let (gone, _) = mock.makeSubscription(id: "gone")
        let (busy, _) = mock.makeSubscription(id: "busy")
        let (big, _) = mock.makeSubscription(id: "big")
        mock.script(id: "gone", replies: [.gone])
        mock.script(id: "busy", replies: [.tooManyRequests(retryAfter: 7)])
        mock.script(id: "big", replies: [.payloadTooLarge])
        mock.script(id: "ntfy", replies: [.insufficientStorage])
        mock.script(id: "moved", replies: [.redirect(location: mock.endpoint(id: "elsewhere"))])
        var n = PushNotification(platform: .webpush)
        n.payload = "x"
        let p = try provider.prepare(n)
        let o1 = await provider.send(p, to: .subscription(gone), context: ctx)
        guard case .tokenDead(_, let s1) = o1 else { return XCTFail("\(o1)") }
        XCTAssertEqual(s1, 410)
        let o2 = await provider.send(p, to: .subscription(busy), context: ctx)
        XCTAssertEqual(o2, .transient(reason: "TooManyRequests: too many requests", status: 429, retryAfter: 7))
        let o3 = await provider.send(p, to: .subscription(big), context: ctx)
        XCTAssertEqual(o3, .permanent(reason: "PayloadTooLarge: payload too large", status: 413))
        var legacy = PushNotification(platform: .unifiedpush, tokens: [mock.endpoint(id: "ntfy")])
        legacy.payload = "x"
        let o4 = await up.send(try up.prepare(legacy), to: .token(mock.endpoint(id: "ntfy")), context: ctx)
        guard case .transient(_, 507, _) = o4 else { return XCTFail("507 must be transient: \(o4)") }
        let o5 = await up.send(try up.prepare(legacy), to: .token(mock.endpoint(id: "moved")), context: ctx)
        guard case .permanent(let reason, 301) = o5 else { return XCTFail("\(o5)") }
        XCTAssertTrue(reason.hasPrefix("RedirectNotFollowed"))
        XCTAssertEqual(mock.pushes(id: "elsewhere").count, 0, "redirects are never followed")
        // The mock's own checks: a subscription it does not know -> 404 -> tokenDead.
        let unknown = WebPushSubscription(endpoint: mock.endpoint(id: "never-registered"), keys: TestWebPushSubscriber(id: "z").keys)
        let o6 = await provider.send(p, to: .subscription(unknown), context: ctx)
        XCTAssertEqual(o6.status, 404)
        if case .tokenDead = o6 {} else { XCTFail("\(o6)") }
    }

    func testVAPIDKeyMismatchIsRefusedByService() async throws {
        let other = VAPIDKeys.generate()
        let strict = try await startMock { $0.expectedVAPIDKey = other.publicKeyBase64URL }
        defer { Task { [strict] in try? await strict.stop() } }
        let (engine, _) = try makeEngine()
        let (sub, _) = strict.makeSubscription()
        var n = PushNotification(platform: .webpush)
        n.payload = "x"
        let o = await WebPushProvider(engine: engine).send(try engine.prepare(n), to: .subscription(sub), context: ctx)
        XCTAssertEqual(o.status, 403)
        XCTAssertEqual(strict.pushes.count, 0)
    }

    func testLoopbackEndpointRefusedUnlessPrivateAllowed() async throws {
        let (engine, _) = try makeEngine(allowPrivate: false)
        let provider = WebPushProvider(engine: engine)
        let (sub, _) = mock.makeSubscription(id: "local")
        var n = PushNotification(platform: .webpush)
        n.payload = "x"
        n.subscriptions = [sub]
        let prepared = try provider.prepare(n)
        let failure = provider.validate(target: .subscription(sub), of: prepared)
        XCTAssertEqual(failure?.reason, "endpoint refused: 127.0.0.1 is a loopback address (set webpush.allow_private_endpoints to allow)")
        let outcome = await provider.send(prepared, to: .subscription(sub), context: ctx)
        XCTAssertEqual(
            outcome,
            .permanent(reason: "endpoint refused: 127.0.0.1 is a loopback address (set webpush.allow_private_endpoints to allow)", status: nil))
        // localhost by name too.
        let byName = WebPushSubscription(endpoint: "https://localhost:\(mock.port)/push/local", keys: sub.keys)
        XCTAssertNotNil(provider.validate(target: .subscription(byName), of: prepared))
        XCTAssertEqual(mock.requestCount, 0, "nothing may reach a refused endpoint")
        // allow_http off: http endpoints refused.
        let http = WebPushSubscription(endpoint: "http://push.example.test/x", keys: sub.keys)
        XCTAssertEqual(
            provider.validate(target: .subscription(http), of: prepared)?.reason,
            "endpoint refused: plain http (set webpush.allow_http to allow)")
    }

    func testHostNameResolvingToPrivateAddressIsRefusedAfterDNS() async throws {
        // An injected resolver stands in for DNS: nothing leaves the machine.
        let (engine, _) = try makeEngine(
            allowPrivate: false,
            resolver: { host, _ in
                switch host {
                case "internal.example.test": return [[93, 184, 216, 34], [10, 0, 0, 1]]
                case "metadata.example.test": return [[169, 254, 169, 254]]
                default: throw HostResolver.Failure(description: "cannot resolve \(host)")
                }
            })
        let provider = WebPushProvider(engine: engine)
        let keys = TestWebPushSubscriber(id: "k").keys
        var n = PushNotification(platform: .webpush)
        n.payload = "x"
        let prepared = try provider.prepare(n)
        let internalSub = WebPushSubscription(endpoint: "https://internal.example.test/push/1", keys: keys)
        XCTAssertNil(provider.validate(target: .subscription(internalSub), of: prepared), "no DNS in validate")
        let o1 = await provider.send(prepared, to: .subscription(internalSub), context: ctx)
        XCTAssertEqual(
            o1,
            .permanent(
                reason:
                    "endpoint refused: internal.example.test resolves to 10.0.0.1, a private address (set webpush.allow_private_endpoints to allow)",
                status: nil))
        let o2 = await provider.send(
            prepared, to: .subscription(WebPushSubscription(endpoint: "https://metadata.example.test/", keys: keys)), context: ctx)
        XCTAssertEqual(
            o2.reason,
            "endpoint refused: metadata.example.test resolves to 169.254.169.254, a link-local address (set webpush.allow_private_endpoints to allow)"
        )
        let o3 = await provider.send(
            prepared, to: .subscription(WebPushSubscription(endpoint: "https://nxdomain.example.test/", keys: keys)), context: ctx)
        guard case .transient(let reason, nil, nil) = o3 else { return XCTFail("\(o3)") }
        XCTAssertTrue(reason.hasPrefix("DNS: "))
    }

    func testRealResolverRefusesLocalhostName() async throws {
        // getaddrinfo("localhost") answers from /etc/hosts: loopback.
        let addresses = try HostResolver.resolve("localhost", port: 443)
        XCTAssertFalse(addresses.isEmpty)
        XCTAssertTrue(addresses.allSatisfy { IPAddressClassifier.classify(bytes: $0) == .loopback })
    }

    func testOversizeRefusedBeforeAnyRequest() async throws {
        let (engine, _) = try makeEngine()
        let provider = WebPushProvider(engine: engine)
        let up = WebPushProvider(engine: engine, platform: .unifiedpush)
        let (sub, _) = mock.makeSubscription()
        var n = PushNotification(platform: .webpush)
        n.payload = String(repeating: "é", count: 2000)  // 4000 bytes
        n.subscriptions = [sub]
        XCTAssertThrowsError(try provider.prepare(n)) { XCTAssertEqual($0 as? PushFailure, .payloadTooLarge(size: 4000, limit: 3993)) }
        // Even if a rendering slipped through, validate and send refuse it.
        let forged = PreparedWebPush(platform: .webpush, plaintext: [UInt8](repeating: 1, count: 3994), ttl: .seconds(60))
        XCTAssertEqual(provider.validate(target: .subscription(sub), of: forged), .payloadTooLarge(size: 3994, limit: 3993))
        let o = await provider.send(forged, to: .subscription(sub), context: ctx)
        XCTAssertEqual(o, .permanent(reason: "PayloadTooLarge (3994 > 3993 bytes)", status: nil))
        var legacy = PushNotification(platform: .unifiedpush, tokens: [mock.endpoint(id: "up")])
        legacy.payload = String(repeating: "x", count: 4097)
        XCTAssertThrowsError(try up.prepare(legacy)) { XCTAssertEqual($0 as? PushFailure, .payloadTooLarge(size: 4097, limit: 4096)) }
        XCTAssertEqual(mock.requestCount, 0)
        // Web Push refuses bare endpoints and key-less subscriptions.
        XCTAssertNotNil(provider.validate(target: .token(mock.endpoint(id: "x")), of: forged))
        XCTAssertNotNil(provider.validate(target: .subscription(WebPushSubscription(endpoint: mock.endpoint(id: "x"), keys: nil)), of: forged))
    }

    func testConnectionErrorIsTransient() async throws {
        let (engine, _) = try makeEngine(configure: { $0.requestTimeoutSeconds = 1 })
        let provider = WebPushProvider(engine: engine)
        let port = mock.port
        try await mock.stop()
        mock = nil
        let sub = WebPushSubscription(endpoint: "https://127.0.0.1:\(port)/push/x", keys: TestWebPushSubscriber(id: "x").keys)
        var n = PushNotification(platform: .webpush)
        n.payload = "x"
        let o = await provider.send(try provider.prepare(n), to: .subscription(sub), context: ctx)
        guard case .transient(let reason, nil, nil) = o else { return XCTFail("\(o)") }
        XCTAssertTrue(reason.hasPrefix("ConnectionError"), reason)
    }
}

/// Throughput probe (skipped unless PUSHGATE_BENCH=1): encryption + VAPID per message on one
/// thread, and end-to-end sends to the mock. Prints numbers; asserts nothing about speed.
final class WebPushThroughputTests: XCTestCase {
    func testThroughput() async throws {
        guard ProcessInfo.processInfo.environment["PUSHGATE_BENCH"] == "1" else { throw XCTSkip("set PUSHGATE_BENCH=1") }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let mockGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pki = try TestPKI.generate()
        let mock = MockWebPush(options: .init(tls: try pki.serverTLSConfiguration()), eventLoopGroup: mockGroup)
        try await mock.start()
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:bench@pushgate.test")
        config.allowPrivateEndpoints = true
        let mode = WebPushTransportMode(rawValue: ProcessInfo.processInfo.environment["PUSHGATE_BENCH_MODE"] ?? "automatic") ?? .automatic
        let engine = try WebPushEngine(
            configuration: config, tlsConfiguration: try pki.clientTLSConfiguration(), eventLoopGroup: group,
            transportMode: mode)
        let provider = WebPushProvider(engine: engine)
        let (sub, _) = mock.makeSubscription()
        var n = PushNotification(platform: .webpush)
        n.title = "Bench"
        n.message = String(repeating: "m", count: 200)
        let prepared = try provider.prepare(n) as! PreparedWebPush
        let ep = WebPushEndpoint(sub.endpoint)!
        let receiver = try WebPushReceiverKeys(sub.keys!)
        let count = 2000
        var start = Date()
        for _ in 0..<count { _ = try engine.render(prepared, .encrypted(ep, receiver)) }
        let renderRate = Double(count) / Date().timeIntervalSince(start)
        let sends = 5000
        start = Date()
        let context = DeliveryContext(messageID: "b")
        let delivered = await withTaskGroup(of: Bool.self) { g in
            var inFlight = 0
            var ok = 0
            var issued = 0
            while issued < sends {
                if inFlight >= 200, let r = await g.next() {
                    inFlight -= 1
                    if r { ok += 1 }
                }
                g.addTask { await provider.send(prepared, to: .subscription(sub), context: context).isDelivered }
                inFlight += 1
                issued += 1
            }
            for await r in g where r { ok += 1 }
            return ok
        }
        let sendRate = Double(sends) / Date().timeIntervalSince(start)
        print(
            "webpush bench (\(mode)): render (encrypt+VAPID) \(Int(renderRate))/s on one thread; end-to-end \(Int(sendRate)) sends/s (\(delivered)/\(sends) delivered)"
        )
        XCTAssertEqual(delivered, sends)
        await engine.shutdown()
        try await mock.stop()
        try await group.shutdownGracefully()
        try await mockGroup.shutdownGracefully()
    }
}
