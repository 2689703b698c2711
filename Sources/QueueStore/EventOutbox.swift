import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import PushDispatch
import PushgateCore
import SQLiteNIO

/// The delivery events in the SQLite queue file: table `events` (`seq` the event id, AUTOINCREMENT so
/// an id is never given twice, even after the oldest rows are removed) and the webhook's cursor in
/// `pushgate_meta` (`events_posted`). Its own two connections (one writes, one reads) beside the
/// queue's, in WAL mode with a busy timeout: the queue's writer waits for an event batch's short
/// transaction as for a checkpoint, never fails on it.
public final class SQLiteEventStore: EventStore, @unchecked Sendable {
    // @unchecked: the connections are thread-safe (SQLITE_OPEN_FULLMUTEX); nothing else is mutable.
    let writer: SQLiteConnection
    let reader: SQLiteConnection
    public let maxStored: Int
    let logger: Logger

    static let schema = [
        "CREATE TABLE IF NOT EXISTS pushgate_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT NOT NULL, body TEXT NOT NULL)",
        "INSERT OR IGNORE INTO pushgate_meta (key, value) VALUES ('events_posted', 0)",
    ]

    private init(writer: SQLiteConnection, reader: SQLiteConnection, maxStored: Int, logger: Logger) {
        self.writer = writer
        self.reader = reader
        self.maxStored = max(1, maxStored)
        self.logger = logger
    }

    /// Opens the events of the queue file at `path` (the queue opened it first: the file exists, 0600).
    public static func open(path: String, maxStored: Int, logger: Logger = Logger(label: "pushgate.events.sqlite")) async throws
        -> SQLiteEventStore
    {
        let writer = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        let reader: SQLiteConnection
        do {
            _ = try await writer.query("PRAGMA busy_timeout = 30000")
            _ = try await writer.query("PRAGMA journal_mode = WAL")
            for sql in schema { _ = try await writer.query(sql) }
            reader = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
            _ = try await reader.query("PRAGMA busy_timeout = 30000")
        } catch {
            try? await writer.close()
            throw error
        }
        return SQLiteEventStore(writer: writer, reader: reader, maxStored: maxStored, logger: logger)
    }

    public func append(_ events: [PushEvent]) async throws -> (stored: [StoredEvent], removedUnposted: Int) {
        guard !events.isEmpty else { return ([], 0) }
        _ = try await writer.query("BEGIN IMMEDIATE")
        do {
            let last =
                try await writer.query("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) AS s")
                .first?.column("s")?.integer ?? 0
            var seq = Int64(last)
            var stored: [StoredEvent] = []
            stored.reserveCapacity(events.count)
            for chunk in stride(from: 0, to: events.count, by: 500) {
                let part = events[chunk..<min(events.count, chunk + 500)]
                var binds: [SQLiteData] = []
                binds.reserveCapacity(part.count * 3)
                for e in part {
                    seq += 1
                    let s = StoredEvent(seq: seq, app: e.app, body: e.body)
                    stored.append(s)
                    binds += [.integer(Int(seq)), .text(s.app), .text(s.body)]
                }
                let marks = Array(repeating: "(?, ?, ?)", count: part.count).joined(separator: ", ")
                _ = try await writer.query("INSERT INTO events (seq, app, body) VALUES \(marks)", binds)
            }
            var removed = 0
            let cut = seq - Int64(maxStored)
            if cut > 0 {
                let posted =
                    try await writer.query("SELECT value FROM pushgate_meta WHERE key = 'events_posted'").first?.column("value")?.integer ?? 0
                removed =
                    try await writer.query(
                        "SELECT count(*) AS n FROM events WHERE seq <= ? AND seq > ?", [.integer(Int(cut)), .integer(posted)]
                    ).first?.column("n")?.integer ?? 0
                _ = try await writer.query("DELETE FROM events WHERE seq <= ?", [.integer(Int(cut))])
            }
            _ = try await writer.query("COMMIT")
            return (stored, removed)
        } catch {
            _ = try? await writer.query("ROLLBACK")
            throw error
        }
    }

    public func events(after: Int64, app: String?, limit: Int) async throws -> [StoredEvent] {
        let rows: [SQLiteRow]
        if let app {
            rows = try await reader.query(
                "SELECT seq, app, body FROM events WHERE seq > ? AND app = ? ORDER BY seq LIMIT ?",
                [.integer(Int(after)), .text(app), .integer(max(0, limit))])
        } else {
            rows = try await reader.query(
                "SELECT seq, app, body FROM events WHERE seq > ? ORDER BY seq LIMIT ?", [.integer(Int(after)), .integer(max(0, limit))])
        }
        return rows.compactMap { r in
            guard let seq = r.column("seq")?.integer, let app = r.column("app")?.string, let body = r.column("body")?.string else { return nil }
            return StoredEvent(seq: Int64(seq), app: app, body: body)
        }
    }

    public func postedSeq() async throws -> Int64 {
        Int64(try await reader.query("SELECT value FROM pushgate_meta WHERE key = 'events_posted'").first?.column("value")?.integer ?? 0)
    }

    public func setPosted(_ seq: Int64) async throws {
        _ = try await writer.query(
            "UPDATE pushgate_meta SET value = ? WHERE key = 'events_posted' AND value < ?", [.integer(Int(seq)), .integer(Int(seq))])
    }

    public func lastSeq() async throws -> Int64 {
        Int64(
            try await reader.query("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) AS s").first?.column("s")?
                .integer ?? 0)
    }

    public func close() async {
        try? await writer.close()
        try? await reader.close()
    }
}

