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

    public init(platforms: [Platform: PlatformRules] = [:]) {
        self.platforms = platforms
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

    struct Failure: Error {
        var field: String
        var problem: String
        /// A configuration key when a limit was crossed (then the answer says "over a limit").
        var limit: String?
    }

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
        var n = PushNotification(platform: platform ?? .ios)
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
        n.soundName = try f.string("name", .field)
        n.soundVolume = try f.double("volume")
        if let vol = n.soundVolume, !(abs(vol) <= Double(Float.greatestFiniteMagnitude)) {
            throw Failure(field: path + ".volume", problem: "out of range for a 32-bit float")
        }
        n.data = try f.object("data")
        n.badge = try f.int("badge", in: Int64(Int32.min)...Int64(Int32.max)).map { Int($0) }
        n.category = try f.string("category", .field)
        n.threadID = try f.string("thread-id", .field)
        n.urlArgs = try f.strings("url-args", .field)
        if let a = try f.object("alert") { n.alert = try alert(a, at: path + ".alert") }
        n.expiration = try f.int("expiration", in: 0...Int64(Int32.max) * 4)
        n.apnsID = try f.string("apns_id", .field)
        n.collapseID = try f.string("collapse_id", .field)
        n.pushType = try f.string("push_type", .field)
        n.interruptionLevel = try f.string("interruption_level", .field)
        n.relevanceScore = try f.double("relevance-score")
        n.contentState = try f.object("content-state")
        n.staleDate = try f.int("stale-date", in: 0...Int64(Int32.max) * 4)
        n.dismissalDate = try f.int("dismissal-date", in: 0...Int64(Int32.max) * 4)
        n.event = try f.string("event", .field)
        n.timestamp = try f.int("timestamp", in: 0...Int64(Int32.max) * 4)
        n.attributesType = try f.string("attributes-type", .field)
        n.attributes = try f.object("attributes")
        // Live Activity start (`input-push-token: 1` as Apple writes it, or true) and broadcast channels.
        if let v = f.present("input-push-token"), v != .null {
            switch v {
            case .bool(let b): n.inputPushToken = b
            case .int(0): n.inputPushToken = false
            case .int(1): n.inputPushToken = true
            default: throw Failure(field: path + ".input-push-token", problem: "expected 1 or true (0 or false: not asked)")
            }
        }
        n.inputPushChannel = try f.string("input-push-channel", .field)
        n.channels = try f.strings("channels", .field)
        n.production = try f.bool("production")
        n.development = try f.bool("development")
        n.retry = try f.int("retry", in: -1_000_000...1_000_000).map { Int($0) }
        n.image = try f.string("image", .token)
        n.condition = try f.string("condition", .field)
        n.to = try f.string("to", .token)
        n.dryRun = try f.bool("dry_run")
        n.fcmNotification = try f.object("notification").map(KeySchema.notification.canonical)
        n.android = try f.object("android").map(KeySchema.android.canonical)
        if let android = n.android { n.android = try checkAndroid(android, at: path + ".android") }
        n.apns = try f.object("apns").map(KeySchema.apns.canonical)
        if let apns = n.apns { try checkFCMAPNs(apns, at: path + ".apns") }
        n.webpush = try f.object("webpush").map(KeySchema.webpush.canonical)
        if let options = n.webpush?["fcm_options"] { try checkFCMOptions(options, at: path + ".webpush.fcm_options") }
        n.fcmOptions = try f.object("fcm_options").map(KeySchema.fcmOptions.canonical)
        if let options = n.fcmOptions { try checkFCMOptions(.object(options), at: path + ".fcm_options") }
        if let subs = f.present("subscriptions") {
            guard case .array(let list) = subs else { throw Failure(field: path + ".subscriptions", problem: "expected an array") }
            var out: [WebPushSubscription] = []
            out.reserveCapacity(list.count)
            for (k, s) in list.enumerated() { out.append(try subscription(s, at: "\(path).subscriptions[\(k)]")) }
            n.subscriptions = out
        }
        n.payload = try f.string("payload", .message)
        n.timeToLive = try f.int("time_to_live", in: 0...Int64(Int32.max))
        n.urgency = try f.string("urgency", .field)
        n.declarative = try f.bool("declarative")
        n.navigate = try f.string("navigate", .token)
        n.silent = try f.bool("silent")
        try huawei(f, into: &n, at: path)
        n.dedupKey = try f.string("dedup_key", .field)
        if let k = n.dedupKey, k.isEmpty { throw Failure(field: path + ".dedup_key", problem: "must not be empty") }
        n.coalesceSeconds = try f.int("coalesce_seconds", in: PushNotification.coalesceRange).map { Int($0) }
        if n.coalesceSeconds != nil, (n.collapseID ?? "").isEmpty {
            throw Failure(field: path + ".coalesce_seconds", problem: "needs a collapse_id (the pushes it coalesces share one)")
        }
        try schedule(f, into: &n, at: path)
        if let label = try f.string("analytics_label", .field) {
            guard Self.isAnalyticsLabel(label) else {
                throw Failure(field: path + ".analytics_label", problem: "must be 1-50 characters of a-z A-Z 0-9 - _ . ~ % (FCM's rule)")
            }
            n.analyticsLabel = label
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
        for owner in Platform.allCases where owner != platform {
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

    /// FCM's `analytics_label`: 1-50 characters of `[a-zA-Z0-9-_.~%]`.
    static func isAnalyticsLabel(_ s: String) -> Bool {
        let b = s.utf8
        guard !b.isEmpty, b.count <= 50 else { return false }
        return b.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "~") || c == UInt8(ascii: "%")
        }
    }

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

    func alert(_ o: JSONObject, at path: String) throws(Failure) -> APNsAlert {
        let f = Fields(object: o, path: path, limits: limits)
        var a = APNsAlert()
        a.title = try f.string("title", .message)
        a.subtitle = try f.string("subtitle", .message)
        a.body = try f.string("body", .message)
        a.action = try f.string("action", .field)
        a.actionLocKey = try f.string("action-loc-key", .field)
        a.launchImage = try f.string("launch-image", .field)
        a.locArgs = try f.strings("loc-args", .message)
        a.locKey = try f.string("loc-key", .field)
        a.titleLocArgs = try f.strings("title-loc-args", .message)
        a.titleLocKey = try f.string("title-loc-key", .field)
        a.summaryArg = try f.string("summary-arg", .field)
        a.summaryArgCount = try f.int("summary-arg-count", in: 0...Int64(Int32.max)).map { Int($0) }
        return a
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

    /// FCM's `android.ttl`: seconds as a number or a string ("3600" / "3600s" / "3.5s"), at most 4 weeks.
    static let maxFCMTTL: Double = 2_419_200

    /// FCM v1 `AndroidConfig` booleans (direct boot, bandwidth-constrained and restricted-satellite delivery).
    static let androidBooleans = ["direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"]

    /// FCM v1 `AndroidNotification.proxy` (`Proxy` enum): whether Android may proxy the notification.
    static let androidProxyValues = ["PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"]

    /// Checks FCM's `android` object and returns it with `notification.proxy` spelled as FCM's enum
    /// (upper case; `"allow"` is taken as `ALLOW`, as the Firebase Admin SDKs take it).
    func checkAndroid(_ android: JSONObject, at path: String) throws(Failure) -> JSONObject {
        var android = android
        for key in Self.androidBooleans {
            switch android[key] {
            case nil, .null?, .bool?: continue
            default: throw Failure(field: path + "." + key, problem: "expected true or false")
            }
        }
        if let options = android["fcm_options"] { try checkFCMOptions(options, at: path + ".fcm_options") }
        if case .object(var an)? = android["notification"] {
            switch an["bypass_proxy_notification"] {
            case nil, .null?, .bool?: break
            default: throw Failure(field: path + ".notification.bypass_proxy_notification", problem: "expected true or false")
            }
            switch an["proxy"] {
            case nil, .null?: break
            case .string(let s)? where Self.androidProxyValues.contains(s.uppercased()):
                if s != s.uppercased() {
                    an["proxy"] = .string(s.uppercased())
                    android["notification"] = .object(an)
                }
            default:
                throw Failure(
                    field: path + ".notification.proxy", problem: "expected one of \(Self.androidProxyValues.joined(separator: ", ")) (FCM's Proxy)")
            }
        }
        try checkTTL(android, at: path)
        return android
    }

    /// FCM's `apns` object: `live_activity_token` (a Live Activity push or push-to-start token) is a
    /// string; `fcm_options.analytics_label` follows FCM's rule.
    func checkFCMAPNs(_ apns: JSONObject, at path: String) throws(Failure) {
        switch apns["live_activity_token"] {
        case nil, .null?: break
        case .string(let s)?:
            if s.isEmpty { throw Failure(field: path + ".live_activity_token", problem: "must not be empty") }
            if s.utf8.count > limits.maxTokenBytes {
                throw Failure(
                    field: path + ".live_activity_token", problem: "\(s.utf8.count) bytes, over the limit of \(limits.maxTokenBytes)",
                    limit: "core.max_token_bytes")
            }
        default: throw Failure(field: path + ".live_activity_token", problem: "expected a string")
        }
        if let options = apns["fcm_options"] { try checkFCMOptions(options, at: path + ".fcm_options") }
    }

    /// An `fcm_options` object (the message's, or `android`'s / `apns`'s / `webpush`'s): its
    /// `analytics_label` follows FCM's rule.
    func checkFCMOptions(_ options: JSONValue, at path: String) throws(Failure) {
        guard case .object(let o) = options else {
            if options == .null { return }
            throw Failure(field: path, problem: "expected an object")
        }
        switch o["analytics_label"] {
        case nil, .null?: break
        case .string(let label)? where Self.isAnalyticsLabel(label): break
        default: throw Failure(field: path + ".analytics_label", problem: "must be 1-50 characters of a-z A-Z 0-9 - _ . ~ % (FCM's rule)")
        }
    }

    func checkTTL(_ android: JSONObject, at path: String) throws(Failure) {
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
                throw Failure(field: path + ".ttl", problem: "expected seconds such as 3600 or \"3600s\"")
            }
            seconds = d
        case .null: seconds = nil
        default: throw Failure(field: path + ".ttl", problem: "expected seconds such as 3600 or \"3600s\"")
        }
        if let seconds, !(seconds >= 0 && seconds <= Self.maxFCMTTL) {
            throw Failure(field: path + ".ttl", problem: "out of range: must be between 0 and \(Int(Self.maxFCMTTL)) seconds (4 weeks)")
        }
    }

    /// gorush's Huawei fields, with the ranges go-hms-push checks before sending (`verify` package):
    /// `collapse_key` -1...100, `fast_app_target` 0, 1 or 2, `ttl` seconds with an optional `s`.
    /// gorush's `app_id` / `app_secret` are type-checked and dropped: gorush v1.22 declares them but
    /// always sends with the configured app (and a secret must not reach the queue or the logs).
    func huawei(_ f: Fields, into n: inout PushNotification, at path: String) throws(Failure) {
        n.huaweiNotification = try f.object("huawei_notification")
        n.huaweiData = try f.string("huawei_data", .message)
        n.huaweiCollapseKey = try f.int("huawei_collapse_key", in: -1...100).map { Int($0) }
        if let ttl = try f.string("huawei_ttl", .field) {
            guard Self.isHMSDuration(ttl) else {
                throw Failure(field: path + ".huawei_ttl", problem: "expected seconds such as \"86400s\", \"3600\" or \"1.5s\"")
            }
            if let seconds = Double(ttl.hasSuffix("s") || ttl.hasSuffix("S") ? String(ttl.dropLast()) : ttl), !(seconds <= Self.maxFCMTTL) {
                throw Failure(field: path + ".huawei_ttl", problem: "out of range: must be between 0 and \(Int(Self.maxFCMTTL)) seconds (4 weeks)")
            }
            n.huaweiTTL = ttl
        }
        n.biTag = try f.string("bi_tag", .field)
        n.fastAppTarget = try f.int("fast_app_target", in: 0...2).map { Int($0) }
        n.harmonyPayload = try f.object("harmony_payload")
        _ = try f.string("app_id", .field)
        _ = try f.string("app_secret", .field)
    }

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

    /// Which string limit applies to a field.
    enum StringKind {
        case token, field, message
        func limit(_ l: RequestLimits) -> (Int, String) {
            switch self {
            case .token: return (l.maxTokenBytes, "core.max_token_bytes")
            case .field: return (l.maxFieldBytes, "core.max_field_bytes")
            case .message: return (l.maxMessageBytes, "core.max_message_bytes")
            }
        }
    }

    /// Typed reads of one object's fields; `null` reads as absent, as gorush's decoding does.
    struct Fields {
        let members: FoldedMembers
        let path: String
        let limits: RequestLimits

        /// Members are matched by field name case-insensitively, as Go's `encoding/json` does.
        init(object: JSONObject, path: String, limits: RequestLimits) {
            members = FoldedMembers(object)
            self.path = path
            self.limits = limits
        }

        func present(_ key: String) -> JSONValue? {
            guard let v = members[key], v != .null else { return nil }
            return v
        }

        func field(_ key: String) -> String { path + "." + key }

        func string(_ key: String, _ kind: StringKind) throws(Failure) -> String? {
            guard let v = present(key) else { return nil }
            guard case .string(let s) = v else { throw Failure(field: field(key), problem: "expected a string") }
            try check(s, key: field(key), kind)
            return s
        }

        /// `key` is built only when the check fails (a 10,000-token array makes no path strings).
        func check(_ s: String, key: @autoclosure () -> String, _ kind: StringKind) throws(Failure) {
            let n = s.utf8.count
            let (max, name) = kind.limit(limits)
            if n > max {
                throw Failure(field: key(), problem: "\(n) bytes, over the limit of \(max)", limit: name)
            }
        }

        func strings(_ key: String, _ kind: StringKind) throws(Failure) -> [String]? {
            guard let v = present(key) else { return nil }
            guard case .array(let list) = v else { throw Failure(field: field(key), problem: "expected an array of strings") }
            var out: [String] = []
            out.reserveCapacity(list.count)
            for (i, e) in list.enumerated() {
                guard case .string(let s) = e else { throw Failure(field: "\(field(key))[\(i)]", problem: "expected a string") }
                try check(s, key: "\(field(key))[\(i)]", kind)
                out.append(s)
            }
            return out
        }

        func bool(_ key: String) throws(Failure) -> Bool? {
            guard let v = present(key) else { return nil }
            guard case .bool(let b) = v else { throw Failure(field: field(key), problem: "expected a boolean") }
            return b
        }

        func object(_ key: String) throws(Failure) -> JSONObject? {
            guard let v = present(key) else { return nil }
            guard case .object(let o) = v else { throw Failure(field: field(key), problem: "expected an object") }
            return o
        }

        /// An integer within `range`; an integral number written as a double (`3600.0`) is accepted.
        func int(_ key: String, in range: ClosedRange<Int64>) throws(Failure) -> Int64? {
            guard let v = present(key) else { return nil }
            let i: Int64
            switch v {
            case .int(let x): i = x
            case .double(let d) where d == d.rounded() && d >= Double(range.lowerBound) && d <= Double(range.upperBound):
                i = Int64(d)
            case .double:
                throw Failure(field: field(key), problem: "expected an integer between \(range.lowerBound) and \(range.upperBound)")
            default:
                throw Failure(field: field(key), problem: "expected an integer")
            }
            guard range.contains(i) else {
                throw Failure(field: field(key), problem: "out of range: must be between \(range.lowerBound) and \(range.upperBound)")
            }
            return i
        }

        func double(_ key: String) throws(Failure) -> Double? {
            guard let v = present(key) else { return nil }
            switch v {
            case .int(let i): return Double(i)
            case .double(let d): return d
            default: throw Failure(field: field(key), problem: "expected a number")
            }
        }
    }
}
