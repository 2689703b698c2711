import Foundation
import Logging
import PushDispatch
import PushgateCore
import Tracing

/// `tracing.*` as the gateway runs with it. Precedence, per setting: an `OTEL_*` variable the
/// OpenTelemetry SDK reads (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`,
/// `OTEL_TRACES_SAMPLER` …) > `PUSHGATE_TRACING_*` > the file > the default; `OTEL_SDK_DISABLED=true`
/// turns tracing off whatever `tracing.enabled` says. Tracing is only ever on when `tracing.enabled`
/// is true: `OTEL_*` variables alone never turn it on.
public struct TracingSettings: Sendable {
    /// Spans are made and exported: `tracing.enabled`, and `OTEL_SDK_DISABLED` is not true.
    public var enabled: Bool
    /// `tracing.enabled` was set but `OTEL_SDK_DISABLED=true` overrides it (logged at start).
    public var disabledByEnvironment: Bool
    /// `tracing.endpoint`: the collector's base URL (spans go to `<endpoint>/v1/traces`).
    public var endpoint: String
    public var serviceName: String
    /// `tracing.sample_ratio`, 0...1.
    public var sampleRatio: Double

    /// The variables that name the collector in place of `tracing.endpoint`, in the SDK's order of precedence.
    public static let endpointVariables = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]

    public init(_ raw: RawConfig, environment: [String: String]) throws {
        let s = raw.section("tracing")
        let requested = s[TracingConfig.enabled]
        let sdkDisabled = environment["OTEL_SDK_DISABLED"]?.trimmingCharacters(in: .whitespaces).lowercased() == "true"
        enabled = requested && !sdkDisabled
        disabledByEnvironment = requested && sdkDisabled
        endpoint = s[TracingConfig.endpoint]
        try Self.checkEndpoint(endpoint, key: s.path(TracingConfig.endpoint))
        if enabled {
            for name in Self.endpointVariables {
                if let v = environment[name], !v.isEmpty { try Self.checkEndpoint(v, key: name) }
            }
        }
        serviceName = s[TracingConfig.serviceName]
        guard !serviceName.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw ConfigError(key: s.path(TracingConfig.serviceName), problem: "must not be empty")
        }
        let ratioText = s[TracingConfig.sampleRatio].trimmingCharacters(in: .whitespaces)
        guard let ratio = Double(ratioText), ratio.isFinite, (0...1).contains(ratio) else {
            throw ConfigError(
                key: s.path(TracingConfig.sampleRatio), problem: "\"\(ratioText.logSafe(max: 32))\" is not a number from 0.0 to 1.0")
        }
        sampleRatio = ratio
    }

    /// An `http` or `https` URL with a host; else a `ConfigError` naming `key`, the URL shown without
    /// its credentials (`RawConfig.redactURL`).
    static func checkEndpoint(_ url: String, key: String) throws {
        let bad = ConfigError(key: key, problem: "\"\(RawConfig.redactURL(url).logSafe(max: 256))\" is not an http(s) URL with a host")
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = u.host, !host.isEmpty
        else { throw bad }
    }

    /// Where spans are POSTed, as the SDK decides it (a signal's own variable as it is, the shared
    /// one and `tracing.endpoint` with `/v1/traces`), credentials and query hidden: for the start log.
    public func exportURL(environment: [String: String]) -> String {
        let url: String
        if let v = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], !v.isEmpty {
            url = v
        } else {
            let base = environment["OTEL_EXPORTER_OTLP_ENDPOINT"].flatMap { $0.isEmpty ? nil : $0 } ?? endpoint
            url = Self.tracesURL(base: base)
        }
        return RawConfig.redactURL(url)
    }

    /// `<base>/v1/traces` (one slash).
    public static func tracesURL(base: String) -> String {
        base.hasSuffix("/") ? base + "v1/traces" : base + "/v1/traces"
    }
}

/// The trace context a way in received with a request (HTTP and Matrix headers, gRPC metadata), and
/// the name of its span. Made only when `tracing.enabled` (the ways in check it first).
public struct IngestTrace: Sendable {
    /// The span's name, e.g. `POST /api/push`.
    public var operation: String
    /// W3C `traceparent` / `tracestate` as received (checked before use: `TraceContext`).
    public var traceParent: String?
    public var traceState: String?

    public init(operation: String, traceParent: String? = nil, traceState: String? = nil) {
        self.operation = operation
        self.traceParent = traceParent
        self.traceState = traceState
    }

