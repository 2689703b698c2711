import Crypto
import Foundation
import Providers
import PushgateCore
import Signing

/// What becomes of one device of a `/notify`.
public enum DevicePlan: Sendable, Equatable {
    /// Send this notification (one token or subscription).
    case send(PushNotification)
    /// Answer the pushkey in `rejected` without sending (the homeserver deletes the pusher).
    case reject(String)
    /// Send nothing and do not reject (nothing to show, an endpoint outside `allowed_endpoints`).
    case nothing(String)
}

/// Sygnal's mapping from a Matrix notification to each provider's message, as facts taken from
/// Sygnal's pushkins (docs/matrix.md names each one's source): `apnspushkin.py`, `gcmpushkin.py`,
/// `webpushpushkin.py`, `apnstruncate.py`.
public enum SygnalMapping {
    /// APNs: longest display name, room name or alias in `loc-args`, in characters.
    static let maxFieldLength = 1024
    /// APNs: the payload is shortened to this many bytes of JSON.
    static let apnsMaxPayloadBytes = 4096
    /// FCM: longest data value, in UTF-8 bytes (then cut and ended with "…").
    static let fcmMaxBytesPerField = 1024
    /// Web Push: longest `content.body`, in characters (then cut to 999 and ended with "…").
    static let webPushMaxBodyLength = 1000
    /// Web Push: a longer `content.ciphertext` is left out.
    static let webPushMaxCiphertextLength = 2000

    public static func plan(_ n: MatrixNotification, device: MatrixNotification.Device, app: MatrixApp) -> DevicePlan {
        switch app.platform {
        case .ios: return apns(n, device, app)
        case .android: return fcm(n, device, app)
        case .webpush: return webPush(n, device, app)
        default: return .reject("platform \(app.platform.name) is not served on the Matrix API")
        }
    }

    /// The pusher's `default_payload`: nil when absent, `.failure` when not an object (Sygnal
    /// rejects the pushkey then).
    static func defaultPayload(_ device: MatrixNotification.Device) -> Result<JSONObject?, Never>? {
        guard let v = device.data?["default_payload"] else { return .success(nil) }
        if case .object(let o) = v { return .success(o) }
        if case .null = v { return .success(nil) }
        return nil
    }

    // MARK: APNs

    /// `event_id_only` is what Synapse sends for a pusher with `data.format: event_id_only`: the
    /// event id and no type.
    static func isEventIDOnly(_ n: MatrixNotification) -> Bool { n.eventID != nil && n.type == nil }

    /// The APNs device token of a pushkey: base64 of the token's bytes, sent as lowercase hex
    /// (`convert_device_token_to_hex`), or the pushkey itself when that is off.
    public static func apnsToken(_ pushkey: String, convert: Bool) -> String? {
        guard convert else { return pushkey }
        var s = pushkey.trimmingCharacters(in: .whitespaces)
        s = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.utf8.count % 4 != 0 { s += "=" }
        guard let bytes = Data(base64Encoded: s), !bytes.isEmpty else { return nil }
        return Hex.encode(bytes)
    }

