import Foundation
import Logging
import NIOCore
import PostgresNIO
import PushDispatch
import PushgateCore

/// The shared engine: several gateway processes on one PostgreSQL database. Jobs are leased with
/// `FOR UPDATE SKIP LOCKED`, so two healthy processes never hold the same job.
final class PostgresBackend: QueueBackend, @unchecked Sendable {
    // @unchecked: `client` is Sendable; `runTask` is set once at open.
    let client: PostgresClient
    private var runTask: Task<Void, Never>?
    let exclusive = false
    private let logger: Logger

    static let schemaVersion = Int64(QueueSchema.version)

    private init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Parses `postgres://user:password@host:port/database?sslmode=disable|prefer|require|verify-ca|verify-full`.
    /// Without `sslmode`: `verify-full` (TLS, the server's certificate checked against the system's
    /// trust roots and the host name) for a host off this machine, `disable` for a loopback one; the
    /// URL's `sslmode` wins. `prefer` falls back to plain text when the server offers no TLS (an
    /// attacker on the path can force that), so it is only ever used when asked for.
    static func configuration(url: String) throws -> PostgresClient.Configuration {
        guard let c = URLComponents(string: url), ["postgres", "postgresql"].contains(c.scheme ?? ""), let host = c.host, !host.isEmpty else {
            throw QueueStoreError("queue.postgres.url: expected postgres://user:password@host:port/database")
        }
        let user = c.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        let password = c.password.flatMap { $0.removingPercentEncoding }
        var db = c.path
        if db.hasPrefix("/") { db.removeFirst() }
        let sslmode = c.queryItems?.first { $0.name == "sslmode" }?.value ?? (isLoopback(host) ? "disable" : "verify-full")
        let tls: PostgresClient.Configuration.TLS
        // swift-nio-ssl's client configuration verifies the certificate chain and the host name:
        // `require` and `verify-ca` are as strict as `verify-full` here.
        switch sslmode {
        case "disable": tls = .disable
        case "prefer", "allow": tls = .prefer(.makeClientConfiguration())
        case "require", "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
        default:
            throw QueueStoreError(
                "queue.postgres.url: sslmode=\(sslmode.prefix(32)) is not one of disable, allow, prefer, require, verify-ca, verify-full")
        }
        var config = PostgresClient.Configuration(
            host: host, port: c.port ?? 5432, username: user, password: password,
            database: db.isEmpty ? nil : db, tls: tls)
        config.options.maximumConnections = 8
        config.options.minimumConnections = 1
        return config
    }

