import Foundation
import HTTP2Pool
@_exported import ProviderKit
import PushgateCore
import QueueStore
import Yams

/// The typed view the server uses, validated.
public struct GatewaySettings: Sendable {
    public var address: String
    public var port: Int
    public var maxNotification: Int
    public var maxBodyBytes: Int
    public var sync: Bool
    public var syncTimeout: Int
    public var feedbackURL: String
    public var feedbackHeaders: [String]
    public var feedbackTimeout: Int
    public var shutdownTimeout: Int
    public var caFile: String
    public var hideToken: Bool
    /// `log.hide_messages`: the message in sync answers, feedback posts and logs reads "(message redacted)".
    public var hideMessages: Bool
    /// `core.ssl`: the certificate and key ingest serves (nil: plain HTTP).
    public var tls: IngestTLS?
    /// `core.api_keys` / `core.admin_keys`.
    public var auth: IngestAuth
    /// `core.ui`: the status page `/ui` and its data route `/api/stat/live` are served.
    public var ui: Bool
    public var queueEngine: String
    public var maxPending: Int
    public var routes: Routes
    public var retryBackoff: Double
    public var retryBackoffMax: Double
    /// What a `/api/push` body is held to (`core.max_*`, `<platform>.max_tokens`).
    public var limits: RequestLimits
    /// `core.max_log_message_bytes`: the message repeated in sync answers and feedback posts is cut here.
    public var maxLogMessageBytes: Int
    /// `core.max_sync_answer_bytes`: a sync answer lists failures up to about this size.
    public var maxSyncAnswerBytes: Int
    /// `core.read_timeout`: seconds a client has to send a whole request once it started.
    public var readTimeout: Int
    /// `core.idle_timeout`: seconds a connection may sit with no request before it is closed.
    public var idleTimeout: Int
    /// `core.max_connections`: open client connections; more are closed at once.
    public var maxConnections: Int
    /// `core.max_connections_per_address`: open connections of one client IP address on each port;
    /// more from that address are closed at once, so one client cannot take every slot.
    public var maxConnectionsPerAddress: Int
    /// `core.idempotency_ttl`: how long an `Idempotency-Key`'s answer and a `dedup_key` hold (seconds).
    public var idempotencyTTL: Double
    /// `tracing.*` with the `OTEL_*` variables that decide it (docs/observability.md).
    public var tracing: TracingSettings

    public struct Routes: Sendable {
        public var push, statGo, statApp, config, sysStats, metrics, health: String
    }

