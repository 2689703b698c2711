import Foundation
import ProviderKit
import PushgateCore

/// One notification rendered for FCM HTTP v1, once; each send only splices its target in.
///
/// Body layout: `{["validate_only":true,]"message":{<target>[,<rest>]}}` where `<target>` is
/// `"token":"..."`, `"topic":"..."` or `"condition":"..."`.
public struct FCMPreparedMessage: SplicedTargetMessage {
    public let spliced: SplicedJSONBody
    /// The topic-send target of this notification (`topic` or `condition`), if any.
    public let topicTarget: (key: String, value: String)?
    /// The largest request body of the notification's targets (set by `prepare`), which the limit applies to.
    public internal(set) var payloadBytes: Int? = nil

    /// `"token"`, a `/topics/` token's `"topic"`, a `fid:` token's `"fid"`, or the topic send's member.
    public func targetMember(for target: PushTarget) -> [UInt8]? {
        switch target {
        case .token(let token):
            if token.hasPrefix("/topics/") {
                return SplicedJSONBody.member("topic", String(token.dropFirst("/topics/".count)))
            }
            if let fid = FCMMessageMapper.installationID(in: token) {
                return SplicedJSONBody.member("fid", fid)
            }
            return SplicedJSONBody.member("token", token)
        case .topic:
            guard let t = topicTarget else { return nil }
            return SplicedJSONBody.member(t.key, t.value)
        case .subscription, .channel:
            return nil
        }
    }
}

/// gorush's FCM mapping onto an HTTP v1 `message`.
public enum FCMMessageMapper {
    /// How an FCM notification names its deliveries and what counts as a background push.
    public static let rules = PlatformRules.dataMessaging

    /// FCM's limit on a message.
    public static let maxMessageSize = 4096
    /// gorush's maximum `time_to_live` (4 weeks).
    public static let maxTimeToLive: Int64 = 2_419_200

    /// Keys of gorush's legacy `notification` object that FCM v1 has under `android.notification`.
    static let legacyAndroidNotificationKeys: [(String, String)] = [
        ("android_channel_id", "channel_id"), ("channel_id", "channel_id"), ("icon", "icon"), ("sound", "sound"),
        ("tag", "tag"), ("color", "color"), ("click_action", "click_action"),
        ("body_loc_key", "body_loc_key"), ("body_loc_args", "body_loc_args"),
        ("title_loc_key", "title_loc_key"), ("title_loc_args", "title_loc_args"),
    ]

    /// A token written `fid:<Firebase Installation ID>` is sent to that installation (FCM v1's
    /// `message.fid` target) instead of to a registration token, as `/topics/<name>` is a topic.
    public static let installationIDPrefix = "fid:"

    /// The Firebase Installation ID of a `fid:` token, nil for any other token.
    public static func installationID(in token: String) -> String? {
        guard token.hasPrefix(installationIDPrefix) else { return nil }
        return String(token.dropFirst(installationIDPrefix.count))
    }