    static func apns(_ n: MatrixNotification, _ device: MatrixNotification.Device, _ app: MatrixApp) -> DevicePlan {
        guard let dp = defaultPayload(device), case .success(let defaults) = dp else {
            return .reject("data.default_payload is not an object")
        }
        guard let token = apnsToken(device.pushkey, convert: app.convertTokenToHex) else {
            return .reject("pushkey is not base64 of an APNs token (convert_device_token_to_hex)")
        }
        var payload: [(String, JSONValue)] = []
        var aps: [(String, JSONValue)] = []
        if isEventIDOnly(n) {
            for (k, v) in defaults ?? JSONObject() {
                if k == "aps", case .object(let o) = v { aps = o.entries.map { ($0.key, $0.value) } } else { payload.append((k, v)) }
            }
            if let v = n.roomID { put(&payload, "room_id", .string(v)) }
            if let v = n.eventID { put(&payload, "event_id", .string(v)) }
            // Sygnal 0.17 `send_badge_counts` (default true): false leaves the counts out.
            if app.sendBadgeCounts, let v = n.unread { put(&payload, "unread_count", .int(v)) }
            if app.sendBadgeCounts, let v = n.missedCalls { put(&payload, "missed_calls", .int(v)) }
        } else {
            let alert = apnsAlert(n)
            var badge: Int64?
            if app.sendBadgeCounts {
                if let u = n.unread { badge = u }
                if let m = n.missedCalls { badge = (badge ?? 0) + m }
            }
            if alert == nil, badge == nil { return .nothing("no alert and no badge for this event") }
            if n.type != nil {
                for (k, v) in defaults ?? JSONObject() {
                    if k == "aps", case .object(let o) = v { aps = o.entries.map { ($0.key, $0.value) } } else { payload.append((k, v)) }
                }
            }
            if let alert {
                var a: [(String, JSONValue)] = []
                if let i = aps.firstIndex(where: { $0.0 == "alert" }), case .object(let o) = aps[i].1 { a = o.entries.map { ($0.key, $0.value) } }
                put(&a, "loc-key", .string(alert.key))
                put(&a, "loc-args", .array(alert.args.map(JSONValue.string)))
                put(&aps, "alert", .object(JSONObject(a)))
            }
            if let badge { put(&aps, "badge", .int(badge)) }
            if alert != nil, let v = n.roomID { put(&payload, "room_id", .string(v)) }
            if alert != nil, let v = n.eventID { put(&payload, "event_id", .string(v)) }
        }
        truncateAPNs(aps: &aps, payload: payload)
        var out = PushNotification(platform: .ios, tokens: [token])
        applyAPS(aps, to: &out)
        out.data = payload.isEmpty ? nil : JSONObject(payload)
        out.priority = n.prio == "low" ? "normal" : "high"
        out.topic = app.topic
        out.pushType = app.pushType
        out.dedupKey = n.eventID.map { dedupKey($0) }
        return .send(out)
    }

    /// The `aps` dictionary as the notification's fields: alert, badge, sound, category, thread-id,
    /// content-available, mutable-content, interruption-level (Pushgate renders `aps` itself).
    static func applyAPS(_ aps: [(String, JSONValue)], to n: inout PushNotification) {
        for (k, v) in aps {
            switch (k, v) {
            case ("alert", .string(let s)): n.message = s
            case ("alert", .object(let o)):
                var a = APNsAlert()
                a.title = o["title"]?.stringValue
                a.subtitle = o["subtitle"]?.stringValue
                a.body = o["body"]?.stringValue
                a.locKey = o["loc-key"]?.stringValue
                a.locArgs = o["loc-args"].flatMap(strings)
                a.titleLocKey = o["title-loc-key"]?.stringValue
                a.titleLocArgs = o["title-loc-args"].flatMap(strings)
                a.actionLocKey = o["action-loc-key"]?.stringValue
                a.launchImage = o["launch-image"]?.stringValue
                n.alert = a
            case ("badge", .int(let b)): n.badge = Int(clamping: b)
            case ("sound", .string(let s)): n.sound = .string(s)
            case ("sound", .object(let o)): n.sound = .object(o)
            case ("category", .string(let s)): n.category = s
            case ("thread-id", .string(let s)): n.threadID = s
            case ("content-available", .int(let i)): n.contentAvailable = i == 1
            case ("mutable-content", .int(let i)): n.mutableContent = i == 1
            case ("interruption-level", .string(let s)): n.interruptionLevel = s
            default: break
            }
        }
    }

    static func strings(_ v: JSONValue) -> [String]? {
        guard case .array(let l) = v else { return nil }
        return l.compactMap { $0.stringValue }
    }

