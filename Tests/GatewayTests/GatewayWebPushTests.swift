import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

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

    @Sendable static func subJSON(_ s: WebPushSubscription) -> String {
        #"{"endpoint":"\#(s.endpoint)","keys":{"p256dh":"\#(s.keys?.p256dh ?? "")","auth":"\#(s.keys?.auth ?? "")"}}"#
    }

    /// `"declarative": true` over real sockets: the mock decrypts a declarative push message with the
    /// notification's title, body, navigate URL, tag, silent, data and app badge; an oversize one is sent
    /// as its (declarative) fallback; a plain notification beside them keeps the plain payload.
    func testDeclarativeWebPushEndToEnd() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (safari, _) = env.webpush.makeSubscription(id: "safari-1")
        let (big, _) = env.webpush.makeSubscription(id: "safari-big")
        let (chrome, _) = env.webpush.makeSubscription(id: "chrome-1")
        let blob = String(repeating: "x", count: 4000)
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"""
                {"notifications":[
                  {"platform":"webpush","subscriptions":[\#(Self.subJSON(safari))],"declarative":true,"title":"New message",
                   "message":"Ada: \"are you coming?\"","navigate":"https://chat.example/inbox/42?from=push","badge":3,
                   "collapse_id":"chat-42","silent":true,"data":{"id":42,"url":"https://ignored.example/"},"time_to_live":60},
                  {"platform":4,"subscriptions":[\#(Self.subJSON(big))],"declarative":true,"title":"Big",
                   "data":{"url":"https://chat.example/big","blob":"\#(blob)"},"fallback":{"data":{"url":"https://chat.example/big"}}},
                  {"platform":"webpush","subscriptions":[\#(Self.subJSON(chrome))],"title":"Plain","message":"m","data":{"url":"/inbox"}}
                ]}
                """#)
            XCTAssertEqual(r.status, 200, r.body)
            let json = jsonObject(r.body)
            XCTAssertEqual((json["logs"] as? [Any])?.count, 0, r.body)
            XCTAssertEqual((json["fallbacks"] as? [Any])?.count, 1, "the oversize notification went out as its fallback: \(r.body)")

            let p = try XCTUnwrap(env.webpush.pushes(id: "safari-1").first)
            XCTAssertTrue(p.encrypted)
            XCTAssertEqual(p.topic, "chat-42")
            XCTAssertEqual(p.ttl, 60)
            let m = try XCTUnwrap(p.declarative?.message, "\(String(describing: p.declarative)): \(p.plaintextString)")
            XCTAssertEqual(m.title, "New message")
            XCTAssertEqual(m.body, "Ada: \"are you coming?\"")
            XCTAssertEqual(m.navigate, "https://chat.example/inbox/42?from=push", "navigate wins over data.url")
            XCTAssertEqual(m.tag, "chat-42")
            XCTAssertEqual(m.silent, true)
            XCTAssertEqual(m.appBadge, 3)
            XCTAssertNil(m.mutable)
            XCTAssertEqual(m.data?["id"], .int(42))
            // The document itself, read independently of the mock's reader.
            let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(p.plaintext)) as? [String: Any])
            XCTAssertEqual(doc["web_push"] as? Int, 8030)
            XCTAssertEqual(doc["app_badge"] as? Int, 3)
            let notification = try XCTUnwrap(doc["notification"] as? [String: Any])
            XCTAssertEqual(notification["title"] as? String, "New message")
            XCTAssertEqual(notification["navigate"] as? String, "https://chat.example/inbox/42?from=push")
            XCTAssertNil(notification["app_badge"], "the app badge is a top-level member")

            let b = try XCTUnwrap(env.webpush.pushes(id: "safari-big").first)
            let bm = try XCTUnwrap(b.declarative?.message, b.plaintextString)
            XCTAssertEqual(bm.navigate, "https://chat.example/big", "navigate from data.url")
            XCTAssertEqual(bm.title, "Big")
            XCTAssertNil(bm.data?["blob"], "the fallback's data replaced the notification's")
            XCTAssertLessThanOrEqual(b.plaintext.count, 3993)

            let c = try XCTUnwrap(env.webpush.pushes(id: "chrome-1").first)
            XCTAssertNil(c.declarative)
            XCTAssertEqual(c.plaintextString, #"{"title":"Plain","message":"m","data":{"url":"/inbox"}}"#)
            XCTAssertEqual(env.webpush.declarativeProblems, [])
        }
    }

    /// Bad declarative fields answer 400 naming the field, before anything is sent.
    func testDeclarativeWebPushBadFieldsAnswer400() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (sub, _) = env.webpush.makeSubscription(id: "s-1")
        let target = #""subscriptions":[\#(Self.subJSON(sub))]"#
        let legacy = env.webpush.endpoint(id: "up-1")
        let cases: [(String, String)] = [
            (#"{"platform":4,\#(target),"declarative":true,"title":"T"}"#, "notifications[0].navigate: required"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"not a url"}"#, "notifications[0].navigate: must be"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"/inbox"}"#, "notifications[0].navigate: must be"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"javascript:alert(1)"}"#, "notifications[0].navigate: must be"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://u:p@a.example/"}"#, "notifications[0].navigate: must be"),
            (
                #"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://a.example:99999/"}"#,
                "notifications[0].navigate: must be"
            ),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://a.example/\ta"}"#, "notifications[0].navigate: must be"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":42}"#, "notifications[0].navigate: expected a string"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","data":{"url":42}}"#, "notifications[0].data.url: must be a string"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"T","data":{"url":"/inbox"}}"#, "notifications[0].data.url: must be"),
            (
                #"{"platform":4,\#(target),"declarative":"yes","title":"T","navigate":"https://a.example/"}"#,
                "notifications[0].declarative: expected a boolean"
            ),
            (
                #"{"platform":4,\#(target),"declarative":1,"title":"T","navigate":"https://a.example/"}"#,
                "notifications[0].declarative: expected a boolean"
            ),
            (#"{"platform":4,\#(target),"declarative":true,"navigate":"https://a.example/"}"#, "notifications[0].title: required"),
            (#"{"platform":4,\#(target),"declarative":true,"title":"","navigate":"https://a.example/"}"#, "notifications[0].title: required"),
            (
                #"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://a.example/","badge":-1}"#,
                "notifications[0].badge: must be 0 or more"
            ),
            (
                #"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://a.example/","silent":"no"}"#,
                "notifications[0].silent: expected a boolean"
            ),
            (
                #"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://a.example/","payload":"x"}"#,
                "notifications[0].payload: not with"
            ),
            (
                #"{"platform":4,\#(target),"declarative":false,"title":"T","navigate":"https://a.example/"}"#,
                "notifications[0].navigate: only for a declarative"
            ),
            (#"{"platform":4,\#(target),"payload":"x","silent":true}"#, "notifications[0].silent: only for a declarative"),
            (#"{"platform":4,\#(target),"title":"T","navigate":"ftp://a.example/"}"#, "notifications[0].navigate: must be"),
            (
                #"{"platform":4,\#(target),"declarative":true,"title":"T","navigate":"https://a.example/","fallback":{"navigate":"javascript:x"}}"#,
                "notifications[0].fallback.navigate: must be"
            ),
            (
                #"{"platform":1,"tokens":["\#(String(repeating: "ab", count: 32))"],"declarative":true}"#,
                "notifications[0].declarative: only for platform webpush"
            ),
            (#"{"platform":2,"tokens":["fcm-token"],"message":"m","silent":true}"#, "notifications[0].silent: only for platform webpush"),
            (
                #"{"platform":3,"tokens":["hms-token"],"message":"m","navigate":"https://a.example/"}"#,
                "notifications[0].navigate: only for platform webpush"
            ),
            (#"{"platform":5,"tokens":["\#(legacy)"],"message":"m","declarative":false}"#, "notifications[0].declarative: only for platform webpush"),
        ]
        try await env.withGateway { client, _ in
            for (notification, detail) in cases {
                let r = try await client.push(#"{"notifications":[\#(notification)]}"#)
                XCTAssertEqual(r.status, 400, "\(notification): \(r.body)")
                let d = jsonObject(r.body)["detail"] as? String ?? ""
                XCTAssertTrue(d.hasPrefix(detail), "\(notification): detail \(d) does not start with \(detail)")
            }
            // Without "declarative" and with webpush.declarative off, navigate would do nothing: the
            // delivery fails saying so (the key is the app's, known when sending).
            let r = try await client.push(#"{"notifications":[{"platform":4,\#(target),"title":"T","navigate":"https://a.example/"}],"sync":true}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = jsonObject(r.body)["logs"] as? [[String: Any]] ?? []
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.hasPrefix("navigate: only for a declarative Web Push message") == true, r.body)
        }
        XCTAssertEqual(env.webpush.requestCount, 0, "nothing was sent")
    }

    /// `webpush.declarative: true` makes Web Push notifications without "declarative" or "payload"
    /// declarative; one without a navigate URL fails its delivery saying why; UnifiedPush is unaffected.
    func testWebPushDeclarativeConfigDefault() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let subs = (1...4).map { env.webpush.makeSubscription(id: "d-\($0)").0 }
        let legacy = env.webpush.endpoint(id: "up-d")
        try await env.withGateway(environment: ["PUSHGATE_WEBPUSH_DECLARATIVE": "true"]) { client, _ in
            let r = try await client.push(
                #"""
                {"notifications":[
                  {"platform":4,"subscriptions":[\#(Self.subJSON(subs[0]))],"title":"T","message":"m","data":{"url":"https://a.example/x"}},
                  {"platform":4,"subscriptions":[\#(Self.subJSON(subs[1]))],"payload":"raw bytes"},
                  {"platform":4,"subscriptions":[\#(Self.subJSON(subs[2]))],"title":"no link"},
                  {"platform":4,"subscriptions":[\#(Self.subJSON(subs[3]))],"declarative":false,"title":"T","message":"m"},
                  {"platform":5,"tokens":["\#(legacy)"],"message":"wake"}
                ],"sync":true}
                """#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = jsonObject(r.body)["logs"] as? [[String: Any]] ?? []
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertTrue((logs.first?["error"] as? String)?.hasPrefix("navigate: required for a declarative Web Push message") == true, r.body)
            XCTAssertEqual(env.webpush.pushes(id: "d-1").first?.declarative?.message?.navigate, "https://a.example/x")
            XCTAssertEqual(env.webpush.pushes(id: "d-1").first?.declarative?.message?.body, "m")
            XCTAssertEqual(env.webpush.pushes(id: "d-2").first?.plaintextString, "raw bytes")
            XCTAssertEqual(env.webpush.pushes(id: "d-3").count, 0)
            XCTAssertEqual(env.webpush.pushes(id: "d-4").first?.plaintextString, #"{"title":"T","message":"m"}"#)
            XCTAssertEqual(env.webpush.pushes(id: "up-d").first?.plaintextString, #"{"message":"wake"}"#)
        }
    }
}
