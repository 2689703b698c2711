import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import TestSupport
import WebPush
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Oversize fallback over real sockets: HTTP -> gateway -> TLS HTTP/2 mock APNs / FCM, and the
/// Web Push mock (which decrypts).
final class GatewayFallbackTests: XCTestCase {
    let token = String(repeating: "c3", count: 32)
    static let statement = String(repeating: "0123456789abcdef", count: 320)  // 5 KB of hex

    /// The issue's example (the statement-store backend's shape).
    func issueBody(notifID: String, fallback: Bool = true, fallbackData: String = "null") -> String {
        let fb =
            fallback
            ? #","fallback":{"content_available":true,"data":{"statement":{"data":\#(fallbackData),"topic":"ab","sender_pubkey":"cd"}}}"# : ""
        return #"""
            {"notifications":[{"notif_id":"\#(notifID)","platform":1,"tokens":["\#(token)"],"topic":"com.example.app","mutable_content":true,
             "alert":{"title":"New message"},"data":{"statement":{"data":"\#(Self.statement)","topic":"ab","sender_pubkey":"cd"}}\#(fb)}]}
            """#
    }

    func testIssueExampleSendsTheFallbackAndSaysSo() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let body = issueBody(notifID: "stmt-1")
        let token = self.token
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(body)
            XCTAssertEqual(r.status, 200, r.body)
            let json = jsonObject(r.body)
            XCTAssertEqual((json["logs"] as? [[String: Any]])?.count, 0, r.body)
            let fallbacks = try XCTUnwrap(json["fallbacks"] as? [[String: Any]], r.body)
            XCTAssertEqual(fallbacks.count, 1)
            let f = fallbacks[0]
            XCTAssertEqual(f["notif_id"] as? String, "stmt-1")
            XCTAssertEqual(f["platform"] as? String, "ios")
            XCTAssertEqual(f["limit"] as? Int, 4096)
            let full = try XCTUnwrap(f["payload_bytes"] as? Int)
            let small = try XCTUnwrap(f["fallback_bytes"] as? Int)
            XCTAssertGreaterThan(full, 4096)
            XCTAssertLessThanOrEqual(small, 4096)

            XCTAssertEqual(env.apns.requestCount, 1)
            let req = try XCTUnwrap(env.apns.requests(for: token).first)
            XCTAssertEqual(req.status, 200, "mock refused: \(env.apns.rejections)")
            XCTAssertEqual(req.body.count, small, "fallback_bytes is the size sent")
            XCTAssertEqual(req.aps["content-available"] as? Int, 1)
            XCTAssertEqual(req.aps["mutable-content"] as? Int, 1, "the notification's own members stay")
            XCTAssertEqual((req.aps["alert"] as? [String: Any])?["title"] as? String, "New message")
            let statement = try XCTUnwrap(req.payload["statement"] as? [String: Any])
            XCTAssertTrue(statement["data"] == nil || statement["data"] is NSNull, "the statement without its data")
            XCTAssertEqual(statement["topic"] as? String, "ab")
            XCTAssertEqual(statement["sender_pubkey"] as? String, "cd")

            let status = await statusJSON(client, "stmt-1")
            let ds = try XCTUnwrap(status["deliveries"] as? [[String: Any]], "\(status)")
            XCTAssertEqual(ds.first?["state"] as? String, "delivered")
            XCTAssertEqual(ds.first?["fallback"] as? [String: Int], ["payload_bytes": full, "limit": 4096, "fallback_bytes": small])

            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains(#"pushgate_payload_fallbacks_total{app="default",provider="ios"}"#), metrics.prefix(2000).description)

            // Async mode: the decision is made at ingest, so the answer says so too.
            let a = try await client.push(#"{"sync":false,"notifications":["# + body.dropFirst(#"{"notifications":["#.count))
            XCTAssertEqual((jsonObject(a.body)["fallbacks"] as? [[String: Any]])?.count, 1, a.body)
            let sent = await eventually { env.apns.requestCount == 2 }
            XCTAssertTrue(sent)
        }
    }

    func testWithoutFallbackOrWhenTheFallbackIsTooLargeNothingIsSent() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let plain = issueBody(notifID: "stmt-2", fallback: false)
        let still = issueBody(notifID: "stmt-3", fallbackData: #""\#(Self.statement)""#)
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            var r = try await client.push(plain)
            XCTAssertEqual(r.status, 200, r.body)
            var json = jsonObject(r.body)
            XCTAssertNil(json["fallbacks"], "no fallbacks member when none was used")
            var logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1)
            let error = try XCTUnwrap(logs.first?["error"] as? String)
            XCTAssertTrue(error.hasPrefix("PayloadTooLarge ("), error)
            XCTAssertTrue(error.hasSuffix(" > 4096 bytes)"), error)

            r = try await client.push(still)
            json = jsonObject(r.body)
            XCTAssertNil(json["fallbacks"])
            logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            let both = try XCTUnwrap(logs.first?["error"] as? String)
            let pattern = #/^PayloadTooLarge \((\d+) > 4096 bytes; fallback (\d+) > 4096 bytes\)$/#
            let m = try XCTUnwrap(both.wholeMatch(of: pattern), both)
            // The notification's size, then the fallback's (which adds content-available here).
            XCTAssertEqual(Int(m.2) ?? 0, (Int(m.1) ?? 0) + #","content-available":1"#.utf8.count, both)
            let status = await statusJSON(client, "stmt-3")
            let ds = try XCTUnwrap(status["deliveries"] as? [[String: Any]], "\(status)")
            XCTAssertEqual(ds.first?["reason"] as? String, both)
            XCTAssertNil(ds.first?["fallback"])
            XCTAssertEqual(env.apns.requestCount, 0, "nothing may reach APNs")
        }
    }

    /// VoIP's limit is 5120: a 5000-byte VoIP push is sent whole, its fallback unused.
    func testVoIPUnder5120NeedsNoFallback() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let big = String(repeating: "x", count: 5000 - 60)
        let t = token
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["\#(t)"],"platform":1,"push_type":"voip","data":{"call":"\#(big)"},"fallback":{"data":{"call":"short"}}}]}"#
            )
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            let req = try XCTUnwrap(env.apns.requests.last)
            XCTAssertGreaterThan(req.body.count, 4096)
            XCTAssertEqual(req.payload["call"] as? String, big)
            XCTAssertEqual(req.status, 200)
        }
    }

    func testFCMSendsTheFallback() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let big = String(repeating: "z", count: 5000)
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"notif_id":"fcm-fb","tokens":["fcm-token-1"],"platform":2,"title":"T","data":{"blob":"\#(big)"},"fallback":{"data":{"blob":"gone","more":1}}}]}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let f = try XCTUnwrap((jsonObject(r.body)["fallbacks"] as? [[String: Any]])?.first, r.body)
            XCTAssertEqual(f["platform"] as? String, "android")
            XCTAssertEqual(f["limit"] as? Int, 4096)
            XCTAssertGreaterThan(f["payload_bytes"] as? Int ?? 0, 5000)
            let m = try XCTUnwrap(env.fcm.messages.first)
            XCTAssertEqual(m.data, ["blob": "gone", "more": "1"])
            XCTAssertEqual(m.notification?["title"], "T")
            XCTAssertEqual(env.fcm.messages.count, 1)
        }
    }

    /// Web Push's limit is the 3993-byte plaintext; the mock decrypts what it receives.
    func testWebPushSendsTheFallback() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (sub, _) = env.webpush.makeSubscription(id: "browser-fb")
        let big = String(repeating: "w", count: 4000)
        let subJSON = #"{"endpoint":"\#(sub.endpoint)","keys":{"p256dh":"\#(sub.keys?.p256dh ?? "")","auth":"\#(sub.keys?.auth ?? "")"}}"#
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"webpush","subscriptions":[\#(subJSON)],"payload":"\#(big)","fallback":{"payload":"{\"sync\":\"fetch\"}"}}]}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let f = try XCTUnwrap((jsonObject(r.body)["fallbacks"] as? [[String: Any]])?.first, r.body)
            XCTAssertEqual(f["platform"] as? String, "webpush")
            XCTAssertEqual(f["payload_bytes"] as? Int, 4000)
            XCTAssertEqual(f["limit"] as? Int, 3993)
            XCTAssertEqual(f["fallback_bytes"] as? Int, #"{"sync":"fetch"}"#.utf8.count)
            let p = try XCTUnwrap(env.webpush.pushes(id: "browser-fb").first)
            XCTAssertTrue(p.encrypted)
            XCTAssertEqual(p.plaintextString, #"{"sync":"fetch"}"#)
        }
    }

    /// The durable SQLite engine keeps the sizes with the notification (`notifications.fallback`).
    func testSQLiteStatusShowsTheFallback() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let body = issueBody(notifID: "stmt-durable")
        let sqlite = ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/durable/q.sqlite"]
        try await env.withGateway(environment: sqlite) { client, _ in
            let r = try await client.push(body)
            XCTAssertEqual(r.status, 200, r.body)
            let f = try XCTUnwrap((jsonObject(r.body)["fallbacks"] as? [[String: Any]])?.first, r.body)
            let sent = await eventually { env.apns.requestCount == 1 }
            XCTAssertTrue(sent)
            _ = await eventually { (await statusJSON(client, "stmt-durable")["counts"] as? [String: Int])?["delivered"] == 1 }
            let status = await statusJSON(client, "stmt-durable")
            let ds = try XCTUnwrap(status["deliveries"] as? [[String: Any]], "\(status)")
            XCTAssertEqual(ds.first?["state"] as? String, "delivered")
            XCTAssertEqual(
                ds.first?["fallback"] as? [String: Int],
                ["payload_bytes": f["payload_bytes"] as? Int ?? -1, "limit": 4096, "fallback_bytes": f["fallback_bytes"] as? Int ?? -1])
            let req = try XCTUnwrap(env.apns.requests.first)
            XCTAssertEqual(req.aps["content-available"] as? Int, 1, "the stored fallback is what is sent")
        }
    }
}
