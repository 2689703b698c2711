import Foundation
import Synchronization

/// A push platform: its number on the wire (gorush's 1 ios, 2 android, 3 huawei; Pushgate's from 4)
/// and its names. The core declares none: each provider module declares its own
/// (`extension Platform { public static let ios = Platform(1, "ios", aliases: ["apns"]) }`) and lists
/// them in its `platforms`; a declared platform is known by number and name from then on (the
/// provider registry touches every module's platforms when it is first used).
public struct Platform: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The number on the wire and in the store.
    public let rawValue: Int
    private let declaredName: String?
    /// Other names a request may use (`apns`, `fcm`).
    public let aliases: [String]

    /// The name gorush uses in log entries and stats; also the configuration section's name. A
    /// platform read from a store before its module declared it is named once it is declared.
    public var name: String {
        if let declaredName { return declaredName }
        return PlatformTable.shared.platform(rawValue)?.name ?? String(rawValue)
    }

    /// Declares a platform (a provider module's static let). Numbers are 1-255 and unique.
    public init(_ rawValue: Int, _ name: String, aliases: [String] = []) {
        precondition((1...255).contains(rawValue), "platform numbers are 1-255")
        self.rawValue = rawValue
        self.declaredName = name
        self.aliases = aliases
        PlatformTable.shared.register(self)
    }

    /// Platform 0: gorush's "no platform" (a skipped notification's placeholder); never declared.
    public static let none = Platform(undeclared: 0, "none")

    private init(undeclared rawValue: Int, _ name: String?) {
        self.rawValue = rawValue
        self.declaredName = name
        self.aliases = []
    }

    /// The declared platform with this number.
    public init?(rawValue: Int) {
        guard let p = PlatformTable.shared.platform(rawValue) else { return nil }
        self = p
    }

    /// A platform number read back from a store: the declared platform, or (before its module
    /// declared it) one named from the declaration once made. Nil outside 1-255.
    public init?(stored rawValue: Int) {
        guard (1...255).contains(rawValue) else { return nil }
        self = Platform(rawValue: rawValue) ?? Platform(undeclared: rawValue, nil)
    }

    /// The declared platform with this name, alias or number (case-insensitive).
    public init?(name: String) {
        guard let p = PlatformTable.shared.platform(named: name) else { return nil }
        self = p
    }

    /// Every declared platform, by number.
    public static var registered: [Platform] { PlatformTable.shared.all }

    /// "1 ios, 2 android, …": every declared platform's number and name, for the unknown-platform messages.
    public static var numbered: String { registered.map { "\($0.rawValue) \($0.name)" }.joined(separator: ", ") }

    public var description: String { name }

    public static func == (a: Platform, b: Platform) -> Bool { a.rawValue == b.rawValue }
    public func hash(into h: inout Hasher) { h.combine(rawValue) }
    public static func < (a: Platform, b: Platform) -> Bool { a.rawValue < b.rawValue }

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let i = try? c.decode(Int.self) {
            // A stored notification may be read before the registry declared its platform (a
            // library user decoding one first): any number a module may declare is taken, and
            // named from the declaration.
            guard (1...255).contains(i) else {
                throw DecodingError.dataCorruptedError(
                    in: c, debugDescription: "unknown platform \(i) (\(Platform.numbered))")
            }
            self = Platform(rawValue: i) ?? Platform(undeclared: i, nil)  // as `init(stored:)`
        } else if let s = try? c.decode(String.self) {
            guard let p = Platform(name: s) else {
                throw DecodingError.dataCorruptedError(in: c, debugDescription: "unknown platform \"\(s)\"")
            }
            self = p
        } else {
            throw DecodingError.typeMismatch(Int.self, .init(codingPath: c.codingPath, debugDescription: "expected a platform number or name"))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}

/// The declared platforms, by number and by name.
final class PlatformTable: Sendable {
    static let shared = PlatformTable()

    private struct State {
        var byNumber: [Int: Platform] = [:]
        var byName: [String: Platform] = [:]
        var all: [Platform] = []
    }

    private let state = Mutex(State())

    func register(_ p: Platform) {
        state.withLock { s in
            if let known = s.byNumber[p.rawValue] {
                precondition(known.name == p.name, "platform \(p.rawValue) declared as \(known.name) and \(p.name)")
                return
            }
            for n in [p.name, String(p.rawValue)] + p.aliases {
                let key = n.lowercased()
                precondition(s.byName[key] == nil, "platform name \(n) declared twice")
                s.byName[key] = p
            }
            s.byNumber[p.rawValue] = p
            s.all.append(p)
            s.all.sort()
        }
    }

