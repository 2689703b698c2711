import Foundation

/// gorush platform numbers, plus Pushgate's Web Push (4) and UnifiedPush (5).
public enum Platform: Int, Sendable, Codable, CaseIterable, CustomStringConvertible {
    case ios = 1
    case android = 2
    case huawei = 3
    case webpush = 4
    case unifiedpush = 5
    case harmony = 6

    /// The name gorush uses in log entries and stats.
    public var name: String {
        switch self {
        case .ios: return "ios"
        case .android: return "android"
        case .huawei: return "huawei"
        case .webpush: return "webpush"
        case .unifiedpush: return "unifiedpush"
        case .harmony: return "harmony"
        }
    }

    public var description: String { name }

    /// "1 ios, 2 android, …": every platform's number and name, for the unknown-platform messages.
    public static let numbered: String = allCases.map { "\($0.rawValue) \($0.name)" }.joined(separator: ", ")

    public init?(name: String) {
        switch name.lowercased() {
        case "ios", "apns", "1": self = .ios
        case "android", "fcm", "2": self = .android
        case "huawei", "hms", "3": self = .huawei
        case "webpush", "web", "4": self = .webpush
        case "unifiedpush", "up", "5": self = .unifiedpush
        case "harmony", "harmonyos", "6": self = .harmony
        default: return nil
        }
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let i = try? c.decode(Int.self) {
            guard let p = Platform(rawValue: i) else {
                throw DecodingError.dataCorruptedError(
                    in: c, debugDescription: "unknown platform \(i) (\(Platform.numbered))")
            }
            self = p
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

/// APNs `alert` dictionary fields gorush accepts.
public struct APNsAlert: Sendable, Codable, Equatable {
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

    enum CodingKeys: String, CodingKey {
        case title, subtitle, body, action
        case actionLocKey = "action-loc-key"
        case launchImage = "launch-image"
        case locArgs = "loc-args"
        case locKey = "loc-key"
        case titleLocArgs = "title-loc-args"
        case titleLocKey = "title-loc-key"
        case summaryArg = "summary-arg"
        case summaryArgCount = "summary-arg-count"
    }

    public var isEmpty: Bool { self == APNsAlert() }
}

/// One notification of a gorush `/api/push` request (gorush's JSON names), plus Pushgate extensions.
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
    /// gorush's top-level `name` (iOS): makes `aps.sound` the critical-sound dictionary with this name.
    public var soundName: String?
    /// gorush's top-level `volume` (iOS): when above 0, `aps.sound` is the critical-sound dictionary with it.
    public var soundVolume: Double?
    public var data: JSONObject?
    public var badge: Int?
    public var category: String?
    public var threadID: String?
    public var urlArgs: [String]?
    public var alert: APNsAlert?
    public var expiration: Int64?
    public var apnsID: String?
    public var collapseID: String?
    public var pushType: String?
    public var interruptionLevel: String?
    public var relevanceScore: Double?
    public var contentState: JSONObject?
    public var staleDate: Int64?
    public var dismissalDate: Int64?
    public var event: String?
    public var timestamp: Int64?
    public var attributesType: String?
    public var attributes: JSONObject?
    /// `input-push-token` (Live Activity start): asks the started activity for a push token (`aps.input-push-token: 1`).
    public var inputPushToken: Bool?
    /// `input-push-channel` (Live Activity start): subscribes the started activity to this broadcast channel.
    public var inputPushChannel: String?
    /// `channels` (iOS, push type `liveactivity`): APNs broadcast channel ids, one broadcast each
    /// (`POST /4/broadcasts/apps/<bundle id>` with `apns-channel-id`).
    public var channels: [String]?
    public var production: Bool?
    public var development: Bool?
    public var retry: Int?
    public var image: String?
    public var condition: String?
    public var to: String?
    public var dryRun: Bool?
    // FCM pass-through objects
    public var fcmNotification: JSONObject?
    public var android: JSONObject?
    public var apns: JSONObject?
    public var webpush: JSONObject?
    public var fcmOptions: JSONObject?
    // Web Push / UnifiedPush extensions
    public var subscriptions: [WebPushSubscription]?
    public var payload: String?
    public var timeToLive: Int64?
    public var urgency: String?
    // Declarative Web Push (platform webpush only; docs/declarative-web-push.md)
    /// `declarative`: send the declarative push message (`"web_push": 8030`) a browser shows without a
    /// service worker instead of the plain payload; nil = the `webpush.declarative` default.
    public var declarative: Bool?
    /// `navigate`: the absolute http(s) URL the declarative message opens when clicked (else `data.url`).
    public var navigate: String?
    /// `silent`: the declarative message's `notification.silent`.
    public var silent: Bool?
    // Huawei HMS (gorush's fields; its per-request `app_id` / `app_secret` are read and dropped, as
    // gorush v1.22 never uses them)
    /// `huawei_notification`: HMS `android.notification`, passed through.
    public var huaweiNotification: JSONObject?
    /// `huawei_data`: HMS `message.data` (a string, usually JSON text).
    public var huaweiData: String?
    /// `huawei_collapse_key`: HMS `android.collapse_key` (-1...100).
    public var huaweiCollapseKey: Int?
    /// `huawei_ttl`: HMS `android.ttl` ("86400s", "3600", "1.5s").
    public var huaweiTTL: String?
    /// `bi_tag`: HMS `android.bi_tag`.
    public var biTag: String?
    /// `fast_app_target`: HMS `android.fast_app_target` (1 development, 2 production).
    public var fastAppTarget: Int?
    /// `harmony_payload`: HarmonyOS Push Kit v3 `payload`, passed through (widget, live view and
    /// extension messages, whose shape depends on the push type).
    public var harmonyPayload: JSONObject?
    // Delivery controls (Pushgate extensions, docs/delivery-controls.md)
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
    /// `send_at` (RFC 3339 text or UNIX seconds), as UNIX seconds: not sent before then
    /// (`delay_seconds` is turned into it when the request is accepted).
    public var sendAt: Double?
    /// `delay_seconds`: not sent before this many seconds after acceptance.
    public var delaySeconds: Int64?
    /// `deliver_between`: the local hours a delivery may be sent in.
    public var deliverBetween: DeliveryWindow?
    /// `quiet`: what a delivery due outside `deliver_between` does (default `wait`).
    public var quiet: QuietMode?
    /// `analytics_label`: FCM's `fcm_options.analytics_label`.
    public var analyticsLabel: String?

    public init(platform: Platform, tokens: [String] = []) {
        self.platform = platform
        self.tokens = tokens
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case notifID = "notif_id"
        case tokens, platform, message, title, topic, priority
        case contentAvailable = "content_available"
        case mutableContent = "mutable_content"
        case sound, data, badge, category
        case soundName = "name"
        case soundVolume = "volume"
        case threadID = "thread-id"
        case urlArgs = "url-args"
        case alert, expiration
        case apnsID = "apns_id"
        case collapseID = "collapse_id"
        case pushType = "push_type"
        case interruptionLevel = "interruption_level"
        case relevanceScore = "relevance-score"
        case contentState = "content-state"
        case staleDate = "stale-date"
        case dismissalDate = "dismissal-date"
        case event, timestamp
        case attributesType = "attributes-type"
        case attributes, production, development, retry, image, condition, to
        case inputPushToken = "input-push-token"
        case inputPushChannel = "input-push-channel"
        case channels
        case dryRun = "dry_run"
        case fcmNotification = "notification"
        case android, apns, webpush
        case fcmOptions = "fcm_options"
        case subscriptions, payload
        case timeToLive = "time_to_live"
        case urgency
        case declarative, navigate, silent
        case huaweiNotification = "huawei_notification"
        case huaweiData = "huawei_data"
        case huaweiCollapseKey = "huawei_collapse_key"
        case huaweiTTL = "huawei_ttl"
        case biTag = "bi_tag"
        case fastAppTarget = "fast_app_target"
        case harmonyPayload = "harmony_payload"
        case dedupKey = "dedup_key"
        case coalesceSeconds = "coalesce_seconds"
        case fallback
        case sendAt = "send_at"
        case delaySeconds = "delay_seconds"
        case deliverBetween = "deliver_between"
        case quiet
        case analyticsLabel = "analytics_label"
    }

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
        soundName = try c.decodeIfPresent(String.self, forKey: .soundName)
        soundVolume = try c.decodeIfPresent(Double.self, forKey: .soundVolume)
        data = try c.decodeIfPresent(JSONObject.self, forKey: .data)
        badge = try c.decodeIfPresent(Int.self, forKey: .badge)
        category = try c.decodeIfPresent(String.self, forKey: .category)
        threadID = try c.decodeIfPresent(String.self, forKey: .threadID)
        urlArgs = try c.decodeIfPresent([String].self, forKey: .urlArgs)
        alert = try c.decodeIfPresent(APNsAlert.self, forKey: .alert)
        expiration = try c.decodeIfPresent(Int64.self, forKey: .expiration)
        apnsID = try c.decodeIfPresent(String.self, forKey: .apnsID)
        collapseID = try c.decodeIfPresent(String.self, forKey: .collapseID)
        pushType = try c.decodeIfPresent(String.self, forKey: .pushType)
        interruptionLevel = try c.decodeIfPresent(String.self, forKey: .interruptionLevel)
        relevanceScore = try c.decodeIfPresent(Double.self, forKey: .relevanceScore)
        contentState = try c.decodeIfPresent(JSONObject.self, forKey: .contentState)
        staleDate = try c.decodeIfPresent(Int64.self, forKey: .staleDate)
        dismissalDate = try c.decodeIfPresent(Int64.self, forKey: .dismissalDate)
        event = try c.decodeIfPresent(String.self, forKey: .event)
        timestamp = try c.decodeIfPresent(Int64.self, forKey: .timestamp)
        attributesType = try c.decodeIfPresent(String.self, forKey: .attributesType)
        attributes = try c.decodeIfPresent(JSONObject.self, forKey: .attributes)
        inputPushToken = try c.decodeIfPresent(Bool.self, forKey: .inputPushToken)
        inputPushChannel = try c.decodeIfPresent(String.self, forKey: .inputPushChannel)
        channels = try c.decodeIfPresent([String].self, forKey: .channels)
        production = try c.decodeIfPresent(Bool.self, forKey: .production)
        development = try c.decodeIfPresent(Bool.self, forKey: .development)
        retry = try c.decodeIfPresent(Int.self, forKey: .retry)
        image = try c.decodeIfPresent(String.self, forKey: .image)
        condition = try c.decodeIfPresent(String.self, forKey: .condition)
        to = try c.decodeIfPresent(String.self, forKey: .to)
        dryRun = try c.decodeIfPresent(Bool.self, forKey: .dryRun)
        fcmNotification = try c.decodeIfPresent(JSONObject.self, forKey: .fcmNotification)
        android = try c.decodeIfPresent(JSONObject.self, forKey: .android)
        apns = try c.decodeIfPresent(JSONObject.self, forKey: .apns)
        webpush = try c.decodeIfPresent(JSONObject.self, forKey: .webpush)
        fcmOptions = try c.decodeIfPresent(JSONObject.self, forKey: .fcmOptions)
        subscriptions = try c.decodeIfPresent([WebPushSubscription].self, forKey: .subscriptions)
        payload = try c.decodeIfPresent(String.self, forKey: .payload)
        timeToLive = try c.decodeIfPresent(Int64.self, forKey: .timeToLive)
        urgency = try c.decodeIfPresent(String.self, forKey: .urgency)
        declarative = try c.decodeIfPresent(Bool.self, forKey: .declarative)
        navigate = try c.decodeIfPresent(String.self, forKey: .navigate)
        silent = try c.decodeIfPresent(Bool.self, forKey: .silent)
        huaweiNotification = try c.decodeIfPresent(JSONObject.self, forKey: .huaweiNotification)
        huaweiData = try c.decodeIfPresent(String.self, forKey: .huaweiData)
        huaweiCollapseKey = try c.decodeIfPresent(Int.self, forKey: .huaweiCollapseKey)
        huaweiTTL = try c.decodeIfPresent(String.self, forKey: .huaweiTTL)
        biTag = try c.decodeIfPresent(String.self, forKey: .biTag)
        fastAppTarget = try c.decodeIfPresent(Int.self, forKey: .fastAppTarget)
        harmonyPayload = try c.decodeIfPresent(JSONObject.self, forKey: .harmonyPayload)
        dedupKey = try c.decodeIfPresent(String.self, forKey: .dedupKey)
        coalesceSeconds = try c.decodeIfPresent(Int.self, forKey: .coalesceSeconds)
        sendAt = try c.decodeIfPresent(Double.self, forKey: .sendAt)
        delaySeconds = try c.decodeIfPresent(Int64.self, forKey: .delaySeconds)
        deliverBetween = try c.decodeIfPresent(DeliveryWindow.self, forKey: .deliverBetween)
        quiet = try c.decodeIfPresent(QuietMode.self, forKey: .quiet)
        analyticsLabel = try c.decodeIfPresent(String.self, forKey: .analyticsLabel)
        // Stored without its targets (they are this notification's): given back here.
        if var f = try c.decodeIfPresent(FallbackNotification.self, forKey: .fallback)?.notification {
            f.withTargets(of: self)
            fallback = FallbackNotification(f)
        }
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

    /// Whether the request asked for the sandbox/development APNs environment.
    /// `nil` means "use the configured default".
    public var productionOverride: Bool? {
        if production == true { return true }
        if development == true { return false }
        return nil
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
