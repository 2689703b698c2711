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

/// The embedded engine: one SQLite file in WAL mode. One connection writes (every transaction of the
/// queue's writer), one reads (status queries, stored notifications).
final class SQLiteBackend: QueueBackend, @unchecked Sendable {
    // @unchecked: the connections are thread-safe (SQLITE_OPEN_FULLMUTEX); `lockFD` is set once in `open`.
    let path: String
    let writer: WriterConnection
    let reader: SQLiteConnection
    let exclusive: Bool
    private let lockFD: Int32
    private let logger: Logger
    private let checkpoints: WALCheckpointer

    private let writerThreads: WriterThreads
    /// Alone on the store: job ids reserved in `pushgate_meta` and not handed out yet (`allocate`).
    private let reservedIDs = NIOLockedValueBox<Range<Int64>>(0..<0)
    /// The last open notification a prune pass examined (`prune`: the next pass goes on after it).
    let closeCursor = NIOLockedValueBox<Int64>(0)
    /// The owner `openOnInsert` set the writer connection's trigger up for.
    let openOwner = NIOLockedValueBox<String?>(nil)

    private init(
        path: String, writer: WriterConnection, writerThreads: WriterThreads, reader: SQLiteConnection, exclusive: Bool, lockFD: Int32,
        checkpoints: WALCheckpointer, logger: Logger
    ) {
        self.path = path
        self.writer = writer
        self.writerThreads = writerThreads
        self.reader = reader
        self.exclusive = exclusive
        self.lockFD = lockFD
        self.checkpoints = checkpoints
        self.logger = logger
    }

    static let schemaVersion = QueueSchema.sqliteVersion

