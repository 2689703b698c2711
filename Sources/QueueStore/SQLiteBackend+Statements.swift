import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PushDispatch
import PushgateCore
import SQLiteNIO

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// SQLite's statements of the shared commit sequence (`WriteBatch.run`), on the writer connection
/// inside the transaction `commit` opened.
extension SQLiteBackend: QueueStatements {
    /// Alone on the store, a notification inserted with `jobs_data` (jobs without a row) is opened
    /// for `owner` by a trigger of the writer connection's (`temp`: not in the file), in the insert's
    /// own statement: an `open_notifs` insert of its own cost a statement per commit.
    private func openOnInsert(owner: String) async throws {
        guard openOwner.withLockedValue({ $0 }) != owner else { return }
        _ = try writer.query("CREATE TEMP TABLE IF NOT EXISTS open_owner (owner TEXT NOT NULL)")
        _ = try writer.query(
            """
            CREATE TEMP TRIGGER IF NOT EXISTS open_on_insert AFTER INSERT ON main.notifications WHEN NEW.jobs_data IS NOT NULL
            BEGIN INSERT INTO main.open_notifs (notif_row, job_count, owner) VALUES (NEW.id, NEW.job_count, (SELECT owner FROM temp.open_owner)); END
            """)
        _ = try writer.query("DELETE FROM temp.open_owner")
        _ = try writer.query("INSERT INTO temp.open_owner (owner) VALUES (?)", [.text(owner)])
        openOwner.withLockedValue { $0 = owner }
    }

    func insert(_ inserts: [NotificationInsert], owner: String) async throws -> [(notifRow: Int64, jobIDs: [Int64])] {
        var inserted: [(notifRow: Int64, jobIDs: [Int64])] = []
        // A notification's row id is its first job's id (one id is spent on one without jobs).
        var jobID = try await allocate(jobs: inserts.reduce(0) { $0 + max(1, $1.jobs.count) })
        var notifBinds: [SQLiteData] = []
        var notifRows = 0
        if exclusive { try await openOnInsert(owner: owner) }
        var jobBinds: [SQLiteData] = []
        var jobRows = 0
        func flushNotifications() async throws {
            if notifRows > 0 {
                try await insertRows(
                    "notifications (id, notif_id, platform, body, created_at, app, fallback, first_job, job_count, jobs_data, traceparent)",
                    columns: 11,
                    rows: notifRows, binds: notifBinds)
                notifBinds.removeAll(keepingCapacity: true)
                notifRows = 0
            }
        }
        for ins in inserts {
            let row = jobID
            // Alone on the store, a job leased to this process gets no row until it is retried or
            // over (`WrittenOnce`); one finished on insert, or under a dedup or coalescing rule
            // (changed by other transactions by its id), gets its row now.
            let rowless = ins.jobs.map { j in
                exclusive && j.leased && j.failedReason == nil && j.dedupKey == nil && j.coalesceSeconds == nil
            }
            let open = rowless.reduce(0) { $0 + ($1 ? 1 : 0) }
            notifBinds += [
                .integer(Int(row)), .text(ins.notifID), .integer(ins.platform.rawValue), .text(ins.body), .float(ins.createdAt), .text(ins.app),
                ins.fallback.map { .text($0) } ?? .null, .integer(Int(row)), .integer(ins.jobs.count),
                open > 0 ? .text(WrittenOnce.encode(ins.jobs, rowless: rowless, createdAt: ins.createdAt)) : .null,
                ins.traceParent.map { .text($0) } ?? .null,
            ]
            notifRows += 1
            if notifRows == 500 { try await flushNotifications() }
            var ids: [Int64] = []
            ids.reserveCapacity(ins.jobs.count)
            for (k, j) in ins.jobs.enumerated() {
                ids.append(jobID)
                defer { jobID += 1 }
                if rowless[k] { continue }
                let t = TargetCodec.encode(j.target)
                jobBinds += [
                    .integer(Int(jobID)), .integer(Int(row)), .integer(ins.platform.rawValue), .integer(t.kind), .text(t.value),
                    t.keys.map { .text($0) } ?? .null, .text(j.messageID), .integer(j.attempts), .integer(j.maxAttempts),
                    .float(j.notBefore), .float(j.enqueuedAt), j.leased ? .text(owner) : .null,
                ]
                jobRows += 1
                if jobRows == 2000 {
                    try await insertJobs(jobBinds, rows: jobRows)
                    jobBinds.removeAll(keepingCapacity: true)
                    jobRows = 0
                }
            }
            if ins.jobs.isEmpty { jobID += 1 }
            inserted.append((row, ids))
        }
        try await flushNotifications()
        if jobRows > 0 { try await insertJobs(jobBinds, rows: jobRows) }
        return inserted
    }

