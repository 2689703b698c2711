/// The limits a `/api/push` body is held to, each with its configuration key (named in the 4xx
/// answer when crossed). Defaults are the configuration defaults.
public struct RequestLimits: Sendable, Equatable {
    /// `core.max_notification` (gorush's): notifications per request; 0 = no limit.
    public var maxNotifications: Int = 100
    /// `core.max_deliveries_per_request`: tokens + subscriptions + topic sends of the whole request,
    /// whether they will be sent or fail at once (platform not enabled, payload too large).
    public var maxDeliveries: Int = 50_000
    /// `<platform>.max_tokens`: tokens + subscriptions of one notification (a platform not listed:
    /// its rules' default).
    public var maxTokens: [Platform: Int] = [:]
    /// What each provider module says about its platforms' notifications (`ProviderModule.requestRules`):
    /// PushgateCore has no platform's rules of its own. A platform not listed has none.
    public var platforms: [Platform: PlatformRules] = [:]
    /// `core.max_token_bytes`: one token, subscription endpoint or `to`.
    public var maxTokenBytes: Int = 4096
    /// `core.max_field_bytes`: ids, topic, category, push type and the other short strings.
    public var maxFieldBytes: Int = 1024
    /// `core.max_message_bytes`: message, title, payload and any string inside `data` and the
    /// pass-through objects.
    public var maxMessageBytes: Int = 256 * 1024
    /// `core.max_object_keys`: keys in one JSON object anywhere in the body.
    public var maxObjectKeys: Int = 1000
    /// `core.max_json_depth`: nesting of arrays and objects (the body itself is level 1).
    public var maxDepth: Int = 32
    /// `core.max_schedule_horizon`: the furthest `send_at` / `delay_seconds` ahead, in seconds.
    public var maxScheduleHorizon: Int = Schedule.defaultHorizon

    /// The members each provider module reads (`ProviderModule.requestMembers`), decoded in this
    /// order after the shared ones. A member not listed is not read.
    public var members: [RequestMember] = []

    public init(platforms: [Platform: PlatformRules] = [:], members: [RequestMember] = []) {
        self.platforms = platforms
        self.members = members
    }

    public func maxTokens(for platform: Platform) -> Int {
        maxTokens[platform] ?? platforms[platform]?.maxTokens ?? PlatformRules.standardMaxTokens
    }

    var json: JSONLimits {
        // Values: a body can hold at most one per two bytes; the cap keeps a flat array of 5 MB of
        // `0,` from becoming millions of enum cases.
        JSONLimits(maxDepth: maxDepth, maxObjectKeys: maxObjectKeys, maxValues: 500_000, maxStringBytes: maxMessageBytes)
    }
}

/// What the request checks must know about one platform's notifications, declared by the provider
/// module serving it (`ProviderModule.requestRules`) and handed to the parser in `RequestLimits.platforms`.
public struct PlatformRules: Sendable, Equatable {
    /// `max_tokens` of a platform without rules.
    public static let standardMaxTokens = 1000

    /// `<platform>.max_tokens`'s default: tokens + subscriptions + channels of one notification.
    public var maxTokens: Int
    /// The largest `time_to_live` (seconds) the provider keeps a message (nil: the field's range only).
    public var maxTimeToLive: Int?
    /// Keys of `data` (and a fallback's `data`) reserved for the provider's own payload.
    public var reservedDataKeys: [ReservedDataKey]
    /// Notification members only this platform's notifications may carry (another platform's
    /// notification carrying one is refused).
    public var exclusiveMembers: [ExclusiveMember]
    /// gorush's legacy `to` is one more device token, after `tokens` (gorush appends it to them).
    public var legacyToIsToken: Bool
    /// A `topic` or `condition` makes one topic delivery (gorush's `IsTopic`).
    public var topicSends: Bool
    /// An `expiration` below this counts in seconds from acceptance, as a Web Push TTL does; at or
    /// above it, and when nil, it is a UNIX time.
    public var relativeExpirationBelow: Int64?
    /// Whether a notification wakes the app without showing anything: what `<platform>.coalesce_seconds`
    /// applies to by default.
    public var backgroundPush: BackgroundPushRule

    public init(
        maxTokens: Int = PlatformRules.standardMaxTokens, maxTimeToLive: Int? = nil, reservedDataKeys: [ReservedDataKey] = [],
        exclusiveMembers: [ExclusiveMember] = [], legacyToIsToken: Bool = false, topicSends: Bool = false,
        relativeExpirationBelow: Int64? = nil, backgroundPush: BackgroundPushRule = .never
    ) {
        self.maxTokens = maxTokens
        self.maxTimeToLive = maxTimeToLive
        self.reservedDataKeys = reservedDataKeys
        self.exclusiveMembers = exclusiveMembers
        self.legacyToIsToken = legacyToIsToken
        self.topicSends = topicSends
        self.relativeExpirationBelow = relativeExpirationBelow
        self.backgroundPush = backgroundPush
    }

