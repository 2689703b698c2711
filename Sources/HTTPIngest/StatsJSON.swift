import Foundation
import GatewayCore
import NIOConcurrencyHelpers
import PushDispatch
import PushgateCore

#if canImport(Glibc)
    import Glibc
#endif

/// The statistics answers (gorush's `/api/stat/app`, `/api/stat/go`, `/sys/stats`): JSON bytes,
/// whatever way in serves them.
extension Gateway {
    package func appStatsJSON() -> [UInt8] {
        let s = dispatcher.stats.snapshot
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("version", first: &first)
        w.string(PushgateVersion.version)
        // gorush's busy_workers: deliveries being sent right now (queued ones: gorush_queue_usage).
        w.key("busy_workers", first: &first)
        w.int(dispatcher.busyWorkers)
        w.key("success_tasks", first: &first)
        w.int(s.successTasks)
        w.key("failure_tasks", first: &first)
        w.int(s.failureTasks)
        w.key("submitted_tasks", first: &first)
        w.int(s.submittedTasks)
        w.key("total_count", first: &first)
        w.int(s.totalCount)
        // Delivery controls: only once nonzero (a gorush client that never schedules sees gorush's keys).
        if s.scheduled > 0 {
            w.key("scheduled", first: &first)
            w.int(s.scheduled)
        }
        if s.cancelled > 0 {
            w.key("cancelled", first: &first)
            w.int(s.cancelled)
        }
        // gorush's `"<platform>":{"push_success":N,"push_error":N}`, for the totals and for each app.
        func writePlatforms(_ counts: (Platform) -> StatsSnapshot.PlatformCounts, first: inout Bool) {
            for p in ProviderRegistry.platforms {
                let c = counts(p)
                w.key(p.name, first: &first)
                w.raw(#"{"push_success":"#)
                w.int(c.pushSuccess)
                w.raw(#","push_error":"#)
                w.int(c.pushError)
                w.raw("}")
            }
        }
        writePlatforms({ s.counts($0) }, first: &first)
        // Per app (only when apps are configured: a gorush config's answer stays gorush's).
        let apps = dispatcher.appIDs
        if apps.count > 1 || apps.first != AppID.defaultApp {
            w.key("apps", first: &first)
            w.raw("{")
            var fa = true
            for id in apps {
                w.key(id, first: &fa)
                var fp = true
                w.raw("{")
                w.key("pending", first: &fp)
                w.int(dispatcher.pendingCount(app: id))
                writePlatforms({ s.counts($0, app: id) }, first: &fp)
                w.raw("}")
            }
            w.raw("}")
        }
        w.raw("}")
        return w.bytes
    }

    package func processStatsJSON() -> [UInt8] {
        let p = ProcessStats.read()
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("time", first: &first)
        w.int(Int64(Date().timeIntervalSince1970 * 1e9))
        w.key("swift_version", first: &first)
        w.string("6")
        w.key("pid", first: &first)
        w.int(Int(getpid()))
        w.key("uptime_seconds", first: &first)
        w.int(Int(Date().timeIntervalSince(startedAt)))
        w.key("cpu_num", first: &first)
        w.int(ProcessInfo.processInfo.activeProcessorCount)
        w.key("threads", first: &first)
        w.int(p.threads)
        w.key("memory_rss_bytes", first: &first)
        w.int(p.rssBytes)
        w.key("memory_virtual_bytes", first: &first)
        w.int(p.virtualBytes)
        w.key("memory_rss_peak_bytes", first: &first)
        w.int(p.peakRSSBytes)
        w.key("cpu_user_seconds", first: &first)
        w.double(p.userSeconds)
        w.key("cpu_system_seconds", first: &first)
        w.double(p.systemSeconds)
        w.key("queue_pending", first: &first)
        w.int(dispatcher.queue.pendingCount)
        w.key("queue_capacity", first: &first)
        w.int(dispatcher.queue.capacity)
        w.raw("}")
        return w.bytes
    }

    package func sysStatsJSON() -> [UInt8] {
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("uptime_seconds", first: &first)
        w.int(Int(Date().timeIntervalSince(startedAt)))
        w.key("responses", first: &first)
        w.raw("{")
        var f2 = true
        for (status, n) in requestCounters.snapshot.sorted(by: { $0.key < $1.key }) {
            w.key(String(status), first: &f2)
            w.int(n)
        }
        w.raw("}}")
        return w.bytes
    }
}

/// Process figures from /proc (Linux) and getrusage.
struct ProcessStats {
    var threads = 0
    var rssBytes = 0
    var virtualBytes = 0
    var peakRSSBytes = 0
    var userSeconds = 0.0
    var systemSeconds = 0.0

    static func read() -> ProcessStats {
        var s = ProcessStats()
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard parts.count >= 2, let v = Int(parts[1]) else { continue }
                switch parts[0] {
                case "Threads:": s.threads = v
                case "VmRSS:": s.rssBytes = v * 1024
                case "VmSize:": s.virtualBytes = v * 1024
                case "VmHWM:": s.peakRSSBytes = v * 1024
                default: break
                }
            }
        }
        var usage = rusage()
        if getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 {
            s.userSeconds = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            s.systemSeconds = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        }
        return s
    }
}
