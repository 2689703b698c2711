import Foundation
import ProviderKit
import PushgateCore

/// The request member `vivo` (`"vivo": {"category": "IM", …}`), decoded strictly against vivo's
/// limits (docs/china-vendors.md, "vivo").
public struct VivoOptions: Sendable, Equatable {
    /// The message category (since 2023-04-03): with `classification`, what the message is.
    public var category: String?
    /// `classification`: 0 operations message, 1 system message; must agree with the category.
    public var classification: Int64?
    /// `notifyType`: 1 none, 2 sound, 3 vibration, 4 sound and vibration.
    public var notifyType: Int64?
    /// `skipType`: 1 open the app, 2 a web page, 3 a custom action, 4 an in-app page (`skipContent`).
    public var skipType: Int64?
    public var skipContent: String?
    /// `pushMode`: 1 sends to the app's test devices only.
    public var testMode: Bool?

    public init() {}

    public static let member = "vivo"
    /// Each category and its classification: IM … SUBSCRIPTION are system messages (1), NEWS …
    /// SOCIAL operations messages (0) (mizhousoft/push-sdk; meetleev/go-multipush).
    public static let categories: [String: Int64] = [
        "IM": 1, "ACCOUNT": 1, "TODO": 1, "DEVICE_REMINDER": 1, "ORDER": 1, "SUBSCRIPTION": 1,
        "NEWS": 0, "CONTENT": 0, "MARKETING": 0, "SOCIAL": 0,
    ]
    public static let categoryNames = ["IM", "ACCOUNT", "TODO", "DEVICE_REMINDER", "ORDER", "SUBSCRIPTION", "NEWS", "CONTENT", "MARKETING", "SOCIAL"]
    /// `skipContent`: at most 1024 characters (own bound, vivo's `clientCustomMap` limit).
    public static let maxSkipContentLength = 1024
    public static let known: Set<String> = ["category", "classification", "notify_type", "skip_type", "skip_content", "test_mode"]

    public init(_ value: JSONValue, path: String) throws(RequestMemberProblem) {
        try self.init(RequestMemberReader.vendorObject(value, at: path, known: Self.known))
    }

    public init(_ r: RequestMemberReader) throws(RequestMemberProblem) {
        category = try r.oneOf("category", Self.categoryNames)
        classification = try r.int("classification", oneOf: [0, 1])
        notifyType = try r.int("notify_type", oneOf: [1, 2, 3, 4])
        skipType = try r.int("skip_type", oneOf: [1, 2, 3, 4])
        skipContent = try r.text("skip_content", maxLength: Self.maxSkipContentLength)
        testMode = try r.bool("test_mode")
        if let c = category, let k = classification, Self.categories[c] != k {
            throw RequestMemberProblem(
                field: r.field("classification"),
                problem: "\(k) does not match category \(c) (\(Self.categories[c] == 1 ? "a system" : "an operations") category)")
        }
        if classification != nil && category == nil {
            throw RequestMemberProblem(field: r.field("category"), problem: "is required with classification")
        }
        if let s = skipType, s != 1, skipContent == nil {
            throw RequestMemberProblem(field: r.field("skip_content"), problem: "is required when skip_type is 2, 3 or 4")
        }
        if skipType == 2, let u = skipContent, !(u.hasPrefix("http://") || u.hasPrefix("https://")) {
            throw RequestMemberProblem(field: r.field("skip_content"), problem: "must be an http(s) URL when skip_type is 2")
        }
    }
}

/// The `vivo` member as the request decoder reads it: checked in full, kept as it came in
/// `PushNotification.fields["vivo"]`, and read back by the provider.
public enum VivoRequestMember {
    public static let member = RequestMember(
        VivoOptions.member, type: "object",
        doc: "vivo's own fields: category and classification, notify_type, skip_type, skip_content, test_mode (docs/china-vendors.md)"
    ) { r throws(RequestMemberProblem) in
        guard let o = try r.vendorObject(VivoOptions.member, known: VivoOptions.known) else { return nil }
        _ = try VivoOptions(o)
        return r.present(VivoOptions.member)
    }

    public static func options(of n: PushNotification) throws(RequestMemberProblem) -> VivoOptions? {
        guard let v = n.fields[VivoOptions.member] else { return nil }
        return try VivoOptions(v, path: VivoOptions.member)
    }
}

extension PushNotification {
    /// `vivo`: vivo's own fields of this notification, as they came (decoded by `VivoRequestMember`).
    public var vivo: JSONObject? {
        get { fields.object(VivoOptions.member) }
        set { fields.set(VivoOptions.member, newValue) }
    }
}
