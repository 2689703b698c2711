import XCTest

@testable import PushgateCore

/// What gorush v1.22 accepts, accepted the same way: Go's case-insensitive member names, any
/// `priority` string, notifications without a known platform skipped, `counts` as its router computes it.
final class GorushLeniencyTests: XCTestCase {
    func parse(_ s: String) throws(RequestError) -> PushRequest {
        try RequestParser.parseChecked(Array(s.utf8), limits: RequestLimits.registered)
    }

    // MARK: member names

    func testPascalCaseMembersAtEveryStructLevel() throws {
        let r = try parse(
            #"""
            {"Notifications":[{"Tokens":["t1"],"Platform":1,"Message":"hi","Title":"T","Topic":"com.example.app",
              "Priority":"10","Content_Available":true,"NOTIF_ID":"n-1","Badge":3,"Thread-Id":"th",
              "Alert":{"Subtitle":"S","Loc-Args":["a"],"SUMMARY-ARG-COUNT":2},
              "Sound":{"Critical":1,"Name":"ping.aiff","VOLUME":0.5},
              "Data":{"Key":"V","key":"v"}}],
             "Sync":true}
            """#)
        XCTAssertEqual(r.sync, true)
        let n = try XCTUnwrap(r.notifications.first)
        XCTAssertEqual(n.platform, .ios)
        XCTAssertEqual(n.tokens, ["t1"])
        XCTAssertEqual(n.message, "hi")
        XCTAssertEqual(n.title, "T")
        XCTAssertEqual(n.topic, "com.example.app")
        XCTAssertEqual(n.priority, "10")
        XCTAssertEqual(n.contentAvailable, true)
        XCTAssertEqual(n.notifID, "n-1")
        XCTAssertEqual(n.badge, 3)
        XCTAssertEqual(n.threadID, "th")
        XCTAssertEqual(n.alert?.subtitle, "S")
        XCTAssertEqual(n.alert?.locArgs, ["a"])
        XCTAssertEqual(n.alert?.summaryArgCount, 2)
        // The sound object's fields are gorush's Sound struct (mapstructure: case-insensitive).
        XCTAssertEqual(n.sound?.objectValue?.keys, ["critical", "name", "volume"])
        XCTAssertEqual(n.sound?["name"], .string("ping.aiff"))
        // data is a map: keys verbatim, both kept.
        XCTAssertEqual(n.data?.keys, ["Key", "key"])
    }

    func testLastMemberNamingAFieldWins() throws {
        var r = try parse(#"{"notifications":[{"tokens":["a"],"Tokens":["b"],"platform":1}]}"#)
        XCTAssertEqual(r.notifications[0].tokens, ["b"])
        r = try parse(#"{"notifications":[{"TOKENS":["b"],"tokens":["a"],"platform":1}]}"#)
        XCTAssertEqual(r.notifications[0].tokens, ["a"])
        // A later member of another type still decides (and is checked): Go assigns in document order.
        XCTAssertThrowsError(try parse(#"{"notifications":[{"tokens":["a"],"Tokens":"b","platform":1}]}"#))
    }

    func testGoFoldsKelvinAndLongS() throws {
        // U+212A KELVIN SIGN folds onto "k", U+017F LONG S onto "s" (Go's unicode.SimpleFold).
        let r = try parse("{\"notifications\":[{\"to\u{212A}en\u{17F}\":[\"a\"],\"platform\":1}]}")
        XCTAssertEqual(r.notifications[0].tokens, ["a"])
        // Other non-ASCII keys name no field.
        let r2 = try parse("{\"notifications\":[{\"tökens\":[\"a\"],\"tokens\":[\"b\"],\"platform\":1}]}")
        XCTAssertEqual(r2.notifications[0].tokens, ["b"])
    }

    func testFCMObjectsTakeTheFirebaseFieldSpelling() throws {
        let r = try parse(
            #"""
            {"notifications":[{"platform":2,"tokens":["x"],
              "Notification":{"Title":"T","Image":"https://i"},
              "Android":{"Priority":"high","TTL":"60s","Collapse_Key":"c","Data":{"Mixed":"1"},
                         "Notification":{"Click_Action":"OPEN","Channel_ID":"ch","Light_Settings":{"Color":"#ff0000"}}},
              "APNS":{"Headers":{"apns-Priority":"5"},"Payload":{"APS":{"Content-Available":1,"Sound":{"Name":"n"}},"Custom":1}},
              "Webpush":{"FCM_Options":{"Link":"https://l"}},
              "FCM_Options":{"Analytics_Label":"lbl"}}]}
            """#)
        let n = try XCTUnwrap(r.notifications.first)
        XCTAssertEqual(n.fcmNotification?.keys, ["title", "image"])
        let android = try XCTUnwrap(n.android)
        XCTAssertEqual(android.keys, ["priority", "ttl", "collapse_key", "data", "notification"])
        XCTAssertEqual(android["data"]?.objectValue?.keys, ["Mixed"], "maps keep their keys")
        let an = try XCTUnwrap(android["notification"]?.objectValue)
        XCTAssertEqual(an.keys, ["click_action", "channel_id", "light_settings"])
        XCTAssertEqual(an["light_settings"]?.objectValue?.keys, ["color"])
        let apns = try XCTUnwrap(n.apns)
        XCTAssertEqual(apns.keys, ["headers", "payload"])
        XCTAssertEqual(apns["headers"]?.objectValue?.keys, ["apns-Priority"], "headers is a map")
        let payload = try XCTUnwrap(apns["payload"]?.objectValue)
        XCTAssertEqual(payload.keys, ["aps", "Custom"], "custom payload keys stay")
        XCTAssertEqual(payload["aps"]?.objectValue?.keys, ["content-available", "sound"])
        XCTAssertEqual(payload["aps"]?["sound"]?.objectValue?.keys, ["name"])
        XCTAssertEqual(n.webpush?["fcm_options"]?.objectValue?.keys, ["link"])
        XCTAssertEqual(n.fcmOptions?.keys, ["analytics_label"])
        // The FCM ttl check reads the canonical name: an out-of-range TTL is still refused.
        XCTAssertThrowsError(try parse(#"{"notifications":[{"platform":2,"tokens":["x"],"Android":{"TTL":1e19}}]}"#)) { e in
            XCTAssertEqual((e as? RequestError)?.detail?.hasPrefix("notifications[0].android.ttl"), true)
        }
    }

    func testUnchangedObjectsAreKeptAsTheyCame() throws {
        let r = try parse(#"{"notifications":[{"platform":2,"tokens":["x"],"android":{"priority":"high","zzz":1,"Unknown":2}}]}"#)
        XCTAssertEqual(r.notifications[0].android?.keys, ["priority", "zzz", "Unknown"], "unknown members are passed on as they are")
    }

    // MARK: platform

    func testMissingZeroAndUnknownPlatformsAreSkipped() throws {
        let r = try parse(
            #"""
            {"notifications":[
              {"tokens":["a"],"message":"no platform"},
              {"tokens":["b"],"platform":0,"notif_id":"zero"},
              {"tokens":["c"],"platform":1,"message":"kept"},
              {"tokens":["d"],"platform":42},
              {"tokens":["e"],"platform":"blackberry"},
              {"tokens":["f"],"platform":null},
              {"tokens":["g"],"platform":2}
            ]}
            """#)
        XCTAssertEqual(r.notifications.map(\.tokens), [["c"], ["g"]])
        XCTAssertEqual(r.skipped.map(\.index), [0, 1, 3, 4, 5])
        XCTAssertEqual(r.skipped[1].notifID, "zero")
        XCTAssertEqual(r.skipped[0].reason, "no platform")
        XCTAssertTrue(r.skipped[2].reason.contains("unknown platform 42"), r.skipped[2].reason)
        XCTAssertEqual(r.bodyIndices, [2, 6])
    }

    func testSkippedNotificationsAreStillTypeChecked() {
        // Go decodes the whole body before the router drops notifications: a wrong type is a 400.
        XCTAssertThrowsError(try parse(#"{"notifications":[{"platform":0,"tokens":"a"},{"platform":1,"tokens":["b"]}]}"#)) { e in
            XCTAssertEqual((e as? RequestError)?.detail?.hasPrefix("notifications[0].tokens"), true)
        }
    }

    func testOnlySkippedNotificationsIsNotAnError() throws {
        let r = try parse(#"{"notifications":[{"tokens":["a"],"platform":0}]}"#)
        XCTAssertTrue(r.notifications.isEmpty)
        XCTAssertEqual(r.skipped.count, 1)
        // null is a zero notification in Go (platform 0): skipped too; another non-object is a 400.
        let n = try parse(#"{"notifications":[null,{"tokens":["b"],"platform":2}]}"#)
        XCTAssertEqual(n.notifications.map(\.tokens), [["b"]])
        XCTAssertEqual(n.skipped.map(\.index), [0])
        XCTAssertThrowsError(try parse(#"{"notifications":[1]}"#))
    }

    // MARK: priority, sound name / volume

    func testAnyPriorityString() throws {
        for p in ["high", "normal", "10", "5", "urgent", "", "HIGH"] {
            let r = try parse(#"{"notifications":[{"platform":1,"tokens":["a"],"priority":"\#(p)"}]}"#)
            XCTAssertEqual(r.notifications[0].priority, p)
        }
        // gorush's priority is a string: a number is a type error, as in Go.
        XCTAssertThrowsError(try parse(#"{"notifications":[{"platform":1,"tokens":["a"],"priority":10}]}"#))
    }

    func testTopLevelSoundNameAndVolume() throws {
        let r = try parse(#"{"notifications":[{"platform":1,"tokens":["a"],"sound":"x.aiff","Name":"alarm.caf","volume":0.25}]}"#)
        XCTAssertEqual(r.notifications[0].soundName, "alarm.caf")
        XCTAssertEqual(r.notifications[0].soundVolume, 0.25)
        XCTAssertThrowsError(try parse(#"{"notifications":[{"platform":1,"tokens":["a"],"volume":"loud"}]}"#))
        XCTAssertThrowsError(try parse(#"{"notifications":[{"platform":1,"tokens":["a"],"volume":1e300}]}"#)) { e in
            XCTAssertEqual((e as? RequestError)?.detail?.hasPrefix("notifications[0].volume"), true)
        }
    }

    func testSoundNameAndVolumeSurviveTheStoredForm() throws {
        // The durable queues store notifications with Codable.
        let n = try parse(#"{"notifications":[{"platform":1,"tokens":["a"],"name":"alarm.caf","volume":0.25}]}"#).notifications[0]
        let back = try JSONDecoder().decode(PushNotification.self, from: try JSONEncoder().encode(n))
        XCTAssertEqual(back, n)
        XCTAssertEqual(back.soundName, "alarm.caf")
        XCTAssertEqual(back.soundVolume, 0.25)
    }

    // MARK: counts (gorush's router: countNotificationTargets)

    func testCountsAsGorushRouter() throws {
        func count(_ notification: String) throws -> Int {
            try parse(#"{"notifications":[\#(notification)]}"#).notifications.reduce(0) { $0 + $1.gorushCount }
        }
        XCTAssertEqual(try count(#"{"platform":2,"tokens":["a","b","c"]}"#), 3, "one per token")
        XCTAssertEqual(try count(#"{"platform":2,"topic":"news"}"#), 1, "a topic counts one")
        XCTAssertEqual(try count(#"{"platform":2,"tokens":["a","b"],"topic":"news"}"#), 3, "tokens and topic")
        XCTAssertEqual(try count(#"{"platform":1,"tokens":["a"],"topic":"com.example.app"}"#), 2, "an iOS topic counts too")
        XCTAssertEqual(try count(#"{"platform":2,"condition":"'a' in topics"}"#), 0, "a condition is not counted")
        XCTAssertEqual(try count(#"{"platform":2,"tokens":["a"],"to":"b"}"#), 1, "to is not counted")
        XCTAssertEqual(try count(#"{"platform":2}"#), 0, "an empty notification")
        XCTAssertEqual(try count(#"{"platform":2,"tokens":["a"],"topic":""}"#), 1, "an empty topic is no topic")
        XCTAssertEqual(
            try count(#"{"platform":4,"subscriptions":[{"endpoint":"https://p/1"},{"endpoint":"https://p/2"}]}"#), 2,
            "Web Push subscriptions count like tokens")
    }
}
