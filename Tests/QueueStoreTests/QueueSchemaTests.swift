import Foundation
import Logging
import PushDispatch
import PushgateCore
import SQLiteNIO
import XCTest

@testable import QueueStore

/// Both SQL stores are made from one schema description; it must stay what version 1 created plus
/// version 2's `notifications.app` (`CREATE … IF NOT EXISTS` on an existing store must not meet
/// different tables), and a version-1 store is migrated in place.
final class QueueSchemaTests: XCTestCase {
    static let oldSQLite: [String] = [
        "CREATE TABLE IF NOT EXISTS pushgate_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "INSERT OR IGNORE INTO pushgate_meta (key, value) VALUES ('schema_version', 1), ('next_job_id', 0), ('next_notif_id', 0)",
        """
        CREATE TABLE IF NOT EXISTS notifications (
          id INTEGER PRIMARY KEY, notif_id TEXT NOT NULL, platform INTEGER NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL)
        """,
        "CREATE INDEX IF NOT EXISTS notifications_notif_id ON notifications (notif_id)",
        "CREATE INDEX IF NOT EXISTS notifications_created ON notifications (created_at)",
        """
        CREATE TABLE IF NOT EXISTS jobs (
          id INTEGER PRIMARY KEY, notif_row INTEGER NOT NULL, platform INTEGER NOT NULL,
          target_kind INTEGER NOT NULL, target TEXT NOT NULL, target_keys TEXT, message_id TEXT NOT NULL,
          attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL, cred_retry INTEGER NOT NULL DEFAULT 0,
          not_before REAL NOT NULL, enqueued_at REAL NOT NULL, last_error TEXT,
          state INTEGER NOT NULL DEFAULT 0, provider_id TEXT, finished_at REAL, lease_owner TEXT)
        """,
        "CREATE INDEX IF NOT EXISTS jobs_free ON jobs (platform, not_before, id) WHERE state = 0 AND lease_owner IS NULL",
        "CREATE INDEX IF NOT EXISTS jobs_owner ON jobs (lease_owner) WHERE state = 0 AND lease_owner IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_notif_row ON jobs (notif_row)",
        "CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE state <> 0",
        "CREATE TABLE IF NOT EXISTS owners (owner TEXT PRIMARY KEY, lease_until REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS stats (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    ]
    static let oldPostgres: [String] = [
        "CREATE TABLE IF NOT EXISTS pushgate_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        "CREATE SEQUENCE IF NOT EXISTS pushgate_notif_seq",
        "CREATE SEQUENCE IF NOT EXISTS pushgate_job_seq",
        """
        CREATE TABLE IF NOT EXISTS pushgate_notifications (
          id BIGINT PRIMARY KEY, notif_id TEXT NOT NULL, platform BIGINT NOT NULL, body TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)
        """,
        "CREATE INDEX IF NOT EXISTS pushgate_notifications_notif_id ON pushgate_notifications (notif_id)",
        "CREATE INDEX IF NOT EXISTS pushgate_notifications_created ON pushgate_notifications (created_at)",
        """
        CREATE TABLE IF NOT EXISTS pushgate_jobs (
          id BIGINT PRIMARY KEY, notif_row BIGINT NOT NULL, platform BIGINT NOT NULL,
          target_kind BIGINT NOT NULL, target TEXT NOT NULL, target_keys TEXT, message_id TEXT NOT NULL,
          attempts BIGINT NOT NULL, max_attempts BIGINT NOT NULL, cred_retry BIGINT NOT NULL DEFAULT 0,
          not_before DOUBLE PRECISION NOT NULL, enqueued_at DOUBLE PRECISION NOT NULL, last_error TEXT,
          state BIGINT NOT NULL DEFAULT 0, provider_id TEXT, finished_at DOUBLE PRECISION, lease_owner TEXT)
        """,
        "CREATE INDEX IF NOT EXISTS pushgate_jobs_free ON pushgate_jobs (platform, not_before, id) WHERE state = 0 AND lease_owner IS NULL",
        "CREATE INDEX IF NOT EXISTS pushgate_jobs_owner ON pushgate_jobs (lease_owner) WHERE state = 0 AND lease_owner IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS pushgate_jobs_notif_row ON pushgate_jobs (notif_row)",
        "CREATE INDEX IF NOT EXISTS pushgate_jobs_finished ON pushgate_jobs (finished_at) WHERE state <> 0",
        "CREATE TABLE IF NOT EXISTS pushgate_owners (owner TEXT PRIMARY KEY, lease_until DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE IF NOT EXISTS pushgate_stats (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    ]

    func normalized(_ s: [String]) -> [String] {
        s.map { $0.split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ") }
    }

    /// Version 2 = version 1 + `notifications.app` (the rows of a version-1 store belong to the default app).
    static func version2(_ v1: [String]) -> [String] {
        v1.map { sql in
            var s = sql.replacingOccurrences(of: "('schema_version', 1)", with: "('schema_version', 2)")
            if s.contains("NOTIFICATIONS (") || s.contains("notifications (\n") {
                s = s.replacingOccurrences(of: "NOT NULL)\n", with: "NOT NULL,\n  app TEXT NOT NULL DEFAULT 'default')\n")
                if s.hasSuffix("NOT NULL)") { s = String(s.dropLast()) + ",\n  app TEXT NOT NULL DEFAULT 'default')" }
            }
            return s
        }
    }

    /// Version 3 = version 2 + `notifications.fallback` (nullable: no fallback was sent) + the dedup,
    /// coalescing-window and idempotency tables (new tables: a version-2 store gets them from
    /// `CREATE TABLE IF NOT EXISTS`).
    static func version3(_ v1: [String], prefix: String, integer: String, real: String) -> [String] {
        version2(v1).map {
            $0.replacingOccurrences(of: "('schema_version', 2)", with: "('schema_version', 3)")
                .replacingOccurrences(of: "app TEXT NOT NULL DEFAULT 'default')", with: "app TEXT NOT NULL DEFAULT 'default', fallback TEXT)")
        } + [
            "CREATE TABLE IF NOT EXISTS \(prefix)dedup (k TEXT PRIMARY KEY, hold_until \(real) NOT NULL)",
            "CREATE INDEX IF NOT EXISTS \(prefix)dedup_until ON \(prefix)dedup (hold_until)",
            """
            CREATE TABLE IF NOT EXISTS \(prefix)coalesce_windows (
              k TEXT PRIMARY KEY, window_end \(real) NOT NULL, held_job \(integer), seconds \(real) NOT NULL, expires \(real) NOT NULL)
            """,
            "CREATE INDEX IF NOT EXISTS \(prefix)coalesce_windows_expires ON \(prefix)coalesce_windows (expires)",
            """
            CREATE TABLE IF NOT EXISTS \(prefix)idempotency (
              app TEXT NOT NULL, k TEXT NOT NULL, body_hash TEXT NOT NULL, status \(integer), body TEXT, request_id TEXT NOT NULL DEFAULT '',
              notif_ids TEXT NOT NULL DEFAULT '', claimed_at \(real) NOT NULL, expires \(real) NOT NULL, PRIMARY KEY (app, k))
            """,
            "CREATE INDEX IF NOT EXISTS \(prefix)idempotency_expires ON \(prefix)idempotency (expires)",
        ]
    }

    /// Version 4 (SQLite 6) = version 3 + `notifications.traceparent` (nullable: not traced).
    static func version4(_ v3: [String]) -> [String] {
        v3.map { $0.replacingOccurrences(of: "fallback TEXT)", with: "fallback TEXT, traceparent TEXT)") }
    }

    static let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    /// Every target kind survives the store: a broadcast channel comes back a channel (kind 3), not a token.
    func testTargetCodecRoundTripsEveryKind() {
        let targets: [PushTarget] = [
            .token("abc"), .topic, .subscription(WebPushSubscription(endpoint: "https://push.example/x", keys: nil)), .channel("dHN0LWNobmw="),
        ]
        for t in targets {
            let e = TargetCodec.encode(t)
            XCTAssertEqual(TargetCodec.decode(kind: e.kind, value: e.value, keys: e.keys), t)
        }
        XCTAssertEqual(TargetCodec.encode(.channel("dHN0LWNobmw=")).kind, 3)
    }

    /// The leased jobs' index is keyed by job id (`jobs_leased`), no longer by owner (`jobs_owner`,
    /// dropped when an older store opens): same tables, same columns.
    static func leasedByID(_ v: [String], prefix: String) -> [String] {
        v.flatMap { sql -> [String] in
            guard sql.hasPrefix("CREATE INDEX IF NOT EXISTS \(prefix)jobs_owner ") else { return [sql] }
            return [
                "DROP INDEX IF EXISTS \(prefix)jobs_owner",
                "CREATE INDEX IF NOT EXISTS \(prefix)jobs_leased ON \(prefix)jobs (id) WHERE state = 0 AND lease_owner IS NOT NULL",
            ]
        }
    }

    func testSchemaIsVersionOnePlusTheAddedColumnsAndTheGuardTablesForBothStores() {
        // SQLite, version 4: no `jobs_notif_row` index (a notification's jobs are an id range there);
        // version 5: the same tables (narrow outcome rows; version 7's run column and its index are
        // added where the store opens, `WrittenOnce.runColumn`), and no
        // `jobs_finished` index (dropped where it exists: the prune reads jobs by id range).
        XCTAssertEqual(
            normalized(QueueSchema.sqlite.statements),
            normalized(
                Self.leasedByID(Self.version4(Self.version3(Self.oldSQLite, prefix: "", integer: "INTEGER", real: "REAL")), prefix: "")
                    .filter { !$0.contains("jobs_notif_row") }
                    .map { $0.hasPrefix("CREATE INDEX IF NOT EXISTS jobs_finished ") ? "DROP INDEX IF EXISTS jobs_finished" : $0 }
                    .map { $0.replacingOccurrences(of: "('schema_version', 3)", with: "('schema_version', 7)") }))
        XCTAssertEqual(QueueSchema.sqliteVersion, 7)
        XCTAssertEqual(
            WrittenOnce.addedColumns.map { "\($0.table).\($0.column)" },
            ["notifications.first_job", "notifications.job_count", "notifications.jobs_data"])
        XCTAssertEqual(
            normalized(QueueSchema.postgres.statements),
            normalized(
                Self.leasedByID(
                    Self.version4(Self.version3(Self.oldPostgres, prefix: "pushgate_", integer: "BIGINT", real: "DOUBLE PRECISION")),
                    prefix: "pushgate_")))
        XCTAssertEqual(QueueSchema.version, 4)
        XCTAssertEqual(
            QueueSchema.addedColumns.map { "\($0.table).\($0.column)" }, ["notifications.app", "notifications.fallback", "notifications.traceparent"])
        XCTAssertEqual(
            QueueSchema.postgres.addColumn(QueueSchema.addedColumns[1], ifNotExists: true),
            "ALTER TABLE pushgate_notifications ADD COLUMN IF NOT EXISTS fallback TEXT")
    }

    /// A store written by version 2 (no fallback column) opens: its queued job is handed out, its
    /// status reads without a fallback, and a notification sent as its fallback keeps the sizes.
    func testVersionTwoSQLiteStoreIsMigrated() async throws {
        let path = tempDir() + "/v2.sqlite"
        let conn = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        for sql in Self.version2(Self.oldSQLite) { _ = try await conn.query(sql) }
        var note = PushNotification(platform: .ios, tokens: ["tok0"])
        note.message = "from v2"
        let body = String(decoding: try JSONEncoder().encode(note), as: UTF8.self)
        _ = try await conn.query(
            "INSERT INTO notifications (id, notif_id, platform, body, created_at, app) VALUES (1, 'old-2', 1, ?, 0, 'chat')", [.text(body)])
        _ = try await conn.query(
            """
            INSERT INTO jobs (id, notif_row, platform, target_kind, target, message_id, attempts, max_attempts, not_before, enqueued_at)
            VALUES (1, 1, 1, 0, 'tok0', 'm-1', 0, 3, 0, 0)
            """)
        _ = try await conn.query("UPDATE pushgate_meta SET value = 1 WHERE key IN ('next_job_id', 'next_notif_id')")
        try await conn.close()

        let q = try await SQLiteQueue.open(path: path, options: options())
        let old = try await take(q)
        XCTAssertEqual(old.accepted.app, "chat")
        XCTAssertEqual(old.accepted.notification.message, "from v2")
        XCTAssertNil(old.accepted.traceParent, "a row of an older store has no trace")
        var fallback = PushNotification(platform: .ios, tokens: ["tok1"])
        fallback.contentAvailable = true
        let info = FallbackInfo(payloadBytes: 5200, limit: 4096, fallbackBytes: 120)
        let a = AcceptedNotification(
            notifID: "fb-1", notification: fallback, prepared: TestPrepared(), fallback: info, traceParent: Self.traceParent)
        try await q.enqueue([DeliveryJob(id: 0, messageID: "m-2", target: .token("tok1"), accepted: a, maxAttempts: 3, now: Date())])
        await q.complete(old, outcome: .delivered(providerID: "x"))
        await q.flush()
        await q.abandonForTesting()

        let again = try await SQLiteQueue.open(path: path, options: options())
        let fb = try await take(again)
        XCTAssertEqual(fb.accepted.notification.contentAvailable, true, "the fallback is what is stored")
        XCTAssertEqual(fb.accepted.traceParent, Self.traceParent, "the ingest span's context is read back after a restart")
        let status = try await again.deliveryStatus(notifID: "fb-1")
        XCTAssertEqual(status?.first?.fallback, info)
        let oldStatus = try await again.deliveryStatus(notifID: "old-2")
        XCTAssertNil(oldStatus?.first?.fallback)
        XCTAssertEqual(oldStatus?.first?.state, .delivered)
        await again.complete(fb, outcome: .delivered(providerID: "y"))
        await again.close()

        let check = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        let v = try await check.query("SELECT value FROM pushgate_meta WHERE key = 'schema_version'")
        XCTAssertEqual(v.first?.column("value")?.integer, 7)
        let indexes = try await check.query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name IN ('jobs_owner', 'jobs_leased', 'jobs_notif_row')")
        XCTAssertEqual(
            indexes.compactMap { $0.column("name")?.string }, ["jobs_leased"],
            "the owner-keyed index of the older store is replaced, and version 4 has no index by notification")
        // The older notification's jobs are found by id range from version 4 on.
        let range = try await check.query("SELECT first_job, job_count FROM notifications WHERE notif_id = 'old-2'").first
        XCTAssertEqual(range?.column("first_job")?.integer, 1)
        XCTAssertEqual(range?.column("job_count")?.integer, 1)
        try await check.close()
    }

    /// A store written by version 1 (no app column) opens: its queued job is handed out for the default
    /// app, and jobs of other apps keep their app across a reopen.
    func testVersionOneSQLiteStoreIsMigrated() async throws {
        let path = tempDir() + "/v1.sqlite"
        let conn = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        for sql in Self.oldSQLite { _ = try await conn.query(sql) }
        var note = PushNotification(platform: .ios, tokens: ["tok0"])
        note.message = "from v1"
        let body = String(decoding: try JSONEncoder().encode(note), as: UTF8.self)
        _ = try await conn.query(
            "INSERT INTO notifications (id, notif_id, platform, body, created_at) VALUES (1, 'old-1', 1, ?, 0)", [.text(body)])
        _ = try await conn.query(
            """
            INSERT INTO jobs (id, notif_row, platform, target_kind, target, message_id, attempts, max_attempts, not_before, enqueued_at)
            VALUES (1, 1, 1, 0, 'tok0', 'm-1', 0, 3, 0, 0)
            """)
        _ = try await conn.query("UPDATE pushgate_meta SET value = 1 WHERE key IN ('next_job_id', 'next_notif_id')")
        try await conn.close()

        let q = try await SQLiteQueue.open(path: path, options: options())
        let old = try await take(q)
        XCTAssertEqual(old.accepted.app, AppID.defaultApp)
        XCTAssertEqual(old.accepted.notification.message, "from v1")
        let a = AcceptedNotification(notifID: "chat-1", notification: note, prepared: TestPrepared(), app: "chat")
        try await q.enqueue([DeliveryJob(id: 0, messageID: "m-2", target: .token("tok1"), accepted: a, maxAttempts: 3, now: Date())])
        await q.complete(old, outcome: .delivered(providerID: "x"))
        await q.flush()
        await q.abandonForTesting()

        let again = try await SQLiteQueue.open(path: path, options: options())
        let chat = try await take(again)
        XCTAssertEqual(chat.accepted.app, "chat", "the app is stored with the notification")
        let status = try await again.deliveryStatus(notifID: "chat-1")
        XCTAssertEqual(status?.first?.app, "chat")
        let oldStatus = try await again.deliveryStatus(notifID: "old-1")
        XCTAssertEqual(oldStatus?.first?.app, AppID.defaultApp)
        XCTAssertEqual(oldStatus?.first?.state, .delivered)
        await again.complete(chat, outcome: .delivered(providerID: "y"))
        await again.close()
    }
}
