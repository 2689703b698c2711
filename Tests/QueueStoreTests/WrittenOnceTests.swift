import Foundation
import Logging
import PushDispatch
import PushgateCore
import SQLiteNIO
import TestSupport
import XCTest

@testable import QueueStore

/// Schema version 4 (`WrittenOnce`): a process alone on its SQLite file writes a job's row
/// at its first retry or its outcome; until then the job is derived from its notification's row.
/// What a row per job gave must hold without it: status, crash recovery, a graceful stop, pruning,
/// and every target read back as it was written.
final class WrittenOnceTests: XCTestCase {
    func rawCount(_ path: String, _ sql: String) async throws -> Int {
        let c = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        defer { Task { try? await c.close() } }
        return try await c.query(sql).first?.column("n")?.integer ?? -1
    }

    func rawExec(_ path: String, _ sql: String) async throws {
        let c = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        _ = try await c.query(sql)
        try await c.close()
    }

    /// Takes `n` jobs of `q` one after the other, each marked delivered, in that order.
    func deliverEach(_ n: Int, of q: DurableQueue, timeout: Double = 5) async throws -> [DeliveryJob] {
        var jobs: [DeliveryJob] = []
        for _ in 0..<n {
            let j = try await take(q, timeout: timeout)
            jobs.append(j)
            await q.complete(j, outcome: .delivered(providerID: nil))
        }
        return jobs
    }

    func tokens(_ jobs: [DeliveryJob]) -> [String] {
        jobs.map { if case .token(let t) = $0.target { t } else { "" } }
    }

    func states(_ q: DurableQueue, _ notifID: String) async throws -> [String] {
        try await q.deliveryStatus(notifID: notifID)?.map { "\($0.token):\($0.state.rawValue)" } ?? []
    }

