import Foundation
import PushgateCore
import XCTest

@testable import FCM

final class FCMMappingTests: XCTestCase {
    func body(_ n: PushNotification, _ target: PushTarget = .token("token-1")) throws -> [String: Any] {
        let prepared = try FCMMessageMapper.prepare(n)
        let bytes = try XCTUnwrap(prepared.body(for: target))
        return jsonObject(bytes)
    }

    func message(_ n: PushNotification, _ target: PushTarget = .token("token-1")) throws -> [String: Any] {
        try XCTUnwrap(try body(n, target)["message"] as? [String: Any])
    }

    func testGorushAndroidReadmeBody() throws {
        let n = try decodeNotification(
            """
            {"tokens":["token-1"],"platform":2,"title":"Hello","message":"Hello World Android!","image":"https://example.com/a.png",
             "priority":"high","data":{"key":"value","n":42,"f":1.5,"b":true,"o":{"x":[1,"y"]},"nil":null}}
            """)
        let m = try message(n)
        XCTAssertEqual(m["token"] as? String, "token-1")
        XCTAssertEqual(
            m["notification"] as? [String: String], ["title": "Hello", "body": "Hello World Android!", "image": "https://example.com/a.png"])
        let data = try XCTUnwrap(m["data"] as? [String: String], "data values must all be strings: \(m["data"] ?? "nil")")
        XCTAssertEqual(data["key"], "value")
        XCTAssertEqual(data["n"], "42")
        XCTAssertEqual(data["f"], "1.5")
        XCTAssertEqual(data["b"], "true")
        XCTAssertEqual(data["o"], "{\"x\":[1,\"y\"]}")
        XCTAssertEqual(data["nil"], "null")
        XCTAssertEqual((m["android"] as? [String: Any])?["priority"] as? String, "HIGH")
        XCTAssertNil(try body(n)["validate_only"])
    }

    /// gorush's priority is any string: APNs' "10"/"5" map too, a value FCM does not know is left out
    /// (FCM would refuse the whole message with INVALID_ARGUMENT).
    func testPriorityStringsAsGorushTakesThem() throws {
        for (given, sent) in [("10", "HIGH"), ("5", "NORMAL"), ("High", "HIGH"), ("urgent", nil), ("", nil)] as [(String, String?)] {
            var n = PushNotification(platform: .android, tokens: ["t"])
            n.message = "m"
            n.priority = given
            let android = try message(n)["android"] as? [String: Any]
            XCTAssertEqual(android?["priority"] as? String, sent, given)
        }
    }

    func testTokenIsSplicedFirstAndEscaped() throws {
        let prepared = try FCMMessageMapper.prepare(notification { $0.message = "hi" })
        let a = String(decoding: try XCTUnwrap(prepared.body(for: .token("abc"))), as: UTF8.self)
        XCTAssertEqual(a, "{\"message\":{\"token\":\"abc\",\"notification\":{\"body\":\"hi\"}}}")
        let b = try XCTUnwrap(prepared.body(for: .token("a\"b")))
        XCTAssertEqual((jsonObject(b)["message"] as? [String: Any])?["token"] as? String, "a\"b")
        XCTAssertNil(prepared.body(for: .subscription(.init(endpoint: "https://x", keys: nil))))
    }

    func testNormalPriorityTTLAndPassThroughWins() throws {
        let n = try decodeNotification(
            """
            {"tokens":["t"],"platform":2,"message":"m","priority":"normal","time_to_live":120,
             "android":{"collapse_key":"c","restricted_package_name":"com.app","notification":{"channel_id":"calls"}},
             "webpush":{"headers":{"Urgency":"high"}},"fcm_options":{"analytics_label":"l"},
             "apns":{"headers":{"apns-priority":"10"},"payload":{"aps":{"badge":3}}}, "sound":"ring.caf"}
            """)
        let m = try message(n, .token("t"))
        let android = try XCTUnwrap(m["android"] as? [String: Any])
        XCTAssertEqual(android["priority"] as? String, "NORMAL")
        XCTAssertEqual(android["ttl"] as? String, "120s")
        XCTAssertEqual(android["collapse_key"] as? String, "c")
        XCTAssertEqual(android["restricted_package_name"] as? String, "com.app")
        XCTAssertEqual(android["notification"] as? [String: String], ["channel_id": "calls", "sound": "ring.caf"])
        XCTAssertEqual((m["webpush"] as? [String: Any])?["headers"] as? [String: String], ["Urgency": "high"])
        XCTAssertEqual(m["fcm_options"] as? [String: String], ["analytics_label": "l"])
        let apns = try XCTUnwrap(m["apns"] as? [String: Any])
        XCTAssertEqual(apns["headers"] as? [String: String], ["apns-priority": "10"])
        let aps = try XCTUnwrap((apns["payload"] as? [String: Any])?["aps"] as? [String: Any])
        XCTAssertEqual(aps["badge"] as? Int, 3)
        XCTAssertEqual(aps["sound"] as? String, "ring.caf")

        // An explicit android.priority / ttl wins over gorush's fields, and is normalised for v1.
        let p = try decodeNotification(
            """
            {"tokens":["t"],"platform":2,"priority":"normal","time_to_live":5,"android":{"priority":"high","ttl":3600}}
            """)
        let pa = try XCTUnwrap(try message(p, .token("t"))["android"] as? [String: Any])
        XCTAssertEqual(pa["priority"] as? String, "HIGH")
        XCTAssertEqual(pa["ttl"] as? String, "3600s")
    }

