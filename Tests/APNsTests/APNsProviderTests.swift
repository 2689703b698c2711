import APNs
import Foundation
import HTTP2Pool
import Logging
import MockProviders
import NIOCore
import NIOPosix
import PushgateCore
import Signing
import TestSupport
import XCTest

/// Two mock APNs servers (production and sandbox) over real TLS on 127.0.0.1, and an APNsProvider
/// whose pools trust the test CA.
struct APNsHarness: ProviderHarness {
    let group: MultiThreadedEventLoopGroup
    let key: TestAPNsKey
    let production: MockAPNs
    let sandbox: MockAPNs
    let provider: APNsProvider

    static let topic = "com.example.app"

    static func make(
        defaultProduction: Bool = false, connections: Int = 2, signingKey: TestAPNsKey? = nil,
        clock: APNsTokenManager.Clock? = nil
    ) async throws -> APNsHarness {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let pki = try TestPKI.generate(hosts: ["127.0.0.1", "localhost"])
        let key = TestAPNsKey.generate()
        let production = MockAPNs(options: .init(key: key, tls: try pki.serverTLSConfiguration()), eventLoopGroup: group)
        let sandbox = MockAPNs(options: .init(key: key, tls: try pki.serverTLSConfiguration()), eventLoopGroup: group)
        try await production.start()
        try await sandbox.start()

        let signer = signingKey ?? key
        var configuration = try APNsConfiguration(
            keyPEM: signer.p8PEM, keyID: signer.keyID, teamID: signer.teamID,
            production: defaultProduction, topic: topic,
            connectionsPerEnvironment: connections)
        configuration.productionEndpoint = production.baseURL
        configuration.sandboxEndpoint = sandbox.baseURL
        var poolConfig = HTTP2PoolConfiguration()
        poolConfig.tlsConfiguration = try pki.clientTLSConfiguration()
        // Generous: a timeout here is a failure, and the suite must pass on a loaded machine.
        poolConfig.requestTimeout = .seconds(300)
        poolConfig.connectTimeout = .seconds(60)
        var logger = Logger(label: "test.apns")
        logger.logLevel = .warning
        let tokens = clock.flatMap { APNsTokenManager(configuration: configuration, clock: $0) }
        let provider = try APNsProvider(
            configuration: configuration, poolConfiguration: poolConfig, eventLoopGroup: group,
            logger: logger, tokenManager: tokens)
        return APNsHarness(group: group, key: key, production: production, sandbox: sandbox, provider: provider)
    }

    func send(_ n: PushNotification, to token: String, messageID: String = UUID().uuidString) async throws -> SendOutcome {
        try await attempt(n, to: .token(token), messageID: messageID)
    }

    func shutdown() async throws {
        await provider.shutdown()
        try await production.stop()
        try await sandbox.stop()
        try await group.shutdownGracefully()
    }
}

func deviceToken(_ i: Int) -> String {
    String(format: "%064x", i)
}

final class APNsProviderTests: XCTestCase {
    func withHarness(
        defaultProduction: Bool = false, connections: Int = 2, signingKey: TestAPNsKey? = nil,
        clock: APNsTokenManager.Clock? = nil, _ body: (APNsHarness) async throws -> Void
    ) async throws {
        try await TestSupport.withHarness(
            { try await APNsHarness.make(defaultProduction: defaultProduction, connections: connections, signingKey: signingKey, clock: clock) },
            body)
    }

    func notification(_ configure: (inout PushNotification) -> Void = { _ in }) -> PushNotification {
        .test(.ios, message: "Hello", configure)
    }

