import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import PushgateCore

/// What a provider module is given to build its providers: the shared outbound pieces.
public struct ProviderBuildContext: Sendable {
    /// HTTP/2 pool defaults (TLS with `core.ca_file` roots, the outbound proxy).
    public var poolConfiguration: HTTP2PoolConfiguration
    /// The shared HTTP/1.1 client (OAuth token requests, feedback) for targets no proxy applies to.
    public var httpClient: HTTPClient
    public var eventLoopGroup: any EventLoopGroup
    /// The shared clients per proxy route; nil = `httpClient` for everything.
    public var httpClients: OutboundHTTPClients?
    /// The gateway's clock (injected by tests): what a provider's day-long state, such as a daily
    /// quota hold, is judged against.
    public var now: @Sendable () -> Date

    public init(
        poolConfiguration: HTTP2PoolConfiguration, httpClient: HTTPClient, eventLoopGroup: any EventLoopGroup,
        httpClients: OutboundHTTPClients? = nil, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.poolConfiguration = poolConfiguration
        self.httpClient = httpClient
        self.eventLoopGroup = eventLoopGroup
        self.httpClients = httpClients
        self.now = now
    }

    /// `poolConfiguration` with this ceiling of connections per origin (`<platform>.max_connections`).
    public func poolConfiguration(maxConnections: Int) -> HTTP2PoolConfiguration {
        var c = self.poolConfiguration
        c.maxConnectionsPerTarget = max(c.connectionsPerTarget, maxConnections)
        return c
    }

    /// The outbound proxy (`core.http_proxy`, else the environment's `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`).
    public var proxy: OutboundProxy { self.poolConfiguration.proxy }

    /// The shared HTTP/1.1 client to reach `url`: through the proxy that applies to it, else direct.
    public func httpClient(for url: String) -> HTTPClient {
        self.httpClients?.client(for: url) ?? self.httpClient
    }
}

/// What building providers gives back: a module's `build`, or every module's for one app
/// (`ProviderSet.buildApp`): the enabled providers, the platforms answered with a failed entry
/// (and why), and the hook that closes what was opened.
public struct ProviderBuild: Sendable {
    public var providers: [ProviderSlot]
    public var unavailable: [Platform: String]
    public var shutdown: (@Sendable () async -> Void)?
    /// Logged once at start.
    public var warnings: [String]

    public init(
        providers: [ProviderSlot] = [], unavailable: [Platform: String] = [:], shutdown: (@Sendable () async -> Void)? = nil,
        warnings: [String] = []
    ) {
        self.providers = providers
        self.unavailable = unavailable
        self.shutdown = shutdown
        self.warnings = warnings
    }
}

/// A small command-line helper a provider offers (`pushgate vapid-keys`).
public struct ProviderTool: Sendable {
    public var name: String
    public var abstract: String
    public var run: @Sendable () -> String

    public init(name: String, abstract: String, run: @escaping @Sendable () -> String) {
        self.name = name
        self.abstract = abstract
        self.run = run
    }
}

