import Foundation
import ProviderKit
import PushgateCore

/// The request member `honor` (`"honor": {"importance": "NORMAL", "click_type": 1, …}`), decoded
/// strictly against Honor's limits (docs/china-vendors.md, "Honor").
public struct HonorOptions: Sendable, Equatable {
    /// `importance`: `NORMAL` (service and communication, needs Honor's self-classification right) or
    /// `LOW` (news and marketing, a few a day per device).
    public var importance: String?
    /// `clickAction.type`: 1 an app page (`intent` or `action`), 2 a web page (`url`), 3 open the app.
    public var clickType: Int64?
    public var intent: String?
    public var url: String?
    public var action: String?
    /// `tag`: a later notification of the same tag replaces this one.
    public var tag: String?
    /// `group`: notifications of one group are shown as one.
    public var group: String?
    /// `biTag`: a label Honor's receipts carry back.
    public var biTag: String?
    /// `notifyId`: a later notification of the same id replaces this one.
    public var notifyID: Int64?
    /// `targetUserType: 1`: a test message (at most 1000 a day per app, not counted against the device caps).
    public var testMode: Bool?

    public init() {}

    public static let member = "honor"
    public static let importances = ["NORMAL", "LOW"]
    /// Own bounds (Honor publishes none for these fields): an intent URI, URL or action of at most 1024
    /// characters; a tag, group or biTag of at most 64.
    public static let maxIntentLength = 1024
    public static let maxLabelLength = 64
    public static let known: Set<String> = [
        "importance", "click_type", "intent", "url", "action", "tag", "group", "bi_tag", "notify_id", "test_mode",
    ]

    public init(_ value: JSONValue, path: String) throws(RequestMemberProblem) {
        try self.init(RequestMemberReader.vendorObject(value, at: path, known: Self.known))
    }

    public init(_ r: RequestMemberReader) throws(RequestMemberProblem) {
        importance = try r.oneOf("importance", Self.importances)
        clickType = try r.int("click_type", oneOf: [1, 2, 3])
        intent = try r.text("intent", maxLength: Self.maxIntentLength)
        url = try r.url("url", maxLength: Self.maxIntentLength, httpsOnly: true)
        action = try r.text("action", maxLength: Self.maxIntentLength)
        tag = try r.text("tag", maxLength: Self.maxLabelLength)
        group = try r.text("group", maxLength: Self.maxLabelLength)
        biTag = try r.text("bi_tag", maxLength: Self.maxLabelLength)
        notifyID = try r.int("notify_id", in: 0...2_147_483_647)
        testMode = try r.bool("test_mode")
        switch clickType {
        case 1 where intent == nil && action == nil:
            throw RequestMemberProblem(field: r.field("intent"), problem: "intent or action is required when click_type is 1")
        case 2 where url == nil:
            throw RequestMemberProblem(field: r.field("url"), problem: "is required when click_type is 2")
        case nil where url != nil:
            throw RequestMemberProblem(field: r.field("click_type"), problem: "must be 2 to open the url")
        case nil where intent != nil || action != nil:
            throw RequestMemberProblem(field: r.field("click_type"), problem: "must be 1 to open the intent or action")
        default: break
        }
    }
}

/// The `honor` member as the request decoder reads it: checked in full, kept as it came in
/// `PushNotification.fields["honor"]`, and read back by the provider.
public enum HonorRequestMember {
    public static let member = RequestMember(
        HonorOptions.member, type: "object",
        doc:
            "Honor's own fields: importance (NORMAL or LOW), click_type with intent, url or action, tag, group, bi_tag, notify_id, test_mode (docs/china-vendors.md)"
    ) { r throws(RequestMemberProblem) in
        guard let o = try r.vendorObject(HonorOptions.member, known: HonorOptions.known) else { return nil }
        _ = try HonorOptions(o)
        return r.present(HonorOptions.member)
    }

    public static func options(of n: PushNotification) throws(RequestMemberProblem) -> HonorOptions? {
        guard let v = n.fields[HonorOptions.member] else { return nil }
        return try HonorOptions(v, path: HonorOptions.member)
    }
}

extension PushNotification {
    /// `honor`: Honor's own fields of this notification, as they came (decoded by `HonorRequestMember`).
    public var honor: JSONObject? {
        get { fields.object(HonorOptions.member) }
        set { fields.set(HonorOptions.member, newValue) }
    }
}
