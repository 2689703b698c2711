import Foundation
import ProviderKit
import PushgateCore

/// The request member `oppo` (`"oppo": {"category": "IM", …}`), decoded strictly against OPPO's
/// limits (docs/china-vendors.md, "OPPO").
public struct OppoOptions: Sendable, Equatable {
    /// The message category: the classification (communication & service, or content & marketing).
    public var category: String?
    /// `notify_level`: 1 (notification bar), 2 (+ lock screen), 16 (+ banner, sound, vibration); needs `category`.
    public var notifyLevel: Int64?
    /// `channel_id`: the app's Android notification channel.
    public var channelID: String?
    /// `click_action_type`: 0 launch, 1 activity, 2 web page, 4 activity by component, 5 intent scheme URL.
    public var clickActionType: Int64?
    public var clickActionActivity: String?
    public var clickActionURL: String?
    /// `style`: 1 plain (content at most 50 characters), 2 long text (at most 128).
    public var style: Int64?

    public init() {}

    public static let member = "oppo"
    public static let categories = [
        "IM", "ACCOUNT", "TODO", "DEVICE_REMINDER", "ORDER", "SUBSCRIPTION", "NEWS", "CONTENT", "MARKETING", "SOCIAL",
    ]
    public static let notifyLevels: [Int64] = [1, 2, 16]
    public static let maxChannelIDLength = 50
    public static let maxActionLength = 2000
    public static let known: Set<String> = [
        "category", "notify_level", "channel_id", "click_action_type", "click_action_activity", "click_action_url", "style",
    ]

    public init(_ value: JSONValue, path: String) throws(RequestMemberProblem) {
        try self.init(RequestMemberReader.vendorObject(value, at: path, known: Self.known))
    }

    /// Decodes and checks the member from its reader (known keys only).
    public init(_ r: RequestMemberReader) throws(RequestMemberProblem) {
        category = try r.oneOf("category", Self.categories)
        notifyLevel = try r.int("notify_level", oneOf: Self.notifyLevels)
        channelID = try r.text("channel_id", maxLength: Self.maxChannelIDLength)
        clickActionType = try r.int("click_action_type", oneOf: [0, 1, 2, 4, 5])
        clickActionActivity = try r.text("click_action_activity", maxLength: Self.maxActionLength)
        clickActionURL = try r.text("click_action_url", maxLength: Self.maxActionLength)
        style = try r.int("style", oneOf: [1, 2])
        if notifyLevel != nil && category == nil {
            throw RequestMemberProblem(field: r.field("category"), problem: "is required with notify_level")
        }
        switch clickActionType {
        case 1?, 4?:
            if clickActionActivity == nil {
                throw RequestMemberProblem(field: r.field("click_action_activity"), problem: "is required when click_action_type is 1 or 4")
            }
        case 2?, 5?:
            if clickActionURL == nil {
                throw RequestMemberProblem(field: r.field("click_action_url"), problem: "is required when click_action_type is 2 or 5")
            }
        default: break
        }
    }
}

/// The `oppo` member as the request decoder reads it: checked in full, kept as it came in
/// `PushNotification.fields["oppo"]`, and read back by the provider.
public enum OppoRequestMember {
    public static let member = RequestMember(
        OppoOptions.member, type: "object",
        doc: "OPPO's own fields: category and notify_level (the classification), channel_id, click_action_type, "
            + "click_action_activity, click_action_url, style (docs/china-vendors.md)"
    ) { r throws(RequestMemberProblem) in
        guard let o = try r.vendorObject(OppoOptions.member, known: OppoOptions.known) else { return nil }
        _ = try OppoOptions(o)
        return r.present(OppoOptions.member)
    }

    /// The decoded member of `n` (nil: absent).
    public static func options(of n: PushNotification) throws(RequestMemberProblem) -> OppoOptions? {
        guard let v = n.fields[OppoOptions.member] else { return nil }
        return try OppoOptions(v, path: OppoOptions.member)
    }
}

extension PushNotification {
    /// `oppo`: OPPO's own fields of this notification, as they came (decoded by `OppoRequestMember`).
    public var oppo: JSONObject? {
        get { fields.object(OppoOptions.member) }
        set { fields.set(OppoOptions.member, newValue) }
    }
}
