import GatewayCore
import PushgateCore
import XCTest

@testable import MatrixIngest

/// Sygnal's mapping, checked against the payloads of Sygnal's own tests (tests/test_apns.py,
/// tests/test_gcm.py, tests/testutils.py: the facts, not the code).
final class SygnalMappingTests: XCTestCase {
    struct NoSend: Error {}

    /// testutils.py `_make_dummy_notification`.
    static func full(_ devices: String) -> String {
        """
        {"notification":{"id":"$3957tyerfgewrf384","room_id":"!slw48wfj34rtnrf:example.com",
        "event_id":"$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs","type":"m.room.message",
        "sender":"@exampleuser:matrix.org","sender_display_name":"Major Tom","room_name":"Mission Control",
        "room_alias":"#exampleroom:matrix.org","prio":"high",
        "content":{"msgtype":"m.text","body":"I'm floating in a most peculiar way.","other":1},
        "counts":{"unread":2,"missed_calls":1},"devices":[\(devices)]}}
        """
    }

    /// testutils.py `_make_dummy_notification_event_id_only`.
    static func eventIDOnly(_ devices: String) -> String {
        """
        {"notification":{"room_id":"!slw48wfj34rtnrf:example.com","event_id":"$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs",
        "counts":{"unread":2},"devices":[\(devices)]}}
        """
    }

    static let apnsDevice = #"{"app_id":"com.example.apns","pushkey":"spqr","pushkey_ts":42}"#
    static let apnsDeviceWithDefaultPayload = """
        {"app_id":"com.example.apns","pushkey":"spqr","pushkey_ts":42,
        "data":{"default_payload":{"aps":{"mutable-content":1,"alert":{"loc-key":"SINGLE_UNREAD","loc-args":[]}}}}}
        """
    static let ios = MatrixApp(pattern: "com.example.apns", platform: .ios)

    func parse(_ s: String) throws -> MatrixNotification {
        try MatrixNotification.parse(Array(s.utf8), maxDevices: 100)
    }

    func sent(_ plan: DevicePlan, file: StaticString = #filePath, line: UInt = #line) throws -> PushNotification {
        guard case .send(let n) = plan else {
            XCTFail("expected a send, got \(plan)", file: file, line: line)
            throw NoSend()
        }
        return n
    }

