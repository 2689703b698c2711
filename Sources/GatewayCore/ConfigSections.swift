import Foundation
import HTTP2Pool
@_exported import ProviderKit
import PushgateCore
import QueueStore
import Yams

/// The `core:` section.
public enum CoreConfig {
    public static let enabled = Setting<Bool>(
        "enabled", true,
        doc: "gorush's switch for the HTTP server; `false` is not acted on (the HTTP server is Pushgate's ingest and always runs), with a warning")
    public static let address = Setting<String>(
        "address", "", doc: "listen address (`\"\"`: every IPv6 and IPv4 address, like gorush's `:port`)")
    public static let port = Setting<Int>(
        "port", 8088, range: 0...65535, doc: "listen port of the HTTP API")
    public static let workerNum = Setting<Int>(
        "worker_num", 0, range: 0...1_000_000,
        doc: "gorush's worker count; not acted on (a warning when set): concurrency is `<platform>.max_concurrent_pushes` per provider")
    public static let queueNum = Setting<Int>(
        "queue_num", 0, range: 0...100_000_000, doc: "gorush's queue size; when set, it also sets `queue.max_pending`")
    public static let maxNotification = Setting<Int>("max_notification", 100, range: 0...1_000_000, doc: "notifications per request")
    public static let maxBodyBytes = Setting<Int>(
        "max_body_bytes", 5 * 1024 * 1024, range: 1...(1 << 30), doc: "(new) larger bodies get 413 (at once when `Content-Length` says so)")
    public static let sync = Setting<Bool>("sync", false, doc: "wait for deliveries and list failures in the response")
    public static let syncTimeout = Setting<Int>(
        "sync_timeout", 60, range: 1...86_400, doc: "(new) seconds a sync request waits; then 200 with what is known and `\"pending\": N`")
    public static let feedbackHookURL = Setting<String>(
        "feedback_hook_url", "", doc: "every failed delivery is POSTed here, gorush's log-entry JSON, retried with backoff")
    public static let feedbackTimeout = Setting<Int>("feedback_timeout", 10, range: 1...3600, doc: "seconds")
    public static let feedbackHeader = Setting<[String]>("feedback_header", [], secrecy: .secret, doc: "extra headers, `\"Key: value\"`")
    public static let shutdownTimeout = Setting<Int>(
        "shutdown_timeout", 30, range: 0...86_400, doc: "seconds to finish in-flight sends on SIGTERM/SIGINT")
    public static let mode = Setting<String>(
        "mode", "release", doc: "Gin's `debug`/`release` mode in gorush; not acted on (a warning when not `release`)")
    public static let caFile = Setting<String>("ca_file", "", doc: "(new) extra PEM trust roots for all outbound TLS")
    public static let retryBackoffMs = Setting<Int>(
        "retry_backoff_ms", 1000, range: 1...86_400_000, doc: "(new) first retry delay in ms (doubling, with jitter)")
    public static let retryBackoffMaxMs = Setting<Int>(
        "retry_backoff_max_ms", 60000, range: 1...86_400_000, doc: "(new) cap of the retry delay in ms")
    public static let maxDeliveriesPerRequest = Setting<Int>(
        "max_deliveries_per_request", 50_000, range: 1...10_000_000,
        doc: "(new) tokens + subscriptions + topic sends of one request, including those that fail at once")
    public static let maxTokenBytes = Setting<Int>(
        "max_token_bytes", 4096, range: 64...(1 << 20),
        doc: "(new) longest token or endpoint")
    public static let maxFieldBytes = Setting<Int>(
        "max_field_bytes", 1024, range: 64...(1 << 20),
        doc: "(new) longest id, topic and other short string")
    public static let maxMessageBytes = Setting<Int>(
        "max_message_bytes", 256 * 1024, range: 64...(1 << 30),
        doc: "(new) longest message, title, payload and string in `data`")
    public static let maxObjectKeys = Setting<Int>(
        "max_object_keys", 1000, range: 1...1_000_000, doc: "(new) keys in one JSON object of the body")
    public static let maxJSONDepth = Setting<Int>("max_json_depth", 32, range: 2...256, doc: "(new) nesting depth of the body")
    public static let maxScheduleHorizon = Setting<Int>(
        "max_schedule_horizon", Schedule.defaultHorizon, range: 1...31_536_000,
        doc: "(new) the furthest a notification's `send_at` / `delay_seconds` may lie ahead, in seconds (default 30 days)")
    public static let maxLogMessageBytes = Setting<Int>(
        "max_log_message_bytes", 1024, range: 0...(1 << 20),
        doc: "(new) the message repeated in each failed entry (sync answer, feedback) is cut here")
    public static let maxSyncAnswerBytes = Setting<Int>(
        "max_sync_answer_bytes", 1 << 20, range: 1024...(1 << 30),
        doc: "(new) failed entries beyond this are counted in `\"logs_omitted\"`, not listed")
    public static let readTimeout = Setting<Int>(
        "read_timeout", 30, range: 1...3600,
        doc:
            "(new) seconds to receive a whole request once started; on the gRPC port too (a stream not ended in time is reset)"
    )
    public static let idleTimeout = Setting<Int>(
        "idle_timeout", 60, range: 1...86_400,
        doc: "(new) seconds a connection may sit without a request, on the HTTP and gRPC ports"
    )
    public static let maxConnections = Setting<Int>(
        "max_connections", 4096, range: 1...1_000_000,
        doc:
            "(new) open client connections; more wait in the listen backlog. The gRPC port counts its own against the same number and closes a connection past it at once"
    )
    /// Open connections of one client IP address on each port (HTTP and gRPC count their own).
    public static let maxConnectionsPerAddress = Setting<Int>(
        "max_connections_per_address", 256, range: 1...1_000_000,
        doc:
            "(new) open connections of one client IP address on each port (HTTP, gRPC); more from that address are closed at once, so one client cannot hold every slot of `core.max_connections`. Behind a proxy or load balancer that connects from one address, raise it to `core.max_connections`"
    )
    /// The lowest TLS version ingest (HTTP and gRPC) accepts: "1.2" or "1.3".
    public static let tlsMinVersion = Setting<String>(
        "tls_min_version", "1.2", doc: "(new) the lowest TLS version ingest accepts, HTTP and gRPC: `\"1.2\"` or `\"1.3\"` (nothing lower)")
    /// Ingest keys (none: every route open, as in gorush). Plain or `sha256:<hex>`.
    public static let apiKeys = Setting<[String]>(
        "api_keys", [], secrecy: .secret, doc: "(new) ingest keys of the default app (plain, or `sha256:<hex of SHA-256(key)>`); see docs/security.md"
    )
    public static let adminKeys = Setting<[String]>(
        "admin_keys", [], secrecy: .secret,
        doc: "(new) admin keys (plain, or `sha256:<hex>`): admin routes, and acting for any app; see docs/security.md")
    /// The default app's share, as `apps[].max_pending` / `apps[].rate_limit` are the other apps' (0: none).
    public static let appMaxPending = Setting<Int>(
        "app_max_pending", 0, range: AppConfig.maxPendingRange,
        doc: "(new) the default app's share: deliveries accepted and unfinished before `503` (0: none)")
    public static let appRateLimit = Setting<Int>(
        "app_rate_limit", 0, range: AppConfig.rateLimitRange,
        doc: "(new) the default app's deliveries per second before `429` (0: none)")
    /// `/metrics` needs an admin key (default: open for scrapers, as in gorush).
    public static let metricsAdminOnly = Setting<Bool>(
        "metrics_admin_only", false, doc: "(new) `/metrics` needs an admin key (default: open for scrapers)")
    /// The status page `/ui` (and `/api/stat/live`, admin key); false: neither is served.
    public static let ui = Setting<Bool>(
        "ui", true, doc: "(new) serve the status page `/ui` and its data route `/api/stat/live` (admin key when keys are set); `false` serves neither"
    )
    /// TLS on ingest (gorush's keys and defaults): HTTP/1.1 and HTTP/2 (ALPN) over TLS.
    public static let ssl = Setting<Bool>("ssl", false, doc: "serve HTTPS: HTTP/1.1 and HTTP/2 (ALPN) over TLS")
    public static let certPath = Setting<String>("cert_path", "cert.pem", doc: "PEM certificate (chain) for `core.ssl`")
    public static let keyPath = Setting<String>("key_path", "key.pem", doc: "PEM private key for `core.ssl`")
    public static let certBase64 = Setting<String>(
        "cert_base64", "", secrecy: .secret, doc: "the certificate PEM base64-encoded (wins over `cert_path`)")
    public static let keyBase64 = Setting<String>(
        "key_base64", "", secrecy: .secret, doc: "the key PEM base64-encoded (wins over `key_path`)")
    /// The PID file (gorush's `core.pid`).
    public static let pidEnabled = Setting<Bool>(
        "pid.enabled", false, doc: "write the process id at start, removed at a clean stop")
    public static let pidPath = Setting<String>(
        "pid.path", "gorush.pid", doc: "file the process id is written to"
    )
    public static let pidOverride = Setting<Bool>(
        "pid.override", true, doc: "overwrite an existing pid file (false: start refused when the file exists)")
    /// gorush's outbound proxy URL (`http://[user:password@]host:port`); a secret: it may hold a password.
    public static let httpProxy = Setting<String>(
        "http_proxy", "", secrecy: .secret,
        doc:
            "outbound HTTP proxy (CONNECT) for every provider, OAuth and feedback connection; else `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` ([docs/proxy.md](docs/proxy.md))"
    )
    /// How long an `Idempotency-Key`'s answer and a `dedup_key` hold ("24h", "90m", "3600s").
    public static let idempotencyTTL = Setting<String>(
        "idempotency_ttl", "24h", doc: "(new) how long an `Idempotency-Key`'s answer and a `dedup_key` hold")

