import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// Huawei HMS Push Kit (gorush's 3).
    public static let huawei = Platform(3, "huawei", aliases: ["hms"])
}

/// The Huawei HMS provider as the gateway sees it: the `huawei:` section and how it is built.
public struct HuaweiModule: ProviderModule {
    public init() {}

    /// The `huawei:` keys (gorush's, plus Pushgate's `endpoint`, `token_url` and `max_concurrent_pushes`).
    public enum Keys {
        /// gorush's default: false. `enabled: true` without app id and secret is a start error (gorush's too).
        public static let enabled = ProviderSettings.enabled
        public static let appID = Setting<String>("appid", "", doc: "HMS OAuth 2.0 client id")
        public static let appSecret = Setting<String>(
            "appsecret", "", secrecy: .secret, doc: "HMS OAuth 2.0 client secret")
        public static let maxTokens = ProviderSettings.maxTokens(500)
        public static let maxRetry = ProviderSettings.maxRetry(0)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(2048)
        public static let endpoint = Setting<String>(
            "endpoint", HuaweiConfiguration.defaultEndpoint, doc: "(new) Push Kit base URL override, for tests and proxies")
        public static let tokenURL = Setting<String>(
            "token_url", HuaweiConfiguration.defaultTokenURL, doc: "(new) OAuth token URL override, for tests and proxies")
        public static let maxConnections = ProviderSettings.maxConnections(32)
    }

    public var platforms: [Platform] { [.huawei] }
    public var requestMembers: [RequestMember] { HuaweiRequestMembers.all }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                "huawei",
                keys: [
                    Keys.enabled.key, Keys.appID.key, Keys.appSecret.key, Keys.maxTokens.key, Keys.maxRetry.key,
                    Keys.maxConcurrentPushes.key, Keys.endpoint.key, Keys.tokenURL.key, Keys.maxConnections.key,
                ], about: "Huawei HMS Push Kit (platform `3`, docs/huawei.md).")
        ]
    }

    /// gorush's CheckMessage: HMS keeps a message at most 4 weeks. `to` is a token and `topic` or
    /// `condition` a topic send, as in gorush; a data-only message is a background push.
    public func requestRules(for platform: Platform) -> PlatformRules {
        var rules = HuaweiMessageMapper.rules
        rules.maxTokens = defaultMaxTokens(for: platform)
        return rules
    }

    /// gorush's series (`_fail`, not `_error`).
    public func counters(for platform: Platform) -> PlatformCounters {
        PlatformCounters(
            success: "gorush_huawei_success", successHelp: "Number of huawei success count", error: "gorush_huawei_fail",
            errorHelp: "Number of huawei fail count", gorush: true)
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config["huawei"]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let hms: HuaweiConfiguration
        do {
            hms = try HuaweiConfiguration(
                appID: s[Keys.appID], appSecret: s[Keys.appSecret], endpoint: s[Keys.endpoint], tokenURL: s[Keys.tokenURL],
                maxRetry: s[Keys.maxRetry])
        } catch {
            throw ConfigError(key: "huawei", problem: error.description)
        }
        let provider: HuaweiProvider
        do {
            provider = try HuaweiProvider(
                configuration: hms, httpClient: context.httpClient(for: hms.tokenURL),
                poolConfiguration: context.poolConfiguration(maxConnections: s[Keys.maxConnections]),
                eventLoopGroup: context.eventLoopGroup, logger: Logger(label: "pushgate.hms"))
        } catch {
            throw ConfigError(key: "huawei", problem: error.description)
        }
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: hms.maxRetry, concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() })
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "requestId" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "Huawei", color: "#e0403b") }
}
