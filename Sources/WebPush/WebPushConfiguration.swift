import Foundation

/// The `webpush:` configuration section (shared by Web Push and UnifiedPush). Its keys, defaults and
/// meanings are the `doc:` of the settings in WebPushModule.swift, listed in docs/configuration.md.
public struct WebPushConfiguration: Sendable, Equatable {
    public var vapidPrivateKey: String
    public var vapidSubject: String
    public var allowHTTP: Bool = false
    public var allowPrivateEndpoints: Bool = false
    public var hostAllowlist: [String]? = nil
    /// `TTL` when the notification gives neither `time_to_live` nor `expiration`: one day.
    public var defaultTTL: Int = WebPushConfiguration.standardDefaultTTL
    /// Platform webpush notifications that say neither `"declarative"` nor `payload` are rendered as a
    /// declarative push message (docs/declarative-web-push.md); UnifiedPush never is.
    public var declarative: Bool = false
    public var maxRetry: Int = 3
    public var requestTimeoutSeconds: Double = 30
    /// HTTP/2 connections per push-service origin kept while idle (the floor).
    public var connectionsPerOrigin: Int = 2
    /// `webpush.max_connections`: the ceiling per origin while deliveries wait for a stream.
    public var maxConnectionsPerOrigin: Int = 16
    /// `unifiedpush.vapid`: bare-endpoint (unencrypted) UnifiedPush requests carry VAPID too
    /// (encrypted ones always do). UnifiedPush AND_3 recommends VAPID; a distributor may require it.
    public var unifiedPushLegacyVAPID: Bool = false
    /// How long a DNS answer checked by the SSRF guard is reused.
    public var resolutionCacheSeconds: Double = 60

    public static let standardDefaultTTL = 86_400

    /// The YAML keys of the section, for the config loader and `GET /api/config`.
    public enum Key {
        public static let vapidPrivateKey = "vapid_private_key"
        public static let vapidSubject = "vapid_subject"
        public static let allowHTTP = "allow_http"
        public static let allowPrivateEndpoints = "allow_private_endpoints"
        public static let hostAllowlist = "host_allowlist"
        public static let defaultTTL = "default_ttl"
        public static let declarative = "declarative"
        public static let maxRetry = "max_retry"
        public static let timeout = "timeout"
        public static let connectionsPerOrigin = "connections_per_origin"
        public static let maxConnections = "max_connections"
    }

    public init(vapidPrivateKey: String, vapidSubject: String) {
        self.vapidPrivateKey = vapidPrivateKey
        self.vapidSubject = vapidSubject
    }

    /// Checks every key; throws `WebPushConfigurationError` with a one-line message naming the key.
    /// Returns the parsed VAPID keys.
    @discardableResult
    public func validate() throws -> VAPIDKeys {
        let keys = try VAPIDKeys(privateKeyBase64URL: vapidPrivateKey)
        try validateVAPIDSubject(vapidSubject)
        if defaultTTL < 0 { throw WebPushConfigurationError("webpush.default_ttl must be >= 0 (got \(defaultTTL))") }
        if maxRetry < 0 { throw WebPushConfigurationError("webpush.max_retry must be >= 0 (got \(maxRetry))") }
        if !(requestTimeoutSeconds > 0) { throw WebPushConfigurationError("webpush.timeout must be > 0 seconds (got \(requestTimeoutSeconds))") }
        if connectionsPerOrigin < 1 { throw WebPushConfigurationError("webpush.connections_per_origin must be >= 1 (got \(connectionsPerOrigin))") }
        if maxConnectionsPerOrigin < 1 { throw WebPushConfigurationError("webpush.max_connections must be >= 1 (got \(maxConnectionsPerOrigin))") }
        if let list = hostAllowlist {
            for (i, h) in list.enumerated() {
                let t = h.trimmingCharacters(in: .whitespaces)
                if t.isEmpty || t.contains("/") || t.contains(" ") || t.contains("://") {
                    throw WebPushConfigurationError(
                        "webpush.host_allowlist[\(i)]: \"\(h)\" is not a host name (use push.example.com or *.example.com)")
                }
            }
        }
        return keys
    }
}