    func testStatusServerRequestIsDeliveredWithGorushMapping() async throws {
        try await withHarness { h in
            let body =
                #"{"notifications":[{"tokens":["token-1"],"platform":1,"message":"You have a new message","topic":"im.status.ethereum","data":{"encryptedMessage":"0x6d65","chatId":"0x6368","publicKey":"0x7075"}}]}"#
            let n = try JSONDecoder().decode(PushRequest.self, from: Data(body.utf8)).notifications[0]
            let token = deviceToken(1)
            let id = UUID().uuidString
            let outcome = try await h.send(n, to: token, messageID: id)
            XCTAssertEqual(outcome, .delivered(providerID: id))
            XCTAssertEqual(h.production.requestCount, 0)
            let r = try XCTUnwrap(h.sandbox.requests.first)
            XCTAssertEqual(r.method, "POST")
            XCTAssertEqual(r.path, "/3/device/\(token)")
            XCTAssertEqual(r.topic, "im.status.ethereum")
            XCTAssertEqual(r.pushType, "alert")
            XCTAssertEqual(r.apnsID, id)
            XCTAssertNil(r.priority)
            XCTAssertNil(r.expiration)
            // `data` keys in the order the request decoder gives them (sorted).
            XCTAssertEqual(
                r.bodyString, #"{"aps":{"alert":"You have a new message"},"chatId":"0x6368","encryptedMessage":"0x6d65","publicKey":"0x7075"}"#)
            XCTAssertEqual(h.sandbox.rejections, [])
        }
    }

    func testEveryPushTypeOverTheWire() async throws {
        try await withHarness { h in
            let expected: [(String, String, String?)] = [
                ("alert", "com.example.app", "10"),
                ("background", "com.example.app", "5"),
                ("voip", "com.example.app.voip", "10"),
                ("location", "com.example.app.location-query", "10"),
                ("complication", "com.example.app.complication", "10"),
                ("fileprovider", "com.example.app.pushkit.fileprovider", "10"),
                ("mdm", "com.example.app", "10"),
                ("liveactivity", "com.example.app.push-type.liveactivity", "10"),
                ("pushtotalk", "com.example.app.voip-ptt", "10"),
                ("widgets", "com.example.app.push-type.widgets", "10"),
            ]
            for (i, (type, topic, priority)) in expected.enumerated() {
                let n = notification {
                    $0.pushType = type
                    $0.priority = "high"
                    $0.expiration = 1_900_000_000
                    $0.collapseID = "collapse-\(type)"
                }
                let outcome = try await h.send(n, to: deviceToken(100 + i))
                XCTAssertTrue(outcome.isDelivered, "\(type): \(outcome)")
                let r = try XCTUnwrap(h.sandbox.requests(for: deviceToken(100 + i)).first, type)
                XCTAssertEqual(r.pushType, type)
                XCTAssertEqual(r.topic, topic, type)
                XCTAssertEqual(r.priority, priority, type)
                XCTAssertEqual(r.expiration, type == "pushtotalk" ? "0" : "1900000000", type)
                XCTAssertEqual(r.collapseID, "collapse-\(type)")
                XCTAssertEqual((r.aps["content-available"] as? NSNumber)?.intValue, type == "background" ? 1 : nil, type)
            }
            XCTAssertEqual(h.sandbox.rejections, [])
        }
    }

    func testBackgroundIsPriority5WithContentAvailableAndVoipTopic() async throws {
        try await withHarness { h in
            _ = try await h.send(
                notification {
                    $0.pushType = "background"
                    $0.message = nil
                    $0.priority = "high"
                }, to: deviceToken(1))
            _ = try await h.send(
                notification {
                    $0.pushType = "voip"
                    $0.topic = "com.voip.app"
                }, to: deviceToken(2))
            let bg = try XCTUnwrap(h.sandbox.requests(for: deviceToken(1)).first)
            XCTAssertEqual(bg.priority, "5")
            XCTAssertEqual(bg.bodyString, #"{"aps":{"content-available":1}}"#)
            let voip = try XCTUnwrap(h.sandbox.requests(for: deviceToken(2)).first)
            XCTAssertEqual(voip.topic, "com.voip.app.voip")
            XCTAssertEqual(voip.status, 200)
        }
    }

    func testMockRefusesBackgroundWithPriority10() async throws {
        // The mock's checks can fail: a background push at priority 10 is a BadPriority, like APNs.
        try await withHarness { h in
            var n = notification()
            n.topic = APNsHarness.topic
            let prepared = try APNsPreparedPush(n, defaultTopic: nil, defaultProduction: false)
            // Hand-made request with the wrong priority, through the provider's own pool.
            let auth = try XCTUnwrap(h.provider.tokens).authorization()
            let request = HTTP2Request(
                path: "/3/device/\(deviceToken(9))",
                headers: [
                    ("authorization", auth), ("apns-push-type", "background"), ("apns-topic", APNsHarness.topic), ("apns-priority", "10"),
                ], body: prepared.body)
            let response = try await h.provider.sandboxPool.execute(request)
            XCTAssertEqual(response.status, 400)
            XCTAssertEqual(APNsResponseClassifier.reason(in: Array(response.body.readableBytesView)), "BadPriority")
        }
    }

    func testVoip5000BytePayloadIsSentAndAccepted() async throws {
        try await withHarness { h in
            var n = APNsPayloadTests.sized(5000, pushType: "voip")
            n.topic = nil  // ios.topic is used
            let outcome = try await h.send(n, to: deviceToken(5))
            XCTAssertTrue(outcome.isDelivered, "\(outcome)")
            let r = try XCTUnwrap(h.sandbox.requests.first)
            XCTAssertEqual(r.body.count, 5000)
            XCTAssertEqual(r.topic, "com.example.app.voip")
            XCTAssertEqual(r.status, 200)
        }
    }

    func testOversizeAlertIsRefusedBeforeAnyNetworkCall() async throws {
        try await withHarness { h in
            let n = APNsPayloadTests.sized(4097, pushType: "alert")
            XCTAssertThrowsError(try h.provider.prepare(n)) { error in
                XCTAssertEqual(error as? PushFailure, .payloadTooLarge(size: 4097, limit: 4096))
                XCTAssertEqual("\(error)", "PayloadTooLarge (4097 > 4096 bytes)")
            }
            // 4096 bytes is fine.
            XCTAssertNoThrow(try h.provider.prepare(APNsPayloadTests.sized(4096, pushType: "alert")))
            XCTAssertEqual(h.sandbox.requestCount, 0)
            XCTAssertEqual(h.production.requestCount, 0)
            XCTAssertEqual(h.sandbox.connectionsAccepted, 0)
            XCTAssertEqual(h.production.connectionsAccepted, 0)
        }
    }

    func testProviderTokenVerifiesOnTheMock() async throws {
        try await withHarness { h in
            _ = try await h.send(notification(), to: deviceToken(1))
            _ = try await h.send(notification(), to: deviceToken(2))
            XCTAssertEqual(h.sandbox.rejections, [])
            XCTAssertEqual(h.sandbox.providerTokensSeen.count, 1)
            let r = try XCTUnwrap(h.sandbox.requests.first)
            XCTAssertTrue(r.header("authorization")?.hasPrefix("bearer ") == true)
            let jwt = try DecodedJWT(try XCTUnwrap(r.providerToken))
            XCTAssertNoThrow(try jwt.verify(es256: h.key.publicKey))
            XCTAssertEqual(jwt.header["kid"] as? String, h.key.keyID)
            XCTAssertEqual(jwt.claims["iss"] as? String, h.key.teamID)
            let iat = try XCTUnwrap(jwt.claims["iat"] as? NSNumber).doubleValue
            XCTAssertLessThan(abs(iat - Date().timeIntervalSince1970), 120)
        }
    }

    func testTokenSignedWithAnotherKeyIsInvalidProviderToken() async throws {
        let other = TestAPNsKey.generate()  // same kid/iss, different key
        try await withHarness(signingKey: other) { h in
            let outcome = try await h.send(notification(), to: deviceToken(1))
            XCTAssertEqual(outcome, .permanent(reason: "InvalidProviderToken", status: 403))
            XCTAssertEqual(h.sandbox.rejections, ["403 InvalidProviderToken"])
        }
    }

    func testUnregisteredIsTokenDead() async throws {
        try await withHarness { h in
            h.sandbox.script(deviceToken(1), [.unregistered])
            let outcome = try await h.send(notification(), to: deviceToken(1))
            XCTAssertEqual(outcome, .tokenDead(reason: "Unregistered", status: 410))
            h.sandbox.script(deviceToken(2), [.badDeviceToken])
            let bad = try await h.send(notification(), to: deviceToken(2))
            XCTAssertEqual(bad, .tokenDead(reason: "BadDeviceToken", status: 400))
            h.sandbox.script(deviceToken(3), [.status(400)])
            let other400 = try await h.send(notification(), to: deviceToken(3))
            XCTAssertEqual(other400, .permanent(reason: "BadRequest", status: 400))
            // A token that is not hex never reaches the network.
            let notHex = try await h.send(notification(), to: "not-a-token/../x")
            XCTAssertEqual(notHex, .tokenDead(reason: "BadDeviceToken", status: nil))
            XCTAssertEqual(h.sandbox.requestCount, 3)
        }
    }

    func testTooManyRequestsIsTransientWithRetryAfter() async throws {
        try await withHarness { h in
            h.sandbox.script(deviceToken(1), [.tooManyRequests(retryAfter: 2)])
            let outcome = try await h.send(notification(), to: deviceToken(1))
            XCTAssertEqual(outcome, .transient(reason: "TooManyRequests", status: 429, retryAfter: 2))
        }
    }

    func testServiceUnavailableTwiceThenDeliveredKeepsApnsID() async throws {
        try await withHarness { h in
            let token = deviceToken(7)
            h.sandbox.script(token, [.status(503), .status(503), .ok])
            let id = UUID().uuidString
            let n = notification()
            var outcomes: [SendOutcome] = []
            for _ in 1...3 { outcomes.append(try await h.send(n, to: token, messageID: id)) }
            XCTAssertEqual(
                outcomes,
                [
                    .transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil),
                    .transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil),
                    .delivered(providerID: id),
                ])
            XCTAssertEqual(h.sandbox.requests(for: token).map(\.apnsID), [id, id, id])
            h.sandbox.script(token, [.internalError])
            let internalError = try await h.send(n, to: token)
            XCTAssertEqual(internalError, .transient(reason: "InternalServerError", status: 500, retryAfter: nil))
        }
    }

