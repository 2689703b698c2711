import Foundation
import Logging
import PushDispatch
import PushgateCore
import QueueStore

/// Builds the queue engine named by `queue.engine` (its queue, status source and counters).
public enum QueueWiring {
    public static func make(raw: RawConfig, settings: GatewaySettings, logger: Logger) throws -> any QueueEngine {
        let section = raw.section("queue")
        let retention = try duration(raw, QueueConfig.statusRetention)
        let leaseTimeout = try duration(raw, QueueConfig.leaseTimeout)
        guard leaseTimeout >= 1 else { throw ConfigError(key: "queue.lease_timeout", problem: "must be at least 1s") }
        let storeTimeout = try duration(raw, QueueConfig.storeTimeout)
        guard (0.1...600).contains(storeTimeout) else {
            throw ConfigError(key: "queue.store_timeout", problem: "must be between 100ms and 10m")
        }
        var options = DurableQueueOptions(capacity: settings.maxPending)
        options.leaseTimeout = leaseTimeout
        options.statusRetention = retention
        options.dedupTTL = settings.idempotencyTTL
        // Like the memory engine's status store: the newest `status_max_records` deliveries (here
        // the finished ones: pending deliveries are the queue, bounded by max_pending).
        options.statusMaxRecords = max(1, section[QueueConfig.statusMaxRecords])
        options.maxHeld = section[QueueConfig.maxHeld]
        options.storeTimeout = storeTimeout
        let opts = options
        let queueLogger = Logger(label: "pushgate.queue")

        switch settings.queueEngine {
        case "memory":
            return MemoryEngine(
                capacity: settings.maxPending, statusRetention: retention,
                statusMaxRecords: max(1, section[QueueConfig.statusMaxRecords]), dedupTTL: settings.idempotencyTTL)
        case "sqlite":
            let path = section[QueueConfig.sqlitePath]
            guard !path.isEmpty else { throw ConfigError(key: "queue.sqlite.path", problem: "must not be empty") }
            // SQLite and open(2) read the path as a C string: at a NUL byte they would stop, and open
            // another file than the one named (and its lock file `<path>.lock` would be that file).
            guard !path.utf8.contains(0) else { throw ConfigError(key: "queue.sqlite.path", problem: "contains a NUL byte") }
            let sync = section[QueueConfig.sqliteSynchronous].lowercased()
            guard ["normal", "full"].contains(sync) else {
                throw ConfigError(key: "queue.sqlite.synchronous", problem: "\"\(sync)\" is not normal or full")
            }
            let queue: DurableQueue
            do {
                queue = try BlockingStartup.run(what: "opening \(path)") {
                    try await SQLiteQueue.open(path: path, synchronous: sync, options: opts, logger: queueLogger)
                }
            } catch {
                throw ConfigError(key: "queue.sqlite.path", problem: "cannot open \(path): \(error)")
            }
            logger.info("queue: sqlite \(path) (\(queue.pendingCount) pending)")
            return DurableEngine(queue)
        case "postgres":
            let url = section[QueueConfig.postgresURL]
            guard !url.isEmpty else { throw ConfigError(key: "queue.postgres.url", problem: "required with queue.engine postgres") }
            let queue: DurableQueue
            do {
                queue = try BlockingStartup.run(what: "connecting to PostgreSQL") {
                    try await PostgresQueue.open(url: url, options: opts, logger: queueLogger)
                }
            } catch {
                throw ConfigError(key: "queue.postgres.url", problem: "cannot open the PostgreSQL queue: \(String(reflecting: error))")
            }
            logger.info("queue: postgres (\(queue.pendingCount) pending)")
            return DurableEngine(queue)
        default:
            throw ConfigError(key: "queue.engine", problem: "\"\(settings.queueEngine)\" is not supported (memory, sqlite, postgres)")
        }
    }

    /// "90", "90s", "15m", "24h", "7d" -> seconds.
    static func duration(_ raw: RawConfig, _ setting: Setting<String>, section: String = "queue") throws -> Double {
        let key = section + "." + setting.name
        let s = raw.section(section)[setting].trimmingCharacters(in: .whitespaces).lowercased()
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        // Finite and at most ten years: the value becomes dates and timer amounts that trap when huge.
        let maxSeconds = 10 * 365 * 86400.0
        func ok(_ v: Double) -> Bool { v.isFinite && v >= 0 && v <= maxSeconds }
        for (u, f) in units where s.hasSuffix(u) {
            if let v = Double(s.dropLast(u.count)), v.isFinite, ok(v * f) { return v * f }
        }
        if let v = Double(s), ok(v) { return v }
        throw ConfigError(key: key, problem: "\"\(s)\" is not a duration between 0 and 3650d (e.g. 90s, 15m, 24h)")
    }
}