    /// A platform's test of "wakes the app without showing anything", named so that two rules compare.
    public struct BackgroundPushRule: Sendable, Equatable {
        public var name: String
        public var test: @Sendable (PushNotification) -> Bool

        public init(_ name: String, _ test: @escaping @Sendable (PushNotification) -> Bool) {
            self.name = name
            self.test = test
        }

        /// No notification of the platform is a background push.
        public static let never = BackgroundPushRule("never") { _ in false }
        /// Every notification wakes the app (Web Push's service worker, a UnifiedPush distributor's app).
        public static let always = BackgroundPushRule("always") { _ in true }

        public static func == (a: Self, b: Self) -> Bool { a.name == b.name }
    }

    /// A `data` key the provider's payload owns: `data.<key>` is refused with 400 "data.<key> is reserved".
    public struct ReservedDataKey: Sendable, Equatable {
        public var key: String
        /// What it is reserved for, as the answer's detail says it ("the APNs payload").
        public var reservedFor: String

        public init(_ key: String, reservedFor: String) {
            self.key = key
            self.reservedFor = reservedFor
        }
    }

    /// Members (as named in the body, folded) that only the declaring platform's notifications may carry.
    /// One is present when set to anything but null or an empty array.
    public struct ExclusiveMember: Sendable, Equatable {
        public var names: [String]
        /// The answer's problem when another platform's notification carries one; `{platform}` is
        /// replaced by that platform's name.
        public var problem: String

        public init(_ names: [String], problem: String) {
            self.names = names
            self.problem = problem
        }
    }

    /// The first reserved `data` key `data` holds.
    public func reservedKey(in data: JSONObject?) -> ReservedDataKey? {
        guard let data else { return nil }
        return reservedDataKeys.first { data[$0.key] != nil }
    }

    /// "data.aps is reserved" and its detail for the notification at `path` (`notifications[0]`, `notifications[0].fallback`).
    public static func reservedKeyError(_ r: ReservedDataKey, at path: String) -> RequestError {
        RequestError(
            message: "data.\(r.key) is reserved",
            detail: "\(path).data.\(r.key): the key \"\(r.key)\" is reserved for \(r.reservedFor); use the notification fields instead")
    }

    /// "between 0 and N seconds" with the weeks N makes when whole (`2419200 seconds (4 weeks)`).
    static func seconds(_ n: Int) -> String {
        let week = 7 * 86_400
        guard n > 0, n % week == 0 else { return "\(n) seconds" }
        return "\(n) seconds (\(n / week) week\(n == week ? "" : "s"))"
    }
}

/// Maps a parsed JSON body onto `PushRequest`, field by field, with gorush's types and Pushgate's
/// range checks. Every error names the field (`notifications[0].android.ttl`).
struct PushRequestDecoder {
    let limits: RequestLimits

    typealias Failure = RequestMemberProblem
    typealias Fields = RequestMemberReader