    func platform(_ number: Int) -> Platform? { state.withLock { $0.byNumber[number] } }
    func platform(named name: String) -> Platform? { state.withLock { $0.byName[name.lowercased()] } }
    var all: [Platform] { state.withLock { $0.all } }
}

/// A browser `PushSubscription` (Web Push, current UnifiedPush).
public struct WebPushSubscription: Sendable, Codable, Equatable, Hashable {
    public struct Keys: Sendable, Codable, Equatable, Hashable {
        public var p256dh: String
        public var auth: String
        public init(p256dh: String, auth: String) {
            self.p256dh = p256dh
            self.auth = auth
        }
    }
    public var endpoint: String
    public var keys: Keys?
    public init(endpoint: String, keys: Keys?) {
        self.endpoint = endpoint
        self.keys = keys
    }
}

/// When a notification may be sent (docs/delivery-controls.md).
public struct NotificationSchedule: Sendable, Equatable {
    /// `send_at` (RFC 3339 text or UNIX seconds), as UNIX seconds: not sent before then
    /// (`delay_seconds` is turned into it when the request is accepted).
    public var sendAt: Double?
    /// `delay_seconds`: not sent before this many seconds after acceptance.
    public var delaySeconds: Int64?
    /// `deliver_between`: the local hours a delivery may be sent in.
    public var deliverBetween: DeliveryWindow?
    /// `quiet`: what a delivery due outside `deliver_between` does (default `wait`).
    public var quiet: QuietMode?

    public init() {}
}

/// One notification of a gorush `/api/push` request: what every provider shares (targets,
/// identity, gorush's common message fields, scheduling, retry, fallback), with gorush's JSON
/// names. The members only one provider reads are that provider's (`RequestMember`), kept in
/// `fields` and read through the accessors its module declares.
public struct PushNotification: Sendable, Codable, Equatable {
    public var notifID: String?
    public var tokens: [String]
    public var platform: Platform
    public var message: String?
    public var title: String?
    public var topic: String?
    public var priority: String?
    public var contentAvailable: Bool?
    public var mutableContent: Bool?
    public var sound: JSONValue?
    public var data: JSONObject?
    public var badge: Int?
    public var category: String?
    public var expiration: Int64?
    public var collapseID: String?
    /// gorush's `push_type`: what kind of push it is, for the providers that have kinds (APNs' `apns-push-type`).
    public var pushType: String?
    /// `channels`: broadcast channel ids, one broadcast delivery each.
    public var channels: [String]?
    public var retry: Int?
    public var image: String?
    public var condition: String?
    public var to: String?
    public var dryRun: Bool?
    /// Web Push / UnifiedPush subscriptions, one delivery each.
    public var subscriptions: [WebPushSubscription]?
    /// How long the provider keeps an undelivered message, in seconds.
    public var timeToLive: Int64?
    /// `dedup_key`: a second notification of the same app with this key to the same platform and
    /// token inside `core.idempotency_ttl` is not sent (status `duplicate`).
    public var dedupKey: String?
    /// `coalesce_seconds` (with `collapse_id`): at most one push per window of this many seconds per
    /// app, platform, token and collapse id; the later ones replace each other (status `coalesced`).
    public var coalesceSeconds: Int?
    /// `fallback`: the notification to send instead when this one's rendering is over the provider's
    /// limit (the request's `fallback` members merged over the notification's, decoded and checked as
    /// a notification). Same targets as this one; has no fallback itself.
    public var fallback: FallbackNotification?
    /// `analytics_label`: FCM's `fcm_options.analytics_label`; the events and status records of
    /// every platform carry it.
    public var analyticsLabel: String?
    /// `send_at`, `delay_seconds`, `deliver_between`, `quiet`.
    public var schedule = NotificationSchedule()
    /// The provider modules' members (`RequestMember`), by name.
    public var fields = NotificationFields()

    public var sendAt: Double? {
        get { schedule.sendAt }
        set { schedule.sendAt = newValue }
    }
    public var delaySeconds: Int64? {
        get { schedule.delaySeconds }
        set { schedule.delaySeconds = newValue }
    }
    public var deliverBetween: DeliveryWindow? {
        get { schedule.deliverBetween }
        set { schedule.deliverBetween = newValue }
    }
    public var quiet: QuietMode? {
        get { schedule.quiet }
        set { schedule.quiet = newValue }
    }

    public init(platform: Platform, tokens: [String] = []) {
        self.platform = platform
        self.tokens = tokens
    }