    func apply(_ all: [JobUpdate], onlyLeasedBy owner: String?) async throws {
        var updates = all
        if exclusive, let owner {
            // Jobs that may have no row yet (`WrittenOnce`): inserted or updated in one statement
            // (`upsertRows` passes over the others). Usually that is every update of the batch: no copy.
            let carried = all.reduce(0) { $0 + ($1.carriesRow ? 1 : 0) }
            if carried > 0 {
                try await upsertRows(all, owner: owner)
                if carried == all.count { return }
                updates = all.filter { !$0.carriesRow }
            }
        }
        // "" never matches a lease owner (owners are UUIDs): no owner means no lease condition.
        let any: SQLiteData = .integer(owner == nil ? 1 : 0)
        let leased: SQLiteData = .text(owner ?? "")
        var completes: [SQLiteData] = []
        var nc = 0
        var reschedules: [SQLiteData] = []
        var nr = 0
        func flushCompletes() async throws {
            guard nc > 0 else { return }
            let values = Array(repeating: "(?, ?, ?, ?, ?, ?)", count: nc).joined(separator: ", ")
            _ = try writer.query(
                """
                UPDATE jobs SET state = v.column2, attempts = v.column3, provider_id = v.column4,
                  last_error = coalesce(v.column5, jobs.last_error), finished_at = v.column6, lease_owner = NULL
                FROM (VALUES \(values)) AS v WHERE jobs.id = v.column1 AND (? OR jobs.lease_owner = ?)
                """, completes + [any, leased])
            completes.removeAll(keepingCapacity: true)
            nc = 0
        }
        func flushReschedules() async throws {
            guard nr > 0 else { return }
            let values = Array(repeating: "(?, ?, ?, ?, ?)", count: nr).joined(separator: ", ")
            _ = try writer.query(
                """
                UPDATE jobs SET attempts = v.column2, not_before = v.column3, last_error = v.column4, cred_retry = v.column5
                FROM (VALUES \(values)) AS v WHERE jobs.id = v.column1 AND (? OR jobs.lease_owner = ?)
                """, reschedules + [any, leased])
            reschedules.removeAll(keepingCapacity: true)
            nr = 0
        }
        for u in updates {
            switch u {
            case .complete(let c):
                let delivered = c.state == .delivered
                completes += [
                    .integer(Int(c.id)), .integer(c.state.rawValue), .integer(c.attempts),
                    delivered ? (c.info.map { .text($0) } ?? .null) : .null,
                    delivered ? .null : (c.info.map { .text($0) } ?? .null), .float(c.finishedAt),
                ]
                nc += 1
                if nc == 2000 {
                    try await flushReschedules()
                    try await flushCompletes()
                }
            case .reschedule(let id, let attempts, let notBefore, let lastError, let cred, _):
                reschedules += [
                    .integer(Int(id)), .integer(attempts), .float(notBefore), lastError.map { .text($0) } ?? .null, .integer(cred ? 1 : 0),
                ]
                nr += 1
                if nr == 2000 { try await flushReschedules() }
            }
        }
        // Reschedules first: a job retried and then finished within one batch ends finished, with
        // the attempt's error kept (a completion frees the lease, and the reschedule after it would
        // no longer match).
        try await flushReschedules()
        try await flushCompletes()
    }

