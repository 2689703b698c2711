import PushDispatch
import PushgateCore

/// The SQLite store's written-once layout (schema version 4), used by a process alone on its store
/// (`SQLiteBackend.exclusive`): a queued job has no row of its own until it is retried or over.
///
/// - **Acceptance** writes the notification row only. It carries its jobs' fields in `jobs_data`
///   (`encode`), and a row in `open_notifs` counts its jobs without a row (`open_jobs`) for the
///   process that holds them (`owner`). A notification's row id is its first job's id, and its
///   jobs' ids are consecutive (`first_job`, `job_count`).
/// - **A retry or an outcome** inserts the job's full row (a retried job's row is updated from then
///   on) and lowers `open_jobs`; at 0 the `open_notifs` row goes.
/// - **A pending job is derived, not stored**: a job of an open notification with no row
///   (`virtualJobs`). Status lookups and the backlog's read-back (`parkedJobs`) read them so.
/// - **Leases:** such jobs are leased to `open_notifs.owner`. When the owner stops (`release`), its
///   lease expires (`reclaimExpired`, a process sharing the store) or a process opens the store
///   alone after a crash (`start`), their rows are written (`materialize`), free, as before version 4.
///
/// A process sharing the store with another (no file lock) writes a row per job as PostgreSQL
/// does. Measured in docs/benchmarks.md ("Goal 1, the SQLite engine"): the per-job insert, update
/// and two index entries of the earlier layout were most of the SQLite engine's extra CPU.
enum WrittenOnce {
    /// Columns version 4 adds to `notifications`.
    static let addedColumns: [(table: String, column: String, definition: String)] = [
        ("notifications", "first_job", "INTEGER"),
        ("notifications", "job_count", "INTEGER NOT NULL DEFAULT 0"),
        ("notifications", "jobs_data", "TEXT"),
    ]

    static let tables = [
        "CREATE TABLE IF NOT EXISTS open_notifs (notif_row INTEGER PRIMARY KEY, job_count INTEGER NOT NULL, open_jobs INTEGER NOT NULL, owner TEXT NOT NULL)"
    ]

    /// Run once when a store older than version 4 opens (after `addedColumns`).
    static let migration = [
        // The older notifications' job ranges, from their rows (by `jobs_notif_row`, dropped next).
        """
        UPDATE notifications SET first_job = coalesce((SELECT min(id) FROM jobs WHERE notif_row = notifications.id), 0),
          job_count = coalesce((SELECT max(id) - min(id) + 1 FROM jobs WHERE notif_row = notifications.id), 0)
        WHERE first_job IS NULL
        """,
        "DROP INDEX IF EXISTS jobs_notif_row",
        // From now on a notification's row id is its first job's id: above every older notification's.
        """
        UPDATE pushgate_meta SET value = max(value, (SELECT max(value) FROM pushgate_meta WHERE key = 'next_notif_id'),
          coalesce((SELECT max(id) FROM notifications), 0)) WHERE key = 'next_job_id'
        """,
    ]

    /// The jobs without a row of the open notifications matching `condition` (on `o`, the
    /// `open_notifs` row; `n`, the notification; `n.id + j.key`, the job id), with the columns of
    /// `QueueSchema.leasedColumns`.
    static func virtualJobs(where condition: String) -> String {
        """
        SELECT n.id + j.key AS id, n.id AS notif_row, n.platform AS platform, j.value ->> 0 AS target_kind, j.value ->> 1 AS target,
          j.value ->> 2 AS target_keys, j.value ->> 3 AS message_id, j.value ->> 4 AS attempts, j.value ->> 5 AS max_attempts,
          0 AS cred_retry, n.created_at + (j.value ->> 6) AS not_before, n.created_at + (j.value ->> 7) AS enqueued_at, NULL AS last_error
        FROM open_notifs o JOIN notifications n ON n.id = o.notif_row, json_each(n.jobs_data) j
        WHERE j.type = 'array' AND (\(condition)) AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = n.id + j.key)
        """
    }

    /// Writes the rows of the jobs without one of the open notifications matching `condition`
    /// (free: no lease), then forgets those notifications' counters: the two statements, in order.
    static func materialize(where condition: String) -> (insert: String, forget: String) {
        (
            "INSERT INTO jobs (\(QueueSchema.leasedColumns)) \(virtualJobs(where: condition)) ON CONFLICT(id) DO NOTHING",
            "DELETE FROM open_notifs AS o WHERE \(condition)"
        )
    }

    /// `notifications.jobs_data`: a JSON array with one entry per job, in id order:
    /// `[kind, value, keys, message id, attempts, max attempts, not_before - created_at, enqueued_at - created_at]`
    /// for a job written without a row, `0` for one written as a row.
    ///
    /// Written by hand rather than with `JSONEncoder`: it runs for every accepted job, and the
    /// encoder's boxing of a heterogeneous array costs more than the rest of the insert.
    static func encode(_ jobs: [JobInsert], rowless: [Bool], createdAt: Double) -> String {
        var out = "["
        out.reserveCapacity(jobs.count * 120)
        for (k, j) in jobs.enumerated() {
            if k > 0 { out += "," }
            guard rowless[k] else {
                out += "0"
                continue
            }
            let t = TargetCodec.encode(j.target)
            out += "[\(t.kind),"
            appendString(t.value, to: &out)
            out += ","
            if let keys = t.keys { appendString(keys, to: &out) } else { out += "null" }
            out += ","
            appendString(j.messageID, to: &out)
            out += ",\(j.attempts),\(j.maxAttempts),\(number(j.notBefore - createdAt)),\(number(j.enqueuedAt - createdAt))]"
        }
        out += "]"
        return out
    }

    /// A finite double as JSON (Swift's shortest round-trip form is valid JSON); 0 otherwise.
    static func number(_ d: Double) -> String {
        d.isFinite ? (d == 0 ? "0" : "\(d)") : "0"
    }

    /// `s` as a JSON string.
    static func appendString(_ s: String, to out: inout String) {
        out += "\""
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out += s
        } else {
            for u in s.unicodeScalars {
                switch u {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                default:
                    if u.value < 0x20 {
                        let hex = String(u.value, radix: 16)
                        out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                    } else {
                        out.unicodeScalars.append(u)
                    }
                }
            }
        }
        out += "\""
    }
}
