import PushgateCore
import XCTest

@testable import Huawei

final class HuaweiClassifierTests: XCTestCase {
    func answer(_ code: String, _ msg: String = "m") -> [UInt8] {
        Array(#"{"code":"\#(code)","msg":"\#(msg)","requestId":"r-1"}"#.utf8)
    }

    func testSuccessIsDeliveredWithTheRequestID() {
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 200, body: answer("80000000"), retryAfter: nil), .delivered(providerID: "r-1"))
        // A number code is read too.
        XCTAssertEqual(
            HuaweiResponseClassifier.classify(status: 200, body: Array(#"{"code":80000000,"requestId":"x"}"#.utf8), retryAfter: nil),
            .delivered(providerID: "x"))
    }

    func testTokenDeadCodes() {
        let invalid = HuaweiResponseClassifier.classify(status: 200, body: answer("80300007"), retryAfter: nil)
        XCTAssertEqual(invalid.className, "token_dead")
        let partial = HuaweiResponseClassifier.classify(
            status: 200, body: answer("80100000", #"{\"success\":0,\"failure\":1,\"illegal_tokens\":[\"abc\"]}"#), retryAfter: nil)
        XCTAssertEqual(partial.className, "token_dead")
        XCTAssertFalse(partial.reason?.contains("abc") ?? true, "the refused token is not repeated in the reason")
        let partialOK = HuaweiResponseClassifier.classify(
            status: 200, body: answer("80100000", #"{\"success\":1,\"failure\":0,\"illegal_tokens\":[]}"#), retryAfter: nil)
        XCTAssertTrue(partialOK.isDelivered)
    }

    func testCredentialsRetryAndPermanent() {
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 401, body: answer("80200003"), retryAfter: nil).className, "credentials")
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 200, body: answer("80200001"), retryAfter: nil).className, "credentials")
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 401, body: [], retryAfter: nil).className, "credentials")
        XCTAssertEqual(
            HuaweiResponseClassifier.classify(status: 500, body: answer("81000001"), retryAfter: "3"),
            .transient(reason: "81000001: m", status: 500, retryAfter: 3))
        XCTAssertEqual(
            HuaweiResponseClassifier.classify(status: 503, body: [], retryAfter: "7"), .transient(reason: "HTTP 503", status: 503, retryAfter: 7))
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 429, body: Array("<html>".utf8), retryAfter: nil).className, "transient")
        XCTAssertEqual(
            HuaweiResponseClassifier.classify(status: 400, body: answer("80100003", "Illegal payload"), retryAfter: nil),
            .permanent(reason: "80100003: Illegal payload", status: 400))
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 200, body: answer("80300010"), retryAfter: nil).className, "permanent")
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 200, body: answer("80300008"), retryAfter: nil).reason, "PayloadTooLarge (80300008)")
        // A 200 without a readable answer is not taken as delivered.
        XCTAssertEqual(HuaweiResponseClassifier.classify(status: 200, body: Array("ok".utf8), retryAfter: nil).className, "permanent")
    }

    func testHostileAnswersDoNotTrap() {
        for body in [
            #"{"code":1e308}"#, #"{"code":-1}"#, #"{"code":"80100000","msg":"{\"success\":1e300}"}"#,
            #"{"code":"80100000","msg":"{\"success\":-5}"}"#, #"{"code":[1]}"#, String(repeating: "[", count: 100_000),
        ] {
            _ = HuaweiResponseClassifier.classify(status: 200, body: Array(body.utf8), retryAfter: "99999999999999999999")
        }
    }
}

final class HuaweiMappingTests: XCTestCase {
    func message(_ n: PushNotification) -> [String: Any] {
        let prepared = HuaweiMessageMapper.render(n)
        let body = prepared.body(for: .token("tok"))!
        let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        XCTAssertEqual(json["validate_only"] as? Bool, n.dryRun == true)
        return json["message"] as? [String: Any] ?? [:]
    }