    public static let section = ConfigSection(
        "core",
        keys: [
            enabled.key, address.key, port.key, workerNum.key, queueNum.key, maxNotification.key, maxBodyBytes.key,
            sync.key, syncTimeout.key, feedbackHookURL.key, feedbackTimeout.key, feedbackHeader.key, shutdownTimeout.key,
            mode.key, caFile.key, retryBackoffMs.key, retryBackoffMaxMs.key, maxDeliveriesPerRequest.key, maxTokenBytes.key,
            maxFieldBytes.key, maxMessageBytes.key, maxObjectKeys.key, maxJSONDepth.key, maxLogMessageBytes.key,
            maxSyncAnswerBytes.key, readTimeout.key, idleTimeout.key, maxConnections.key, maxConnectionsPerAddress.key, ssl.key, tlsMinVersion.key,
            certPath.key, keyPath.key,
            certBase64.key, keyBase64.key, pidEnabled.key, pidPath.key, pidOverride.key, apiKeys.key, adminKeys.key, metricsAdminOnly.key,
            httpProxy.key, appMaxPending.key, appRateLimit.key, idempotencyTTL.key, maxScheduleHorizon.key, ui.key,
        ])
}

/// The `api:` section.
public enum APIConfig {
    public static let pushURI = Setting<String>("push_uri", "/api/push", doc: "path of the push route")
    public static let statGoURI = Setting<String>("stat_go_uri", "/api/stat/go", doc: "path of the Go-runtime-shaped process statistics")
    public static let statAppURI = Setting<String>("stat_app_uri", "/api/stat/app", doc: "path of the per-platform success/error counts")
    public static let configURI = Setting<String>("config_uri", "/api/config", doc: "path of the running configuration (secrets `[REDACTED]`)")
    public static let sysStatURI = Setting<String>("sys_stat_uri", "/sys/stats", doc: "path of the request statistics")
    public static let metricURI = Setting<String>("metric_uri", "/metrics", doc: "path of the Prometheus metrics")
    public static let healthURI = Setting<String>("health_uri", "/healthz", doc: "path of the health check")