    /// The shared members' names in the stored form (as in a request); any other key is a provider's.
    enum CodingKeys: String, CodingKey, CaseIterable {
        case notifID = "notif_id"
        case tokens, platform, message, title, topic, priority
        case contentAvailable = "content_available"
        case mutableContent = "mutable_content"
        case sound, data, badge, category, expiration
        case collapseID = "collapse_id"
        case pushType = "push_type"
        case channels, retry, image, condition, to
        case dryRun = "dry_run"
        case subscriptions
        case timeToLive = "time_to_live"
        case dedupKey = "dedup_key"
        case coalesceSeconds = "coalesce_seconds"
        case fallback
        case sendAt = "send_at"
        case delaySeconds = "delay_seconds"
        case deliverBetween = "deliver_between"
        case quiet
        case analyticsLabel = "analytics_label"
    }

    /// Any member name of the stored form.
    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    static let sharedNames: Set<String> = Set(CodingKeys.allCases.map(\.rawValue))

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        notifID = try c.decodeIfPresent(String.self, forKey: .notifID)
        tokens = try c.decodeIfPresent([String].self, forKey: .tokens) ?? []
        guard c.contains(.platform) else {
            throw DecodingError.keyNotFound(CodingKeys.platform, .init(codingPath: c.codingPath, debugDescription: "platform is required"))
        }
        platform = try c.decode(Platform.self, forKey: .platform)
        message = try c.decodeIfPresent(String.self, forKey: .message)
        title = try c.decodeIfPresent(String.self, forKey: .title)
        topic = try c.decodeIfPresent(String.self, forKey: .topic)
        priority = try c.decodeIfPresent(String.self, forKey: .priority)
        contentAvailable = try c.decodeIfPresent(Bool.self, forKey: .contentAvailable)
        mutableContent = try c.decodeIfPresent(Bool.self, forKey: .mutableContent)
        sound = try c.decodeIfPresent(JSONValue.self, forKey: .sound)
        if let s = sound {
            switch s {
            case .string, .object, .null: break
            default:
                throw DecodingError.typeMismatch(
                    String.self,
                    .init(codingPath: c.codingPath + [CodingKeys.sound], debugDescription: "expected a string or an object {critical,name,volume}"))
            }
        }
        data = try c.decodeIfPresent(JSONObject.self, forKey: .data)
        badge = try c.decodeIfPresent(Int.self, forKey: .badge)
        category = try c.decodeIfPresent(String.self, forKey: .category)
        expiration = try c.decodeIfPresent(Int64.self, forKey: .expiration)
        collapseID = try c.decodeIfPresent(String.self, forKey: .collapseID)
        pushType = try c.decodeIfPresent(String.self, forKey: .pushType)
        channels = try c.decodeIfPresent([String].self, forKey: .channels)
        retry = try c.decodeIfPresent(Int.self, forKey: .retry)
        image = try c.decodeIfPresent(String.self, forKey: .image)
        condition = try c.decodeIfPresent(String.self, forKey: .condition)
        to = try c.decodeIfPresent(String.self, forKey: .to)
        dryRun = try c.decodeIfPresent(Bool.self, forKey: .dryRun)
        subscriptions = try c.decodeIfPresent([WebPushSubscription].self, forKey: .subscriptions)
        timeToLive = try c.decodeIfPresent(Int64.self, forKey: .timeToLive)
        dedupKey = try c.decodeIfPresent(String.self, forKey: .dedupKey)
        coalesceSeconds = try c.decodeIfPresent(Int.self, forKey: .coalesceSeconds)
        schedule.sendAt = try c.decodeIfPresent(Double.self, forKey: .sendAt)
        schedule.delaySeconds = try c.decodeIfPresent(Int64.self, forKey: .delaySeconds)
        schedule.deliverBetween = try c.decodeIfPresent(DeliveryWindow.self, forKey: .deliverBetween)
        schedule.quiet = try c.decodeIfPresent(QuietMode.self, forKey: .quiet)
        analyticsLabel = try c.decodeIfPresent(String.self, forKey: .analyticsLabel)
        // Every other member is a provider's, kept as stored (a store written before the members
        // moved to their providers has them under the same names).
        let all = try decoder.container(keyedBy: AnyKey.self)
        for key in all.allKeys where !Self.sharedNames.contains(key.stringValue) {
            let v = try all.decode(JSONValue.self, forKey: key)
            if v != .null { fields[key.stringValue] = v }
        }
        // Stored without its targets (they are this notification's): given back here.
        if var f = try c.decodeIfPresent(FallbackNotification.self, forKey: .fallback)?.notification {
            f.withTargets(of: self)
            fallback = FallbackNotification(f)
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(notifID, forKey: .notifID)
        try c.encode(tokens, forKey: .tokens)
        try c.encode(platform, forKey: .platform)
        try c.encodeIfPresent(message, forKey: .message)
        try c.encodeIfPresent(title, forKey: .title)
        try c.encodeIfPresent(topic, forKey: .topic)
        try c.encodeIfPresent(priority, forKey: .priority)
        try c.encodeIfPresent(contentAvailable, forKey: .contentAvailable)
        try c.encodeIfPresent(mutableContent, forKey: .mutableContent)
        try c.encodeIfPresent(sound, forKey: .sound)
        try c.encodeIfPresent(data, forKey: .data)
        try c.encodeIfPresent(badge, forKey: .badge)
        try c.encodeIfPresent(category, forKey: .category)
        try c.encodeIfPresent(expiration, forKey: .expiration)
        try c.encodeIfPresent(collapseID, forKey: .collapseID)
        try c.encodeIfPresent(pushType, forKey: .pushType)
        try c.encodeIfPresent(channels, forKey: .channels)
        try c.encodeIfPresent(retry, forKey: .retry)
        try c.encodeIfPresent(image, forKey: .image)
        try c.encodeIfPresent(condition, forKey: .condition)
        try c.encodeIfPresent(to, forKey: .to)
        try c.encodeIfPresent(dryRun, forKey: .dryRun)
        try c.encodeIfPresent(subscriptions, forKey: .subscriptions)
        try c.encodeIfPresent(timeToLive, forKey: .timeToLive)
        try c.encodeIfPresent(dedupKey, forKey: .dedupKey)
        try c.encodeIfPresent(coalesceSeconds, forKey: .coalesceSeconds)
        try c.encodeIfPresent(fallback, forKey: .fallback)
        try c.encodeIfPresent(schedule.sendAt, forKey: .sendAt)
        try c.encodeIfPresent(schedule.delaySeconds, forKey: .delaySeconds)
        try c.encodeIfPresent(schedule.deliverBetween, forKey: .deliverBetween)
        try c.encodeIfPresent(schedule.quiet, forKey: .quiet)
        try c.encodeIfPresent(analyticsLabel, forKey: .analyticsLabel)
        var all = encoder.container(keyedBy: AnyKey.self)
        for (key, value) in fields where !Self.sharedNames.contains(key) { try all.encode(value, forKey: AnyKey(stringValue: key)) }
    }