    /// A host name or address of this machine: no network in between, no TLS needed by default.
    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if h == "localhost" || h == "::1" { return true }
        // An IPv4 literal in 127.0.0.0/8 (not a name that merely starts with "127.").
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil } && parts[0] == "127"
    }

    static func open(url: String, logger: Logger) async throws -> PostgresBackend {
        let client = PostgresClient(configuration: try configuration(url: url), backgroundLogger: logger)
        let backend = PostgresBackend(client: client, logger: logger)
        backend.runTask = Task { await client.run() }
        do {
            try await backend.migrate()
        } catch {
            backend.runTask?.cancel()
            throw error
        }
        return backend
    }

    static let schema = QueueSchema.postgres.statements

    /// Creates or migrates the schema; an advisory lock keeps concurrent starts from racing.
    private func migrate() async throws {
        try await client.withTransaction(logger: logger) { conn in
            try await conn.query("SELECT pg_advisory_xact_lock(7270501)", logger: logger)
            for sql in Self.schema { try await conn.query(PostgresQuery(unsafeSQL: sql), logger: logger) }
            var version: Int64 = 0
            for try await v in try await conn.query("SELECT value FROM pushgate_meta WHERE key = 'schema_version'", logger: logger).decode(Int64.self)
            { version = v }
            if version > Self.schemaVersion {
                throw QueueStoreError("the PostgreSQL queue schema is version \(version), newer than this Pushgate (\(Self.schemaVersion))")
            }
            if version < Self.schemaVersion {
                // Older stores: add the columns they lack (a version-1 store's rows belong to the default app).
                for c in QueueSchema.addedColumns {
                    try await conn.query(PostgresQuery(unsafeSQL: QueueSchema.postgres.addColumn(c, ifNotExists: true)), logger: logger)
                }
            }
            try await conn.query(
                "INSERT INTO pushgate_meta (key, value) VALUES ('schema_version', \(Self.schemaVersion)) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                logger: logger)
        }
    }

    /// (`adoptParked`: nothing is parked here, every job has a row.)
    func start(owner: String, now: Double, leaseTimeout: Double, adoptParked: Bool) async throws -> StartedStore {
        let stats = try await client.withTransaction(logger: logger) { conn in
            let statements = PostgresStatements(conn: conn, logger: logger)
            try await statements.renewLease(owner: owner, until: now + leaseTimeout)
            _ = try await statements.reclaimExpired(now: now)
            // Leases whose owner row is gone altogether.
            try await conn.query(
                "UPDATE pushgate_jobs SET lease_owner = NULL WHERE state = 0 AND lease_owner IS NOT NULL AND lease_owner NOT IN (SELECT owner FROM pushgate_owners)",
                logger: logger)
            return try await statements.readStats()
        }
        return StartedStore(pending: try await pendingCount(), stats: stats)
    }

    /// Pending jobs, counted as free + leased: each half matches the predicate of a partial index
    /// (`pushgate_jobs_free`, `pushgate_jobs_leased`), so the count reads only pending rows' index
    /// entries. `WHERE state = 0` alone matches no index and scans every retained finished row
    /// (every heartbeat, every gateway). No schema change: a gateway of the previous version shares
    /// the same store unchanged.
    static let pendingCountSQL = """
        SELECT (SELECT count(*) FROM pushgate_jobs WHERE state = 0 AND lease_owner IS NULL)
             + (SELECT count(*) FROM pushgate_jobs WHERE state = 0 AND lease_owner IS NOT NULL)
        """

    func pendingCount() async throws -> Int {
        var n: Int64 = 0
        for try await c in try await client.query(PostgresQuery(unsafeSQL: Self.pendingCountSQL), logger: logger).decode(Int64.self) { n = c }
        return Int(n)
    }

    func commit(_ batch: WriteBatch, owner: String, now: Double, leaseTimeout: Double, gate: CommitGate) async throws -> WriteResult {
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { conn in
            // Given up while it waited for a connection (the server was gone): nothing to do.
            guard gate.wanted else { throw StoreUnavailableError(.timeout) }
            let result = try await batch.run(PostgresStatements(conn: conn, logger: logger), owner: owner, now: now, leaseTimeout: leaseTimeout)
            guard gate.enter() else { throw StoreUnavailableError(.timeout) }
            return result
        }
    }

    func finishedCutoff(keeping keep: Int) async throws -> Double? {
        // Cheap bound first (two primary-key seeks): the table holds at most max - min + 1 rows.
        // Past it, a walk of `keep` entries of the finished index (`pushgate_jobs_finished`).
        var span: (Int64?, Int64?) = (nil, nil)
        for try await r in try await client.query(
            "SELECT (SELECT min(id) FROM pushgate_jobs), (SELECT max(id) FROM pushgate_jobs)", logger: logger
        ).decode((Int64?, Int64?).self) { span = r }
        guard let lo = span.0, let hi = span.1, hi - lo + 1 > keep else { return nil }
        var out: Double?
        for try await c in try await client.query(
            """
            SELECT finished_at FROM pushgate_jobs WHERE state <> 0 AND finished_at IS NOT NULL
            ORDER BY finished_at DESC LIMIT 1 OFFSET \(max(0, keep - 1))
            """, logger: logger
        ).decode(Double.self) { out = c }
        return out
    }

    func notifications(_ rows: [Int64]) async throws -> [Int64: StoredNotification] {
        var out: [Int64: StoredNotification] = [:]
        let r = try await client.query(
            "SELECT id, notif_id, body, app, traceparent FROM pushgate_notifications WHERE id = ANY(\(rows)::bigint[])", logger: logger)
        for try await (id, n, b, app, trace) in r.decode((Int64, String, String, String, String?).self) {
            out[id] = StoredNotification(notifID: n, body: b, app: app, traceParent: trace)
        }
        return out
    }

    func status(notifID: String) async throws -> [StoredStatus]? {
        var out: [StoredStatus] = []
        let rows = try await client.query(
            """
            SELECT j.id, j.platform, j.target_kind, j.target, j.target_keys, j.state, j.attempts, j.not_before, j.last_error, j.provider_id,
                   j.finished_at, n.app, n.fallback
            FROM pushgate_jobs j JOIN pushgate_notifications n ON n.id = j.notif_row WHERE n.notif_id = \(notifID) ORDER BY j.id
            """, logger: logger)
        for try await (id, p, kind, target, keys, state, att, nb, err, pid, fin, app, fallback) in rows.decode(
            (Int64, Int, Int, String, String?, Int, Int, Double, String?, String?, Double?, String, String?).self)
        {
            let record = storedStatusRecord(
                platform: Platform(stored: p) ?? .none, target: TargetCodec.decode(kind: kind, value: target, keys: keys),
                state: state, attempts: att, notBefore: nb, lastError: err, providerID: pid, finishedAt: fin, app: app,
                fallback: fallback)
            out.append(StoredStatus(jobID: id, record: record))
        }
        if !out.isEmpty {
            // The notifications' `analytics_label`, by app (one small read, not one per delivery).
            // `json`, not `jsonb`: a body holding an escaped NUL (a gRPC string) still reads.
            var labels: [String: String] = [:]
            for try await (app, label) in try await client.query(
                "SELECT app, (body::json ->> 'analytics_label') FROM pushgate_notifications WHERE notif_id = \(notifID)", logger: logger
            ).decode((String, String?).self) {
                if let label { labels[app] = label }
            }
            if !labels.isEmpty { for i in out.indices { out[i].record.analyticsLabel = labels[out[i].record.app] } }
        }
        if out.isEmpty {
            var known = false
            for try await _ in try await client.query("SELECT 1 FROM pushgate_notifications WHERE notif_id = \(notifID) LIMIT 1", logger: logger) {
                known = true
            }
            return known ? [] : nil
        }
        return out
    }

    func close() async {
        runTask?.cancel()
    }

    func jobState(_ id: Int64) async throws -> Int? {
        var out: Int?
        for try await s in try await client.query("SELECT state FROM pushgate_jobs WHERE id = \(id)", logger: logger).decode(Int.self) { out = s }
        return out
    }
}

