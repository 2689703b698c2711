import Foundation
import Metrics
import NIOConcurrencyHelpers
import Prometheus
import PushgateCore

/// Prometheus metrics: swift-metrics bootstrapped once per process into one registry.
public enum MetricsSetup {
    private static let state = NIOLockedValueBox<PrometheusCollectorRegistry?>(nil)

    /// Bootstraps swift-metrics with Prometheus (idempotent).
    @discardableResult
    public static func bootstrap() -> PrometheusCollectorRegistry {
        state.withLockedValue { s in
            if let r = s { return r }
            let registry = PrometheusCollectorRegistry()
            var factory = PrometheusMetricsFactory(registry: registry)
            factory.defaultDurationHistogramBuckets = [
                .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
                .milliseconds(20), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                .seconds(1), .seconds(2), .seconds(5), .seconds(10), .seconds(30),
            ]
            MetricsSystem.bootstrap(factory)
            s = registry
            return registry
        }
    }

    static func exposition(gateway: Gateway) -> [UInt8] {
        var buffer: [UInt8] = []
        bootstrap().emit(into: &buffer)
        // gorush-compatible gauges, computed at scrape time.
        let s = gateway.dispatcher.stats.snapshot
        var text =
            "# HELP gorush_total_push_count count of push notifications accepted\n# TYPE gorush_total_push_count gauge\ngorush_total_push_count \(s.totalCount)\n"
        for p in [Platform.ios, .android, .huawei, .webpush, .unifiedpush] {
            let c = s.counts(p)
            text += "# TYPE gorush_\(p.name)_success gauge\ngorush_\(p.name)_success \(c.pushSuccess)\n"
            text += "# TYPE gorush_\(p.name)_error gauge\ngorush_\(p.name)_error \(c.pushError)\n"
        }
        text += "# TYPE gorush_queue_usage gauge\ngorush_queue_usage \(gateway.dispatcher.queue.pendingCount)\n"
        text += "# TYPE pushgate_queue_capacity gauge\npushgate_queue_capacity \(gateway.dispatcher.queue.capacity)\n"
        buffer.append(contentsOf: text.utf8)
        return buffer
    }
}