    /// Writes the rows of the updates carrying their job (`row`): a job without a row yet
    /// (`WrittenOnce`) gets its row, a job with one is updated while `owner` holds its lease (an
    /// expired lease's rows were written free by another process: the update does not apply).
    /// Reschedules first, so a job retried and over in one batch ends over. A retried job's row is
    /// whole (it is read back when leased); an outcome's row is narrow when the job had none
    /// (`makeUpsertOutcomes`: its description stays in `jobs_data`).
    ///
    /// Outcomes, one per delivery: kept statements of `outcomeRowsPerStatement` rows each, then of
    /// one row for the rest, their values bound from the updates (`WriterConnection.executeRows`).
    /// Stepping a statement per row, each step's setup and teardown (its cursor opened and the
    /// B-tree walked from the root again, its registers freed) was a third of the outcomes' SQLite
    /// time. Retried rows (rare): one bound JSON array
    /// (`WrittenOnce.RowsJSON`) that SQLite reads with `jsonb_each`, one statement for the batch.
    /// (Before the writer kept its statements, a statement per row was not possible and a `VALUES`
    /// list of 17 parameters per row cost 40 % of the writer thread in preparing and binding; the
    /// outcomes went in as a JSON array too before, docs/benchmarks.md.)
    ///
    /// (`+?`: a bound value compared with `=` in some statements made SQLite prepare them a second
    /// time once the value was bound, 4 % of the gateway's CPU in the bench.)
    private func upsertRows(_ updates: [JobUpdate], owner: String) async throws {
        var rows = WrittenOnce.RowsJSON()
        func flush(_ sql: String) async throws {
            guard rows.count > 0 else { return }
            _ = try writer.query(sql, [.text(rows.take()), .text(owner)])
        }
        // Retries are rare: the updates are not copied out one by one to look for them.
        var outcomes: [Int] = []
        outcomes.reserveCapacity(updates.count)
        var retried = false
        for i in updates.indices {
            if updates[i].isOutcomeWithRow { outcomes.append(i) } else if updates[i].isRetryWithRow { retried = true }
        }
        if retried {
            for u in updates {
                guard case .reschedule(let id, let attempts, let notBefore, let lastError, let cred, let row?) = u else { continue }
                rows.add(
                    id: id, row, attempts: attempts, notBefore: notBefore, lastError: lastError, credentialRetryUsed: cred,
                    state: .pending, providerID: nil, finishedAt: nil, leaseOwner: owner)
                if rows.count == 1000 { try await flush(Self.upsertRetried) }
            }
            try await flush(Self.upsertRetried)
        }
        outcomes = try writeRuns(updates, outcomes)
        try writer.executeRows(full: Self.upsertOutcomesFull, one: Self.upsertOutcomeOne, per: Self.outcomeRowsPerStatement, count: outcomes.count) {
            i, r, b in
            if r == 0 { b.text(1, owner) }
            try Self.bindOutcome(updates[outcomes[i]], row: r, to: b)
        }
    }

    /// Writes run rows (`WrittenOnce`) for the outcomes among `outcomes` (indices into `updates`)
    /// that can share one: delivered with their message id as provider id and no error kept, of
    /// consecutive ids of one notification, with the same attempt count, two or more. A run is
    /// written only over jobs without a row: a job with one (retried) splits it, its outcome going
    /// to its row. Returns the outcomes left for rows of their own.
    ///
    /// Most deliveries of a notification end within one commit of completions: APNs deliveries
    /// then cost a row per run instead of a row per job (the outcome rows were half the writer
    /// thread's time, docs/benchmarks.md). The rows already in the runs' ids are read with one
    /// query per `runCheckSpan` ids (a check in each run's insert made SQLite copy its select into a
    /// temporary table first, as it reads the table it inserts into: five times a row's cost).
    private func writeRuns(_ updates: borrowing [JobUpdate], _ outcomes: [Int]) throws -> [Int] {
        var own: [Int] = []
        own.reserveCapacity(outcomes.count)
        var candidates: [RunCandidate] = []
        candidates.reserveCapacity(outcomes.count)
        for i in outcomes {
            if let c = Self.runCandidate(updates[i], index: i) { candidates.append(c) } else { own.append(i) }
        }
        guard candidates.count >= 2 else { return outcomes }
        candidates.sort { $0.id < $1.id }
        // The candidates' ids that have a row (in id order; one query per span of ids).
        var withRows: [Int64] = []
        var k = 0
        while k < candidates.count {
            var last = k
            while last + 1 < candidates.count, candidates[last + 1].id - candidates[k].id < Self.runCheckSpan { last += 1 }
            withRows += try writer.integers("SELECT id FROM jobs WHERE id BETWEEN ?1 AND ?2", candidates[k].id, candidates[last].id)
            k = last + 1
        }
        var next = 0
        func hasRow(_ id: Int64) -> Bool {
            while next < withRows.count, withRows[next] < id { next += 1 }
            return next < withRows.count && withRows[next] == id
        }
        // Runs of consecutive candidates without a row: a job with one (its row updated) ends a run,
        // and a run shorter than two is rows of its own.
        var runs: [Run] = []
        var start = 0
        while start < candidates.count {
            let first = candidates[start]
            var end = start + 1
            if !hasRow(first.id) {
                var finishedAt = first.finishedAt
                while end < candidates.count, candidates[end].id == candidates[end - 1].id + 1, candidates[end].notifRow == first.notifRow,
                    candidates[end].attempts == first.attempts, !hasRow(candidates[end].id)
                {
                    finishedAt = max(finishedAt, candidates[end].finishedAt)
                    end += 1
                }
                if end - start >= 2 {
                    runs.append(
                        Run(
                            ids: first.id...candidates[end - 1].id, notifRow: first.notifRow, platform: first.platform, attempts: first.attempts,
                            finishedAt: finishedAt))
                    start = end
                    continue
                }
            }
            own.append(first.index)
            start += 1
        }
        try writer.executeRows(full: Self.insertRunsFull, one: Self.insertRunOne, per: Self.runRowsPerStatement, count: runs.count) {
            i, r, b in
            let run = runs[i]
            let p = Int32(6 * r)
            b.int(p + 1, Int(run.ids.lowerBound))
            b.int(p + 2, Int(run.ids.upperBound))
            b.int(p + 3, Int(run.notifRow))
            b.int(p + 4, run.platform)
            b.int(p + 5, run.attempts)
            b.double(p + 6, run.finishedAt)
        }
        return own
    }

