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
    private let closeCursor = NIOLockedValueBox<Int64>(0)
    /// The owner `openOnInsert` set the writer connection's trigger up for.
    private let openOwner = NIOLockedValueBox<String?>(nil)

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
            for c in QueueSchema.addedColumns + WrittenOnce.addedColumns {
                let has = try writer.query(
                    "SELECT count(*) AS n FROM pragma_table_info('\(c.table)') WHERE name = '\(c.column)'")
                if has.first?.column("n")?.integer == 0 {
                    _ = try writer.query(QueueSchema.sqlite.addColumn(c))
                }
            }
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
        let withRows = try writer.query(
            "SELECT j.id AS id FROM open_notifs o JOIN jobs j ON j.id BETWEEN o.notif_row AND o.notif_row + o.job_count - 1 ORDER BY j.id")
        var rows = withRows.lazy.compactMap { $0.column("id")?.integer.map(Int64.init) }.makeIterator()
        var nextRow = rows.next()
        for o in open {
            guard let first = o.column("r")?.integer, let count = o.column("c")?.integer, count > 0,
                first <= Int.max - count, let p = o.column("p")?.integer
            else { continue }
            guard let platform = Platform(rawValue: p) else {
                unknown.append(first)
                continue
            }
            for id in Int64(first)..<Int64(first + count) {
                while let r = nextRow, r < id { nextRow = rows.next() }
                if nextRow == id { continue }
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
    private func materialize(where condition: String, _ binds: [SQLiteData] = []) throws -> Int {
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
              - (SELECT count(*) FROM open_notifs o JOIN jobs j ON j.id BETWEEN o.notif_row AND o.notif_row + o.job_count - 1) AS n
            """)
        return rows.first?.column("n")?.integer ?? 0
    }

    func finishedCutoff(keeping keep: Int) async throws -> Double? {
        // Cheap bound first (two primary-key seeks): ids only grow, so the table holds at most
        // max - min + 1 rows. Past it, a walk of `keep` finished rows from the newest id down: the
        // finish time of the `keep`-th newest by id (ids follow acceptance, so a job retried for long
        // counts by when it was accepted; there is no index by finish time, `QueueSchema.finishedIndex`).
        let span = try await reader.query("SELECT (SELECT min(id) FROM jobs) AS lo, (SELECT max(id) FROM jobs) AS hi").first
        guard let lo = span?.column("lo")?.integer, let hi = span?.column("hi")?.integer, hi - lo + 1 > keep else { return nil }
        return try await reader.query(Self.finishedCutoffSQL, [.integer(max(0, keep - 1))]).first?.column("finished_at")?.double
    }

    static let finishedCutoffSQL =
        "SELECT finished_at FROM jobs WHERE state <> 0 AND finished_at IS NOT NULL ORDER BY id DESC LIMIT 1 OFFSET ?"

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
    private func allocate(jobs: Int) async throws -> Int64 {
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

    private func insertRows(_ table: String, columns: Int, rows: Int, binds: [SQLiteData]) async throws {
        let one = "(" + Array(repeating: "?", count: columns).joined(separator: ", ") + ")"
        let values = Array(repeating: one, count: rows).joined(separator: ", ")
        _ = try writer.query("INSERT INTO \(table) VALUES \(values)", binds)
    }

    private func insertJobs(_ binds: [SQLiteData], rows: Int) async throws {
        try await insertRows(
            "jobs (id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, not_before, enqueued_at, lease_owner)",
            columns: 12, rows: rows, binds: binds)
    }

    static func storedJob(_ row: some StoreRow) -> StoredJob? {
        guard let id = row.column("id")?.integer, let notifRow = row.column("notif_row")?.integer,
            let p = row.column("platform")?.integer, let platform = Platform(rawValue: p)
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
        // from its `jobs_data` entry), and their jobs without a row yet (`WrittenOnce`).
        func entry(_ k: Int) -> String { "(n.jobs_data ->> ('$[' || (j.id - n.id) || '][\(k)]'))" }
        let rows = try await reader.query(
            """
            SELECT j.id, j.platform, iif(j.target_kind >= 0, j.target_kind, \(entry(0))) AS target_kind,
                   iif(j.target_kind >= 0, j.target, \(entry(1))) AS target, iif(j.target_kind >= 0, j.target_keys, \(entry(2))) AS target_keys,
                   j.state, j.attempts, iif(j.target_kind >= 0, j.not_before, n.created_at + \(entry(6))) AS not_before,
                   j.last_error, iif(j.target_kind = \(WrittenOnce.RowsJSON.providerIDIsMessageID), \(entry(3)), j.provider_id) AS provider_id,
                   j.finished_at, n.app, n.fallback
            FROM notifications n JOIN jobs j ON j.id BETWEEN n.first_job AND n.first_job + n.job_count - 1 AND j.notif_row = n.id
            WHERE n.notif_id = ?1
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
                platform: Platform(rawValue: r.column("platform")?.integer ?? 1) ?? .ios,
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
            for row in try await reader.query(
                "SELECT \(QueueSchema.leasedColumns), state, lease_owner FROM jobs WHERE id BETWEEN ?1 AND ?2", Array(binds[0..<2]))
            {
                guard let id = row.column("id")?.integer else { continue }
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
                guard let first = row.column("id")?.integer, let p = row.column("platform")?.integer, let platform = Platform(rawValue: p),
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
            case .complete(let id, let state, let attempts, let info, let finishedAt, _):
                let delivered = state == .delivered
                completes += [
                    .integer(Int(id)), .integer(state.rawValue), .integer(attempts),
                    delivered ? (info.map { .text($0) } ?? .null) : .null,
                    delivered ? .null : (info.map { .text($0) } ?? .null), .float(finishedAt),
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
    /// (`upsertOutcome`: its description stays in `jobs_data`).
    ///
    /// Outcomes, one per delivery: one kept statement stepped per row, its values bound from the
    /// update (`WriterConnection.executeEach`). Retried rows (rare): one bound JSON array
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
        for u in updates {
            guard case .reschedule(let id, let attempts, let notBefore, let lastError, let cred, let row?) = u else { continue }
            rows.add(
                id: id, row, attempts: attempts, notBefore: notBefore, lastError: lastError, credentialRetryUsed: cred,
                state: .pending, providerID: nil, finishedAt: nil, leaseOwner: owner)
            if rows.count == 1000 { try await flush(Self.upsertRetried) }
        }
        try await flush(Self.upsertRetried)
        let outcomes = updates.indices.filter { if case .complete(_, _, _, _, _, _?) = updates[$0] { true } else { false } }
        try writer.executeEach(Self.upsertOutcome, count: outcomes.count) { k, b in
            guard case .complete(let id, let state, let attempts, let info, let finishedAt, let row?) = updates[outcomes[k]] else {
                // `outcomes` holds exactly these: not reached (a row left unbound would step the last one again).
                throw QueueStoreError("SQLite queue: update \(outcomes[k]) is not an outcome with its job")
            }
            let delivered = state == .delivered
            let providerID = delivered ? info : nil
            let sameID = providerID == row.messageID
            b.int(1, Int(id))
            b.int(2, Int(row.notifRow))
            b.int(3, row.platform.rawValue)
            b.int(4, sameID ? WrittenOnce.RowsJSON.providerIDIsMessageID : WrittenOnce.RowsJSON.narrowOutcome)
            b.int(5, attempts)
            b.text(6, delivered ? row.lastError : info)
            b.int(7, state.rawValue)
            b.text(8, sameID ? nil : providerID)
            b.double(9, finishedAt)
            b.text(10, owner)
        }
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
    /// The narrow outcome row of one job (schema version 5), stepped once per row: its id,
    /// notification, platform, `target_kind` (`RowsJSON.narrowOutcome`, or `providerIDIsMessageID`
    /// with no provider id of its own), attempts, last error, state, provider id, finish time, and
    /// ?10 the lease owner. Its target, message id and times stay in `jobs_data`; when the job has
    /// a row (retried), the upsert updates that row's outcome columns and the rest stays as it is.
    private static let upsertOutcome = """
        INSERT INTO jobs (\(WrittenOnce.RowsJSON.columns.joined(separator: ", ")))
        VALUES (?1, ?2, ?3, ?4, '', NULL, '', ?5, 0, 0, 0, 0, ?6, ?7, ?8, ?9, NULL)
        ON CONFLICT(id) DO UPDATE SET \(outcomeOnConflict) WHERE jobs.lease_owner = +?10
        """
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

/// The event loop the queue's writer task runs on, and with it the writer connection's statements
/// (`WriterConnection`, see `SQLiteBackend.open`). That loop is one per process and never shut down
/// (as NIO's singletons): the writer task calls `close`, and a loop cannot be shut down from its own
/// thread. It only ever runs writer tasks (several queues in one process share it: one transaction
/// at a time, each run to its end without suspending, as its statements do not).
final class WriterThreads: Sendable {
    private static let loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    var loop: any EventLoop { Self.loops.any() }
}

/// Copies WAL frames into the database from its own connection and thread, so commits never wait
/// for a checkpoint.
///
/// With SQLite's automatic checkpoint, the commit that takes the WAL past 1,000 pages copies them
/// into the database and syncs it before it returns, and every request arriving meanwhile waits for
/// it (the p99 latency figure in docs/benchmarks.md). Here a PASSIVE checkpoint runs every `interval` on a
/// separate connection (it takes no writer lock). Under steady writes it never quite catches up
/// (frames keep arriving while it runs), and SQLite only starts the WAL over when every frame has
/// been copied; so when the WAL is longer than `restartFrames` the writer is asked to copy the last
/// few frames itself between two transactions (`SQLiteBackend.afterCommit`), which keeps the WAL
/// bounded at the cost of one short checkpoint now and then.
final class WALCheckpointer: Sendable {
    private enum Phase {
        /// the background checkpoint may run
        case background
        /// it left a long WAL: waiting for the writer to finish it (no background checkpoint meanwhile:
        /// the writer's would find the checkpoint lock taken)
        case finishRequested
        case writerFinishing
    }

    private struct State {
        var phase = Phase.background
        var task: Task<Void, Never>?
        /// A transaction committed since the last background checkpoint (none: nothing to copy, and
        /// an idle gateway makes no query).
        var written = true
        /// The loop's sleep while it backs off (idle): a commit cuts it short.
        var idleSleep: Task<Void, Never>?
    }

    private let connection: SQLiteConnection
    private let pool: NIOThreadPool
    private let state = NIOLockedValueBox(State())
    let interval: Duration
    let restartFrames: Int

    private init(connection: SQLiteConnection, pool: NIOThreadPool, interval: Duration, restartFrames: Int) {
        self.connection = connection
        self.pool = pool
        self.interval = interval
        self.restartFrames = restartFrames
    }

    static func start(
        path: String, synchronous: String, interval: Duration, restartFrames: Int,
        logger: Logger
    ) async throws -> WALCheckpointer {
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let connection: SQLiteConnection
        do {
            connection = try await SQLiteConnection.open(
                storage: .file(path: path), threadPool: pool, logger: logger,
                on: MultiThreadedEventLoopGroup.singleton.any())
            // the checkpoint syncs like the writer's would have
            _ = try await connection.query("PRAGMA synchronous=\(synchronous)")
        } catch {
            try? await pool.shutdownGracefully()
            throw error
        }
        let c = WALCheckpointer(connection: connection, pool: pool, interval: interval, restartFrames: restartFrames)
        let task = Task { await c.loop(logger: logger) }
        c.state.withLockedValue { $0.task = task }
        return c
    }

    private func loop(logger: Logger) async {
        // Every `interval` while transactions are committed; while none are, the sleep doubles up to
        // 5 s and a commit cuts it short (an idle gateway barely wakes, a busy one checkpoints as before).
        var backoff = interval
        let longest = max(interval, .seconds(5))
        while !Task.isCancelled {
            if backoff > interval {
                let nap = backoff
                let sleeper: Task<Void, Never>? = state.withLockedValue { s in
                    if s.written { return nil }
                    let t = Task { _ = try? await Task.sleep(for: nap) }
                    s.idleSleep = t
                    return t
                }
                if let sleeper {
                    await withTaskCancellationHandler {
                        await sleeper.value
                    } onCancel: {
                        sleeper.cancel()
                    }
                    state.withLockedValue { $0.idleSleep = nil }
                }
            } else {
                try? await Task.sleep(for: interval)
            }
            if Task.isCancelled { break }
            let due = state.withLockedValue { s -> Bool in
                guard s.phase == .background, s.written else { return false }
                s.written = false
                return true
            }
            guard due else {
                backoff = min(backoff * 2, longest)
                continue
            }
            backoff = interval
            do {
                // one row: busy, frames in the WAL (`log`), frames copied into the database
                let row = try await connection.query("PRAGMA wal_checkpoint(PASSIVE)").first
                if (row?.column("log")?.integer ?? 0) > restartFrames {
                    state.withLockedValue { $0.phase = .finishRequested }
                }
            } catch {
                logger.warning("WAL checkpoint failed: \(error)")
            }
        }
    }

    /// Called after every commit (which marks the WAL written). True once after a background
    /// checkpoint left a long WAL; the caller then checkpoints with RESTART on the writer connection
    /// and calls `finished()`.
    func takeFinishRequest() -> Bool {
        state.withLockedValue { s in
            s.written = true
            if let nap = s.idleSleep {
                s.idleSleep = nil
                nap.cancel()
            }
            guard s.phase == .finishRequested else { return false }
            s.phase = .writerFinishing
            return true
        }
    }

    func finished() {
        state.withLockedValue { $0.phase = .background }
    }

    func stop() async {
        let task = state.withLockedValue { s -> Task<Void, Never>? in
            defer { s.task = nil }
            return s.task
        }
        task?.cancel()
        await task?.value
        try? await connection.close()
        try? await pool.shutdownGracefully()
    }
}
