import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import Signing
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// End to end: HTTP client -> Pushgate (live HTTP server) -> TLS HTTP/2 -> mock APNs / FCM.
final class GatewayAPNsTests: XCTestCase {
    let token1 = String(repeating: "a1", count: 32)
    let token2 = String(repeating: "b2", count: 32)

    func testStatusServerRequestIsDeliveredLikeGorush() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let t = token1
        try await env.withGateway { client, _ in
            let body =
                #"{"notifications":[{"tokens":["\#(t)"],"platform":1,"message":"You have a new message","topic":"im.status.ethereum.pn","data":{"encryptedMessage":"0x6d65","chatId":"0x6368","publicKey":"0x7075"}}]}"#
            let r = try await client.push(body)
            XCTAssertEqual(r.status, 200)
            // gorush's router counts the token and the topic (countNotificationTargets).
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(r.headers[.contentType], "application/json; charset=utf-8")
            let delivered = await eventually { env.apns.requestCount == 1 }
            XCTAssertTrue(delivered)
            let req = try XCTUnwrap(env.apns.requests.first)
            XCTAssertEqual(req.method, "POST")
            XCTAssertEqual(req.path, "/3/device/\(t)")
            XCTAssertEqual(req.status, 200, "mock refused: \(env.apns.rejections)")
            XCTAssertEqual(req.topic, "im.status.ethereum.pn")
            XCTAssertEqual(req.pushType, "alert")
            XCTAssertNotNil(UUID(uuidString: req.apnsID ?? ""), "apns-id must be a UUID")
            // The JWT verifies with the key's public half.
            let jwt = try DecodedJWT(try XCTUnwrap(req.providerToken))
            XCTAssertNoThrow(try jwt.verify(es256: env.apnsKey.publicKey))
            XCTAssertEqual(jwt.header["kid"] as? String, env.apnsKey.keyID)
            XCTAssertEqual(jwt.claims["iss"] as? String, env.apnsKey.teamID)
            XCTAssertTrue(jwt.claims["iat"] is NSNumber, "iat must be numeric")
            // gorush's payload mapping: message without title -> "alert": "msg"; data at the root.
            XCTAssertEqual(req.aps["alert"] as? String, "You have a new message")
            XCTAssertEqual(req.payload["chatId"] as? String, "0x6368")
            XCTAssertEqual(req.payload["encryptedMessage"] as? String, "0x6d65")
        }
    }

    func testGorushReadmeBodies() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (token1, token2)
        try await env.withGateway { client, _ in
            // gorush README: iOS alert with title, badge, sound, custom data.
            let r = try await client.push(
                #"""
                {"notifications":[{"tokens":["\#(t1)","\#(t2)"],"platform":1,"title":"Hello","message":"Hello World iOS!","badge":5,"sound":"default","topic":"com.example.app","category":"NEW","mutable_content":true,"thread-id":"t1","data":{"key1":"welcome","key2":2}},{"tokens":["fcm-token-1"],"platform":2,"message":"Hello World Android!","title":"You got message","data":{"n":42,"flag":true}}]}
                """#)
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual(r.body, #"{"counts":4,"logs":[],"success":"ok"}"#)
            let ok = await eventually { env.apns.requestCount == 2 && env.fcm.messages.count == 1 }
            XCTAssertTrue(ok, "apns \(env.apns.requestCount) fcm \(env.fcm.messages.count)")
            let req = try XCTUnwrap(env.apns.requests(for: t1).first)
            let alert = req.aps["alert"] as? [String: Any]
            XCTAssertEqual(alert?["title"] as? String, "Hello")
            XCTAssertEqual(alert?["body"] as? String, "Hello World iOS!")
            XCTAssertEqual(req.aps["badge"] as? Int, 5)
            XCTAssertEqual(req.aps["sound"] as? String, "default")
            XCTAssertEqual(req.aps["category"] as? String, "NEW")
            XCTAssertEqual(req.aps["mutable-content"] as? Int, 1)
            XCTAssertEqual(req.aps["thread-id"] as? String, "t1")
            XCTAssertEqual(req.payload["key2"] as? Int, 2)
            let m = try XCTUnwrap(env.fcm.messages.first)
            XCTAssertEqual(m.data?["n"], "42")
            XCTAssertEqual(m.data?["flag"], "true")
            XCTAssertEqual(m.notification?["title"], "You got message")
            XCTAssertEqual(m.target, "fcm-token-1")
        }
    }

    func testPushTypesAndSizes() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (token1, token2)
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            // background -> priority 5 + content-available
            var r = try await client.push(
                #"{"notifications":[{"tokens":["\#(t1)"],"platform":1,"push_type":"background","content_available":true,"priority":"high","data":{"sync":"now"}}]}"#
            )
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            var req = try XCTUnwrap(env.apns.requests.last)
            XCTAssertEqual(req.priority, "5")
            XCTAssertEqual(req.pushType, "background")
            XCTAssertEqual(req.aps["content-available"] as? Int, 1)
            XCTAssertEqual(req.topic, "com.example.app", "ios.topic is the default topic")

            // voip -> <bundle>.voip, priority 10, a 5000-byte payload is sent.
            let big = String(repeating: "x", count: 5000 - 60)
            r = try await client.push(
                #"{"notifications":[{"tokens":["\#(t2)"],"platform":1,"push_type":"voip","topic":"com.example.app","data":{"call":"\#(big)"}}]}"#)
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            req = try XCTUnwrap(env.apns.requests.last)
            XCTAssertEqual(req.topic, "com.example.app.voip")
            XCTAssertEqual(req.priority, "10")
            XCTAssertGreaterThan(req.body.count, 4096)
            XCTAssertLessThanOrEqual(req.body.count, 5120)
            XCTAssertEqual(req.status, 200)

            // a 4097-byte alert is refused before any network call
            let before = env.apns.requestCount
            let pad = String(repeating: "y", count: 4097 - #"{"aps":{"alert":""}}"#.utf8.count)
            r = try await client.push(#"{"notifications":[{"tokens":["\#(t1)"],"platform":1,"message":"\#(pad)"}]}"#)
            let json = jsonObject(r.body)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1)
            XCTAssertEqual(logs.first?["error"] as? String, "PayloadTooLarge (4097 > 4096 bytes)")
            XCTAssertEqual(logs.first?["type"] as? String, "failed-push")
            XCTAssertEqual(env.apns.requestCount, before, "nothing may reach APNs")
        }
    }

    func testRetriesBackoffAndFeedback() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (token1, token2)
        let t3 = String(repeating: "c3", count: 32)
        env.apns.script(t1, [.serviceUnavailable(retryAfter: nil), .serviceUnavailable(retryAfter: nil), .ok])
        env.apns.script(t2, [.tooManyRequests(retryAfter: 2), .ok])
        env.apns.script(t3, [.unregistered])
        try await env.withGateway(environment: ["GORUSH_CORE_SYNC": "true"]) { client, gateway in
            let r = try await client.push(
                #"{"notifications":[{"notif_id":"n-1","tokens":["\#(t1)","\#(t2)","\#(t3)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["counts"] as? Int, 3)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, "\(r.body)")
            XCTAssertEqual(logs.first?["error"] as? String, "Unregistered")
            XCTAssertEqual(logs.first?["token"] as? String, TokenMask.mask(t3), "tokens are masked by default")
            XCTAssertEqual(logs.first?["notif_id"] as? String, "n-1")

            // 503, 503, 200: delivered exactly once, same apns-id on every attempt.
            let a = env.apns.requests(for: t1)
            XCTAssertEqual(a.map(\.status), [503, 503, 200])
            XCTAssertEqual(Set(a.compactMap(\.apnsID)).count, 1)
            // 429 with Retry-After: 2 -> the next try no sooner than 2 s later.
            let b = env.apns.requests(for: t2)
            XCTAssertEqual(b.map(\.status), [429, 200])
            XCTAssertGreaterThanOrEqual(b[1].receivedAt.timeIntervalSince(b[0].receivedAt), 2.0)
            // 410: no retry, exactly one feedback POST.
            XCTAssertEqual(env.apns.requests(for: t3).count, 1)
            let fed = await eventually { env.feedbackCount >= 1 }
            XCTAssertTrue(fed)
            try await Task.sleep(for: .milliseconds(300))
            XCTAssertEqual(env.feedbackCount, 1)
            let post = try XCTUnwrap(env.feedbackPosts.withLockedValue { $0.first })
            XCTAssertEqual(post.header("x-token"), "s3cret")
            XCTAssertEqual(post.header("content-type"), "application/json; charset=utf-8")
            let entry = jsonObject(post.bodyString)
            XCTAssertEqual(entry["type"] as? String, "failed-push")
            XCTAssertEqual(entry["platform"] as? String, "ios")
            XCTAssertEqual(entry["error"] as? String, "Unregistered")
            XCTAssertEqual(entry["token"] as? String, TokenMask.mask(t3))
            let stats = gateway.dispatcher.stats.snapshot
            XCTAssertEqual(stats.counts(.ios).pushSuccess, 2)
            XCTAssertEqual(stats.counts(.ios).pushError, 1)
        }
    }

    func testBadInputGets4xxJSONAndServerStaysUp() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            var r = try await client.push(#"{"notifications":[{"tokens":["a"],"platform":1"#)
            XCTAssertEqual(r.status, 400)
            XCTAssertEqual(jsonObject(r.body)["message"] as? String, "Missing notifications field.")
            r = try await client.push(#"{"notifications":[{"tokens":["a"],"platform":1,"badge":"five"}]}"#)
            XCTAssertEqual(r.status, 400)
            XCTAssertTrue((jsonObject(r.body)["detail"] as? String)?.contains("notifications[0].badge") == true, r.body)
            r = try await client.push(#"{"notifications":[]}"#)
            XCTAssertEqual(r.body, #"{"code":400,"message":"Notifications field is empty."}"#)
            r = try await client.push("")
            XCTAssertEqual(r.status, 400)
            r = try await client.push(#"{"notifications":[{"tokens":["a"],"platform":1,"data":{"aps":{"alert":"x"}}}]}"#)
            XCTAssertEqual(r.status, 400)
            XCTAssertTrue((jsonObject(r.body)["detail"] as? String)?.contains("data.aps") == true, r.body)
            // 10 MB body
            let huge = #"{"notifications":[{"tokens":["a"],"platform":1,"message":""# + String(repeating: "z", count: 10 * 1024 * 1024) + #""}]}"#
            r = try await client.push(huge)
            XCTAssertEqual(r.status, 413)
            XCTAssertNotNil(jsonObject(r.body)["message"])
            // 10,000 notifications in one request
            let one = #"{"tokens":["a"],"platform":1,"message":"m"}"#
            r = try await client.push(#"{"notifications":["# + Array(repeating: one, count: 10_000).joined(separator: ",") + "]}")
            XCTAssertEqual(r.status, 400)
            XCTAssertEqual(r.body, #"{"code":400,"message":"Number of notifications(10000) over limit(100)"}"#)
            // still up
            let health = try await client.execute(uri: "/healthz", method: .get) { Int($0.status.code) }
            XCTAssertEqual(health, 200)
            XCTAssertEqual(env.apns.requestCount, 0)
        }
    }

    func testDisabledPlatforms() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let t1 = token1
        try await env.withGateway(environment: ["PUSHGATE_ANDROID_ENABLED": "false", "PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["hw-1"],"platform":3,"message":"x"},{"tokens":["fcm-1"],"platform":"android","message":"x"},{"tokens":["\#(t1)"],"platform":"ios","message":"x"}]}"#
            )
            XCTAssertEqual(r.status, 200)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["counts"] as? Int, 1)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 2)
            XCTAssertEqual(logs[0]["platform"] as? String, "huawei")
            XCTAssertEqual(logs[0]["error"] as? String, "platform huawei is not enabled", "huawei.enabled is false by default (gorush's)")
            XCTAssertEqual(logs[1]["platform"] as? String, "android")
            XCTAssertTrue((logs[1]["error"] as? String)?.contains("not enabled") == true)
            XCTAssertEqual(env.apns.requests(for: t1).count, 1, "the iOS notification is still delivered")
        }
    }

    /// Three requests of 1,000 tokens: every send shares a few long-lived connections. (The pool's
    /// scaling is the state machine's tests; the figures at rate are the benchmarks'.)
    func testThousandsOfSendsOverFewConnections() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        // The ceiling is the test's (the pool opens connections on demand up to it): whatever the
        // machine's speed, every send shares at most these four long-lived connections.
        try await env.withGateway(environment: ["PUSHGATE_CORE_MAX_NOTIFICATION": "1000", "PUSHGATE_IOS_MAX_CONNECTIONS": "4"]) { client, _ in
            for batch in 0..<3 {
                let tokens = (0..<1000).map { String(format: "%064x", batch * 1000 + $0) }
                let body =
                    #"{"notifications":[{"tokens":["# + tokens.map { "\"\($0)\"" }.joined(separator: ",") + #"],"platform":1,"message":"load"}]}"#
                let r = try await client.push(body)
                XCTAssertEqual(r.body, #"{"counts":1000,"logs":[],"success":"ok"}"#)
            }
            let done = await eventually(timeout: 60) { env.apns.requestCount >= 3_000 }
            XCTAssertTrue(done, "only \(env.apns.requestCount) arrived")
            XCTAssertEqual(env.apns.requestCount, 3_000)
            XCTAssertLessThanOrEqual(env.apns.connectionsAccepted, 4, "sends must share a few long-lived connections")
        }
    }

    func testQueueFullAnswers503WithRetryAfter() async throws {
        // APNs holds its answers: deliveries stay pending; the queue holds 5.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        env.apns.setDefaultReply(.ok)
        try await env.withGateway(environment: ["PUSHGATE_QUEUE_MAX_PENDING": "5", "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": "1"]) { client, gateway in
            let tokens = (0..<5).map { String(format: "%064x", $0) }
            let body = #"{"notifications":[{"tokens":["# + tokens.map { "\"\($0)\"" }.joined(separator: ",") + #"],"platform":1,"message":"x"}]}"#
            // Fill the queue faster than one worker drains it.
            let full = try await client.pushUntil503(body, attempts: 20)
            XCTAssertNotNil(full, "queue never filled")
            XCTAssertEqual(full?.headers[.retryAfter], "1")
            XCTAssertEqual(full.map { jsonObject($0.body)["code"] as? Int } ?? nil, 503)
            // Earlier work is still delivered and the server is up.
            hold.release()
            let drained = await eventually(timeout: 20) { gateway.dispatcher.queue.pendingCount == 0 }
            XCTAssertTrue(drained)
            let r = try await client.push(body)
            XCTAssertEqual(r.status, 200)
        }
    }
}