    /// An outcome that may share a run row (`writeRuns`): the job's id and what a run's jobs share.
    private struct RunCandidate {
        var id: Int64
        var index: Int
        var notifRow: Int64
        var platform: Int
        var attempts: Int
        var finishedAt: Double
    }

    /// A run row to write (`writeRuns`): its jobs' ids and what they share.
    private struct Run {
        var ids: ClosedRange<Int64>
        var notifRow: Int64
        var platform: Int
        var attempts: Int
        var finishedAt: Double
    }

    /// Most ids one query of `writeRuns` reads the rows of (an outcome far behind the others, a job
    /// retried for long, gets a query of its own rather than one over every row in between).
    static let runCheckSpan: Int64 = 4_096

    /// `update` (at `index`) as a run candidate (`writeRuns`), nil when it cannot share a run.
    /// Borrowed, matched with `switch` and inlined, as `bindOutcome`: no copy of the update.
    @inline(__always)
    private static func runCandidate(_ update: borrowing JobUpdate, index: Int) -> RunCandidate? {
        switch update {
        case .complete(let c):
            guard c.state == .delivered, let row = c.row, row.providerIDIsMessageID, row.lastError == nil else { return nil }
            return RunCandidate(
                id: c.id, index: index, notifRow: row.notifRow, platform: row.platform, attempts: c.attempts, finishedAt: c.finishedAt)
        case .reschedule:
            return nil
        }
    }

    /// The parameters of row `r` of a statement of many rows, `n` values each, after `before` shared
    /// ones: `?(before + n r + 1)` to `?(before + n r + n)`.
    private static func markers(row r: Int, of n: Int, after before: Int = 0) -> [String] {
        (1...n).map { "?\(before + n * r + $0)" }
    }

    /// Run rows per statement of `writeRuns` (the rest in statements of one).
    static let runRowsPerStatement = 8
    private static let insertRunsFull = makeInsertRuns(runRowsPerStatement)
    private static let insertRunOne = makeInsertRuns(1)
    /// `rows` run rows (`writeRuns`), six values each: jobs ?1...?2 of notification ?3, platform ?4,
    /// delivered at attempt ?5, the last at ?6.
    private static func makeInsertRuns(_ rows: Int) -> String {
        let values = (0..<rows).map { r in
            let v = markers(row: r, of: 6)
            return "(\(v[1]), \(v[2]), \(v[3]), \(WrittenOnce.RowsJSON.providerIDIsMessageID), '', NULL, '', \(v[4]), 0, 0, 0, 0, NULL, "
                + "\(DeliveryState.Code.delivered.rawValue), NULL, \(v[5]), NULL, \(v[0]))"
        }
        return "INSERT INTO jobs (\(WrittenOnce.RowsJSON.columns.joined(separator: ", ")), run_first) VALUES \(values.joined(separator: ", "))"
    }

    private static let notAnOutcome = QueueStoreError("SQLite queue: an update to write as an outcome row is not an outcome with its job")

    /// Outcome rows per statement of `upsertRows` (its remainder goes in statements of one).
    static let outcomeRowsPerStatement = 32

