import PushgateCore

/// The notification members only Web Push and UnifiedPush read.
enum WebPushRequestMembers {
    static let all: [RequestMember] = [
        .string("payload", .message, doc: "the message's plaintext as sent (else the notification rendered as JSON)"),
        .string("urgency", .field, doc: "RFC 8030 `Urgency`: very-low, low, normal or high"),
        .bool("declarative", doc: "send a declarative push message (`\"web_push\": 8030`); nil: `webpush.declarative`"),
        .string("navigate", .token, doc: "the absolute http(s) URL a declarative message opens when clicked (else `data.url`)"),
        .bool("silent", doc: "the declarative message's `notification.silent`"),
    ]
}

extension PushNotification {
    /// `payload`: the Web Push message's plaintext as sent.
    public var payload: String? {
        get { fields.string("payload") }
        set { fields.set("payload", newValue) }
    }
    /// `urgency`: RFC 8030's `Urgency` header.
    public var urgency: String? {
        get { fields.string("urgency") }
        set { fields.set("urgency", newValue) }
    }
    /// `declarative`: send the declarative push message (`"web_push": 8030`) a browser shows without a
    /// service worker instead of the plain payload; nil = the `webpush.declarative` default.
    public var declarative: Bool? {
        get { fields.bool("declarative") }
        set { fields.set("declarative", newValue) }
    }
    /// `navigate`: the absolute http(s) URL the declarative message opens when clicked (else `data.url`).
    public var navigate: String? {
        get { fields.string("navigate") }
        set { fields.set("navigate", newValue) }
    }
    /// `silent`: the declarative message's `notification.silent`.
    public var silent: Bool? {
        get { fields.bool("silent") }
        set { fields.set("silent", newValue) }
    }
}