    func testExpiredProviderTokenGivesCredentialsAndANewTokenOnTheNextSend() async throws {
        try await withHarness { h in
            let token = deviceToken(3)
            h.sandbox.script(token, [.expiredProviderToken])
            let first = try await h.send(notification(), to: token)
            XCTAssertEqual(first, .credentials(reason: "ExpiredProviderToken", status: 403))
            let second = try await h.send(notification(), to: token)
            XCTAssertTrue(second.isDelivered, "\(second)")
            let requests = h.sandbox.requests(for: token)
            XCTAssertEqual(requests.count, 2)
            XCTAssertNotEqual(requests[0].providerToken, requests[1].providerToken)
            XCTAssertEqual(h.provider.tokens?.mintedCount, 2)
        }
    }

    func testStaleIatIsExpiredProviderTokenOnTheMockAndReMinted() async throws {
        // The token manager's clock is 2 hours behind: the mock itself finds the token expired.
        let clock = TestClock(Date().timeIntervalSince1970 - 7200)
        try await withHarness(clock: clock.function) { h in
            let first = try await h.send(notification(), to: deviceToken(1))
            XCTAssertEqual(first, .credentials(reason: "ExpiredProviderToken", status: 403))
            XCTAssertEqual(h.sandbox.rejections, ["403 ExpiredProviderToken"])
            clock.set(Date().timeIntervalSince1970)
            let second = try await h.send(notification(), to: deviceToken(1))
            XCTAssertTrue(second.isDelivered, "\(second)")
            XCTAssertEqual(h.sandbox.providerTokensSeen.count, 2)
        }
    }

