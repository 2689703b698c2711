import Foundation
import ProviderKit
import PushgateCore

/// The request member `xiaomi` (`"xiaomi": {"channel_id": "…", …}`): what a Xiaomi push sets beyond
/// gorush's `title` / `message` / `data`, decoded strictly and checked against Xiaomi's limits
/// (docs/china-vendors.md, "Xiaomi").
public struct XiaomiOptions: Sendable, Equatable {
    /// `extra.channel_id`: the notification channel created in Xiaomi's console (private or public
    /// message channel): the message's classification.
    public var channelID: String?
    /// `notify_type`: -1 (all) or an OR of 1 (sound), 2 (vibrate), 4 (lights).
    public var notifyType: Int64?
    /// `notify_id`: notifications with the same id replace each other.
    public var notifyID: Int64?
    /// `extra.notify_effect`: 1 open the app, 2 open `intent_uri`, 3 open `web_uri`.
    public var notifyEffect: Int64?
    public var intentURI: String?
    public var webURI: String?
    /// `extra.notify_foreground`: show the notification while the app is in the foreground.
    public var notifyForeground: Bool?
    /// `extra.sound_uri`.
    public var soundURI: String?
    /// `extra.callback`: Xiaomi's receipt URL, and `extra.callback.param`.
    public var callback: String?
    public var callbackParam: String?
    /// `extra.only_send_once`: not re-sent to a device that was offline.
    public var onlySendOnce: Bool?

    public init() {}

    /// The member's name in a notification.
    public static let member = "xiaomi"
    public static let known: Set<String> = [
        "channel_id", "notify_type", "notify_id", "notify_effect", "intent_uri", "web_uri", "notify_foreground", "sound_uri", "callback",
        "callback_param", "only_send_once",
    ]
    /// Longest URI taken (Xiaomi states none for intent and web URIs).
    public static let maxURILength = 1024
    /// `extra.callback.param`: at most 64 bytes (Xiaomi's Java SDK guide, pId=1695).
    public static let maxCallbackParamLength = 64
    public static let maxCallbackLength = 512

    /// Decodes and checks the member; `path` is where it sits (`notifications[0].xiaomi`).
    public init(_ value: JSONValue, path: String) throws(RequestMemberProblem) {
        try self.init(RequestMemberReader.vendorObject(value, at: path, known: Self.known))
    }

    /// Decodes and checks the member from its reader (known keys only).
    public init(_ r: RequestMemberReader) throws(RequestMemberProblem) {
        channelID = try r.text("channel_id", maxLength: XiaomiConfiguration.maxChannelIDLength)
        notifyType = try r.int("notify_type", in: -1...7)
        if notifyType == 0 { throw RequestMemberProblem(field: r.field("notify_type"), problem: "must be -1 or an OR of 1, 2 and 4") }
        notifyID = try r.int("notify_id", in: 0...Int64(Int32.max))
        notifyEffect = try r.int("notify_effect", oneOf: [1, 2, 3])
        intentURI = try r.text("intent_uri", maxLength: Self.maxURILength)
        webURI = try r.url("web_uri", maxLength: Self.maxURILength)
        notifyForeground = try r.bool("notify_foreground")
        soundURI = try r.text("sound_uri", maxLength: Self.maxURILength)
        callback = try r.url("callback", maxLength: Self.maxCallbackLength)
        callbackParam = try r.text("callback_param", maxLength: Self.maxCallbackParamLength)
        if let p = callbackParam, p.utf8.count > Self.maxCallbackParamLength {
            throw RequestMemberProblem(
                field: r.field("callback_param"), problem: "is \(p.utf8.count) bytes, at most \(Self.maxCallbackParamLength) allowed",
                limit: "\(Self.maxCallbackParamLength) bytes")
        }
        onlySendOnce = try r.bool("only_send_once")
        if notifyEffect == 2 && intentURI == nil {
            throw RequestMemberProblem(field: r.field("intent_uri"), problem: "is required when notify_effect is 2")
        }
        if notifyEffect == 3 && webURI == nil {
            throw RequestMemberProblem(field: r.field("web_uri"), problem: "is required when notify_effect is 3")
        }
        if callbackParam != nil && callback == nil {
            throw RequestMemberProblem(field: r.field("callback"), problem: "is required with callback_param")
        }
    }
}

/// The `xiaomi` member as the request decoder reads it: checked in full, kept as it came in
/// `PushNotification.fields["xiaomi"]`, and read back by the provider.
public enum XiaomiRequestMember {
    public static let member = RequestMember(
        XiaomiOptions.member, type: "object",
        doc: "Xiaomi's own fields: channel_id (the classification), notify_type, notify_id, notify_effect, intent_uri, web_uri, "
            + "notify_foreground, sound_uri, callback, callback_param, only_send_once (docs/china-vendors.md)"
    ) { r throws(RequestMemberProblem) in
        guard let o = try r.vendorObject(XiaomiOptions.member, known: XiaomiOptions.known) else { return nil }
        _ = try XiaomiOptions(o)
        return r.present(XiaomiOptions.member)
    }

    /// The decoded member of `n` (nil: absent).
    public static func options(of n: PushNotification) throws(RequestMemberProblem) -> XiaomiOptions? {
        guard let v = n.fields[XiaomiOptions.member] else { return nil }
        return try XiaomiOptions(v, path: XiaomiOptions.member)
    }
}

extension PushNotification {
    /// `xiaomi`: Xiaomi's own fields of this notification, as they came (decoded by `XiaomiRequestMember`).
    public var xiaomi: JSONObject? {
        get { fields.object(XiaomiOptions.member) }
        set { fields.set(XiaomiOptions.member, newValue) }
    }
}
