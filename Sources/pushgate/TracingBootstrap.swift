import Foundation
import GatewayCore
import Logging
import OTel
import PushDispatch
import ServiceLifecycle
import Tracing

/// `serve`'s tracing: with `tracing.enabled` (and `OTEL_SDK_DISABLED` not true) swift-otel's tracer
/// is bootstrapped as the process's `InstrumentationSystem` and its exporter runs as a service
/// beside the gateway's (listed first: it is shut down last, after the gateway drained, so the
/// spans of the last deliveries are flushed). Off: nothing is bootstrapped (the no-op tracer) and
/// the gateway makes no span at all (`Gateway.tracingEnabled`).
enum TracingBootstrap {
    /// The exporter's service, or nil when tracing is off. Exits with one line on a configuration
    /// the SDK refuses (an `OTEL_*` variable it cannot read).
    static func start(_ settings: TracingSettings, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> (any Service)?
    {
        if settings.disabledByEnvironment {
            logger.notice("tracing.enabled is true but OTEL_SDK_DISABLED=true: no spans are made")
        }
        guard settings.enabled else { return nil }
        var config = OTel.Configuration.default
        config.serviceName = settings.serviceName
        // The configured endpoint is the base URL; as a value set in code the SDK takes it as the
        // whole URL, so the path is added here (the SDK adds it to `OTEL_EXPORTER_OTLP_ENDPOINT`).
        config.traces.otlpExporter.endpoint = TracingSettings.tracesURL(base: settings.endpoint)
        config.traces.otlpExporter.protocol = .httpProtobuf
        if settings.sampleRatio < 1,
            let sampler = OTel.Configuration.TracesConfiguration.SamplerConfiguration.parentBasedTraceIDRatio(
                ratio: settings.sampleRatio)
        {
            config.traces.sampler = sampler
        } else {
            config.traces.sampler = .parentBasedAlwaysOn
        }
        config.metrics.enabled = false
        config.logs.enabled = false
        let gatewayLog = Logger(label: "pushgate.otel")
        config.diagnosticLogger = .custom(Logger(label: "pushgate.otel") { _ in SecretDroppingLogHandler(gatewayLog.handler) })
        do {
            let backend = try OTel.makeTracingBackend(configuration: config)
            InstrumentationSystem.bootstrap(backend.factory)
            logger.info(
                "tracing: spans exported to \(settings.exportURL(environment: environment)) as service \(environment["OTEL_SERVICE_NAME"] ?? settings.serviceName)"
            )
            return StopBoundedService(inner: backend.service, grace: StopGrace.standard)
        } catch {
            fail("config error: tracing: \(error)")
        }
    }
}

/// Runs a service and, once a graceful shutdown began, gives it `grace` to end (swift-otel's
/// exporter flushes the last spans then) before cancelling it: a collector that is down or accepts
/// the connection but never answers does not hold the stop (its export timeouts are 10 s a try).
struct StopBoundedService: Service {
    let inner: any Service
    let grace: Duration

    func run() async throws {
        let stop = StopGrace(grace: grace)
        let logger = Logger(label: "pushgate.otel")
        let inner = self.inner
        await withGracefulShutdownHandler {
            if await stop.run({
                do { try await inner.run() } catch { logger.warning("tracing exporter: \(error)") }
            }) {
                logger.warning("the OpenTelemetry collector did not take the last spans within \(stop.grace) of the stop: dropped")
            }
        } onGracefulShutdown: {
            stop.requestStop()
        }
    }
}