    /// Five jobs of one notification, two in memory and three parked: one retried, one delivered,
    /// then a crash. Status shows each as it is; after the restart the retried job comes back with its
    /// attempt and error, the other three once each, and the delivered one never.
    func testJobsWithoutARowSurviveACrashBesideRetriedAndFinishedOnes() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.maxHeld = 2
        o.leaseBatch = 2
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(5, notifID: "n-1"))
        await q.flush()
        let noRows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(noRows, 0, "accepted jobs have no row of their own")
        var states = try await states(q, "n-1")
        XCTAssertEqual(states, ["tok0:queued", "tok1:queued", "tok2:queued", "tok3:queued", "tok4:queued"])

        var retried = try await take(q)
        XCTAssertEqual(retried.target, .token("tok0"))
        retried.attempts = 1
        retried.lastError = "ServiceUnavailable"
        retried.notBefore = Date()
        await q.reschedule(retried)
        let delivered = try await take(q)
        XCTAssertEqual(delivered.target, .token("tok1"))
        await q.complete(delivered, outcome: .delivered(providerID: "apns-1"))
        await q.flush()
        states = try await self.states(q, "n-1")
        XCTAssertEqual(states, ["tok0:retrying", "tok1:delivered", "tok2:queued", "tok3:queued", "tok4:queued"])
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rows, 2, "rows for the retried and the delivered job only")
        let open = try await rawCount(path, "SELECT count(*) AS n FROM (\(WrittenOnce.virtualJobs(where: "1")))")
        XCTAssertEqual(open, 3, "three jobs without a row")
        await q.abandonForTesting()

        // Room for the four at once (they are taken before any is finished).
        o.maxHeld = 4
        let again = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertEqual(again.pendingCount, 4)
        var back: [String: DeliveryJob] = [:]
        for _ in 0..<4 {
            let j = try await take(again)
            guard case .token(let t) = j.target else { return XCTFail("not a token: \(j.target)") }
            XCTAssertNil(back[t], "\(t) handed out twice")
            back[t] = j
            XCTAssertEqual(j.accepted.notification.message, "hello")
        }
        XCTAssertEqual(Set(back.keys), ["tok0", "tok2", "tok3", "tok4"], "the delivered job is not sent again")
        XCTAssertEqual(back["tok0"]?.attempts, 1)
        XCTAssertEqual(back["tok0"]?.lastError, "ServiceUnavailable")
        XCTAssertEqual(back["tok0"]?.messageID, retried.messageID, "the same message id across the crash")
        let extra = await nextJob(again, timeout: 0.2)
        XCTAssertNil(extra)
        if let extra { back["extra"] = extra }
        for j in back.values { await again.complete(j, outcome: .delivered(providerID: nil)) }
        await again.flush()
        states = try await self.states(again, "n-1")
        XCTAssertEqual(states, ["tok0:delivered", "tok1:delivered", "tok2:delivered", "tok3:delivered", "tok4:delivered"])
        XCTAssertEqual(again.pendingCount, 0)
        await again.close()
    }

    /// A graceful stop of a process alone on the file writes no row for the jobs still without one
    /// (a backlog of millions would take minutes): the next start takes the notification over as it
    /// is and hands each job out once, with its message id, without writing a row for it either.
    func testAGracefulStopLeavesTheJobsWithoutARowForTheNextStart() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.maxHeld = 1
        let q = try await SQLiteQueue.open(path: path, options: o)
        let jobs = makeJobs(3, notifID: "n-2")
        try await q.enqueue(jobs)
        await q.close()
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rows, 0, "no row written on stop")
        let open = try await rawCount(path, "SELECT count(*) AS n FROM open_notifs")
        XCTAssertEqual(open, 1)

        let again = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertEqual(again.pendingCount, 3)
        let rowsAfterStart = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rowsAfterStart, 0, "no row written on start")
        let delivered = try await deliverEach(3, of: again)
        XCTAssertEqual(delivered.map(\.messageID), jobs.map(\.messageID), "each once, in order")
        let extra = await nextJob(again, timeout: 0.2)
        XCTAssertNil(extra)
        await again.flush()
        XCTAssertEqual(again.pendingCount, 0)
        await again.close()
        // The next start closes the notification whose jobs all have rows.
        let third = try await SQLiteQueue.open(path: path, options: o)
        let stillOpen = try await rawCount(path, "SELECT count(*) AS n FROM open_notifs")
        XCTAssertEqual(stillOpen, 0)
        XCTAssertEqual(third.pendingCount, 0)
        await third.close()
    }

    /// A process sharing the file (not holding its lock) takes over at once, as free rows, the open
    /// notifications of a process alone on it that stopped (`release` left them for the next start).
    func testAProcessSharingTheFileTakesOverTheOpenNotificationsOfOneStopped() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.maxHeld = 1
        let alone = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertTrue(alone.backend.exclusive)
        let sharing = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertFalse(sharing.backend.exclusive, "the first holds the lock")
        try await alone.enqueue(makeJobs(3, notifID: "n-8"))
        await alone.close()
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs WHERE state = 0 AND lease_owner IS NULL")
        XCTAssertEqual(rows, 3, "another process was registered: the stop wrote the rows, free")
        let delivered = try await deliverEach(3, of: sharing)
        XCTAssertEqual(tokens(delivered).sorted(), ["tok0", "tok1", "tok2"])
        await sharing.close()
    }

    /// The race `release` leaves: a process sharing the file registered just after one alone on it
    /// stopped and left its open notifications for the next start. Their owner is no longer
    /// registered, so the sharing process takes them at its next heartbeat, not never.
    func testOpenNotificationsOfAnOwnerNoLongerRegisteredAreTakenByASharingProcess() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options(lease: 60)
        o.maxHeld = 1
        let alone = try await SQLiteQueue.open(path: path, options: o)
        try await alone.enqueue(makeJobs(3, notifID: "n-9"))
        await alone.flush()
        var shared = options(lease: 1)
        shared.maxHeld = 10
        let sharing = try await SQLiteQueue.open(path: path, options: shared)
        XCTAssertFalse(sharing.backend.exclusive)
        // The lone process gone without a trace in `owners` (its lease would otherwise expire only after 60 s).
        await alone.abandonForTesting()
        try await rawExec(path, "DELETE FROM owners WHERE owner = '\(alone.owner)'")
        let delivered = try await deliverEach(3, of: sharing, timeout: 10)
        XCTAssertEqual(tokens(delivered).sorted(), ["tok0", "tok1", "tok2"])
        await sharing.close()
    }

    /// A finished job's row is not pruned while its notification still has jobs without a row (there
    /// a job without a row is a pending one): a crash after the prune brings back only the pending ones.
    func testPruningKeepsTheRowsOfANotificationStillOpen() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.maxHeld = 1
        o.statusRetention = 0.05
        o.pruneInterval = 0.1
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(3, notifID: "n-3"))
        let first = try await take(q)
        await q.complete(first, outcome: .delivered(providerID: nil))
        try await storeFinished(q, 5, notifID: "old")
        await q.flush()
        // The prune pass deletes the other notification's finished rows, not this one's.
        try await waitUntil { try await self.rawCount(path, "SELECT count(*) AS n FROM notifications WHERE notif_id = 'old'") == 0 }
        let old = try await rawCount(path, "SELECT count(*) AS n FROM notifications WHERE notif_id = 'old'")
        XCTAssertEqual(old, 0, "a prune pass ran")
        let kept = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(kept, 1, "the finished row of the open notification is kept")
        await q.abandonForTesting()

        let again = try await SQLiteQueue.open(path: path, options: o)
        XCTAssertEqual(again.pendingCount, 2)
        var back: Set<UInt64> = []
        for _ in 0..<2 {
            let j = try await take(again)
            back.insert(j.id)
            await again.complete(j, outcome: .delivered(providerID: nil))
        }
        XCTAssertFalse(back.contains(first.id), "the delivered job is not sent again")
        let extra = await nextJob(again, timeout: 0.2)
        XCTAssertNil(extra, "a pruned row brought its job back")
        if let extra { await again.complete(extra, outcome: .delivered(providerID: nil)) }
        await again.close()
    }

    /// A prune pass closes a notification once each of its jobs has a row: its `open_notifs` row
    /// goes, and the store's pending count (an upper bound until then) comes back to 0.
    func testAPrunePassClosesNotificationsWhoseJobsAllHaveRows() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.pruneInterval = 0.1
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(2, notifID: "n-6"))
        let b = try XCTUnwrap(q.backend as? SQLiteBackend)
        var pending = try await b.pendingCount()
        XCTAssertEqual(pending, 2)
        for _ in 0..<2 { await q.complete(try await take(q), outcome: .delivered(providerID: nil)) }
        await q.flush()
        try await waitUntil { try await self.rawCount(path, "SELECT count(*) AS n FROM open_notifs") == 0 }
        let open = try await rawCount(path, "SELECT count(*) AS n FROM open_notifs")
        XCTAssertEqual(open, 0)
        pending = try await b.pendingCount()
        XCTAssertEqual(pending, 0)
        await q.close()
    }

    /// The prune passes' close step goes on from where the last one stopped: a notification whose
    /// jobs are all over closes although an older one stays open (here with a pass of one).
    func testANotificationClosesBehindAnOlderOneStillOpen() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.pruneInterval = 0.1
        o.pruneBatch = 1
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(2, notifID: "older"))
        try await q.enqueue(makeJobs(1, notifID: "newer"))
        let a0 = try await take(q)
        let a1 = try await take(q)
        let b0 = try await take(q)
        XCTAssertEqual(b0.accepted.notifID, "newer")
        await q.complete(b0, outcome: .delivered(providerID: nil))
        await q.flush()
        try await waitUntil { try await self.rawCount(path, "SELECT count(*) AS n FROM open_notifs") == 1 }
        let stillOpen = try await rawCount(path, "SELECT count(*) AS n FROM open_notifs")
        XCTAssertEqual(stillOpen, 1, "the newer notification closed")
        let open = try await rawCount(
            path, "SELECT count(*) AS n FROM open_notifs o JOIN notifications n ON n.id = o.notif_row WHERE n.notif_id = 'older'")
        XCTAssertEqual(open, 1, "the older notification, with both jobs in flight, stays open")
        await q.complete(a0, outcome: .delivered(providerID: nil))
        await q.complete(a1, outcome: .delivered(providerID: nil))
        await q.flush()
        try await waitUntil { try await self.rawCount(path, "SELECT count(*) AS n FROM open_notifs") == 0 }
        let none = try await rawCount(path, "SELECT count(*) AS n FROM open_notifs")
        XCTAssertEqual(none, 0)
        await q.close()
    }

    /// Targets with JSON's special characters, and a Web Push subscription with keys, read back as
    /// written: by the backlog's read-back, by status, and from the rows written after a crash.
    func testEveryTargetReadsBackAsWritten() async throws {
        let path = tempDir() + "/q.sqlite"
        var o = options()
        o.maxHeld = 1
        let odd = "quote\" back\\slash\nline\ttab\u{1}ctl é 😀"
        let sub = WebPushSubscription(endpoint: "https://push.example/a?b=\"c\"", keys: .init(p256dh: "BPk\"ey", auth: "a\\u"))
        var note = PushNotification(platform: .ios, tokens: [odd])
        note.message = "hello"
        let a = AcceptedNotification(notifID: "n-4", notification: note, prepared: TestPrepared())
        var web = PushNotification(platform: .webpush)
        web.message = "hello"
        let w = AcceptedNotification(notifID: "n-5", notification: web, prepared: TestPrepared())
        let q = try await SQLiteQueue.open(path: path, options: o)
        try await q.enqueue(makeJobs(1, notifID: "first"))  // takes the window: the next two are parked
        try await q.enqueue([
            DeliveryJob(id: 0, messageID: "m-\"1\"", target: .token(odd), accepted: a, maxAttempts: 3, now: Date()),
            DeliveryJob(id: 0, messageID: "m-2", target: .subscription(sub), accepted: w, maxAttempts: 3, now: Date()),
        ])
        let status = try await q.deliveryStatus(notifID: "n-4")
        XCTAssertEqual(status?.map(\.token), [odd])
        let webStatus = try await q.deliveryStatus(notifID: "n-5")
        XCTAssertEqual(webStatus?.map(\.token), [sub.endpoint])
        let held = try await take(q)
        XCTAssertEqual(held.target, .token("tok0"))
        await q.complete(held, outcome: .delivered(providerID: nil))
        let j = try await take(q)  // read back from the notification's row
        XCTAssertEqual(j.target, .token(odd))
        XCTAssertEqual(j.messageID, "m-\"1\"")
        await q.flush()
        await q.abandonForTesting()

        // After the crash their rows are written from the notifications' rows (in SQL).
        let again = try await SQLiteQueue.open(path: path, options: options())
        let t1 = try await take(again)
        let t2 = try await take(again, .webpush)
        XCTAssertEqual(t1.target, .token(odd))
        XCTAssertEqual(t1.messageID, "m-\"1\"")
        XCTAssertEqual(t2.target, .subscription(sub))
        XCTAssertEqual(t2.messageID, "m-2")
        await again.complete(t1, outcome: .delivered(providerID: nil))
        await again.complete(t2, outcome: .delivered(providerID: nil))
        await again.close()
    }

    /// Text for the store: a NUL anywhere (short strings kept inline, long ones on the heap, and
    /// one taken from a larger string) becomes U+FFFD; the rest is kept, up to `StoreText.maxBytes`.
    func testStoredTextReplacesNULWhereverItIs() {
        XCTAssertEqual(StoreText.clean(text: ""), "")
        XCTAssertEqual(StoreText.clean(text: "\u{0}"), "\u{FFFD}")
        XCTAssertEqual(StoreText.clean(text: "a\u{0}b"), "a\u{FFFD}b")
        let long = String(repeating: "x", count: 40)
        XCTAssertEqual(StoreText.clean(text: long), long)
        XCTAssertEqual(StoreText.clean(text: long + "\u{0}"), long + "\u{FFFD}")
        XCTAssertEqual(StoreText.clean(text: String((long + "é\u{0}z").dropFirst(3))), String(repeating: "x", count: 37) + "é\u{FFFD}z")
        XCTAssertEqual(StoreText.clean(nil), nil)
        let capped = StoreText.clean(text: String(repeating: "y", count: 5000))
        XCTAssertEqual(capped, String(repeating: "y", count: StoreText.maxBytes) + "…")
    }

    /// Outcome rows (`SQLiteBackend.makeUpsertOutcomes`, values bound per row; a JSON array before):
    /// a target, provider id and reason with JSON's special characters are stored as they were.
    func testOutcomeRowsKeepEveryCharacter() async throws {
        let path = tempDir() + "/q.sqlite"
        let odd = "quote\" back\\slash\nline\ttab\u{1}ctl é 😀 ]["
        let sub = WebPushSubscription(endpoint: "https://push.example/a?b=\"c\"", keys: .init(p256dh: "BPk\"ey", auth: "a\\u"))
        var note = PushNotification(platform: .ios, tokens: [odd])
        note.message = "hello"
        var web = PushNotification(platform: .webpush)
        web.message = "hello"
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue([
            DeliveryJob(
                id: 0, messageID: "m-1", target: .token(odd),
                accepted: AcceptedNotification(notifID: "n-6", notification: note, prepared: TestPrepared()),
                maxAttempts: 3, now: Date()),
            DeliveryJob(
                id: 0, messageID: "m-2", target: .subscription(sub),
                accepted: AcceptedNotification(notifID: "n-7", notification: web, prepared: TestPrepared()), maxAttempts: 3, now: Date()),
        ])
        let t1 = try await take(q)
        let t2 = try await take(q, .webpush)
        await q.complete(t1, outcome: .delivered(providerID: "id \"1\" \\ é"))
        await q.complete(t2, outcome: .failed(reason: "gone: \"x\"\n\u{2}", tokenDead: true))
        await q.flush()
        let status1 = try await q.deliveryStatus(notifID: "n-6")
        let s1 = try XCTUnwrap(status1)
        XCTAssertEqual(s1.map(\.token), [odd])
        XCTAssertEqual(s1.map(\.state), [.delivered])
        XCTAssertEqual(s1.first?.providerID, "id \"1\" \\ é")
        let status2 = try await q.deliveryStatus(notifID: "n-7")
        let s2 = try XCTUnwrap(status2)
        XCTAssertEqual(s2.map(\.token), [sub.endpoint])
        XCTAssertEqual(s2.map(\.state), [.failed])
        XCTAssertEqual(s2.first?.error, "gone: \"x\"\n\u{2}")
        // Both outcome rows are narrow (schema version 5): status read the targets from `jobs_data`.
        let narrow = try await rawCount(
            path, "SELECT count(*) AS n FROM jobs WHERE target_kind = \(WrittenOnce.RowsJSON.narrowOutcome) AND target = ''")
        XCTAssertEqual(narrow, 2)
        await q.close()

        // After the stop and a reopen (which closed the notifications), status reads the same.
        let again = try await SQLiteQueue.open(path: path, options: options())
        let open = try await rawCount(path, "SELECT count(*) AS n FROM open_notifs")
        XCTAssertEqual(open, 0)
        let after1 = try await again.deliveryStatus(notifID: "n-6")
        XCTAssertEqual(after1?.map(\.token), [odd])
        XCTAssertEqual(after1?.first?.providerID, "id \"1\" \\ é")
        let after2 = try await again.deliveryStatus(notifID: "n-7")
        XCTAssertEqual(after2?.map(\.token), [sub.endpoint])
        XCTAssertEqual(after2?.first?.state, .failed)
        XCTAssertEqual(after2?.first?.error, "gone: \"x\"\n\u{2}")
        await again.close()
    }

    /// A provider id equal to the job's message id (APNs echoes the `apns-id` it was sent) is not
    /// written a second time in a narrow outcome row: status reads it from `jobs_data`. A job retried
    /// first (a whole row) and then delivered so gets its message id as provider id too.
    func testAProviderIDEqualToTheMessageIDIsReadFromTheJobsData() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue(makeJobs(3, notifID: "n-8"))
        let a = try await take(q)
        var b = try await take(q)
        let c = try await take(q)
        await q.complete(a, outcome: .delivered(providerID: a.messageID))
        await q.complete(c, outcome: .delivered(providerID: "other-id"))
        b.attempts = 1
        b.lastError = "ServiceUnavailable"
        b.notBefore = Date()
        await q.reschedule(b)
        let retried = try await take(q)
        XCTAssertEqual(retried.id, b.id)
        await q.complete(retried, outcome: .delivered(providerID: b.messageID))
        await q.flush()
        let status = try await q.deliveryStatus(notifID: "n-8")
        XCTAssertEqual(status?.map(\.state), [.delivered, .delivered, .delivered])
        XCTAssertEqual(status?.map(\.providerID), [a.messageID, b.messageID, "other-id"])
        let same = try await rawCount(
            path, "SELECT count(*) AS n FROM jobs WHERE target_kind = \(WrittenOnce.RowsJSON.providerIDIsMessageID) AND provider_id IS NULL")
        XCTAssertEqual(same, 1, "the first job's provider id is not stored twice")
        let whole = try await rawCount(path, "SELECT count(*) AS n FROM jobs WHERE target_kind >= 0 AND provider_id = message_id")
        XCTAssertEqual(whole, 1, "the retried job's row has its provider id")
        await q.close()
    }

    /// Outcomes are written `SQLiteBackend.outcomeRowsPerStatement` rows to a statement, the rest
    /// one to a statement: a batch of 2 full statements and 6 single rows, mixing jobs without a row
    /// and retried jobs with one (an upsert updating it) and every kind of outcome, reads back
    /// exactly, each job with its own state, provider id and error.
    func testOutcomesWrittenManyToAStatementReadBackEachAsItWas() async throws {
        let per = SQLiteBackend.outcomeRowsPerStatement
        let n = 2 * per + 6
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue(makeJobs(n, notifID: "n-many"))
        var jobs: [DeliveryJob] = []
        for _ in 0..<n { jobs.append(try await take(q)) }
        // Every seventh job is retried first: it has a row when its outcome comes.
        let retriedIndices = Set(stride(from: 3, to: n, by: 7))
        for i in retriedIndices.sorted() {
            jobs[i].attempts = 1
            jobs[i].lastError = "ServiceUnavailable"
            jobs[i].notBefore = Date()
            await q.reschedule(jobs[i])
            let again = try await take(q)
            XCTAssertEqual(again.id, jobs[i].id)
            jobs[i] = again
        }
        await q.flush()
        let retriedRows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(retriedRows, retriedIndices.count)
        var expected: [String: (DeliveryStatusRecord.State, String?, String?)] = [:]
        var attempts: [String: Int] = [:]
        for (i, j) in jobs.enumerated() {
            guard case .token(let token) = j.target else { return XCTFail("not a token: \(j.target)") }
            attempts[token] = j.attempts
            switch i % 3 {
            case 0:
                await q.complete(j, outcome: .delivered(providerID: j.messageID))
                expected[token] = (.delivered, j.messageID, nil)
            case 1:
                await q.complete(j, outcome: .delivered(providerID: "provider-\(i)"))
                expected[token] = (.delivered, "provider-\(i)", nil)
            default:
                await q.complete(j, outcome: .failed(reason: "Unregistered-\(i)", tokenDead: true))
                expected[token] = (.failed, nil, "Unregistered-\(i)")
            }
        }
        await q.flush()
        let rows = try await rawCount(path, "SELECT count(*) AS n FROM jobs")
        XCTAssertEqual(rows, n, "one row per job")
        let status = try await q.deliveryStatus(notifID: "n-many") ?? []
        XCTAssertEqual(status.count, n)
        for r in status {
            guard let (state, providerID, error) = expected[r.token] else { return XCTFail("unexpected token \(r.token)") }
            XCTAssertEqual(r.state, state, r.token)
            XCTAssertEqual(r.providerID, providerID, r.token)
            XCTAssertEqual(r.error, error, r.token)
            XCTAssertEqual(r.attempts, attempts[r.token], r.token)
        }
        XCTAssertEqual(q.pendingCount, 0)
        await q.close()
    }

    /// Alone on the store, job ids are reserved a block at a time (`SQLiteBackend.allocate`): after
    /// a crash the next process starts past the whole block, so no id is handed out twice, and a
    /// notification's ids stay consecutive.
    func testJobIDsReservedInBlocksAreNeverReusedAfterACrash() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        try await q.enqueue(makeJobs(3, notifID: "before"))
        let first = try await take(q)
        await q.flush()
        await q.abandonForTesting()
        let reserved = try await rawCount(path, "SELECT value AS n FROM pushgate_meta WHERE key = 'next_job_id'")
        XCTAssertEqual(reserved, SQLiteBackend.idBlock, "one block reserved for the first insert, not one id per job")

        let again = try await SQLiteQueue.open(path: path, options: options())
        try await again.enqueue(makeJobs(2, notifID: "after"))
        let rows = try await rawCount(
            path, "SELECT min(id) AS n FROM notifications WHERE notif_id = 'after'")
        XCTAssertEqual(rows, SQLiteBackend.idBlock + 1, "the next process starts past the reserved block")
        var ids: Set<UInt64> = []
        for _ in 0..<5 {
            let j = try await take(again)
            XCTAssertTrue(ids.insert(j.id).inserted, "job id \(j.id) handed out twice")
            await again.complete(j, outcome: .delivered(providerID: nil))
        }
        XCTAssertTrue(ids.contains(first.id), "the job in flight at the crash comes back with its id")
        let states = try await states(again, "after")
        XCTAssertEqual(states.count, 2)
        await again.close()
    }

    /// A store written by a newer Pushgate (its rows may mean what this version cannot read) is
    /// refused with the versions named, and left as it was.
    func testAStoreOfANewerSchemaIsRefused() async throws {
        let path = tempDir() + "/q.sqlite"
        let q = try await SQLiteQueue.open(path: path, options: options())
        await q.close()
        let c = try await SQLiteConnection.open(storage: .file(path: path), logger: Logger(label: "test"))
        _ = try await c.query("UPDATE pushgate_meta SET value = 99 WHERE key = 'schema_version'")
        try await c.close()
        do {
            let q2 = try await SQLiteQueue.open(path: path, options: options())
            await q2.close()
            XCTFail("a version-99 store opened")
        } catch {
            XCTAssertTrue("\(error)".contains("version 99, newer than this Pushgate (\(QueueSchema.sqliteVersion))"), "\(error)")
        }
        let v = try await rawCount(path, "SELECT value AS n FROM pushgate_meta WHERE key = 'schema_version'")
        XCTAssertEqual(v, 99)
    }

    /// The backlog's read-back decodes `jobs_data` itself (`WrittenOnce.decode`): what `encode` wrote
    /// comes back field for field, only the entries in the range, skipping the jobs written as rows;
    /// and text it did not write gives nil (the caller falls back to SQLite's JSON reader), never a trap.
    /// `jobs_data`'s time offsets are written to the microsecond, in short JSON that reads back as
    /// that value (SQLite's reader and `decode` alike); huge or non-finite ones as before.
    func testTimeOffsetsAreWrittenToTheMicrosecond() throws {
        func text(_ d: Double) -> String {
            var out: [UInt8] = []
            WrittenOnce.appendMicroseconds(d, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        let cases: [(Double, String)] = [
            (-0.0002040863037109375, "-0.000204"), (0.25, "0.25"), (1.5, "1.5"), (3, "3"), (0, "0"), (0.0000004, "0"),
            (-0.0000006, "-0.000001"), (12345.000001, "12345.000001"), (-1.0000004, "-1"), (999_999_999.5, "999999999.5"),
            (86_400.1234567, "86400.123457"), (1e9, "1000000000"), (1_795_000_000.000125, "1795000000.000125"),
            (1_795_000_000.9999996, "1795000001"),
            (-1_795_000_000.25, "-1795000000.25"), (999_999_999_999.5, "999999999999.5"), (1e12, "1000000000000.0"),
            (-2e12, "-2000000000000.0"), (.infinity, "0"), (.nan, "0"),
        ]
        for (d, expected) in cases { XCTAssertEqual(text(d), expected, "\(d)") }
        for i in [0, 7, 9, 10, 99, 100, -1, -9, -10, 65_536, 123_456_789, Int.max, Int.min, Int.min + 1] {
            var out: [UInt8] = []
            WrittenOnce.appendInt(i, to: &out)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), String(i))
        }
        let jobs = [
            JobInsert(
                target: .token("t"), messageID: "m", attempts: 0, maxAttempts: 1, notBefore: 1_700_000_000.1234567,
                enqueuedAt: 1_700_000_000 - 0.0002040863037109375, leased: true)
        ]
        let encoded = WrittenOnce.encode(jobs, rowless: [true], createdAt: 1_700_000_000)
        XCTAssertEqual(encoded, #"[[0,"t",null,"m",0,1,0.123457,-0.000204]]"#)
        let e = try XCTUnwrap(WrittenOnce.decode(encoded, firstID: 1, range: 1...1)?.first?.entry)
        XCTAssertEqual(e.notBefore, 0.123457)
        XCTAssertEqual(e.enqueuedAt, -0.000204)
    }

    func testJobsDataDecodesAsEncodedAndRefusesAnythingElse() throws {
        let targets: [PushTarget] = [
            .token("plain"), .token("q\"uo\\te\n\t\u{01}é😀]["), .channel("ch,1"),
            .subscription(WebPushSubscription(endpoint: "https://push.example/\"x\"", keys: .init(p256dh: "p\"k", auth: "a\\b"))),
        ]
        let jobs = targets.enumerated().map { k, t in
            JobInsert(
                target: t, messageID: "m-\(k)", attempts: k, maxAttempts: 5, notBefore: 1000.25 + Double(k), enqueuedAt: 1000.5, leased: true)
        }
        let rowless = [true, true, false, true]
        let text = WrittenOnce.encode(jobs, rowless: rowless, createdAt: 1000)
        let all = try XCTUnwrap(WrittenOnce.decode(text, firstID: 70, range: 70...73))
        XCTAssertEqual(all.map(\.id), [70, 71, 73], "the job written as a row (72) is not an entry")
        for (id, e) in all {
            let k = Int(id - 70)
            XCTAssertEqual(TargetCodec.decode(kind: e.kind, value: e.value, keys: e.keys), targets[k])
            XCTAssertEqual(e.messageID, "m-\(k)")
            XCTAssertEqual(e.attempts, k)
            XCTAssertEqual(e.maxAttempts, 5)
            XCTAssertEqual(e.notBefore, 0.25 + Double(k))
            XCTAssertEqual(e.enqueuedAt, 0.5)
        }
        XCTAssertEqual(WrittenOnce.decode(text, firstID: 70, range: 71...71)?.map(\.id), [71])
        XCTAssertEqual(WrittenOnce.decode(text, firstID: 70, range: 73...90)?.map(\.id), [73])
        XCTAssertEqual(WrittenOnce.decode(text, firstID: 70, range: 80...90)?.count, 0)
        XCTAssertEqual(WrittenOnce.decode("[]", firstID: 1, range: 1...5)?.count, 0)
        // Not what `encode` writes: nil, whatever is wrong.
        for bad in [
            "", "[", "[[", "[0", "[0,]", "[1]", "{}", "[[0,\"t\",null,\"m\",0,1,0,0]", "[[0,\"t\",null,\"m\",0,1,0]]",
            "[[0,\"t,null,\"m\",0,1,0,0]]", "[[0,\"t\\q\",null,\"m\",0,1,0,0]]", "[[0,\"\\ud800\",null,\"m\",0,1,0,0]]",
            "[[99999999999999999999,\"t\",null,\"m\",0,1,0,0]]", "[[0,\"t\",null,\"m\",0,1,1e999,0]]", "[[0,\"t\",null,\"m\",0,1,0,0]]x",
        ] {
            XCTAssertNil(WrittenOnce.decode(bad, firstID: 1, range: 1...5), bad)
        }
        // Every cut of a valid text is refused or decodes a prefix: never a trap.
        let bytes = Array(text.utf8)
        for n in 0..<bytes.count {
            _ = WrittenOnce.decode(String(decoding: bytes[0..<n], as: UTF8.self), firstID: 70, range: 70...73)
        }
    }
}
