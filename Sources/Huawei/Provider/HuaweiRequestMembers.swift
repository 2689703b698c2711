import PushgateCore

/// gorush's Huawei fields, with the ranges go-hms-push checks before sending (`verify` package):
/// `collapse_key` -1...100, `fast_app_target` 0, 1 or 2, `ttl` seconds with an optional `s`.
/// gorush's `app_id` / `app_secret` are type-checked and dropped: gorush v1.22 declares them but
/// always sends with the configured app (and a secret must not reach the queue or the logs).
enum HuaweiRequestMembers {
    /// The longest `huawei_ttl`: 4 weeks, as FCM's.
    static let maxTTL: Double = 2_419_200

    static let all: [RequestMember] = [
        .object("huawei_notification", doc: "HMS `android.notification`, passed through"),
        .string("huawei_data", .message, doc: "HMS `message.data` (a string, usually JSON text)"),
        .int("huawei_collapse_key", in: -1...100, doc: "HMS `android.collapse_key` (-1 to 100)"),
        RequestMember("huawei_ttl", type: "string", doc: "HMS `android.ttl` (\"86400s\", \"3600\", \"1.5s\"; at most 4 weeks)") {
            r throws(RequestMemberProblem) in
            guard let ttl = try r.string("huawei_ttl", .field) else { return nil }
            guard isHMSDuration(ttl) else {
                throw RequestMemberProblem(field: r.field("huawei_ttl"), problem: "expected seconds such as \"86400s\", \"3600\" or \"1.5s\"")
            }
            if let seconds = Double(ttl.hasSuffix("s") || ttl.hasSuffix("S") ? String(ttl.dropLast()) : ttl), !(seconds <= maxTTL) {
                throw RequestMemberProblem(
                    field: r.field("huawei_ttl"), problem: "out of range: must be between 0 and \(Int(maxTTL)) seconds (4 weeks)")
            }
            return .string(ttl)
        },
        .string("bi_tag", .field, doc: "HMS `android.bi_tag`"),
        .int("fast_app_target", in: 0...2, doc: "HMS `android.fast_app_target` (1 development, 2 production)"),
        RequestMember("app_id", type: "string", doc: "gorush's per-request HMS app id: read and not used (the configured app sends)") {
            r throws(RequestMemberProblem) in
            _ = try r.string("app_id", .field)
            return nil
        },
        RequestMember("app_secret", type: "string", doc: "gorush's per-request HMS app secret: read and not used (never stored)") {
            r throws(RequestMemberProblem) in
            _ = try r.string("app_secret", .field)
            return nil
        },
    ]

    /// go-hms-push's `ttlPattern` made exact: digits, optionally a fraction of 1-9 digits, optionally `s`/`S`.
    static func isHMSDuration(_ s: String) -> Bool {
        var u = Substring(s).utf8[...]
        if u.last == UInt8(ascii: "s") || u.last == UInt8(ascii: "S") { u = u.dropLast() }
        let parts = u.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 10, whole.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
        if parts.count == 2 {
            let frac = parts[1]
            guard (1...9).contains(frac.count), frac.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
        }
        return true
    }
}

extension PushNotification {
    /// `huawei_notification`: HMS `android.notification`, passed through.
    public var huaweiNotification: JSONObject? {
        get { fields.object("huawei_notification") }
        set { fields.set("huawei_notification", newValue) }
    }
    /// `huawei_data`: HMS `message.data` (a string, usually JSON text).
    public var huaweiData: String? {
        get { fields.string("huawei_data") }
        set { fields.set("huawei_data", newValue) }
    }
    /// `huawei_collapse_key`: HMS `android.collapse_key` (-1...100).
    public var huaweiCollapseKey: Int? {
        get { fields.int("huawei_collapse_key") }
        set { fields.set("huawei_collapse_key", newValue) }
    }
    /// `huawei_ttl`: HMS `android.ttl` ("86400s", "3600", "1.5s").
    public var huaweiTTL: String? {
        get { fields.string("huawei_ttl") }
        set { fields.set("huawei_ttl", newValue) }
    }
    /// `bi_tag`: HMS `android.bi_tag`.
    public var biTag: String? {
        get { fields.string("bi_tag") }
        set { fields.set("bi_tag", newValue) }
    }
    /// `fast_app_target`: HMS `android.fast_app_target` (1 development, 2 production).
    public var fastAppTarget: Int? {
        get { fields.int("fast_app_target") }
        set { fields.set("fast_app_target", newValue) }
    }
}