    /// From every value of the `traceparent` and `tracestate` headers (or metadata) received: more
    /// than one `traceparent` is no parent (W3C: a new trace); several `tracestate` are one list.
    public init(operation: String, traceParents: [String], traceStates: [String]) {
        self.operation = operation
        traceParent = traceParents.count == 1 ? traceParents[0].trimmingCharacters(in: .whitespaces) : nil
        traceState = traceParent == nil || traceStates.isEmpty ? nil : traceStates.joined(separator: ",")
    }
}

extension Gateway {
    /// Spans are made (`tracing.enabled` and not `OTEL_SDK_DISABLED`): a way in reads the trace
    /// headers only then.
    public var tracingEnabled: Bool { settings.tracing.enabled }

    /// `accept` inside the request's server span: the child of a valid incoming `traceparent`, else
    /// the root of a new trace. Its context goes with each accepted notification through the queue.
    func acceptTraced(_ request: PushRequest, from caller: IngestCaller, options: IngestOptions) async -> IngestDecision {
        // Without a way in's context (the embedding API): the caller's own task-local context, so a
        // push sent from inside a traced handler joins its trace.
        let parent =
            options.trace.map { TraceContext.context(traceParent: $0.traceParent, traceState: $0.traceState) } ?? ServiceContext.current ?? .topLevel
        let span = startSpan(options.trace?.operation ?? "pushgate.ingest", context: parent, ofKind: options.trace == nil ? .internal : .server)
        let traceParent = TraceContext.traceParent(of: span.context)
        span.attributes["pushgate.notifications"] = request.notifications.count + request.skipped.count
        span.attributes["pushgate.deliveries"] = Self.deliveryCount(request)
        if let app = options.app ?? request.appID { span.attributes["pushgate.app_requested"] = app.logSafe(max: 64) }
        let decision = await decide(request, from: caller, options: options, traceParent: traceParent)
        switch decision {
        case .accepted(let result, let app):
            span.attributes["pushgate.app"] = app
            span.attributes["pushgate.outcome"] = "accepted"
            span.attributes["pushgate.request_id"] = result.requestID
            span.attributes["pushgate.counts"] = result.counts
            span.attributes["http.response.status_code"] = 200
        case .replay(let answer):
            span.attributes["pushgate.outcome"] = "replay"
            span.attributes["pushgate.request_id"] = answer.requestID
            span.attributes["http.response.status_code"] = answer.status
        case .refused(let refusal):
            span.attributes["pushgate.outcome"] = "refused"
            span.attributes["pushgate.refusal"] = refusal.kind.name
            span.attributes["http.response.status_code"] = refusal.error.status
            // A server span's 4xx is the client's doing (OpenTelemetry's HTTP conventions): only 5xx is an error.
            if refusal.error.status >= 500 { span.setStatus(SpanStatus(code: .error, message: refusal.error.message)) }
        }
        span.end()
        return decision
    }
}

extension IngestRefusal.Kind {
    /// The refusal as the span attribute `pushgate.refusal` names it.
    public var name: String {
        switch self {
        case .unauthenticated: return "unauthenticated"
        case .invalid: return "invalid"
        case .forbidden: return "forbidden"
        case .unknownApp: return "unknown_app"
        case .idempotencyConflict: return "idempotency_conflict"
        case .idempotencyMismatch: return "idempotency_mismatch"
        case .rateLimited: return "rate_limited"
        case .queueFull: return "queue_full"
        case .storeUnavailable: return "store_unavailable"
        case .draining: return "draining"
        }
    }
}

/// The SDK's diagnostic log (`pushgate.otel`) without the values it would show: it logs each `OTEL_*`
/// variable it applies with the old and new value (an endpoint URL with credentials,
/// `OTEL_EXPORTER_OTLP_HEADERS` with an API key) and a carrier it could not parse. Those metadata
/// values are replaced by `[REDACTED]`; the messages and the variables' names stay.
public struct SecretDroppingLogHandler: LogHandler {
    public static let hiddenKeys: Set<String> = ["environment_value", "previous_value", "new_value", "carrier"]
    var inner: any LogHandler

    public var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    public init(_ inner: any LogHandler) { self.inner = inner }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = Self.redacted(newValue) ?? [:] }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = Self.hiddenKeys.contains(key) && newValue != nil ? "[REDACTED]" : newValue }
    }

    public func log(event: LogEvent) {
        var e = event
        e.metadata = Self.redacted(event.metadata)
        inner.log(event: e)
    }

    public static func redacted(_ m: Logger.Metadata?) -> Logger.Metadata? {
        guard var m else { return nil }
        for key in hiddenKeys where m[key] != nil { m[key] = "[REDACTED]" }
        return m
    }
}
