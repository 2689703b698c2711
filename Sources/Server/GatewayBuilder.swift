import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ProviderKit
import PushDispatch
import PushgateCore
import QueueStore

/// Builds a gateway from configuration: providers, queue, dispatcher, feedback sender.
public enum GatewayBuilder {
    public static func build(
        raw: RawConfig,
        logger: Logger = Logger(label: "pushgate"),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> Gateway {
        let settings = try GatewaySettings(raw)
        for w in raw.warnings { logger.warning("\(w)") }
        if !settings.auth.enabled, !["127.0.0.1", "::1", "localhost"].contains(settings.address) {
            logger.warning(
                "no core.api_keys or core.admin_keys: anyone who can reach port \(settings.port) can push to every device and read /api/config; set keys or bind core.address to 127.0.0.1"
            )
        }

        // Before the providers: a module may make metrics when it is built (the APNs certificate's expiry gauge).
        MetricsSetup.bootstrap()
        let providers = try ProviderSet.make(raw: raw, logger: logger, eventLoopGroup: eventLoopGroup, environment: environment)
        let slots = providers.slots
        var hooks = providers.hooks
        let unavailable = providers.unavailable
        for w in providers.warnings { logger.warning("\(w)") }

        let engine: any QueueEngine
        do {
            engine = try QueueWiring.make(raw: raw, settings: settings, logger: logger)
        } catch {
            // The providers and the HTTP client exist already: close them before failing startup.
            let opened = hooks
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the providers") {
                for hook in opened { await hook() }
                await providers.httpClients.shutdown()
            }
            throw error
        }
        let feedback =
            settings.feedbackURL.isEmpty
            ? nil
            : FeedbackSender(
                url: settings.feedbackURL, headers: settings.feedbackHeaders, client: providers.httpClients.client(for: settings.feedbackURL),
                logger: Logger(label: "pushgate.feedback"))
        let dispatcher = Dispatcher(
            providers: slots,
            unavailable: unavailable,
            engine: engine,
            policy: RetryPolicy(baseDelay: settings.retryBackoff, maxDelay: settings.retryBackoffMax),
            feedback: feedback,
            hideToken: settings.hideToken,
            answer: .init(
                maxMessageBytes: settings.maxLogMessageBytes, maxAnswerBytes: settings.maxSyncAnswerBytes,
                syncTimeout: Double(settings.syncTimeout), hideMessages: settings.hideMessages),
            logger: Logger(label: "pushgate.dispatch")
        )
        hooks.append { await providers.httpClients.shutdown() }
        let enabled = slots.map { $0.provider.platform.name }.joined(separator: ", ")
        logger.info("providers enabled: \(enabled.isEmpty ? "none" : enabled)")
        return Gateway(raw: raw, settings: settings, dispatcher: dispatcher, feedback: feedback, logger: logger, shutdownHooks: hooks)
    }
}

/// The providers a configuration enables (every `ProviderRegistry` module builds its own), with the
/// shared outbound HTTP client (OAuth, feedback) and the hooks that close them. Used by the gateway
/// and by `pushgate send`.
public struct ProviderSet: Sendable {
    public var slots: [ProviderSlot]
    /// The direct client (targets no proxy applies to); `httpClients` picks per URL.
    public var httpClient: HTTPClient
    /// The shared clients per proxy route; the caller closes them (`httpClients.shutdown()`) after `hooks`.
    public var httpClients: OutboundHTTPClients
    public var hooks: [@Sendable () async -> Void]
    /// Platforms answered with a failed entry, and why.
    public var unavailable: [Platform: String] = [:]
    /// Logged once at start.
    public var warnings: [String] = []

    public static func make(
        raw: RawConfig, logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> ProviderSet {
        let outbound = OutboundSettings(raw)
        let proxy = try outbound.proxy(environment: environment)
        let caFile = outbound.caFile
        var extraRoots: [String] = []
        if !caFile.isEmpty {
            guard let pem = try? String(contentsOfFile: caFile, encoding: .utf8), pem.contains("BEGIN CERTIFICATE") else {
                throw ConfigError(key: "core.ca_file", problem: "\(caFile) holds no PEM certificate")
            }
            extraRoots.append(pem)
        }
        var poolConfig = HTTP2PoolConfiguration()
        poolConfig.proxy = proxy
        if !proxy.isDirect {
            logger.info("outbound proxy (\(proxy.source)): \(proxy)\(proxy.hasExceptions ? ", NO_PROXY hosts direct" : "")")
        }
        do {
            poolConfig.tlsConfiguration = try HTTP2PoolConfiguration.tls(extraRootsPEM: extraRoots)
        } catch {
            throw ConfigError(key: "core.ca_file", problem: "cannot use \(caFile): \(error)")
        }

        var clientTLS = TLSConfiguration.makeClientConfiguration()
        if !extraRoots.isEmpty {
            do {
                let certs = try extraRoots.flatMap { try NIOSSLCertificate.fromPEMBytes(Array($0.utf8)) }
                clientTLS.additionalTrustRoots = [.certificates(certs)]
            } catch {
                throw ConfigError(key: "core.ca_file", problem: "cannot parse \(caFile): \(error)")
            }
        }
        var clientConfig = HTTPClient.Configuration(tlsConfiguration: clientTLS, redirectConfiguration: .disallow)
        clientConfig.timeout = .init(connect: .seconds(10), read: .seconds(Int64(outbound.feedbackTimeout)))
        let clients = OutboundHTTPClients(proxy: proxy, configuration: clientConfig, eventLoopGroup: eventLoopGroup)
        let httpClient = clients.direct
        let context = ProviderBuildContext(
            poolConfiguration: poolConfig, httpClient: httpClient, eventLoopGroup: eventLoopGroup, httpClients: clients)
        let config = raw.providerConfig(environment: environment)

        var set = ProviderSet(slots: [], httpClient: httpClient, httpClients: clients, hooks: [])
        do {
            for module in ProviderRegistry.modules {
                let built = try module.build(config, context: context)
                set.slots += built.providers.map { ProviderSlot(provider: $0.provider, maxRetry: $0.maxRetry, concurrency: $0.concurrency) }
                if let shutdown = built.shutdown { set.hooks.append(shutdown) }
                set.unavailable.merge(built.unavailable) { a, _ in a }
                set.warnings += built.warnings
            }
        } catch {
            // Close what the modules before the failing one opened, then the client.
            let opened = set.hooks
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the providers") {
                for hook in opened { await hook() }
            }
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the HTTP clients") { await clients.shutdown() }
            throw error
        }
        return set
    }
}
