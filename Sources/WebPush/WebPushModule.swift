import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// Web Push (RFC 8030/8291/8292).
    public static let webpush = Platform(4, "webpush", aliases: ["web"])
    /// UnifiedPush: Web Push to a distributor's endpoint, or a bare endpoint URL.
    public static let unifiedpush = Platform(5, "unifiedpush", aliases: ["up"])
}

/// Web Push (platform 4) and UnifiedPush (platform 5) as the gateway sees them: the `webpush:` and
/// `unifiedpush:` sections, the ingest checks, and one engine (VAPID keys, tokens, connections) for both.
public struct WebPushModule: ProviderModule {
    public init() {}

    /// The `webpush:` keys (named by `WebPushConfiguration.Key`).
    public enum Keys {
        public typealias K = WebPushConfiguration.Key
        public static let enabled = ProviderSettings.enabled
        public static let vapidPrivateKey = Setting<String>(
            K.vapidPrivateKey, "", secrecy: .secret, doc: "(new) base64url raw 32-byte P-256 private scalar; `pushgate vapid-keys` prints a pair")
        public static let vapidSubject = Setting<String>(K.vapidSubject, "", doc: "(new) `mailto:you@example.com` or an `https:` contact URL")
        public static let allowHTTP = Setting<Bool>(K.allowHTTP, false, doc: "(new) SSRF guard switch: accept plain `http://` endpoints")
        public static let allowPrivateEndpoints = Setting<Bool>(
            K.allowPrivateEndpoints, false,
            doc: "(new) SSRF guard switch: allow endpoints resolving to loopback, private, link-local and other non-public addresses")
        public static let hostAllowlist = Setting<[String]>(
            K.hostAllowlist, [], doc: "(new) when set, only these push-service hosts (`push.example.com`, or `*.example.com` for subdomains)")
        public static let defaultTTL = Setting<Int>(
            K.defaultTTL, WebPushConfiguration.standardDefaultTTL, range: 0...Int(Int32.max),
            doc: "(new) `TTL` (seconds) when a notification has neither `time_to_live` nor `expiration`")
        public static let declarative = Setting<Bool>(
            K.declarative, false,
            doc:
                "(new) Web Push notifications without `declarative` or `payload` are sent as declarative push messages ([docs/declarative-web-push.md](docs/declarative-web-push.md))"
        )
        public static let maxTokens = ProviderSettings.maxTokens(1000)
        public static let maxRetry = Setting<Int>(
            K.maxRetry, 3, range: 0...100, doc: "(new) retries of a transient failure (429, 5xx, connection), done by the dispatcher")
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(2048)
        public static let timeout = Setting<Int>(K.timeout, 30, range: 1...3600, doc: "(new) seconds per request to a push service")
        public static let connectionsPerOrigin = Setting<Int>(
            K.connectionsPerOrigin, 2, range: 1...1000,
            doc:
                "(new) HTTP/2 connections per push-service origin opened as soon as deliveries overlap and kept while the origin is in use (the floor)"
        )
        public static let maxConnections = ProviderSettings.maxConnections(
            16, per: " per push-service origin (at least `webpush.connections_per_origin`)", floor: "`webpush.connections_per_origin`")
    }

    /// The `unifiedpush:` keys (the engine's other settings are `webpush:`'s).
    public enum UnifiedPushKeys {
        public static let enabled = ProviderSettings.enabled
        public static let maxTokens = ProviderSettings.maxTokens(1000)
        public static let maxRetry = ProviderSettings.maxRetry(3)
        public static let vapid = Setting<Bool>(
            "vapid", false,
            doc:
                "(new) send VAPID (RFC 8292, `webpush.vapid_*` keys) on bare-endpoint (unencrypted) UnifiedPush requests too; encrypted ones always carry it"
        )
    }

