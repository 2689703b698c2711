import Foundation
import ProviderKit
import PushgateCore

/// A notification rendered once as OPPO's `notification` object; the target is put in per delivery.
public struct OppoPreparedMessage: PreparedPush, Sendable {
    /// The `notification` object (compact JSON).
    public let notificationJSON: String
    public let payloadBytes: Int?

    /// The form body of `unicast` for one registration id (`auth_token` is added by the sender).
    public func message(for regid: String) -> String {
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("target_type", first: &first)
        w.int(2)
        w.key("target_value", first: &first)
        w.string(regid)
        w.key("notification", first: &first)
        w.raw(notificationJSON)
        w.raw("}")
        return w.string
    }
}

/// gorush's `title` / `message` / `data` and the `oppo` member mapped to OPPO's notification
/// message. OPPO has no pass-through API: `data` goes as `action_parameters` (handed to the app when
/// the notification is tapped), and a push without title and message is refused.
public enum OppoMessageMapper {
    public static let maxTitleLength = 50
    /// `content` in style 1 (plain); style 2 (long text) takes 128.
    public static let maxContentLength = 50
    public static let maxLongContentLength = 128
    /// `action_parameters`: at most 4000 characters.
    public static let maxActionParametersLength = 4000
    /// `off_line_ttl`: at most 10 days.
    public static let maxTimeToLiveSeconds: Int64 = 10 * 86_400

    public static func check(_ n: PushNotification, options: OppoOptions?, defaultCategory: String) -> RequestMemberProblem? {
        if let problem = checkMessage(n, options: options) { return problem }
        if options?.category == nil && defaultCategory.isEmpty {
            return RequestMemberProblem(
                field: "\(OppoOptions.member).category",
                problem:
                    "is required: OPPO counts an unclassified message as marketing (a few a day per device); set it in the request or oppo.category for the app"
            )
        }
        return nil
    }

    /// The message as the vendor takes it (titles, texts, payload), whatever the app.
    public static func checkMessage(_ n: PushNotification, options: OppoOptions?) -> RequestMemberProblem? {
        let title = n.title ?? ""
        let message = n.message ?? ""
        if title.isEmpty && message.isEmpty {
            return RequestMemberProblem(
                field: "message", problem: "OPPO delivers notifications only (no pass-through messages): title and message are required")
        }
        if title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return RequestMemberProblem(field: "title", problem: "is required by OPPO and must not be blank")
        }
        if message.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return RequestMemberProblem(field: "message", problem: "is required by OPPO (the notification's content) and must not be blank")
        }
        if title.vendorLength > maxTitleLength {
            return RequestMemberProblem(
                field: "title", problem: "is \(title.vendorLength) characters, OPPO takes at most \(maxTitleLength)",
                limit: "\(maxTitleLength) characters")
        }
        let limit = options?.style == 2 ? maxLongContentLength : maxContentLength
        if message.vendorLength > limit {
            return RequestMemberProblem(
                field: "message",
                problem: "is \(message.vendorLength) characters, OPPO takes at most \(limit) (oppo.style 2 takes \(maxLongContentLength))",
                limit: "\(limit) characters")
        }
        if let data = n.data, !data.isEmpty {
            let text = JSONValue.object(data).jsonString
            if text.vendorLength > maxActionParametersLength {
                return RequestMemberProblem(
                    field: "data",
                    problem: "is \(text.vendorLength) characters as JSON, OPPO's action_parameters takes at most \(maxActionParametersLength)",
                    limit: "\(maxActionParametersLength) characters")
            }
        }
        return nil
    }

    public static func prepare(_ n: PushNotification, options: OppoOptions?, configuration c: OppoConfiguration) throws(PushFailure)
        -> OppoPreparedMessage
    {
        if let problem = check(n, options: options, defaultCategory: c.defaultCategory) { throw PushFailure(problem.description) }
        let o = options ?? OppoOptions()
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("title", first: &first)
        w.string(n.title ?? "")
        w.key("content", first: &first)
        w.string(n.message ?? "")
        w.key("style", first: &first)
        w.int(o.style ?? 1)
        // The request's category goes with its own notify_level; the app's default with the app's.
        let category = o.category ?? c.defaultCategory
        w.key("category", first: &first)
        w.string(category)
        let level = o.category != nil ? o.notifyLevel : (c.defaultNotifyLevel == 0 ? nil : c.defaultNotifyLevel)
        if let level {
            w.key("notify_level", first: &first)
            w.int(level)
        }
        let channel = o.channelID ?? c.defaultChannelID
        if !channel.isEmpty {
            w.key("channel_id", first: &first)
            w.string(channel)
        }
        w.key("click_action_type", first: &first)
        w.int(o.clickActionType ?? 0)
        if let a = o.clickActionActivity {
            w.key("click_action_activity", first: &first)
            w.string(a)
        }
        if let u = o.clickActionURL {
            w.key("click_action_url", first: &first)
            w.string(u)
        }
        var payload = 0
        if let data = n.data, !data.isEmpty {
            let text = JSONValue.object(data).jsonString
            payload = text.utf8.count
            w.key("action_parameters", first: &first)
            w.string(text)
        }
        if let ttl = n.timeToLive, ttl > 0 {
            w.key("off_line_ttl", first: &first)
            w.int(min(ttl, maxTimeToLiveSeconds))
        }
        w.raw("}")
        return OppoPreparedMessage(notificationJSON: w.string, payloadBytes: payload)
    }

    /// An OPPO regid (`CN_…`, `OPPO_CN_…` or bare hex): letters, digits, `_` and `-`, 1...256.
    public static func isRegistrationID(_ t: String) -> Bool {
        guard (1...256).contains(t.utf8.count) else { return false }
        return t.utf8.allSatisfy { b in
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "_"), UInt8(ascii: "-"):
                return true
            default: return false
            }
        }
    }
}
