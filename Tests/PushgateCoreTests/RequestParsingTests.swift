import XCTest

@testable import PushgateCore

final class RequestParsingTests: XCTestCase {
    func parse(_ s: String, max: Int = 100) throws(RequestError) -> PushRequest {
        var limits = RequestLimits.registered
        limits.maxNotifications = max
        return try RequestParser.parseChecked(Array(s.utf8), limits: limits)
    }

    func assertError(_ s: String, message: String, detailContains: String? = nil, file: StaticString = #filePath, line: UInt = #line) {
        do {
            _ = try parse(s)
            XCTFail("expected an error for \(s)", file: file, line: line)
        } catch {
            XCTAssertEqual(error.status, 400, file: file, line: line)
            XCTAssertEqual(error.message, message, file: file, line: line)
            if let d = detailContains {
                XCTAssertTrue(error.detail?.contains(d) == true, "detail \(error.detail ?? "nil") lacks \(d)", file: file, line: line)
            }
        }
    }

    func testStatusServerRequest() throws {
        let body =
            #"{"notifications":[{"tokens":["token-1"],"platform":1,"message":"You have a new message","topic":"im.status.ethereum","data":{"encryptedMessage":"0x6d65","chatId":"0x6368","publicKey":"0x7075"}}]}"#
        let r = try parse(body)
        XCTAssertEqual(r.notifications.count, 1)
        let n = r.notifications[0]
        XCTAssertEqual(n.platform, .ios)
        XCTAssertEqual(n.tokens, ["token-1"])
        XCTAssertEqual(n.topic, "im.status.ethereum")
        XCTAssertEqual(n.data?["chatId"], .string("0x6368"))
        XCTAssertEqual(n.deliveryCount(n.registeredRules), 1)
    }

