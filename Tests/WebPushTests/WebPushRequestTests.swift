import Foundation
import PushgateCore
import XCTest

@testable import MockProviders
@testable import WebPush

final class WebPushRequestTests: XCTestCase {
    func decode(_ json: String) throws -> PushNotification {
        try JSONDecoder().decode(PushNotification.self, from: Data(json.utf8))
    }

    func testPlaintextPayloadByteForByteElseTitleMessageData() throws {
        let n1 = try decode(#"{"platform":4,"payload":"{\"a\":1,  \"é\":\"x\"}","title":"ignored"}"#)
        XCTAssertEqual(WebPushRequestValidator.plaintext(of: n1), Array("{\"a\":1,  \"é\":\"x\"}".utf8))
        let n2 = try decode(#"{"platform":"webpush","title":"Hi","message":"New \"note\"","data":{"id":42,"k":"v"}}"#)
        XCTAssertEqual(
            String(decoding: WebPushRequestValidator.plaintext(of: n2), as: UTF8.self),
            #"{"title":"Hi","message":"New \"note\"","data":{"id":42,"k":"v"}}"#)
        let n3 = try decode(#"{"platform":5,"message":"only"}"#)
        XCTAssertEqual(String(decoding: WebPushRequestValidator.plaintext(of: n3), as: UTF8.self), #"{"message":"only"}"#)
    }

    func testHeadersFromFields() throws {
        var n = PushNotification(platform: .webpush)
        var p = try WebPushRequestValidator.prepare(n)
        XCTAssertEqual(p.ttlSeconds(), 86_400)
        XCTAssertNil(p.urgency)
        XCTAssertNil(p.topic)
        XCTAssertEqual(try WebPushRequestValidator.prepare(n, defaultTTL: 60).ttlSeconds(), 60)
        n.timeToLive = 300
        n.expiration = 10  // time_to_live wins
        n.priority = "high"
        n.collapseID = "chat-42_A"
        p = try WebPushRequestValidator.prepare(n)
        XCTAssertEqual(p.ttlSeconds(), 300)
        XCTAssertEqual(p.urgency, "high")
        XCTAssertEqual(p.topic, "chat-42_A")
        n.timeToLive = nil
        XCTAssertEqual(try WebPushRequestValidator.prepare(n).ttlSeconds(), 10)
        // An absolute expiration (UNIX time, like APNs') counts down.
        let now = Date()
        n.expiration = Int64(now.timeIntervalSince1970) + 120
        XCTAssertEqual(try WebPushRequestValidator.prepare(n).ttlSeconds(now: now), 120)
        XCTAssertEqual(try WebPushRequestValidator.prepare(n).ttlSeconds(now: now.addingTimeInterval(500)), 0)
        n.urgency = "Very-Low"
        XCTAssertEqual(try WebPushRequestValidator.prepare(n).urgency, "very-low")
        n.urgency = nil
        n.priority = "normal"
        XCTAssertEqual(try WebPushRequestValidator.prepare(n).urgency, "normal")
    }

    func testValidatorNamesTheField() throws {
        var n = PushNotification(platform: .webpush)
        n.subscriptions = [
            WebPushSubscription(
                endpoint: "https://push.example.com/x",
                keys: .init(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret))
        ]
        XCTAssertNil(WebPushRequestValidator.validate(n))
        n.collapseID = String(repeating: "a", count: 33)
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("collapse_id:") == true)
        n.collapseID = "has space"
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("collapse_id:") == true)
        n.collapseID = "a+b/c="
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("collapse_id:") == true)
        XCTAssertThrowsError(try WebPushRequestValidator.prepare(n)) { XCTAssertTrue(($0 as? PushFailure)?.reason.hasPrefix("collapse_id:") == true) }
        n.collapseID = String(repeating: "a", count: 32)
        XCTAssertNil(WebPushRequestValidator.validate(n))
        n.urgency = "urgent"
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("urgency:") == true)
        n.urgency = nil
        n.timeToLive = -1
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("time_to_live:") == true)
        n.timeToLive = nil
        n.subscriptions![0].keys!.auth = "AAAA"
        XCTAssertEqual(WebPushRequestValidator.validate(n), "subscriptions[0].keys.auth: expected 16 bytes, got 3")
        n.subscriptions![0].keys = nil
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("subscriptions[0].keys:") == true)
        n.subscriptions![0] = WebPushSubscription(endpoint: "nope", keys: nil)
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("subscriptions[0].endpoint:") == true)
        n.subscriptions = nil
        n.tokens = ["https://push.example.com/x"]
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("tokens:") == true)
        // UnifiedPush takes bare endpoints and key-less subscriptions.
        n.platform = .unifiedpush
        XCTAssertNil(WebPushRequestValidator.validate(n))
        n.tokens = ["ntfy.sh/topic"]
        XCTAssertEqual(WebPushRequestValidator.validate(n), "tokens[0]: not an absolute http(s) endpoint URL")
        // Other platforms are not its business.
        var ios = PushNotification(platform: .ios, tokens: ["x"])
        ios.collapseID = String(repeating: "z", count: 64)
        XCTAssertNil(WebPushRequestValidator.validate(ios))
    }

    func testDeclarativeRendering() throws {
        let n = try decode(
            #"{"platform":"webpush","declarative":true,"title":"Hi \"you\"","message":"Body","navigate":"https://a.example/x?y=1","#
                + #""collapse_id":"tag-1","silent":false,"badge":0,"data":{"k":"v"}}"#)
        let p = try WebPushRequestValidator.prepare(n)
        XCTAssertEqual(
            String(decoding: p.plaintext, as: UTF8.self),
            #"{"web_push":8030,"notification":{"title":"Hi \"you\"","body":"Body","navigate":"https://a.example/x?y=1","tag":"tag-1","#
                + #""silent":false,"data":{"k":"v"}},"app_badge":0}"#)
        XCTAssertEqual(p.topic, "tag-1", "collapse_id is still the Topic header")
        // Only what is set; navigate from data.url.
        let m = try decode(#"{"platform":4,"declarative":true,"title":"T","data":{"url":"http://[::1]:8080/p"}}"#)
        XCTAssertEqual(
            String(decoding: try WebPushRequestValidator.prepare(m).plaintext, as: UTF8.self),
            #"{"web_push":8030,"notification":{"title":"T","navigate":"http://[::1]:8080/p","data":{"url":"http://[::1]:8080/p"}}}"#)
        // The mock's strict reader accepts both.
        XCTAssertEqual(MockWebPush.declarativeVerdict(p.plaintext)?.message?.appBadge, 0)
        XCTAssertEqual(MockWebPush.declarativeVerdict(try WebPushRequestValidator.prepare(m).plaintext)?.message?.title, "T")
    }

    func testDeclarativeChoiceAndChecks() throws {
        var n = PushNotification(platform: .webpush)
        n.title = "T"
        n.message = "m"
        // No "declarative": the webpush.declarative default decides; payload always means plain.
        XCTAssertFalse(WebPushRequestValidator.isDeclarative(n, byDefault: false))
        XCTAssertTrue(WebPushRequestValidator.isDeclarative(n, byDefault: true))
        XCTAssertThrowsError(try WebPushRequestValidator.prepare(n, declarativeDefault: true)) {
            XCTAssertTrue(($0 as? PushFailure)?.reason.hasPrefix("navigate: required") == true, "\($0)")
        }
        XCTAssertNil(WebPushRequestValidator.validate(n), "at ingest the default is unknown")
        n.payload = "raw"
        XCTAssertFalse(WebPushRequestValidator.isDeclarative(n, byDefault: true))
        XCTAssertEqual(try WebPushRequestValidator.prepare(n, declarativeDefault: true).plaintext, Array("raw".utf8))
        n.payload = nil
        n.declarative = false
        XCTAssertFalse(WebPushRequestValidator.isDeclarative(n, byDefault: true))
        var up = PushNotification(platform: .unifiedpush, tokens: ["https://ntfy.example.com/up"])
        up.declarative = true
        XCTAssertFalse(WebPushRequestValidator.isDeclarative(up, byDefault: true), "never UnifiedPush")

        n.declarative = true
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("navigate: required") == true)
        for good in [
            "https://a.example", "HTTPS://A.EXAMPLE/x", "http://127.0.0.1:8080/", "https://[2001:db8::1]/p#frag",
            "https://bücher.example/straße?q=ü", "https://a.example:443?x",
        ] {
            n.navigate = good
            XCTAssertNil(WebPushRequestValidator.validate(n), good)
        }
        for bad in [
            "", "/inbox", "inbox", "//a.example/x", "javascript:alert(1)", "ftp://a.example/", "https://", "https:///x", "https://u@a.example/",
            "https://a.example:0/", "https://a.example:65536/", "https://a.example:/", "https://a.example:8o/", "https://a b.example/",
            "https://a.example/\u{7F}", "https://[::1/", "https://[]/", "https://[::1]x/", "https://a\\b.example/", "mailto:x@a.example",
        ] {
            n.navigate = bad
            XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("navigate: must be an absolute http or https URL") == true, bad)
            XCTAssertThrowsError(try WebPushRequestValidator.prepare(n), bad)
        }
        n.navigate = "https://a.example/"
        n.badge = -1
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("badge: must be 0 or more") == true)
        n.badge = Int(Int32.max)
        XCTAssertNil(WebPushRequestValidator.validate(n))
        n.title = ""
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("title: required") == true)
        n.title = "T"
        // A fallback is checked as the notification it becomes.
        var f = n
        f.navigate = "nope"
        n.fallback = FallbackNotification(f)
        XCTAssertTrue(WebPushRequestValidator.validate(n)?.hasPrefix("fallback.navigate: must be") == true)
        // An oversize declarative message is PayloadTooLarge (a fallback can then be sent).
        n.fallback = nil
        n.message = String(repeating: "x", count: 4000)
        XCTAssertThrowsError(try WebPushRequestValidator.prepare(n)) { XCTAssertTrue(($0 as? PushFailure)?.isPayloadTooLarge == true) }
    }

    /// The mock's reader refuses what is not a declarative push message (its checks can fail).
    func testMockDeclarativeVerdict() {
        func verdict(_ s: String) -> DeclarativeVerdict? { MockWebPush.declarativeVerdict(Array(s.utf8)) }
        XCTAssertNil(verdict(#"{"title":"plain"}"#))
        XCTAssertNil(verdict("not json \"web_push\""))
        XCTAssertNotNil(verdict(#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/"}}"#)?.message)
        let bad: [(String, String)] = [
            (#"{"web_push":"8030","notification":{"title":"T","navigate":"https://a.example/"}}"#, "web_push"),
            (#"{"web_push":9001,"notification":{"title":"T","navigate":"https://a.example/"}}"#, "web_push"),
            (#"{"web_push":8030}"#, "notification"),
            (#"{"web_push":8030,"notification":[]}"#, "notification"),
            (#"{"web_push":8030,"notification":{"navigate":"https://a.example/"}}"#, "notification.title"),
            (#"{"web_push":8030,"notification":{"title":"","navigate":"https://a.example/"}}"#, "notification.title"),
            (#"{"web_push":8030,"notification":{"title":"T"}}"#, "notification.navigate"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"/relative"}}"#, "notification.navigate"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/","dir":"up"}}"#, "notification.dir"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/","silent":1}}"#, "notification.silent"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/","body":2}}"#, "notification.body"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/"},"app_badge":-1}"#, "app_badge"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/"},"app_badge":"3"}"#, "app_badge"),
            (#"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/"},"mutable":"yes"}"#, "mutable"),
            (
                #"{"web_push":8030,"notification":{"title":"T","navigate":"https://a.example/","actions":[{"action":"a","title":"t"}]}}"#,
                "notification.actions[0]"
            ),
        ]
        for (doc, member) in bad {
            guard case .invalid(let why)? = verdict(doc) else {
                XCTFail("\(doc) was not refused")
                continue
            }
            XCTAssertTrue(why.hasPrefix(member + ":"), "\(doc): \(why)")
        }
    }

    func testSizeLimits() throws {
        var n = PushNotification(platform: .webpush)
        n.payload = String(repeating: "x", count: 3993)
        XCTAssertNoThrow(try WebPushRequestValidator.prepare(n))
        n.payload = String(repeating: "x", count: 3994)
        XCTAssertThrowsError(try WebPushRequestValidator.prepare(n)) { e in
            XCTAssertEqual(e as? PushFailure, .payloadTooLarge(size: 3994, limit: 3993))
            XCTAssertEqual("\(e)", "PayloadTooLarge (3994 > 3993 bytes)")
        }
        // Legacy UnifiedPush (bare endpoints only): 4096.
        var up = PushNotification(platform: .unifiedpush, tokens: ["https://ntfy.example.com/upX"])
        up.payload = String(repeating: "x", count: 4096)
        XCTAssertNoThrow(try WebPushRequestValidator.prepare(up))
        up.payload = String(repeating: "x", count: 4097)
        XCTAssertThrowsError(try WebPushRequestValidator.prepare(up)) {
            XCTAssertEqual($0 as? PushFailure, .payloadTooLarge(size: 4097, limit: 4096))
        }
        up.payload = String(repeating: "x", count: 4000)
        up.subscriptions = [
            WebPushSubscription(endpoint: "https://ntfy.example.com/upY", keys: .init(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret))
        ]
        XCTAssertThrowsError(try WebPushRequestValidator.prepare(up)) {
            XCTAssertEqual($0 as? PushFailure, .payloadTooLarge(size: 4000, limit: 3993))
        }
    }

    func testResponseClassification() {
        func r(_ status: Int, _ headers: [(String, String)] = [], _ body: String = "") -> SendOutcome {
            WebPushEngine.classify(WebPushHTTPResponse(status: status, headers: headers, body: Array(body.utf8)))
        }
        XCTAssertEqual(r(201, [("Location", "https://push.example.com/m/1")]), .delivered(providerID: "https://push.example.com/m/1"))
        XCTAssertEqual(r(200, [], "{\"id\":\"x\"}"), .delivered(providerID: nil))
        XCTAssertEqual(r(202), .delivered(providerID: nil))
        XCTAssertEqual(r(410, [], "gone"), .tokenDead(reason: "SubscriptionGone: gone", status: 410))
        XCTAssertEqual(r(404), .tokenDead(reason: "SubscriptionNotFound", status: 404))
        XCTAssertEqual(r(413, [], "too big"), .permanent(reason: "PayloadTooLarge: too big", status: 413))
        XCTAssertEqual(r(400, [], "bad TTL\n"), .permanent(reason: "BadRequest: bad TTL", status: 400))
        XCTAssertEqual(r(403), .permanent(reason: "Forbidden (VAPID)", status: 403))
        XCTAssertEqual(r(429, [("retry-after", "30")]), .transient(reason: "TooManyRequests", status: 429, retryAfter: 30))
        XCTAssertEqual(r(507, [], "no active subscriber"), .transient(reason: "ServerError 507: no active subscriber", status: 507, retryAfter: nil))
        XCTAssertEqual(r(503, [("Retry-After", "5")]), .transient(reason: "ServerError 503", status: 503, retryAfter: 5))
        XCTAssertEqual(
            r(301, [("location", "https://elsewhere/")]), .permanent(reason: "RedirectNotFollowed: 301 to https://elsewhere/", status: 301))
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        XCTAssertEqual(RetryAfter.parse("Tue, 14 Nov 2023 22:13:50 GMT", now: now), 30)  // now = 22:13:20 GMT
        XCTAssertNil(RetryAfter.parse("soon"))
    }
}
