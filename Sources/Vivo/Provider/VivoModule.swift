import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// vivo Push (Pushgate's platform 11).
    public static let vivo = Platform(11, "vivo")
}

/// vivo Push as the gateway sees it: the `vivo:` section and how it is built.
public struct VivoModule: ProviderModule {
    public init() {}

    public static let section = "vivo"

    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let appID = Setting<String>("app_id", "", doc: "the app's numeric AppID")
        public static let appKey = Setting<String>("app_key", "", doc: "the app's AppKey")
        public static let appSecret = Setting<String>("app_secret", "", secrecy: .secret, doc: "the app's AppSecret (signs the auth request)")
        public static let endpoint = Setting<String>("endpoint", "", doc: "base URL override of api-push.vivo.com.cn, for tests and proxies")
        public static let category = Setting<String>(
            "category", "",
            doc: "the category of a push that names none (IM, ACCOUNT, …, MARKETING; its classification follows); empty: such a push is refused")
        public static let maxTokens = ProviderSettings.maxTokens(1000)
        public static let maxRetry = ProviderSettings.maxRetry(2)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(256)
    }

    public var platforms: [Platform] { [.vivo] }

    public var requestMembers: [RequestMember] { [VivoRequestMember.member] }

    /// The checks that need no app: the message as vivo takes it.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: VivoOptions?
        do { options = try VivoRequestMember.options(of: n) } catch { return error.ingestProblem }
        return VivoMessageMapper.checkMessage(n, options: options)?.ingestProblem
    }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                Self.section,
                keys: [
                    Keys.enabled.key, Keys.appID.key, Keys.appKey.key, Keys.appSecret.key, Keys.endpoint.key, Keys.category.key, Keys.maxTokens.key,
                    Keys.maxRetry.key, Keys.maxConcurrentPushes.key,
                ], about: "vivo Push (platform `11`, docs/china-vendors.md).", inGorush: false)
        ]
    }

    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(maxTokens: Keys.maxTokens.defaultValue, maxTimeToLive: Int(VivoMessageMapper.maxTimeToLiveSeconds))
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config[Self.section]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let c = try VivoConfiguration(
            appID: s[Keys.appID], appKey: s[Keys.appKey], appSecret: s[Keys.appSecret], endpoint: s[Keys.endpoint], defaultCategory: s[Keys.category])
        let provider = VivoProvider(
            configuration: c, httpClient: context.httpClient(for: c.endpoint), maxWaiting: s[Keys.maxConcurrentPushes],
            quotaClock: context.now)
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: s[Keys.maxRetry], concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() },
            warnings: c.defaultCategory.isEmpty ? ["vivo.category is empty: pushes to vivo without vivo.category are refused"] : [])
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "taskId" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "vivo Push", color: "#415fff") }
}
