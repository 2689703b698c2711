import AsyncHTTPClient
import Logging
import ProviderKit
import PushgateCore

/// The WNS provider as the gateway sees it: the `wns:` section, its ingest checks and how it is built.
public struct WNSModule: ProviderModule {
    public init() {}

    var platform: Platform { .wns }
    public var platforms: [Platform] { [.wns] }

    /// The notification's own `wns` object.
    public var requestMembers: [RequestMember] { WNSRequestMembers.all }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                platform.name, keys: WNSSettings.keys,
                about: "Windows Push Notification Services (Windows App SDK and Microsoft Store apps, docs/wns.md).", inGorush: false)
        ]
    }

    /// Channel URIs refused by their shape, and payloads WNS would refuse, are a 400 naming the field.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: WNSOptions?
        do {
            options = try WNSProvider.options(of: n)
        } catch {
            return IngestProblem(message: "Invalid WNS notification.", detail: error.description)
        }
        return WNSProvider.checkIngest(n, options: options).map { IngestProblem(message: $0.message, detail: $0.detail) }
    }

    /// A TTL longer than a channel URI lives is refused; only WNS notifications carry a `wns` object.
    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(
            maxTokens: defaultMaxTokens(for: platform), maxTimeToLive: WNSOptions.maxTTL,
            exclusiveMembers: [.init(["wns"], problem: "the wns object is for platform 7 (wns) only")])
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config[platform.name]
        guard s[WNSSettings.enabled] else { return ProviderBuild() }
        let configuration = try WNSSettings.senderConfiguration(s)
        let tokenURL = configuration.tokenURL ?? configuration.credentials.defaultTokenURL
        // One proxy decision for the whole WNS domain (every channel host is in it).
        var proxy: HTTPClient.Configuration.Proxy?
        if configuration.connectTo == nil,
            let p = context.proxy.proxy(forHost: WNSChannel.domain, port: 443, scheme: "https")
        {
            proxy = .server(host: p.host, port: p.port, authorization: p.username.map { .basic(username: $0, password: p.password ?? "") })
        }
        let logger = Logger(label: "pushgate.wns")
        let sender = WNSSender(
            configuration: configuration, tlsConfiguration: context.poolConfiguration.tlsConfiguration, proxy: proxy,
            eventLoopGroup: context.eventLoopGroup,
            tokenTransport: OAuthTokenCache.httpTransport(context.httpClient(for: tokenURL), timeout: .seconds(30)), logger: logger)
        let provider = WNSProvider(platform: platform, sender: sender)
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: s[WNSSettings.maxRetry], concurrency: s[WNSSettings.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() },
            warnings: configuration.connectTo.map { ["wns.connect_to is set: every WNS notification goes to \($0) (tests and mock mode only)"] }
                ?? [])
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "X-WNS-Msg-ID" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "Windows", color: "#0078d4") }
}