    public init(_ raw: RawConfig, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        typealias C = CoreConfig
        let core = raw.section("core")
        let api = raw.section("api")
        let queue = raw.section("queue")
        address = core[C.address]
        port = core[C.port]
        guard (0...65535).contains(port) else { throw ConfigError(key: core.path(C.port), problem: "\(port) is not a valid port (0-65535)") }
        maxNotification = core[C.maxNotification]
        maxBodyBytes = core[C.maxBodyBytes]
        guard maxBodyBytes > 0 else { throw ConfigError(key: core.path(C.maxBodyBytes), problem: "must be positive") }
        sync = core[C.sync]
        syncTimeout = max(1, core[C.syncTimeout])
        feedbackURL = core[C.feedbackHookURL]
        if !feedbackURL.isEmpty, !(feedbackURL.hasPrefix("http://") || feedbackURL.hasPrefix("https://")) {
            throw ConfigError(key: core.path(C.feedbackHookURL), problem: "\"\(feedbackURL)\" is not an http(s) URL")
        }
        feedbackHeaders = core[C.feedbackHeader]
        for h in feedbackHeaders where !h.contains(":") {
            throw ConfigError(key: core.path(C.feedbackHeader), problem: "\"\(h)\" is not of the form \"Key: value\"")
        }
        feedbackTimeout = max(1, core[C.feedbackTimeout])
        shutdownTimeout = max(0, core[C.shutdownTimeout])
        caFile = core[C.caFile]
        if !caFile.isEmpty, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ConfigError(key: core.path(C.caFile), problem: "cannot read \(caFile)")
        }
        idempotencyTTL = try QueueWiring.duration(raw, CoreConfig.idempotencyTTL, section: "core")
        guard idempotencyTTL >= 1 else { throw ConfigError(key: core.path(C.idempotencyTTL), problem: "must be at least 1s") }
        hideToken = raw.section("log")[LogConfig.hideToken]
        ui = core[C.ui]
        hideMessages = raw.section("log")[LogConfig.hideMessages]
        tls = try IngestTLS.load(core)
        auth = try IngestAuth(
            apiKeys: core[C.apiKeys], adminKeys: core[C.adminKeys], metricsAdminOnly: core[C.metricsAdminOnly],
            appKeys: raw.apps.map { ($0.id, $0.apiKeys) })
        queueEngine = queue[QueueConfig.engine].lowercased()
        if queueEngine == "local" { queueEngine = "memory" }
        if queueEngine == "postgresql" { queueEngine = "postgres" }
        if ["redis", "nats", "nsq"].contains(queueEngine) {
            throw ConfigError(
                key: queue.path(QueueConfig.engine),
                problem: "\"\(queueEngine)\" is not supported: use postgres to share one queue between several gateways (memory, sqlite, postgres)")
        }
        guard ["memory", "sqlite", "postgres"].contains(queueEngine) else {
            throw ConfigError(key: queue.path(QueueConfig.engine), problem: "\"\(queueEngine)\" is not supported (memory, sqlite, postgres)")
        }
        maxPending = queue[QueueConfig.maxPending]
        let queueNum = core[C.queueNum]
        if queueNum > 0, queue.isDefault(QueueConfig.maxPending) { maxPending = queueNum }
        guard maxPending > 0 else { throw ConfigError(key: queue.path(QueueConfig.maxPending), problem: "must be positive") }
        retryBackoff = Double(core[C.retryBackoffMs]) / 1000
        retryBackoffMax = Double(core[C.retryBackoffMaxMs]) / 1000
        guard retryBackoff > 0, retryBackoffMax >= retryBackoff else {
            throw ConfigError(key: core.path(C.retryBackoffMs), problem: "must be positive and at most core.retry_backoff_max_ms")
        }
        var limits = ProviderRegistry.requestLimits
        limits.maxNotifications = maxNotification
        limits.maxDeliveries = core[C.maxDeliveriesPerRequest]
        limits.maxTokenBytes = core[C.maxTokenBytes]
        limits.maxFieldBytes = core[C.maxFieldBytes]
        limits.maxMessageBytes = core[C.maxMessageBytes]
        limits.maxObjectKeys = core[C.maxObjectKeys]
        limits.maxDepth = core[C.maxJSONDepth]
        limits.maxScheduleHorizon = core[C.maxScheduleHorizon]
        for p in ProviderRegistry.platforms { limits.maxTokens[p] = raw.section(p.name)[ProviderSettings.maxTokens(limits.maxTokens(for: p))] }
        self.limits = limits
        maxLogMessageBytes = core[C.maxLogMessageBytes]
        maxSyncAnswerBytes = core[C.maxSyncAnswerBytes]
        readTimeout = core[C.readTimeout]
        idleTimeout = core[C.idleTimeout]
        maxConnections = core[C.maxConnections]
        maxConnectionsPerAddress = core[C.maxConnectionsPerAddress]
        tracing = try TracingSettings(raw, environment: environment)
        routes = Routes(
            push: api[APIConfig.pushURI], statGo: api[APIConfig.statGoURI], statApp: api[APIConfig.statAppURI],
            config: api[APIConfig.configURI], sysStats: api[APIConfig.sysStatURI], metrics: api[APIConfig.metricURI],
            health: api[APIConfig.healthURI])
    }
}

/// The `core` keys every outbound connection uses (providers, OAuth, feedback): read by the gateway
/// and by `pushgate send`.
public struct OutboundSettings: Sendable {
    /// `core.ca_file`: extra trusted roots (PEM).
    public var caFile: String
    /// `core.feedback_timeout`: seconds.
    public var feedbackTimeout: Int
    /// `core.http_proxy` (`--proxy`): "" lets the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`) decide.
    public var httpProxy: String

    public init(_ raw: RawConfig) {
        let core = raw.section("core")
        caFile = core[CoreConfig.caFile]
        feedbackTimeout = core[CoreConfig.feedbackTimeout]
        httpProxy = core[CoreConfig.httpProxy]
    }

    /// The outbound proxy of every provider, OAuth and feedback connection (see docs/proxy.md). A URL
    /// that cannot be used is a one-line `ConfigError` naming `core.http_proxy` or the variable, without
    /// the URL (it may hold a password).
    public func proxy(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> OutboundProxy {
        do {
            return try OutboundProxy(configured: httpProxy, configuredKey: "core.\(CoreConfig.httpProxy.name)", environment: environment)
        } catch {
            throw ConfigError(key: error.key, problem: error.problem)
        }
    }
}
