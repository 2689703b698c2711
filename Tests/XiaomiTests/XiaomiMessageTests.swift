import Foundation
import ProviderKit
import PushgateCore
import XCTest

@testable import Xiaomi

final class XiaomiMessageTests: XCTestCase {
    func config(channel: String = "") throws -> XiaomiConfiguration {
        try XiaomiConfiguration(appSecret: "secret", packageName: "com.example.app", defaultChannelID: channel)
    }

    func notification(title: String? = "Hello", message: String? = "World", data: JSONObject? = nil) -> PushNotification {
        var n = PushNotification(platform: .xiaomi, tokens: ["regid1"])
        n.title = title
        n.message = message
        n.data = data
        return n
    }

    func decode(_ json: String) throws -> XiaomiOptions {
        let value = try JSONParser.parse(Array(json.utf8))
        return try XiaomiOptions(value, path: "notifications[0].xiaomi")
    }

    func problem(_ json: String) -> RequestMemberProblem? {
        do {
            _ = try decode(json)
            return nil
        } catch let p as RequestMemberProblem {
            return p
        } catch {
            XCTFail("\(error)")
            return nil
        }
    }

    func testMemberDecodedWithEveryField() throws {
        let o = try decode(
            #"{"channel_id":"im","notify_type":3,"notify_id":7,"notify_effect":3,"web_uri":"https://example.com/x","notify_foreground":false,"sound_uri":"android.resource://com.example.app/raw/ding","callback":"https://hooks.example.com/mi","callback_param":"abc","only_send_once":true}"#
        )
        XCTAssertEqual(o.channelID, "im")
        XCTAssertEqual(o.notifyType, 3)
        XCTAssertEqual(o.notifyID, 7)
        XCTAssertEqual(o.notifyEffect, 3)
        XCTAssertEqual(o.webURI, "https://example.com/x")
        XCTAssertEqual(o.notifyForeground, false)
        XCTAssertEqual(o.callbackParam, "abc")
        XCTAssertEqual(o.onlySendOnce, true)
        // null is absent.
        XCTAssertNil(try decode(#"{"channel_id":null}"#).channelID)
    }

    func testHostileMemberValuesNameTheField() {
        let long = String(repeating: "a", count: 129)
        let cases: [(String, String)] = [
            (#"[]"#, "notifications[0].xiaomi"),
            (#""x""#, "notifications[0].xiaomi"),
            (#"{"channel":"x"}"#, "notifications[0].xiaomi.channel"),
            (#"{"channel_id":5}"#, "notifications[0].xiaomi.channel_id"),
            (#"{"channel_id":""}"#, "notifications[0].xiaomi.channel_id"),
            (#"{"channel_id":"\#(long)"}"#, "notifications[0].xiaomi.channel_id"),
            (#"{"channel_id":"a\nb"}"#, "notifications[0].xiaomi.channel_id"),
            (#"{"notify_type":0}"#, "notifications[0].xiaomi.notify_type"),
            (#"{"notify_type":8}"#, "notifications[0].xiaomi.notify_type"),
            (#"{"notify_type":1.5}"#, "notifications[0].xiaomi.notify_type"),
            (#"{"notify_type":1e300}"#, "notifications[0].xiaomi.notify_type"),
            (#"{"notify_type":"1"}"#, "notifications[0].xiaomi.notify_type"),
            (#"{"notify_id":-1}"#, "notifications[0].xiaomi.notify_id"),
            (#"{"notify_id":99999999999999999999}"#, "notifications[0].xiaomi.notify_id"),
            (#"{"notify_effect":4}"#, "notifications[0].xiaomi.notify_effect"),
            (#"{"notify_effect":2}"#, "notifications[0].xiaomi.intent_uri"),
            (#"{"notify_effect":3}"#, "notifications[0].xiaomi.web_uri"),
            (#"{"web_uri":"javascript:alert(1)"}"#, "notifications[0].xiaomi.web_uri"),
            (#"{"notify_foreground":1}"#, "notifications[0].xiaomi.notify_foreground"),
            (#"{"callback":"ftp://x"}"#, "notifications[0].xiaomi.callback"),
            (#"{"callback_param":"x"}"#, "notifications[0].xiaomi.callback"),
            (#"{"callback":"https://a.example","callback_param":"\#(String(repeating: "é", count: 40))"}"#, "notifications[0].xiaomi.callback_param"),
            (#"{"intent_uri":"\#(String(repeating: "i", count: 1025))"}"#, "notifications[0].xiaomi.intent_uri"),
        ]
        for (json, field) in cases {
            XCTAssertEqual(problem(json)?.field, field, json)
        }
    }

    func testTitleMessageAndClassificationChecked() throws {
        let c = try config()
        let member = try decode(#"{"channel_id":"im"}"#)
        XCTAssertNil(XiaomiMessageMapper.check(notification(), options: member, defaultChannelID: ""))
        // Neither a channel in the request nor an app default: refused naming the member's field.
        XCTAssertEqual(XiaomiMessageMapper.check(notification(), options: nil, defaultChannelID: "")?.field, "xiaomi.channel_id")
        XCTAssertEqual(XiaomiMessageMapper.check(notification(), options: XiaomiOptions(), defaultChannelID: "")?.field, "xiaomi.channel_id")
        XCTAssertNil(XiaomiMessageMapper.check(notification(), options: nil, defaultChannelID: "news"))
        // Xiaomi delivers no pass-through messages: data alone is refused, not sent to be dropped.
        XCTAssertEqual(
            XiaomiMessageMapper.check(
                notification(title: nil, message: nil, data: JSONObject([("k", .string("v"))])), options: member, defaultChannelID: "")?
                .field, "message")
        XCTAssertEqual(XiaomiMessageMapper.check(notification(title: "  "), options: member, defaultChannelID: "")?.field, "title")
        XCTAssertEqual(XiaomiMessageMapper.check(notification(message: nil), options: member, defaultChannelID: "")?.field, "message")
        // Fewer than 50 / 128 characters, a CJK character counting 1 and an emoji 2 (UTF-16).
        XCTAssertNil(XiaomiMessageMapper.check(notification(title: String(repeating: "小", count: 49)), options: member, defaultChannelID: ""))
        XCTAssertEqual(
            XiaomiMessageMapper.check(notification(title: String(repeating: "小", count: 50)), options: member, defaultChannelID: "")?.field, "title")
        XCTAssertEqual(
            XiaomiMessageMapper.check(notification(title: String(repeating: "😀", count: 25)), options: member, defaultChannelID: "")?.limit,
            "49 characters")
        XCTAssertNil(XiaomiMessageMapper.check(notification(message: String(repeating: "m", count: 127)), options: member, defaultChannelID: ""))
        XCTAssertEqual(
            XiaomiMessageMapper.check(notification(message: String(repeating: "m", count: 128)), options: member, defaultChannelID: "")?.field,
            "message")
        let big = JSONObject([("k", .string(String(repeating: "x", count: 4090)))])
        XCTAssertEqual(XiaomiMessageMapper.check(notification(data: big), options: member, defaultChannelID: "")?.field, "data")
        // prepare refuses what check refuses.
        XCTAssertThrowsError(try XiaomiMessageMapper.prepare(notification(), options: nil, configuration: c))
    }

    func testFormRendersTheNotification() throws {
        var n = notification(title: "Hi & bye", message: "a=b 小米", data: JSONObject([("id", .int(42)), ("s", .string("x y"))]))
        n.timeToLive = 30 * 86_400
        let member = try decode(#"{"notify_effect":2,"intent_uri":"intent:#Intent;end","notify_id":9,"only_send_once":true}"#)
        let p = try XiaomiMessageMapper.prepare(n, options: member, configuration: try config(channel: "news"))
        let body = String(decoding: p.body(for: "abc+/="), as: UTF8.self)
        var form: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            form[String(kv[0]).removingPercentEncoding!] = kv.count > 1 ? String(kv[1]).removingPercentEncoding! : ""
        }
        XCTAssertEqual(form["registration_id"], "abc+/=")
        XCTAssertEqual(form["restricted_package_name"], "com.example.app")
        XCTAssertEqual(form["pass_through"], "0")
        XCTAssertEqual(form["title"], "Hi & bye")
        XCTAssertEqual(form["description"], "a=b 小米")
        XCTAssertEqual(form["payload"], #"{"id":42,"s":"x y"}"#)
        XCTAssertEqual(form["time_to_live"], String(14 * 86_400 * 1000), "held to two weeks")
        XCTAssertEqual(form["extra.channel_id"], "news", "the app's default")
        XCTAssertEqual(form["extra.notify_effect"], "2")
        XCTAssertEqual(form["extra.intent_uri"], "intent:#Intent;end")
        XCTAssertEqual(form["notify_id"], "9")
        XCTAssertEqual(form["extra.only_send_once"], "1")
        XCTAssertEqual(form["notify_type"], "-1")
        XCTAssertEqual(p.payloadBytes, 19)
        // The request's channel wins over the default.
        let own = try XiaomiMessageMapper.prepare(n, options: try decode(#"{"channel_id":"im"}"#), configuration: try config(channel: "news"))
        XCTAssertTrue(own.form.contains("extra.channel_id=im"))
    }

    func testTheSmallestInt64AsACodeDoesNotTrap() {
        let body = XiaomiResponseClassifier.parse(Array(#"{"code":-9223372036854775808,"result":"error"}"#.utf8))
        XCTAssertNotNil(body)
        XCTAssertNil(body?.code)
    }

    func testRegistrationIDsCannotSmuggleMoreTargets() {
        XCTAssertTrue(XiaomiMessageMapper.isRegistrationID("Xr2k/9+aB=_-."))
        for bad in ["", "a,b", "a&b=c", "a b", "a\nb", String(repeating: "a", count: 513), "é"] {
            XCTAssertFalse(XiaomiMessageMapper.isRegistrationID(bad), bad)
        }
    }

    func testConfigurationErrorsNameTheKey() {
        func key(_ f: () throws -> Void) -> String? {
            do {
                try f()
                return nil
            } catch let e as ConfigError {
                return e.key
            } catch { return "\(error)" }
        }
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "", packageName: "com.a.b") }, "xiaomi.app_secret")
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "a b", packageName: "com.a.b") }, "xiaomi.app_secret")
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "s", packageName: "app") }, "xiaomi.package_name")
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "s", packageName: "com.1a") }, "xiaomi.package_name")
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "s", packageName: "com.a", region: "mars") }, "xiaomi.region")
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "s", packageName: "com.a", endpoint: "ftp://x") }, "xiaomi.endpoint")
        XCTAssertEqual(key { _ = try XiaomiConfiguration(appSecret: "s", packageName: "com.a", defaultChannelID: "a\u{0}") }, "xiaomi.channel_id")
        XCTAssertEqual(
            try XiaomiConfiguration(appSecret: "s", packageName: "com.a", region: "europe").sendURL,
            "https://fr-api.xmpush.global.xiaomi.com/v3/message/regid")
        XCTAssertFalse("\(try! XiaomiConfiguration(appSecret: "topsecret", packageName: "com.a"))".contains("topsecret"))
    }

    func testAnswersClassified() {
        func c(_ status: Int, _ body: String, retryAfter: String? = nil) -> XiaomiAnswer {
            XiaomiResponseClassifier.classify(status: status, body: Array(body.utf8), retryAfter: retryAfter, token: "tok")
        }
        XCTAssertEqual(c(200, #"{"result":"ok","code":0,"data":{"id":"scm1"}}"#), .outcome(.delivered(providerID: "scm1")))
        XCTAssertEqual(
            c(200, #"{"result":"ok","code":0,"data":{"id":"scm1","bad_regids":"x,tok"}}"#), .outcome(.tokenDead(reason: "0: bad regid", status: 200)))
        XCTAssertEqual(c(200, #"{"result":"error","code":20301,"description":"发送消息失败","data":{"bad_regids":"tok"}}"#).isDead, true)
        XCTAssertEqual(c(200, #"{"result":"error","code":200001,"description":"exceed quota"}"#), .dailyQuota(reason: "200001: exceed quota"))
        XCTAssertEqual(c(200, #"{"result":"error","code":10034,"description":"too many"}"#), .dailyQuota(reason: "10034: too many"))
        XCTAssertEqual(c(200, #"{"result":"error","code":21301,"description":"auth"}"#), .authRefused(reason: "21301: auth"))
        XCTAssertEqual(c(401, ""), .authRefused(reason: "HTTP 401"))
        XCTAssertEqual(
            c(200, #"{"code":10027,"description":"too often"}"#, retryAfter: "7"),
            .outcome(.transient(reason: "10027: too often", status: 200, retryAfter: 7)))
        XCTAssertEqual(c(503, "", retryAfter: "3"), .outcome(.transient(reason: "HTTP 503", status: 503, retryAfter: 3)))
        XCTAssertEqual(c(200, #"{"code":22022,"description":"bad package"}"#), .outcome(.permanent(reason: "22022: bad package", status: 200)))
        XCTAssertEqual(c(200, #"{"code":65009}"#), .outcome(.permanent(reason: "PayloadTooLarge (65009)", status: 200)))
        // Hostile or broken answers: never a trap, never "delivered".
        for body in ["", "[]", "null", #"{"code":1e300}"#, #"{"code":"NaN"}"#, String(repeating: "[", count: 100_000), #"{"code":0}"#] {
            let a = c(200, body)
            if case .outcome(let o) = a, o.isDelivered, body != #"{"code":0}"# { XCTFail("delivered on \(body.prefix(20))") }
        }
    }
}

extension XiaomiAnswer {
    var isDead: Bool { if case .outcome(.tokenDead) = self { return true } else { return false } }
}

final class DailyQuotaHoldTests: XCTestCase {
    func testResetIsMidnightChinaTime() {
        let utc8 = DailyQuotaHold.chinaStandardTime
        // 2026-05-14T15:59:59Z is 23:59:59 in Beijing: the day ends one second later.
        let before = Date(timeIntervalSince1970: 1_778_774_399)
        XCTAssertEqual(DailyQuotaHold.nextReset(after: before, utcOffsetSeconds: utc8).timeIntervalSince1970, 1_778_774_400)
        // At midnight Beijing time a new day has begun: its end is 24 h later.
        XCTAssertEqual(
            DailyQuotaHold.nextReset(after: Date(timeIntervalSince1970: 1_778_774_400), utcOffsetSeconds: utc8).timeIntervalSince1970, 1_778_860_800)
        XCTAssertEqual(DailyQuotaHold.nextReset(after: Date(timeIntervalSince1970: 10), utcOffsetSeconds: 0).timeIntervalSince1970, 86_400)
    }

    func testHoldEndsAtTheReset() async {
        let clock = TestClock(1_778_770_000)
        let hold = DailyQuotaHold(now: clock.now)
        let none = await hold.current()
        XCTAssertNil(none)
        let first = await hold.hold(reason: "200001")
        XCTAssertTrue(first.started)
        XCTAssertEqual(first.until.timeIntervalSince1970, 1_778_774_400)
        let again = await hold.hold(reason: "200001")
        XCTAssertFalse(again.started)
        clock.set(1_778_774_399)
        let still = await hold.current()
        XCTAssertNotNil(still)
        clock.set(1_778_774_400)
        let over = await hold.current()
        XCTAssertNil(over)
    }
}
