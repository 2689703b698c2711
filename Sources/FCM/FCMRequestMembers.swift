import PushgateCore

/// The notification members only FCM reads: gorush's pass-through objects (the Firebase Admin SDK's
/// `messaging` structs, their member names made FCM's spelling) and `analytics_label`.
enum FCMRequestMembers {
    static let all: [RequestMember] = [
        RequestMember("notification", type: "object", doc: "FCM `message.notification`, passed through") { r throws(RequestMemberProblem) in
            try r.object("notification").map { .object(FCMKeySchema.notification.canonical($0)) }
        },
        RequestMember("android", type: "object", doc: "FCM `message.android` (AndroidConfig), passed through after checks") {
            r throws(RequestMemberProblem) in
            guard let o = try r.object("android") else { return nil }
            return .object(try checkAndroid(FCMKeySchema.android.canonical(o), at: r.field("android")))
        },
        RequestMember("apns", type: "object", doc: "FCM `message.apns` (ApnsConfig), passed through") { r throws(RequestMemberProblem) in
            guard let o = try r.object("apns") else { return nil }
            let apns = FCMKeySchema.apns.canonical(o)
            try checkFCMAPNs(apns, at: r.field("apns"), r)
            return .object(apns)
        },
        RequestMember("webpush", type: "object", doc: "FCM `message.webpush` (WebpushConfig), passed through") { r throws(RequestMemberProblem) in
            guard let o = try r.object("webpush") else { return nil }
            let webpush = FCMKeySchema.webpush.canonical(o)
            if let options = webpush["fcm_options"] { try checkFCMOptions(options, at: r.field("webpush") + ".fcm_options") }
            return .object(webpush)
        },
        RequestMember("fcm_options", type: "object", doc: "FCM `message.fcm_options`") { r throws(RequestMemberProblem) in
            guard let o = try r.object("fcm_options") else { return nil }
            let options = FCMKeySchema.fcmOptions.canonical(o)
            try checkFCMOptions(.object(options), at: r.field("fcm_options"))
            return .object(options)
        },
    ]

    static let maxFCMTTL: Double = 2_419_200

    /// FCM v1 `AndroidConfig` booleans (direct boot, bandwidth-constrained and restricted-satellite delivery).
    static let androidBooleans = ["direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"]

    /// FCM v1 `AndroidNotification.proxy` (`Proxy` enum): whether Android may proxy the notification.
    static let androidProxyValues = ["PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"]

    /// Checks FCM's `android` object and returns it with `notification.proxy` spelled as FCM's enum
    /// (upper case; `"allow"` is taken as `ALLOW`, as the Firebase Admin SDKs take it).
    static func checkAndroid(_ android: JSONObject, at path: String) throws(RequestMemberProblem) -> JSONObject {
        var android = android
        for key in Self.androidBooleans {
            switch android[key] {
            case nil, .null?, .bool?: continue
            default: throw RequestMemberProblem(field: path + "." + key, problem: "expected true or false")
            }
        }
        if let options = android["fcm_options"] { try checkFCMOptions(options, at: path + ".fcm_options") }
        if case .object(var an)? = android["notification"] {
            switch an["bypass_proxy_notification"] {
            case nil, .null?, .bool?: break
            default: throw RequestMemberProblem(field: path + ".notification.bypass_proxy_notification", problem: "expected true or false")
            }
            switch an["proxy"] {
            case nil, .null?: break
            case .string(let s)? where Self.androidProxyValues.contains(s.uppercased()):
                if s != s.uppercased() {
                    an["proxy"] = .string(s.uppercased())
                    android["notification"] = .object(an)
                }
            default:
                throw RequestMemberProblem(
                    field: path + ".notification.proxy", problem: "expected one of \(Self.androidProxyValues.joined(separator: ", ")) (FCM's Proxy)")
            }
        }
        try checkTTL(android, at: path)
        return android
    }

