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
    static let known: Set<String> = [
        "category", "notify_level", "channel_id", "click_action_type", "click_action_activity", "click_action_url", "style",
    ]

    public init(_ value: JSONValue, path: String) throws(MemberFieldProblem) {
        let r = try RequestMemberReader(value, path: path, known: Self.known)
        category = try r.oneOf("category", Self.categories)
        notifyLevel = try r.int("notify_level", oneOf: Self.notifyLevels)
        channelID = try r.string("channel_id", maxLength: Self.maxChannelIDLength)
        clickActionType = try r.int("click_action_type", oneOf: [0, 1, 2, 4, 5])
        clickActionActivity = try r.string("click_action_activity", maxLength: Self.maxActionLength)
        clickActionURL = try r.string("click_action_url", maxLength: Self.maxActionLength)
        style = try r.int("style", oneOf: [1, 2])
        if notifyLevel != nil && category == nil {
            throw MemberFieldProblem(field: r.field("category"), problem: "is required with notify_level")
        }
        switch clickActionType {
        case 1?, 4?:
            if clickActionActivity == nil {
                throw MemberFieldProblem(field: r.field("click_action_activity"), problem: "is required when click_action_type is 1 or 4")
            }
        case 2?, 5?:
            if clickActionURL == nil {
                throw MemberFieldProblem(field: r.field("click_action_url"), problem: "is required when click_action_type is 2 or 5")
            }
        default: break
        }
    }
}