    func testPassThroughNotificationMergesWithGorushFields() throws {
        let n = try decodeNotification(
            """
            {"tokens":["t"],"platform":2,"title":"T","notification":{"title":"ignored","body":"B","icon":"ic","android_channel_id":"ch","badge":"4","click_action":"OPEN"}}
            """)
        let m = try message(n, .token("t"))
        XCTAssertEqual(m["notification"] as? [String: String], ["title": "T", "body": "B"])
        let an = try XCTUnwrap((m["android"] as? [String: Any])?["notification"] as? [String: Any])
        XCTAssertEqual(an["icon"] as? String, "ic")
        XCTAssertEqual(an["channel_id"] as? String, "ch")
        XCTAssertEqual(an["notification_count"] as? Int, 4)
        XCTAssertEqual(an["click_action"] as? String, "OPEN")
    }

    func testTopicAndConditionSends() throws {
        let topic = try decodeNotification(#"{"platform":2,"topic":"/topics/news","message":"m"}"#)
        XCTAssertEqual(topic.targets(FCMMessageMapper.rules), [.topic])
        let m = try message(topic, .topic)
        XCTAssertEqual(m["topic"] as? String, "news")
        XCTAssertNil(m["token"])
        XCTAssertNil(m["condition"])

        let condition = try decodeNotification(#"{"platform":2,"condition":"'a' in topics && 'b' in topics","message":"m"}"#)
        let c = try message(condition, .topic)
        XCTAssertEqual(c["condition"] as? String, "'a' in topics && 'b' in topics")
        XCTAssertNil(c["topic"])

        // A notification without topic/condition has no topic body.
        let plain = try FCMMessageMapper.prepare(notification { $0.message = "m" })
        XCTAssertNil(plain.body(for: .topic))
    }

    func testDataOnlyWakeUpHasNoNotificationBlock() throws {
        let n = try decodeNotification(#"{"tokens":["t"],"platform":2,"content_available":true,"priority":"high","data":{"sync":1}}"#)
        let m = try message(n, .token("t"))
        XCTAssertNil(m["notification"])
        XCTAssertEqual(m["data"] as? [String: String], ["sync": "1"])
        XCTAssertEqual((m["android"] as? [String: Any])?["priority"] as? String, "HIGH")
        let apns = try XCTUnwrap(m["apns"] as? [String: Any])
        XCTAssertEqual(apns["headers"] as? [String: String], ["apns-priority": "5", "apns-push-type": "background"])
        XCTAssertEqual((apns["payload"] as? [String: Any])?["aps"] as? [String: Int], ["content-available": 1])
    }

    func testMutableContentOnlyWithNotification() throws {
        let n = try decodeNotification(#"{"tokens":["t"],"platform":2,"title":"x","mutable_content":true}"#)
        let aps = try XCTUnwrap(((try message(n, .token("t"))["apns"] as? [String: Any])?["payload"] as? [String: Any])?["aps"] as? [String: Int])
        XCTAssertEqual(aps, ["mutable-content": 1])
    }

    func testDryRunMapsToValidateOnly() throws {
        let n = try decodeNotification(#"{"tokens":["t"],"platform":2,"message":"m","dry_run":true}"#)
        let b = try body(n, .token("t"))
        XCTAssertEqual(b["validate_only"] as? Bool, true)
        XCTAssertEqual((b["message"] as? [String: Any])?["token"] as? String, "t")
    }

    func testTimeToLiveBounds() {
        XCTAssertThrowsError(try FCMMessageMapper.prepare(notification { $0.timeToLive = 2_419_201 })) { error in
            XCTAssertTrue("\(error)".contains("TimeToLive"), "\(error)")
        }
        XCTAssertNoThrow(try FCMMessageMapper.prepare(notification { $0.timeToLive = 2_419_200 }))
    }

    /// A notification whose body for `token` is exactly `size` bytes.
    static func sized(bodySize size: Int, token: String = "token-1") throws -> PushNotification {
        var n = PushNotification(platform: .android, tokens: [token])
        n.data = JSONObject([("blob", .string(""))])
        let base = try FCMMessageMapper.render(n).size(for: .token(token))
        n.data = JSONObject([("blob", .string(String(repeating: "x", count: size - base)))])
        return n
    }

    func testSizeLimitIs4096BytesOfMessageJSON() throws {
        let ok = try Self.sized(bodySize: 4096)
        let prepared = try FCMMessageMapper.prepare(ok)
        XCTAssertEqual(prepared.size(for: .token("token-1")), 4096)

        let tooBig = try Self.sized(bodySize: 4097)
        XCTAssertThrowsError(try FCMMessageMapper.prepare(tooBig)) { error in
            XCTAssertEqual(error as? PushFailure, .payloadTooLarge(size: 4097, limit: 4096))
            XCTAssertEqual("\(error)", "PayloadTooLarge (4097 > 4096 bytes)")
        }
    }

    func testRenderedOnceSplicedPerToken() throws {
        let n = notification {
            $0.tokens = ["a", "bb", "ccc"]
            $0.title = "t"
            $0.data = JSONObject([("k", .int(1))])
        }
        let prepared = try FCMMessageMapper.prepare(n)
        for t in n.tokens {
            let m = try XCTUnwrap(jsonObject(try XCTUnwrap(prepared.body(for: .token(t))))["message"] as? [String: Any])
            XCTAssertEqual(m["token"] as? String, t)
            XCTAssertEqual(m["data"] as? [String: String], ["k": "1"])
        }
        XCTAssertEqual(prepared.messageJSONWithoutTarget, "{\"notification\":{\"title\":\"t\"},\"data\":{\"k\":\"1\"}}")
    }
}
