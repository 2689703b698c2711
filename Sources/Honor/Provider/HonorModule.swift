import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// Honor Push (Pushgate's platform 8).
    public static let honor = Platform(8, "honor")
}

/// Honor Push as the gateway sees it: the `honor:` section and how it is built.
public struct HonorModule: ProviderModule {
    public init() {}

    public static let section = "honor"

    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let appID = Setting<String>("app_id", "", doc: "the app's App ID (digits; in the send path)")
        public static let clientID = Setting<String>("client_id", "", doc: "the app's OAuth 2.0 Client ID")
        public static let clientSecret = Setting<String>(
            "client_secret", "", secrecy: .secret, doc: "the app's OAuth 2.0 Client Secret (the token request)")
        public static let endpoint = Setting<String>("endpoint", "", doc: "base URL override of push-api.cloud.honor.com, for tests and proxies")
        public static let tokenURL = Setting<String>(
            "token_url", "", doc: "token endpoint override of https://iam.developer.honor.com/auth/token, for tests and proxies")
        public static let importance = Setting<String>(
            "importance", "",
            doc:
                "the importance of a notification that names none (NORMAL: service and communication; LOW: news and marketing); empty: such a push is refused"
        )
        public static let quotaCodes = Setting<String>(
            "quota_codes", "",
            doc:
                "Honor answer codes that mean the app's daily quota is spent, separated by commas (Honor publishes no code table); such an answer holds the app's sends until midnight in China"
        )
        public static let maxTokens = ProviderSettings.maxTokens(1000)
        public static let maxRetry = ProviderSettings.maxRetry(2)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(256)
    }

    public var platforms: [Platform] { [.honor] }

    public var requestMembers: [RequestMember] { [HonorRequestMember.member] }

    /// The checks that need no app: the message as Honor takes it.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: HonorOptions?
        do { options = try HonorRequestMember.options(of: n) } catch { return error.ingestProblem }
        return HonorMessageMapper.checkMessage(n, options: options)?.ingestProblem
    }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                Self.section,
                keys: [
                    Keys.enabled.key, Keys.appID.key, Keys.clientID.key, Keys.clientSecret.key, Keys.endpoint.key, Keys.tokenURL.key,
                    Keys.importance.key, Keys.quotaCodes.key, Keys.maxTokens.key, Keys.maxRetry.key, Keys.maxConcurrentPushes.key,
                ], about: "Honor Push (platform `8`, docs/china-vendors.md).", inGorush: false)
        ]
    }

    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(maxTokens: Keys.maxTokens.defaultValue, maxTimeToLive: Int(HonorMessageMapper.maxTimeToLiveSeconds))
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config[Self.section]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let c = try HonorConfiguration(
            appID: s[Keys.appID], clientID: s[Keys.clientID], clientSecret: s[Keys.clientSecret], endpoint: s[Keys.endpoint],
            tokenURL: s[Keys.tokenURL], defaultImportance: s[Keys.importance], quotaCodes: s[Keys.quotaCodes])
        let provider = HonorProvider(
            configuration: c, httpClient: context.httpClient(for: c.endpoint), tokenClient: context.httpClient(for: c.tokenURL),
            quotaClock: context.now)
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: s[Keys.maxRetry], concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() },
            warnings: c.defaultImportance.isEmpty ? ["honor.importance is empty: notifications to Honor without honor.importance are refused"] : [])
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "requestId" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "Honor Push", color: "#0a59f7") }
}