    /// Binds the parameters of row `r` of `makeUpsertOutcomes` to `update`, an outcome carrying its
    /// job (`upsertRows` passes only those: anything else throws, since a row left unbound would be
    /// written again with the values of the one before). Borrowed, matched with `switch`, inlined,
    /// and every value read out before the first bind: otherwise the compiler copies the whole
    /// update (or outcome) out of the batch first, a retain and release of each of its strings for
    /// every delivery, because the binds are C calls it cannot see into.
    @inline(__always)
    private static func bindOutcome(_ update: borrowing JobUpdate, row r: Int, to b: WriterConnection.Binder) throws {
        let values: (id: Int64, notifRow: Int64, platform: Int, kind: Int, attempts: Int, error: String?, state: Int, providerID: String?, at: Double)
        switch update {
        case .complete(let c):
            guard let row = c.row else { throw Self.notAnOutcome }
            let delivered = c.state == .delivered
            let sameID = delivered && row.providerIDIsMessageID
            values = (
                c.id, row.notifRow, row.platform,
                sameID ? WrittenOnce.RowsJSON.providerIDIsMessageID : WrittenOnce.RowsJSON.narrowOutcome, c.attempts,
                delivered ? row.lastError : c.info, c.state.rawValue, delivered && !sameID ? c.info : nil, c.finishedAt
            )
        case .reschedule:
            throw Self.notAnOutcome
        }
        let p = Int32(1 + 9 * r)
        b.int(p + 1, Int(values.id))
        b.int(p + 2, Int(values.notifRow))
        b.int(p + 3, values.platform)
        b.int(p + 4, values.kind)
        b.int(p + 5, values.attempts)
        b.text(p + 6, values.error)
        b.int(p + 7, values.state)
        b.text(p + 8, values.providerID)
        b.double(p + 9, values.at)
    }

    /// `upsertRows`' statement: rows of `RowsJSON.columns` from the array ?1, or the updates of
    /// `onConflict` to the rows leased to ?2.
    private static func upsert(values: [String], onConflict: String) -> String {
        """
        INSERT INTO jobs (\(WrittenOnce.RowsJSON.columns.joined(separator: ", ")))
        SELECT \(values.joined(separator: ", ")) FROM jsonb_each(?1) AS r WHERE true
        ON CONFLICT(id) DO UPDATE SET \(onConflict) WHERE jobs.lease_owner = +?2
        """
    }
    private static let upsertRetried = upsert(
        values: WrittenOnce.RowsJSON.columns.indices.map { "r.value ->> \($0)" },
        onConflict:
            "attempts = excluded.attempts, not_before = excluded.not_before, last_error = excluded.last_error, cred_retry = excluded.cred_retry"
    )
    /// `upsertRows`' two outcome statements: `outcomeRowsPerStatement` rows, and one row.
    private static let upsertOutcomesFull = makeUpsertOutcomes(outcomeRowsPerStatement)
    private static let upsertOutcomeOne = makeUpsertOutcomes(1)
    /// `rows` narrow outcome rows (schema version 5), ?1 the lease owner, then nine values per row:
    /// its id, notification, platform, `target_kind` (`RowsJSON.narrowOutcome`, or
    /// `providerIDIsMessageID` with no provider id of its own), attempts, last error, state, provider
    /// id and finish time. Its target, message id and times stay in `jobs_data`; when the job has a
    /// row (retried), the upsert updates that row's outcome columns and the rest stays as it is.
    private static func makeUpsertOutcomes(_ rows: Int) -> String {
        let values = (0..<rows).map { r in
            let v = markers(row: r, of: 9, after: 1)
            return "(\(v[0]), \(v[1]), \(v[2]), \(v[3]), '', NULL, '', \(v[4]), 0, 0, 0, 0, \(v[5]), \(v[6]), \(v[7]), \(v[8]), NULL)"
        }
        return """
            INSERT INTO jobs (\(WrittenOnce.RowsJSON.columns.joined(separator: ", ")))
            VALUES \(values.joined(separator: ", "))
            ON CONFLICT(id) DO UPDATE SET \(outcomeOnConflict) WHERE jobs.lease_owner = +?1
            """
    }
    private static let outcomeOnConflict = """
        state = excluded.state, attempts = excluded.attempts,
        provider_id = iif(excluded.target_kind = \(WrittenOnce.RowsJSON.providerIDIsMessageID), jobs.message_id, excluded.provider_id),
        last_error = coalesce(excluded.last_error, jobs.last_error), finished_at = excluded.finished_at, lease_owner = NULL
        """

