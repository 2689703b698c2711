import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// Firebase Cloud Messaging (gorush's 2).
    public static let android = Platform(2, "android", aliases: ["fcm"])
}

/// The FCM provider as the gateway sees it: the `android:` section and how it is built.
public struct FCMModule: ProviderModule {
    public init() {}

    /// The `android:` keys (gorush's, plus Pushgate's `endpoint`).
    public enum Keys {
        /// gorush's default: true. Without credentials an unset `enabled` means off; an explicit
        /// `enabled: true` without credentials is a start error.
        public static let enabled = Setting<Bool>(
            "enabled", true, doc: "gorush's default: on when credentials are given; `enabled: true` written without credentials is a start error")
        public static let keyPath = Setting<String>("key_path", "", secrecy: .identifier, doc: "service-account JSON file")
        public static let credential = Setting<String>("credential", "", secrecy: .secret, doc: "service-account JSON text (instead of `key_path`)")
        public static let maxTokens = ProviderSettings.maxTokens(500)
        public static let maxRetry = ProviderSettings.maxRetry(3)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(2048)
        public static let endpoint = Setting<String>("endpoint", FCMConfiguration.defaultEndpoint, doc: "(new)")
        public static let maxConnections = ProviderSettings.maxConnections(32)
    }

    public var platforms: [Platform] { [.android] }
    public var requestMembers: [RequestMember] { FCMRequestMembers.all }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                "android",
                keys: [
                    Keys.enabled.key, Keys.keyPath.key, Keys.credential.key, Keys.maxTokens.key, Keys.maxRetry.key,
                    Keys.maxConcurrentPushes.key, Keys.endpoint.key, Keys.maxConnections.key,
                ], about: "Firebase Cloud Messaging HTTP v1 (platform `2`).")
        ]
    }

    /// gorush's CheckMessage: FCM keeps a message at most 4 weeks. `to` is a token and `topic` or
    /// `condition` a topic send, as in gorush; a data-only message is a background push.
    public func requestRules(for platform: Platform) -> PlatformRules {
        var rules = FCMMessageMapper.rules
        rules.maxTokens = defaultMaxTokens(for: platform)
        return rules
    }

    /// A `fid:` token must hold a Firebase Installation ID (FCM's `message.fid` target).
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        for (i, token) in n.tokens.enumerated() {
            guard let fid = FCMMessageMapper.installationID(in: token), !FCMMessageMapper.isInstallationID(fid) else { continue }
            return IngestProblem(
                message: "Invalid Firebase Installation ID.",
                detail: "tokens[\(i)]: a fid: token takes a Firebase Installation ID (22 characters of A-Z a-z 0-9 - _, starting with c, d, e or f)")
        }
        return nil
    }

    /// gorush's series (`_fail`, not `_error`).
    public func counters(for platform: Platform) -> PlatformCounters {
        PlatformCounters(
            success: "gorush_android_success", successHelp: "Number of android success count", error: "gorush_android_fail",
            errorHelp: "Number of android fail count", gorush: true)
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config["android"]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let envFile = config.environment[FCMConfiguration.credentialsEnvironmentVariable] ?? ""
        let hasCredentials =
            !s[Keys.keyPath].isEmpty || !s[Keys.credential].trimmingCharacters(in: .whitespacesAndNewlines).isEmpty || !envFile.isEmpty
        if !hasCredentials {
            if s.isDefault(Keys.enabled) { return ProviderBuild() }
            throw ConfigError(
                key: s.path(Keys.enabled),
                problem: "is true but FCM has no credentials: set android.key_path or android.credential (or GOOGLE_APPLICATION_CREDENTIALS)")
        }
        let fcmConfig: FCMConfiguration
        do {
            fcmConfig = try FCMConfiguration(
                keyPath: s[Keys.keyPath], credential: s[Keys.credential], endpoint: s[Keys.endpoint],
                maxRetry: s[Keys.maxRetry], environment: config.environment)
        } catch {
            throw ConfigError(key: "android", problem: error.description)
        }
        let provider: FCMProvider
        do {
            provider = try FCMProvider(
                configuration: fcmConfig, httpClient: context.httpClient(for: fcmConfig.serviceAccount.tokenURI),
                poolConfiguration: context.poolConfiguration(maxConnections: s[Keys.maxConnections]),
                eventLoopGroup: context.eventLoopGroup, logger: Logger(label: "pushgate.fcm"))
        } catch {
            throw ConfigError(key: "android", problem: error.description)
        }
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: fcmConfig.maxRetry, concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() })
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "name" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "Android", color: "#34a853") }
}
