import Foundation
import HTTP2Pool
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
        // The platforms gorush does not have, under gorush's naming (their modules' counters), and the queue.
        for (p, counters) in ProviderRegistry.counters where !counters.gorush {
            let c = s.counts(p)
            text += series(counters.success, counters.successHelp, "counter", c.pushSuccess)
            text += series(counters.error, counters.errorHelp, "counter", c.pushError)
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
        if let events = gateway.events { text += events.metricsText }
        buffer.append(contentsOf: text.utf8)
        buffer.append(contentsOf: gateway.liveMetricsText().utf8)
        return buffer
    }

    /// gorush v1.22's 11 series (`metric/metrics.go`): names, help texts and types as gorush exposes
    /// them. `busy_workers` is the deliveries being sent right now; the task counters count queued
    /// deliveries (see `StatsSnapshot`).
    /// The platforms' series come from their modules (`ProviderModule.counters`), in registry order.
    static func gorushSeries(stats s: StatsSnapshot, busyWorkers: Int) -> String {
        var text = series("gorush_total_push_count", "Number of push count", "counter", s.totalCount)
        for (p, counters) in ProviderRegistry.counters where counters.gorush {
            let c = s.counts(p)
            text += series(counters.success, counters.successHelp, "counter", c.pushSuccess)
            text += series(counters.error, counters.errorHelp, "counter", c.pushError)
        }
        text += series("gorush_busy_workers", "Length of busy workers", "gauge", Int64(busyWorkers))
        text += series("gorush_success_tasks", "Length of Success Tasks", "counter", s.successTasks)
        text += series("gorush_failure_tasks", "Length of Failure Tasks", "counter", s.failureTasks)
        text += series("gorush_submitted_tasks", "Length of Submitted Tasks", "counter", s.submittedTasks)
        return text
    }

    static func series(_ name: String, _ help: String, _ type: String, _ value: Int64) -> String {
        "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
    }
}

extension Gateway {
    /// The `/metrics` series of the status page's figures: the oldest pending delivery's age and
    /// the HTTP/2 pools, summed over origins (Web Push origins are chosen by clients: one series each
    /// would let them grow the scrape without bound).
    package func liveMetricsText() -> String {
        let a = dispatcher.activity.snapshot
        let age = a.oldestPendingSince.map { max(0, Date().timeIntervalSince($0)) } ?? 0
        let pools = HTTP2PoolDirectory.snapshot
        var text = ""
        text += "# HELP pushgate_queue_oldest_pending_seconds Age of the oldest delivery this process accepted and has not finished (0: none)\n"
        text += "# TYPE pushgate_queue_oldest_pending_seconds gauge\npushgate_queue_oldest_pending_seconds \(age)\n"
        text += "# HELP pushgate_dead_tokens_total Deliveries that ended with the token reported dead by the provider\n"
        text += "# TYPE pushgate_dead_tokens_total counter\npushgate_dead_tokens_total \(a.deadTokensTotal)\n"
        text +=
            "# HELP pushgate_provider_failing 1 while the app's provider refuses its configuration (e.g. WNS credentials for another app), else 0\n"
        text += "# TYPE pushgate_provider_failing gauge\n"
        for h in providerHealth {
            text += "pushgate_provider_failing{app=\"\(h.app)\",provider=\"\(h.platform.name)\"} \(h.health.isFailing ? 1 : 0)\n"
        }
        text += "# HELP pushgate_http2_pools HTTP/2 connection pools open to providers (one per origin)\n"
        text += "# TYPE pushgate_http2_pools gauge\npushgate_http2_pools \(pools.count)\n"
        text += "# HELP pushgate_http2_connections_active HTTP/2 connections to providers established and not closed\n"
        text += "# TYPE pushgate_http2_connections_active gauge\npushgate_http2_connections_active \(pools.reduce(0) { $0 + $1.activeConnections })\n"
        text += "# HELP pushgate_http2_requests_waiting Provider requests waiting for an HTTP/2 stream\n"
        text += "# TYPE pushgate_http2_requests_waiting gauge\npushgate_http2_requests_waiting \(pools.reduce(0) { $0 + $1.pendingRequests })\n"
        return text
    }
}