/// PostgreSQL's statements of the shared commit sequence (`WriteBatch.run`), inside one transaction.
struct PostgresStatements: QueueStatements {
    let conn: PostgresConnection
    let logger: Logger

    func insert(_ inserts: [NotificationInsert], owner: String) async throws -> [(notifRow: Int64, jobIDs: [Int64])] {
        var inserted: [(notifRow: Int64, jobIDs: [Int64])] = []
        let jobCount = inserts.reduce(0) { $0 + $1.jobs.count }
        let notifIDs = try await nextvals("pushgate_notif_seq", inserts.count)
        let jobIDs = try await nextvals("pushgate_job_seq", jobCount)
        var nID: [Int64] = []
        var nNotif: [String] = []
        var nPlat: [Int] = []
        var nBody: [String] = []
        var nAt: [Double] = []
        var nApp: [String] = []
        var nFallback: [String] = []
        var nTrace: [String] = []
        var jID: [Int64] = []
        var jNotif: [Int64] = []
        var jPlat: [Int] = []
        var jKind: [Int] = []
        var jTarget: [String] = []
        var jKeys: [String] = []
        var jMsg: [String] = []
        var jAtt: [Int] = []
        var jMax: [Int] = []
        var jNB: [Double] = []
        var jEnq: [Double] = []
        var jOwner: [String] = []
        var k = 0
        for (i, ins) in inserts.enumerated() {
            let row = notifIDs[i]
            nID.append(row)
            nNotif.append(ins.notifID)
            nPlat.append(ins.platform.rawValue)
            nBody.append(ins.body)
            nAt.append(ins.createdAt)
            nApp.append(ins.app)
            nFallback.append(ins.fallback ?? "")
            nTrace.append(ins.traceParent ?? "")
            var ids: [Int64] = []
            for j in ins.jobs {
                let t = TargetCodec.encode(j.target)
                let id = jobIDs[k]
                k += 1
                ids.append(id)
                jID.append(id)
                jNotif.append(row)
                jPlat.append(ins.platform.rawValue)
                jKind.append(t.kind)
                jTarget.append(t.value)
                jKeys.append(t.keys ?? "")
                jMsg.append(j.messageID)
                jAtt.append(j.attempts)
                jMax.append(j.maxAttempts)
                jNB.append(j.notBefore)
                jEnq.append(j.enqueuedAt)
                jOwner.append(j.leased ? owner : "")
            }
            inserted.append((row, ids))
        }
        try await conn.query(
            """
            INSERT INTO pushgate_notifications (id, notif_id, platform, body, created_at, app, fallback, traceparent)
            SELECT a, b, c, d, e, f, NULLIF(g, ''), NULLIF(h, '')
            FROM unnest(\(nID)::bigint[], \(nNotif)::text[], \(nPlat)::bigint[], \(nBody)::text[], \(nAt)::float8[], \(nApp)::text[],
                        \(nFallback)::text[], \(nTrace)::text[])
              AS u(a, b, c, d, e, f, g, h)
            """, logger: logger)
        try await conn.query(
            """
            INSERT INTO pushgate_jobs (id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, not_before, enqueued_at, lease_owner)
            SELECT a, b, c, d, e, NULLIF(f, ''), g, h, i, j, k, NULLIF(l, '')
            FROM unnest(\(jID)::bigint[], \(jNotif)::bigint[], \(jPlat)::bigint[], \(jKind)::bigint[], \(jTarget)::text[], \(jKeys)::text[],
                        \(jMsg)::text[], \(jAtt)::bigint[], \(jMax)::bigint[], \(jNB)::float8[], \(jEnq)::float8[], \(jOwner)::text[])
              AS u(a, b, c, d, e, f, g, h, i, j, k, l)
            """, logger: logger)
        return inserted
    }

