import Foundation
import Metrics
import NIOConcurrencyHelpers
import Prometheus
import PushDispatch
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

    package static func exposition(gateway: Gateway) -> [UInt8] {
        var buffer: [UInt8] = []
        bootstrap().emit(into: &buffer)
        let s = gateway.dispatcher.stats.snapshot
        buffer.append(contentsOf: gorushSeries(stats: s, busyWorkers: gateway.dispatcher.busyWorkers).utf8)
        var text = ""
        // Pushgate's own platforms under gorush's naming, and the queue.
        for p in [Platform.webpush, .unifiedpush] {
            let c = s.counts(p)
            text += "# HELP gorush_\(p.name)_success Number of \(p.name) success count\n"
            text += "# TYPE gorush_\(p.name)_success counter\ngorush_\(p.name)_success \(c.pushSuccess)\n"
            text += "# HELP gorush_\(p.name)_error Number of \(p.name) fail count\n"
            text += "# TYPE gorush_\(p.name)_error counter\ngorush_\(p.name)_error \(c.pushError)\n"
        }
        text += "# HELP gorush_queue_usage Deliveries accepted and not finished\n"
        text += "# TYPE gorush_queue_usage gauge\ngorush_queue_usage \(gateway.dispatcher.queue.pendingCount)\n"
        let apps = gateway.dispatcher.allApps.sorted { $0.id < $1.id }
        text += "# HELP pushgate_app_pending Deliveries of the app accepted and not finished (its max_pending share)\n"
        text += "# TYPE pushgate_app_pending gauge\n"
        for a in apps { text += "pushgate_app_pending{app=\"\(a.id)\"} \(gateway.dispatcher.pendingCount(app: a.id))\n" }
        text += "# HELP pushgate_app_max_pending The app's max_pending (0: the queue's own capacity only)\n"
        text += "# TYPE pushgate_app_max_pending gauge\n"
        for a in apps { text += "pushgate_app_max_pending{app=\"\(a.id)\"} \(a.maxPending)\n" }
        text += "# HELP pushgate_queue_capacity Deliveries the queue accepts before answering 503 (queue.max_pending)\n"
        text += "# TYPE pushgate_queue_capacity gauge\npushgate_queue_capacity \(gateway.dispatcher.queue.capacity)\n"
        buffer.append(contentsOf: text.utf8)
        buffer.append(contentsOf: gateway.liveMetricsText().utf8)
        return buffer
    }

    /// gorush v1.22's 11 series (`metric/metrics.go`): names, help texts and types as gorush exposes
    /// them. `busy_workers` is the deliveries being sent right now; the task counters count queued
    /// deliveries (see `StatsSnapshot`).
    static func gorushSeries(stats s: StatsSnapshot, busyWorkers: Int) -> String {
        let ios = s.counts(.ios)
        let android = s.counts(.android)
        let huawei = s.counts(.huawei)
        let series: [(name: String, help: String, type: String, value: Int64)] = [
            ("gorush_total_push_count", "Number of push count", "counter", s.totalCount),
            ("gorush_ios_success", "Number of iOS success count", "counter", ios.pushSuccess),
            ("gorush_ios_error", "Number of iOS fail count", "counter", ios.pushError),
            ("gorush_android_success", "Number of android success count", "counter", android.pushSuccess),
            ("gorush_android_fail", "Number of android fail count", "counter", android.pushError),
            ("gorush_huawei_success", "Number of huawei success count", "counter", huawei.pushSuccess),
            ("gorush_huawei_fail", "Number of huawei fail count", "counter", huawei.pushError),
            ("gorush_busy_workers", "Length of busy workers", "gauge", Int64(busyWorkers)),
            ("gorush_success_tasks", "Length of Success Tasks", "counter", s.successTasks),
            ("gorush_failure_tasks", "Length of Failure Tasks", "counter", s.failureTasks),
            ("gorush_submitted_tasks", "Length of Submitted Tasks", "counter", s.submittedTasks),
        ]
        var text = ""
        for m in series {
            text += "# HELP \(m.name) \(m.help)\n# TYPE \(m.name) \(m.type)\n\(m.name) \(m.value)\n"
        }
        return text
    }
}