    func renewLease(owner: String, until: Double) async throws {
        _ = try writer.query(
            "INSERT INTO owners (owner, lease_until) VALUES (?, ?) ON CONFLICT(owner) DO UPDATE SET lease_until = excluded.lease_until",
            [.text(owner), .float(until)])
    }

    /// Frees the jobs of owners whose lease expired. Returns how many.
    func reclaimExpired(now: Double) async throws -> Int {
        let expired = try writer.query("SELECT owner FROM owners WHERE lease_until < ?", [.float(now)]).compactMap {
            $0.column("owner")?.string
        }
        // Open notifications of an owner no longer registered: a process alone on the file stopped
        // and left them for the next start (`release`) while this one, started meanwhile, shares it.
        // (Alone on the file there are none: its start took every open notification over.)
        var n = exclusive ? 0 : try materialize(where: "o.owner NOT IN (SELECT owner FROM owners)")
        for o in expired {
            n += try materialize(where: "o.owner = +?", [.text(o)])
            n +=
                try writer.query("SELECT count(*) AS n FROM jobs WHERE state = 0 AND lease_owner = ?", [.text(o)]).first?.column("n")?.integer
                ?? 0
            _ = try writer.query("UPDATE jobs SET lease_owner = NULL WHERE state = 0 AND lease_owner = ?", [.text(o)])
            _ = try writer.query("DELETE FROM owners WHERE owner = ?", [.text(o)])
        }
        return n
    }

    func lease(_ req: LeaseRequest, owner: String, now: Double) async throws -> [StoredJob] {
        let rows = try writer.query(
            """
            UPDATE jobs SET lease_owner = ? WHERE id IN (
              SELECT id FROM jobs WHERE state = 0 AND lease_owner IS NULL AND platform = ? AND not_before <= ?
              ORDER BY not_before, id LIMIT ?)
            RETURNING \(QueueSchema.leasedColumns)
            """, [.text(owner), .integer(req.platform.rawValue), .float(now), .integer(req.limit)])
        return rows.compactMap(Self.storedJob)
    }

    func addStats(_ increments: [String: Int64]) async throws {
        var binds: [SQLiteData] = []
        for (k, v) in increments.sorted(by: { $0.key < $1.key }) { binds += [.text(k), .integer(Int(v))] }
        let values = Array(repeating: "(?, ?)", count: increments.count).joined(separator: ", ")
        _ = try writer.query(
            "INSERT INTO stats (key, value) VALUES \(values) ON CONFLICT(key) DO UPDATE SET value = value + excluded.value", binds)
    }