    /// Takes `other`'s targets and identity (a fallback has its notification's).
    mutating func withTargets(of other: PushNotification) {
        notifID = other.notifID
        tokens = other.tokens
        to = other.to
        condition = other.condition
        subscriptions = other.subscriptions
        channels = other.channels
        platform = other.platform
        fallback = nil
    }

    /// It has a time or a window of its own (not coalesced by a platform default).
    public var hasSchedule: Bool { sendAt != nil || delaySeconds != nil || deliverBetween != nil }

    /// FCM's rule for an `analytics_label`: 1-50 characters of `[a-zA-Z0-9-_.~%]`.
    public static func isAnalyticsLabel(_ s: String) -> Bool {
        let b = s.utf8
        guard !b.isEmpty, b.count <= 50 else { return false }
        return b.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "~") || c == UInt8(ascii: "%")
        }
    }

    /// `coalesce_seconds` accepts 1 second to 1 day.
    public static let coalesceRange: ClosedRange<Int64> = 1...86_400

    /// Whether this is a topic/condition send (gorush's `IsTopic`) on a platform whose `rules` have them.
    public func isTopicSend(_ rules: PlatformRules?) -> Bool {
        guard rules?.topicSends == true else { return false }
        return (topic?.isEmpty == false) || (condition?.isEmpty == false)
    }

    /// Device tokens, with gorush's legacy `to` after them where the platform's `rules` take it.
    public func allTokens(_ rules: PlatformRules?) -> [String] {
        if let to, !to.isEmpty, rules?.legacyToIsToken == true { return tokens + [to] }
        return tokens
    }

    /// What `<platform>.max_tokens` bounds: tokens (gorush's `to` included where the platform's
    /// `rules` take it), subscriptions and channels. The decoder and `IngestValidation` both count so.
    public func targetCount(_ rules: PlatformRules?) -> Int {
        allTokens(rules).count + (subscriptions?.count ?? 0) + (channels?.count ?? 0)
    }

    /// Whether this wakes the app without showing anything, by its platform's `rules` (none: no).
    public func isBackgroundPush(_ rules: PlatformRules?) -> Bool { rules?.backgroundPush.test(self) ?? false }

    /// Number of deliveries gorush counts for this notification: one per token, plus one for an FCM
    /// topic/condition send. Pushgate also counts Web Push subscriptions.
    public func deliveryCount(_ rules: PlatformRules?) -> Int {
        targetCount(rules) + (isTopicSend(rules) ? 1 : 0)
    }

    /// gorush's `counts` for this notification (its router's `countNotificationTargets`): one per entry
    /// of `tokens`, plus one when `topic` is set, whatever the platform (an iOS `topic` counts too);
    /// `to` and `condition` are not counted. Pushgate adds one per Web Push subscription and one per
    /// APNs broadcast channel.
    public var gorushCount: Int {
        tokens.count + (subscriptions?.count ?? 0) + (channels?.count ?? 0) + ((topic?.isEmpty ?? true) ? 0 : 1)
    }

    /// When retrying stops making sense, in absolute time: `expiration` is a UNIX time, or, below the
    /// platform's `relativeExpirationBelow`, seconds from acceptance (from its `send_at` when it has one).
    public func retryDeadline(acceptedAt: Date, rules: PlatformRules?) -> Date? {
        guard let e = expiration else { return nil }
        if let threshold = rules?.relativeExpirationBelow, e < threshold {
            let start = sendAt.map { max(acceptedAt, Date(timeIntervalSince1970: $0)) } ?? acceptedAt
            return start.addingTimeInterval(Double(max(0, e)))
        }
        return Date(timeIntervalSince1970: Double(e))
    }
}

