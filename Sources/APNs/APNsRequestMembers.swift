import PushgateCore

/// APNs `alert` dictionary fields gorush accepts.
public struct APNsAlert: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var action: String?
    public var actionLocKey: String?
    public var launchImage: String?
    public var locArgs: [String]?
    public var locKey: String?
    public var titleLocArgs: [String]?
    public var titleLocKey: String?
    public var summaryArg: String?
    public var summaryArgCount: Int?

    public init() {}

    public var isEmpty: Bool { self == APNsAlert() }

    /// The members as stored and as gorush names them (`action-loc-key`).
    var object: JSONObject {
        var f = NotificationFields()
        f.set("title", title)
        f.set("subtitle", subtitle)
        f.set("body", body)
        f.set("action", action)
        f.set("action-loc-key", actionLocKey)
        f.set("launch-image", launchImage)
        f.set("loc-args", locArgs)
        f.set("loc-key", locKey)
        f.set("title-loc-args", titleLocArgs)
        f.set("title-loc-key", titleLocKey)
        f.set("summary-arg", summaryArg)
        f.set("summary-arg-count", summaryArgCount)
        return JSONObject(f.map { ($0.key, $0.value) })
    }

    init(_ o: JSONObject) {
        func s(_ k: String) -> String? { o[k]?.stringValue }
        func list(_ k: String) -> [String]? {
            guard case .array(let a)? = o[k] else { return nil }
            return a.compactMap(\.stringValue)
        }
        title = s("title")
        subtitle = s("subtitle")
        body = s("body")
        action = s("action")
        actionLocKey = s("action-loc-key")
        launchImage = s("launch-image")
        locArgs = list("loc-args")
        locKey = s("loc-key")
        titleLocArgs = list("title-loc-args")
        titleLocKey = s("title-loc-key")
        summaryArg = s("summary-arg")
        summaryArgCount = o["summary-arg-count"]?.intValue.flatMap { Int(exactly: $0) }
    }

    /// Reads and checks gorush's `alert` object.
    static func decode(_ r: RequestMemberReader) throws(RequestMemberProblem) -> APNsAlert {
        var a = APNsAlert()
        a.title = try r.string("title", .message)
        a.subtitle = try r.string("subtitle", .message)
        a.body = try r.string("body", .message)
        a.action = try r.string("action", .field)
        a.actionLocKey = try r.string("action-loc-key", .field)
        a.launchImage = try r.string("launch-image", .field)
        a.locArgs = try r.strings("loc-args", .message)
        a.locKey = try r.string("loc-key", .field)
        a.titleLocArgs = try r.strings("title-loc-args", .message)
        a.titleLocKey = try r.string("title-loc-key", .field)
        a.summaryArg = try r.string("summary-arg", .field)
        a.summaryArgCount = try r.int("summary-arg-count", in: 0...Int64(Int32.max)).map { Int($0) }
        return a
    }
}

/// The notification members only APNs reads (gorush's iOS fields and Pushgate's Live Activity ones).
enum APNsRequestMembers {
    static let unixTime: ClosedRange<Int64> = 0...Int64(Int32.max) * 4

