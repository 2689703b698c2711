import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import Signing
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// End to end through HarmonyOS Push Kit v3: HTTP client -> Pushgate -> TLS HTTP/2 -> the mock's
/// `/v3/{projectId}/messages:send`, which verifies the service-account JWT and the push-type.
final class GatewayHarmonyTests: XCTestCase {
    func yaml(_ env: TestEnvironment, maxRetry: Int = 0) -> String {
        """
        harmony:
          enabled: true
          service_account_file: "\(env.directory)/mock-harmony.json"
          endpoint: "\(env.hms.baseURL)"
          max_retry: \(maxRetry)
        """
    }

    func testAlertReachesTheV3EndpointWithAVerifiedJWTAndPushTypeDeadTokenToFeedback() async throws {
        let env = try await TestEnvironment.start()
        let hms = env.hms
        let account = try XCTUnwrap(hms.options.harmony)
        hms.script(token: "hm-dead", responses: [.invalidToken])
        try await env.withGateway(yaml(env), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["hm-good","hm-dead"],"platform":"harmony","title":"T","message":"M","badge":3,"data":{"chat":"42"},"time_to_live":600,"bi_tag":"b1"}]}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["counts"] as? Int, 2)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertEqual(logs.first?["platform"] as? String, "harmony")
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("80300007") == true, r.body)

            XCTAssertTrue(hms.v3Rejections.isEmpty, "\(hms.v3Rejections)")
            let good = try XCTUnwrap(hms.v3Messages.first { $0.token == "hm-good" })
            XCTAssertEqual(good.pushType, 0)
            let notification = try XCTUnwrap(good.payload["notification"] as? [String: Any])
            XCTAssertEqual(notification["title"] as? String, "T")
            XCTAssertEqual(notification["body"] as? String, "M")
            XCTAssertEqual((notification["badge"] as? [String: Any])?["setNum"] as? Int, 3)
            let click = try XCTUnwrap(notification["clickAction"] as? [String: Any])
            XCTAssertEqual(click["actionType"] as? Int, 0)
            XCTAssertEqual((click["data"] as? [String: Any])?["chat"] as? String, "42")
            XCTAssertEqual(good.pushOptions["ttl"] as? Int, 600)
            XCTAssertEqual(good.pushOptions["biTag"] as? String, "b1")

            // The JWT, checked here independently of the mock: PS256 over the key file's key.
            let jwt = try DecodedJWT(good.jwt)
            XCTAssertEqual(jwt.header["alg"] as? String, "PS256")
            XCTAssertEqual(jwt.header["kid"] as? String, account.keyID)
            XCTAssertNoThrow(try jwt.verify(ps256: account.publicKey))
            XCTAssertThrowsError(try jwt.verify(ps256: try TestHarmonyServiceAccount.generate().publicKey))
            XCTAssertEqual(jwt.claims["iss"] as? String, account.subAccount)
            XCTAssertEqual(jwt.claims["aud"] as? String, account.tokenURI)
            let iat = try XCTUnwrap(jwt.claims["iat"] as? Int)
            XCTAssertEqual(jwt.claims["exp"] as? Int, iat + 3600)

            XCTAssertEqual(hms.v3Messages.filter { $0.token == "hm-dead" }.count, 1, "a dead token is never retried")
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "feedback posts: \(env.feedbackCount)")

            // More sends share the one JWT.
            let tokens = (0..<20).map { "\"hm-\($0)\"" }.joined(separator: ",")
            let burst = try await client.push(#"{"notifications":[{"tokens":[\#(tokens)],"platform":6,"title":"T","message":"burst"}]}"#)
            XCTAssertEqual(burst.status, 200, burst.body)
            XCTAssertEqual(Set(hms.v3Messages.map(\.jwt)).count, 1)

            // Where the key is and which key it is are not shown; the JWT never is.
            let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(config.contains("harmony:"), config)
            XCTAssertFalse(config.contains("mock-harmony.json"), config)
            XCTAssertFalse(config.contains(good.jwt), config)
        }
        await env.stop()
    }

    func testPushTypeFollowsTheRequest() async throws {
        let env = try await TestEnvironment.start()
        let hms = env.hms
        try await env.withGateway(yaml(env), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let bodies = [
                #"{"tokens":["t-bg"],"platform":6,"data":{"sync":true}}"#,
                #"{"tokens":["t-voip"],"platform":6,"push_type":"voip","data":{"call":"c1"}}"#,
                #"{"tokens":["t-live"],"platform":6,"push_type":"liveview","harmony_payload":{"activityId":1,"operation":0,"event":"TAXI"}}"#,
                #"{"tokens":["t-card"],"platform":6,"push_type":"1","harmony_payload":{"formId":7,"version":1}}"#,
                #"{"tokens":["t-voice"],"platform":6,"push_type":"voice","title":"Order","message":"Ready"}"#,
            ]
            let r = try await client.push(#"{"notifications":[\#(bodies.joined(separator: ","))]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            XCTAssertEqual((jsonObject(r.body)["logs"] as? [Any])?.count, 0, r.body)
            XCTAssertTrue(hms.v3Rejections.isEmpty, "\(hms.v3Rejections)")
            func sent(_ token: String) -> MockHMS.RecordedV3Message? { hms.v3Messages.first { $0.token == token } }
            XCTAssertEqual(sent("t-bg")?.pushType, 6)
            XCTAssertEqual(sent("t-bg")?.payload["extraData"] as? String, #"{"sync":true}"#)
            XCTAssertEqual(sent("t-voip")?.pushType, 10)
            XCTAssertEqual(sent("t-live")?.pushType, 7)
            XCTAssertEqual(sent("t-live")?.payload["event"] as? String, "TAXI")
            XCTAssertEqual(sent("t-card")?.pushType, 1)
            XCTAssertEqual(sent("t-voice")?.pushType, 2)

            // Refused at ingest, naming the field.
            for (body, field) in [
                (#"{"tokens":["x"],"platform":6,"push_type":"bogus","message":"m"}"#, "push_type"),
                (#"{"tokens":["x"],"platform":6,"push_type":"card"}"#, "harmony_payload"),
                (#"{"tokens":["x"],"platform":6,"push_type":"alert","message":"no title"}"#, "message"),
                (#"{"tokens":["x"],"platform":6}"#, "data"),
                (#"{"tokens":["x"],"platform":3,"message":"m","harmony_payload":{"a":1}}"#, "harmony_payload"),
            ] {
                let bad = try await client.push(#"{"notifications":[\#(body)]}"#)
                XCTAssertEqual(bad.status, 400, body)
                XCTAssertTrue(bad.body.contains(field), "\(body) -> \(bad.body)")
            }

            // Over Push Kit's 4096-byte message limit: a failed entry, nothing sent.
            let big = String(repeating: "x", count: 5000)
            let before = hms.v3RequestCount
            let o = try await client.push(#"{"notifications":[{"tokens":["t-big"],"platform":6,"title":"T","message":"\#(big)"}]}"#)
            XCTAssertEqual(o.status, 200, o.body)
            XCTAssertTrue(o.body.contains("4096"), o.body)
            XCTAssertEqual(hms.v3RequestCount, before)
        }
        await env.stop()
    }

    func testRetryableAnswersAreRetriedAndAnUnknownKeyIsACredentialsFailure() async throws {
        let env = try await TestEnvironment.start()
        let hms = env.hms
        hms.script(token: "t-busy", responses: [.trafficControl(retryAfter: nil), .ok])
        hms.script(token: "t-perm", responses: [.badMessage("Illegal payload")])
        try await env.withGateway(yaml(env, maxRetry: 2), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["t-busy","t-perm"],"platform":6,"title":"T","message":"M"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("80100003") == true, r.body)
            XCTAssertEqual(hms.v3Messages.filter { $0.token == "t-busy" }.count, 2, "503 is retried")
            XCTAssertEqual(hms.v3Messages.filter { $0.token == "t-perm" }.count, 1, "80100003 is not")
        }
        await env.stop()

        // A key file the service does not know: every send is refused 401 (80200001) and fails.
        let env2 = try await TestEnvironment.start()
        let other = try TestHarmonyServiceAccount.generate(projectID: try XCTUnwrap(env2.hms.options.harmony).projectID)
        let path = env2.directory + "/other-harmony.json"
        try other.json.write(toFile: path, atomically: true, encoding: .utf8)
        let yaml2 = """
            harmony:
              enabled: true
              service_account_file: "\(path)"
              endpoint: "\(env2.hms.baseURL)"
            """
        try await env2.withGateway(yaml2, environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(#"{"notifications":[{"tokens":["t1"],"platform":6,"title":"T","message":"M"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("80200001") == true, r.body)
            XCTAssertTrue(env2.hms.v3Rejections.contains { $0.contains("JWT") }, "\(env2.hms.v3Rejections)")
            XCTAssertTrue(env2.hms.v3Messages.isEmpty)
        }
        await env2.stop()
    }
}
