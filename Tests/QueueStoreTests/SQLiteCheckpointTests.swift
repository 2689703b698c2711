import Foundation
import Logging
import PushDispatch
import PushgateCore
import XCTest

@testable import QueueStore

/// Checkpoints run beside the writer, and the WAL still starts over under steady writes.
final class SQLiteCheckpointTests: XCTestCase {
    func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }

    func testWALStaysBoundedUnderSteadyWrites() async throws {
        let path = tempDir() + "/q.sqlite"
        // small limits so a few seconds of writes go through many checkpoint rounds
        let backend = try await SQLiteBackend.open(
            path: path, synchronous: "normal", checkpointInterval: .milliseconds(20),
            restartFrames: 256, logger: Logger(label: "test"))
        _ = try await backend.start(owner: "o", now: Date().timeIntervalSince1970, leaseTimeout: 60)
        let body = String(repeating: "x", count: 300)
        var maxWAL = 0
        var jobIDs: [Int64] = []
        let t0 = Date()
        var commits = 0
        // at least 3 s and 500 commits (a slow machine takes longer), at most 60 s
        while (Date().timeIntervalSince(t0) < 3 || commits < 500) && Date().timeIntervalSince(t0) < 60 {
            var batch = WriteBatch()
            let t = Date().timeIntervalSince1970
            batch.inserts = (0..<20).map { i in
                NotificationInsert(
                    notifID: "n\(commits)-\(i)", platform: .ios, body: body, createdAt: t,
                    jobs: [
                        JobInsert(
                            target: .token(String(repeating: "a", count: 64)), messageID: UUID().uuidString, attempts: 0,
                            maxAttempts: 3, notBefore: t, enqueuedAt: t, leased: true)
                    ])
            }
            // complete what the previous commit inserted, like delivered jobs
            batch.updates = jobIDs.map { .complete(id: $0, state: .delivered, attempts: 1, info: "ok", finishedAt: t) }
            let result = try await backend.commit(batch, owner: "o", now: t, leaseTimeout: 60)
            jobIDs = result.inserted.flatMap(\.jobIDs)
            await backend.afterCommit()
            commits += 1
            maxWAL = max(maxWAL, fileSize(path + "-wal"))
        }
        let dbSize = fileSize(path)
        let pending = try await backend.pendingCount()
        await backend.close()
        XCTAssertEqual(pending, 20, "only the last commit's jobs are left unfinished")
        // The database file received what was written (checkpoints happened) ...
        XCTAssertGreaterThan(dbSize, 2_000_000, "\(commits) commits wrote little; the test needs more data")
        // ... while the WAL stayed a fraction of it: it was started over again and again. Without the
        // writer-side restart it grows by every frame written (several times the database size).
        XCTAssertLessThan(maxWAL, dbSize / 2, "WAL reached \(maxWAL) bytes for a \(dbSize)-byte database after \(commits) commits")
        XCTAssertLessThan(maxWAL, 256 * 4096 * 8)
    }
}
