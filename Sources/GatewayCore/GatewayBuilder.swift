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
    /// - Parameter reloadSource: reads the configuration again for a reload (SIGHUP, `POST /api/reload`):
    ///   the file with the same command-line overrides. Nil: reloading is refused.
    public static func build(
        raw: RawConfig,
        logger: Logger = Logger(label: "pushgate"),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        reloadSource: (@Sendable () throws -> RawConfig)? = nil,
        extraTrustRootsPEM: [String] = [],
        clock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) throws -> Gateway {
        let settings = try GatewaySettings(raw, environment: environment)
        for w in raw.warnings { logger.warning("\(w)") }
        if !settings.auth.enabled, !["127.0.0.1", "::1", "localhost"].contains(settings.address) {
            logger.warning(
                "no core.api_keys or core.admin_keys: anyone who can reach port \(settings.port) can push to every device and read /api/config; set keys or bind core.address to 127.0.0.1"
            )
        }

        // Before the providers: a module may make metrics when it is built (the APNs certificate's expiry gauge).
        MetricsSetup.bootstrap()
        let providers = try ProviderSet.make(
            raw: raw, logger: logger, eventLoopGroup: eventLoopGroup, environment: environment, extraTrustRootsPEM: extraTrustRootsPEM,
            now: { Date(timeIntervalSince1970: clock()) })
        let slots = providers.slots
        var hooks: [@Sendable () async -> Void] = []
        for w in providers.warnings { logger.warning("\(w)") }
        let defaultHooks = providers.hooks
        var apps = [
            AppProviders(
                id: AppID.defaultApp, slots: slots, unavailable: providers.unavailable,
                maxPending: raw.section("core")[CoreConfig.appMaxPending],
                shutdown: { for hook in defaultHooks { await hook() } })
        ]
        /// On a startup failure: closes the providers built so far and the shared HTTP clients.
        func closeOpened(_ opened: [AppProviders]) {
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the providers") {
                for a in opened { await a.shutdown() }
                await providers.httpClients.shutdown()
            }
        }
        // Every further app: its own providers from its own sections (own token caches and pools).
        do {
            for app in raw.apps {
                let built = try ProviderSet.buildApp(app.providerConfig(), context: providers.context, app: app.id)
                for w in built.warnings { logger.warning("\(w)") }
                apps.append(
                    AppProviders(
                        id: app.id, slots: built.providers, unavailable: built.unavailable, maxPending: app.maxPending, shutdown: built.close))
            }
        } catch {
            closeOpened(apps)
            throw error
        }

        let engine: any QueueEngine
        do {
            engine = try QueueWiring.make(raw: raw, settings: settings, logger: logger)
        } catch {
            // The providers and the HTTP client exist already: close them before failing startup.
            closeOpened(apps)
            throw error
        }
        let events: EventsWiring?
        do {
            events = try EventsWiring.make(raw: raw, settings: settings, clients: providers.httpClients, logger: logger)
        } catch {
            closeOpened(apps)
            if let durable = engine as? DurableEngine {
                _ = try? BlockingStartup.run(timeout: 10, what: "closing the queue") { await durable.queue.close() }
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
            apps: apps,
            queue: engine.driver,
            platformRules: ProviderRegistry.platformRules,
            policy: RetryPolicy(baseDelay: settings.retryBackoff, maxDelay: settings.retryBackoffMax),
            stats: engine.stats,
            feedback: feedback,
            sinks: engine.sinks + (events.map { [$0.stream as any DeliveryEventSink] } ?? []),
            statusSource: engine.statusSource,
            idempotency: engine.idempotency,
            hideToken: settings.hideToken,
            answer: .init(
                maxMessageBytes: settings.maxLogMessageBytes, maxAnswerBytes: settings.maxSyncAnswerBytes,
                syncTimeout: Double(settings.syncTimeout), hideMessages: settings.hideMessages),
            logger: Logger(label: "pushgate.dispatch"),
            eventLoops: Array(eventLoopGroup.makeIterator()),
            tracing: settings.tracing.enabled
        )
        hooks.append { await providers.httpClients.shutdown() }
        for a in apps {
            let enabled = a.slots.keys.sorted { $0.rawValue < $1.rawValue }.map(\.name).joined(separator: ", ")
            logger.info(
                a.id == AppID.defaultApp
                    ? "providers enabled: \(enabled.isEmpty ? "none" : enabled)" : "app \(a.id): providers \(enabled.isEmpty ? "none" : enabled)")
        }
        return Gateway(
            raw: raw, settings: settings, dispatcher: dispatcher, feedback: feedback, logger: logger, shutdownHooks: hooks,
            context: providers.context, environment: environment, reloadSource: reloadSource, clock: clock, events: events)
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
    /// What every app's providers are built with (shared pool settings and HTTP clients).
    public var context: ProviderBuildContext

    /// Builds one app's providers: every registry module's `ProviderBuild` from the app's own sections,
    /// as one (each provider with its platform's `coalesce_seconds`; `shutdown` closes what every
    /// module opened). On a module's error closes what the modules before it opened and throws it,
    /// naming the app's key (`apps[chat].android: …`) when `app` is given.
    public static func buildApp(_ config: ProviderConfig, context: ProviderBuildContext, app: String? = nil) throws -> ProviderBuild {
        var context = context
        // Every pool the app's providers open says whose it is (two apps may share an origin).
        context.poolConfiguration.label.app = app ?? AppID.defaultApp
        var build = ProviderBuild()
        var hooks: [@Sendable () async -> Void] = []
        do {
            for module in ProviderRegistry.modules {
                let built = try module.build(config, context: context)
                build.providers += built.providers.map {
                    var p = $0
                    p.coalesceSeconds = config[p.provider.platform.name][ProviderSettings.coalesceSeconds]
                    return p
                }
                if let shutdown = built.shutdown { hooks.append(shutdown) }
                build.unavailable.merge(built.unavailable) { a, _ in a }
                build.warnings += built.warnings.map { w in app.map { "apps[\($0)]: \(w)" } ?? w }
            }
        } catch {
            let opened = hooks
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the providers") { for hook in opened { await hook() } }
            if let app, let e = error as? ConfigError, !e.key.hasPrefix("apps[") {
                throw ConfigError(key: "apps[\(app)].\(e.key)", problem: e.problem)
            }
            throw error
        }
        let all = hooks
        build.shutdown = { for hook in all { await hook() } }
        return build
    }

    /// - Parameter extraTrustRootsPEM: trusted roots (PEM) beside `core.ca_file`'s, given in code
    ///   (the embedding API); the caller checked that they parse.
    public static func make(
        raw: RawConfig, logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        environment: [String: String] = ProcessInfo.processInfo.environment, extraTrustRootsPEM: [String] = [],
        now: @escaping @Sendable () -> Date = { Date() }
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
        extraRoots += extraTrustRootsPEM
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
        // No spans of AsyncHTTPClient's own (it would take the bootstrapped tracer): they would carry
        // URLs that are secrets (Web Push endpoints, a hook's query); a delivery attempt is one span
        // of Pushgate's (`tracing`), without them.
        clientConfig.tracing.tracer = nil
        let clients = OutboundHTTPClients(proxy: proxy, configuration: clientConfig, eventLoopGroup: eventLoopGroup)
        let httpClient = clients.direct
        let context = ProviderBuildContext(
            poolConfiguration: poolConfig, httpClient: httpClient, eventLoopGroup: eventLoopGroup, httpClients: clients, now: now)
        let config = raw.providerConfig(environment: environment)

        var set = ProviderSet(slots: [], httpClient: httpClient, httpClients: clients, hooks: [], context: context)
        do {
            let built = try buildApp(config, context: context)
            set.slots = built.providers
            set.hooks = built.shutdown.map { [$0] } ?? []
            set.unavailable = built.unavailable
            set.warnings = built.warnings
        } catch {
            // buildApp closed what the modules opened: close the clients.
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the HTTP clients") { await clients.shutdown() }
            throw error
        }
        return set
    }
}

extension ProviderBuild {
    /// Closes what the modules opened.
    public var close: @Sendable () async -> Void {
        let shutdown = self.shutdown
        return { await shutdown?() }
    }
}