    func apply(_ updates: [JobUpdate], onlyLeasedBy owner: String?) async throws {
        guard !updates.isEmpty else { return }
        var cID: [Int64] = []
        var cState: [Int] = []
        var cAtt: [Int] = []
        var cPid: [String] = []
        var cErr: [String] = []
        var cAt: [Double] = []
        var rID: [Int64] = []
        var rAtt: [Int] = []
        var rNB: [Double] = []
        var rErr: [String] = []
        var rCred: [Int] = []
        for u in updates {
            switch u {
            case .complete(let c):
                let delivered = c.state == .delivered
                cID.append(c.id)
                cState.append(c.state.rawValue)
                cAtt.append(c.attempts)
                cPid.append(delivered ? (c.info ?? "") : "")
                cErr.append(delivered ? "" : (c.info ?? ""))
                cAt.append(c.finishedAt)
            case .reschedule(let id, let attempts, let notBefore, let lastError, let cred, _):
                rID.append(id)
                rAtt.append(attempts)
                rNB.append(notBefore)
                rErr.append(lastError ?? "")
                rCred.append(cred ? 1 : 0)
            }
        }
        // "" never matches a lease owner (owners are UUIDs): no owner means no lease condition.
        let leased = owner ?? ""
        let any = owner == nil
        // Reschedules first: a job retried and then finished within one batch ends finished, with
        // the attempt's error kept (a completion frees the lease, and the reschedule after it would
        // no longer match).
        if !rID.isEmpty {
            try await conn.query(
                """
                UPDATE pushgate_jobs j SET attempts = u.att, not_before = u.nb, last_error = NULLIF(u.err, ''), cred_retry = u.cred
                FROM unnest(\(rID)::bigint[], \(rAtt)::bigint[], \(rNB)::float8[], \(rErr)::text[], \(rCred)::bigint[]) AS u(id, att, nb, err, cred)
                WHERE j.id = u.id AND (\(any) OR j.lease_owner = \(leased))
                """, logger: logger)
        }
        if !cID.isEmpty {
            try await conn.query(
                """
                UPDATE pushgate_jobs j SET state = u.st, attempts = u.att, provider_id = NULLIF(u.pid, ''),
                  last_error = COALESCE(NULLIF(u.err, ''), j.last_error), finished_at = u.fin, lease_owner = NULL
                FROM unnest(\(cID)::bigint[], \(cState)::bigint[], \(cAtt)::bigint[], \(cPid)::text[], \(cErr)::text[], \(cAt)::float8[])
                  AS u(id, st, att, pid, err, fin)
                WHERE j.id = u.id AND (\(any) OR j.lease_owner = \(leased))
                """, logger: logger)
        }
    }

