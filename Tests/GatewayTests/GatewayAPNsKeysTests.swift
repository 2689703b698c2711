import Foundation
import HummingbirdTesting
import Logging
import MockProviders
import NIOCore
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// `ios.keys`: several token keys scoped per environment and topic, from the configuration file to
/// the JWT the mock APNs verified.
final class GatewayAPNsKeysTests: XCTestCase {
    /// The test environment's YAML with `ios.key_path` replaced by `keys` (YAML lines under `ios:`).
    func yaml(_ env: TestEnvironment, production: Bool = false, keys: String) -> String {
        let single = "  key_path: \"\(env.directory)/mock-apns.p8\"\n"
        let base = env.yaml()
        XCTAssertTrue(base.contains(single))
        return base.replacingOccurrences(of: single, with: "  key_path: \"\"\n  production: \(production)\n  keys:\n" + keys)
    }

    func sandboxAndProduction(_ env: TestEnvironment) -> String {
        """
            - key_id: "\(env.chatKey.keyID)"
              key_path: "\(env.directory)/chat.p8"
              environment: sandbox
            - key_id: "\(env.walletKey.keyID)"
              team_id: "\(env.walletKey.teamID)"
              key_path: "\(env.directory)/wallet.p8"
              environment: production

        """
    }

    func testEachDeliveryIsSignedByTheKeyOfItsEnvironment() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let raw = try RawConfig(yaml: yaml(env, keys: sandboxAndProduction(env)), environment: ["PUSHGATE_QUEUE_ENGINE": "memory"])
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        let app = try gateway.makeApplication()
        let sandboxToken = String(repeating: "a1", count: 32)
        let productionToken = String(repeating: "b2", count: 32)
        try await app.test(.live) { client in
            let r = try await client.push(
                #"""
                {"notifications":[
                  {"tokens":["\#(sandboxToken)"],"platform":1,"message":"to the sandbox","development":true},
                  {"tokens":["\#(productionToken)"],"platform":1,"message":"to production","production":true},
                  {"tokens":["\#(sandboxToken)"],"platform":1,"message":"the default environment (sandbox)"}],"sync":true}
                """#)
            XCTAssertEqual(r.body, #"{"counts":3,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.apns.rejections, [])
            let kids = env.apns.requests.map { ($0.token, $0.providerKeyID ?? "none") }
            XCTAssertEqual(kids.filter { $0.0 == sandboxToken }.map(\.1), [env.chatKey.keyID, env.chatKey.keyID], "\(kids)")
            XCTAssertEqual(kids.filter { $0.0 == productionToken }.map(\.1), [env.walletKey.keyID], "\(kids)")
            // Channel management is signed by the key of the environment asked for.
            for production in [false, true] {
                let created = try await GatewayBroadcastTests.call(
                    client, .post, "/api/apns/channels", #"{"message_storage_policy":0,"production":\#(production)}"#)
                XCTAssertEqual(created.status, 201, created.body)
                XCTAssertEqual(
                    env.apns.channelRequests.last?.providerKeyID, production ? env.walletKey.keyID : env.chatKey.keyID, "production \(production)")
            }
            // The keys are credentials: /api/config shows none of them.
            let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertFalse(config.contains("chat.p8") || config.contains(env.chatKey.keyID), config)
        }
    }

    /// No key for the configured default (`ios.topic` in the `ios.production` environment) is a
    /// start error naming `ios.keys`; a bad entry names its member.
    func testConfigErrorsNameTheKey() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let sandboxOnly = """
                - key_id: "\(env.chatKey.keyID)"
                  key_path: "\(env.directory)/chat.p8"
                  environment: sandbox

            """
        func startError(_ yaml: String) async throws -> String {
            let gateway: Gateway
            do {
                let raw = try RawConfig(yaml: yaml, environment: ["PUSHGATE_QUEUE_ENGINE": "memory"])
                var logger = Logger(label: "test")
                logger.logLevel = .warning
                gateway = try GatewayBuilder.build(raw: raw, logger: logger)
            } catch {
                return "\(error)"
            }
            try await gateway.makeApplication().test(.live) { _ in }
            return "started"
        }
        let noProductionKey = try await startError(yaml(env, production: true, keys: sandboxOnly))
        XCTAssertTrue(noProductionKey.contains("ios.keys") && noProductionKey.contains("com.example.app"), noProductionKey)
        XCTAssertTrue(noProductionKey.contains("production"), noProductionKey)
        let started = try await startError(yaml(env, production: false, keys: sandboxOnly))
        XCTAssertEqual(started, "started")
        let badEnvironment = try await startError(yaml(env, keys: sandboxOnly.replacingOccurrences(of: "sandbox", with: "staging")))
        XCTAssertTrue(badEnvironment.contains("ios.keys[0].environment"), badEnvironment)
        let unknownMember = try await startError(yaml(env, keys: sandboxOnly + "      colour: blue\n"))
        XCTAssertTrue(unknownMember.contains("ios.keys[0].colour"), unknownMember)
    }

    /// An app of a multi-app gateway has its own `ios.keys`: its pushes are signed by its keys.
    func testAnAppSignsWithItsOwnScopedKeys() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let apps = """
            apps:
              - id: chat
                api_keys: ["chat-key-0123456789abcdef"]
                ios:
                  team_id: "\(env.chatKey.teamID)"
                  endpoint: "\(env.apns.baseURL)"
                  topic: com.example.chat
                  keys:
                    - key_id: "\(env.chatKey.keyID)"
                      key_path: "\(env.directory)/chat.p8"
                      environment: sandbox
                    - key_id: "\(env.walletKey.keyID)"
                      key_path: "\(env.directory)/wallet.p8"
                      environment: production
                      topics: [com.example.chat]
            """
        let token = String(repeating: "c3", count: 32)
        try await env.withGateway(apps, environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.execute(
                uri: "/api/push", method: .post, headers: [.contentType: "application/json", .authorization: "Bearer chat-key-0123456789abcdef"],
                body: ByteBuffer(
                    string:
                        #"{"notifications":[{"tokens":["\#(token)"],"platform":1,"message":"a","production":true},{"tokens":["\#(token)"],"platform":1,"message":"b"}]}"#
                )
            ) { String(buffer: $0.body) }
            XCTAssertEqual(r, #"{"counts":2,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.apns.rejections, [])
            XCTAssertEqual(Set(env.apns.requests.compactMap(\.providerKeyID)), [env.chatKey.keyID, env.walletKey.keyID])
            XCTAssertEqual(env.apns.requests.first { $0.bodyString.contains("\"a\"") }?.providerKeyID, env.walletKey.keyID)
        }
    }

    /// The same list from the environment, as a JSON array.
    func testKeysFromTheEnvironmentAsJSON() throws {
        let raw = try RawConfig(
            yaml: nil,
            environment: ["PUSHGATE_IOS_KEYS": #"[{"key_id":"ABC","key_path":"/k.p8","environment":"sandbox","topics":["a.b"]}]"#])
        let items = raw.list("ios.keys")
        XCTAssertEqual(items.count, 1)
        let entry = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(items[0].utf8)) as? [String: Any])
        XCTAssertEqual(entry["key_id"] as? String, "ABC")
        XCTAssertEqual(entry["topics"] as? [String], ["a.b"])
        XCTAssertThrowsError(try RawConfig(yaml: nil, environment: ["PUSHGATE_IOS_KEYS": "[not json"]))
    }
}