    func request(_ root: JSONValue) throws(Failure) -> PushRequest {
        guard case .object(let o) = root else { throw Failure(field: "body", problem: "expected an object") }
        let members = FoldedMembers(o)
        guard let list = members["notifications"], list != .null else {
            throw Failure(field: "notifications", problem: "required field is missing")
        }
        guard case .array(let items) = list else { throw Failure(field: "notifications", problem: "expected an array") }
        var notifications: [PushNotification] = []
        var skipped: [SkippedNotification] = []
        notifications.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            switch try notification(item, at: "notifications[\(i)]") {
            case .decoded(let n): notifications.append(n)
            case .skipped(let reason, let notifID): skipped.append(SkippedNotification(index: i, notifID: notifID, reason: reason))
            }
        }
        var sync: Bool?
        if let s = members["sync"], s != .null {
            guard case .bool(let b) = s else { throw Failure(field: "sync", problem: "expected a boolean") }
            sync = b
        }
        var appID: String?
        if let a = members["app_id"], a != .null {
            // The app's id: 1-64 of A-Z a-z 0-9 . _ - (checked here so it never reaches a log or a query raw).
            guard case .string(let s) = a else { throw Failure(field: "app_id", problem: "expected a string") }
            guard AppID.isValid(s) else { throw Failure(field: "app_id", problem: "must be 1-64 characters of A-Z a-z 0-9 . _ -") }
            appID = s
        }
        return PushRequest(notifications: notifications, sync: sync, skipped: skipped, appID: appID)
    }

    /// A notification of the body: decoded, or skipped as gorush skips it (no, 0 or an unknown platform:
    /// gorush's router keeps only notifications of an enabled platform; not counted, no log entry).
    enum Decoded {
        case decoded(PushNotification)
        case skipped(reason: String, notifID: String?)
    }

    func notification(_ v: JSONValue, at path: String) throws(Failure) -> Decoded {
        // Go decodes null into a zero notification (platform 0), which the router skips.
        if v == .null { return .skipped(reason: "no platform (null notification)", notifID: nil) }
        guard case .object(let o) = v else { throw Failure(field: path, problem: "expected an object") }
        let f = Fields(object: o, path: path, limits: limits)
        // Types are checked for a skipped notification too (Go's decoder refuses the whole body first).
        let platform: Platform?
        var skipReason: String?
        switch try platformValue(f.present("platform"), at: path + ".platform") {
        case .known(let p): platform = p
        case .unknown(let reason):
            platform = nil
            skipReason = reason
        }
        var n = PushNotification(platform: platform ?? .none)
        // An empty id is no id (gorush treats them alike): one is generated.
        n.notifID = try f.string("notif_id", .field).flatMap { $0.isEmpty ? nil : $0 }
        n.tokens = try f.strings("tokens", .token) ?? []
        n.message = try f.string("message", .message)
        n.title = try f.string("title", .message)
        n.topic = try f.string("topic", .field)
        // Any string (gorush's type); each provider maps what it knows and ignores the rest.
        n.priority = try f.string("priority", .field)
        n.contentAvailable = try f.bool("content_available")
        n.mutableContent = try f.bool("mutable_content")
        if let s = f.present("sound") {
            switch s {
            case .string(let name):
                try f.check(name, key: path + ".sound", .field)
                n.sound = s
            case .object(let so): n.sound = .object(KeySchema.sound.canonical(so))
            default: throw Failure(field: path + ".sound", problem: "expected a string or an object {critical,name,volume}")
            }
        }
        // gorush's top-level `name` / `volume`: the APNs critical-sound dictionary.
        n.data = try f.object("data")
        n.badge = try f.int("badge", in: Int64(Int32.min)...Int64(Int32.max)).map { Int($0) }
        n.category = try f.string("category", .field)
        n.expiration = try f.int("expiration", in: 0...Int64(Int32.max) * 4)
        n.collapseID = try f.string("collapse_id", .field)
        n.pushType = try f.string("push_type", .field)
        n.channels = try f.strings("channels", .field)
        n.retry = try f.int("retry", in: -1_000_000...1_000_000).map { Int($0) }
        n.image = try f.string("image", .token)
        n.condition = try f.string("condition", .field)
        n.to = try f.string("to", .token)
        n.dryRun = try f.bool("dry_run")
        if let subs = f.present("subscriptions") {
            guard case .array(let list) = subs else { throw Failure(field: path + ".subscriptions", problem: "expected an array") }
            var out: [WebPushSubscription] = []
            out.reserveCapacity(list.count)
            for (k, s) in list.enumerated() { out.append(try subscription(s, at: "\(path).subscriptions[\(k)]")) }
            n.subscriptions = out
        }
        n.timeToLive = try f.int("time_to_live", in: 0...Int64(Int32.max))
        n.dedupKey = try f.string("dedup_key", .field)
        if let k = n.dedupKey, k.isEmpty { throw Failure(field: path + ".dedup_key", problem: "must not be empty") }
        n.coalesceSeconds = try f.int("coalesce_seconds", in: PushNotification.coalesceRange).map { Int($0) }
        if n.coalesceSeconds != nil, (n.collapseID ?? "").isEmpty {
            throw Failure(field: path + ".coalesce_seconds", problem: "needs a collapse_id (the pushes it coalesces share one)")
        }
        try schedule(f, into: &n, at: path)
        if let label = try f.string("analytics_label", .field) {
            guard PushNotification.isAnalyticsLabel(label) else {
                throw Failure(field: path + ".analytics_label", problem: "must be 1-50 characters of a-z A-Z 0-9 - _ . ~ % (FCM's rule)")
            }
            n.analyticsLabel = label
        }
        // The provider modules' members, each read from this notification by the module's decoder.
        for member in limits.members {
            if let v = try member.decode(f) { n.fields[member.name] = v }
        }
        if platform != nil { try checkExclusiveMembers(f, of: n.platform, at: path) }
        if let fv = f.present("fallback") {
            guard case .object(let fo) = fv else { throw Failure(field: path + ".fallback", problem: "expected an object") }
            let merged = try mergedFallback(o, fo, at: path + ".fallback")
            if case .decoded(var fallback) = try notification(.object(merged), at: path + ".fallback") {
                fallback.withTargets(of: n)  // the same targets (and the same token storage)
                n.fallback = FallbackNotification(fallback)
            }
        }
        if let skipReason { return .skipped(reason: skipReason, notifID: n.notifID) }
        // The provider's longest keeping of a message (gorush's CheckMessage: FCM's 4 weeks).
        if let ttl = n.timeToLive, let max = limits.platforms[n.platform]?.maxTimeToLive, ttl > Int64(max) {
            throw Failure(field: path + ".time_to_live", problem: "out of range: must be between 0 and \(PlatformRules.seconds(max))")
        }

        let targets = n.targetCount(limits.platforms[n.platform])
        let cap = limits.maxTokens(for: n.platform)
        if targets > cap {
            throw Failure(
                field: path + ".tokens",
                problem:
                    "\(targets) \((n.channels?.isEmpty ?? true) ? "tokens and subscriptions" : "tokens, subscriptions and channels"), over the limit of \(cap) for \(n.platform.name)",
                limit: "\(n.platform.name).max_tokens")
        }
        return .decoded(n)
    }

    /// Members another platform owns (`PlatformRules.exclusiveMembers`) on a notification of `platform`:
    /// the first present one, in the owners' order, is refused.
    func checkExclusiveMembers(_ f: Fields, of platform: Platform, at path: String) throws(Failure) {
        let own = limits.platforms[platform]?.exclusiveMembers ?? []
        for owner in limits.platforms.keys.sorted() where owner != platform {
            for member in limits.platforms[owner]?.exclusiveMembers ?? [] where !own.contains(member) {
                for name in member.names {
                    switch f.present(name) {
                    case nil: continue
                    case .array(let list)? where list.isEmpty: continue
                    default: throw Failure(field: path + "." + name, problem: member.problem.replacing("{platform}", with: platform.name))
                    }
                }
            }
        }
    }

    /// Members a `fallback` may not set: what changes the targets or the notification's identity,
    /// and another fallback.
    static let fallbackForbidden: Set<String> = [
        "platform", "tokens", "to", "condition", "subscriptions", "channels", "notif_id", "fallback", "dedup_key", "coalesce_seconds", "app_id",
        "send_at", "delay_seconds", "deliver_between", "quiet",
    ]

    /// `send_at`, `delay_seconds`, `deliver_between` and `quiet` (docs/delivery-controls.md). Numbers
    /// are range-checked as doubles before any integer conversion. The horizon against the clock
    /// is checked by the gateway (`IngestValidation.checkSchedule`), which knows the time.
    func schedule(_ f: Fields, into n: inout PushNotification, at path: String) throws(Failure) {
        if let v = f.present("send_at") {
            switch v {
            case .string(let s):
                let t: Double
                switch RFC3339.parse(s) {
                case .success(let v): t = v
                case .failure(let p): throw Failure(field: path + ".send_at", problem: "\(p.description), or UNIX seconds")
                }
                guard t >= 0, t <= Schedule.maxUnixSeconds else {
                    throw Failure(field: path + ".send_at", problem: "out of range: must be between 1970 and 9999")
                }
                n.sendAt = t
            case .int(let i):
                guard i >= 0, Double(i) <= Schedule.maxUnixSeconds else {
                    throw Failure(field: path + ".send_at", problem: "out of range: UNIX seconds between 0 and \(Int64(Schedule.maxUnixSeconds))")
                }
                n.sendAt = Double(i)
            case .double(let d):
                guard d.isFinite, d >= 0, d <= Schedule.maxUnixSeconds else {
                    throw Failure(field: path + ".send_at", problem: "out of range: UNIX seconds between 0 and \(Int64(Schedule.maxUnixSeconds))")
                }
                n.sendAt = d
            default:
                throw Failure(field: path + ".send_at", problem: "expected an RFC 3339 date-time string or UNIX seconds")
            }
        }
        n.delaySeconds = try f.int("delay_seconds", in: 0...Int64(max(0, limits.maxScheduleHorizon)))
        if n.delaySeconds != nil, n.sendAt != nil {
            throw Failure(field: path + ".delay_seconds", problem: "not allowed together with send_at (give one of them)")
        }
        if let w = try f.object("deliver_between") {
            let wf = Fields(object: w, path: path + ".deliver_between", limits: limits)
            guard let tz = try wf.string("tz", .field) else { throw Failure(field: path + ".deliver_between.tz", problem: "required") }
            guard let from = try wf.string("from", .field) else { throw Failure(field: path + ".deliver_between.from", problem: "required") }
            guard let to = try wf.string("to", .field) else { throw Failure(field: path + ".deliver_between.to", problem: "required") }
            do {
                n.deliverBetween = try DeliveryWindow(tz: tz, from: from, to: to)
            } catch let p as DeliveryWindow.Problem {
                throw Failure(field: path + ".deliver_between." + p.member, problem: p.problem)
            } catch {
                throw Failure(field: path + ".deliver_between", problem: "invalid")
            }
        }
        if let q = try f.string("quiet", .field) {
            guard let mode = QuietMode(rawValue: q) else { throw Failure(field: path + ".quiet", problem: "expected \"wait\" or \"drop\"") }
            guard n.deliverBetween != nil else { throw Failure(field: path + ".quiet", problem: "needs deliver_between") }
            n.quiet = mode
        }
        if n.coalesceSeconds != nil, n.sendAt != nil || n.delaySeconds != nil || n.deliverBetween != nil {
            throw Failure(field: path + ".coalesce_seconds", problem: "not allowed with send_at, delay_seconds or deliver_between")
        }
    }

    /// The notification `o` with the members of its `fallback` `fo` in place of its own of the same
    /// (folded) name, without `fallback`; a member set to null in `fo` removes the notification's.
    /// Linear in the members of both objects.
    func mergedFallback(_ o: JSONObject, _ fo: JSONObject, at path: String) throws(Failure) -> JSONObject {
        var replaced = Set<String>()
        replaced.reserveCapacity(fo.count)
        for (key, _) in fo {
            guard let name = MemberName.fold(key) else { continue }  // names no field (ignored, as in a notification)
            if Self.fallbackForbidden.contains(name) {
                throw Failure(
                    field: path + "." + name, problem: "not allowed in a fallback (it would change the targets or the notification's identity)")
            }
            replaced.insert(name)
        }
        var pairs: [(String, JSONValue)] = []
        pairs.reserveCapacity(o.count + fo.count)
        for (key, value) in o {
            if let name = MemberName.fold(key), name == "fallback" || replaced.contains(name) { continue }
            pairs.append((key, value))
        }
        for (key, value) in fo { pairs.append((key, value)) }
        return JSONObject(pairs)
    }

    enum PlatformValue {
        case known(Platform)
        /// Missing, 0 or unknown: the notification is skipped (the reason goes to the log).
        case unknown(String)
    }

    /// gorush's `platform` is an int (1 ios, 2 android, 3 huawei); Pushgate adds 4 and 5 and the names.
    /// Missing, 0 or an unknown number or name skips the notification; another type is a 400.
    func platformValue(_ v: JSONValue?, at field: String) throws(Failure) -> PlatformValue {
        switch v {
        case nil:
            return .unknown("no platform")
        case .int(let i)?:
            guard let p = Platform(rawValue: Int(clamping: i)) else {
                return .unknown("unknown platform \(i) (\(Platform.numbered))")
            }
            return .known(p)
        case .string(let s)?:
            guard s.utf8.count <= 32, let p = Platform(name: s) else {
                return .unknown("unknown platform \"\(String(s.prefix(32)))\"")
            }
            return .known(p)
        default:
            throw Failure(field: field, problem: "expected a platform number or name")
        }
    }

    func subscription(_ v: JSONValue, at path: String) throws(Failure) -> WebPushSubscription {
        guard case .object(let o) = v else { throw Failure(field: path, problem: "expected an object") }
        let f = Fields(object: o, path: path, limits: limits)
        guard let endpoint = try f.string("endpoint", .token) else {
            throw Failure(field: path + ".endpoint", problem: "required field is missing")
        }
        var keys: WebPushSubscription.Keys?
        if let k = try f.object("keys") {
            let kf = Fields(object: k, path: path + ".keys", limits: limits)
            guard let p256dh = try kf.string("p256dh", .field) else {
                throw Failure(field: path + ".keys.p256dh", problem: "required field is missing")
            }
            guard let auth = try kf.string("auth", .field) else {
                throw Failure(field: path + ".keys.auth", problem: "required field is missing")
            }
            keys = .init(p256dh: p256dh, auth: auth)
        }
        return WebPushSubscription(endpoint: endpoint, keys: keys)
    }
}
