import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import TestSupport
import XCTest

@testable import Server

/// End to end: HTTP client -> Pushgate -> RFC 8291 encryption + VAPID -> mock push service (TLS).
final class GatewayWebPushTests: XCTestCase {
    func testWebPushAndUnifiedPushEndToEnd() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (sub, _) = env.webpush.makeSubscription(id: "browser-1")
        let (gone, _) = env.webpush.makeSubscription(id: "gone-1")
        let (busy, _) = env.webpush.makeSubscription(id: "busy-1")
        env.webpush.script(id: "gone-1", replies: [.gone])
        env.webpush.script(id: "busy-1", replies: [.tooManyRequests(retryAfter: 2), .created])
        let legacy = env.webpush.endpoint(id: "up-legacy-1")
        @Sendable func subJSON(_ s: WebPushSubscription) -> String {
            #"{"endpoint":"\#(s.endpoint)","keys":{"p256dh":"\#(s.keys!.p256dh)","auth":"\#(s.keys!.auth)"}}"#
        }
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"""
                {"notifications":[
                  {"platform":"webpush","subscriptions":[\#(subJSON(sub)),\#(subJSON(gone)),\#(subJSON(busy))],"payload":"{\"sync\":\"now\"}","time_to_live":600,"priority":"high","collapse_id":"sync"},
                  {"platform":5,"tokens":["\#(legacy)"],"message":"wake up"}
                ]}
                """#)
            XCTAssertEqual(r.status, 200, r.body)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["counts"] as? Int, 4)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertEqual(logs.first?["platform"] as? String, "webpush")

            let p = try XCTUnwrap(env.webpush.pushes(id: "browser-1").first)
            XCTAssertTrue(p.encrypted)
            XCTAssertEqual(p.plaintextString, #"{"sync":"now"}"#, "the payload is sent byte for byte")
            XCTAssertEqual(p.ttl, 600)
            XCTAssertEqual(p.urgency, "high")
            XCTAssertEqual(p.topic, "sync")
            XCTAssertEqual(p.vapidKey, env.vapid.publicKeyBase64URL)
            XCTAssertEqual(p.vapidAudience, env.webpush.baseURL)
            XCTAssertEqual(env.webpush.pushes(id: "gone-1").count, 1, "410 is never retried")
            let b = env.webpush.pushes(id: "busy-1")
            XCTAssertEqual(b.count, 2)
            if b.count == 2 { XCTAssertGreaterThanOrEqual(b[1].receivedAt.timeIntervalSince(b[0].receivedAt), 2.0) }
            let l = try XCTUnwrap(env.webpush.pushes(id: "up-legacy-1").first)
            XCTAssertFalse(l.encrypted)
            XCTAssertEqual(l.plaintextString, #"{"message":"wake up"}"#)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "one feedback POST for the gone subscription")
        }
    }

    func testLoopbackEndpointRefusedUnlessAllowed() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (sub, _) = env.webpush.makeSubscription(id: "b-1")
        let body =
            #"{"notifications":[{"platform":4,"subscriptions":[{"endpoint":"\#(sub.endpoint)","keys":{"p256dh":"\#(sub.keys!.p256dh)","auth":"\#(sub.keys!.auth)"}}],"message":"hi"}],"sync":true}"#
        try await env.withGateway(environment: ["PUSHGATE_WEBPUSH_ALLOW_PRIVATE_ENDPOINTS": "false"]) { client, _ in
            let r = try await client.push(body)
            let logs = jsonObject(r.body)["logs"] as? [[String: Any]] ?? []
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("loopback") == true, r.body)
            XCTAssertEqual(env.webpush.requestCount, 0, "nothing is sent to a refused endpoint")
            // A bad Topic is a 400 naming the field.
            let bad = try await client.push(
                #"{"notifications":[{"platform":4,"subscriptions":[{"endpoint":"https://push.example.com/x","keys":{"p256dh":"\#(sub.keys!.p256dh)","auth":"\#(sub.keys!.auth)"}}],"collapse_id":"not valid!"}]}"#
            )
            XCTAssertEqual(bad.status, 400)
            XCTAssertTrue((jsonObject(bad.body)["detail"] as? String)?.contains("collapse_id") == true, bad.body)
        }
    }
}