    public static let section = ConfigSection(
        "api",
        keys: [
            pushURI.key, statGoURI.key, statAppURI.key, configURI.key, sysStatURI.key, metricURI.key, healthURI.key,
        ])
}

/// The `log:` section.
public enum LogConfig {
    public static let format = Setting<String>(
        "format", "string", doc: "`string` or `json` (one JSON object per line: `time`, `level`, `msg`, metadata)")
    public static let accessLevel = Setting<String>(
        "access_level", "info", doc: "lowest level logged, logrus names (`debug`, `info`, `warn`, `error`, `fatal`)")
    public static let errorLevel = Setting<String>(
        "error_level", "error", doc: "lines at this level and above go to the error log")
    public static let hideToken = Setting<Bool>("hide_token", true, doc: "mask tokens in logs, sync responses and feedback")
    public static let hideMessages = Setting<Bool>(
        "hide_messages", false, doc: "the message in sync answers, feedback posts and logs reads `(message redacted)`")
    /// `stdout`, `stderr` or a file path (appended to).
    public static let accessLog = Setting<String>(
        "access_log", "stdout", doc: "where access lines go: `stdout`, `stderr` or a file (appended to, created 0640)")
    public static let errorLog = Setting<String>(
        "error_log", "stderr", doc: "where error lines go: `stdout`, `stderr` or a file (appended to, created 0640)")

