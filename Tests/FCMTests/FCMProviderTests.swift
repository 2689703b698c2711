import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import MockProviders
import NIOCore
import NIOPosix
import PushgateCore
import TestSupport
import XCTest

@testable import FCM

/// A mock FCM + token endpoint over real TLS on 127.0.0.1 and an FCMProvider pointed at it.
struct FCMHarness: ProviderHarness {
    let group: MultiThreadedEventLoopGroup
    let pki: TestPKI
    let mock: MockFCM
    let httpClient: HTTPClient
    let provider: FCMProvider

    static func make(accessTokenLifetime: Int = 3599, signingAccount: TestServiceAccount = Fixtures.account) async throws -> FCMHarness {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let pki = try TestPKI.generate(hosts: ["127.0.0.1", "localhost"])
        var options = MockFCM.Options(serviceAccount: Fixtures.account, tls: try pki.serverTLSConfiguration())
        options.accessTokenLifetime = accessTokenLifetime
        let mock = MockFCM(options: options, eventLoopGroup: group)
        try await mock.start()

        // The service account JSON as the server would read it, token_uri pointing at the mock.
        let account = try ServiceAccount(json: signingAccount.json(tokenURI: mock.tokenURL))
        let configuration = try FCMConfiguration(serviceAccount: account, endpoint: mock.baseURL, maxRetry: 0)

        var clientConfig = HTTPClient.Configuration(tlsConfiguration: try pki.clientTLSConfiguration())
        // Generous: a timeout here is a failure, and the suite must pass on a loaded machine.
        clientConfig.timeout = .init(connect: .seconds(60), read: .seconds(300))
        let httpClient = HTTPClient(eventLoopGroupProvider: .shared(group), configuration: clientConfig)

        var poolConfig = HTTP2PoolConfiguration()
        poolConfig.tlsConfiguration = try pki.clientTLSConfiguration()
        poolConfig.requestTimeout = .seconds(300)
        poolConfig.connectTimeout = .seconds(60)
        var logger = Logger(label: "test.fcm")
        logger.logLevel = .warning
        let provider = try FCMProvider(
            configuration: configuration, httpClient: httpClient, poolConfiguration: poolConfig,
            eventLoopGroup: group, logger: logger)
        return FCMHarness(group: group, pki: pki, mock: mock, httpClient: httpClient, provider: provider)
    }

    func send(_ n: PushNotification, _ target: PushTarget) async throws -> SendOutcome {
        try await attempt(n, to: target)
    }

    func shutdown() async throws {
        await provider.shutdown()
        try await httpClient.shutdown()
        try await mock.stop()
        try await group.shutdownGracefully()
    }
}

final class FCMProviderTests: XCTestCase {
    func withHarness(accessTokenLifetime: Int = 3599, _ body: (FCMHarness) async throws -> Void) async throws {
        try await TestSupport.withHarness({ try await FCMHarness.make(accessTokenLifetime: accessTokenLifetime) }, body)
    }

    func testAlertSendIsMappedAndDelivered() async throws {
        try await withHarness { h in
            let n = try decodeNotification(
                """
                {"notif_id":"n1","tokens":["token-a","token-b"],"platform":2,"title":"Hello","message":"Hello World Android!",
                 "priority":"high","data":{"chatId":"0x6368","count":3,"flag":false,"nested":{"a":1}}}
                """)
            let prepared = try h.provider.prepare(n)
            for target in n.targets(FCMMessageMapper.rules) {
                let outcome = await h.provider.send(prepared, to: target, context: DeliveryContext(messageID: "m"))
                guard case .delivered(let id, _) = outcome else { return XCTFail("\(outcome)") }
                XCTAssertTrue(id?.hasPrefix("projects/pushgate-test/messages/") == true, "\(id ?? "nil")")
            }
            XCTAssertEqual(h.mock.sendRejections, [])
            XCTAssertEqual(h.mock.tokenRejections, [])
            let messages = h.mock.messages
            XCTAssertEqual(messages.map(\.target), ["token-a", "token-b"])
            for m in messages {
                XCTAssertEqual(m.targetKind, "token")
                XCTAssertFalse(m.validateOnly)
                XCTAssertEqual(m.data, ["chatId": "0x6368", "count": "3", "flag": "false", "nested": "{\"a\":1}"])
                XCTAssertEqual(m.notification, ["title": "Hello", "body": "Hello World Android!"])
                XCTAssertEqual((m.message["android"] as? [String: Any])?["priority"] as? String, "HIGH")
            }
            XCTAssertEqual(h.mock.tokenRequestCount, 1)
        }
    }