    /// Sygnal's `loc-key` and `loc-args` of the full format, by event type.
    public static func apnsAlert(_ n: MatrixNotification) -> (key: String, args: [String])? {
        // Sygnal: " " when neither is set (or both are empty), else the display name when present.
        let from: String = {
            if (n.sender ?? "").isEmpty, (n.senderDisplayName ?? "").isEmpty { return " " }
            return String((n.senderDisplayName ?? n.sender ?? " ").prefix(maxFieldLength))
        }()
        switch n.type {
        case "m.room.message", "m.room.encrypted":
            let room =
                nonEmpty(n.roomName).map { String($0.prefix(maxFieldLength)) } ?? nonEmpty(n.roomAlias).map { String($0.prefix(maxFieldLength)) }
            var contentDisplay: String?
            var actionDisplay: String?
            var isImage = false
            if let c = n.content, let msgtype = c["msgtype"], let body = c["body"] {
                let text = body.stringValue ?? body.jsonString
                if msgtype.stringValue == "m.emote" { actionDisplay = text } else { contentDisplay = text }
                if msgtype.stringValue == "m.image" { isImage = true }
            }
            if let room {
                if isImage { return ("IMAGE_FROM_USER_IN_ROOM", [from, contentDisplay ?? "", room]) }
                if let c = nonEmpty(contentDisplay) { return ("MSG_FROM_USER_IN_ROOM_WITH_CONTENT", [from, room, c]) }
                if let a = nonEmpty(actionDisplay) { return ("ACTION_FROM_USER_IN_ROOM", [room, from, a]) }
                return ("MSG_FROM_USER_IN_ROOM", [from, room])
            }
            if isImage { return ("IMAGE_FROM_USER", [from, contentDisplay ?? ""]) }
            if let c = nonEmpty(contentDisplay) { return ("MSG_FROM_USER_WITH_CONTENT", [from, c]) }
            if let a = nonEmpty(actionDisplay) { return ("ACTION_FROM_USER", [from, a]) }
            return ("MSG_FROM_USER", [from])
        case "m.call.invite":
            let sdp = n.content?["offer"]?["sdp"]?.stringValue ?? ""
            return (sdp.contains("m=video") ? "VIDEO_CALL_FROM_USER" : "VOICE_CALL_FROM_USER", [from])
        case "m.room.member":
            guard n.userIsTarget == true, n.membership == "invite" else { return nil }
            if let name = nonEmpty(n.roomName) ?? nonEmpty(n.roomAlias) {
                return ("USER_INVITE_TO_NAMED_ROOM", [from, String(name.prefix(maxFieldLength))])
            }
            return ("USER_INVITE_TO_CHAT", [from])
        case nil:
            return nil
        default:
            return ("MSG_FROM_USER", [from])
        }
    }

    /// Sygnal's `apnstruncate`: while the payload's JSON is over 4096 bytes, the longest of
    /// `alert.body` and the `loc-args` loses characters from its end. Cuts many characters per
    /// round (never more than the excess), so a huge body costs a few rounds, not one per character.
    static func truncateAPNs(aps: inout [(String, JSONValue)], payload: [(String, JSONValue)]) {
        guard let ai = aps.firstIndex(where: { $0.0 == "alert" }), case .object(let alertObject) = aps[ai].1 else { return }
        var alert = alertObject.entries.map { ($0.key, $0.value) }
        // No choppable can keep more than the whole payload's bytes: cut each to that first, so a
        // round below renders kilobytes, whatever the body's size.
        func capped(_ v: JSONValue) -> JSONValue {
            guard case .string(let s) = v, s.utf8.count > apnsMaxPayloadBytes else { return v }
            return .string(dropUTF8(s, bytes: s.utf8.count - apnsMaxPayloadBytes))
        }
        for i in alert.indices {
            switch alert[i] {
            case ("body", let v): alert[i].1 = capped(v)
            case ("loc-args", .array(let l)): alert[i].1 = .array(l.map(capped))
            default: break
            }
        }
        func size() -> Int {
            var all = payload
            var a = aps
            a[ai].1 = .object(JSONObject(alert))
            all.insert(("aps", .object(JSONObject(a))), at: 0)
            return JSONValue.object(JSONObject(all)).jsonString.utf8.count
        }
        for _ in 0..<64 {
            let excess = size() - apnsMaxPayloadBytes
            guard excess > 0 else { return }
            // The choppables: alert.body and each loc-arg.
            var fields: [(String, Int?)] = []
            if alert.contains(where: { $0.0 == "body" }) { fields.append(("body", nil)) }
            if let li = alert.firstIndex(where: { $0.0 == "loc-args" }), case .array(let args) = alert[li].1 {
                for i in args.indices { fields.append(("loc-args", i)) }
            }
            func get(_ f: (String, Int?)) -> String {
                guard let v = alert.first(where: { $0.0 == f.0 })?.1 else { return "" }
                if let i = f.1, case .array(let l) = v, i < l.count { return l[i].stringValue ?? "" }
                return v.stringValue ?? ""
            }
            let sized = fields.map { ($0, get($0).utf8.count) }.sorted { $0.1 > $1.1 }
            guard let longest = sized.first, longest.1 > 0 else { return }
            let second = sized.count > 1 ? sized[1].1 : 0
            let cut = max(1, min(excess, longest.1 - second))
            let shortened = dropUTF8(get(longest.0), bytes: cut)
            if let i = longest.0.1, let li = alert.firstIndex(where: { $0.0 == "loc-args" }), case .array(var l) = alert[li].1 {
                l[i] = .string(shortened)
                alert[li].1 = .array(l)
            } else if let bi = alert.firstIndex(where: { $0.0 == "body" }) {
                alert[bi].1 = .string(shortened)
            }
            aps[ai].1 = .object(JSONObject(alert))
        }
    }

