import Foundation
import Histogram

/// The figures of one bench run, as text or JSON.
struct BenchReport {
    var values: [String: Any] = [:]
    var text = ""
    var missing = 0
    var json: String {
        let data = (try? JSONSerialization.data(withJSONObject: values, options: [.sortedKeys, .prettyPrinted])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func make(
        bench: Bench, runner: BenchRunner, sendEnd: UInt64, stats: MockStats?, expectedLive: Int,
        gatewayStats: [String: Any]?, rss: ProcessMemory, rssScope: String, missingSample: [Int]
    ) -> BenchReport {
        var r = BenchReport()
        let c = runner.counters
        let sendSeconds = max(0.001, Double(sendEnd - runner.startNanos) / 1e9)
        let acceptedPerSec = Double(c.acceptedDeliveries) / sendSeconds
        var v: [String: Any] = [
            "mix": [
                "platforms": bench.platforms, "tokens_per_notification": bench.tokens, "notifications_per_request": bench.notifications,
                "payload_bytes": bench.payloadBytes, "error_rate": bench.errorRate, "sync": bench.sync,
                "rate_target": bench.rate, "concurrency": bench.concurrency,
                "gateway": bench.gatewayURL ?? "in-process",
            ] as [String: Any],
            "requests": c.requests,
            "accepted_requests": c.acceptedRequests,
            "accepted_deliveries": c.acceptedDeliveries,
            "send_seconds": (sendSeconds * 1000).rounded() / 1000,
            "accepted_per_sec": acceptedPerSec.rounded(),
            "http_statuses": Dictionary(uniqueKeysWithValues: c.statuses.map { (String($0.key), $0.value) }),
            "transport_errors": c.transportErrors,
            "rss_bytes": rss.rssBytes,
            "rss_peak_bytes": rss.peakRSSBytes,
            "rss_scope": rssScope,
        ]
        let rt = runner.responseTimeHistogram
        v["http_response_us"] = ["p50": rt.valueAtPercentile(50), "p90": rt.valueAtPercentile(90), "p99": rt.valueAtPercentile(99), "max": rt.max]
        var lines: [String] = []
        lines.append(
            "pushgate bench — \(bench.platforms) x\(bench.tokens) tokens x\(bench.notifications) notifications/request, \(bench.concurrency) connections, "
                + (bench.rate > 0 ? "target \(Int(bench.rate))/s" : "max rate") + ", gateway \(bench.gatewayURL ?? "in-process")")
        lines.append(String(format: "  requests          %d sent, %d accepted in %.2f s", c.requests, c.acceptedRequests, sendSeconds))
        lines.append(String(format: "  accepted          %d deliveries, %.0f/s", c.acceptedDeliveries, acceptedPerSec))
        lines.append(
            String(
                format: "  HTTP response     p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms",
                Double(rt.valueAtPercentile(50)) / 1000, Double(rt.valueAtPercentile(90)) / 1000,
                Double(rt.valueAtPercentile(99)) / 1000, Double(rt.max) / 1000))
        if let s = stats {
            let window = s.lastOK > runner.startNanos ? Double(s.lastOK - runner.startNanos) / 1e9 : 0
            let deliveredPerSec = window > 0 ? Double(s.okDistinct) / window : 0
            r.missing = max(0, expectedLive - s.okDistinct)
            v["delivered"] = s.okDistinct
            v["delivered_per_sec"] = deliveredPerSec.rounded()
            v["delivery_seconds"] = (window * 1000).rounded() / 1000
            v["expected_live"] = expectedLive
            v["missing"] = r.missing
            v["missing_sample"] = missingSample
            v["mock"] = ["received": s.received, "ok": s.ok, "dead": s.dead, "injected": s.injected, "per_provider": s.perProvider] as [String: Any]
            v["latency_us"] = s.latency
            lines.append(
                String(
                    format: "  delivered         %d of %d live (%.0f/s over %.2f s), missing %d", s.okDistinct, expectedLive, deliveredPerSec, window,
                    r.missing))
            if r.missing > 0, !missingSample.isEmpty {
                lines.append("    missing bench sequence numbers (first): \(missingSample.map(String.init).joined(separator: ","))")
            }
            lines.append(
                String(
                    format: "  ingest->provider  p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms  (%d samples)",
                    Double(s.latency["p50"] ?? 0) / 1000, Double(s.latency["p90"] ?? 0) / 1000,
                    Double(s.latency["p99"] ?? 0) / 1000, Double(s.latency["max"] ?? 0) / 1000, s.latency["count"] ?? 0))
            lines.append("  at the mock       \(s.received) requests: \(s.ok) ok, \(s.dead) dead-token answers, \(s.injected) injected failures")
        } else {
            lines.append("  delivered         not measured (no mock control URL)")
        }
        var errors: [String] = []
        for (code, n) in c.statuses.sorted(by: { $0.key < $1.key }) where code != 200 { errors.append("HTTP \(code): \(n)") }
        for (e, n) in c.transportErrors.sorted(by: { $0.key < $1.key }) { errors.append("\(e): \(n)") }
        if let g = gatewayStats {
            let failures = g["failure_tasks"] as? Int ?? 0
            let success = g["success_tasks"] as? Int ?? 0
            v["gateway_stat_app"] = ["success_tasks": success, "failure_tasks": failures]
            lines.append("  gateway counters  success_tasks \(success), failure_tasks \(failures) (/api/stat/app, whole process lifetime)")
        }
        lines.append("  errors            " + (errors.isEmpty ? "none at the client" : errors.joined(separator: ", ")))
        lines.append(
            String(
                format: "  RSS               %.1f MB now, %.1f MB peak — %@", Double(rss.rssBytes) / 1_048_576, Double(rss.peakRSSBytes) / 1_048_576,
                rssScope))
        r.values = v
        r.text = lines.joined(separator: "\n")
        return r
    }
}