    func testGorushMapping() {
        var n = PushNotification(platform: .huawei, tokens: ["tok"])
        n.title = "T"
        n.message = "M"
        n.priority = "high"
        n.huaweiData = #"{"k":"v"}"#
        n.huaweiCollapseKey = 3
        n.huaweiTTL = "600s"
        n.biTag = "bi"
        n.fastAppTarget = 1
        n.category = "IM"
        let m = message(n)
        XCTAssertEqual(m["token"] as? [String], ["tok"])
        XCTAssertEqual(m["data"] as? String, #"{"k":"v"}"#)
        let android = m["android"] as? [String: Any] ?? [:]
        XCTAssertEqual(android["urgency"] as? String, "HIGH")
        XCTAssertEqual(android["collapse_key"] as? Int, 3)
        XCTAssertEqual(android["ttl"] as? String, "600s")
        XCTAssertEqual(android["bi_tag"] as? String, "bi")
        XCTAssertEqual(android["fast_app_target"] as? Int, 1)
        XCTAssertEqual(android["category"] as? String, "IM")
        let notification = android["notification"] as? [String: Any] ?? [:]
        XCTAssertEqual(notification["title"] as? String, "T")
        XCTAssertEqual(notification["body"] as? String, "M")
        XCTAssertEqual(notification["default_sound"] as? Bool, true)
        XCTAssertEqual((notification["click_action"] as? [String: Any])?["type"] as? Int, 1)
    }

    func testDefaultsDataObjectAndSound() {
        var n = PushNotification(platform: .huawei, tokens: ["tok"])
        n.data = JSONObject([("a", .int(1))])
        n.sound = .string("ring")
        n.dryRun = true
        let m = message(n)
        XCTAssertEqual(m["data"] as? String, #"{"a":1}"#)
        let android = m["android"] as? [String: Any] ?? [:]
        XCTAssertEqual(android["urgency"] as? String, "NORMAL")
        XCTAssertEqual(android["ttl"] as? String, "86400s")
        let notification = android["notification"] as? [String: Any] ?? [:]
        XCTAssertEqual(notification["sound"] as? String, "ring")
        XCTAssertEqual(notification["default_sound"] as? Bool, false)
    }

    func testPassThroughNotificationAndTopic() {
        var n = PushNotification(platform: .huawei)
        n.topic = "news"
        n.huaweiNotification = JSONObject([("title", .string("own")), ("channel_id", .string("c"))])
        n.timeToLive = 60
        let prepared = HuaweiMessageMapper.render(n)
        let body = prepared.body(for: .topic)!
        let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        let m = json["message"] as? [String: Any] ?? [:]
        XCTAssertEqual(m["topic"] as? String, "news")
        XCTAssertNil(m["token"])
        let android = m["android"] as? [String: Any] ?? [:]
        XCTAssertEqual(android["ttl"] as? String, "60s")
        let notification = android["notification"] as? [String: Any] ?? [:]
        XCTAssertEqual(notification["title"] as? String, "own")
        XCTAssertEqual(notification["channel_id"] as? String, "c")
        XCTAssertNotNil(notification["click_action"])
        XCTAssertNil(prepared.body(for: .subscription(WebPushSubscription(endpoint: "https://x", keys: nil))))
    }

    func testPayloadTooLarge() {
        var n = PushNotification(platform: .huawei, tokens: ["tok"])
        n.message = String(repeating: "x", count: 5000)
        XCTAssertThrowsError(try HuaweiMessageMapper.prepare(n)) { error in
            XCTAssertTrue((error as? PushFailure)?.reason.hasPrefix("PayloadTooLarge") == true, "\(error)")
        }
        n.message = String(repeating: "x", count: 3000)
        XCTAssertNoThrow(try HuaweiMessageMapper.prepare(n))
    }

    func testRequestFieldsDecodedAndChecked() throws {
        let r = try RequestParser.parse(
            Array(
                #"{"notifications":[{"platform":3,"tokens":["t"],"huawei_data":"d","huawei_collapse_key":-1,"huawei_ttl":"1.5s","bi_tag":"b","fast_app_target":2,"app_id":"1","app_secret":"s3cr3t","huawei_notification":{"title":"x"}}]}"#
                    .utf8), limits: RequestLimits(members: HuaweiModule().requestMembers))
        let n = try XCTUnwrap(r.notifications.first)
        XCTAssertEqual(n.huaweiData, "d")
        XCTAssertEqual(n.huaweiCollapseKey, -1)
        XCTAssertEqual(n.huaweiTTL, "1.5s")
        XCTAssertEqual(n.biTag, "b")
        XCTAssertEqual(n.fastAppTarget, 2)
        XCTAssertEqual(n.huaweiNotification?["title"], .string("x"))
        let encoded = String(decoding: try JSONEncoder().encode(n), as: UTF8.self)
        XCTAssertFalse(encoded.contains("s3cr3t"), "app_secret is dropped, never queued")
        XCTAssertEqual(try JSONDecoder().decode(PushNotification.self, from: Data(encoded.utf8)), n)

        for (field, value) in [
            ("huawei_collapse_key", "101"), ("huawei_collapse_key", "\"1\""), ("fast_app_target", "3"), ("huawei_ttl", "\"1 day\""),
            ("huawei_ttl", "\"99999999999s\""), ("huawei_data", "{}"), ("huawei_notification", "\"x\""), ("bi_tag", "1"), ("app_secret", "5"),
        ] {
            XCTAssertThrowsError(
                try RequestParser.parse(
                    Array(#"{"notifications":[{"platform":3,"tokens":["t"],"\#(field)":\#(value)}]}"#.utf8),
                    limits: RequestLimits(members: HuaweiModule().requestMembers)), field
            ) { error in
                XCTAssertTrue("\(error)".contains(field), "\(field): \(error)")
            }
        }
    }
}
