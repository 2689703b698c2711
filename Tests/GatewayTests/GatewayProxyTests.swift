import Foundation
import HummingbirdTesting
import Logging
import MockProviders
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Every outbound connection of a gateway through `core.http_proxy` (a CONNECT proxy on loopback):
/// APNs, FCM sends and its OAuth token request, Web Push, the feedback hook.
final class GatewayProxyTests: XCTestCase {
    /// A gateway of `env` whose proxy settings come from `proxyEnvironment` only (not the machine's).
    func withGateway(
        _ env: TestEnvironment, config: [String: String], proxyEnvironment: [String: String] = [:],
        _ body: @escaping @Sendable (any TestClientProtocol, Gateway) async throws -> Void
    ) async throws {
        let raw = try RawConfig(
            yaml: env.yaml(), environment: ["PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_SYNC": "true"].merging(config) { _, b in b })
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger, environment: proxyEnvironment)
        try await gateway.makeApplication().test(.live) { client in try await body(client, gateway) }
    }

    /// FCM sends addressed to `localhost` (the OAuth token_uri stays on 127.0.0.1, the JWT audience
    /// the mock checks), so the proxy's log tells the send connections from the token request.
    func localhostFCMEndpoint(_ env: TestEnvironment) -> String {
        env.fcm.baseURL.replacingOccurrences(of: "127.0.0.1", with: "localhost")
    }

    func testEveryOutboundConnectionGoesThroughTheProxyWithCredentials() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        var options = MockConnectProxy.Options()
        options.credentials = ("gw", "hunter2")
        let proxy = MockConnectProxy(options: options)
        try await proxy.start()
        defer { Task { try? await proxy.stop() } }
        env.fcm.script(token: "dead-token", responses: [.unregistered])
        let (sub, _) = env.webpush.makeSubscription(id: "browser-1")
        let keys = try XCTUnwrap(sub.keys)
        let subJSON = #"{"endpoint":"\#(sub.endpoint)","keys":{"p256dh":"\#(keys.p256dh)","auth":"\#(keys.auth)"}}"#
        let fcmEndpoint = localhostFCMEndpoint(env)
        try await withGateway(env, config: ["PUSHGATE_CORE_HTTP_PROXY": proxy.url, "PUSHGATE_ANDROID_ENDPOINT": fcmEndpoint]) { client, _ in
            let ios = String(repeating: "ab", count: 32)
            let r = try await client.push(
                #"{"notifications":[{"tokens":["\#(ios)"],"platform":1,"message":"hi"},"#
                    + #"{"tokens":["good-token","dead-token"],"platform":2,"message":"hi"},"#
                    + #"{"subscriptions":[\#(subJSON)],"platform":"webpush","message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]], r.body)
            XCTAssertEqual(logs.count, 1, "only the dead token fails: \(r.body)")
            XCTAssertEqual(env.apns.requests.count, 1)
            XCTAssertEqual(env.webpush.pushes(id: "browser-1").count, 1)
            XCTAssertEqual(env.fcm.tokenRequestCount, 1)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "the feedback POST for the dead token")

            let targets = Set(proxy.tunnelledTargets)
            XCTAssertTrue(targets.contains("127.0.0.1:\(env.apns.port)"), "APNs: \(targets)")
            XCTAssertTrue(targets.contains("localhost:\(env.fcm.port)"), "FCM send: \(targets)")
            XCTAssertTrue(targets.contains("127.0.0.1:\(env.fcm.port)"), "FCM OAuth token request: \(targets)")
            XCTAssertTrue(targets.contains("127.0.0.1:\(env.webpush.port)"), "Web Push: \(targets)")
            XCTAssertTrue(targets.contains("127.0.0.1:\(env.feedbackServer.port)"), "feedback hook: \(targets)")
            XCTAssertEqual(Set(proxy.connects.map(\.proxyAuthorization)), ["Basic Z3c6aHVudGVyMg=="], "every CONNECT authenticated")  // gw:hunter2

            // /api/config: the proxy URL is a secret, as gorush 1.22 redacts it.
            let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(config.contains("http_proxy: '[REDACTED]'") || config.contains("http_proxy: \"[REDACTED]\""), config)
            XCTAssertFalse(config.contains("hunter2"), config)
        }
    }

    func testNoProxyHostGoesDirect() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let proxy = MockConnectProxy()
        try await proxy.start()
        defer { Task { try? await proxy.stop() } }
        // NO_PROXY names the OAuth host: the token request goes direct, the sends through the proxy.
        try await withGateway(
            env, config: ["PUSHGATE_CORE_HTTP_PROXY": proxy.url, "PUSHGATE_ANDROID_ENDPOINT": localhostFCMEndpoint(env)],
            proxyEnvironment: ["NO_PROXY": "127.0.0.1"]
        ) { client, _ in
            let r = try await client.push(#"{"notifications":[{"tokens":["t-1"],"platform":2,"message":"hi"}]}"#)
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.fcm.tokenRequestCount, 1)
            XCTAssertEqual(proxy.tunnelledTargets, ["localhost:\(env.fcm.port)"], "no CONNECT for the NO_PROXY host")
        }
    }

    func testProxyDownFailsDeliveriesNamingTheProxyAndTheGatewayStaysUp() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let stopped = MockConnectProxy()
        try await stopped.start()
        let port = stopped.port
        try await stopped.stop()
        try await withGateway(
            env,
            config: [
                "PUSHGATE_CORE_HTTP_PROXY": "http://127.0.0.1:\(port)", "PUSHGATE_IOS_MAX_RETRY": "1", "PUSHGATE_CORE_FEEDBACK_HOOK_URL": "",
            ]
        ) {
            client, _ in
            let ios = String(repeating: "cd", count: 32)
            let r = try await client.push(#"{"notifications":[{"tokens":["\#(ios)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]], r.body)
            let error = try XCTUnwrap(logs.first?["error"] as? String, r.body)
            XCTAssertTrue(error.contains("proxy 127.0.0.1:\(port)"), error)
            XCTAssertEqual(env.apns.requests.count, 0)
            let health = try await client.execute(uri: "/healthz", method: .get) { Int($0.status.code) }
            XCTAssertEqual(health, 200, "the gateway stays up")
        }
    }

    func testBadProxyURLIsAOneLineConfigErrorWithoutTheURL() throws {
        let raw = try RawConfig(yaml: "core:\n  http_proxy: \"socks5://u:hunter2@proxy:1080\"\n", environment: [:])
        XCTAssertThrowsError(try GatewayBuilder.build(raw: raw, environment: [:])) { error in
            let text = "\(error)"
            XCTAssertTrue(text.hasPrefix("config error: core.http_proxy: "), text)
            XCTAssertFalse(text.contains("hunter2"), text)
            XCTAssertFalse(text.contains("\n"), text)
        }
        // gorush's key is no longer ignored silently, and the environment spelling works too.
        XCTAssertEqual(raw.warnings, [])
        let fromEnv = try RawConfig(yaml: nil, environment: ["GORUSH_CORE_HTTP_PROXY": "http://proxy:3128"])
        XCTAssertEqual(OutboundSettings(fromEnv).httpProxy, "http://proxy:3128")
    }
}