/// Everything the gateway, `pushgate send` and `pushgate bench` know about one provider, kept in the
/// provider's folder: its configuration sections, its ingest checks and how it is built.
/// The registry (`Sources/Providers/ProviderRegistry.swift`) lists one value per provider.
public protocol ProviderModule: Sendable {
    /// The platforms it serves. The section of each platform is named like it (`ios`, `webpush` ...).
    var platforms: [Platform] { get }
    /// Its configuration sections: keys, defaults, integer ranges, secrecy.
    var sections: [ConfigSection] { get }
    /// The notification members it reads beyond the shared ones: decoded by the one request decoder
    /// into `PushNotification.fields` (every platform's notifications; `requestRules` says which
    /// members another platform may not carry).
    var requestMembers: [RequestMember] { get }
    /// Checks at `POST /api/push` beyond the JSON types (notifications of its platforms only).
    func checkIngest(_ notification: PushNotification) -> IngestProblem?
    /// What the request parser holds `platform`'s notifications to (`max_tokens`' default, the longest
    /// `time_to_live`, reserved `data` keys, members no other platform may carry). The default: its
    /// section's `max_tokens` default and nothing else.
    func requestRules(for platform: Platform) -> PlatformRules
    /// `platform`'s success and error counters in `/metrics` (gorush's names for gorush's platforms).
    func counters(for platform: Platform) -> PlatformCounters
    /// Builds the providers its sections enable (none when disabled). Throws `ConfigError` (one line).
    func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild
    /// Values `pushgate send` sets to send to `platform` alone (the platform's `enabled` is set by the caller).
    func sendOverrides(for platform: Platform, config: ProviderConfig) -> [(key: String, value: ConfigValue)]
    /// What `pushgate send` calls the provider's id of a delivered message (`apns-id`, `name`, `location`).
    func deliveredIDLabel(for platform: Platform) -> String
    /// Command-line helpers.
    var tools: [ProviderTool] { get }
    /// HTTP routes it adds to the gateway's API (APNs broadcast channels).
    var routes: [ProviderRoute] { get }
    /// How people are shown `platform`: its title in messages and its colour on the status page.
    func presentation(for platform: Platform) -> PlatformPresentation
    /// Renders `notification` as `prepare` would (a configuration of the module's choosing, no I/O)
    /// for each of `targets`, and traps when a rendering breaks the module's own rules (not JSON,
    /// over the provider's size limit after the size check): what the request fuzzer runs on every
    /// notification the decoder accepts. Returns lines saying what was rendered or refused.
    func checkRendering(_ notification: PushNotification, targets: [PushTarget]) -> [String]
}

/// How a platform is shown to people.
public struct PlatformPresentation: Sendable, Equatable {
    /// "Android", "Web Push": in messages that name platforms.
    public var title: String
    /// A CSS colour (`#34a853`): its series and legend on the status page.
    public var color: String

    public init(title: String, color: String) {
        self.title = title
        self.color = color
    }
}

extension ProviderModule {
    public var requestMembers: [RequestMember] { [] }
    public func checkRendering(_ notification: PushNotification, targets: [PushTarget]) -> [String] { [] }
    public func checkIngest(_ notification: PushNotification) -> IngestProblem? { nil }
    public func requestRules(for platform: Platform) -> PlatformRules { PlatformRules(maxTokens: defaultMaxTokens(for: platform)) }
    public func counters(for platform: Platform) -> PlatformCounters { PlatformCounters(pushgate: platform) }

    /// The default of `<platform>.max_tokens` in its section (`PlatformRules.standardMaxTokens` without one).
    public func defaultMaxTokens(for platform: Platform) -> Int {
        let key = sections.first { $0.name == platform.name }?.keys.first { $0.name == "max_tokens" }
        if case .int(let n)? = key?.defaultValue { return n }
        return PlatformRules.standardMaxTokens
    }
    public func sendOverrides(for platform: Platform, config: ProviderConfig) -> [(key: String, value: ConfigValue)] { [] }
    public func deliveredIDLabel(for platform: Platform) -> String { "id" }
    public var tools: [ProviderTool] { [] }
    public var routes: [ProviderRoute] { [] }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: platform.name, color: "#888888") }
}

/// A platform's two `/metrics` counters (deliveries that ended delivered / failed), with their help texts.
public struct PlatformCounters: Sendable, Equatable {
    public var success: String
    public var successHelp: String
    public var error: String
    public var errorHelp: String
    /// One of gorush's own series (`metric/metrics.go`): written among gorush's 11, in its order;
    /// else after them.
    public var gorush: Bool

    public init(success: String, successHelp: String, error: String, errorHelp: String, gorush: Bool) {
        self.success = success
        self.successHelp = successHelp
        self.error = error
        self.errorHelp = errorHelp
        self.gorush = gorush
    }

    /// A platform gorush does not have, named as gorush would: `gorush_<platform>_success` / `_error`.
    public init(pushgate platform: Platform) {
        self.init(
            success: "gorush_\(platform.name)_success", successHelp: "Number of \(platform.name) success count",
            error: "gorush_\(platform.name)_error", errorHelp: "Number of \(platform.name) fail count", gorush: false)
    }
}

/// A gorush platform Pushgate accepts in requests and config but does not send to:
/// its section is known (no warnings), its notifications are answered with a failed entry.
public struct UnsupportedProviderModule: ProviderModule {
    public let platform: Platform
    public let reason: String
    public let sections: [ConfigSection]