    func renewLease(owner: String, until: Double) async throws {
        try await conn.query(
            "INSERT INTO pushgate_owners (owner, lease_until) VALUES (\(owner), \(until)) ON CONFLICT (owner) DO UPDATE SET lease_until = EXCLUDED.lease_until",
            logger: logger)
    }

    func reclaimExpired(now: Double) async throws -> Int {
        var n = 0
        let rows = try await conn.query(
            """
            WITH expired AS (DELETE FROM pushgate_owners WHERE lease_until < \(now) RETURNING owner)
            UPDATE pushgate_jobs SET lease_owner = NULL WHERE state = 0 AND lease_owner IN (SELECT owner FROM expired) RETURNING id
            """, logger: logger)
        for try await _ in rows { n += 1 }
        return n
    }

    func lease(_ req: LeaseRequest, owner: String, now: Double) async throws -> [StoredJob] {
        let rows = try await conn.query(
            """
            UPDATE pushgate_jobs SET lease_owner = \(owner) WHERE id IN (
              SELECT id FROM pushgate_jobs WHERE state = 0 AND lease_owner IS NULL AND platform = \(req.platform.rawValue) AND not_before <= \(now)
              ORDER BY not_before, id LIMIT \(req.limit) FOR UPDATE SKIP LOCKED)
            RETURNING id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, cred_retry, not_before, enqueued_at, last_error
            """, logger: logger)
        var leased: [StoredJob] = []
        for try await (id, notifRow, p, kind, target, keys, msg, att, maxAtt, cred, nb, enq, err) in rows.decode(
            (Int64, Int64, Int, Int, String, String?, String, Int, Int, Int, Double, Double, String?).self)
        {
            guard let platform = Platform(stored: p) else { continue }
            leased.append(
                StoredJob(
                    id: id, notifRow: notifRow, platform: platform, target: TargetCodec.decode(kind: kind, value: target, keys: keys),
                    messageID: msg, attempts: att, maxAttempts: maxAtt, credentialRetryUsed: cred != 0,
                    notBefore: nb, enqueuedAt: enq, lastError: err))
        }
        return leased
    }

    func addStats(_ increments: [String: Int64]) async throws {
        let keys = increments.keys.sorted()
        let values = keys.map { increments[$0]! }
        try await conn.query(
            """
            INSERT INTO pushgate_stats (key, value) SELECT * FROM unnest(\(keys)::text[], \(values)::bigint[])
            ON CONFLICT (key) DO UPDATE SET value = pushgate_stats.value + EXCLUDED.value
            """, logger: logger)
    }