    func testAPNsFullFormatIsSygnalsExpectedPayload() throws {
        let n = try parse(Self.full(Self.apnsDevice))
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: Self.ios))
        // "spqr" is base64 of b2 9a ab: sent as hex.
        XCTAssertEqual(out.tokens, ["b29aab"])
        XCTAssertEqual(out.alert?.locKey, "MSG_FROM_USER_IN_ROOM_WITH_CONTENT")
        XCTAssertEqual(out.alert?.locArgs, ["Major Tom", "Mission Control", "I'm floating in a most peculiar way."])
        XCTAssertEqual(out.badge, 3)  // unread 2 + missed_calls 1
        XCTAssertEqual(out.data?["room_id"], .string("!slw48wfj34rtnrf:example.com"))
        XCTAssertEqual(out.data?["event_id"], .string("$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs"))
        XCTAssertEqual(out.data?.count, 2)
        XCTAssertEqual(out.priority, "high")
        XCTAssertNotNil(out.dedupKey)
    }

    func testAPNsEventIDOnlyMergesTheDefaultPayload() throws {
        let n = try parse(Self.eventIDOnly(Self.apnsDeviceWithDefaultPayload))
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: Self.ios))
        XCTAssertEqual(out.data?["room_id"], .string("!slw48wfj34rtnrf:example.com"))
        XCTAssertEqual(out.data?["event_id"], .string("$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs"))
        XCTAssertEqual(out.data?["unread_count"], .int(2))
        XCTAssertNil(out.data?["aps"])
        XCTAssertEqual(out.alert?.locKey, "SINGLE_UNREAD")
        XCTAssertEqual(out.mutableContent, true)
        XCTAssertNil(out.badge)
    }

    func testAPNsBadgeOnlyDropsTheDefaultPayload() throws {
        // testutils.py `_make_dummy_notification_badge_only`: {"aps": {"badge": 2}}.
        let n = try parse(
            #"{"notification":{"id":"","type":null,"sender":"","counts":{"unread":2},"devices":[\#(Self.apnsDeviceWithDefaultPayload)]}}"#)
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: Self.ios))
        XCTAssertEqual(out.badge, 2)
        XCTAssertNil(out.alert)
        XCTAssertNil(out.data)
        XCTAssertNil(out.mutableContent)
    }

    func testAPNsBadDefaultPayloadIsRejected() throws {
        let n = try parse(Self.full(#"{"app_id":"com.example.apns","pushkey":"badpayload","data":{"default_payload":"x"}}"#))
        guard case .reject = SygnalMapping.plan(n, device: n.devices[0], app: Self.ios) else { return XCTFail("not rejected") }
    }

    func testAPNsLocKeysByEventType() throws {
        func key(_ json: String) throws -> (String, [String])? {
            let n = try parse(#"{"notification":{"sender":"@a:x","devices":[\#(Self.apnsDevice)],\#(json)}}"#)
            return SygnalMapping.apnsAlert(n)
        }
        XCTAssertEqual(try key(#""type":"m.room.message""#)?.0, "MSG_FROM_USER")
        XCTAssertEqual(try key(#""type":"m.room.message","content":{"msgtype":"m.text","body":"hi"}"#)?.0, "MSG_FROM_USER_WITH_CONTENT")
        XCTAssertEqual(try key(##""type":"m.room.message","room_alias":"#r:x""##)?.0, "MSG_FROM_USER_IN_ROOM")
        let emote = try key(#""type":"m.room.message","room_name":"R","content":{"msgtype":"m.emote","body":"waves"}"#)
        XCTAssertEqual(emote?.0, "ACTION_FROM_USER_IN_ROOM")
        XCTAssertEqual(emote?.1, ["R", "@a:x", "waves"])
        XCTAssertEqual(try key(#""type":"m.room.message","content":{"msgtype":"m.image","body":"cat.png"}"#)?.0, "IMAGE_FROM_USER")
        XCTAssertEqual(try key(#""type":"m.call.invite","content":{"offer":{"sdp":"v=0\nm=audio 1"}}"#)?.0, "VOICE_CALL_FROM_USER")
        XCTAssertEqual(try key(#""type":"m.call.invite","content":{"offer":{"sdp":"m=video 1"}}"#)?.0, "VIDEO_CALL_FROM_USER")
        XCTAssertEqual(try key(#""type":"m.room.member","user_is_target":true,"membership":"invite""#)?.0, "USER_INVITE_TO_CHAT")
        XCTAssertEqual(
            try key(#""type":"m.room.member","user_is_target":true,"membership":"invite","room_name":"Lounge""#)?.1, ["@a:x", "Lounge"])
        XCTAssertNil(try key(#""type":"m.room.member","user_is_target":false,"membership":"invite""#))
        XCTAssertEqual(try key(#""type":"m.reaction""#)?.0, "MSG_FROM_USER")
        XCTAssertEqual(try key(#""type":"m.room.message","sender_display_name":"Tom""#)?.1, ["Tom"])
    }

    func testAPNsOversizeContentIsTruncatedToFit() throws {
        let body = String(repeating: "é", count: 5000)
        let n = try parse(
            #"{"notification":{"event_id":"$e","room_id":"!r","type":"m.room.message","sender":"@a:x","content":{"msgtype":"m.text","body":"\#(body)"},"devices":[\#(Self.apnsDevice)]}}"#
        )
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: Self.ios))
        let args = try XCTUnwrap(out.alert?.locArgs)
        XCTAssertEqual(args[0], "@a:x")
        XCTAssertTrue(body.hasPrefix(args[1]))
        XCTAssertLessThan(args[1].utf8.count, 4096)
        XCTAssertGreaterThan(args[1].utf8.count, 3500)
    }

    func testAPNsPushkeyNotBase64IsRejectedAndHexPassesWithConversionOff() throws {
        let n = try parse(Self.full(#"{"app_id":"com.example.apns","pushkey":"!!!"}"#))
        guard case .reject = SygnalMapping.plan(n, device: n.devices[0], app: Self.ios) else { return XCTFail("not rejected") }
        var app = Self.ios
        app.convertTokenToHex = false
        XCTAssertEqual(try sent(SygnalMapping.plan(n, device: n.devices[0], app: app)).tokens, ["!!!"])
        XCTAssertEqual(SygnalMapping.apnsToken("3q2+7w==", convert: true), "deadbeef")
        XCTAssertEqual(SygnalMapping.apnsToken("3q2-7w", convert: true), "deadbeef")
    }

    func testLowPrioIsNormalPriority() throws {
        let n = try parse(#"{"notification":{"event_id":"$e","prio":"low","counts":{"unread":1},"devices":[\#(Self.apnsDevice)]}}"#)
        XCTAssertEqual(try sent(SygnalMapping.plan(n, device: n.devices[0], app: Self.ios)).priority, "normal")
    }

    func testFCMDataMessageIsSygnalsV1Data() throws {
        let n = try parse(Self.full(#"{"app_id":"com.example.gcm","pushkey":"spqr","pushkey_ts":42}"#))
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: MatrixApp(pattern: "com.example.gcm", platform: .android)))
        XCTAssertEqual(out.tokens, ["spqr"])
        XCTAssertEqual(out.priority, "high")
        let expected: [String: String] = [
            "event_id": "$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs", "type": "m.room.message", "sender": "@exampleuser:matrix.org",
            "room_name": "Mission Control", "room_alias": "#exampleroom:matrix.org", "sender_display_name": "Major Tom",
            "content_msgtype": "m.text", "content_body": "I'm floating in a most peculiar way.", "room_id": "!slw48wfj34rtnrf:example.com",
            "prio": "high", "unread": "2", "missed_calls": "1",
        ]
        var got: [String: String] = [:]
        for (k, v) in out.data ?? JSONObject() { got[k] = v.stringValue }
        XCTAssertEqual(got, expected)
    }

    func testFCMEventIDOnlyCarriesEventAndRoom() throws {
        let n = try parse(Self.eventIDOnly(#"{"app_id":"com.example.gcm","pushkey":"tok","data":{"format":"event_id_only"}}"#))
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: MatrixApp(pattern: "com.example.gcm", platform: .android)))
        XCTAssertEqual(out.data?["event_id"], .string("$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs"))
        XCTAssertEqual(out.data?["room_id"], .string("!slw48wfj34rtnrf:example.com"))
        XCTAssertEqual(out.data?["unread"], .string("2"))
        XCTAssertNil(out.data?["type"])
    }

    // MARK: send_badge_counts (Sygnal 0.17: tests/test_apns.py, tests/test_gcm.py `test_send_badge_counts*`)

    static func badgeOnly(_ devices: String) -> String {
        #"{"notification":{"id":"","type":null,"sender":"","counts":{"unread":2},"devices":[\#(devices)]}}"#
    }

    func testAPNsWithoutBadgeCounts() throws {
        var app = Self.ios
        app.sendBadgeCounts = false
        // Full format: the alert, no badge.
        var n = try parse(Self.full(Self.apnsDevice))
        var out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: app))
        XCTAssertEqual(out.alert?.locKey, "MSG_FROM_USER_IN_ROOM_WITH_CONTENT")
        XCTAssertNil(out.badge)
        XCTAssertEqual(out.data?.count, 2, "room_id and event_id only")
        // Badge only: nothing to send (not rejected).
        n = try parse(Self.badgeOnly(Self.apnsDevice))
        guard case .nothing = SygnalMapping.plan(n, device: n.devices[0], app: app) else { return XCTFail("a badge-only push was sent") }
        // event_id_only: no unread_count / missed_calls.
        n = try parse(Self.eventIDOnly(Self.apnsDevice))
        out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: app))
        XCTAssertNil(out.data?["unread_count"])
        XCTAssertEqual(out.data?["event_id"], .string("$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs"))
        // On (the default): as before.
        XCTAssertEqual(try sent(SygnalMapping.plan(n, device: n.devices[0], app: Self.ios)).data?["unread_count"], .int(2))
    }

    func testFCMWithoutBadgeCounts() throws {
        var app = MatrixApp(pattern: "com.example.gcm", platform: .android)
        app.sendBadgeCounts = false
        let device = #"{"app_id":"com.example.gcm","pushkey":"spqr","pushkey_ts":42}"#
        func data(_ out: PushNotification) -> [String: String] {
            var got: [String: String] = [:]
            for (k, v) in out.data ?? JSONObject() { got[k] = v.stringValue }
            return got
        }
        // test_send_badge_counts_api_v1: the data without unread / missed_calls.
        var n = try parse(Self.full(device))
        XCTAssertEqual(
            data(try sent(SygnalMapping.plan(n, device: n.devices[0], app: app))),
            [
                "content_body": "I'm floating in a most peculiar way.", "content_msgtype": "m.text",
                "event_id": "$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs", "prio": "high", "room_alias": "#exampleroom:matrix.org",
                "room_id": "!slw48wfj34rtnrf:example.com", "room_name": "Mission Control", "sender": "@exampleuser:matrix.org",
                "sender_display_name": "Major Tom", "type": "m.room.message",
            ])
        // test_send_badge_counts_with_badge_only_notification_api_v1: nothing sent, nothing rejected.
        n = try parse(Self.badgeOnly(device))
        guard case .nothing = SygnalMapping.plan(n, device: n.devices[0], app: app) else { return XCTFail("a badge-only push was sent") }
        // test_send_badge_counts_with_event_id_only_notification_api_v1.
        n = try parse(Self.eventIDOnly(device))
        XCTAssertEqual(
            data(try sent(SygnalMapping.plan(n, device: n.devices[0], app: app))),
            ["event_id": "$qTOWWTEL48yPm3uT-gdNhFcoHxfKbZuqRVnnWWSkGBs", "prio": "high", "room_id": "!slw48wfj34rtnrf:example.com"])
        // On: a badge-only push carries its count; a zero count is left out (0.17), and a badge-only
        // push with nothing but zero counts is not sent.
        let on = MatrixApp(pattern: "com.example.gcm", platform: .android)
        n = try parse(Self.badgeOnly(device))
        XCTAssertEqual(data(try sent(SygnalMapping.plan(n, device: n.devices[0], app: on))), ["prio": "high", "sender": "", "unread": "2"])
        n = try parse(#"{"notification":{"event_id":"$e","counts":{"unread":0,"missed_calls":1},"devices":[\#(device)]}}"#)
        XCTAssertEqual(data(try sent(SygnalMapping.plan(n, device: n.devices[0], app: on))), ["event_id": "$e", "prio": "high", "missed_calls": "1"])
        n = try parse(#"{"notification":{"counts":{"unread":0},"devices":[\#(device)]}}"#)
        guard case .nothing = SygnalMapping.plan(n, device: n.devices[0], app: on) else { return XCTFail("an empty badge-only push was sent") }
    }

    func testSendBadgeCountsInTheMatrixSectionAndSygnalYAML() throws {
        let s = try MatrixSettings(
            raw: try RawConfig(
                yaml:
                    "matrix:\n  apps:\n    a: { platform: ios, send_badge_counts: false }\n    b: { platform: android, send_badge_counts: false }\n    c: { platform: ios }\n",
                environment: [:]), environment: [:])
        XCTAssertEqual(s.app(for: "a")?.sendBadgeCounts, false)
        XCTAssertEqual(s.app(for: "b")?.sendBadgeCounts, false)
        XCTAssertEqual(s.app(for: "c")?.sendBadgeCounts, true, "Sygnal's default")
        for bad in ["{ platform: ios, send_badge_counts: maybe }", "{ platform: webpush, send_badge_counts: false }"] {
            XCTAssertThrowsError(
                try MatrixSettings(raw: try RawConfig(yaml: "matrix:\n  apps:\n    x: \(bad)\n", environment: [:]), environment: [:])
            ) {
                XCTAssertTrue("\($0)".contains("matrix.apps[x].send_badge_counts"), "\($0)")
            }
        }
        let yaml = """
            apps:
              ios.app:
                type: apns
                certfile: c.pem
                send_badge_counts: false
              android.app:
                type: gcm
                api_version: v1
                service_account_file: sa.json
                send_badge_counts: false
            """
        let raw = try RawConfig(yaml: yaml, environment: [:], dialects: [SygnalConfig.self])
        let m = try MatrixSettings(raw: raw, environment: [:])
        XCTAssertEqual(m.app(for: "ios.app")?.sendBadgeCounts, false)
        XCTAssertEqual(m.app(for: "android.app")?.sendBadgeCounts, false)
        XCTAssertFalse(raw.warnings.contains { $0.contains("send_badge_counts") }, "\(raw.warnings)")
        XCTAssertThrowsError(
            try RawConfig(
                yaml: "apps:\n  a:\n    type: apns\n    certfile: c.pem\n    send_badge_counts: 3\n", environment: [:], dialects: [SygnalConfig.self])
        )
    }

    func testBindAddressesAreAllListenedOn() throws {
        func settings(_ yaml: String, dialect: Bool = false) throws -> MatrixSettings {
            try MatrixSettings(raw: try RawConfig(yaml: yaml, environment: [:], dialects: dialect ? [SygnalConfig.self] : []), environment: [:])
        }
        XCTAssertEqual(try settings("http:\n  bind_addresses: ['127.0.0.1', '::1']\n  port: 5000\n", dialect: true).addresses, ["127.0.0.1", "::1"])
        XCTAssertEqual(try settings("http:\n  bind_addresses: ['10.0.0.1', '10.0.0.2']\n", dialect: true).addresses, ["10.0.0.1", "10.0.0.2"])
        XCTAssertEqual(try settings("http:\n  bind_addresses: ['::', '0.0.0.0']\n", dialect: true).addresses, ["::"], "the IPv6 wildcard takes IPv4")
        XCTAssertEqual(try settings("matrix:\n  address: [127.0.0.1, 127.0.0.2, 127.0.0.1]\n").addresses, ["127.0.0.1", "127.0.0.2"])
        XCTAssertEqual(try settings("matrix:\n  address: 127.0.0.1\n").addresses, ["127.0.0.1"])
        let env = try MatrixSettings(raw: try RawConfig(yaml: nil, environment: [:]), environment: ["PUSHGATE_MATRIX_ADDRESS": "127.0.0.1, ::1"])
        XCTAssertEqual(env.addresses, ["127.0.0.1", "::1"])
        XCTAssertThrowsError(try settings("matrix:\n  address: []\n")) { XCTAssertTrue("\($0)".contains("matrix.address")) }
        XCTAssertThrowsError(try settings("matrix:\n  address: [\(Array(repeating: "a", count: 17).joined(separator: ","))]\n"))
    }

    func testTruncateStringIsSygnals() {
        // test_gcm.py: a 3-byte character at byte 1020 is dropped whole, then "…".
        let s = String(repeating: "x", count: 1020) + "⚑" + String(repeating: "y", count: 100)
        let (t, cut) = SygnalMapping.truncateString(s, maxBytes: 1024)
        XCTAssertTrue(cut)
        XCTAssertEqual(t, String(repeating: "x", count: 1020) + "…")
        XCTAssertEqual(SygnalMapping.truncateString("short", maxBytes: 1024).0, "short")
    }

    func testWebPushPayloadAndAllowedEndpoints() throws {
        let device = #"{"app_id":"web","pushkey":"BPp256","data":{"endpoint":"https://push.example.com/s/1","auth":"au","default_payload":{"x":1}}}"#
        let n = try parse(Self.full(device))
        var app = MatrixApp(pattern: "web", platform: .webpush)
        let out = try sent(SygnalMapping.plan(n, device: n.devices[0], app: app))
        XCTAssertEqual(out.subscriptions?.first?.endpoint, "https://push.example.com/s/1")
        XCTAssertEqual(out.subscriptions?.first?.keys, .init(p256dh: "BPp256", auth: "au"))
        XCTAssertEqual(out.timeToLive, 900)
        XCTAssertEqual(out.urgency, "normal")
        let payload = try XCTUnwrap(try? JSONParser.parse(Array((out.payload ?? "").utf8)))
        XCTAssertEqual(payload["x"], .int(1))
        XCTAssertEqual(payload["unread"], .int(2))
        XCTAssertEqual(payload["sender_display_name"], .string("Major Tom"))
        XCTAssertEqual(payload["content"]?["body"], .string("I'm floating in a most peculiar way."))
        XCTAssertNil(out.collapseID)
        let perRoom = try parse(
            Self.full(#"{"app_id":"web","pushkey":"k","data":{"endpoint":"https://p.example/x","auth":"a","only_last_per_room":true}}"#))
        let topic = try XCTUnwrap(try sent(SygnalMapping.plan(perRoom, device: perRoom.devices[0], app: app)).collapseID)
        XCTAssertEqual(topic.count, 30)  // 22 bytes in base64url: within the Topic header's 32 characters
        app.allowedEndpoints = ["*.mozilla.com"]
        guard case .nothing = SygnalMapping.plan(n, device: n.devices[0], app: app) else { return XCTFail("sent outside allowed_endpoints") }
        app.allowedEndpoints = ["push.example.*"]
        XCTAssertNoThrow(try sent(SygnalMapping.plan(n, device: n.devices[0], app: app)))
        let incomplete = try parse(Self.full(#"{"app_id":"web","pushkey":"k","data":{"endpoint":"https://p/x"}}"#))
        guard case .reject = SygnalMapping.plan(incomplete, device: incomplete.devices[0], app: app) else { return XCTFail("not rejected") }
    }

    func testMalformedBodiesNameTheField() {
        func error(_ s: String) -> MatrixRequestError? {
            do {
                _ = try MatrixNotification.parse(Array(s.utf8), maxDevices: 2)
                return nil
            } catch { return error }
        }
        XCTAssertEqual(error("not json")?.errcode, "M_NOT_JSON")
        XCTAssertEqual(error("[]")?.errcode, "M_NOT_JSON")
        XCTAssertEqual(error(#"{"x":1}"#)?.errcode, "M_BAD_JSON")
        XCTAssertTrue(error(#"{"notification":{"devices":[]}}"#)?.error.contains("notification.devices") == true)
        XCTAssertTrue(error(#"{"notification":{"devices":[{"pushkey":"a"}]}}"#)?.error.contains("devices[0].app_id") == true)
        XCTAssertTrue(
            error(#"{"notification":{"devices":[{"app_id":"a","pushkey":"b"}],"counts":{"unread":-1}}}"#)?.error.contains("counts.unread") == true)
        XCTAssertTrue(
            error(#"{"notification":{"devices":[{"app_id":"a","pushkey":"b"}],"counts":{"unread":99999999999999999999999}}}"#) != nil)
        XCTAssertTrue(error(#"{"notification":{"devices":[{"app_id":"a","pushkey":"b"}],"room_id":5}}"#)?.error.contains("room_id") == true)
        let three = #"{"app_id":"a","pushkey":"b"}"#
        XCTAssertTrue(error(#"{"notification":{"devices":[\#(three),\#(three),\#(three)]}}"#)?.error.contains("max_devices") == true)
        XCTAssertEqual(error(String(repeating: "[", count: 100_000))?.errcode, "M_NOT_JSON")
    }

    /// Every prefix of a valid body, and the body with each byte replaced by a few hostile ones, is
    /// parsed and mapped without a trap: a 400 or a plan, never a crash.
    func testTruncatedAndMutatedBodiesNeverTrap() {
        let body = Array(
            Self.full(Self.apnsDeviceWithDefaultPayload + "," + #"{"app_id":"w","pushkey":"k","data":{"endpoint":"https://e/x","auth":"a"}}"#).utf8)
        var s = MatrixSettings()
        s.apps = [Self.ios, MatrixApp(pattern: "w", platform: .webpush), MatrixApp(pattern: "com.*", platform: .android)]
        func run(_ bytes: [UInt8]) {
            guard let n = try? MatrixNotification.parse(bytes, maxDevices: 10) else { return }
            for d in n.devices {
                for app in s.apps { _ = SygnalMapping.plan(n, device: d, app: app) }
            }
        }
        for end in 0...body.count { run(Array(body[0..<end])) }
        for i in body.indices {
            for b: UInt8 in [0x00, 0x22, 0x7B, 0x5D, 0x39, 0xFF] {
                var m = body
                m[i] = b
                run(m)
            }
        }
    }

    func testAppLookupExactThenOneGlob() throws {
        var s = MatrixSettings()
        s.apps = [
            MatrixApp(pattern: "im.vector.app", platform: .android), MatrixApp(pattern: "com.example.*", platform: .ios),
            MatrixApp(pattern: "com.example.?ad", platform: .ios),
        ]
        XCTAssertEqual(s.app(for: "im.vector.app")?.platform, .android)
        XCTAssertEqual(s.app(for: "com.example.phone")?.pattern, "com.example.*")
        XCTAssertNil(s.app(for: "com.example.pad"))  // two globs: ambiguous, as in Sygnal
        XCTAssertNil(s.app(for: "org.other"))
        XCTAssertTrue(Glob.matches("*.mozilla.com", "updates.push.services.mozilla.com"))
        XCTAssertFalse(Glob.matches("*.mozilla.com", "mozilla.org"))
    }

    func testMatrixSectionRefusalsNameTheKey() throws {
        func problem(_ yaml: String) -> String? {
            do {
                _ = try MatrixSettings(raw: try RawConfig(yaml: yaml, environment: [:]), environment: [:])
                return nil
            } catch { return "\(error)" }
        }
        XCTAssertNil(problem("matrix:\n  enabled: true\n  apps:\n    im.vector.app: { platform: android }\n"))
        XCTAssertTrue(problem("matrix:\n  apps:\n    x: { platform: blackberry }\n")?.contains("matrix.apps[x].platform") == true)
        XCTAssertTrue(problem("matrix:\n  prot: 5000\n")?.contains("matrix.prot") == true)
        XCTAssertTrue(problem("matrix:\n  port: 99999\n")?.contains("matrix.port") == true)
        XCTAssertTrue(problem("matrix:\n  apps:\n    x: { platform: ios, ttl: 5 }\n")?.contains("matrix.apps[x].ttl") == true)
        let env = try MatrixSettings(
            raw: try RawConfig(yaml: "matrix:\n  port: 5000\n", environment: [:]),
            environment: ["PUSHGATE_MATRIX_ENABLED": "true", "PUSHGATE_MATRIX_PORT": "5555"])
        XCTAssertTrue(env.enabled)
        XCTAssertEqual(env.port, 5555)
        XCTAssertThrowsError(try MatrixSettings(raw: try RawConfig(yaml: nil, environment: [:]), environment: ["PUSHGATE_MATRIX_PORT": "x"]))
        let raw = try RawConfig(yaml: "matrix:\n  enabled: true\n", environment: [:])
        XCTAssertFalse(raw.warnings.contains { $0.contains("matrix") }, "\(raw.warnings)")
    }
}
