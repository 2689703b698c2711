import Foundation

/// Where one delivery goes.
public enum PushTarget: Sendable, Codable, Equatable, Hashable {
    /// A device token (APNs hex token, FCM registration token) or a bare UnifiedPush endpoint URL.
    case token(String)
    /// An FCM topic or condition send (one per notification).
    case topic
    /// A Web Push / UnifiedPush subscription.
    case subscription(WebPushSubscription)
    /// An APNs broadcast channel id (iOS 18 Live Activities).
    case channel(String)

    /// The string reported in log entries and feedback.
    public var reportedToken: String {
        switch self {
        case .token(let t): return t
        case .topic: return ""
        case .subscription(let s): return s.endpoint
        case .channel(let id): return id
        }
    }
}

extension PushNotification {
    /// Every delivery this notification asks for, in request order, by its platform's `rules`.
    public func targets(_ rules: PlatformRules?) -> [PushTarget] {
        var out: [PushTarget] = allTokens(rules).map { .token($0) }
        if let subs = subscriptions { out += subs.map { .subscription($0) } }
        if let channels { out += channels.map { .channel($0) } }
        if isTopicSend(rules) { out.append(.topic) }
        return out
    }
}

/// Identity of one delivery, kept across retries.
public struct DeliveryContext: Sendable {
    /// Stable message identity: sent as `apns-id` (a UUID), used to recognise duplicates.
    public var messageID: String
    public init(messageID: String) { self.messageID = messageID }
}

/// A provider-specific rendering of one notification, made once and reused for every token and retry.
public protocol PreparedPush: Sendable {
    /// The size in bytes the provider's limit applies to (APNs payload, FCM/HMS largest request body,
    /// Web Push plaintext); nil when the rendering does not say.
    var payloadBytes: Int? { get }
    /// The message identity the notification gave itself (APNs' `apns_id`): every delivery of it
    /// carries it instead of a new one. Nil: each delivery gets a new UUID.
    var messageID: String? { get }
}

extension PreparedPush {
    public var payloadBytes: Int? { nil }
    public var messageID: String? { nil }
}

/// An ingest check's refusal: a 400 with `message`, and `detail` naming the field
/// (`collapse_id: ...`; the server prefixes `notifications[i].`).
public struct IngestProblem: Sendable, Equatable {
    public var message: String
    public var detail: String

    public init(message: String, detail: String) {
        self.message = message
        self.detail = detail
    }
}

/// What a provider says of its own state (`PushProvider.health`).
public enum ProviderHealth: Sendable, Equatable {
    case ok
    /// The provider's service refuses its configuration (e.g. credentials for another app): sends
    /// fail until the configuration is fixed. `since`: the first refusal of this spell.
    case failing(reason: String, since: Date)

    public var isFailing: Bool { if case .failing = self { return true } else { return false } }
}

/// One push provider (APNs, FCM, Web Push, UnifiedPush) behind one small protocol.
public protocol PushProvider: Sendable {
    /// The platform this provider serves.
    var platform: Platform { get }
    /// Highest number of attempts for one delivery (`<provider>.max_retry` + 1 is decided by the caller).
    /// Validates and renders the notification before any network call. Throws `PushFailure`
    /// (e.g. `PayloadTooLarge (N > 4096 bytes)`) for input the provider would refuse.
    func prepare(_ notification: PushNotification) throws -> any PreparedPush
    /// Checks at ingest that need this provider's (its app's) configuration, such as a default a
    /// request may leave out: a problem is a 400 naming the field (the Matrix API: that device is
    /// refused). Nil: nothing to say.
    func checkIngest(_ notification: PushNotification) -> IngestProblem?
    /// Checks at ingest that wait on the network (a DNS lookup), run after every synchronous check
    /// passed: once per request, with the request's notifications this provider serves, in request
    /// order. Answers the refused ones by their position in `notifications` (a 400 naming the field,
    /// as `checkIngest`'s). The work is the provider's to bound (each distinct host once per request,
    /// a cache, a few lookups at a time); the gateway stops waiting at its deadline and accepts then,
    /// so whatever is checked here must be checked again at send time. Default: nothing.
    func checkIngestAsync(_ notifications: [PushNotification]) async -> [Int: IngestProblem]
    /// Whether `checkIngestAsync` checks anything (default false: the gateway does not call it, and a
    /// request for providers without such a check costs no task).
    var checksIngestAsync: Bool { get }
    /// Whether the provider works as configured, for the status page, `/metrics` and `/readyz`'s
    /// body: `.failing` while its service refuses its configuration (credentials for another app).
    /// Default: `.ok`.
    var health: ProviderHealth { get }
    /// Per-target validation before any network call (e.g. an SSRF-refused Web Push endpoint).
    func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure?
    /// One delivery attempt. Never throws: every failure is classified.
    func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome
    /// Closes connections.
    func shutdown() async
}

extension PushProvider {
    public func checkIngest(_ notification: PushNotification) -> IngestProblem? { nil }
    public func checkIngestAsync(_ notifications: [PushNotification]) async -> [Int: IngestProblem] { [:] }
    public var checksIngestAsync: Bool { false }
    public var health: ProviderHealth { .ok }
    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? { nil }
}

/// A built provider and how the dispatcher drives it: what a provider module's `build` gives
/// for each platform it serves (`ProviderBuild.providers`), and the dispatcher's entry for it.
public struct ProviderSlot: Sendable {
    public var provider: any PushProvider
    /// `<provider>.max_retry`: retries after the first attempt.
    public var maxRetry: Int
    /// Deliveries in flight at once for this provider.
    public var concurrency: Int
    /// `<platform>.coalesce_seconds`: the coalescing window of background pushes with a
    /// `collapse_id` that do not set `coalesce_seconds` (0: none).
    public var coalesceSeconds: Int

    public init(provider: any PushProvider, maxRetry: Int = 3, concurrency: Int = 256, coalesceSeconds: Int = 0) {
        self.provider = provider
        self.maxRetry = maxRetry
        self.concurrency = max(1, concurrency)
        self.coalesceSeconds = max(0, coalesceSeconds)
    }
}