    public init(platform: Platform, reason: String, keys: [ConfigKey]) {
        self.platform = platform
        self.reason = reason
        self.sections = [ConfigSection(platform.name, keys: keys)]
    }

    public var platforms: [Platform] { [platform] }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        var warnings: [String] = []
        if config[platform.name][ProviderSettings.enabled] {
            warnings.append(
                "\(platform.name).enabled is true but \(reason) is not supported; \(platform.name) notifications are answered with a failed entry")
        }
        return ProviderBuild(unavailable: [platform: "platform \(platform.name) is not supported by Pushgate (\(reason))"], warnings: warnings)
    }

    /// The one line `pushgate send` prints for this platform.
    public var sendError: ConfigError { ConfigError(key: platform.name, problem: "\(reason) is not supported by Pushgate") }
}

/// An HTTP route a provider module adds to the gateway's API (`POST /api/apns/channels`): the
/// server registers it (behind the same API keys as `/api/push`) and hands the handler the request
/// and a way to reach the provider of the app the request is for.
public struct ProviderRoute: Sendable {
    /// "GET", "POST", "PUT", "DELETE".
    public var method: String
    /// The path, with `:name` segments for parameters (`/api/apns/channels/:channel_id`).
    public var path: String
    /// Largest body read (a bigger one is answered 413 before the handler runs).
    public var maxBodyBytes: Int
    public var handle: @Sendable (ProviderRouteRequest) async -> ProviderRouteResponse

    public init(
        method: String, path: String, maxBodyBytes: Int = 4096, handle: @escaping @Sendable (ProviderRouteRequest) async -> ProviderRouteResponse
    ) {
        self.method = method
        self.path = path
        self.maxBodyBytes = maxBodyBytes
        self.handle = handle
    }
}

/// What a provider route's handler gets.
public struct ProviderRouteRequest: Sendable {
    public var body: [UInt8]
    /// Path parameters as they came (percent-encoded), by name.
    public var parameters: [String: String]
    /// Query parameters (first value of each), percent-decoded.
    public var query: [String: String]
    /// The provider of the module's platform for an app: `app_id` (nil: the API key's app, else the
    /// default app), resolved and authorised as `/api/push` does; else the error to answer.
    public var provider: @Sendable (_ platform: Platform, _ appID: String?) -> Result<any PushProvider, RequestError>
    /// The caller holds an app's key (not an admin key, and keys are configured): it may act only
    /// within its app's own configuration (APNs: its `ios.topic`, not another bundle id).
    public var appScoped: Bool

    public init(
        body: [UInt8], parameters: [String: String], query: [String: String], appScoped: Bool = false,
        provider: @escaping @Sendable (_ platform: Platform, _ appID: String?) -> Result<any PushProvider, RequestError>
    ) {
        self.body = body
        self.parameters = parameters
        self.query = query
        self.appScoped = appScoped
        self.provider = provider
    }
}

/// A provider route's answer: JSON `body` (empty for 204), extra headers (`Retry-After`).
public struct ProviderRouteResponse: Sendable {
    public var status: Int
    public var body: [UInt8]
    public var headers: [(String, String)]

    public init(status: Int, body: [UInt8] = [], headers: [(String, String)] = []) {
        self.status = status
        self.body = body
        self.headers = headers
    }

    /// The gateway's error answer `{"code":…,"message":…,"detail":…}`.
    public init(_ error: RequestError, headers: [(String, String)] = []) {
        self.init(status: error.status, body: error.json, headers: headers)
    }
}

extension PlatformRules {
    /// gorush's rules for its FCM and HMS notifications, which share their request fields: a message
    /// is kept at most 4 weeks (gorush's CheckMessage), the legacy `to` is a token, `topic` or
    /// `condition` a topic send, and a data-only message (no message, title, `notification` or
    /// `huawei_notification`) wakes the app without showing anything.
    public static let dataMessaging = PlatformRules(
        maxTimeToLive: 2_419_200, legacyToIsToken: true, topicSends: true,
        backgroundPush: .init("data-only") { n in
            (n.message ?? "").isEmpty && n.title == nil && n.fields["notification"] == nil && n.fields["huawei_notification"] == nil
        })
}