    func testProductionAndSandboxRoutingConcurrently() async throws {
        try await withHarness(defaultProduction: true) { h in
            let outcomes = try await withThrowingTaskGroup(of: (Int, SendOutcome).self) { group in
                for i in 0..<200 {
                    group.addTask {
                        var n = PushNotification(platform: .ios, tokens: [])
                        n.message = "Hello"
                        switch i % 3 {
                        case 0: n.production = true
                        case 1: n.development = true
                        default: break  // configured default: production
                        }
                        return (i, try await h.send(n, to: deviceToken(i)))
                    }
                }
                var out: [Int: SendOutcome] = [:]
                for try await (i, o) in group { out[i] = o }
                return out
            }
            XCTAssertEqual(outcomes.values.filter(\.isDelivered).count, 200)
            let sandboxTokens = Set(h.sandbox.requests.map(\.token))
            let productionTokens = Set(h.production.requests.map(\.token))
            XCTAssertEqual(sandboxTokens, Set((0..<200).filter { $0 % 3 == 1 }.map(deviceToken)))
            XCTAssertEqual(productionTokens, Set((0..<200).filter { $0 % 3 != 1 }.map(deviceToken)))
            XCTAssertEqual(h.production.requestCount + h.sandbox.requestCount, 200)
            // One provider token shared by both environments' connections.
            XCTAssertEqual(Set(h.production.providerTokensSeen + h.sandbox.providerTokensSeen).count, 1)
        }
    }