/// A notification's `fallback` (a final class: a notification cannot hold its own type inline).
/// Encoded without the targets, which are the enclosing notification's (a 10,000-token notification
/// is not stored twice); `PushNotification.init(from:)` gives them back.
public final class FallbackNotification: Sendable, Codable, Equatable {
    public let notification: PushNotification

    public init(_ notification: PushNotification) { self.notification = notification }

    public init(from decoder: Decoder) throws { notification = try PushNotification(from: decoder) }

    public func encode(to encoder: Encoder) throws {
        var n = notification
        n.notifID = nil
        n.tokens = []
        n.to = nil
        n.condition = nil
        n.subscriptions = nil
        n.fallback = nil
        try n.encode(to: encoder)
    }

    public static func == (a: FallbackNotification, b: FallbackNotification) -> Bool { a === b || a.notification == b.notification }
}

/// A notification of a request body that is not sent: no platform, 0 or an unknown one. gorush's
/// router drops such notifications (only enabled platforms are queued): not counted, no log entry.
public struct SkippedNotification: Sendable, Codable, Equatable {
    /// Its position in the body's `notifications`.
    public var index: Int
    /// Its `notif_id` when it has one.
    public var notifID: String?
    /// Why (for the gateway's log).
    public var reason: String

    public init(index: Int, notifID: String?, reason: String) {
        self.index = index
        self.notifID = notifID
        self.reason = reason
    }
}

/// The `/api/push` request body.
public struct PushRequest: Sendable, Codable {
    /// The notifications to send, in body order (without the skipped ones).
    public var notifications: [PushNotification]
    /// Pushgate extension: wait for the outcome of every delivery of this request.
    public var sync: Bool?
    /// Notifications of the body that are not sent (platform missing, 0 or unknown), in body order.
    public var skipped: [SkippedNotification]
    /// Pushgate extension: the app the request is for (top-level `"app_id"`); must match the key's app.
    public var appID: String?

    public init(notifications: [PushNotification], sync: Bool? = nil, skipped: [SkippedNotification] = [], appID: String? = nil) {
        self.notifications = notifications
        self.sync = sync
        self.skipped = skipped
        self.appID = appID
    }

    enum CodingKeys: String, CodingKey {
        case notifications, sync, skipped
        case appID = "app_id"
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        notifications = try c.decode([PushNotification].self, forKey: .notifications)
        sync = try c.decodeIfPresent(Bool.self, forKey: .sync)
        skipped = try c.decodeIfPresent([SkippedNotification].self, forKey: .skipped) ?? []
        appID = try c.decodeIfPresent(String.self, forKey: .appID)
    }

    /// The position in the body of each entry of `notifications`.
    public var bodyIndices: [Int] {
        var out: [Int] = []
        out.reserveCapacity(notifications.count)
        var skippedAt = skipped.makeIterator()
        var nextSkipped = skippedAt.next()
        var i = 0
        while out.count < notifications.count {
            if let s = nextSkipped, s.index == i {
                nextSkipped = skippedAt.next()
            } else {
                out.append(i)
            }
            i += 1
        }
        return out
    }
}