    func readStats() async throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for try await (k, v) in try await conn.query("SELECT key, value FROM pushgate_stats", logger: logger).decode((String, Int64).self) {
            out[k] = v
        }
        return out
    }

    /// Runs a `WITH d AS (DELETE … RETURNING 1)` statement; returns how many rows it deleted.
    private func deleted(_ q: PostgresQuery) async throws -> Int {
        var n: Int64 = 0
        for try await c in try await conn.query(q, logger: logger).decode(Int64.self) { n = c }
        return Int(n)
    }

    // Gateways sharing the database prune the same rows: SKIP LOCKED lets each take rows the others
    // are not deleting instead of waiting on them.
    func prune(finishedBefore cutoff: Double, limit: Int) async throws -> Bool {
        let jobs = try await deleted(
            """
            WITH d AS (DELETE FROM pushgate_jobs WHERE id IN (
              SELECT id FROM pushgate_jobs WHERE state <> 0 AND finished_at < \(cutoff) LIMIT \(limit) FOR UPDATE SKIP LOCKED) RETURNING 1)
            SELECT count(*) FROM d
            """)
        let notifications = try await deleted(
            """
            WITH d AS (DELETE FROM pushgate_notifications WHERE id IN (
              SELECT n.id FROM pushgate_notifications n WHERE n.created_at < \(cutoff)
                AND NOT EXISTS (SELECT 1 FROM pushgate_jobs j WHERE j.notif_row = n.id) LIMIT \(limit) FOR UPDATE OF n SKIP LOCKED) RETURNING 1)
            SELECT count(*) FROM d
            """)
        return jobs >= limit || notifications >= limit
    }

    func release(owner: String) async throws {
        try await conn.query("UPDATE pushgate_jobs SET lease_owner = NULL WHERE state = 0 AND lease_owner = \(owner)", logger: logger)
        try await conn.query("DELETE FROM pushgate_owners WHERE owner = \(owner)", logger: logger)
    }

    func claimDedup(_ k: String, until: Double, now: Double) async throws -> Bool {
        let rows = try await conn.query(
            """
            INSERT INTO pushgate_dedup (k, hold_until) VALUES (\(k), \(until))
            ON CONFLICT (k) DO UPDATE SET hold_until = EXCLUDED.hold_until WHERE pushgate_dedup.hold_until <= \(now) RETURNING k
            """, logger: logger)
        var claimed = false
        for try await _ in rows { claimed = true }
        return claimed
    }

    func lockWindow(_ k: String) async throws -> CoalesceWindow? {
        // A row to lock first (gateways sharing the database serialize on it), then its values.
        try await conn.query(
            "INSERT INTO pushgate_coalesce_windows (k, window_end, held_job, seconds, expires) VALUES (\(k), 0, NULL, 0, 0) ON CONFLICT (k) DO NOTHING",
            logger: logger)
        let rows = try await conn.query(
            "SELECT window_end, held_job, seconds FROM pushgate_coalesce_windows WHERE k = \(k) FOR UPDATE", logger: logger)
        var out: CoalesceWindow?
        for try await (end, held, seconds) in rows.decode((Double, Int64?, Double).self) {
            out = CoalesceWindow(end: end, held: held.flatMap { UInt64(exactly: $0) }, seconds: seconds)
        }
        return out
    }

    func saveWindow(_ k: String, _ w: CoalesceWindow) async throws {
        let held = w.held.map { Int64($0) }
        try await conn.query(
            """
            INSERT INTO pushgate_coalesce_windows (k, window_end, held_job, seconds, expires) VALUES (\(k), \(w.end), \(held), \(w.seconds), \(w.expires))
            ON CONFLICT (k) DO UPDATE SET window_end = EXCLUDED.window_end, held_job = EXCLUDED.held_job, seconds = EXCLUDED.seconds,
              expires = EXCLUDED.expires
            """, logger: logger)
    }

    func markCoalesced(job: Int64, at: Double) async throws {
        let state = DeliveryState.Code.coalesced.rawValue
        try await conn.query("UPDATE pushgate_jobs SET state = \(state), finished_at = \(at) WHERE id = \(job) AND state = 0", logger: logger)
    }

    func setNotBefore(job: Int64, _ t: Double) async throws {
        try await conn.query("UPDATE pushgate_jobs SET not_before = \(t) WHERE id = \(job)", logger: logger)
    }

    func cancel(_ request: CancelRequest, now: Double) async throws -> [CancelledRow] {
        // Rows a lease holds are left (the UPDATE waits for a lease locking them, then sees its owner).
        let state = DeliveryState.Code.cancelled.rawValue
        let rows = try await conn.query(
            """
            UPDATE pushgate_jobs j SET state = \(state), finished_at = \(now)
            FROM pushgate_notifications n
            WHERE n.id = j.notif_row AND n.notif_id = \(request.notifID) AND (\(request.app)::text IS NULL OR n.app = \(request.app))
              AND j.state = 0 AND j.lease_owner IS NULL
            RETURNING j.id, j.notif_row, j.platform, j.target_kind, j.target, j.target_keys, j.message_id, j.attempts, j.max_attempts,
              j.cred_retry, j.not_before, j.enqueued_at, j.last_error, n.app
            """, logger: logger)
        var out: [CancelledRow] = []
        for try await (id, notifRow, p, kind, target, keys, msg, att, maxAtt, cred, nb, enq, err, app) in rows.decode(
            (Int64, Int64, Int, Int, String, String?, String, Int, Int, Int, Double, Double, String?, String).self)
        {
            guard let platform = Platform(stored: p) else { continue }
            let job = StoredJob(
                id: id, notifRow: notifRow, platform: platform, target: TargetCodec.decode(kind: kind, value: target, keys: keys),
                messageID: msg, attempts: att, maxAttempts: maxAtt, credentialRetryUsed: cred != 0, notBefore: nb, enqueuedAt: enq, lastError: err)
            out.append(CancelledRow(job: job, app: app))
        }
        return out
    }

    func idempotency(_ op: IdempotencyOp) async throws -> IdempotencyClaim? {
        switch op {
        case .claim(let app, let key, let hash, let now, let expires, let abandonBefore):
            var inserted = false
            for try await _ in try await conn.query(
                """
                INSERT INTO pushgate_idempotency (app, k, body_hash, claimed_at, expires) VALUES (\(app), \(key), \(hash), \(now), \(expires))
                ON CONFLICT (app, k) DO NOTHING RETURNING k
                """, logger: logger)
            { inserted = true }
            if inserted { return .claimed }
            let rows = try await conn.query(
                """
                SELECT body_hash, status, body, request_id, notif_ids, claimed_at, expires FROM pushgate_idempotency
                WHERE app = \(app) AND k = \(key) FOR UPDATE
                """, logger: logger)
            var decided: IdempotencyClaim?
            for try await (h, status, body, rid, ids, claimedAt, exp) in rows.decode((String, Int?, String?, String, String, Double, Double).self) {
                decided = IdempotencyClaim.decide(
                    storedHash: h, status: status, body: body, requestID: rid, notifIDs: ids, claimedAt: claimedAt, expires: exp,
                    bodyHash: hash, now: now, abandonBefore: abandonBefore)
            }
            if let decided { return decided }
            try await conn.query(
                """
                UPDATE pushgate_idempotency SET body_hash = \(hash), status = NULL, body = NULL, request_id = '', notif_ids = '',
                  claimed_at = \(now), expires = \(expires) WHERE app = \(app) AND k = \(key)
                """, logger: logger)
            return .claimed
        case .finish(let app, let key, let a):
            let body = String(decoding: a.body, as: UTF8.self)
            try await conn.query(
                """
                UPDATE pushgate_idempotency SET status = \(a.status), body = \(body), request_id = \(a.requestID), notif_ids = \(a.notifIDs)
                WHERE app = \(app) AND k = \(key)
                """, logger: logger)
            return nil
        case .release(let app, let key):
            try await conn.query("DELETE FROM pushgate_idempotency WHERE app = \(app) AND k = \(key) AND status IS NULL", logger: logger)
            return nil
        }
    }

    func pruneGuards(now: Double, limit: Int) async throws -> Bool {
        let dedup = try await deleted(
            """
            WITH d AS (DELETE FROM pushgate_dedup WHERE k IN (
              SELECT k FROM pushgate_dedup WHERE hold_until < \(now) LIMIT \(limit) FOR UPDATE SKIP LOCKED) RETURNING 1)
            SELECT count(*) FROM d
            """)
        let windows = try await deleted(
            """
            WITH d AS (DELETE FROM pushgate_coalesce_windows WHERE k IN (
              SELECT k FROM pushgate_coalesce_windows WHERE expires < \(now) LIMIT \(limit) FOR UPDATE SKIP LOCKED) RETURNING 1)
            SELECT count(*) FROM d
            """)
        let keys = try await deleted(
            """
            WITH d AS (DELETE FROM pushgate_idempotency WHERE (app, k) IN (
              SELECT app, k FROM pushgate_idempotency WHERE expires < \(now) LIMIT \(limit) FOR UPDATE SKIP LOCKED) RETURNING 1)
            SELECT count(*) FROM d
            """)
        return max(dedup, windows, keys) >= limit
    }

    private func nextvals(_ seq: String, _ n: Int) async throws -> [Int64] {
        var out: [Int64] = []
        out.reserveCapacity(n)
        let rows = try await conn.query(PostgresQuery(unsafeSQL: "SELECT nextval('\(seq)') FROM generate_series(1, \(n))"), logger: logger)
        for try await v in rows.decode(Int64.self) { out.append(v) }
        return out
    }
}

/// The shared engine (`queue.engine: postgres`).
public enum PostgresQueue {
    /// Connects, creates or migrates the schema, and registers this process as a lease owner.
    public static func open(
        url: String, options: DurableQueueOptions,
        logger: Logger = Logger(label: "pushgate.queue.postgres"),
        now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> DurableQueue {
        var o = options
        o.leaseOnEnqueue = false
        let backend = try await PostgresBackend.open(url: url, logger: logger)
        do {
            return try await DurableQueue(backend: backend, options: o, logger: logger, now: now)
        } catch {
            await backend.close()
            throw error
        }
    }
}
