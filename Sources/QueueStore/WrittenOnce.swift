import PushDispatch
import PushgateCore

/// The SQLite store's written-once layout (schema version 4), used by a process alone on its store
/// (`SQLiteBackend.exclusive`): a queued job has no row of its own until it is retried or over.
///
/// - **Acceptance** writes the notification row only. It carries its jobs' fields in `jobs_data`
///   (`encode`), and a row in `open_notifs` (written by the writer connection's trigger,
///   `SQLiteBackend.openOnInsert`) marks it open, its jobs leased to the process that holds them
///   (`owner`). A notification's row id is its first job's id, and its jobs' ids are
///   consecutive (`first_job`, `job_count`).
/// - **A retry** inserts the job's full row (updated from then on: one upsert); **an outcome** of a
///   job without a row inserts a narrow one (`SQLiteBackend.makeUpsertOutcomes`, schema version 5: its target,
///   message id and times stay in `jobs_data`). A prune pass closes the notifications whose every
///   job has a row (deletes their `open_notifs` rows): nothing in the hot path counts.
/// - **A pending job is derived, not stored**: a job of an open notification with no row
///   (`virtualJobs`). Status lookups and the backlog's read-back (`parkedJobs`) read them so.
/// - **Leases:** such jobs are leased to `open_notifs.owner`. A process that opens the store alone
///   (after a stop or a crash) takes the open notifications over as they are: their jobs without a
///   row become its parked jobs (`SQLiteBackend.start`, `adoptParked`), no row written. A stop with
///   another process registered (`release`), an expired lease or an owner no longer registered
///   (`reclaimExpired`, a process sharing the store) writes their rows (`materialize`), free, as
///   before version 4.
///
/// - **A run row** (schema version 7) stands for consecutive jobs of one notification delivered in
///   one commit with the same attempt count, each with its message id as provider id (APNs): its id
///   is the run's last job's, `run_first` its first's (`SQLiteBackend.upsertRows`). It is written
///   only where none of those jobs has a row, and no row is written for them after it (a job ends
///   once). Its jobs' finish time is the run's last (within one commit of completions). A job
///   `X` "has a row" when the first row at or after `X` starts at or before it (`hasRow`), and the
///   rows of an id range stand for `runWeight` jobs each.
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

    /// Column version 7 adds to `jobs`: a run row's first job (`hasRow`; NULL: a row of one job).
    static let runColumn = (table: "jobs", column: "run_first", definition: "INTEGER")

    /// Made after `runColumn` exists: the run rows, so a store without any (or few) finds that at
    /// once (`SQLiteBackend.finishedCutoff`).
    static let indexes = ["CREATE INDEX IF NOT EXISTS jobs_runs ON jobs (id) WHERE run_first IS NOT NULL"]

    /// SQL: job `x` (an expression) has a row, of its own or a run's: the first row at or after it
    /// starts at or before it (a run row's id is its last job's).
    static func hasRow(_ x: String) -> String {
        "((SELECT coalesce(r.run_first, r.id) <= \(x) FROM jobs r WHERE r.id >= \(x) ORDER BY r.id LIMIT 1) IS 1)"
    }

    /// SQL: how many jobs the row `j` stands for (a run row: its run's).
    static func runWeight(_ j: String) -> String { "(\(j).id - coalesce(\(j).run_first, \(j).id) + 1)" }

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
        WHERE j.type = 'array' AND (\(condition)) AND NOT \(hasRow("n.id + j.key"))
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

    /// SQL: every job of the open notification `o` (an `open_notifs` row) has a row (it is over or
    /// retried): it can be closed.
    static func everyJobHasARow(_ o: String) -> String {
        """
        (SELECT coalesce(sum(\(runWeight("j"))), 0) FROM jobs j WHERE j.id BETWEEN \(o).notif_row AND \(o).notif_row + \(o).job_count - 1)
          >= \(o).job_count
        """
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
        var numbers = Numbers(microseconds: true)
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

    /// Job rows as one JSON array of arrays, one per row, with the values of `columns` in order
    /// (`SQLiteBackend.upsertRows` reads it with `jsonb_each`).
    struct RowsJSON {
        static let columns = [
            "id", "notif_row", "platform", "target_kind", "target", "target_keys", "message_id", "attempts", "max_attempts", "cred_retry",
            "not_before", "enqueued_at", "last_error", "state", "provider_id", "finished_at", "lease_owner",
        ]
        private var out: [UInt8] = [UInt8(ascii: "[")]
        private(set) var count = 0
        /// The jobs of one notification share these: formatted once for consecutive rows.
        private var notBefores = Numbers()
        private var enqueuedAts = Numbers()

        mutating func add(
            id: Int64, _ row: StoredJob, attempts: Int, notBefore: Double, lastError: String?, credentialRetryUsed: Bool,
            state: DeliveryState.Code, providerID: String?, finishedAt: Double?, leaseOwner: String?
        ) {
            let t = TargetCodec.encode(row.target)
            if count > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "["))
            WrittenOnce.appendInt(Int(id), to: &out)
            for i in [Int(row.notifRow), row.platform.rawValue, t.kind] {
                out.append(UInt8(ascii: ","))
                WrittenOnce.appendInt(i, to: &out)
            }
            for s in [t.value, t.keys, row.messageID] {
                out.append(UInt8(ascii: ","))
                appendOptional(s)
            }
            for i in [attempts, row.maxAttempts, credentialRetryUsed ? 1 : 0] {
                out.append(UInt8(ascii: ","))
                WrittenOnce.appendInt(i, to: &out)
            }
            out.append(UInt8(ascii: ","))
            notBefores.append(notBefore, to: &out)
            out.append(UInt8(ascii: ","))
            enqueuedAts.append(row.enqueuedAt, to: &out)
            out.append(UInt8(ascii: ","))
            appendOptional(lastError)
            out.append(UInt8(ascii: ","))
            WrittenOnce.appendInt(state.rawValue, to: &out)
            out.append(UInt8(ascii: ","))
            appendOptional(providerID)
            out.append(UInt8(ascii: ","))
            if let finishedAt { WrittenOnce.appendDouble(finishedAt, to: &out) } else { out += "null".utf8 }
            out.append(UInt8(ascii: ","))
            appendOptional(leaseOwner)
            out.append(UInt8(ascii: "]"))
            count += 1
        }

        /// The `target_kind` of a narrow outcome row (`SQLiteBackend.makeUpsertOutcomes`; a whole row's is 0
        /// or more): its target, message id and times are in its notification's `jobs_data`.
        static let narrowOutcome = -1
        /// The `target_kind` of a narrow outcome row whose provider id is its message id (APNs answers
        /// with the `apns-id` it was sent: 36 bytes a row not written twice).
        static let providerIDIsMessageID = -2

        private mutating func appendOptional(_ s: String?) {
            if let s { WrittenOnce.appendString(s, to: &out) } else { out += "null".utf8 }
        }

        /// The array so far; starts a new one.
        mutating func take() -> String {
            out.append(UInt8(ascii: "]"))
            defer {
                out = [UInt8(ascii: "[")]
                count = 0
            }
            return String(decoding: out, as: UTF8.self)
        }
    }

    /// A finite double as JSON (Swift's shortest round-trip form is valid JSON), anything else as 0.
    static func appendDouble(_ d: Double, to out: inout [UInt8]) {
        if d == 0 || !d.isFinite { out.append(UInt8(ascii: "0")) } else { out += "\(d)".utf8 }
    }

    /// Decimal digits written in place (`String(i)` allocated a string for each id of each row).
    static func appendInt(_ i: Int, to out: inout [UInt8]) {
        if (0..<10).contains(i) {
            out.append(UInt8(ascii: "0") + UInt8(i))
            return
        }
        if i < 0 { out.append(UInt8(ascii: "-")) }
        appendDigits(i.magnitude, minimumCount: 1, to: &out)
    }

    /// `n` in decimal, with leading zeros up to `minimumCount` digits.
    private static func appendDigits(_ n: UInt, minimumCount: Int, to out: inout [UInt8]) {
        let start = out.count
        var n = n
        var count = 0
        while n > 0 || count < minimumCount {
            out.append(UInt8(ascii: "0") + UInt8(n % 10))
            n /= 10
            count += 1
        }
        out[start...].reverse()
    }

    /// Finite doubles as JSON (Swift's shortest round-trip form is valid JSON), anything else as 0.
    /// The jobs of one notification share their times: the last number's text is reused, not
    /// formatted again for each job.
    struct Numbers {
        private var last: (value: Double, text: [UInt8]) = (0, Array("0".utf8))
        /// Rounded to the microsecond (`appendMicroseconds`).
        private let microseconds: Bool

        init(microseconds: Bool = false) { self.microseconds = microseconds }

        mutating func append(_ d: Double, to out: inout [UInt8]) {
            let v = d.isFinite ? d : 0
            if v != last.value {
                let start = out.count
                if microseconds { WrittenOnce.appendMicroseconds(v, to: &out) } else { WrittenOnce.appendDouble(v, to: &out) }
                last.value = v
                last.text.removeAll(keepingCapacity: true)
                last.text += out[start...]
                return
            }
            out += last.text
        }
    }

    /// A time offset in seconds rounded to the microsecond, as short JSON: `-0.000204` where the
    /// shortest round-trip form is `-0.0002040863037109375` (two per job in `jobs_data`: a fifth of
    /// its bytes). A stored time (seconds since 1970, a double) is itself only precise to ~0.24 µs.
    /// Also absolute times (outcome rows' finish times). 1e12 seconds or more, and non-finite values,
    /// as `appendDouble` writes them. Digits written in place, no string made.
    static func appendMicroseconds(_ d: Double, to out: inout [UInt8]) {
        // Below 1e12 s (31,000 years) the microseconds fit an Int with room to spare.
        guard d.isFinite, d.magnitude < 1e12 else {
            appendDouble(d, to: &out)
            return
        }
        // Whole seconds and the fraction apart (both exact): `d * 1e6` would round at 2^53, a few
        // microseconds off for a time since 1970.
        var whole = d.magnitude.rounded(.down)
        var fraction = UInt(((d.magnitude - whole) * 1e6).rounded())
        if fraction == 1_000_000 {
            whole += 1
            fraction = 0
        }
        guard whole > 0 || fraction > 0 else {
            out.append(UInt8(ascii: "0"))
            return
        }
        if d < 0 { out.append(UInt8(ascii: "-")) }
        appendDigits(UInt(whole), minimumCount: 1, to: &out)
        guard fraction > 0 else { return }
        var f = fraction
        var digits = 6
        while f % 10 == 0 {
            f /= 10
            digits -= 1
        }
        out.append(UInt8(ascii: "."))
        appendDigits(f, minimumCount: digits, to: &out)
    }

    /// `s` as a JSON string: `"` and `\` escaped, control characters as `\u00XX`, the rest as is (UTF-8),
    /// copied in runs between the bytes to escape (tokens and ids have none: one copy).
    static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { bytes in
            var start = 0
            for i in 0..<bytes.count {
                let b = bytes[i]
                guard b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") || b < 0x20 else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i]))
                start = i + 1
                if b < 0x20 {
                    let hex = Array("0123456789abcdef".utf8)
                    out += "\\u00".utf8
                    out.append(hex[Int(b >> 4)])
                    out.append(hex[Int(b & 0xF)])
                } else {
                    out.append(UInt8(ascii: "\\"))
                    out.append(b)
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension WrittenOnce {
    /// One job of `jobs_data` without a row (an array entry), as `encode` wrote it.
    struct Entry: Equatable {
        var kind: Int
        var value: String
        var keys: String?
        var messageID: String
        var attempts: Int
        var maxAttempts: Int
        /// `not_before - created_at`, `enqueued_at - created_at`.
        var notBefore: Double
        var enqueuedAt: Double
    }

    /// The array entries of `jobsData` (a notification's `jobs_data`, whose first job has id
    /// `firstID`) with ids in `range`, in order: the backlog's read-back without SQLite's `json_each`
    /// (which, with a result row per job through SQLiteNIO, cost more than the rest of the read).
    /// Entries before the range are skipped without being decoded. Nil when the text is not what
    /// `encode` writes (the caller reads the range with SQL instead): never a trap, whatever the text.
    static func decode(_ jobsData: String, firstID: Int64, range: ClosedRange<Int64>) -> [(id: Int64, entry: Entry)]? {
        var text = jobsData
        return text.withUTF8 { bytes -> [(id: Int64, entry: Entry)]? in
            var p = Scanner(bytes: bytes)
            var out: [(id: Int64, entry: Entry)] = []
            guard p.take(UInt8(ascii: "[")) else { return nil }
            if p.take(UInt8(ascii: "]")) { return p.atEnd ? out : nil }
            var id = firstID
            while true {
                if id > range.upperBound { return out }
                if p.take(UInt8(ascii: "0")) {
                    // a job written as a row
                } else if id < range.lowerBound {
                    guard p.skipArray() else { return nil }
                } else {
                    guard let e = p.entry() else { return nil }
                    out.append((id, e))
                }
                if p.take(UInt8(ascii: "]")) { return p.atEnd ? out : nil }
                guard p.take(UInt8(ascii: ",")) else { return nil }
                let (next, overflow) = id.addingReportingOverflow(1)
                if overflow { return nil }
                id = next
            }
        }
    }

    /// A cursor over `jobs_data` bytes. Every read checks the bounds and returns nil or false on
    /// anything unexpected.
    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var i = 0

        var atEnd: Bool { i == bytes.count }

        mutating func take(_ b: UInt8) -> Bool {
            guard i < bytes.count, bytes[i] == b else { return false }
            i += 1
            return true
        }

        /// Past an entry's array (strings in it may hold brackets).
        mutating func skipArray() -> Bool {
            guard take(UInt8(ascii: "[")) else { return false }
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: "]"):
                    i += 1
                    return true
                case UInt8(ascii: "\""):
                    guard string() != nil else { return false }
                default:
                    i += 1
                }
            }
            return false
        }

        mutating func entry() -> Entry? {
            guard take(UInt8(ascii: "[")), let kind = int(), take(UInt8(ascii: ",")), let value = string(), take(UInt8(ascii: ","))
            else { return nil }
            var keys: String?
            if !takeNull() {
                guard let k = string() else { return nil }
                keys = k
            }
            guard take(UInt8(ascii: ",")), let messageID = string(), take(UInt8(ascii: ",")), let attempts = int(),
                take(UInt8(ascii: ",")), let maxAttempts = int(), take(UInt8(ascii: ",")), let notBefore = double(),
                take(UInt8(ascii: ",")), let enqueuedAt = double(), take(UInt8(ascii: "]"))
            else { return nil }
            return Entry(
                kind: kind, value: value, keys: keys, messageID: messageID, attempts: attempts, maxAttempts: maxAttempts,
                notBefore: notBefore, enqueuedAt: enqueuedAt)
        }

        mutating func takeNull() -> Bool {
            guard bytes.count - i >= 4, bytes[i] == UInt8(ascii: "n"), bytes[i + 1] == UInt8(ascii: "u"),
                bytes[i + 2] == UInt8(ascii: "l"), bytes[i + 3] == UInt8(ascii: "l")
            else { return false }
            i += 4
            return true
        }

        /// A JSON integer that fits `Int` (no fraction, no exponent).
        mutating func int() -> Int? {
            let negative = take(UInt8(ascii: "-"))
            let start = i
            var v = 0
            while i < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i]) {
                let (m, o1) = v.multipliedReportingOverflow(by: 10)
                let (a, o2) = m.addingReportingOverflow(Int(bytes[i] - UInt8(ascii: "0")))
                if o1 || o2 { return nil }
                v = a
                i += 1
            }
            guard i > start else { return nil }
            return negative ? -v : v
        }

        /// The last number `double` parsed (the jobs of a notification share their time offsets).
        var lastNumber: (bytes: Range<Int>, value: Double)?

        /// A JSON number as `Double`; a finite one only.
        mutating func double() -> Double? {
            let start = i
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "e"),
                    UInt8(ascii: "E"):
                    i += 1
                default:
                    guard i > start else { return nil }
                    let text = UnsafeBufferPointer(rebasing: bytes[start..<i])
                    if let last = lastNumber, last.bytes.count == text.count,
                        UnsafeBufferPointer(rebasing: bytes[last.bytes]).elementsEqual(text)
                    {
                        return last.value
                    }
                    guard let d = Double(String(decoding: text, as: UTF8.self)), d.isFinite else { return nil }
                    lastNumber = (start..<i, d)
                    return d
                }
            }
            return nil
        }

        /// A JSON string. One without escapes (tokens, ids) is copied as is; one with escapes is
        /// handed to the request parser's `JSONParser` (the same rules as for a request's strings).
        mutating func string() -> String? {
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return nil }
            let open = i
            i += 1
            var escaped = false
            while i < bytes.count, bytes[i] != UInt8(ascii: "\"") {
                if bytes[i] == UInt8(ascii: "\\") {
                    escaped = true
                    i += 1
                }
                i += 1
            }
            guard i < bytes.count else { return nil }
            i += 1
            guard escaped else { return String(decoding: UnsafeBufferPointer(rebasing: bytes[(open + 1)..<(i - 1)]), as: UTF8.self) }
            guard case .string(let s)? = try? JSONParser.parse(Array(bytes[open..<i])) else { return nil }
            return s
        }
    }
}