    func testDeclarativeWebPushMembers() throws {
        let n = try parse(
            #"{"notifications":[{"platform":"webpush","Declarative":true,"navigate":"https://a.example/","silent":false,"title":"T"}]}"#
        ).notifications[0]
        XCTAssertEqual(n.declarative, true, "matched case-insensitively, as gorush's fields are")
        XCTAssertEqual(n.navigate, "https://a.example/")
        XCTAssertEqual(n.silent, false)
        // Stored and read back (the durable queue keeps notifications as JSON).
        let back = try JSONDecoder().decode(PushNotification.self, from: try JSONEncoder().encode(n))
        XCTAssertEqual(back, n)
        for (body, detail) in [
            (#"{"platform":4,"declarative":"true"}"#, "notifications[0].declarative: expected a boolean"),
            (#"{"platform":4,"silent":0}"#, "notifications[0].silent: expected a boolean"),
            (#"{"platform":4,"navigate":["https://a.example/"]}"#, "notifications[0].navigate: expected a string"),
            (#"{"platform":1,"tokens":["t"],"declarative":false}"#, "notifications[0].declarative: only for platform webpush"),
            (#"{"platform":2,"tokens":["t"],"silent":true}"#, "notifications[0].silent: only for platform webpush"),
            (
                #"{"platform":5,"tokens":["https://up.example/x"],"navigate":"https://a.example/"}"#,
                "notifications[0].navigate: only for platform webpush"
            ),
            (#"{"platform":4,"fallback":{"platform":4}}"#, "notifications[0].fallback.platform"),
            (#"{"platform":1,"tokens":["t"],"fallback":{"silent":true}}"#, "notifications[0].fallback.silent: only for platform webpush"),
        ] {
            do {
                _ = try parse(#"{"notifications":[\#(body)]}"#)
                XCTFail("\(body) was accepted")
            } catch {
                XCTAssertEqual(error.status, 400)
                XCTAssertTrue(error.detail?.hasPrefix(detail) == true, "\(body): \(error.detail ?? "nil")")
            }
        }
        // An unknown platform is skipped before its members are judged (gorush's router drops it).
        XCTAssertEqual(try parse(#"{"notifications":[{"platform":200,"silent":true},{"platform":4,"title":"x"}]}"#).notifications.count, 1)
    }

    func testGorushErrors() {
        assertError("", message: "Missing notifications field.")
        assertError("{", message: "Missing notifications field.", detailContains: "not valid JSON")
        assertError(#"{"notifications":null}"#, message: "Missing notifications field.")
        assertError(#"{"foo":1}"#, message: "Missing notifications field.", detailContains: "notifications")
        assertError(#"{"notifications":[]}"#, message: "Notifications field is empty.")
        assertError(
            #"{"notifications":[{"tokens":["a"],"platform":1,"badge":"x"}]}"#, message: "Missing notifications field.",
            detailContains: "notifications[0].badge")
        assertError(
            #"{"notifications":[{"tokens":["a"],"platform":1,"mutable_content":1}]}"#, message: "Missing notifications field.",
            detailContains: "mutable_content")
        assertError(#"{"notifications":[{"tokens":"a","platform":1}]}"#, message: "Missing notifications field.", detailContains: "tokens")
        // A platform of another type is a 400 (Go's decoder); missing, 0 or unknown is skipped (GorushLeniencyTests).
        assertError(#"{"notifications":[{"tokens":["a"],"platform":true}]}"#, message: "Missing notifications field.", detailContains: "platform")
        assertError(#"{"notifications":[{"tokens":["a"],"platform":1.5}]}"#, message: "Missing notifications field.", detailContains: "platform")
    }

    func testOverLimit() {
        let one = #"{"tokens":["a"],"platform":1,"message":"m"}"#
        let body = #"{"notifications":["# + Array(repeating: one, count: 101).joined(separator: ",") + "]}"
        do {
            _ = try parse(body, max: 100)
            XCTFail("expected over-limit error")
        } catch {
            XCTAssertEqual(error.message, "Number of notifications(101) over limit(100)")
            XCTAssertEqual(String(decoding: error.json, as: UTF8.self), #"{"code":400,"message":"Number of notifications(101) over limit(100)"}"#)
        }
    }

    func testApsInDataRejected() {
        assertError(
            #"{"notifications":[{"tokens":["a"],"platform":1,"data":{"aps":{"alert":"x"}}}]}"#, message: "data.aps is reserved",
            detailContains: "notifications[0].data.aps")
    }

    func testPlatformNames() throws {
        let r = try parse(
            #"{"notifications":[{"tokens":["a"],"platform":"ios"},{"tokens":["b"],"platform":"android"},{"tokens":["c"],"platform":"huawei"}]}"#)
        XCTAssertEqual(r.notifications.map(\.platform), [.ios, .android, .huawei])
    }

    func testCountsTopic() throws {
        let r = try parse(#"{"notifications":[{"tokens":["a","b"],"platform":2,"topic":"news"},{"tokens":["c"],"platform":1,"topic":"com.app"}]}"#)
        let (android, ios) = (r.notifications[0], r.notifications[1])
        XCTAssertEqual(android.deliveryCount(android.registeredRules), 3)
        XCTAssertEqual(ios.deliveryCount(ios.registeredRules), 1, "an iOS topic is the apns-topic, not a topic send")
        XCTAssertEqual(android.targets(android.registeredRules), [.token("a"), .token("b"), .topic])
        XCTAssertEqual(android.targets(nil), [.token("a"), .token("b")], "no rules, no topic sends")
    }

    func testSoundAndAlert() throws {
        let r = try parse(
            #"{"notifications":[{"tokens":["a"],"platform":1,"sound":{"critical":1,"name":"default","volume":2.5},"alert":{"title":"T","loc-args":["x"]}}]}"#
        )
        XCTAssertEqual(r.notifications[0].sound?["name"], .string("default"))
        XCTAssertEqual(r.notifications[0].alert?.locArgs, ["x"])
        assertError(#"{"notifications":[{"tokens":["a"],"platform":1,"sound":5}]}"#, message: "Missing notifications field.", detailContains: "sound")
    }
}

final class CoreValueTests: XCTestCase {
    func testTokenMask() {
        XCTAssertEqual(TokenMask.mask("short"), "*****")
        XCTAssertEqual(TokenMask.mask("0123456789abcdefghij0123456789"), "**********abcdefghij**********")
        XCTAssertEqual(TokenMask.mask("0123456789ABCDEFGHIJ"), "********************")
    }

    func testJSONWriterEscapes() {
        var w = JSONWriter()
        w.write(.object(JSONObject([("a", .string("q\"\\\n\u{1}é")), ("n", .int(42)), ("d", .double(1.5)), ("b", .bool(true)), ("z", .null)])))
        XCTAssertEqual(w.string, #"{"a":"q\"\\\n\u0001é","n":42,"d":1.5,"b":true,"z":null}"#)
    }

    func testFCMDataStringification() throws {
        let v = try JSONDecoder().decode(JSONObject.self, from: Data(#"{"n":42,"b":true,"o":{"x":1},"s":"str","f":1.5}"#.utf8))
        XCTAssertEqual(v["n"]?.fcmDataString, "42")
        XCTAssertEqual(v["b"]?.fcmDataString, "true")
        XCTAssertEqual(v["o"]?.fcmDataString, #"{"x":1}"#)
        XCTAssertEqual(v["s"]?.fcmDataString, "str")
        XCTAssertEqual(v["f"]?.fcmDataString, "1.5")
    }

    func testLogEntryJSONOrder() {
        let e = LogEntry(notifID: "n1", platform: "ios", token: "t", message: "m", error: "Unregistered")
        XCTAssertEqual(
            String(decoding: e.json, as: UTF8.self),
            #"{"notif_id":"n1","type":"failed-push","platform":"ios","token":"t","message":"m","error":"Unregistered"}"#)
    }
}

/// What each provider module calls a background push (the default coalescing window applies to it).
final class BackgroundPushRuleTests: XCTestCase {
    func testEachRegisteredPlatformsRule() {
        func isBackground(_ p: Platform, _ edit: (inout PushNotification) -> Void) -> Bool {
            var n = PushNotification(platform: p)
            edit(&n)
            return n.isBackgroundPush(n.registeredRules)
        }
        XCTAssertTrue(isBackground(.ios) { $0.pushType = "background" })
        XCTAssertTrue(isBackground(.ios) { $0.contentAvailable = true })
        XCTAssertFalse(
            isBackground(.ios) {
                $0.contentAvailable = true
                $0.message = "shown"
            })
        XCTAssertFalse(
            isBackground(.ios) {
                $0.contentAvailable = true
                $0.badge = 1
            })
        XCTAssertFalse(isBackground(.ios) { _ in })
        for p in [Platform.android, .huawei] {
            XCTAssertTrue(isBackground(p) { $0.data = JSONObject([("k", .string("v"))]) }, "\(p): data only")
            XCTAssertFalse(isBackground(p) { $0.title = "shown" }, "\(p)")
            XCTAssertFalse(isBackground(p) { $0.message = "shown" }, "\(p)")
        }
        XCTAssertTrue(isBackground(.webpush) { $0.message = "shown by the service worker" })
        XCTAssertTrue(isBackground(.unifiedpush) { _ in })
        var n = PushNotification(platform: .ios)
        n.pushType = "background"
        XCTAssertFalse(n.isBackgroundPush(nil), "a platform without rules has no background pushes")
    }
}
