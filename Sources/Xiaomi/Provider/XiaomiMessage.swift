import Foundation
import ProviderKit
import PushgateCore

/// A notification rendered once as Xiaomi's form body (`/v3/message/regid`), without its target:
/// `registration_id` is put in front per delivery.
public struct XiaomiPreparedMessage: PreparedPush, Sendable {
    /// `restricted_package_name=…&title=…&…` (form-encoded, no leading `&`).
    public let form: String
    public let payloadBytes: Int?

    /// The whole body for one registration id.
    public func body(for token: String) -> [UInt8] {
        Array(("registration_id=" + OAuthTokenCache.formEncode(token) + "&" + form).utf8)
    }
}

/// gorush's `title` / `message` / `data` and the `xiaomi` member mapped to Xiaomi's notification
/// message (`pass_through=0`). Xiaomi no longer delivers pass-through messages (its announcement,
/// dev.mi.com pId=1529), so `data` travels as the notification's `payload` and a push without a
/// title and a message is refused rather than sent to be dropped.
public enum XiaomiMessageMapper {
    /// `title`: fewer than 50 characters (dev.mi.com pId=1559).
    public static let maxTitleLength = 49
    /// `description`: fewer than 128 characters (pId=1559).
    public static let maxDescriptionLength = 127
    /// `payload`: Xiaomi states no byte limit; 4096 bytes is the Android total the aggregators
    /// document (docs/china-vendors.md: one source).
    public static let maxPayloadBytes = 4096
    /// `time_to_live` (ms): Xiaomi keeps a message at most two weeks (pId=1559: private messages
    /// up to 10 days, public ones 1 day, whatever is asked).
    public static let maxTimeToLiveSeconds: Int64 = 14 * 86_400

    /// Whether a push may go to Xiaomi at all, as the request is checked (names the field).
    public static func check(_ n: PushNotification, options: XiaomiOptions?, defaultChannelID: String) -> RequestMemberProblem? {
        if let problem = checkMessage(n, options: options) { return problem }
        if (options?.channelID ?? "").isEmpty && defaultChannelID.isEmpty {
            return RequestMemberProblem(
                field: "\(XiaomiOptions.member).channel_id",
                problem:
                    "is required: Xiaomi classifies a message by its channel (private or public message channel); set it in the request or xiaomi.channel_id for the app, else Xiaomi counts it against the default channel's one message a day"
            )
        }
        return nil
    }

    /// The message as the vendor takes it (titles, texts, payload), whatever the app.
    public static func checkMessage(_ n: PushNotification, options: XiaomiOptions?) -> RequestMemberProblem? {
        let title = n.title ?? ""
        let message = n.message ?? ""
        if title.isEmpty && message.isEmpty {
            return RequestMemberProblem(
                field: "message", problem: "Xiaomi delivers notifications only (no pass-through messages): title and message are required")
        }
        if title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return RequestMemberProblem(field: "title", problem: "is required by Xiaomi and must not be blank")
        }
        if message.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return RequestMemberProblem(field: "message", problem: "is required by Xiaomi (the notification's description) and must not be blank")
        }
        if title.vendorLength > maxTitleLength {
            return RequestMemberProblem(
                field: "title", problem: "is \(title.vendorLength) characters, Xiaomi takes fewer than 50", limit: "\(maxTitleLength) characters")
        }
        if message.vendorLength > maxDescriptionLength {
            return RequestMemberProblem(
                field: "message", problem: "is \(message.vendorLength) characters, Xiaomi takes fewer than 128",
                limit: "\(maxDescriptionLength) characters")
        }
        if let data = n.data, !data.isEmpty {
            let bytes = JSONValue.object(data).jsonString.utf8.count
            if bytes > maxPayloadBytes {
                return RequestMemberProblem(
                    field: "data", problem: "is \(bytes) bytes as JSON, Xiaomi's payload takes at most \(maxPayloadBytes)",
                    limit: "\(maxPayloadBytes) bytes")
            }
        }
        return nil
    }

    /// Renders the form body (every check of `check` applies).
    public static func prepare(_ n: PushNotification, options: XiaomiOptions?, configuration: XiaomiConfiguration) throws(PushFailure)
        -> XiaomiPreparedMessage
    {
        if let problem = check(n, options: options, defaultChannelID: configuration.defaultChannelID) {
            throw PushFailure(problem.description)
        }
        let o = options ?? XiaomiOptions()
        var fields: [(String, String)] = [
            ("restricted_package_name", configuration.packageName),
            ("pass_through", "0"),
            ("title", n.title ?? ""),
            ("description", n.message ?? ""),
            ("notify_type", String(o.notifyType ?? -1)),
        ]
        var payload = 0
        if let data = n.data, !data.isEmpty {
            let text = JSONValue.object(data).jsonString
            payload = text.utf8.count
            fields.append(("payload", text))
        }
        if let ttl = n.timeToLive, ttl > 0 {
            fields.append(("time_to_live", String(min(ttl, maxTimeToLiveSeconds) * 1000)))
        }
        if let id = o.notifyID { fields.append(("notify_id", String(id))) }
        let channel = (o.channelID ?? "").isEmpty ? configuration.defaultChannelID : o.channelID ?? ""
        fields.append(("extra.channel_id", channel))
        if let e = o.notifyEffect { fields.append(("extra.notify_effect", String(e))) }
        if let u = o.intentURI { fields.append(("extra.intent_uri", u)) }
        if let u = o.webURI { fields.append(("extra.web_uri", u)) }
        if let f = o.notifyForeground { fields.append(("extra.notify_foreground", f ? "1" : "0")) }
        if let s = o.soundURI { fields.append(("extra.sound_uri", s)) }
        if let c = o.callback { fields.append(("extra.callback", c)) }
        if let p = o.callbackParam { fields.append(("extra.callback.param", p)) }
        if o.onlySendOnce == true { fields.append(("extra.only_send_once", "1")) }
        let form = fields.map { OAuthTokenCache.formEncode($0.0) + "=" + OAuthTokenCache.formEncode($0.1) }.joined(separator: "&")
        return XiaomiPreparedMessage(form: form, payloadBytes: payload)
    }

    /// A Xiaomi regid as it may go in the form (several joined by `,` would reach other devices):
    /// 1...512 characters of letters, digits and `+ / = - _ .`.
    public static func isRegistrationID(_ t: String) -> Bool {
        guard (1...512).contains(t.utf8.count) else { return false }
        return t.utf8.allSatisfy { b in
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): return true
            case UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."): return true
            default: return false
            }
        }
    }
}