    public static let section = ConfigSection(
        "log",
        keys: [
            format.key, accessLevel.key, errorLevel.key, hideToken.key, hideMessages.key, accessLog.key, errorLog.key,
        ])
}

/// The `queue:` section.
public enum QueueConfig {
    public static let engine = Setting<String>(
        "engine", "sqlite",
        doc: "`sqlite` (durable, embedded), `postgres` (durable, shared by several gateways), `memory` (gorush's `local`, lost on restart)")
    public static let maxPending = Setting<Int>(
        "max_pending", 200_000, range: 1...100_000_000,
        doc: "(new) accepted, unfinished deliveries; past it `503` + `Retry-After` (`core.queue_num` also sets it)")
    public static let sqlitePath = Setting<String>("sqlite.path", "data/pushgate.sqlite", doc: "(new) the SQLite queue file (WAL mode)")
    public static let sqliteSynchronous = Setting<String>(
        "sqlite.synchronous", "normal", doc: "(new) SQLite `synchronous` pragma of the WAL-mode store: `normal` or `full`")
    public static let postgresURL = Setting<String>(
        "postgres.url", "", secrecy: .secret,
        doc:
            "(new) `postgres://user:password@host:5432/db?sslmode=…`. Without `sslmode`: `verify-full` (TLS, certificate and host name checked against the system's trust roots) for a host off this machine, `disable` for `localhost`, `127.x.x.x` and `::1`. An explicit `sslmode` wins: `disable`, `prefer` (plain text when the server offers no TLS: a downgrade an attacker on the path can force), `require` / `verify-ca` / `verify-full` (all three verify certificate and host name)"
    )
    public static let leaseTimeout = Setting<String>(
        "lease_timeout", "60s", doc: "(new) a crashed process's leased jobs are handed out again after this")
    public static let statusRetention = Setting<String>("status_retention", "24h", doc: "(new) how long `GET /api/push/{notif_id}` records are kept")
    public static let statusMaxRecords = Setting<Int>(
        "status_max_records", 1_000_000, range: 0...1_000_000_000,
        doc:
            "(new) most delivery records kept for `GET /api/push/{notif_id}`, whichever of it and `status_retention` comes first; the oldest go first. Memory engine: every record (queued ones included), held in memory at ~120 bytes each for an APNs delivery (a 64-hex-digit token and a UUID `apns-id` are kept as bytes; longer tokens and other provider ids add their length), so the default holds ~120 MB at most. `sqlite`/`postgres`: the finished deliveries (queued ones are the queue, bounded by `max_pending`, never pruned); checked every minute with the retention pruning, at the cost of reading that many index entries (`sqlite`: rows, newest id first) once the store holds more rows (a gateway sharing a PostgreSQL queue applies its own value: the smallest wins); when it cuts records short of the retention a notice is logged once. Raise it to keep a full `status_retention` at high rates (at 1,000 deliveries/s a day is 86.4M records)"
    )
    /// sqlite/postgres: deliveries held in memory (ready, in flight, retrying); the rest of a backlog
    /// waits in the store and is read back as these finish (`DurableQueueOptions.maxHeld`).
    public static let maxHeld = Setting<Int>(
        "max_held", DurableQueueOptions.defaultMaxHeld, range: 100...10_000_000,
        doc:
            "(new) `sqlite`/`postgres`: deliveries held in memory (ready, in flight, retrying; ~430 bytes each); the rest of a backlog waits in the store and is read back as these finish, so a backlog of millions costs disk, not memory. Higher: less CPU while a large backlog drains (the SQLite engine reads a job back for ~1.7 µs); lower: less memory (100 to 10,000,000). On a host short of memory, the environment variable `MALLOC_ARENA_MAX=2` also caps glibc's per-thread heaps (draining 10M: 80 instead of 107 MB peak, for ~5 % less throughput on `sqlite`; docs/benchmarks.md)"
    )
    /// sqlite/postgres: longest wait for the store's write of a request; past it (a database gone)
    /// the request is answered 503 with `Retry-After` (`DurableQueueOptions.storeTimeout`).
    public static let storeTimeout = Setting<String>(
        "store_timeout", "5s",
        doc:
            "(new) `sqlite`/`postgres`: longest wait for the store's write of a request (100ms to 10m). A store that cannot take writes answers at once: `507` (full disk) or `503` (I/O error, database unreachable, or no answer within this time), with `Retry-After` and the cause in the JSON `message`; nothing of the request is queued then (a transaction still running for a refused request cannot commit any more: it rolls back when the server answers again, so a client's retry is the only copy sent; only a COMMIT already on its way when the deadline came is waited for, up to this time once more, and should it still not answer, its outcome is unknown and it may stand). Delivery outcomes the store refuses are kept in memory and written again once it takes writes (retried with backoff), so no delivery is sent again for want of its outcome; `/readyz` answers 503 meanwhile"
    )

