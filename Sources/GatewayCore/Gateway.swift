import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

public enum PushgateVersion {
    public static let version = "0.1.0"
    public static let source = "https://github.com/pushgate/pushgate"
}

/// Everything that serves one gateway: settings, dispatcher, feedback sender, HTTP routes.
public final class Gateway: Sendable {
    /// The configuration as last loaded (at start, or by the last successful reload).
    public var raw: RawConfig { runtime.withLockedValue { $0.raw } }
    /// The settings made at start: what a reload changes (keys, apps) is read from `auth` and the dispatcher's apps.
    public let settings: GatewaySettings
    public let dispatcher: Dispatcher
    public let feedback: FeedbackSender?
    /// The delivery event stream (`events.*`): nil when not configured.
    public let events: EventStream?
    /// Its webhook poster (`events.webhook_url`).
    public let eventWebhook: EventWebhook?
    public let startedAt = Date()
    package let requestCounters = RequestCounters()
    private let shutdownHooks: [@Sendable () async -> Void]
    public let logger: Logger
    /// What a reload replaces, and the per-app rate limiters.
    let runtime: NIOLockedValueBox<GatewayRuntime>
    /// What further apps are built with (shared pool settings and HTTP clients); nil: no reload.
    let buildContext: ProviderBuildContext?
    let environment: [String: String]
    let reloadSource: (@Sendable () throws -> RawConfig)?
    /// One reload at a time.
    let reloading = NIOLockedValueBox(false)
    /// The ways in's own sections (`register`): shown by `/api/config`, re-read on reload.
    let adapterSections = AdapterSections()
    /// Set when graceful shutdown starts (`isDraining`).
    let draining = NIOLockedValueBox(false)
    /// Seconds since 1970, for the apps' rate limits (tests inject a clock that moves when told).
    let clock: @Sendable () -> Double
    /// The gateway's clock as a date (what the status route judges a delivery's time against).
    public var now: Date { Date(timeIntervalSince1970: clock()) }

    public init(
        raw: RawConfig, settings: GatewaySettings, dispatcher: Dispatcher, feedback: FeedbackSender?, logger: Logger,
        shutdownHooks: [@Sendable () async -> Void] = [], context: ProviderBuildContext? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment, reloadSource: (@Sendable () throws -> RawConfig)? = nil,
        clock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }, events: EventsWiring? = nil
    ) {
        self.clock = clock
        self.events = events?.stream
        self.eventWebhook = events?.webhook
        self.runtime = NIOLockedValueBox(GatewayRuntime(raw: raw, auth: settings.auth, environment: environment, now: clock()))
        self.settings = settings
        self.dispatcher = dispatcher
        self.feedback = feedback
        self.logger = logger
        self.shutdownHooks = shutdownHooks
        self.buildContext = context
        self.environment = environment
        self.reloadSource = reloadSource
    }

    /// The keys as last loaded.
    public var auth: IngestAuth { runtime.withLockedValue { $0.auth } }

    /// Services to run beside the HTTP server: workers (drained on graceful shutdown) and the feedback sender.
    public var services: [any Service] { services(extra: []) }

    /// The services with `extra` (further ingest servers: gRPC) among them.
    public func services(extra: [any Service]) -> [any Service] {
        // Started in order, shut down in reverse: the HTTP server stops first, then the gateway is
        // marked draining, then the workers drain, then the extra services stop (gRPC answers
        // NOT_SERVING until then), then the feedback sender empties its queue, then shared clients are closed.
        var s: [any Service] = [ResourcesService(gateway: self)]
        if let feedback { s.append(FeedbackService(sender: feedback)) }
        // Stopped after the workers drained (their last events are stored and posted).
        if let events { s.append(EventService(events: events, webhook: eventWebhook)) }
        s += extra
        s.append(DispatcherService(gateway: self))
        s.append(DrainSignalService(gateway: self))
        return s
    }

    /// `core.address`: empty means every address, IPv6 and IPv4 (`::` is dual-stack on Linux), or
    /// IPv4 only on a host without IPv6.
    public static func bindHost(_ address: String) -> String {
        guard address.isEmpty else { return address }
        return ipv6Available ? "::" : "0.0.0.0"
    }

    static let ipv6Available: Bool = {
        let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }()

    /// Closes every app's providers, then the shared clients: the last step of a shutdown, after the
    /// workers and the feedback sender stopped (the HTTP server's `ResourcesService`, the embedding API).
    public func runShutdownHooks() async {
        for app in dispatcher.allApps { await app.shutdown() }
        for hook in shutdownHooks { await hook() }
    }
}

/// Runs the dispatcher's workers; on graceful shutdown waits (up to `core.shutdown_timeout`) for the
/// queue to drain, then stops the workers.
struct DispatcherService: Service {
    let gateway: Gateway

    func run() async throws {
        let dispatcher = gateway.dispatcher
        let timeout = gateway.settings.shutdownTimeout
        let logger = gateway.logger
        // With no provider enabled `run` waits for one (a reload may add an app) until shutdown.
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await dispatcher.run()
            } onGracefulShutdown: {
                Task { await dispatcher.drainAndShutdown(timeout: Double(timeout), logger: logger) }
            }
        } onCancel: {
            dispatcher.shutdown()
        }
    }
}

/// Owns shared resources (provider connection pools, the HTTP client) and closes them last.
struct ResourcesService: Service {
    let gateway: Gateway

    func run() async throws {
        try? await gracefulShutdown()
        await gateway.runShutdownHooks()
    }
}

struct FeedbackService: Service {
    let sender: FeedbackSender

    func run() async throws {
        await withGracefulShutdownHandler {
            await sender.run()
        } onGracefulShutdown: {
            sender.finish()
        }
    }
}