/// The delivery events in the PostgreSQL queue database: table `pushgate_events` (`seq` from a
/// sequence), the webhook's cursor in `pushgate_meta` (`events_posted`). Gateways sharing the
/// database share the events and the webhook cursor (`setPosted` never moves it back): with several
/// gateways posting, a batch may be posted more than once (receivers dedupe by `id`).
/// Ids are taken in insert order by an advisory lock, so a reader never sees a later id committed
/// before an earlier one (resuming from an id skips nothing).
public final class PostgresEventStore: EventStore {
    let client: PostgresClient
    private let runTask: Task<Void, Never>
    public let maxStored: Int
    let logger: Logger

    static let schema = [
        "CREATE TABLE IF NOT EXISTS pushgate_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        "CREATE SEQUENCE IF NOT EXISTS pushgate_event_seq",
        "CREATE TABLE IF NOT EXISTS pushgate_events (seq BIGINT PRIMARY KEY, app TEXT NOT NULL, body TEXT NOT NULL)",
        "INSERT INTO pushgate_meta (key, value) VALUES ('events_posted', 0) ON CONFLICT (key) DO NOTHING",
    ]

    private init(client: PostgresClient, runTask: Task<Void, Never>, maxStored: Int, logger: Logger) {
        self.client = client
        self.runTask = runTask
        self.maxStored = max(1, maxStored)
        self.logger = logger
    }

    public static func open(url: String, maxStored: Int, logger: Logger = Logger(label: "pushgate.events.postgres")) async throws
        -> PostgresEventStore
    {
        let client = PostgresClient(configuration: try PostgresBackend.configuration(url: url), backgroundLogger: logger)
        let task = Task { await client.run() }
        do {
            try await client.withTransaction(logger: logger) { conn in
                try await conn.query("SELECT pg_advisory_xact_lock(7270502)", logger: logger)
                for sql in schema { try await conn.query(PostgresQuery(unsafeSQL: sql), logger: logger) }
            }
        } catch {
            task.cancel()
            throw error
        }
        return PostgresEventStore(client: client, runTask: task, maxStored: maxStored, logger: logger)
    }

    public func append(_ events: [PushEvent]) async throws -> (stored: [StoredEvent], removedUnposted: Int) {
        guard !events.isEmpty else { return ([], 0) }
        let max = Int64(maxStored)
        return try await client.withTransaction(logger: logger) { conn in
            // One writer at a time: ids become visible in order.
            try await conn.query("SELECT pg_advisory_xact_lock(7270503)", logger: logger)
            // Ids taken first, then given in record order (an event never gets a lower id than one recorded before it).
            var seqs: [Int64] = []
            seqs.reserveCapacity(events.count)
            for try await v in try await conn.query(
                "SELECT nextval('pushgate_event_seq') FROM generate_series(1, \(Int64(events.count)))", logger: logger
            ).decode(Int64.self) {
                seqs.append(v)
            }
            seqs.sort()
            guard seqs.count == events.count else { throw QueueStoreError("the event sequence gave \(seqs.count) ids for \(events.count) events") }
            let stored = zip(seqs, events).map { StoredEvent(seq: $0, app: $1.app, body: $1.body) }
            _ = try await conn.query(
                "INSERT INTO pushgate_events (seq, app, body) SELECT * FROM unnest(\(seqs)::bigint[], \(stored.map(\.app))::text[], \(stored.map(\.body))::text[])",
                logger: logger)
            var newest: Int64 = 0
            for try await s in try await conn.query("SELECT COALESCE(max(seq), 0) FROM pushgate_events", logger: logger).decode(Int64.self) {
                newest = s
            }
            var removed = 0
            let cut = newest - max
            if cut > 0 {
                var posted: Int64 = 0
                for try await p in try await conn.query("SELECT value FROM pushgate_meta WHERE key = 'events_posted'", logger: logger).decode(
                    Int64.self)
                {
                    posted = p
                }
                for try await n in try await conn.query(
                    "WITH d AS (DELETE FROM pushgate_events WHERE seq <= \(cut) RETURNING seq) SELECT count(*) FROM d WHERE seq > \(posted)",
                    logger: logger
                ).decode(Int64.self) {
                    removed = Int(n)
                }
            }
            return (stored, removed)
        }
    }

    public func events(after: Int64, app: String?, limit: Int) async throws -> [StoredEvent] {
        let n = Int64(Swift.max(0, limit))
        let rows: PostgresRowSequence
        if let app {
            rows = try await client.query(
                "SELECT seq, app, body FROM pushgate_events WHERE seq > \(after) AND app = \(app) ORDER BY seq LIMIT \(n)", logger: logger)
        } else {
            rows = try await client.query("SELECT seq, app, body FROM pushgate_events WHERE seq > \(after) ORDER BY seq LIMIT \(n)", logger: logger)
        }
        var out: [StoredEvent] = []
        for try await (seq, app, body) in rows.decode((Int64, String, String).self) { out.append(StoredEvent(seq: seq, app: app, body: body)) }
        return out
    }

    public func postedSeq() async throws -> Int64 {
        var v: Int64 = 0
        for try await p in try await client.query("SELECT value FROM pushgate_meta WHERE key = 'events_posted'", logger: logger).decode(Int64.self) {
            v = p
        }
        return v
    }

    public func setPosted(_ seq: Int64) async throws {
        _ = try await client.query("UPDATE pushgate_meta SET value = \(seq) WHERE key = 'events_posted' AND value < \(seq)", logger: logger)
    }

    public func lastSeq() async throws -> Int64 {
        var v: Int64 = 0
        for try await s in try await client.query("SELECT COALESCE(max(seq), 0) FROM pushgate_events", logger: logger).decode(Int64.self) { v = s }
        return v
    }

    public func close() async { runTask.cancel() }

    public var isShared: Bool { true }
}
