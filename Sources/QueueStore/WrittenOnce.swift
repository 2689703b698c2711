import PushDispatch
import PushgateCore

/// The SQLite store's written-once layout (schema version 4), used by a process alone on its store
/// (`SQLiteBackend.exclusive`): a queued job has no row of its own until it is retried or over.
///
/// - **Acceptance** writes the notification row only. It carries its jobs' fields in `jobs_data`
///   (`encode`), and a row in `open_notifs` marks it open, its jobs leased to the process that
///   holds them (`owner`). A notification's row id is its first job's id, and its jobs' ids are
///   consecutive (`first_job`, `job_count`).
/// - **A retry or an outcome** inserts the job's full row (a retried job's row is updated from then
///   on: one upsert). A prune pass closes the notifications whose every job has a row (deletes
///   their `open_notifs` rows): nothing in the hot path counts.
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
        "CREATE TABLE IF NOT EXISTS open_notifs (notif_row INTEGER PRIMARY KEY, job_count INTEGER NOT NULL, owner TEXT NOT NULL)"
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
    /// (free: no lease), then deletes those notifications' `open_notifs` rows: the two statements, in order.
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
    /// Written by hand into bytes rather than with `JSONEncoder` or string interpolation: it runs for
    /// every accepted job, and either costs more than the rest of the insert.
    static func encode(_ jobs: [JobInsert], rowless: [Bool], createdAt: Double) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(jobs.count * 128 + 2)
        out.append(UInt8(ascii: "["))
        var numbers = Numbers()
        for (k, j) in jobs.enumerated() {
            if k > 0 { out.append(UInt8(ascii: ",")) }
            guard rowless[k] else {
                out.append(UInt8(ascii: "0"))
                continue
            }
            let t = TargetCodec.encode(j.target)
            out.append(UInt8(ascii: "["))
            appendInt(t.kind, to: &out)
            out.append(UInt8(ascii: ","))
            appendString(t.value, to: &out)
            out.append(UInt8(ascii: ","))
            if let keys = t.keys { appendString(keys, to: &out) } else { out += "null".utf8 }
            out.append(UInt8(ascii: ","))
            appendString(j.messageID, to: &out)
            out.append(UInt8(ascii: ","))
            appendInt(j.attempts, to: &out)
            out.append(UInt8(ascii: ","))
            appendInt(j.maxAttempts, to: &out)
            out.append(UInt8(ascii: ","))
            numbers.append(j.notBefore - createdAt, to: &out)
            out.append(UInt8(ascii: ","))
            numbers.append(j.enqueuedAt - createdAt, to: &out)
            out.append(UInt8(ascii: "]"))
        }
        out.append(UInt8(ascii: "]"))
        return String(decoding: out, as: UTF8.self)
    }

    static func appendInt(_ i: Int, to out: inout [UInt8]) {
        if (0..<10).contains(i) { out.append(UInt8(ascii: "0") + UInt8(i)) } else { out += String(i).utf8 }
    }

    /// Finite doubles as JSON (Swift's shortest round-trip form is valid JSON), anything else as 0.
    /// The jobs of one notification share their times: the last number's text is reused, not
    /// formatted again for each job.
    struct Numbers {
        private var last: (value: Double, text: [UInt8]) = (0, Array("0".utf8))

        mutating func append(_ d: Double, to out: inout [UInt8]) {
            let v = d.isFinite ? d : 0
            if v != last.value { last = (v, v == 0 ? Array("0".utf8) : Array("\(v)".utf8)) }
            out += last.text
        }
    }

    /// `s` as a JSON string: `"` and `\` escaped, control characters as `\u00XX`, the rest as is (UTF-8).
    static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(b)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += "\\u00".utf8
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            default:
                out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
