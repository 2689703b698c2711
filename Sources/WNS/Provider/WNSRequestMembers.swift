import PushgateCore

extension Platform {
    /// Windows Push Notification Services: Pushgate's platform 7 (gorush has none).
    public static let wns = Platform(7, "wns", aliases: ["windows"])
}

/// The request member WNS reads: the notification's own `wns` object, validated in full by the
/// request decoder (`WNSOptions(decoding:path:)`) and kept in its checked form.
enum WNSRequestMembers {
    static let wns = RequestMember(
        "wns", type: "object",
        doc:
            "WNS payload and headers (platform 7): `type` toast/tile/badge/raw, `xml` or `raw` (at most 5,000 bytes), `ttl`, `cache_policy`, `tag`, `request_for_status` (docs/wns.md)"
    ) { r throws(RequestMemberProblem) in
        guard let value = r.present("wns") else { return nil }
        switch Result(catching: { () throws(WNSFieldProblem) -> JSONValue in try WNSOptions(decoding: value, path: r.field("wns")).jsonValue }) {
        case .success(let checked): return checked
        case .failure(let problem): throw RequestMemberProblem(field: problem.field, problem: problem.problem)
        }
    }

    static let all = [wns]
}

extension PushNotification {
    /// `wns`: the notification's own WNS object in its checked form (see `WNSOptions`).
    public var wns: JSONObject? {
        get { fields.object("wns") }
        set { fields.set("wns", newValue) }
    }
}