    /// FCM's `apns` object: `live_activity_token` (a Live Activity push or push-to-start token) is a
    /// string; `fcm_options.analytics_label` follows FCM's rule.
    static func checkFCMAPNs(_ apns: JSONObject, at path: String, _ r: RequestMemberReader) throws(RequestMemberProblem) {
        switch apns["live_activity_token"] {
        case nil, .null?: break
        case .string(let s)?:
            if s.isEmpty { throw RequestMemberProblem(field: path + ".live_activity_token", problem: "must not be empty") }
            if s.utf8.count > r.limits.maxTokenBytes {
                throw RequestMemberProblem(
                    field: path + ".live_activity_token", problem: "\(s.utf8.count) bytes, over the limit of \(r.limits.maxTokenBytes)",
                    limit: "core.max_token_bytes")
            }
        default: throw RequestMemberProblem(field: path + ".live_activity_token", problem: "expected a string")
        }
        if let options = apns["fcm_options"] { try checkFCMOptions(options, at: path + ".fcm_options") }
    }

    /// An `fcm_options` object (the message's, or `android`'s / `apns`'s / `webpush`'s): its
    /// `analytics_label` follows FCM's rule.
    static func checkFCMOptions(_ options: JSONValue, at path: String) throws(RequestMemberProblem) {
        guard case .object(let o) = options else {
            if options == .null { return }
            throw RequestMemberProblem(field: path, problem: "expected an object")
        }
        switch o["analytics_label"] {
        case nil, .null?: break
        case .string(let label)? where PushNotification.isAnalyticsLabel(label): break
        default:
            throw RequestMemberProblem(field: path + ".analytics_label", problem: "must be 1-50 characters of a-z A-Z 0-9 - _ . ~ % (FCM's rule)")
        }
    }

    static func checkTTL(_ android: JSONObject, at path: String) throws(RequestMemberProblem) {
        guard let ttl = android["ttl"] else { return }
        let seconds: Double?
        switch ttl {
        case .int(let i): seconds = Double(i)
        case .double(let d): seconds = d
        case .string(let s):
            let digits = s.hasSuffix("s") ? String(s.dropLast()) : s
            guard digits.utf8.count <= 32, let d = Double(digits), d.isFinite,
                digits.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") })
            else {
                throw RequestMemberProblem(field: path + ".ttl", problem: "expected seconds such as 3600 or \"3600s\"")
            }
            seconds = d
        case .null: seconds = nil
        default: throw RequestMemberProblem(field: path + ".ttl", problem: "expected seconds such as 3600 or \"3600s\"")
        }
        if let seconds, !(seconds >= 0 && seconds <= Self.maxFCMTTL) {
            throw RequestMemberProblem(field: path + ".ttl", problem: "out of range: must be between 0 and \(Int(Self.maxFCMTTL)) seconds (4 weeks)")
        }
    }

    /// gorush's Huawei fields, with the ranges go-hms-push checks before sending (`verify` package):
}

extension PushNotification {
    /// `notification`: FCM's `message.notification`, passed through.
    public var fcmNotification: JSONObject? {
        get { fields.object("notification") }
        set { fields.set("notification", newValue) }
    }
    /// `android`: FCM's `message.android`.
    public var android: JSONObject? {
        get { fields.object("android") }
        set { fields.set("android", newValue) }
    }
    /// `apns`: FCM's `message.apns`.
    public var apns: JSONObject? {
        get { fields.object("apns") }
        set { fields.set("apns", newValue) }
    }
    /// `webpush`: FCM's `message.webpush`.
    public var webpush: JSONObject? {
        get { fields.object("webpush") }
        set { fields.set("webpush", newValue) }
    }
    /// `fcm_options`: FCM's `message.fcm_options`.
    public var fcmOptions: JSONObject? {
        get { fields.object("fcm_options") }
        set { fields.set("fcm_options", newValue) }
    }
}
