import PushDispatch
import PushgateCore

/// The one schema of both SQL stores: the same tables, columns and indexes; only the table prefix,
/// the column types and how ids are allocated (SQLite: counters in `pushgate_meta`; PostgreSQL:
/// sequences) differ. Column `state` holds `DeliveryState.Code`.
struct QueueSchema: Sendable {
    /// Prefix of the tables other than `pushgate_meta` (PostgreSQL shares a database with others).
    var prefix: String
    var integer: String
    var real: String
    /// Statements run before the tables are made (id allocation).
    var idAllocation: [String]
    /// Jobs indexed by their notification (`jobs_notif_row`). The SQLite store finds a notification's
    /// jobs by id range instead (`notifications.first_job`, `job_count`: the job ids of one
    /// notification are consecutive there), and has no such index since version 4.
    var jobsByNotification = true
    /// Finished jobs indexed by their finish time (`jobs_finished`, for the prune passes). The SQLite
    /// store prunes by id range instead (`SQLiteBackend.prune`, `finishedCutoff`): the index was a
    /// fifth of its WAL (an entry per outcome, its leaf and interior pages written again at every
    /// commit, docs/benchmarks.md) and is dropped from stores that have it.
    var finishedIndex = true

    /// 2: `notifications.app` (the app a notification was accepted for).
    /// 3: tables `dedup`, `coalesce_windows`, `idempotency`; job states 3 (duplicate) and 4 (coalesced).
    /// 3: `notifications.fallback` (the sizes when a notification was sent as its fallback).
    /// 4: `notifications.traceparent` (the request's ingest span, W3C Trace Context).
    static let version = 4
    /// The SQLite store's version (PostgreSQL stays at `version`):
    /// 4: a job row is written once, at its outcome (`WrittenOnce`): `notifications.first_job`,
    /// `job_count` and `jobs_data`, table `open_notifs`; a notification's row id is its first job's
    /// id; no `jobs_notif_row` index.
    /// 5: the outcome row of a job that had none is narrow (`SQLiteBackend.makeUpsertOutcomes`):
    /// `target_kind` -1 (-2: its provider id is its message id), its target, message id and times
    /// left in `jobs_data`.
    /// 6: `notifications.traceparent` (the request's ingest span, W3C Trace Context).
    /// 7: run rows (`jobs.run_first`, index `jobs_runs`): one row for consecutive jobs delivered
    /// together (`WrittenOnce`).
    static let sqliteVersion = 7

    static let sqlite = QueueSchema(
        prefix: "", integer: "INTEGER", real: "REAL",
        idAllocation: [
            "INSERT OR IGNORE INTO pushgate_meta (key, value) VALUES ('schema_version', \(sqliteVersion)), ('next_job_id', 0), ('next_notif_id', 0)"
        ], jobsByNotification: false, finishedIndex: false)
    static let postgres = QueueSchema(
        prefix: "pushgate_", integer: "BIGINT", real: "DOUBLE PRECISION",
        idAllocation: [
            "CREATE SEQUENCE IF NOT EXISTS pushgate_notif_seq",
            "CREATE SEQUENCE IF NOT EXISTS pushgate_job_seq",
        ])

    var notifications: String { prefix + "notifications" }
    var jobs: String { prefix + "jobs" }
    var owners: String { prefix + "owners" }
    var stats: String { prefix + "stats" }
    var dedup: String { prefix + "dedup" }
    var windows: String { prefix + "coalesce_windows" }
    var idempotency: String { prefix + "idempotency" }