    /// `s` without whole characters from its end until at least `bytes` UTF-8 bytes are gone.
    static func dropUTF8(_ s: String, bytes: Int) -> String {
        let budget = s.utf8.count - bytes
        guard budget > 0 else { return "" }
        var used = 0
        var end = s.startIndex
        for i in s.indices {
            let n = s[i].utf8.count
            if used + n > budget { break }
            used += n
            end = s.index(after: i)
        }
        return String(s[..<end])
    }

    // MARK: FCM

    /// Sygnal's `truncate_str`: a string over `max` UTF-8 bytes is cut to `max - 3` bytes (whole
    /// characters) and ends with "…".
    public static func truncateString(_ s: String, maxBytes: Int) -> (String, Bool) {
        guard s.utf8.count > maxBytes else { return (s, false) }
        var out = ""
        var used = 0
        for ch in s {
            let n = String(ch).utf8.count
            if used + n > maxBytes - 3 { break }
            out.append(ch)
            used += n
        }
        return (out + "…", true)
    }

    static func fcm(_ n: MatrixNotification, _ device: MatrixNotification.Device, _ app: MatrixApp) -> DevicePlan {
        guard let dp = defaultPayload(device), case .success(let defaults) = dp else {
            return .reject("data.default_payload is not an object")
        }
        // FCM v1 data values are strings: default_payload's other values go as their JSON.
        var data: [(String, JSONValue)] = (defaults ?? JSONObject()).map { entry in
            (entry.key, JSONValue.string(entry.value.stringValue ?? entry.value.jsonString))
        }
        let fields: [(String, String?)] = [
            ("event_id", n.eventID), ("type", n.type), ("sender", n.sender), ("room_name", n.roomName), ("room_alias", n.roomAlias),
            ("membership", n.membership), ("sender_display_name", n.senderDisplayName),
        ]
        for (k, v) in fields {
            guard let v else { continue }
            put(&data, k, .string(truncateString(v, maxBytes: fcmMaxBytesPerField).0))
        }
        // v1: the content's string members as content_<member>, each truncated.
        for (k, v) in n.content ?? JSONObject() {
            guard case .string(let s) = v else { continue }
            put(&data, "content_" + k, .string(truncateString(s, maxBytes: fcmMaxBytesPerField).0))
        }
        if let v = n.roomID { put(&data, "room_id", .string(truncateString(v, maxBytes: fcmMaxBytesPerField).0)) }
        put(&data, "prio", .string(n.prio == "low" ? "normal" : "high"))
        // Sygnal 0.17 (`_build_data`): the counts only with `send_badge_counts` (default true), each
        // only when not zero; a notification with no room, no event and no count left is not sent.
        var counts: [(String, JSONValue)] = []
        if app.sendBadgeCounts {
            if let v = n.unread, v != 0 { counts.append(("unread", .string(String(v)))) }
            if let v = n.missedCalls, v != 0 { counts.append(("missed_calls", .string(String(v)))) }
        }
        if (n.roomID ?? "").isEmpty, (n.eventID ?? "").isEmpty, counts.isEmpty {
            return .nothing("badge-only notification with no count to send (send_badge_counts)")
        }
        for (k, v) in counts { put(&data, k, v) }
        var out = PushNotification(platform: .android, tokens: [device.pushkey])
        out.data = JSONObject(data)
        out.priority = n.prio == "low" ? "normal" : "high"
        if let o = app.fcmOptions {
            out.android = o["android"]?.objectValue
            out.apns = o["apns"]?.objectValue
            out.webpush = o["webpush"]?.objectValue
            out.fcmOptions = o["fcm_options"]?.objectValue
        }
        out.dedupKey = n.eventID.map { dedupKey($0) }
        return .send(out)
    }