    static let all: [RequestMember] = [
        .string("name", .field, doc: "gorush's critical-sound name: `aps.sound` becomes {critical, name, volume}"),
        RequestMember("volume", type: "number", doc: "gorush's critical-sound volume (above 0 makes the critical-sound dictionary)") {
            r throws(RequestMemberProblem) in
            guard let vol = try r.double("volume") else { return nil }
            guard abs(vol) <= Double(Float.greatestFiniteMagnitude) else {
                throw RequestMemberProblem(field: r.field("volume"), problem: "out of range for a 32-bit float")
            }
            return .double(vol)
        },
        .string("thread-id", .field, doc: "`aps.thread-id`: groups notifications"),
        .strings("url-args", .field, doc: "`aps.url-args` (Safari)"),
        RequestMember("alert", type: "object", doc: "`aps.alert` members beyond title and body (subtitle, loc keys, summary)") {
            r throws(RequestMemberProblem) in
            guard let o = try r.object("alert") else { return nil }
            return .object(try APNsAlert.decode(r.reader(of: o, at: "alert")).object)
        },
        .string("apns_id", .field, doc: "`apns-id`: the notification's UUID (one is made when missing)"),
        .string("interruption_level", .field, doc: "`aps.interruption-level`: passive, active, time-sensitive or critical"),
        .double("relevance-score", doc: "`aps.relevance-score`"),
        .object("content-state", doc: "Live Activity `aps.content-state`"),
        .int("stale-date", in: unixTime, doc: "Live Activity `aps.stale-date` (UNIX seconds)"),
        .int("dismissal-date", in: unixTime, doc: "Live Activity `aps.dismissal-date` (UNIX seconds)"),
        .string("event", .field, doc: "Live Activity `aps.event`: start, update or end"),
        .int("timestamp", in: unixTime, doc: "Live Activity `aps.timestamp` (UNIX seconds)"),
        .string("attributes-type", .field, doc: "Live Activity start: `aps.attributes-type`"),
        .object("attributes", doc: "Live Activity start: `aps.attributes`"),
        RequestMember("input-push-token", type: "boolean", doc: "Live Activity start: ask for a push token (1 or true)") {
            r throws(RequestMemberProblem) in
            switch r.present("input-push-token") {
            case nil: return nil
            case .bool(let b)?: return .bool(b)
            case .int(0)?: return .bool(false)
            case .int(1)?: return .bool(true)
            default: throw RequestMemberProblem(field: r.field("input-push-token"), problem: "expected 1 or true (0 or false: not asked)")
            }
        },
        .string("input-push-channel", .field, doc: "Live Activity start: subscribe the activity to this broadcast channel"),
        .bool("production", doc: "send through APNs' production environment"),
        .bool("development", doc: "send through APNs' sandbox environment"),
    ]
}

extension PushNotification {
    /// gorush's top-level `name` (iOS): makes `aps.sound` the critical-sound dictionary with this name.
    public var soundName: String? {
        get { fields.string("name") }
        set { fields.set("name", newValue) }
    }
    /// gorush's top-level `volume` (iOS): when above 0, `aps.sound` is the critical-sound dictionary with it.
    public var soundVolume: Double? {
        get { fields.double("volume") }
        set { fields.set("volume", newValue) }
    }
    public var threadID: String? {
        get { fields.string("thread-id") }
        set { fields.set("thread-id", newValue) }
    }
    public var urlArgs: [String]? {
        get { fields.strings("url-args") }
        set { fields.set("url-args", newValue) }
    }
    public var alert: APNsAlert? {
        get { fields.object("alert").map(APNsAlert.init) }
        set { fields.set("alert", newValue?.object) }
    }
    public var apnsID: String? {
        get { fields.string("apns_id") }
        set { fields.set("apns_id", newValue) }
    }
    public var interruptionLevel: String? {
        get { fields.string("interruption_level") }
        set { fields.set("interruption_level", newValue) }
    }
    public var relevanceScore: Double? {
        get { fields.double("relevance-score") }
        set { fields.set("relevance-score", newValue) }
    }
    public var contentState: JSONObject? {
        get { fields.object("content-state") }
        set { fields.set("content-state", newValue) }
    }
    public var staleDate: Int64? {
        get { fields.int64("stale-date") }
        set { fields.set("stale-date", newValue) }
    }
    public var dismissalDate: Int64? {
        get { fields.int64("dismissal-date") }
        set { fields.set("dismissal-date", newValue) }
    }
    public var event: String? {
        get { fields.string("event") }
        set { fields.set("event", newValue) }
    }
    public var timestamp: Int64? {
        get { fields.int64("timestamp") }
        set { fields.set("timestamp", newValue) }
    }
    public var attributesType: String? {
        get { fields.string("attributes-type") }
        set { fields.set("attributes-type", newValue) }
    }
    public var attributes: JSONObject? {
        get { fields.object("attributes") }
        set { fields.set("attributes", newValue) }
    }
    /// `input-push-token` (Live Activity start): asks the started activity for a push token (`aps.input-push-token: 1`).
    public var inputPushToken: Bool? {
        get { fields.bool("input-push-token") }
        set { fields.set("input-push-token", newValue) }
    }
    /// `input-push-channel` (Live Activity start): subscribes the started activity to this broadcast channel.
    public var inputPushChannel: String? {
        get { fields.string("input-push-channel") }
        set { fields.set("input-push-channel", newValue) }
    }
    public var production: Bool? {
        get { fields.bool("production") }
        set { fields.set("production", newValue) }
    }
    public var development: Bool? {
        get { fields.bool("development") }
        set { fields.set("development", newValue) }
    }

    /// Whether the request asked for the sandbox/development APNs environment.
    /// `nil` means "use the configured default".
    public var productionOverride: Bool? {
        if production == true { return true }
        if development == true { return false }
        return nil
    }
}