    /// `CREATE … IF NOT EXISTS` statements, in order.
    var statements: [String] {
        let (i, r, n, j) = (integer, real, notifications, jobs)
        let pending = DeliveryState.Code.pending.rawValue
        return ["CREATE TABLE IF NOT EXISTS pushgate_meta (key TEXT PRIMARY KEY, value \(i) NOT NULL)"] + idAllocation + [
            """
            CREATE TABLE IF NOT EXISTS \(n) (
              id \(i) PRIMARY KEY, notif_id TEXT NOT NULL, platform \(i) NOT NULL, body TEXT NOT NULL, created_at \(r) NOT NULL,
              app TEXT NOT NULL DEFAULT '\(AppID.defaultApp)', fallback TEXT, traceparent TEXT)
            """,
            "CREATE INDEX IF NOT EXISTS \(n)_notif_id ON \(n) (notif_id)",
            "CREATE INDEX IF NOT EXISTS \(n)_created ON \(n) (created_at)",
            """
            CREATE TABLE IF NOT EXISTS \(j) (
              id \(i) PRIMARY KEY, notif_row \(i) NOT NULL, platform \(i) NOT NULL,
              target_kind \(i) NOT NULL, target TEXT NOT NULL, target_keys TEXT, message_id TEXT NOT NULL,
              attempts \(i) NOT NULL, max_attempts \(i) NOT NULL, cred_retry \(i) NOT NULL DEFAULT 0,
              not_before \(r) NOT NULL, enqueued_at \(r) NOT NULL, last_error TEXT,
              state \(i) NOT NULL DEFAULT \(pending), provider_id TEXT, finished_at \(r), lease_owner TEXT)
            """,
            "CREATE INDEX IF NOT EXISTS \(j)_free ON \(j) (platform, not_before, id) WHERE state = \(pending) AND lease_owner IS NULL",
            // Leased pending jobs, keyed by id (a new job's entry is appended, a completion removes it
            // by an integer seek): keyed by the 36-character owner it cost 10-20 % more SQLite time
            // per job (bench/sqlite-statement-cost.py). Queries by owner read the leased rows (at most `max_held` per
            // process). Version 3 and older stores had it keyed by owner as `jobs_owner`.
            "DROP INDEX IF EXISTS \(j)_owner",
            "CREATE INDEX IF NOT EXISTS \(j)_leased ON \(j) (id) WHERE state = \(pending) AND lease_owner IS NOT NULL",
        ] + (jobsByNotification ? ["CREATE INDEX IF NOT EXISTS \(j)_notif_row ON \(j) (notif_row)"] : []) + [
            finishedIndex
                ? "CREATE INDEX IF NOT EXISTS \(j)_finished ON \(j) (finished_at) WHERE state <> \(pending)"
                : "DROP INDEX IF EXISTS \(j)_finished",
            "CREATE TABLE IF NOT EXISTS \(owners) (owner TEXT PRIMARY KEY, lease_until \(r) NOT NULL)",
            "CREATE TABLE IF NOT EXISTS \(stats) (key TEXT PRIMARY KEY, value \(i) NOT NULL)",
            // `dedup_key` claims: k = SHA-256 of (app, platform, target, dedup_key), held until `hold_until`.
            "CREATE TABLE IF NOT EXISTS \(dedup) (k TEXT PRIMARY KEY, hold_until \(r) NOT NULL)",
            "CREATE INDEX IF NOT EXISTS \(dedup)_until ON \(dedup) (hold_until)",
            // Coalescing windows: k = SHA-256 of (app, platform, target, collapse_id) (`Coalescing`).
            """
            CREATE TABLE IF NOT EXISTS \(windows) (
              k TEXT PRIMARY KEY, window_end \(r) NOT NULL, held_job \(i), seconds \(r) NOT NULL, expires \(r) NOT NULL)
            """,
            "CREATE INDEX IF NOT EXISTS \(windows)_expires ON \(windows) (expires)",
            // Idempotency-Key answers per app (status and body NULL while the first request is processed).
            """
            CREATE TABLE IF NOT EXISTS \(idempotency) (
              app TEXT NOT NULL, k TEXT NOT NULL, body_hash TEXT NOT NULL, status \(i), body TEXT, request_id TEXT NOT NULL DEFAULT '',
              notif_ids TEXT NOT NULL DEFAULT '', claimed_at \(r) NOT NULL, expires \(r) NOT NULL, PRIMARY KEY (app, k))
            """,
            "CREATE INDEX IF NOT EXISTS \(idempotency)_expires ON \(idempotency) (expires)",
        ]
    }

    /// Columns added to existing tables since version 1, in order (`statements` makes a table only
    /// when it is missing): each backend adds those an older store lacks when it opens it.
    /// 2: `notifications.app`, whose rows belong to the default app; 3: `notifications.fallback`,
    /// `{"payload_bytes","limit","fallback_bytes"}` when the notification was sent as its fallback;
    /// 4 (SQLite 6): `notifications.traceparent`, the W3C `traceparent` of the request's ingest span
    /// (NULL: not traced), so a delivery sent later, after a restart or by another gateway joins its trace.
    static let addedColumns: [(table: String, column: String, definition: String)] = [
        ("notifications", "app", "TEXT NOT NULL DEFAULT '\(AppID.defaultApp)'"),
        ("notifications", "fallback", "TEXT"),
        ("notifications", "traceparent", "TEXT"),
    ]

    /// The `ALTER TABLE` adding one of `addedColumns` (`ifNotExists`: PostgreSQL's guard).
    func addColumn(_ c: (table: String, column: String, definition: String), ifNotExists: Bool = false) -> String {
        "ALTER TABLE \(prefix + c.table) ADD COLUMN \(ifNotExists ? "IF NOT EXISTS " : "")\(c.column) \(c.definition)"
    }

    /// The columns a leased job is read from (`StoredJob`).
    static let leasedColumns =
        "id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, cred_retry, not_before, enqueued_at, last_error"
}
