import APNs
import Foundation
import PushgateCore
import XCTest

final class APNsPayloadTests: XCTestCase {
    func notification(_ configure: (inout PushNotification) -> Void = { _ in }) -> PushNotification {
        var n = PushNotification(platform: .ios, tokens: ["abcd"])
        n.topic = "com.example.app"
        configure(&n)
        return n
    }

    func prepared(_ n: PushNotification, defaultTopic: String? = nil, production: Bool = false) throws -> APNsPreparedPush {
        try APNsPreparedPush(n, defaultTopic: defaultTopic, defaultProduction: production)
    }

    /// The payload parsed back, for structural assertions.
    func json(_ p: APNsPreparedPush) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(p.payload)) as? [String: Any])
    }

    func failure(_ n: PushNotification, file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            _ = try prepared(n)
            return nil
        } catch {
            return "\(error)"
        }
    }

    // MARK: payload

    func testMessageWithoutTitleIsAlertString() throws {
        let p = try prepared(notification { $0.message = "Hello" })
        XCTAssertEqual(p.payloadString, #"{"aps":{"alert":"Hello"}}"#)
    }

    func testStatusServerRequestExactPayload() throws {
        // The Status push notification server's body (protocols.md section 1).
        let body =
            #"{"notifications":[{"tokens":["token-1"],"platform":1,"message":"You have a new message","topic":"im.status.ethereum","data":{"encryptedMessage":"0x6d65","chatId":"0x6368","publicKey":"0x7075"}}]}"#
        let request = try JSONDecoder().decode(PushRequest.self, from: Data(body.utf8))
        let p = try prepared(request.notifications[0])
        let object = try json(p)
        XCTAssertEqual((object["aps"] as? [String: Any])?["alert"] as? String, "You have a new message")
        XCTAssertEqual(object["encryptedMessage"] as? String, "0x6d65")
        XCTAssertEqual(object["chatId"] as? String, "0x6368")
        XCTAssertEqual(object["publicKey"] as? String, "0x7075")
        XCTAssertEqual(p.header("apns-topic"), "im.status.ethereum")
        XCTAssertEqual(p.header("apns-push-type"), "alert")
        XCTAssertNil(p.header("apns-priority"))
        XCTAssertNil(p.header("apns-expiration"))
    }

    func testTitleAndMessageMakeAlertDictionaryAndAlertFieldsOverride() throws {
        let p = try prepared(
            notification {
                $0.title = "T"
                $0.message = "M"
                var a = APNsAlert()
                a.subtitle = "S"
                a.title = "T2"
                a.locKey = "LK"
                a.locArgs = ["x", "y"]
                a.summaryArgCount = 2
                $0.alert = a
            })
        XCTAssertEqual(
            p.payloadString, #"{"aps":{"alert":{"title":"T2","body":"M","subtitle":"S","loc-key":"LK","loc-args":["x","y"],"summary-arg-count":2}}}"#)
    }

    func testMessageWithoutTitleButAlertFieldsBecomesBody() throws {
        let p = try prepared(
            notification {
                $0.message = "M"
                var a = APNsAlert()
                a.subtitle = "S"
                $0.alert = a
            })
        let alert = try XCTUnwrap((try json(p)["aps"] as? [String: Any])?["alert"] as? [String: Any])
        XCTAssertEqual(alert["body"] as? String, "M")
        XCTAssertEqual(alert["subtitle"] as? String, "S")
    }

    func testApsFieldsAndDataAtRoot() throws {
        let p = try prepared(
            notification {
                $0.message = "hi"
                $0.badge = 0
                $0.sound = .string("default")
                $0.threadID = "thread"
                $0.category = "cat"
                $0.contentAvailable = true
                $0.mutableContent = true
                $0.urlArgs = ["a", "b"]
                $0.interruptionLevel = "time-sensitive"
                $0.relevanceScore = 0.5
                $0.data = JSONObject([("k", .int(42)), ("nested", .object(JSONObject([("x", .bool(true))])))])
            })
        XCTAssertEqual(
            p.payloadString,
            #"{"aps":{"alert":"hi","badge":0,"sound":"default","thread-id":"thread","category":"cat","content-available":1,"mutable-content":1,"url-args":["a","b"],"interruption-level":"time-sensitive","relevance-score":0.5},"k":42,"nested":{"x":true}}"#
        )
    }

    func testNegativeBadgeIsOmitted() throws {
        let p = try prepared(
            notification {
                $0.message = "m"
                $0.badge = -1
            })
        XCTAssertEqual(p.payloadString, #"{"aps":{"alert":"m"}}"#)
    }

    func testCriticalSoundObject() throws {
        let p = try prepared(
            notification {
                $0.sound = .object(JSONObject([("critical", .bool(true)), ("name", .string("alarm.caf")), ("volume", .double(0.75))]))
            })
        XCTAssertEqual(p.payloadString, #"{"aps":{"sound":{"critical":1,"name":"alarm.caf","volume":0.75}}}"#)
        XCTAssertNotNil(failure(notification { $0.sound = .object(JSONObject([("volume", .string("loud"))])) }))
    }

    func testLiveActivityKeys() throws {
        let p = try prepared(
            notification {
                $0.pushType = "liveactivity"
                $0.event = "update"
                $0.timestamp = 1_700_000_000
                $0.contentState = JSONObject([("score", .int(3))])
                $0.staleDate = 1_700_000_600
                $0.dismissalDate = 1_700_000_900
                $0.attributesType = "GameAttributes"
                $0.attributes = JSONObject([("team", .string("A"))])
            })
        XCTAssertEqual(
            p.payloadString,
            #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":3},"stale-date":1700000600,"dismissal-date":1700000900,"attributes-type":"GameAttributes","attributes":{"team":"A"}}}"#
        )
        XCTAssertEqual(p.header("apns-topic"), "com.example.app.push-type.liveactivity")
    }

    func testDataApsIsRefused() {
        let reason = failure(notification { $0.data = JSONObject([("aps", .object(JSONObject()))]) })
        XCTAssertTrue(reason?.hasPrefix("data.aps") == true, reason ?? "nil")
    }

    // MARK: push types and headers

    func testPushTypeTopicsAndPriorities() throws {
        let cases: [(String, String, String?, String?)] = [
            // push_type, topic, priority, expiration
            ("alert", "com.example.app", nil, nil),
            ("background", "com.example.app", "5", nil),
            ("voip", "com.example.app.voip", "10", nil),
            ("location", "com.example.app.location-query", nil, nil),
            ("complication", "com.example.app.complication", nil, nil),
            ("fileprovider", "com.example.app.pushkit.fileprovider", nil, nil),
            ("mdm", "com.example.app", nil, nil),
            ("liveactivity", "com.example.app.push-type.liveactivity", nil, nil),
            ("pushtotalk", "com.example.app.voip-ptt", "10", "0"),
            ("widgets", "com.example.app.push-type.widgets", nil, nil),
        ]
        for (type, topic, priority, expiration) in cases {
            let p = try prepared(notification { $0.pushType = type })
            XCTAssertEqual(p.header("apns-push-type"), type)
            XCTAssertEqual(p.header("apns-topic"), topic, type)
            XCTAssertEqual(p.header("apns-priority"), priority, type)
            XCTAssertEqual(p.header("apns-expiration"), expiration, type)
        }
    }

    func testBackgroundForcesPriority5AndContentAvailable() throws {
        let p = try prepared(
            notification {
                $0.pushType = "background"
                $0.priority = "high"
            })
        XCTAssertEqual(p.header("apns-priority"), "5")
        XCTAssertEqual(p.payloadString, #"{"aps":{"content-available":1}}"#)
    }

    func testVoipForcesPriority10() throws {
        let p = try prepared(
            notification {
                $0.pushType = "voip"
                $0.priority = "normal"
            })
        XCTAssertEqual(p.header("apns-priority"), "10")
        XCTAssertEqual(p.header("apns-topic"), "com.example.app.voip")
    }

    func testSuffixIsNotAppendedTwice() throws {
        XCTAssertEqual(
            try prepared(
                notification {
                    $0.pushType = "voip"
                    $0.topic = "com.example.app.voip"
                }
            ).topic, "com.example.app.voip")
        XCTAssertEqual(
            try prepared(
                notification {
                    $0.pushType = "pushtotalk"
                    $0.topic = "com.x.voip-ptt"
                }
            ).topic, "com.x.voip-ptt")
        XCTAssertEqual(
            try prepared(
                notification {
                    $0.pushType = "widgets"
                    $0.topic = "com.x.push-type.widgets"
                }
            ).topic, "com.x.push-type.widgets")
        XCTAssertEqual(
            try prepared(
                notification {
                    $0.pushType = "mdm"
                    $0.topic = "com.apple.mgmt.External.1234"
                }
            ).topic, "com.apple.mgmt.External.1234")
    }

    func testPriorityMapping() throws {
        XCTAssertEqual(try prepared(notification { $0.priority = "normal" }).header("apns-priority"), "5")
        XCTAssertEqual(try prepared(notification { $0.priority = "high" }).header("apns-priority"), "10")
        XCTAssertNil(try prepared(notification { $0.priority = nil }).header("apns-priority"))
        // gorush takes any string: APNs' own numbers map, anything else leaves the header out.
        XCTAssertEqual(try prepared(notification { $0.priority = "10" }).header("apns-priority"), "10")
        XCTAssertEqual(try prepared(notification { $0.priority = "5" }).header("apns-priority"), "5")
        XCTAssertNil(try prepared(notification { $0.priority = "urgent" }).header("apns-priority"))
    }

    /// gorush's top-level `name` / `volume` (apns2 SoundName / SoundVolume): a fresh critical-sound
    /// dictionary replaces `sound`, its other member defaulted (name "default", volume 1).
    func testTopLevelSoundNameAndVolume() throws {
        var p = try prepared(
            notification {
                $0.sound = .string("a.aiff")
                $0.soundName = "b.caf"
            })
        XCTAssertEqual(p.payloadString, #"{"aps":{"sound":{"critical":1,"name":"b.caf","volume":1}}}"#)
        p = try prepared(notification { $0.soundVolume = 0.25 })
        XCTAssertEqual(p.payloadString, #"{"aps":{"sound":{"critical":1,"name":"default","volume":0.25}}}"#)
        p = try prepared(
            notification {
                $0.soundName = "n"
                $0.soundVolume = 0.5
            })
        XCTAssertEqual(p.payloadString, #"{"aps":{"sound":{"critical":1,"name":"n","volume":0.5}}}"#)
        // An empty name and a volume of 0 or less are unset, as in gorush: `sound` stays.
        p = try prepared(
            notification {
                $0.sound = .string("a.aiff")
                $0.soundName = ""
                $0.soundVolume = -1
            })
        XCTAssertEqual(p.payloadString, #"{"aps":{"sound":"a.aiff"}}"#)
    }

    func testHeadersExpirationCollapseIDAndDefaultTopic() throws {
        let p = try prepared(
            notification {
                $0.topic = nil
                $0.expiration = 1_800_000_000
                $0.collapseID = "c-1"
            }, defaultTopic: "com.default.app")
        XCTAssertEqual(p.headers.map(\.0), ["apns-push-type", "apns-topic", "apns-expiration", "apns-collapse-id"])
        XCTAssertEqual(p.header("apns-topic"), "com.default.app")
        XCTAssertEqual(p.header("apns-expiration"), "1800000000")
        XCTAssertEqual(p.header("apns-collapse-id"), "c-1")
    }

    func testValidationFailuresNameTheField() {
        XCTAssertEqual(failure(notification { $0.pushType = "bogus" })?.hasPrefix("push_type:"), true)
        XCTAssertEqual(failure(notification { $0.topic = nil })?.hasPrefix("topic:"), true)
        XCTAssertEqual(failure(notification { $0.collapseID = String(repeating: "c", count: 65) })?.hasPrefix("collapse_id:"), true)
        XCTAssertNil(failure(notification { $0.collapseID = String(repeating: "c", count: 64) }))
        XCTAssertEqual(failure(notification { $0.apnsID = "not-a-uuid" })?.hasPrefix("apns_id:"), true)
        XCTAssertNil(failure(notification { $0.apnsID = "123e4567-e89b-12d3-a456-426614174000" }))
    }

    func testEnvironmentPerNotification() throws {
        XCTAssertFalse(try prepared(notification(), production: false).production)
        XCTAssertTrue(try prepared(notification(), production: true).production)
        XCTAssertTrue(try prepared(notification { $0.production = true }, production: false).production)
        XCTAssertFalse(try prepared(notification { $0.development = true }, production: true).production)
    }

    // MARK: size limits

    /// A notification whose payload is exactly `size` bytes.
    static func sized(_ size: Int, pushType: String) -> PushNotification {
        var n = PushNotification(platform: .ios, tokens: ["abcd"])
        n.topic = "com.example.app"
        n.pushType = pushType
        n.data = JSONObject([("p", .string(""))])
        let base = (try! APNsPreparedPush(n, defaultTopic: nil, defaultProduction: false)).payload.count
        n.data = JSONObject([("p", .string(String(repeating: "x", count: size - base)))])
        return n
    }

    func testSizeLimits() throws {
        XCTAssertEqual(try prepared(Self.sized(4096, pushType: "alert")).payload.count, 4096)
        XCTAssertEqual(failure(Self.sized(4097, pushType: "alert")), "PayloadTooLarge (4097 > 4096 bytes)")
        XCTAssertEqual(try prepared(Self.sized(5000, pushType: "voip")).payload.count, 5000)
        XCTAssertEqual(try prepared(Self.sized(5120, pushType: "voip")).payload.count, 5120)
        XCTAssertEqual(failure(Self.sized(5121, pushType: "voip")), "PayloadTooLarge (5121 > 5120 bytes)")
        XCTAssertEqual(failure(Self.sized(5000, pushType: "background")), "PayloadTooLarge (5000 > 4096 bytes)")
    }

    func testSizeIsMeasuredOnUTF8Bytes() throws {
        // 2-byte characters: 2100 of them are 4200 bytes, over the limit although under 4096 characters.
        var n = notification()
        n.message = String(repeating: "é", count: 2100)
        XCTAssertEqual(failure(n)?.hasPrefix("PayloadTooLarge ("), true)
    }
}