    func testTwoThousandSendsOverAFewConnections() async throws {
        try await withHarness(connections: 2) { h in
            let n = notification { $0.data = JSONObject([("k", .string("v"))]) }
            let prepared = try h.provider.prepare(n)
            let delivered = await withTaskGroup(of: Bool.self) { group in
                for i in 0..<2000 {
                    group.addTask {
                        let o = await h.provider.send(
                            prepared, to: .token(deviceToken(i)),
                            context: DeliveryContext(messageID: UUID().uuidString))
                        return o.isDelivered
                    }
                }
                var count = 0
                for await ok in group where ok { count += 1 }
                return count
            }
            XCTAssertEqual(delivered, 2000)
            XCTAssertEqual(h.sandbox.requestCount, 2000)
            XCTAssertLessThanOrEqual(h.sandbox.connectionsAccepted, 2)
            XCTAssertGreaterThanOrEqual(h.sandbox.connectionsAccepted, 1)
            XCTAssertLessThanOrEqual(Set(h.sandbox.requests.map(\.connectionID)).count, 2)
            XCTAssertEqual(h.sandbox.providerTokensSeen.count, 1)
            XCTAssertEqual(h.provider.tokens?.mintedCount, 1)
        }
    }

    func testUnreachableServerIsTransient() async throws {
        try await withHarness { h in
            try await h.sandbox.stop()
            let outcome = try await h.send(notification(), to: deviceToken(1))
            guard case .transient(_, let status, _) = outcome else { return XCTFail("expected transient, got \(outcome)") }
            XCTAssertNil(status)
        }
    }

    /// A WidgetKit push (`push_type: widgets`): `apns-push-type: widgets`, the `.push-type.widgets`
    /// topic and `aps.content-changed: true`, which makes WidgetKit reload the widget's timelines.
    func testWidgetsPushCarriesContentChanged() async throws {
        try await withHarness { h in
            let n = notification {
                $0.message = nil
                $0.pushType = "widgets"
            }
            let outcome = try await h.send(n, to: deviceToken(7))
            XCTAssertTrue(outcome.isDelivered, "\(outcome)")
            let r = try XCTUnwrap(h.sandbox.requests.last)
            XCTAssertEqual(r.pushType, "widgets")
            XCTAssertEqual(r.topic, "com.example.app.push-type.widgets")
            XCTAssertEqual(r.aps["content-changed"] as? Bool, true, r.bodyString)
        }
    }
}
