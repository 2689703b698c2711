import Foundation
import XCTest

@testable import PushgateCore

/// `fallback`: merged over the notification at the JSON level and decoded as a notification.
final class FallbackDecodingTests: XCTestCase {
    func parse(_ s: String) throws(RequestError) -> PushRequest {
        try RequestParser.parseChecked(Array(s.utf8), limits: RequestLimits.registered)
    }

    func assertRejected(_ body: String, detail: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            _ = try parse(body)
            XCTFail("expected a 400 for \(body)", file: file, line: line)
        } catch {
            XCTAssertEqual(error.status, 400, file: file, line: line)
            XCTAssertTrue(
                error.detail?.hasPrefix(detail) == true, "detail \(error.detail ?? "nil") does not start with \(detail)", file: file, line: line)
        }
    }

    static let statement = String(repeating: "ab", count: 2500)

    /// The issue's example: the fallback keeps the notification's targets and topic, replaces `data`
    /// whole and adds `content_available`; the notification's `alert` and `mutable_content` stay.
    func testIssueExampleMergesOverTheNotification() throws {
        let r = try parse(
            #"""
            {"notifications":[{"platform":1,"tokens":["t1","t2"],"topic":"com.example.app","mutable_content":true,
             "alert":{"title":"New message"},"data":{"statement":{"data":"\#(Self.statement)","topic":"ab","sender_pubkey":"cd"}},
             "fallback":{"content_available":true,"data":{"statement":{"data":null,"topic":"ab","sender_pubkey":"cd"}}}}]}
            """#)
        let n = r.notifications[0]
        let f = try XCTUnwrap(n.fallback?.notification)
        XCTAssertEqual(f.tokens, ["t1", "t2"])
        XCTAssertEqual(f.platform, .ios)
        XCTAssertEqual(f.topic, "com.example.app")
        XCTAssertEqual(f.contentAvailable, true)
        XCTAssertEqual(f.mutableContent, true)
        XCTAssertEqual(f.alert?.title, "New message")
        XCTAssertEqual(f.data?["statement"]?["data"], .null)
        XCTAssertEqual(f.data?["statement"]?["topic"], .string("ab"))
        XCTAssertNil(f.fallback)
        XCTAssertNil(n.contentAvailable, "the notification itself is unchanged")
        XCTAssertEqual(n.deliveryCount(n.registeredRules), 2, "a fallback adds no deliveries")
    }

    /// A member set to null removes the notification's; members match case-insensitively.
    func testNullRemovesAndNamesFold() throws {
        let r = try parse(
            #"{"notifications":[{"platform":1,"tokens":["t"],"message":"long","Badge":3,"sound":"x","fallback":{"message":null,"badge":1,"SOUND":null}}]}"#
        )
        let f = try XCTUnwrap(r.notifications[0].fallback?.notification)
        XCTAssertNil(f.message)
        XCTAssertEqual(f.badge, 1)
        XCTAssertNil(f.sound)
        XCTAssertEqual(r.notifications[0].badge, 3)
        XCTAssertEqual(try parse(#"{"notifications":[{"platform":1,"tokens":["t"],"fallback":null}]}"#).notifications[0].fallback, nil)
    }

    func testFallbackMustBeAnObject() {
        for v in ["1", "\"x\"", "[]", "true"] {
            assertRejected(
                #"{"notifications":[{"platform":1,"tokens":["t"],"fallback":\#(v)}]}"#, detail: "notifications[0].fallback: expected an object")
        }
    }

    func testMembersThatChangeTargetsOrIdentityAreRefused() {
        for (name, value) in [
            ("platform", "2"), ("tokens", #"["u"]"#), ("to", #""u""#), ("condition", #""'a' in topics""#), ("subscriptions", "[]"),
            ("notif_id", #""x""#), ("fallback", "{}"), ("dedup_key", #""k""#), ("coalesce_seconds", "5"), ("app_id", #""a""#),
            ("Tokens", "null"),
        ] {
            assertRejected(
                #"{"notifications":[{"platform":1,"tokens":["t"],"fallback":{"badge":1,"\#(name)":\#(value)}}]}"#,
                detail: "notifications[0].fallback.\(name.lowercased()): not allowed in a fallback")
        }
    }

    /// Every check of a notification applies inside the fallback, named under it.
    func testBadFieldsInsideTheFallbackNameTheFallback() {
        let cases: [(String, String)] = [
            (#"{"badge":"x"}"#, "notifications[1].fallback.badge"),
            (#"{"badge":1e19}"#, "notifications[1].fallback.badge"),
            (#"{"alert":{"summary-arg-count":-1}}"#, "notifications[1].fallback.alert.summary-arg-count"),
            (#"{"expiration":-1}"#, "notifications[1].fallback.expiration"),
            (#"{"data":[]}"#, "notifications[1].fallback.data"),
            (#"{"sound":7}"#, "notifications[1].fallback.sound"),
            (#"{"topic":"\#(String(repeating: "t", count: 2000))"}"#, "notifications[1].fallback.topic"),
        ]
        for (fallback, detail) in cases {
            assertRejected(
                #"{"notifications":[{"platform":1,"tokens":["t"]},{"platform":1,"tokens":["t"],"fallback":\#(fallback)}]}"#, detail: detail)
        }
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["t"],"fallback":{"android":{"ttl":1e19}}}]}"#,
            detail: "notifications[0].fallback.android.ttl")
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["t"],"fallback":{"time_to_live":99999999}}]}"#,
            detail: "notifications[0].fallback.time_to_live")
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["t"],"fallback":{"data":{"aps":{}}}}]}"#, detail: "notifications[0].fallback.data.aps")
        // The notification's own errors are named as its own, before the fallback is looked at.
        assertRejected(#"{"notifications":[{"platform":1,"tokens":["t"],"badge":"x","fallback":{"badge":1}}]}"#, detail: "notifications[0].badge")
    }

    /// Stored (durable queue): the fallback survives the Codable round trip, without a second copy of
    /// the targets in the body, and gets the notification's targets back.
    func testCodableRoundTripKeepsTheFallback() throws {
        let r = try parse(
            #"{"notifications":[{"platform":1,"tokens":["t1","t2"],"notif_id":"n1","message":"m","fallback":{"message":null,"content_available":true}}]}"#
        )
        let n = r.notifications[0]
        let body = try JSONEncoder().encode(n)
        let text = String(decoding: body, as: UTF8.self)
        XCTAssertEqual(text.components(separatedBy: "t2").count, 2, "tokens stored once: \(text)")
        let back = try JSONDecoder().decode(PushNotification.self, from: body)
        XCTAssertEqual(back, n)
        XCTAssertEqual(back.fallback?.notification.tokens, ["t1", "t2"])
        XCTAssertEqual(back.fallback?.notification.notifID, "n1")
        XCTAssertEqual(back.fallback?.notification.contentAvailable, true)
        // The fallback stored alone (what a queue keeps once it was chosen) round-trips as a notification.
        let f = try XCTUnwrap(n.fallback?.notification)
        XCTAssertEqual(try JSONDecoder().decode(PushNotification.self, from: try JSONEncoder().encode(f)), f)
    }

    func testPayloadTooLargeIsTyped() {
        let f = PushFailure.payloadTooLarge(size: 5000, limit: 4096)
        XCTAssertTrue(f.isPayloadTooLarge)
        XCTAssertEqual(f.size, 5000)
        XCTAssertEqual(f.limit, 4096)
        XCTAssertEqual(f.reason, "PayloadTooLarge (5000 > 4096 bytes)")
        XCTAssertFalse(PushFailure("PayloadTooLarge (5000 > 4096 bytes)").isPayloadTooLarge, "typed, not read from the text")
        XCTAssertEqual(
            PushFailure.payloadTooLarge(size: 5000, limit: 4096, fallbackSize: 4200, fallbackLimit: 4096).reason,
            "PayloadTooLarge (5000 > 4096 bytes; fallback 4200 > 4096 bytes)")
    }
}