    func readStats() async throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for row in try writer.query("SELECT key, value FROM stats") {
            if let k = row.column("key")?.string, let v = row.column("value").flatMap(Self.storedCounter) { out[k] = v }
        }
        return out
    }

    /// A stored counter. SQLite turns an integer sum past Int64's bounds into a REAL, which is held at
    /// the bounds here (`SQLiteData.integer` converts it with `Int64(_:)`, which traps past them).
    static func storedCounter(_ d: SQLiteData) -> Int64? {
        switch d {
        case .integer(let v): return Int64(v)
        case .float(let x) where x.isFinite: return x >= 0x1p63 ? .max : x < -0x1p63 ? .min : Int64(x)
        default: return nil
        }
    }

    func prune(finishedBefore cutoff: Double, limit: Int) async throws -> Bool {
        // Notifications whose every job has a row are no longer open (`WrittenOnce`): `limit` of them
        // a pass, a count of their id range each, from where the last pass stopped (then from the
        // start again): the oldest ones may stay open for long (a backlog), and the newer ones behind
        // them must still close.
        let from = closeCursor.withLockedValue { $0 }
        let last = try writer.query(
            "SELECT max(notif_row) AS m, count(*) AS n FROM (SELECT notif_row FROM open_notifs WHERE notif_row > ? ORDER BY notif_row LIMIT ?)",
            [.integer(Int(from)), .integer(limit)]
        ).first
        let examined = last?.column("n")?.integer ?? 0
        let upTo = examined < limit ? nil : last?.column("m")?.integer
        _ = try writer.query(
            """
            DELETE FROM open_notifs WHERE notif_row IN (
              SELECT o.notif_row FROM (SELECT notif_row, job_count FROM open_notifs WHERE notif_row > ?2 ORDER BY notif_row LIMIT ?1) o
              WHERE \(WrittenOnce.everyJobHasARow("o")))
            """, [.integer(limit), .integer(Int(from))])
        closeCursor.withLockedValue { $0 = upTo.map { Int64($0) } ?? 0 }
        // A job of an open notification keeps its row until the notification is over: there a job
        // without a row is a pending one.
        // No index by finish time (`QueueSchema.finishedIndex`): the rows are read in id order up to
        // the first notification with jobs accepted at or after the cutoff (its jobs and all later
        // ones cannot have finished before it; a notification migrated from version 3 without jobs
        // has `first_job` 0), so a pass reads the rows it deletes plus the few below that bound
        // still pending or finished later (retried).
        _ = try writer.query(Self.pruneJobsSQL, [.float(cutoff), .integer(limit)])
        let jobs = writer.changes()
        _ = try writer.query(
            """
            DELETE FROM notifications WHERE id IN (
              SELECT n.id FROM notifications n WHERE n.created_at < ?
                AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id BETWEEN n.first_job AND n.first_job + n.job_count - 1)
                AND NOT EXISTS (SELECT 1 FROM open_notifs o WHERE o.notif_row = n.id) LIMIT ?)
            """, [.float(cutoff), .integer(limit)])
        let notifications = writer.changes()
        return jobs >= limit || notifications >= limit
    }

    /// A prune pass's jobs: at most ?2 finished before ?1, of closed notifications (`prune`).
    static let pruneJobsSQL = """
        DELETE FROM jobs WHERE id IN (
          SELECT id FROM jobs WHERE id < ifnull((SELECT first_job FROM notifications WHERE created_at >= ?1 AND job_count > 0 ORDER BY created_at LIMIT 1), \(Int64.max))
            AND state <> 0 AND finished_at < ?1 AND notif_row NOT IN (SELECT notif_row FROM open_notifs) LIMIT ?2)
        """

    func release(owner: String) async throws {
        // Alone on the file with no other process registered, its open notifications stay as they
        // are for the next start to take over (`start`, `adoptParked`): no row written per job left
        // (a stop with a backlog of 10,000,000 wrote them for over 30 s). A process sharing the file
        // takes them at once as free rows.
        let others = try writer.query("SELECT count(*) AS n FROM owners WHERE owner <> ?", [.text(owner)]).first?.column("n")?.integer ?? 1
        if !exclusive || others > 0 { _ = try materialize(where: "o.owner = +?", [.text(owner)]) }
        _ = try writer.query("UPDATE jobs SET lease_owner = NULL WHERE state = 0 AND lease_owner = ?", [.text(owner)])
        _ = try writer.query("DELETE FROM owners WHERE owner = ?", [.text(owner)])
    }

    func claimDedup(_ k: String, until: Double, now: Double) async throws -> Bool {
        let rows = try writer.query(
            "INSERT INTO dedup (k, hold_until) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET hold_until = excluded.hold_until WHERE dedup.hold_until <= ? RETURNING k",
            [.text(k), .float(until), .float(now)])
        return !rows.isEmpty
    }

    func lockWindow(_ k: String) async throws -> CoalesceWindow? {
        // The transaction is BEGIN IMMEDIATE: nobody else writes meanwhile.
        let rows = try writer.query("SELECT window_end, held_job, seconds FROM coalesce_windows WHERE k = ?", [.text(k)])
        guard let r = rows.first, let end = r.column("window_end")?.double, let seconds = r.column("seconds")?.double else { return nil }
        let held = r.column("held_job").flatMap { $0.isNull ? nil : $0.integer }.flatMap { UInt64(exactly: $0) }
        return CoalesceWindow(end: end, held: held, seconds: seconds)
    }

    func saveWindow(_ k: String, _ w: CoalesceWindow) async throws {
        _ = try writer.query(
            """
            INSERT INTO coalesce_windows (k, window_end, held_job, seconds, expires) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(k) DO UPDATE SET window_end = excluded.window_end, held_job = excluded.held_job, seconds = excluded.seconds, expires = excluded.expires
            """,
            [.text(k), .float(w.end), w.held.map { .integer(Int($0)) } ?? .null, .float(w.seconds), .float(w.expires)])
    }

    func markCoalesced(job: Int64, at: Double) async throws {
        _ = try writer.query(
            "UPDATE jobs SET state = ?, finished_at = ? WHERE id = ? AND state = 0",
            [.integer(DeliveryState.Code.coalesced.rawValue), .float(at), .integer(Int(job))])
    }

    func setNotBefore(job: Int64, _ t: Double) async throws {
        _ = try writer.query("UPDATE jobs SET not_before = ? WHERE id = ?", [.float(t), .integer(Int(job))])
    }

    func cancel(_ request: CancelRequest, now: Double) async throws -> [CancelledRow] {
        var out: [CancelledRow] = []
        // The transaction is BEGIN IMMEDIATE: no lease runs meanwhile. Jobs without a row yet
        // (`WrittenOnce`) are leased to this process: never cancelled here.
        let notifs = try writer.query(
            "SELECT id, app, first_job, job_count FROM notifications WHERE notif_id = ?1 AND (?2 IS NULL OR app = ?2)",
            [.text(request.notifID), request.app.map { SQLiteData.text($0) } ?? .null])
        for n in notifs {
            guard let row = n.column("id")?.integer, let first = n.column("first_job")?.integer, let count = n.column("job_count")?.integer,
                count > 0
            else { continue }
            let app = n.column("app")?.string ?? AppID.defaultApp
            let rows = try writer.query(
                """
                UPDATE jobs SET state = ?, finished_at = ?
                WHERE id BETWEEN ? AND ? AND notif_row = ? AND state = 0 AND lease_owner IS NULL
                RETURNING \(QueueSchema.leasedColumns)
                """,
                [
                    .integer(DeliveryState.Code.cancelled.rawValue), .float(now), .integer(first), .integer(first + count - 1),
                    .integer(row),
                ])
            for r in rows { if let j = Self.storedJob(r) { out.append(CancelledRow(job: j, app: app)) } }
        }
        return out
    }

    func idempotency(_ op: IdempotencyOp) async throws -> IdempotencyClaim? {
        switch op {
        case .claim(let app, let key, let hash, let now, let expires, let abandonBefore):
            let inserted = try writer.query(
                """
                INSERT INTO idempotency (app, k, body_hash, claimed_at, expires) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT(app, k) DO NOTHING RETURNING k
                """, [.text(app), .text(key), .text(hash), .float(now), .float(expires)])
            if !inserted.isEmpty { return .claimed }
            let rows = try writer.query(
                "SELECT body_hash, status, body, request_id, notif_ids, claimed_at, expires FROM idempotency WHERE app = ? AND k = ?",
                [.text(app), .text(key)])
            if let r = rows.first,
                let decided = IdempotencyClaim.decide(
                    storedHash: r.column("body_hash")?.string ?? "", status: r.column("status").flatMap { $0.isNull ? nil : $0.integer },
                    body: r.column("body").flatMap { $0.isNull ? nil : $0.string }, requestID: r.column("request_id")?.string ?? "",
                    notifIDs: r.column("notif_ids")?.string ?? "", claimedAt: r.column("claimed_at")?.double ?? 0,
                    expires: r.column("expires")?.double ?? 0, bodyHash: hash, now: now, abandonBefore: abandonBefore)
            {
                return decided
            }
            _ = try writer.query(
                """
                UPDATE idempotency SET body_hash = ?, status = NULL, body = NULL, request_id = '', notif_ids = '', claimed_at = ?, expires = ?
                WHERE app = ? AND k = ?
                """, [.text(hash), .float(now), .float(expires), .text(app), .text(key)])
            return .claimed
        case .finish(let app, let key, let a):
            _ = try writer.query(
                "UPDATE idempotency SET status = ?, body = ?, request_id = ?, notif_ids = ? WHERE app = ? AND k = ?",
                [.integer(a.status), .text(String(decoding: a.body, as: UTF8.self)), .text(a.requestID), .text(a.notifIDs), .text(app), .text(key)])
            return nil
        case .release(let app, let key):
            _ = try writer.query("DELETE FROM idempotency WHERE app = ? AND k = ? AND status IS NULL", [.text(app), .text(key)])
            return nil
        }
    }

    func pruneGuards(now: Double, limit: Int) async throws -> Bool {
        var more = false
        for sql in [
            "DELETE FROM dedup WHERE k IN (SELECT k FROM dedup WHERE hold_until < ? LIMIT ?)",
            "DELETE FROM coalesce_windows WHERE k IN (SELECT k FROM coalesce_windows WHERE expires < ? LIMIT ?)",
            "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency WHERE expires < ? LIMIT ?)",
        ] {
            _ = try writer.query(sql, [.float(now), .integer(limit)])
            if writer.changes() >= limit { more = true }
        }
        return more
    }

    /// The state code of a job (nil: no such row).
    func jobState(_ id: Int64) async throws -> Int? {
        try await reader.query("SELECT state FROM jobs WHERE id = ?", [.integer(Int(id))]).first?.column("state")?.integer
    }
}