    /// Creates the database file 0600 before SQLite does (SQLite would make it 0644, and gives its
    /// -wal and -shm files the database file's mode), and takes group/other access away from an
    /// existing store and its -wal/-shm files.
    static func restrictPermissions(path: String, logger: Logger) throws {
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw SQLiteSetupError(description: "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        Glibc.close(fd)
        for file in [path, path + "-wal", path + "-shm"] {
            var st = stat()
            guard stat(file, &st) == 0, st.st_mode & 0o077 != 0 else { continue }
            if chmod(file, st.st_mode & 0o700) == 0 {
                logger.notice("\(file): group and other access removed (the queue holds tokens and message bodies)")
            }
        }
    }

    struct SQLiteSetupError: Error, CustomStringConvertible {
        var description: String
    }

    static func open(
        path: String, synchronous: String, checkpointInterval: Duration = .milliseconds(200), restartFrames: Int = 4096,
        logger: Logger
    ) async throws -> SQLiteBackend {
        let dir = (path as NSString).deletingLastPathComponent
        if !dir.isEmpty, !FileManager.default.fileExists(atPath: dir) {
            // The store holds tokens, message bodies and subscription keys: owner only.
            try FileManager.default.createDirectory(
                atPath: dir, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        try restrictPermissions(path: path, logger: logger)
        // One process owns a SQLite queue: the file lock tells whether leases left in the file are stale.
        let fd = Glibc.open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        var exclusive = false
        if fd >= 0 {
            exclusive = flock(fd, LOCK_EX | LOCK_NB) == 0
        }
        if !exclusive {
            logger.warning(
                "another process holds \(path).lock: sharing the SQLite queue (leases of a stopped process expire after queue.lease_timeout)")
        }
        // The queue's writer task runs on an event loop of its own (`WriterThreads`), and the writer
        // connection's statements run there (`WriterConnection`): on the shared loops each of a
        // transaction's statements waited for threads busy with the network (the writer's group
        // commits took ~4 ms each in the bench, ~2 ms so), and acceptance waits for those commits.
        let threads = WriterThreads()
        let writer: WriterConnection
        do {
            writer = try WriterConnection.open(path: path)
        } catch {
            if fd >= 0 { Glibc.close(fd) }
            throw error
        }
        let reader: SQLiteConnection
        let checkpoints: WALCheckpointer
        let sync = synchronous == "full" ? "FULL" : "NORMAL"
        do {
            _ = try writer.query("PRAGMA journal_mode=WAL")
            _ = try writer.query("PRAGMA synchronous=\(sync)")
            _ = try writer.query("PRAGMA temp_store=MEMORY")
            _ = try writer.query("PRAGMA cache_size=-16000")
            // Checkpoints run beside the writer (WALCheckpointer), not inside its commits.
            _ = try writer.query("PRAGMA wal_autocheckpoint=0")
            for sql in schema + WrittenOnce.tables { _ = try writer.query(sql) }
            // Older stores: add the columns they lack (a version-1 store's rows belong to the default app).
            for c in QueueSchema.addedColumns + WrittenOnce.addedColumns + [WrittenOnce.runColumn] {
                let has = try writer.query(
                    "SELECT count(*) AS n FROM pragma_table_info('\(c.table)') WHERE name = '\(c.column)'")
                if has.first?.column("n")?.integer == 0 {
                    _ = try writer.query(QueueSchema.sqlite.addColumn(c))
                }
            }
            for sql in WrittenOnce.indexes { _ = try writer.query(sql) }
            let version = try writer.query("SELECT value FROM pushgate_meta WHERE key = 'schema_version'").first?.column("value")?.integer ?? 0
            // A newer store's rows may mean what this version cannot read (narrow outcome rows since 5).
            if version > schemaVersion {
                throw QueueStoreError("\(path): the queue schema is version \(version), newer than this Pushgate (\(schemaVersion))")
            }
            if version < 4 {
                logger.notice("\(path): queue schema version \(version) → \(schemaVersion) (job ranges of the stored notifications)")
                try await transaction(on: writer) {
                    for sql in WrittenOnce.migration { _ = try writer.query(sql) }
                }
            }
            _ = try writer.query("UPDATE pushgate_meta SET value = \(schemaVersion) WHERE key = 'schema_version' AND value < \(schemaVersion)")
            reader = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
            do {
                checkpoints = try await WALCheckpointer.start(
                    path: path, synchronous: sync, interval: checkpointInterval,
                    restartFrames: restartFrames, logger: logger)
            } catch {
                try? await reader.close()
                throw error
            }
        } catch {
            writer.close()
            if fd >= 0 { Glibc.close(fd) }
            throw error
        }
        return SQLiteBackend(
            path: path, writer: writer, writerThreads: threads, reader: reader, exclusive: exclusive, lockFD: fd, checkpoints: checkpoints,
            logger: logger)
    }

    /// Between transactions: when the background checkpoints leave the WAL long, the writer copies the
    /// few frames committed since the last one, so its next transaction starts the WAL over.
    func afterCommit() async {
        guard checkpoints.takeFinishRequest() else { return }
        _ = try? writer.query("PRAGMA wal_checkpoint(RESTART)")
        checkpoints.finished()
    }

    static let schema = QueueSchema.sqlite.statements

    var eventLoop: (any EventLoop)? { writerThreads.loop }

    func start(owner: String, now: Double, leaseTimeout: Double, adoptParked: Bool) async throws -> StartedStore {
        let adopting = exclusive && adoptParked
        var adopted: [Platform: ParkedJobIDs] = [:]
        var unknown: [Int] = []
        try await transaction {
            if exclusive {
                // Nobody else runs on this file: every lease in it belongs to a stopped or crashed process.
                if adopting {
                    // The open notifications whose jobs all have rows are closed, the rest taken over.
                    _ = try writer.query("DELETE FROM open_notifs AS o WHERE \(WrittenOnce.everyJobHasARow("o"))")
                    _ = try writer.query("UPDATE open_notifs SET owner = ?", [.text(owner)])
                } else {
                    _ = try materialize(where: "1")
                }
                _ = try writer.query("UPDATE jobs SET lease_owner = NULL WHERE state = 0 AND lease_owner IS NOT NULL")
                _ = try writer.query("DELETE FROM owners")
            }
            try await renewLease(owner: owner, until: now + leaseTimeout)
            if !exclusive { _ = try await reclaimExpired(now: now) }
            if adopting { (adopted, unknown) = try await parkedOfOpenNotifications() }
        }
        if !unknown.isEmpty {
            logger.error("queue store: \(unknown.count) open notifications of an unknown platform left as they are (rows \(unknown.prefix(10)))")
        }
        let pending: Int
        if adopting {
            let rows = try await reader.query("SELECT \(Self.pendingRowsSQL) AS n").first?.column("n")?.integer ?? 0
            pending = rows + adopted.values.reduce(0) { $0 + $1.count }
        } else {
            pending = try await pendingCount()
        }
        return StartedStore(pending: pending, stats: try await readStats(), adopted: adopted)
    }

    /// Alone on the file, the notifications earlier processes left open are taken over as they are
    /// (`start` with `adoptParked`): their jobs without a row become this process's parked jobs
    /// (`ParkedJobIDs`), read back by id as the workers free up. Writing a row for each of them
    /// instead took 38 s, 1.9 GB of WAL and ~400 MB of memory in one transaction for a backlog of
    /// 10,000,000 (docs/benchmarks.md). A notification's jobs are the ids `notif_row ..< notif_row +
    /// job_count`; any row among them stands for its job (retried, finished), and a pending row is
    /// leased as any free row is. Returns those ids by platform, and the open notifications of a
    /// platform this build does not know (left as they are).
    private func parkedOfOpenNotifications() async throws -> (adopted: [Platform: ParkedJobIDs], unknown: [Int]) {
        var adopted: [Platform: ParkedJobIDs] = [:]
        var unknown: [Int] = []
        let open = try writer.query(
            "SELECT o.notif_row AS r, o.job_count AS c, n.platform AS p FROM open_notifs o JOIN notifications n ON n.id = o.notif_row ORDER BY o.notif_row"
        )
        // The rows among their jobs, as id ranges (a run row stands for its run).
        let withRows = try writer.query(
            """
            SELECT coalesce(j.run_first, j.id) AS lo, j.id AS hi FROM open_notifs o
            JOIN jobs j ON j.id BETWEEN o.notif_row AND o.notif_row + o.job_count - 1 ORDER BY j.id
            """)
        var rows = withRows.lazy.compactMap { r -> ClosedRange<Int64>? in
            guard let lo = r.column("lo")?.integer, let hi = r.column("hi")?.integer, lo <= hi else { return nil }
            return Int64(lo)...Int64(hi)
        }.makeIterator()
        var nextRow = rows.next()
        for o in open {
            guard let first = o.column("r")?.integer, let count = o.column("c")?.integer, count > 0,
                first <= Int.max - count, let p = o.column("p")?.integer
            else { continue }
            guard let platform = Platform(stored: p) else {
                unknown.append(first)
                continue
            }
            for id in Int64(first)..<Int64(first + count) {
                while let r = nextRow, r.upperBound < id { nextRow = rows.next() }
                if let r = nextRow, r.contains(id) { continue }
                adopted[platform, default: ParkedJobIDs()].append(id)
            }
        }
        return (adopted, unknown)
    }

    /// Pending jobs, counted as free + leased + the jobs of the open notifications (`WrittenOnce`; an
    /// upper bound: their jobs written over are counted until a prune pass closes them). Each of the
    /// first two matches the predicate of a partial index (`jobs_free`, `jobs_leased`), so retained
    /// finished rows are never read.
    static let pendingCountSQL = "SELECT \(pendingRowsSQL) + (SELECT coalesce(sum(job_count), 0) FROM open_notifs) AS n"
    /// The pending jobs that have a row: free + leased.
    static let pendingRowsSQL =
        "(SELECT count(*) FROM jobs WHERE state = 0 AND lease_owner IS NULL) + (SELECT count(*) FROM jobs WHERE state = 0 AND lease_owner IS NOT NULL)"

    /// Writes the rows of the jobs without one of the open notifications matching `condition` (on
    /// `o`, their `open_notifs` rows), free, and deletes those `open_notifs` rows (`WrittenOnce`).
    /// Returns how many rows it wrote.
    func materialize(where condition: String, _ binds: [SQLiteData] = []) throws -> Int {
        let (insert, forget) = WrittenOnce.materialize(where: condition)
        _ = try writer.query(insert, binds)
        let n = writer.changes()
        _ = try writer.query(forget, binds)
        return n
    }

    func pendingCount() async throws -> Int {
        let rows = try await reader.query(Self.pendingCountSQL)
        return rows.first?.column("n")?.integer ?? 0
    }

    /// As `start` counts (`adoptParked`): the pending rows plus the jobs of the open notifications
    /// without a row. Exact where `pendingCount` is an upper bound; it reads the rows of the open
    /// notifications' jobs (once, at shutdown).
    func pendingAtRest() async throws -> Int {
        let rows = try await reader.query(
            """
            SELECT \(Self.pendingRowsSQL) + (SELECT coalesce(sum(job_count), 0) FROM open_notifs)
              - (SELECT coalesce(sum(\(WrittenOnce.runWeight("j"))), 0) FROM open_notifs o
                 JOIN jobs j ON j.id BETWEEN o.notif_row AND o.notif_row + o.job_count - 1) AS n
            """)
        return rows.first?.column("n")?.integer ?? 0
    }

    func finishedCutoff(keeping keep: Int) async throws -> Double? {
        // Cheap bound first (two primary-key seeks): ids only grow, so the table holds at most
        // max - min + 1 rows. Past it, a walk of `keep` finished rows from the newest id down: the
        // finish time of the `keep`-th newest by id (ids follow acceptance, so a job retried for long
        // counts by when it was accepted; there is no index by finish time, `QueueSchema.finishedIndex`).
        // A run row stands for its run's jobs (`WrittenOnce`): where one is among the newest `keep`
        // rows, the walk counts each row's jobs instead (a window sum, several times slower per row,
        // so not where every row is one job).
        let span = try await reader.query(
            "SELECT (SELECT coalesce(run_first, id) FROM jobs ORDER BY id LIMIT 1) AS lo, (SELECT max(id) FROM jobs) AS hi"
        ).first
        guard let lo = span?.column("lo")?.integer, let hi = span?.column("hi")?.integer, hi - lo + 1 > keep else { return nil }
        if let row = try await reader.query(Self.finishedCutoffSQL, [.integer(max(0, keep - 1))]).first,
            let id = row.column("id")?.integer,
            try await reader.query("SELECT 1 AS x FROM jobs WHERE run_first IS NOT NULL AND id >= ? LIMIT 1", [.integer(id)]).isEmpty
        {
            return row.column("finished_at")?.double
        }
        if try await reader.query("SELECT 1 AS x FROM jobs WHERE run_first IS NOT NULL LIMIT 1").isEmpty { return nil }
        return try await reader.query(Self.finishedCutoffByJobsSQL, [.integer(keep)]).first?.column("finished_at")?.double
    }

    static let finishedCutoffSQL =
        "SELECT id, finished_at FROM jobs WHERE state <> 0 AND finished_at IS NOT NULL ORDER BY id DESC LIMIT 1 OFFSET ?"
    /// `finishedCutoffSQL` counting the jobs of run rows: the finish time of the row that brings the
    /// count of finished jobs, newest id first, to ?1.
    static let finishedCutoffByJobsSQL = """
        SELECT finished_at FROM (
          SELECT finished_at, sum(\(WrittenOnce.runWeight("jobs"))) OVER (ORDER BY id DESC ROWS UNBOUNDED PRECEDING) AS c
          FROM jobs WHERE state <> 0 AND finished_at IS NOT NULL)
        WHERE c >= ? LIMIT 1
        """

    private func transaction<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await Self.transaction(on: writer, body)
        } catch {
            // A reservation made in the rolled-back transaction is gone from the store: forget it
            // (and the trigger's owner, whose row may have been rolled back too).
            reservedIDs.withLockedValue { $0 = 0..<0 }
            openOwner.withLockedValue { $0 = nil }
            throw error
        }
    }

    /// `body` in one write transaction on `connection` (rolled back when it throws).
    private static func transaction<T>(on connection: WriterConnection, _ body: () async throws -> T) async throws -> T {
        try connection.query("BEGIN IMMEDIATE")
        do {
            let r = try await body()
            try connection.query("COMMIT")
            return r
        } catch {
            _ = try? connection.query("ROLLBACK")
            throw error
        }
    }

    /// The first of `jobs` new job ids (a notification's row id is its first job's id).
    ///
    /// Alone on the store, ids are reserved `idBlock` at a time and handed out from memory: a
    /// transaction that inserts does not rewrite `pushgate_meta` each time (a statement and a page
    /// of WAL per commit). A crash or a rollback leaves the rest of a block unused, never used twice
    /// (the reservation commits with the first inserts that use it; `transaction` forgets a
    /// reservation rolled back). Processes sharing the store allocate in each transaction.
    func allocate(jobs: Int) async throws -> Int64 {
        let n = Int64(jobs)
        if exclusive,
            let first = reservedIDs.withLockedValue({ r -> Int64? in
                guard r.count >= n else { return nil }
                defer { r = (r.lowerBound + n)..<r.upperBound }
                return r.lowerBound
            })
        {
            return first
        }
        let take = exclusive ? max(jobs, Self.idBlock) : jobs
        let rows = try writer.query(
            "UPDATE pushgate_meta SET value = value + ? WHERE key = 'next_job_id' RETURNING value", [.integer(take)])
        guard let last = rows.first?.column("value")?.integer, last >= take, last < Int.max else {
            throw QueueStoreError("pushgate_meta has no usable next_job_id")
        }
        let first = Int64(last - take + 1)
        if exclusive { reservedIDs.withLockedValue { $0 = (first + n)..<(Int64(last) + 1) } }
        return first
    }

    /// Job ids reserved at a time alone on the store (`allocate`).
    static let idBlock = 65_536

    func commit(_ batch: WriteBatch, owner: String, now: Double, leaseTimeout: Double, gate: CommitGate) async throws -> WriteResult {
        try await transaction {
            let result = try await batch.run(self, owner: owner, now: now, leaseTimeout: leaseTimeout)
            guard gate.enter() else { throw StoreUnavailableError(.timeout) }
            return result
        }
    }

    func insertRows(_ table: String, columns: Int, rows: Int, binds: [SQLiteData]) async throws {
        let one = "(" + Array(repeating: "?", count: columns).joined(separator: ", ") + ")"
        let values = Array(repeating: one, count: rows).joined(separator: ", ")
        _ = try writer.query("INSERT INTO \(table) VALUES \(values)", binds)
    }

    func insertJobs(_ binds: [SQLiteData], rows: Int) async throws {
        try await insertRows(
            "jobs (id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, not_before, enqueued_at, lease_owner)",
            columns: 12, rows: rows, binds: binds)
    }

    static func storedJob(_ row: some StoreRow) -> StoredJob? {
        guard let id = row.column("id")?.integer, let notifRow = row.column("notif_row")?.integer,
            let p = row.column("platform")?.integer, let platform = Platform(stored: p)
        else { return nil }
        let lastError = row.column("last_error").flatMap { $0.isNull ? nil : $0.string }
        let keys = row.column("target_keys").flatMap { $0.isNull ? nil : $0.string }
        return StoredJob(
            id: Int64(id), notifRow: Int64(notifRow), platform: platform,
            target: TargetCodec.decode(kind: row.column("target_kind")?.integer ?? 0, value: row.column("target")?.string ?? "", keys: keys),
            messageID: row.column("message_id")?.string ?? "",
            attempts: row.column("attempts")?.integer ?? 0, maxAttempts: row.column("max_attempts")?.integer ?? 1,
            credentialRetryUsed: (row.column("cred_retry")?.integer ?? 0) != 0,
            notBefore: row.column("not_before")?.double ?? 0, enqueuedAt: row.column("enqueued_at")?.double ?? 0,
            lastError: lastError)
    }

    func notifications(_ rows: [Int64]) async throws -> [Int64: StoredNotification] {
        var out: [Int64: StoredNotification] = [:]
        var i = 0
        while i < rows.count {
            let chunk = rows[i..<min(rows.count, i + 500)]
            i += chunk.count
            let marks = Array(repeating: "?", count: chunk.count).joined(separator: ", ")
            for r in try await reader.query(
                "SELECT id, notif_id, body, app, traceparent FROM notifications WHERE id IN (\(marks))", chunk.map { .integer(Int($0)) })
            {
                if let id = r.column("id")?.integer, let n = r.column("notif_id")?.string, let b = r.column("body")?.string {
                    out[Int64(id)] = StoredNotification(
                        notifID: n, body: b, app: r.column("app")?.string ?? AppID.defaultApp, traceParent: r.column("traceparent")?.string)
                }
            }
        }
        return out
    }

    func status(notifID: String) async throws -> [StoredStatus]? {
        // The job rows of the notifications with this id (a narrow outcome row's target and time
        // from its `jobs_data` entry), the jobs of their run rows (each from its entry, the outcome
        // from the run's row), and their jobs without a row yet (`WrittenOnce`).
        func entry(_ k: Int) -> String { "(n.jobs_data ->> ('$[' || (j.id - n.id) || '][\(k)]'))" }
        let rows = try await reader.query(
            """
            SELECT j.id, j.platform, iif(j.target_kind >= 0, j.target_kind, \(entry(0))) AS target_kind,
                   iif(j.target_kind >= 0, j.target, \(entry(1))) AS target, iif(j.target_kind >= 0, j.target_keys, \(entry(2))) AS target_keys,
                   j.state, j.attempts, iif(j.target_kind >= 0, j.not_before, n.created_at + \(entry(6))) AS not_before,
                   j.last_error, iif(j.target_kind = \(WrittenOnce.RowsJSON.providerIDIsMessageID), \(entry(3)), j.provider_id) AS provider_id,
                   j.finished_at, n.app, n.fallback
            FROM notifications n JOIN jobs j ON j.id BETWEEN n.first_job AND n.first_job + n.job_count - 1 AND j.notif_row = n.id
            WHERE n.notif_id = ?1 AND j.run_first IS NULL
            UNION ALL
            SELECT n.id + e.key, n.platform, e.value ->> 0, e.value ->> 1, e.value ->> 2, r.state, r.attempts, n.created_at + (e.value ->> 6),
                   NULL, e.value ->> 3, r.finished_at, n.app, n.fallback
            FROM notifications n, json_each(n.jobs_data) e
            JOIN jobs r ON r.id = (SELECT min(x.id) FROM jobs x WHERE x.id >= n.id + e.key) AND r.run_first <= n.id + e.key
            WHERE n.notif_id = ?1 AND e.type = 'array'
            UNION ALL
            SELECT v.id, v.platform, v.target_kind, v.target, v.target_keys, 0, v.attempts, v.not_before, NULL, NULL, NULL, n.app, n.fallback
            FROM (\(WrittenOnce.virtualJobs(where: "n.notif_id = ?1"))) v JOIN notifications n ON n.id = v.notif_row
            ORDER BY 1
            """, [.text(notifID)])
        if rows.isEmpty {
            let known = try await reader.query("SELECT 1 AS x FROM notifications WHERE notif_id = ? LIMIT 1", [.text(notifID)])
            return known.isEmpty ? nil : []
        }
        // The notifications' `analytics_label`, by app (one small read, not one per delivery).
        var labels: [String: String] = [:]
        for r in try await reader.query(
            "SELECT app, json_extract(body, '$.analytics_label') AS label FROM notifications WHERE notif_id = ?", [.text(notifID)])
        {
            if let label = r.column("label").flatMap({ $0.isNull ? nil : $0.string }) { labels[r.column("app")?.string ?? AppID.defaultApp] = label }
        }
        return rows.map { r in
            func str(_ c: String) -> String? { r.column(c).flatMap { $0.isNull ? nil : $0.string } }
            let record = storedStatusRecord(
                platform: Platform(stored: r.column("platform")?.integer ?? 0) ?? .none,
                target: TargetCodec.decode(kind: r.column("target_kind")?.integer ?? 0, value: str("target") ?? "", keys: str("target_keys")),
                state: r.column("state")?.integer ?? 0, attempts: r.column("attempts")?.integer ?? 0,
                notBefore: r.column("not_before")?.double ?? 0, lastError: str("last_error"), providerID: str("provider_id"),
                finishedAt: r.column("finished_at").flatMap { $0.isNull ? nil : $0.double }, app: str("app") ?? AppID.defaultApp,
                fallback: str("fallback"))
            var labelled = record
            labelled.analyticsLabel = labels[record.app]
            return StoredStatus(jobID: Int64(r.column("id")?.integer ?? 0), record: labelled)
        }
    }

    func parkedJobs(_ ranges: [ClosedRange<Int64>], owner: String) async throws -> [StoredJob] {
        var jobs: [StoredJob] = []
        // The open notifications of `owner` (?3) whose jobs overlap ?1...?2: from the last one opened
        // at or before ?1.
        let overlapping = "o.owner = +?3 AND o.notif_row BETWEEN coalesce((SELECT max(notif_row) FROM open_notifs WHERE notif_row <= ?1), ?1) AND ?2"
        for r in ranges {
            let binds: [SQLiteData] = [.integer(Int(r.lowerBound)), .integer(Int(r.upperBound)), .text(owner)]
            // Rows (jobs retried, or under a dedup or coalescing rule): the pending ones leased to
            // `owner` are read back, and any row stands for its job (its `jobs_data` entry is not one).
            var rowIDs = Set<Int64>()
            var found: [StoredJob] = []
            // (A parked job is never delivered, so no run row covers one: the runs found here are
            // delivered jobs around the range, left out as any row's.)
            for row in try await reader.query(
                "SELECT \(QueueSchema.leasedColumns), state, lease_owner, run_first FROM jobs WHERE id BETWEEN ?1 AND ?2", Array(binds[0..<2]))
            {
                guard let id = row.column("id")?.integer else { continue }
                if let first = row.column("run_first")?.integer, first < id {
                    for covered in Int64(max(first, Int(r.lowerBound)))..<Int64(id) { rowIDs.insert(covered) }
                }
                rowIDs.insert(Int64(id))
                if row.column("state")?.integer == 0, row.column("lease_owner")?.string == owner, let j = Self.storedJob(row) {
                    found.append(j)
                }
            }
            // Jobs without a row yet of the open notifications of `owner` that overlap the range
            // (`WrittenOnce`): their `jobs_data`, decoded here.
            var decoded = true
            for row in try await reader.query(
                """
                SELECT n.id, n.platform, n.created_at, n.jobs_data FROM open_notifs o JOIN notifications n ON n.id = o.notif_row
                WHERE \(overlapping)
                """, binds)
            {
                guard let first = row.column("id")?.integer, let p = row.column("platform")?.integer, let platform = Platform(stored: p),
                    let createdAt = row.column("created_at")?.double, let data = row.column("jobs_data")?.string,
                    let entries = WrittenOnce.decode(data, firstID: Int64(first), range: r)
                else {
                    decoded = false
                    break
                }
                for (id, e) in entries where !rowIDs.contains(id) {
                    found.append(
                        StoredJob(
                            id: id, notifRow: Int64(first), platform: platform,
                            target: TargetCodec.decode(kind: e.kind, value: e.value, keys: e.keys), messageID: e.messageID,
                            attempts: e.attempts, maxAttempts: e.maxAttempts, credentialRetryUsed: false,
                            notBefore: createdAt + e.notBefore, enqueuedAt: createdAt + e.enqueuedAt, lastError: nil))
                }
            }
            if decoded {
                found.sort { $0.id < $1.id }
                jobs += found
                continue
            }
            // Text this process did not write as `WrittenOnce.encode` does: SQLite's own JSON reader.
            let virtual = WrittenOnce.virtualJobs(
                where: "\(overlapping) AND n.id + j.key BETWEEN ?1 AND ?2")
            for row in try await reader.query(
                """
                SELECT \(QueueSchema.leasedColumns) FROM jobs WHERE id BETWEEN ?1 AND ?2 AND state = 0 AND lease_owner = +?3
                UNION ALL \(virtual) ORDER BY 1
                """, binds)
            {
                if let j = Self.storedJob(row) { jobs.append(j) }
            }
        }
        return jobs
    }

    func close() async {
        await checkpoints.stop()
        try? await reader.close()
        _ = try? writer.query("PRAGMA wal_checkpoint(TRUNCATE)")
        writer.close()
        if lockFD >= 0 { Glibc.close(lockFD) }
    }
}
