import Foundation
import HummingbirdTesting
import MockProviders
import NIOPosix
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// End to end through Huawei HMS: HTTP client -> Pushgate -> TLS HTTP/2 -> mock HMS (+ mock OAuth).
final class GatewayHuaweiTests: XCTestCase {
    static let appID = "104123456"
    static let appSecret = "hms-s3cr3t-value-0123456789abcdef"

    /// The shared environment (APNs, FCM, Web Push mocks, feedback receiver) plus a mock HMS on its CA.
    func start() async throws -> (TestEnvironment, MockHMS) {
        let env = try await TestEnvironment.start()
        let hms = MockHMS(
            options: MockHMS.Options(appID: Self.appID, appSecret: Self.appSecret, tls: try env.pki.serverTLSConfiguration()),
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await hms.start()
        return (env, hms)
    }

    func yaml(_ hms: MockHMS, maxRetry: Int = 0, secret: String = appSecret) -> String {
        """
        huawei:
          enabled: true
          appid: "\(Self.appID)"
          appsecret: "\(secret)"
          endpoint: "\(hms.baseURL)"
          token_url: "\(hms.tokenURL)"
          max_retry: \(maxRetry)
        """
    }

    func testDeliveredTokenDeadFeedbackMetricsAndOneTokenRequest() async throws {
        let (env, hms) = try await start()
        defer {
            Task {
                try? await hms.stop()
                await env.stop()
            }
        }
        hms.script(token: "dead-token", responses: [.invalidToken])
        hms.script(token: "illegal-token", responses: [.illegalToken])
        try await env.withGateway(yaml(hms), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["good-token","dead-token","illegal-token","bad token!"],"platform":3,"title":"T","message":"M","priority":"high","huawei_data":"{\"k\":1}","huawei_collapse_key":2,"bi_tag":"tag","app_secret":"never-used"}]}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["counts"] as? Int, 4)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 3, r.body)
            // Tokens are masked in log entries (log.hide_token): the errors tell them apart.
            XCTAssertEqual(logs.filter { ($0["error"] as? String)?.contains("80300007") == true }.count, 2, "dead-token and the malformed one")
            XCTAssertTrue(logs.allSatisfy { $0["platform"] as? String == "huawei" }, r.body)
            XCTAssertTrue(logs.contains { ($0["error"] as? String)?.contains("80100000") == true }, r.body)

            let good = try XCTUnwrap(hms.messages.first { $0.target == "good-token" })
            XCTAssertEqual(good.targets, ["good-token"], "one token per request")
            XCTAssertFalse(good.validateOnly)
            XCTAssertEqual(good.message["data"] as? String, #"{"k":1}"#)
            XCTAssertEqual(good.android["urgency"] as? String, "HIGH")
            XCTAssertEqual(good.android["collapse_key"] as? Int, 2)
            XCTAssertEqual(good.android["bi_tag"] as? String, "tag")
            XCTAssertEqual((good.android["notification"] as? [String: Any])?["title"] as? String, "T")
            XCTAssertEqual(hms.messages.filter { $0.target == "dead-token" }.count, 1, "a dead token is never retried")
            XCTAssertTrue(hms.sendRejections.allSatisfy { $0 == "malformed token" }, "\(hms.sendRejections)")
            XCTAssertEqual(hms.tokenRequestCount, 1)
            XCTAssertTrue(hms.tokenRejections.isEmpty, "\(hms.tokenRejections)")
            let fed = await eventually { env.feedbackCount == 3 }
            XCTAssertTrue(fed, "feedback posts: \(env.feedbackCount)")

            // 50 more sends: still one OAuth token request.
            let tokens = (0..<50).map { "tok-\($0)" }
            let body = #"{"notifications":[{"tokens":["# + tokens.map { "\"\($0)\"" }.joined(separator: ",") + #"],"platform":3,"message":"burst"}]}"#
            let r2 = try await client.push(body)
            XCTAssertEqual(r2.body, #"{"counts":50,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(hms.tokenRequestCount, 1)

            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains("\ngorush_huawei_success 51\n"), metrics)
            XCTAssertTrue(metrics.contains("\ngorush_huawei_fail 3\n"), metrics)
            let stat = try await client.execute(uri: "/api/stat/app", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual((stat["huawei"] as? [String: Int]) ?? [:], ["push_success": 51, "push_error": 3])
        }
    }

    func testOAuthRefreshAfterExpiredToken() async throws {
        let (env, hms) = try await start()
        defer {
            Task {
                try? await hms.stop()
                await env.stop()
            }
        }
        try await env.withGateway(yaml(hms), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(#"{"notifications":[{"tokens":["t1"],"platform":3,"message":"one"}]}"#)
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            // HMS forgets the token (expired): 401 / 80200003, a new token, the send again, once.
            hms.revokeAccessTokens()
            let r2 = try await client.push(#"{"notifications":[{"tokens":["t2"],"platform":3,"message":"two"}]}"#)
            XCTAssertEqual(r2.body, #"{"counts":1,"logs":[],"success":"ok"}"#, "max_retry 0: the credentials retry is on top")
            XCTAssertEqual(hms.tokenRequestCount, 2)
            XCTAssertEqual(hms.sendRejections, ["unknown bearer"])
            // A scripted 80200003 for a valid token: refreshed once, then delivered.
            hms.script(token: "t3", responses: [.oauthExpired])
            let r3 = try await client.push(#"{"notifications":[{"tokens":["t3"],"platform":3,"message":"three"}]}"#)
            XCTAssertEqual(r3.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(hms.tokenRequestCount, 3)
            XCTAssertEqual(hms.messages.filter { $0.target == "t3" }.count, 2)
        }
    }

    func testRetriesOn5xxAnd429WithRetryAfter() async throws {
        let (env, hms) = try await start()
        defer {
            Task {
                try? await hms.stop()
                await env.stop()
            }
        }
        hms.script(token: "flaky", responses: [.internalError(retryAfter: nil), .trafficControl(retryAfter: nil), .ok])
        hms.script(token: "slow", responses: [.tooManyRequests(retryAfter: 2), .ok])
        hms.script(token: "broken", responses: [.badMessage("Illegal payload")])
        try await env.withGateway(yaml(hms, maxRetry: 3), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(#"{"notifications":[{"tokens":["flaky","slow","broken"],"platform":3,"message":"m"}]}"#)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("80100003") == true, r.body)
            let msgs = hms.messages
            XCTAssertEqual(msgs.filter { $0.target == "flaky" }.count, 3, "500/81000001, 503, then delivered")
            XCTAssertEqual(msgs.filter { $0.target == "broken" }.count, 1, "80100003 is never retried")
            let slow = msgs.filter { $0.target == "slow" }
            XCTAssertEqual(slow.count, 2)
            if slow.count == 2 {
                XCTAssertGreaterThanOrEqual(slow[1].receivedAt.timeIntervalSince(slow[0].receivedAt), 2.0, "Retry-After: 2 honoured")
            }
        }
    }

    func testPayloadTooLargeAndBadFields() async throws {
        let (env, hms) = try await start()
        defer {
            Task {
                try? await hms.stop()
                await env.stop()
            }
        }
        try await env.withGateway(yaml(hms), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let big = String(repeating: "x", count: 5000)
            let r = try await client.push(#"{"notifications":[{"tokens":["t1"],"platform":3,"message":"\#(big)"}]}"#)
            XCTAssertEqual(r.status, 200)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertTrue((logs.first?["error"] as? String)?.hasPrefix("PayloadTooLarge") == true, r.body)
            XCTAssertEqual(hms.sendRequestCount, 0, "refused before any network call")

            let bad = try await client.push(#"{"notifications":[{"tokens":["t1"],"platform":3,"message":"m","huawei_collapse_key":500}]}"#)
            XCTAssertEqual(bad.status, 400)
            XCTAssertTrue(bad.body.contains("notifications[0].huawei_collapse_key"), bad.body)
            let ttl = try await client.push(#"{"notifications":[{"tokens":["t1"],"platform":3,"message":"m","huawei_ttl":"tomorrow"}]}"#)
            XCTAssertEqual(ttl.status, 400)
            XCTAssertTrue(ttl.body.contains("huawei_ttl"), ttl.body)
        }
    }

    func testSecretHiddenAndWrongSecretIsPermanentWithoutLeaking() async throws {
        let (env, hms) = try await start()
        defer {
            Task {
                try? await hms.stop()
                await env.stop()
            }
        }
        let wrong = "wrong-secret-9f8e7d6c5b4a"
        try await env.withGateway(yaml(hms, secret: wrong), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertFalse(config.contains(wrong), config)
            XCTAssertTrue(config.contains("[REDACTED]"), config)
            XCTAssertTrue(config.contains(Self.appID), "the app id is not a secret")

            let r = try await client.push(#"{"notifications":[{"tokens":["t1"],"platform":3,"message":"m"}]}"#)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("HMS OAuth") == true, r.body)
            XCTAssertFalse(r.body.contains(wrong), r.body)
            XCTAssertEqual(hms.sendRequestCount, 0)
            XCTAssertEqual(hms.tokenRejections, ["invalid client_secret"])
        }
    }

    func testConfigValidation() async throws {
        /// The start error of a configuration (every case here fails before anything is opened).
        func buildError(_ huawei: String) -> String? {
            let yaml = "core:\n  port: 0\nqueue:\n  engine: memory\n" + huawei
            do {
                let raw = try RawConfig(yaml: yaml, environment: [:])
                _ = try GatewayBuilder.build(raw: raw)
                return nil
            } catch {
                return "\(error)"
            }
        }
        let noSecret = buildError("huawei:\n  enabled: true\n  appid: \"1\"\n")
        XCTAssertTrue(noSecret?.contains("missing huawei app secret") == true, noSecret ?? "built")
        let noID = buildError("huawei:\n  enabled: true\n  appsecret: \"top-secret-xyz\"\n")
        XCTAssertTrue(noID?.contains("missing huawei app id") == true, noID ?? "built")
        XCTAssertFalse(noID?.contains("top-secret-xyz") ?? false)
        let badID = buildError("huawei:\n  enabled: true\n  appid: \"1/../x\"\n  appsecret: \"top-secret-xyz\"\n")
        XCTAssertTrue(badID?.contains("huawei.appid") == true, badID ?? "built")
        let badURL = buildError("huawei:\n  enabled: true\n  appid: \"1\"\n  appsecret: \"top-secret-xyz\"\n  token_url: \"ftp://x\"\n")
        XCTAssertTrue(badURL?.contains("huawei.token_url") == true, badURL ?? "built")
        XCTAssertFalse(badURL?.contains("top-secret-xyz") ?? false)
        let badRetry = buildError("huawei:\n  enabled: true\n  appid: \"1\"\n  appsecret: \"s\"\n  max_retry: 1000\n")
        XCTAssertTrue(badRetry?.contains("huawei.max_retry") == true, badRetry ?? "built")
    }
}
