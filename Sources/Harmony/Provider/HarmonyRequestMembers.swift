import PushgateCore

/// The notification members only HarmonyOS Push Kit v3 reads.
enum HarmonyRequestMembers {
    static let all: [RequestMember] = [
        .object("harmony_payload", doc: "Push Kit v3 `payload`, passed through (widget, live view and extension messages)")
    ]
}

extension PushNotification {
    /// `harmony_payload`: HarmonyOS Push Kit v3 `payload`, passed through (widget, live view and
    /// extension messages, whose shape depends on the push type).
    public var harmonyPayload: JSONObject? {
        get { fields.object("harmony_payload") }
        set { fields.set("harmony_payload", newValue) }
    }
}
