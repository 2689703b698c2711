import XCTest

@testable import QueueStore

/// Both SQL stores are made from one schema description; it must stay what version 1 created
/// (`CREATE … IF NOT EXISTS` on an existing store must not meet different tables).
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

    func testSchemaIsVersionOneForBothStores() {
        XCTAssertEqual(normalized(QueueSchema.sqlite.statements), normalized(Self.oldSQLite))
        XCTAssertEqual(normalized(QueueSchema.postgres.statements), normalized(Self.oldPostgres))
    }
}