    func testTopicConditionDataOnlyAndValidateOnly() async throws {
        try await withHarness { h in
            let topic = try decodeNotification(#"{"platform":2,"topic":"news","message":"breaking"}"#)
            let condition = try decodeNotification(#"{"platform":2,"condition":"'a' in topics || 'b' in topics","message":"x"}"#)
            let wake = try decodeNotification(
                #"{"tokens":["wake-token"],"platform":2,"content_available":true,"priority":"high","data":{"sync":"now"}}"#)
            let dry = try decodeNotification(#"{"tokens":["dry-token"],"platform":2,"message":"test","dry_run":true}"#)

            for (n, target) in [(topic, PushTarget.topic), (condition, .topic), (wake, .token("wake-token")), (dry, .token("dry-token"))] {
                let outcome = try await h.send(n, target)
                XCTAssertTrue(outcome.isDelivered, "\(outcome)")
            }
            XCTAssertEqual(h.mock.sendRejections, [])
            let m = h.mock.messages
            XCTAssertEqual(m.count, 4)
            XCTAssertEqual(m[0].targetKind, "topic")
            XCTAssertEqual(m[0].target, "news")
            XCTAssertEqual(m[1].targetKind, "condition")
            XCTAssertEqual(m[1].target, "'a' in topics || 'b' in topics")
            XCTAssertEqual(m[2].targetKind, "token")
            XCTAssertNil(m[2].notification, "a data-only wake-up has no notification block")
            XCTAssertEqual(m[2].data, ["sync": "now"])
            XCTAssertEqual(((m[2].message["apns"] as? [String: Any])?["headers"] as? [String: String])?["apns-priority"], "5")
            XCTAssertTrue(m[3].validateOnly)
            XCTAssertFalse(m[0].validateOnly)
        }
    }

    func testHundredConcurrentSendsCostOneTokenRequest() async throws {
        try await withHarness { h in
            let tokens = (0..<100).map { "burst-token-\($0)" }
            var n = PushNotification(platform: .android, tokens: tokens)
            n.message = "burst"
            let prepared = try h.provider.prepare(n)
            let provider = h.provider
            let outcomes = await withTaskGroup(of: SendOutcome.self) { group in
                for t in tokens {
                    group.addTask { await provider.send(prepared, to: .token(t), context: DeliveryContext(messageID: t)) }
                }
                var out: [SendOutcome] = []
                for await o in group { out.append(o) }
                return out
            }
            XCTAssertEqual(outcomes.filter(\.isDelivered).count, 100, "\(outcomes.filter { !$0.isDelivered }.prefix(3))")
            XCTAssertEqual(h.mock.tokenRequestCount, 1)
            XCTAssertEqual(Set(h.mock.messages.map(\.target)), Set(tokens))
            XCTAssertEqual(Set(h.mock.messages.map(\.bearer)).count, 1)
            // And the cache holds for later sends.
            _ = try await h.send(n, .token("later"))
            XCTAssertEqual(h.mock.tokenRequestCount, 1)
        }
    }

    func testUnauthorizedInvalidatesAndNextSendReMints() async throws {
        try await withHarness { h in
            let n = notification { $0.message = "m" }
            let first = try await h.send(n, .token("t1"))
            XCTAssertTrue(first.isDelivered)
            XCTAssertEqual(h.mock.tokenRequestCount, 1)

            h.mock.revokeAccessTokens()
            let refused = try await h.send(n, .token("t1"))
            XCTAssertEqual(refused, .credentials(reason: "UNAUTHENTICATED", status: 401))
            XCTAssertEqual(h.mock.tokenRequestCount, 1)

            let retried = try await h.send(n, .token("t1"))
            XCTAssertTrue(retried.isDelivered, "\(retried)")
            XCTAssertEqual(h.mock.tokenRequestCount, 2)
            let bearers = h.mock.messages.map(\.bearer)
            XCTAssertEqual(bearers.count, 2)
            XCTAssertNotEqual(bearers[0], bearers[1])
        }
    }

    func testScriptedErrorsAreClassified() async throws {
        try await withHarness { h in
            h.mock.script(token: "dead", responses: [.unregistered])
            h.mock.script(token: "other-sender", responses: [.senderIDMismatch])
            h.mock.script(token: "busy", responses: [.unavailable(retryAfter: 2), .unavailable(retryAfter: nil), .ok])
            h.mock.script(token: "quota", responses: [.quotaExceeded(retryAfter: 7)])
            h.mock.script(token: "broken", responses: [.internalError])
            h.mock.script(token: "bad", responses: [.invalidArgument("The registration token is not a valid FCM registration token")])
            h.mock.script(token: "apns-auth", responses: [.thirdPartyAuthError])
            let n = notification { $0.message = "m" }

            let dead = try await h.send(n, .token("dead"))
            XCTAssertEqual(dead, .tokenDead(reason: "UNREGISTERED", status: 404))
            let mismatch = try await h.send(n, .token("other-sender"))
            XCTAssertEqual(mismatch, .tokenDead(reason: "SENDER_ID_MISMATCH", status: 403))

            let busy1 = try await h.send(n, .token("busy"))
            XCTAssertEqual(busy1, .transient(reason: "UNAVAILABLE", status: 503, retryAfter: 2))
            let busy2 = try await h.send(n, .token("busy"))
            XCTAssertEqual(busy2, .transient(reason: "UNAVAILABLE", status: 503, retryAfter: nil))
            let busy3 = try await h.send(n, .token("busy"))
            XCTAssertTrue(busy3.isDelivered)

            let quota = try await h.send(n, .token("quota"))
            XCTAssertEqual(quota, .transient(reason: "QUOTA_EXCEEDED", status: 429, retryAfter: 7))
            let internalError = try await h.send(n, .token("broken"))
            XCTAssertEqual(internalError, .transient(reason: "INTERNAL", status: 500, retryAfter: nil))

            let bad = try await h.send(n, .token("bad"))
            XCTAssertEqual(bad, .permanent(reason: "INVALID_ARGUMENT: The registration token is not a valid FCM registration token", status: 400))
            let apnsAuth = try await h.send(n, .token("apns-auth"))
            XCTAssertEqual(apnsAuth, .permanent(reason: "THIRD_PARTY_AUTH_ERROR: Auth error from APNS or Web Push Service", status: 401))

            // THIRD_PARTY_AUTH_ERROR is a 401 but must not throw away our access token.
            XCTAssertEqual(h.mock.tokenRequestCount, 1)
        }
    }

    func testOversizedMessageIsRefusedBeforeAnyRequest() async throws {
        try await withHarness { h in
            let tooBig = try FCMMappingTests.sized(bodySize: 4097)
            XCTAssertThrowsError(try h.provider.prepare(tooBig)) { error in
                XCTAssertEqual("\(error)", "PayloadTooLarge (4097 > 4096 bytes)")
            }
            // A target-level check catches a longer target too.
            let exact = try FCMMappingTests.sized(bodySize: 4096)
            let prepared = try h.provider.prepare(exact)
            XCTAssertEqual(h.provider.validate(target: .token("token-12"), of: prepared), .payloadTooLarge(size: 4097, limit: 4096))
            XCTAssertEqual(h.mock.sendRequestCount, 0)
            XCTAssertEqual(h.mock.tokenRequestCount, 0)
            XCTAssertEqual(h.mock.connectionsAccepted, 0)

            // Exactly 4096 bytes goes through, and the mock saw 4096 bytes.
            let ok = await h.provider.send(prepared, to: .token("token-1"), context: DeliveryContext(messageID: "m"))
            XCTAssertTrue(ok.isDelivered, "\(ok)")
            XCTAssertEqual(h.mock.messages.first?.body.count, 4096)
        }
    }

    func testTokenEndpointRefusesAssertionFromWrongKey() async throws {
        // The JSON names the registered account but carries another private key.
        let impostor = TestServiceAccount(
            projectID: Fixtures.account.projectID, clientEmail: Fixtures.account.clientEmail,
            privateKeyID: Fixtures.account.privateKeyID, privateKey: Fixtures.otherAccount.privateKey)
        let h = try await FCMHarness.make(signingAccount: impostor)
        do {
            let outcome = try await h.send(notification { $0.message = "m" }, .token("t"))
            if case .permanent(let reason, let status) = outcome {
                XCTAssertEqual(status, 400)
                XCTAssertTrue(reason.contains("invalid_grant"), reason)
            } else {
                XCTFail("expected .permanent, got \(outcome)")
            }
            XCTAssertEqual(h.mock.tokenRejections, ["Invalid JWT Signature."])
            XCTAssertEqual(h.mock.sendRequestCount, 0)
        } catch {
            try? await h.shutdown()
            throw error
        }
        try await h.shutdown()
    }

    func testShortLivedAccessTokenIsRefreshed() async throws {
        // expires_in 2 s: the cache keeps it for half its life, then re-mints.
        try await withHarness(accessTokenLifetime: 2) { h in
            let n = notification { $0.message = "m" }
            _ = try await h.send(n, .token("a"))
            _ = try await h.send(n, .token("b"))
            XCTAssertEqual(h.mock.tokenRequestCount, 1)
            try await Task.sleep(nanoseconds: 1_200_000_000)
            let outcome = try await h.send(n, .token("c"))
            XCTAssertTrue(outcome.isDelivered)
            XCTAssertEqual(h.mock.tokenRequestCount, 2)
        }
    }

    func testConnectionFailureIsTransient() async throws {
        try await withHarness { h in
            // A provider whose FCM endpoint has nothing listening (the mock's token endpoint still works).
            let closedPort: Int = try await {
                let ch = try await ServerBootstrap(group: h.group).bind(host: "127.0.0.1", port: 0).get()
                let p = ch.localAddress!.port!
                try await ch.close()
                return p
            }()
            let account = try ServiceAccount(json: Fixtures.account.json(tokenURI: h.mock.tokenURL))
            let config = try FCMConfiguration(serviceAccount: account, endpoint: "https://127.0.0.1:\(closedPort)")
            var poolConfig = HTTP2PoolConfiguration()
            poolConfig.tlsConfiguration = try h.pki.clientTLSConfiguration()
            poolConfig.connectTimeout = .seconds(2)
            poolConfig.requestTimeout = .seconds(5)
            let provider = try FCMProvider(configuration: config, httpClient: h.httpClient, poolConfiguration: poolConfig, eventLoopGroup: h.group)
            let prepared = try provider.prepare(notification { $0.message = "m" })
            let outcome = await provider.send(prepared, to: .token("t"), context: DeliveryContext(messageID: "m"))
            await provider.shutdown()
            guard case .transient(_, let status, _) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertNil(status)
        }
    }

    /// The mock is as strict as FCM about the newer fields: an unknown `Proxy` value, a non-string
    /// `live_activity_token`, a bad `analytics_label` and unknown members are 400 INVALID_ARGUMENT
    /// (sent here without the gateway's ingest checks), while the known values pass.
    func testMockRefusesUnknownEnumValuesAndFieldsAsFCMDoes() async throws {
        try await withHarness { h in
            func object(_ pairs: [(String, JSONValue)]) -> JSONValue { .object(JSONObject(pairs)) }
            func with(_ configure: (inout PushNotification) -> Void) -> PushNotification {
                notification {
                    $0.message = "m"
                    configure(&$0)
                }
            }
            let refused: [(PushNotification, String)] = [
                (with { $0.android = JSONObject([("notification", object([("proxy", .string("SOMETIMES"))]))]) }, "proxy"),
                (with { $0.android = JSONObject([("notification", object([("proxy", .string("allow"))]))]) }, "proxy"),
                (with { $0.android = JSONObject([("notification", object([("no_such_field", .int(1))]))]) }, "no_such_field"),
                (with { $0.apns = JSONObject([("live_activity_token", .int(42))]) }, "live_activity_token"),
                (with { $0.apns = JSONObject([("live_activity", .string("t"))]) }, "live_activity"),
                (with { $0.fcmOptions = JSONObject([("analytics_label", .string("a b"))]) }, "analytics_label"),
            ]
            for (n, field) in refused {
                let outcome = try await h.send(n, .token("token-strict"))
                XCTAssertEqual(outcome.status, 400, "\(field): \(outcome)")
                XCTAssertTrue(outcome.reason?.contains("INVALID_ARGUMENT") == true, "\(field): \(outcome)")
                XCTAssertTrue(h.mock.sendRejections.last?.contains(field) == true, "\(field): \(h.mock.sendRejections)")
            }
            XCTAssertEqual(h.mock.messages.count, 0, "nothing refused was recorded as sent")
            let accepted = notification {
                $0.message = "m"
                $0.android = JSONObject([("notification", object([("proxy", .string("DENY")), ("bypass_proxy_notification", .bool(true))]))])
                $0.apns = JSONObject([("live_activity_token", .string("la-token"))])
            }
            let outcome = try await h.send(accepted, .token("token-strict"))
            XCTAssertTrue(outcome.isDelivered, "\(outcome)")
            let sent = try XCTUnwrap(h.mock.messages.last)
            XCTAssertEqual(((sent.message["android"] as? [String: Any])?["notification"] as? [String: Any])?["proxy"] as? String, "DENY")
            // A fid: token is sent as message.fid.
            let fid = try await h.send(notification { $0.message = "m" }, .token("fid:dR2bC7qUTH-qhK4Vk_l3cD"))
            XCTAssertTrue(fid.isDelivered, "\(fid)")
            XCTAssertEqual(h.mock.messages.last?.targetKind, "fid")
            XCTAssertEqual(h.mock.messages.last?.target, "dR2bC7qUTH-qhK4Vk_l3cD")
        }
    }
}