    public static let section = ConfigSection(
        "queue",
        keys: [
            engine.key, maxPending.key, sqlitePath.key, sqliteSynchronous.key, postgresURL.key, leaseTimeout.key,
            statusRetention.key, statusMaxRecords.key, maxHeld.key, storeTimeout.key,
        ])
}

/// The `events:` section: the delivery event stream (webhook and `GET /api/events`, docs/delivery-controls.md).
public enum EventsConfig {
    public static let enabled = Setting<Bool>(
        "enabled", false,
        doc: "(new) record every delivery's transitions as events for `GET /api/events` (Server-Sent Events); on whenever `webhook_url` is set")
    public static let webhookURL = Setting<String>(
        "webhook_url", "",
        doc:
            "(new) the events are POSTed here as JSON arrays (`http`/`https` only), signed `X-Pushgate-Signature: sha256=<hex HMAC-SHA256(secret, body)>`; kept in the queue's store until the receiver answers 2xx, retried with capped backoff"
    )
    public static let secret = Setting<String>(
        "secret", "", secrecy: .secret, doc: "(new) the HMAC-SHA256 key of `X-Pushgate-Signature` (no header when empty)")
    public static let batchMax = Setting<Int>("batch_max", 500, range: 1...10_000, doc: "(new) most events in one webhook POST")
    public static let batchMs = Setting<Int>(
        "batch_ms", 1000, range: 0...60_000, doc: "(new) a partial batch waits this many milliseconds for more events before it is posted")
    public static let maxStored = Setting<Int>(
        "max_stored", 100_000, range: 1...100_000_000,
        doc:
            "(new) most events kept (the webhook's outbox and what `Last-Event-ID` can resume from; memory engine: in memory, ~400 bytes each); past it the oldest go, and those the webhook had not posted are counted in `pushgate_events_dropped_total` and logged"
    )
    public static let types = Setting<[String]>(
        "types", [],
        doc:
            "(new) only these event types are recorded (empty: all): `accepted`, `sent`, `fallback_sent`, `retrying`, `failed`, `token_dead`, `coalesced`, `duplicate`, `scheduled`, `cancelled`, `quiet_hours`"
    )
    public static let timeout = Setting<Int>("timeout", 10, range: 1...300, doc: "(new) seconds one webhook POST may take")
    public static let retryMaxMs = Setting<Int>(
        "retry_max_ms", 60_000, range: 10...3_600_000, doc: "(new) the longest wait between two webhook attempts (the backoff doubles from 500 ms)")
    public static let sseMaxClients = Setting<Int>(
        "sse_max_clients", 100, range: 0...10_000, doc: "(new) most concurrent `GET /api/events` clients; past it `503` + `Retry-After`")
    public static let sseClientBuffer = Setting<Int>(
        "sse_client_buffer", 10_000, range: 1...1_000_000,
        doc: "(new) events waiting for one `GET /api/events` client; a client further behind is disconnected (it resumes with `Last-Event-ID`)")

