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

/// Several token keys, each restricted to an environment and/or topics (Apple's team-scoped and
/// topic-specific keys), against two mock APNs (sandbox and production) that verify each token with
/// the public key of its `kid` and refuse a key outside its environment or topics as APNs does.
final class APNsSigningKeysTests: XCTestCase {
    struct Setup {
        let group: MultiThreadedEventLoopGroup
        let sandbox: MockAPNs
        let production: MockAPNs
        let provider: APNsProvider

        func send(_ n: PushNotification, to token: String) async throws -> SendOutcome {
            let prepared = try provider.prepare(n)
            return await provider.send(prepared, to: .token(token), context: DeliveryContext(messageID: UUID().uuidString))
        }

        func shutdown() async throws {
            await provider.shutdown()
            try await sandbox.stop()
            try await production.stop()
            try await group.shutdownGracefully()
        }
    }

    let sandboxKey = TestAPNsKey.generate(keyID: "SANDBOX001", teamID: "TEAM000001")
    let productionKey = TestAPNsKey.generate(keyID: "PRODUCT001", teamID: "TEAM000001")
    let topicKey = TestAPNsKey.generate(keyID: "TOPICKEY01", teamID: "TEAM000001")

    /// Mocks that trust every test key, with Apple's restrictions of each (`restrictions`: kid ->
    /// production-only), and a provider signing with `keys`.
    func withSetup(
        _ keys: [APNsSigningKey], restrictions: [String: Bool], keyTopics: [String: [String]] = [:], defaultProduction: Bool = false,
        _ body: (Setup) async throws -> Void
    ) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let pki = try TestPKI.generate(hosts: ["127.0.0.1", "localhost"])
        func mock(production: Bool) throws -> MockAPNs {
            var options = MockAPNs.Options(key: sandboxKey, tls: try pki.serverTLSConfiguration())
            options.additionalKeys = [productionKey, topicKey]
            options.production = production
            options.keyEnvironments = restrictions
            options.keyTopics = keyTopics
            return MockAPNs(options: options, eventLoopGroup: group)
        }
        let sandbox = try mock(production: false)
        let production = try mock(production: true)
        try await sandbox.start()
        try await production.start()
        var configuration = try APNsConfiguration(signingKeys: keys, production: defaultProduction, topic: "com.example.app")
        // Channel management in both environments goes to the sandbox mock's channel listener.
        try configuration.setChannelsEndpoint(sandbox.channelsBaseURL)
        configuration.sandboxEndpoint = sandbox.baseURL
        configuration.productionEndpoint = production.baseURL
        var poolConfig = HTTP2PoolConfiguration()
        poolConfig.tlsConfiguration = try pki.clientTLSConfiguration()
        // Generous: a timeout here is a failure, and the suite must pass on a loaded machine.
        poolConfig.requestTimeout = .seconds(300)
        poolConfig.connectTimeout = .seconds(60)
        var logger = Logger(label: "test.apns.keys")
        logger.logLevel = .warning
        let provider = try APNsProvider(configuration: configuration, poolConfiguration: poolConfig, eventLoopGroup: group, logger: logger)
        let setup = Setup(group: group, sandbox: sandbox, production: production, provider: provider)
        do {
            try await body(setup)
        } catch {
            try? await setup.shutdown()
            throw error
        }
        try await setup.shutdown()
    }

    func key(_ k: TestAPNsKey, _ environment: APNsEnvironment?, topics: [String] = []) -> APNsSigningKey {
        APNsSigningKey(key: k.privateKey, keyID: k.keyID, teamID: k.teamID, environment: environment, topics: topics, source: "ios.keys")
    }

    func alert(production: Bool, topic: String? = nil) -> PushNotification {
        var n = PushNotification(platform: .ios)
        n.message = "hello"
        n.production = production ? true : nil
        n.development = production ? nil : true
        n.topic = topic
        return n
    }

    /// A sandbox-only and a production-only key: each delivery is signed by the key of its
    /// environment, and the mock of each environment verified it with that key's public key.
    func testEachEnvironmentIsSignedByItsOwnKey() async throws {
        try await withSetup(
            [key(sandboxKey, .sandbox), key(productionKey, .production)],
            restrictions: [sandboxKey.keyID: false, productionKey.keyID: true]
        ) { s in
            for i in 1...3 {
                let toSandbox = try await s.send(alert(production: false), to: deviceToken(i))
                XCTAssertTrue(toSandbox.isDelivered, "\(toSandbox)")
                let toProduction = try await s.send(alert(production: true), to: deviceToken(100 + i))
                XCTAssertTrue(toProduction.isDelivered, "\(toProduction)")
            }
            XCTAssertEqual(s.sandbox.rejections, [])
            XCTAssertEqual(s.production.rejections, [])
            XCTAssertEqual(s.sandbox.requests.compactMap(\.providerKeyID), Array(repeating: sandboxKey.keyID, count: 3))
            XCTAssertEqual(s.production.requests.compactMap(\.providerKeyID), Array(repeating: productionKey.keyID, count: 3))
            // The signature itself: each environment's JWT verifies with its key's public half only.
            let sandboxJWT = try DecodedJWT(try XCTUnwrap(s.sandbox.requests.first?.providerToken))
            XCTAssertNoThrow(try sandboxJWT.verify(es256: sandboxKey.publicKey))
            XCTAssertThrowsError(try sandboxJWT.verify(es256: productionKey.publicKey))
            let productionJWT = try DecodedJWT(try XCTUnwrap(s.production.requests.first?.providerToken))
            XCTAssertNoThrow(try productionJWT.verify(es256: productionKey.publicKey))
            XCTAssertEqual(productionJWT.claims["iss"] as? String, productionKey.teamID)
        }
    }

    /// A topic-specific key signs its topics (and their push-type topics); the team-scoped key of
    /// the environment signs the rest.
    func testATopicSpecificKeyWinsForItsTopics() async throws {
        try await withSetup(
            [key(sandboxKey, .sandbox), key(topicKey, .sandbox, topics: ["com.example.other"])],
            restrictions: [sandboxKey.keyID: false, topicKey.keyID: false], keyTopics: [topicKey.keyID: ["com.example.other"]]
        ) { s in
            let other = try await s.send(alert(production: false, topic: "com.example.other"), to: deviceToken(1))
            XCTAssertTrue(other.isDelivered, "\(other)")
            var voip = alert(production: false, topic: "com.example.other")
            voip.pushType = "voip"
            let otherVoIP = try await s.send(voip, to: deviceToken(2))
            XCTAssertTrue(otherVoIP.isDelivered, "\(otherVoIP)")
            let app = try await s.send(alert(production: false), to: deviceToken(3))
            XCTAssertTrue(app.isDelivered, "\(app)")
            XCTAssertEqual(s.sandbox.rejections, [])
            XCTAssertEqual(s.sandbox.requests.compactMap(\.providerKeyID), [topicKey.keyID, topicKey.keyID, sandboxKey.keyID])
        }
    }

    /// No key for the delivery's environment: the delivery fails before any request, naming the
    /// topic, the environment and the configured keys (never a key).
    func testNoKeyForTheEnvironmentFailsNamingIt() async throws {
        try await withSetup([key(sandboxKey, .sandbox), key(topicKey, .sandbox, topics: ["com.example.other"])], restrictions: [:]) { s in
            XCTAssertThrowsError(try s.provider.prepare(alert(production: true))) { error in
                let reason = (error as? PushFailure)?.reason ?? "\(error)"
                XCTAssertTrue(reason.contains("com.example.app") && reason.contains("production"), reason)
                XCTAssertTrue(reason.contains("key id \(sandboxKey.keyID), sandbox only"), reason)
                XCTAssertFalse(reason.contains("PRIVATE KEY"), reason)
            }
            XCTAssertEqual(s.production.requestCount, 0)
        }
    }

    /// APNs refusing a token (the key used outside the environment Apple restricted it to, or a
    /// signature from another key): the outcome names the key id that signed it.
    func testProviderTokenRefusalsNameTheKeyID() async throws {
        // The production key's id and team, but another private key.
        let impostor = TestAPNsKey.generate(keyID: productionKey.keyID, teamID: productionKey.teamID)
        try await withSetup(
            [key(sandboxKey, nil), key(impostor, .production)],
            restrictions: [sandboxKey.keyID: false]
        ) { s in
            let badSignature = try await s.send(alert(production: true, topic: "com.example.other"), to: deviceToken(1))
            XCTAssertEqual(badSignature, .permanent(reason: "InvalidProviderToken (key id \(productionKey.keyID))", status: 403))
            XCTAssertEqual(s.production.rejections, ["403 InvalidProviderToken"])
        }
        // Configured for both environments, but Apple restricted it to the sandbox. One unrestricted
        // key (gorush's configuration): APNs' reason as gorush reports it, no key named.
        try await withSetup([key(sandboxKey, nil)], restrictions: [sandboxKey.keyID: false]) { s in
            let wrongEnvironment = try await s.send(alert(production: true), to: deviceToken(2))
            XCTAssertEqual(wrongEnvironment, .permanent(reason: "BadEnvironmentKeyIdInToken", status: 403))
            let sandbox = try await s.send(alert(production: false), to: deviceToken(3))
            XCTAssertTrue(sandbox.isDelivered, "\(sandbox)")
        }
        // Channel management: the same naming (two keys; the unrestricted one signs for com.example.app).
        try await withSetup(
            [key(productionKey, nil), key(sandboxKey, .sandbox, topics: ["com.example.other"])], restrictions: [productionKey.keyID: true]
        ) { s in
            do {
                _ = try await s.provider.channels.create(
                    bundleID: "com.example.app", policy: .noMessagesStored, production: false, requestID: UUID().uuidString)
                XCTFail("the sandbox refuses a production-only key")
            } catch {
                let failure = error as? APNsChannels.Failure
                XCTAssertEqual(failure?.status, 403)
                XCTAssertEqual(failure?.reason, "BadEnvironmentKeyIdInToken (key id \(productionKey.keyID))")
            }
        }
    }

    /// The choice itself: the most specific covering key, the first among equals, none outside
    /// every key's scope.
    func testSelectionPrefersTheMostSpecificKey() {
        let any = key(sandboxKey, nil)
        let production = key(productionKey, .production)
        let topic = key(topicKey, .production, topics: ["com.example.widgets"])
        let keys = [any, production, topic]
        func pick(_ topic: String, _ bundle: String, production: Bool) -> String? {
            APNsSigningKey.select(keys, topic: topic, bundleID: bundle, production: production).map { keys[$0].keyID }
        }
        XCTAssertEqual(pick("com.example.app", "com.example.app", production: false), sandboxKey.keyID)
        XCTAssertEqual(pick("com.example.app", "com.example.app", production: true), productionKey.keyID)
        XCTAssertEqual(pick("com.example.widgets", "com.example.widgets", production: true), topicKey.keyID)
        XCTAssertEqual(
            pick("com.example.widgets.push-type.widgets", "com.example.widgets", production: true), topicKey.keyID, "the app's push-type topics too")
        XCTAssertEqual(pick("com.example.widgets", "com.example.widgets", production: false), sandboxKey.keyID)
        XCTAssertNil(APNsSigningKey.select([production, topic], topic: "com.example.app", bundleID: "com.example.app", production: false))
        // Equals: the first listed.
        let twin = key(topicKey, .production)
        XCTAssertEqual(APNsSigningKey.select([production, twin], topic: "a.b", bundleID: "a.b", production: true), 0)
    }
}
