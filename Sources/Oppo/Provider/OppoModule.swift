import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// OPPO push (Pushgate's platform 10).
    public static let oppo = Platform(10, "oppo")
}

/// OPPO Push as the gateway sees it: the `oppo:` section and how it is built.
public struct OppoModule: ProviderModule {
    public init() {}

    public static let section = "oppo"

    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let appKey = Setting<String>("app_key", "", doc: "the app's AppKey")
        public static let masterSecret = Setting<String>(
            "master_secret", "", secrecy: .secret, doc: "the app's MasterSecret (signs the auth request)")
        public static let region = Setting<String>("region", "china", doc: "china (api.push.oppomobile.com) or international (api-intl)")
        public static let endpoint = Setting<String>("endpoint", "", doc: "base URL override of the region's host, for tests and proxies")
        public static let category = Setting<String>(
            "category", "", doc: "the category of a push that names none (IM, ACCOUNT, …, MARKETING); empty: such a push is refused")
        public static let notifyLevel = Setting<Int>(
            "notify_level", 0, range: 0...16, doc: "notify_level with the default category: 0 none, 1, 2 or 16")
        public static let channelID = Setting<String>("channel_id", "", doc: "the Android notification channel of a push that names none")
        public static let maxTokens = ProviderSettings.maxTokens(1000)
        public static let maxRetry = ProviderSettings.maxRetry(2)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(256)
    }

    public var platforms: [Platform] { [.oppo] }

    public var requestMembers: [RequestMember] { [OppoRequestMember.member] }

    /// The checks that need no app: the message as OPPO takes it (the classification needs the
    /// app's default and is checked by the provider, `OppoProvider.checkIngest`).
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: OppoOptions?
        do { options = try OppoRequestMember.options(of: n) } catch { return error.ingestProblem }
        return OppoMessageMapper.checkMessage(n, options: options)?.ingestProblem
    }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                Self.section,
                keys: [
                    Keys.enabled.key, Keys.appKey.key, Keys.masterSecret.key, Keys.region.key, Keys.endpoint.key, Keys.category.key,
                    Keys.notifyLevel.key, Keys.channelID.key, Keys.maxTokens.key, Keys.maxRetry.key, Keys.maxConcurrentPushes.key,
                ], about: "OPPO Push (platform `10`, docs/china-vendors.md).", inGorush: false)
        ]
    }

    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(maxTokens: Keys.maxTokens.defaultValue, maxTimeToLive: Int(OppoMessageMapper.maxTimeToLiveSeconds))
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config[Self.section]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let c = try OppoConfiguration(
            appKey: s[Keys.appKey], masterSecret: s[Keys.masterSecret], region: s[Keys.region], endpoint: s[Keys.endpoint],
            defaultCategory: s[Keys.category], defaultNotifyLevel: s[Keys.notifyLevel], defaultChannelID: s[Keys.channelID])
        let provider = OppoProvider(
            configuration: c, httpClient: context.httpClient(for: c.endpoint), maxWaiting: s[Keys.maxConcurrentPushes],
            quotaClock: context.now)
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: s[Keys.maxRetry], concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() },
            warnings: c.defaultCategory.isEmpty ? ["oppo.category is empty: pushes to OPPO without oppo.category are refused"] : [])
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "messageId" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "OPPO", color: "#1a9e4b") }
}