    public static let section = ConfigSection(
        "events",
        keys: [
            enabled.key, webhookURL.key, secret.key, batchMax.key, batchMs.key, maxStored.key, types.key, timeout.key, retryMaxMs.key,
            sseMaxClients.key, sseClientBuffer.key,
        ])
}

/// The `stat:` section.
public enum StatConfig {
    public static let engine = Setting<String>(
        "engine", "memory",
        doc:
            "`memory` only: `/api/stat/app` counts in memory since start; delivery status is kept by the queue engine (other gorush engines: a warning)"
    )

    public static let section = ConfigSection(
        "stat",
        keys: [
            engine.key
        ])
}

/// The `tracing:` section: OpenTelemetry spans of each request and each delivery attempt, exported
/// over OTLP/HTTP (docs/observability.md). Read at start (a reload does not change it).
public enum TracingConfig {
    public static let enabled = Setting<Bool>(
        "enabled", false,
        doc:
            "(new) OpenTelemetry tracing: a span per ingest request (W3C `traceparent` honoured) and per delivery attempt, its child through the queue, exported over OTLP/HTTP (docs/observability.md). `OTEL_SDK_DISABLED=true` turns it off"
    )
    public static let endpoint = Setting<String>(
        "endpoint", "http://127.0.0.1:4318",
        doc:
            "(new) the OTLP/HTTP collector (`http` or `https`); spans are POSTed (protobuf) to `<endpoint>/v1/traces`. `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` win when set; credentials in the URL are never logged (prefer `OTEL_EXPORTER_OTLP_HEADERS`)"
    )
    public static let serviceName = Setting<String>(
        "service_name", "pushgate", doc: "(new) the spans' `service.name` (`OTEL_SERVICE_NAME` wins when set)")
    /// A decimal (the typed settings have no floating-point kind): checked to 0.0-1.0 at start.
    public static let sampleRatio = Setting<String>(
        "sample_ratio", "1.0",
        doc:
            "(new) share of new traces recorded, 0.0-1.0; parent-based: a request whose `traceparent` is sampled is always recorded, one not sampled never (`OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` win when set)"
    )

    public static let section = ConfigSection("tracing", keys: [enabled.key, endpoint.key, serviceName.key, sampleRatio.key])
}

/// The `mock:` section.
public enum MockConfig {
    public static let enabled = Setting<Bool>("enabled", false, doc: "(new) start the built-in mock providers and send to them (`serve --mock`)")
    public static let apnsPort = Setting<Int>("apns_port", 0, range: 0...65535, doc: "(new) port of the built-in APNs mock (0: any free port)")
    public static let fcmPort = Setting<Int>("fcm_port", 0, range: 0...65535, doc: "(new) port of the built-in FCM mock (0: any free port)")
    public static let hmsPort = Setting<Int>("hms_port", 0, range: 0...65535, doc: "(new) port of the built-in HMS mock (0: any free port)")
    public static let webpushPort = Setting<Int>(
        "webpush_port", 0, range: 0...65535, doc: "(new) port of the built-in Web Push mock (0: any free port)")

    /// `mock.<name>_port` of a `MockRegistry` mock.
    public static func port(_ mockName: String) -> Setting<Int> { Setting("\(mockName)_port", 0, range: 0...65535) }

    public static let section = ConfigSection(
        "mock",
        keys: [
            enabled.key, apnsPort.key, fcmPort.key, hmsPort.key, webpushPort.key,
        ])
}