    public var platforms: [Platform] { [.webpush, .unifiedpush] }
    public var requestMembers: [RequestMember] { WebPushRequestMembers.all }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                "webpush",
                keys: [
                    Keys.enabled.key, Keys.vapidPrivateKey.key, Keys.vapidSubject.key, Keys.allowHTTP.key, Keys.allowPrivateEndpoints.key,
                    Keys.hostAllowlist.key, Keys.defaultTTL.key, Keys.declarative.key, Keys.maxTokens.key, Keys.maxRetry.key,
                    Keys.maxConcurrentPushes.key,
                    Keys.timeout.key, Keys.connectionsPerOrigin.key, Keys.maxConnections.key,
                ], about: "Web Push (platform `4`); its VAPID keys serve UnifiedPush too, and `max_concurrent_pushes` counts both.", inGorush: false),
            ConfigSection(
                "unifiedpush",
                keys: [UnifiedPushKeys.enabled.key, UnifiedPushKeys.maxTokens.key, UnifiedPushKeys.maxRetry.key, UnifiedPushKeys.vapid.key],
                about: "UnifiedPush (platform `5`), sent by the Web Push engine.", inGorush: false),
        ]
    }

    /// Declarative Web Push is a browser feature: its members on another platform would do nothing.
    public func requestRules(for platform: Platform) -> PlatformRules {
        // Every message wakes the service worker or the app; a small `expiration` is a TTL.
        var rules = PlatformRules(
            maxTokens: defaultMaxTokens(for: platform), relativeExpirationBelow: WebPushRequestValidator.absoluteExpirationThreshold,
            backgroundPush: .always)
        if platform == .webpush {
            rules.exclusiveMembers = [
                .init(
                    ["declarative", "navigate", "silent"],
                    problem: "only for platform webpush (a Declarative Web Push message); {platform} has no such field")
            ]
        }
        return rules
    }

    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        WebPushRequestValidator.validate(n).map { IngestProblem(message: "Invalid Web Push notification.", detail: $0) }
    }

    /// The engine's configuration from the `webpush:` section.
    public static func configuration(_ s: SectionValues) -> WebPushConfiguration {
        var config = WebPushConfiguration(vapidPrivateKey: s[Keys.vapidPrivateKey], vapidSubject: s[Keys.vapidSubject])
        config.allowHTTP = s[Keys.allowHTTP]
        config.allowPrivateEndpoints = s[Keys.allowPrivateEndpoints]
        let allow = s[Keys.hostAllowlist]
        config.hostAllowlist = allow.isEmpty ? nil : allow
        config.defaultTTL = s[Keys.defaultTTL]
        config.declarative = s[Keys.declarative]
        config.maxRetry = s[Keys.maxRetry]
        config.requestTimeoutSeconds = Double(s[Keys.timeout])
        config.connectionsPerOrigin = s[Keys.connectionsPerOrigin]
        config.maxConnectionsPerOrigin = s[Keys.maxConnections]
        return config
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config["webpush"]
        let up = config["unifiedpush"]
        let web = s[Keys.enabled]
        let unified = up[UnifiedPushKeys.enabled]
        guard web || unified else { return ProviderBuild() }
        var wpConfig = Self.configuration(s)
        wpConfig.unifiedPushLegacyVAPID = up[UnifiedPushKeys.vapid]
        let engine: WebPushEngine
        do {
            engine = try WebPushEngine(
                configuration: wpConfig, poolConfiguration: context.poolConfiguration,
                eventLoopGroup: context.eventLoopGroup, logger: Logger(label: "pushgate.webpush"))
        } catch let e as WebPushConfigurationError {
            throw ConfigError(key: "webpush", problem: e.description)
        } catch {
            throw ConfigError(key: "webpush", problem: "\(error)")
        }
        let concurrency = s[Keys.maxConcurrentPushes]
        var providers: [ProviderSlot] = []
        if web { providers.append(ProviderSlot(provider: WebPushProvider(engine: engine), maxRetry: wpConfig.maxRetry, concurrency: concurrency)) }
        if unified {
            providers.append(
                ProviderSlot(
                    provider: WebPushProvider(engine: engine, platform: .unifiedpush), maxRetry: up[UnifiedPushKeys.maxRetry],
                    concurrency: concurrency))
        }
        return ProviderBuild(providers: providers, shutdown: { await engine.shutdown() })
    }

    /// Legacy UnifiedPush needs no VAPID key: `pushgate send` uses a throwaway one when none is configured.
    public func sendOverrides(for platform: Platform, config: ProviderConfig) -> [(key: String, value: ConfigValue)] {
        let s = config["webpush"]
        guard platform == .unifiedpush, s[Keys.vapidPrivateKey].isEmpty else { return [] }
        var out: [(key: String, value: ConfigValue)] = [(s.path(Keys.vapidPrivateKey), .string(VAPIDKeys.generate().privateKeyBase64URL))]
        if s[Keys.vapidSubject].isEmpty { out.append((s.path(Keys.vapidSubject), .string("mailto:pushgate@localhost"))) }
        return out
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "location" }
    public func presentation(for platform: Platform) -> PlatformPresentation {
        platform == .unifiedpush
            ? PlatformPresentation(title: "UnifiedPush", color: "#f29900") : PlatformPresentation(title: "Web Push", color: "#8e5cd9")
    }

    public var tools: [ProviderTool] {
        [
            ProviderTool(name: "vapid-keys", abstract: "Print a new VAPID key pair for webpush.vapid_private_key.") {
                let keys = VAPIDKeys.generate()
                return "vapid_private_key: \(keys.privateKeyBase64URL)\n"
                    + "vapid_public_key: \(keys.publicKeyBase64URL)   # give this one to browsers (applicationServerKey)"
            }
        ]
    }
}