    /// A Firebase Installation ID as Firebase makes them: 22 characters of URL-safe base64
    /// (`[A-Za-z0-9_-]`, 128 bits whose first four are `0111`, so it starts with c, d, e or f).
    public static func isInstallationID(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard b.count == 22, let first = b.first, (UInt8(ascii: "c")...UInt8(ascii: "f")).contains(first) else { return false }
        return b.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
        }
    }

    /// Renders the notification once (no size check).
    public static func render(_ n: PushNotification) throws(PushFailure) -> FCMPreparedMessage {
        if let ttl = n.timeToLive, ttl < 0 || ttl > maxTimeToLive {
            throw PushFailure("the message's TimeToLive field must be an integer between 0 and 2419200 (4 weeks)")
        }
        let message = buildMessage(n)

        var headWriter = JSONWriter(reservingCapacity: 32)
        if n.dryRun == true { headWriter.raw("{\"validate_only\":true,\"message\":{") } else { headWriter.raw("{\"message\":{") }
        var tailWriter = JSONWriter(reservingCapacity: 512)
        for (k, v) in message {
            tailWriter.raw(",")
            tailWriter.string(k)
            tailWriter.raw(":")
            tailWriter.write(v)
        }
        tailWriter.raw("}}")

        var topicTarget: (key: String, value: String)? = nil
        if let condition = n.condition, !condition.isEmpty {
            topicTarget = ("condition", condition)
        } else if let topic = n.topic, !topic.isEmpty {
            topicTarget = ("topic", topic.hasPrefix("/topics/") ? String(topic.dropFirst("/topics/".count)) : topic)
        } else if let to = n.to, to.hasPrefix("/topics/") {
            topicTarget = ("topic", String(to.dropFirst("/topics/".count)))
        }
        return FCMPreparedMessage(spliced: SplicedJSONBody(head: headWriter.bytes, tail: tailWriter.bytes), topicTarget: topicTarget)
    }

    /// The `message` object without its target, keys in FCM's documented order.
    public static func buildMessage(_ n: PushNotification) -> JSONObject {
        var message = JSONObject()

        // notification {title, body, image}: the pass-through object (its v1 keys), then gorush's fields.
        var notification = JSONObject()
        var legacyAndroid = JSONObject()
        if let passed = n.fcmNotification {
            for (k, v) in passed {
                switch k {
                case "title", "body", "image": notification[k] = v
                case "badge":
                    if let count = v.intValue ?? v.stringValue.flatMap({ Int64($0) }) { legacyAndroid["notification_count"] = .int(count) }
                default:
                    if let mapped = legacyAndroidNotificationKeys.first(where: { $0.0 == k }) {
                        legacyAndroid[mapped.1] = v
                    }
                // other unknown keys are dropped, as gorush's typed decoding drops them
                }
            }
        }
        if let title = n.title, !title.isEmpty { notification["title"] = .string(title) }
        if let body = n.message, !body.isEmpty { notification["body"] = .string(body) }
        if let image = n.image, !image.isEmpty { notification["image"] = .string(image) }
        let hasNotification = !notification.isEmpty
        if hasNotification { message["notification"] = .object(notification) }

        // data: every value a string (gorush: strings as they are, anything else JSON-encoded).
        if let data = n.data, !data.isEmpty {
            var out = JSONObject()
            for (k, v) in data { out[k] = .string(v.fcmDataString) }
            message["data"] = .object(out)
        }

        // android: pass-through, then gorush's priority / time_to_live / sound, normalised for v1.
        var android = n.android ?? JSONObject()
        if let p = android["priority"]?.stringValue {
            android["priority"] = .string(normalizedPriority(p) ?? p)
        } else if let p = n.priority.flatMap(normalizedPriority) {
            // gorush's top-level priority; a value FCM does not know is left out (not an error).
            android["priority"] = .string(p)
        }
        if let ttl = android["ttl"] {
            switch ttl {
            case .int(let s): android["ttl"] = .string("\(s)s")
            case .double(let d) where d.isFinite && d >= 0 && d <= 1e10:
                // Ingest allows 0...2419200 s; fractions are kept as FCM's duration format allows.
                android["ttl"] = .string(d == d.rounded() ? "\(Int64(d))s" : "\(d)s")
            case .string(let s) where Int64(s) != nil: android["ttl"] = .string("\(s)s")
            default: break
            }
        } else if let ttl = n.timeToLive {
            android["ttl"] = .string("\(ttl)s")
        }
        if !legacyAndroid.isEmpty || n.sound?.stringValue != nil {
            var an = android["notification"]?.objectValue ?? JSONObject()
            for (k, v) in legacyAndroid where an[k] == nil { an[k] = v }
            if let sound = n.sound?.stringValue, !sound.isEmpty, an["sound"] == nil { an["sound"] = .string(sound) }
            if !an.isEmpty { android["notification"] = .object(an) }
        }
        if !android.isEmpty { message["android"] = .object(android) }

        // apns: pass-through, then gorush's mutable_content / content_available / sound.
        var apns = n.apns ?? JSONObject()
        var payload = apns["payload"]?.objectValue ?? JSONObject()
        var aps = payload["aps"]?.objectValue ?? JSONObject()
        var headers = apns["headers"]?.objectValue ?? JSONObject()
        var touchedAPS = false
        if n.mutableContent == true, hasNotification, aps["mutable-content"] == nil {
            aps["mutable-content"] = .int(1)
            touchedAPS = true
        }
        if n.contentAvailable == true {
            if aps["content-available"] == nil {
                aps["content-available"] = .int(1)
                touchedAPS = true
            }
            if !hasNotification {
                // A background (data-only) wake-up: APNs requires priority 5 and push type background.
                if headers["apns-priority"] == nil { headers["apns-priority"] = .string("5") }
                if headers["apns-push-type"] == nil { headers["apns-push-type"] = .string("background") }
            }
        }
        if let sound = n.sound?.stringValue, !sound.isEmpty, aps["sound"] == nil {
            aps["sound"] = .string(sound)
            touchedAPS = true
        } else if let sound = n.sound?.objectValue, aps["sound"] == nil {
            aps["sound"] = .object(sound)
            touchedAPS = true
        }
        if !headers.isEmpty { apns["headers"] = .object(headers) }
        if touchedAPS || payload["aps"] != nil {
            payload["aps"] = .object(aps)
            apns["payload"] = .object(payload)
        }
        if !apns.isEmpty { message["apns"] = .object(apns) }

        if let webpush = n.webpush, !webpush.isEmpty { message["webpush"] = .object(webpush) }
        // `analytics_label` (the notification's own member) fills FCM's platform-independent
        // `fcm_options.analytics_label` unless the pass-through `fcm_options` sets it.
        var options = n.fcmOptions ?? JSONObject()
        if let label = n.analyticsLabel, options["analytics_label"] == nil { options["analytics_label"] = .string(label) }
        if !options.isEmpty { message["fcm_options"] = .object(options) }
        return message
    }

    /// FCM's AndroidMessagePriority for gorush's `priority` ("high"/"normal", or APNs' "10"/"5"); nil otherwise.
    static func normalizedPriority(_ p: String) -> String? {
        switch p.lowercased() {
        case "high", "10": return "HIGH"
        case "normal", "5": return "NORMAL"
        default: return nil
        }
    }

    /// Renders and checks the size of the largest body this notification will send.
    public static func prepare(_ n: PushNotification) throws(PushFailure) -> FCMPreparedMessage {
        var prepared = try render(n)
        let largest = prepared.largestSize(of: n.targets(rules), emptyTarget: SplicedJSONBody.member("token", ""))
        if largest > maxMessageSize {
            throw PushFailure.payloadTooLarge(size: largest, limit: maxMessageSize)
        }
        prepared.payloadBytes = largest
        return prepared
    }
}
