import Foundation
import ProviderKit
import PushgateCore

/// One notification rendered for HMS `messages:send`, once; each send only splices its target in.
///
/// Body layout: `{"validate_only":false,"message":{<target>[,<rest>]}}` where `<target>` is
/// `"token":["..."]` (one token per request: each token gets its own outcome), `"topic":"..."` or
/// `"condition":"..."`.
public struct HuaweiPreparedMessage: SplicedTargetMessage {
    public let spliced: SplicedJSONBody
    /// The topic-send target of this notification (`topic` or `condition`), if any.
    public let topicTarget: (key: String, value: String)?
    /// The largest request body of the notification's targets (set by `prepare`), which the limit applies to.
    public internal(set) var payloadBytes: Int? = nil

    /// `"token":["…"]` (one token a request: each gets its own outcome), or the topic send's member.
    public func targetMember(for target: PushTarget) -> [UInt8]? {
        switch target {
        case .token(let token):
            return Self.tokenMember(token)
        case .topic:
            guard let t = topicTarget else { return nil }
            return SplicedJSONBody.member(t.key, t.value)
        case .subscription, .channel:
            return nil
        }
    }

    static func tokenMember(_ token: String) -> [UInt8] {
        var w = JSONWriter(reservingCapacity: token.utf8.count + 16)
        w.raw("\"token\":")
        w.strings([token])
        return w.bytes
    }
}

/// gorush's HMS mapping (`notify/notification_hms.go`, go-hms-push's defaults) onto a `message`.
public enum HuaweiMessageMapper {
    /// How an HMS notification names its deliveries and what counts as a background push (as FCM's).
    public static let rules = PlatformRules.dataMessaging

    /// HMS's limit on a message (result code 80300008 above it).
    public static let maxMessageSize = 4096
    /// go-hms-push's `GetDefaultAndroid().TTL`: what gorush sends without `huawei_ttl`.
    public static let defaultTTL = "86400s"

    /// Renders the notification once (no size check).
    public static func render(_ n: PushNotification) -> HuaweiPreparedMessage {
        let message = buildMessage(n)
        var headWriter = JSONWriter(reservingCapacity: 48)
        headWriter.raw(n.dryRun == true ? "{\"validate_only\":true,\"message\":{" : "{\"validate_only\":false,\"message\":{")
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
        }
        return HuaweiPreparedMessage(spliced: SplicedJSONBody(head: headWriter.bytes, tail: tailWriter.bytes), topicTarget: topicTarget)
    }

    /// go-hms-push's `GetDefaultAndroidNotification()`, the notification gorush starts from when it
    /// sets a title, body, image or sound without `huawei_notification`.
    static var defaultAndroidNotification: JSONObject {
        JSONObject([
            ("default_sound", .bool(true)),
            ("click_action", .object(defaultClickAction)),
            ("importance", .string("NORMAL")),
            ("auto_cancel", .bool(true)),
            ("use_default_vibrate", .bool(true)),
            ("use_default_light", .bool(true)),
            ("visibility", .string("PRIVATE")),
            ("foreground_show", .bool(true)),
        ])
    }

    /// go-hms-push's `GetDefaultClickAction()`: open the app (type 1 with an action).
    static var defaultClickAction: JSONObject { JSONObject([("type", .int(1)), ("action", .string("Action"))]) }

    /// The `message` object without its target.
    public static func buildMessage(_ n: PushNotification) -> JSONObject {
        var message = JSONObject()

        // data: gorush's `huawei_data` (a string); Pushgate also sends a `data` object as its JSON text.
        if let d = n.huaweiData, !d.isEmpty {
            message["data"] = .string(d)
        } else if let data = n.data, !data.isEmpty {
            message["data"] = .string(JSONValue.object(data).jsonString)
        }

        var android = JSONObject()
        if let key = n.huaweiCollapseKey, key != 0 { android["collapse_key"] = .int(Int64(key)) }
        android["urgency"] = .string(isHigh(n.priority) ? "HIGH" : "NORMAL")
        if let category = n.category, !category.isEmpty { android["category"] = .string(category) }
        if let ttl = n.huaweiTTL, !ttl.isEmpty {
            android["ttl"] = .string(ttl)
        } else if let ttl = n.timeToLive {
            android["ttl"] = .string("\(ttl)s")
        } else {
            android["ttl"] = .string(defaultTTL)
        }
        if let tag = n.biTag, !tag.isEmpty { android["bi_tag"] = .string(tag) }
        if let target = n.fastAppTarget, target != 0 { android["fast_app_target"] = .int(Int64(target)) }

        // notification: `huawei_notification` as given (click_action defaulted), then gorush's
        // message / title / image / sound on top.
        var notification: JSONObject? = nil
        if let passed = n.huaweiNotification {
            var o = passed
            if o["click_action"] == nil || o["click_action"] == .null { o["click_action"] = .object(defaultClickAction) }
            notification = o
        }
        func ensure() -> JSONObject { notification ?? defaultAndroidNotification }
        if let body = n.message, !body.isEmpty {
            var o = ensure()
            o["body"] = .string(body)
            notification = o
        }
        if let title = n.title, !title.isEmpty {
            var o = ensure()
            o["title"] = .string(title)
            notification = o
        }
        if let image = n.image, !image.isEmpty {
            var o = ensure()
            o["image"] = .string(image)
            notification = o
        }
        if let sound = n.sound?.stringValue, !sound.isEmpty {
            var o = ensure()
            o["sound"] = .string(sound)
            // HMS plays the default ringtone when default_sound is true, whatever `sound` says.
            if n.huaweiNotification?["default_sound"] == nil { o["default_sound"] = .bool(false) }
            notification = o
        } else if var o = notification, o["sound"] == nil || o["sound"] == .string("") {
            // HMS wants a sound or default_sound (go-hms-push refuses neither).
            if o["default_sound"] == nil || o["default_sound"] == .bool(false) { o["default_sound"] = .bool(true) }
            notification = o
        }
        if let notification { android["notification"] = .object(notification) }
        message["android"] = .object(android)
        return message
    }

    /// gorush: `priority: "high"` is HMS urgency HIGH, anything else NORMAL (APNs' "10" counts as high).
    static func isHigh(_ p: String?) -> Bool {
        guard let p else { return false }
        return p.lowercased() == "high" || p == "10"
    }

    /// Renders and checks the size of the largest body this notification will send.
    public static func prepare(_ n: PushNotification) throws(PushFailure) -> HuaweiPreparedMessage {
        if let o = n.huaweiNotification?["click_action"], o != .null, o.objectValue == nil {
            throw PushFailure("huawei_notification.click_action must be an object {type, intent, action, url, rich_resource}")
        }
        var prepared = render(n)
        let largest = prepared.largestSize(of: n.targets(rules), emptyTarget: HuaweiPreparedMessage.tokenMember(""))
        if largest > maxMessageSize {
            throw PushFailure.payloadTooLarge(size: largest, limit: maxMessageSize)
        }
        prepared.payloadBytes = largest
        return prepared
    }
}
