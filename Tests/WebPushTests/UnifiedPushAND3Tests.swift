import Foundation
import MockProviders
import NIOPosix
import PushgateCore
import Signing
import XCTest

@testable import WebPush

/// UnifiedPush AND_3 rules against `MockWebPush` over real TLS sockets: the 4096-byte limit at
/// ingest, `Urgency` always sent, VAPID on bare endpoints when `unifiedpush.vapid` is set, and a
/// distributor's push server that requires VAPID answered with one clear, permanent failure.
final class UnifiedPushAND3Tests: XCTestCase {
    var group: MultiThreadedEventLoopGroup!
    var pki: TestPKI!
    var engines: [WebPushEngine] = []
    var mocks: [MockWebPush] = []
    let ctx = DeliveryContext(messageID: "m-1")

    override func setUp() async throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        pki = try TestPKI.generate()
    }

    override func tearDown() async throws {
        for e in engines { await e.shutdown() }
        for m in mocks { try? await m.stop() }
        try await group.shutdownGracefully()
    }

    func startMock(requireVAPID: Bool = false) async throws -> MockWebPush {
        var options = MockWebPush.Options(tls: try pki.serverTLSConfiguration())
        options.requireVAPID = requireVAPID
        let m = MockWebPush(options: options, eventLoopGroup: group)
        try await m.start()
        mocks.append(m)
        return m
    }

    func makeEngine(legacyVAPID: Bool) throws -> (WebPushEngine, VAPIDKeys) {
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:ops@pushgate.test")
        config.allowPrivateEndpoints = true
        config.requestTimeoutSeconds = 10
        config.unifiedPushLegacyVAPID = legacyVAPID
        let engine = try WebPushEngine(configuration: config, tlsConfiguration: try pki.clientTLSConfiguration(), eventLoopGroup: group)
        engines.append(engine)
        return (engine, keys)
    }

    func testTheEncryptedLimitIs4096BytesAndNamesTheField() async throws {
        let mock = try await startMock()
        let (sub, _) = mock.makeSubscription(id: "s")
        var n = PushNotification(platform: .unifiedpush)
        n.subscriptions = [sub]
        n.payload = String(repeating: "a", count: 3993)
        XCTAssertNil(WebPushRequestValidator.validate(n), "3993 + 103 = 4096 bytes encrypted")
        n.payload = String(repeating: "a", count: 3994)
        let why = try XCTUnwrap(WebPushRequestValidator.validate(n))
        XCTAssertTrue(why.hasPrefix("payload: "), why)
        XCTAssertTrue(why.contains("4097 bytes encrypted"), why)
        XCTAssertTrue(why.contains("4096-byte limit"), why)
        var withFallback = n
        withFallback.fallback = FallbackNotification(PushNotification(platform: .unifiedpush))
        XCTAssertNil(WebPushRequestValidator.validate(withFallback), "the fallback is sent instead")
        n.payload = nil
        n.message = String(repeating: "m", count: 4000)
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("message: ") == true)

        // Bare (legacy) endpoints: 4096 bytes as they are.
        var legacy = PushNotification(platform: .unifiedpush, tokens: [mock.endpoint(id: "l")])
        legacy.payload = String(repeating: "a", count: 4096)
        XCTAssertNil(WebPushRequestValidator.validate(legacy))
        legacy.payload = String(repeating: "a", count: 4097)
        XCTAssertTrue(WebPushRequestValidator.validate(legacy)?.contains("4096-byte limit") == true)

        // What passes the check fits once encrypted: the push service gets exactly 4096 bytes.
        let (engine, _) = try makeEngine(legacyVAPID: false)
        let provider = WebPushProvider(engine: engine, platform: .unifiedpush)
        n.message = nil
        n.payload = String(repeating: "a", count: 3993)
        let outcome = await provider.send(try provider.prepare(n), to: .subscription(sub), context: ctx)
        XCTAssertTrue(outcome.isDelivered, "\(outcome) \(mock.rejections)")
        XCTAssertEqual(mock.pushes.first?.body.count, 4096)
    }

    func testUrgencyIsAlwaysSentAndVAPIDGoesToBareEndpointsWhenConfigured() async throws {
        let mock = try await startMock()
        let (engine, keys) = try makeEngine(legacyVAPID: true)
        let provider = WebPushProvider(engine: engine, platform: .unifiedpush)
        var n = PushNotification(platform: .unifiedpush, tokens: [mock.endpoint(id: "bare")])
        n.payload = "wake"
        let o1 = await provider.send(try provider.prepare(n), to: n.targets(nil)[0], context: ctx)
        XCTAssertTrue(o1.isDelivered, "\(o1) \(mock.rejections)")
        n.priority = "high"
        let o2 = await provider.send(try provider.prepare(n), to: n.targets(nil)[0], context: ctx)
        XCTAssertTrue(o2.isDelivered, "\(o2)")
        let pushes = mock.pushes(id: "bare")
        XCTAssertEqual(pushes.map(\.urgency), ["normal", "high"])
        XCTAssertTrue(pushes.allSatisfy { !$0.encrypted })
        XCTAssertEqual(pushes.first?.vapidKey, keys.publicKeyBase64URL, "the mock verified the VAPID JWT of a bare-endpoint push")

        // Web Push keeps omitting Urgency when nothing asks for it.
        var web = PushNotification(platform: .webpush)
        web.message = "m"
        XCTAssertNil(try WebPushRequestValidator.prepare(web).urgency)
    }

    func testAPushServerThatRequiresVAPIDIsOnePermanentFailureSayingSo() async throws {
        let mock = try await startMock(requireVAPID: true)
        let (engine, _) = try makeEngine(legacyVAPID: false)
        let provider = WebPushProvider(engine: engine, platform: .unifiedpush)
        var n = PushNotification(platform: .unifiedpush, tokens: [mock.endpoint(id: "strict")])
        n.payload = "wake"
        let outcome = await provider.send(try provider.prepare(n), to: n.targets(nil)[0], context: ctx)
        guard case .permanent(let reason, let status) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertEqual(status, 401)
        XCTAssertTrue(reason.hasPrefix("VAPIDRequired (401)"), reason)
        XCTAssertTrue(reason.contains("unifiedpush.vapid"), reason)
        XCTAssertEqual(mock.rejections, ["VAPID required"])

        // With VAPID on bare endpoints the same push server takes it.
        let (engine2, _) = try makeEngine(legacyVAPID: true)
        let o2 = await WebPushProvider(engine: engine2, platform: .unifiedpush).send(try provider.prepare(n), to: n.targets(nil)[0], context: ctx)
        XCTAssertTrue(o2.isDelivered, "\(o2) \(mock.rejections)")

        // A refused key on an encrypted push: the reason says the key is the wrong one.
        let refused = WebPushEngine.classify(
            WebPushHTTPResponse(status: 403, headers: [], body: []), platform: .unifiedpush, sentVAPID: true)
        XCTAssertTrue(refused.reason?.contains("refused this server's VAPID key") == true, "\(refused)")
        XCTAssertEqual(WebPushEngine.classify(WebPushHTTPResponse(status: 403, headers: [], body: [])).reason, "Forbidden (VAPID)")
    }
}