    // MARK: Web Push

    static func webPush(_ n: MatrixNotification, _ device: MatrixNotification.Device, _ app: MatrixApp) -> DevicePlan {
        guard let data = device.data else { return .reject("data is not an object") }
        if data["events_only"] == .bool(true), n.eventID == nil { return .nothing("events_only and no event_id") }
        guard case .string(let endpoint)? = data["endpoint"], case .string(let auth)? = data["auth"] else {
            return .reject("subscription incomplete: data.endpoint and data.auth are required strings")
        }
        let host = URLComponents(string: endpoint).map { c in (c.host ?? "") + (c.port.map { ":\($0)" } ?? "") } ?? ""
        if let allowed = app.allowedEndpoints, !allowed.isEmpty, !allowed.contains(where: { Glob.matches($0, host) }) {
            return .nothing("endpoint host \(host.logSafe(max: 128)) is not in allowed_endpoints")
        }
        var payload: [(String, JSONValue)] = []
        if case .object(let o)? = data["default_payload"] { payload = o.entries.map { ($0.key, $0.value) } }
        let fields: [(String, String?)] = [
            ("room_id", n.roomID), ("room_name", n.roomName), ("room_alias", n.roomAlias), ("membership", n.membership),
            ("event_id", n.eventID), ("sender", n.sender), ("sender_display_name", n.senderDisplayName),
        ]
        for (k, v) in fields { if let v, !v.isEmpty { put(&payload, k, .string(v)) } }
        if n.userIsTarget == true { put(&payload, "user_is_target", .bool(true)) }
        if let v = n.type, !v.isEmpty { put(&payload, "type", .string(v)) }
        if let v = n.unread { put(&payload, "unread", .int(v)) }
        if let v = n.missedCalls { put(&payload, "missed_calls", .int(v)) }
        if let content = n.content, !content.isEmpty {
            var c = content.entries.filter { $0.key != "formatted_body" }.map { ($0.key, $0.value) }
            if let i = c.firstIndex(where: { $0.0 == "body" }), case .string(let body) = c[i].1, body.count > webPushMaxBodyLength {
                c[i].1 = .string(String(body.prefix(webPushMaxBodyLength - 1)) + "…")
            }
            if let i = c.firstIndex(where: { $0.0 == "ciphertext" }), case .string(let t) = c[i].1, t.count > webPushMaxCiphertextLength {
                c.remove(at: i)
            }
            put(&payload, "content", .object(JSONObject(c)))
        }
        var out = PushNotification(platform: .webpush)
        out.subscriptions = [WebPushSubscription(endpoint: endpoint, keys: .init(p256dh: device.pushkey, auth: auth))]
        out.payload = JSONValue.object(JSONObject(payload)).jsonString
        out.urgency = n.prio == "low" ? "low" : "normal"
        out.timeToLive = Int64(app.ttl)
        if data["only_last_per_room"] == .bool(true), let room = n.roomID {
            // A Topic per room (`collapse_id`: replaces the previous undelivered message of the room): 22 bytes of
            // a hash of the room id in base64url, as Sygnal (which hashes with BLAKE2s; SHA-256 here).
            out.collapseID = Base64URL.encode(Array(SHA256.hash(data: Array(room.utf8)).prefix(22)))
        }
        out.dedupKey = n.eventID.map { dedupKey($0) }
        return .send(out)
    }

    // MARK: helpers

    /// The dedup key of an event's pushes: a homeserver's retry of the same event to the same
    /// pushkey (the gateway keys dedup per app, platform and token) is sent once.
    static func dedupKey(_ eventID: String) -> String {
        "matrix:" + Hex.encode(SHA256.hash(data: Array(eventID.utf8)))
    }

    static func put(_ list: inout [(String, JSONValue)], _ key: String, _ value: JSONValue) {
        if let i = list.firstIndex(where: { $0.0 == key }) { list[i].1 = value } else { list.append((key, value)) }
    }

    static func nonEmpty(_ s: String?) -> String? {
        guard let s, !s.isEmpty else { return nil }
        return s
    }
}
