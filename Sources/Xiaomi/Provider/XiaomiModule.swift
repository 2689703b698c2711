import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// Xiaomi push (Pushgate's platform 9).
    public static let xiaomi = Platform(9, "xiaomi", aliases: ["mi"])
}

/// Xiaomi MiPush as the gateway sees it: the `xiaomi:` section and how it is built.
public struct XiaomiModule: ProviderModule {
    public init() {}

    public static let section = "xiaomi"

    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let appSecret = Setting<String>(
            "app_secret", "", secrecy: .secret, doc: "the app's AppSecret (sent as `Authorization: key=<AppSecret>`)")
        public static let packageName = Setting<String>("package_name", "", doc: "the app's package name (`restricted_package_name`)")
        public static let region = Setting<String>(
            "region", "china", doc: "Xiaomi's host by the app's region: china, russia, india, europe or singapore")
        public static let endpoint = Setting<String>("endpoint", "", doc: "base URL override of the region's host, for tests and proxies")
        public static let channelID = Setting<String>(
            "channel_id", "",
            doc: "the channel (`extra.channel_id`) of a push that names none; empty: a push without `xiaomi.channel_id` is refused")
        public static let maxTokens = ProviderSettings.maxTokens(1000)
        public static let maxRetry = ProviderSettings.maxRetry(2)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(256)
    }

    public var platforms: [Platform] { [.xiaomi] }

    public var requestMembers: [RequestMember] { [XiaomiRequestMember.member] }

    /// The checks that need no app: the message as Xiaomi takes it (the classification needs the
    /// app's default and is checked by the provider, `XiaomiProvider.checkIngest`).
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: XiaomiOptions?
        do { options = try XiaomiRequestMember.options(of: n) } catch { return error.ingestProblem }
        return XiaomiMessageMapper.checkMessage(n, options: options)?.ingestProblem
    }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                Self.section,
                keys: [
                    Keys.enabled.key, Keys.appSecret.key, Keys.packageName.key, Keys.region.key, Keys.endpoint.key, Keys.channelID.key,
                    Keys.maxTokens.key, Keys.maxRetry.key, Keys.maxConcurrentPushes.key,
                ], about: "Xiaomi MiPush (platform `9`, docs/china-vendors.md).", inGorush: false)
        ]
    }

    /// Xiaomi keeps a message at most two weeks.
    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(maxTokens: Keys.maxTokens.defaultValue, maxTimeToLive: Int(XiaomiMessageMapper.maxTimeToLiveSeconds))
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config[Self.section]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let c = try XiaomiConfiguration(
            appSecret: s[Keys.appSecret], packageName: s[Keys.packageName], region: s[Keys.region], endpoint: s[Keys.endpoint],
            defaultChannelID: s[Keys.channelID])
        let provider = XiaomiProvider(configuration: c, httpClient: context.httpClient(for: c.sendURL), quotaClock: context.now)
        var warnings: [String] = []
        if c.defaultChannelID.isEmpty {
            warnings.append("xiaomi.channel_id is empty: pushes to Xiaomi without xiaomi.channel_id are refused")
        }
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: s[Keys.maxRetry], concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() }, warnings: warnings)
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "id" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "Xiaomi", color: "#ff6900") }
}
