import Foundation
import Logging
import PostgresNIO
import PushDispatch
import PushgateCore
import XCTest

@testable import QueueStore

/// The delivery event stores (memory, SQLite, PostgreSQL) against one contract: increasing ids,
/// reads after an id (per app), the bound with its unposted removals counted, the webhook cursor.
final class EventStoreTests: XCTestCase {
    static func event(_ app: String, _ n: Int) -> PushEvent {
        PushEvent(type: .sent, time: Date(), app: app, notifID: "n\(n)", delivery: n, platform: "ios", token: "t", attempt: 1)
    }

    /// `store` keeps at most 4 events.
    func contract(_ store: any EventStore, file: StaticString = #filePath, line: UInt = #line) async throws -> [Int64] {
        let (first, removed1) = try await store.append((1...5).map { Self.event($0 % 2 == 0 ? "b" : "a", $0) })
        let s = first.map(\.seq)
        XCTAssertEqual(s.count, 5, file: file, line: line)
        XCTAssertEqual(s, s.sorted(), file: file, line: line)
        XCTAssertEqual(Set(s).count, 5, file: file, line: line)
        XCTAssertEqual(removed1, 1, "the oldest over the bound, never posted", file: file, line: line)
        XCTAssertEqual(first.map(\.app), ["a", "b", "a", "b", "a"], file: file, line: line)
        XCTAssertTrue(first[0].body.contains(#""notif_id":"n1""#), file: file, line: line)
        let kept = try await store.events(after: 0, app: nil, limit: 100)
        XCTAssertEqual(kept.map(\.seq), Array(s[1...]), file: file, line: line)
        XCTAssertEqual(kept.map(\.body), first[1...].map(\.body), file: file, line: line)
        let onlyA = try await store.events(after: s[1], app: "a", limit: 100)
        XCTAssertEqual(onlyA.map(\.seq), [s[2], s[4]], file: file, line: line)
        let limited = try await store.events(after: 0, app: nil, limit: 2)
        XCTAssertEqual(limited.map(\.seq), [s[1], s[2]], file: file, line: line)
        let last = try await store.lastSeq()
        XCTAssertEqual(last, s[4], file: file, line: line)

        try await store.setPosted(s[2])
        try await store.setPosted(s[0])
        let posted = try await store.postedSeq()
        XCTAssertEqual(posted, s[2], "the cursor never moves back", file: file, line: line)
        let (more, removed2) = try await store.append([Self.event("a", 6), Self.event("a", 7)])
        XCTAssertEqual(removed2, 0, "the removed ones were posted", file: file, line: line)
        XCTAssertGreaterThan(more[0].seq, s[4], file: file, line: line)
        let (_, removed3) = try await store.append([Self.event("a", 8), Self.event("a", 9), Self.event("a", 10)])
        XCTAssertEqual(removed3, 3, "the three unposted removed (4, 5, 6; 2 and 3 were posted)", file: file, line: line)
        return s
    }

    func testMemoryStore() async throws {
        _ = try await contract(MemoryEventStore(maxStored: 4))
    }

    func testSQLiteStoreAndReopen() async throws {
        let dir = NSTemporaryDirectory() + "pushgate-events-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/q.sqlite"
        // The queue opens the file first (its tables beside the events).
        let queue = try await SQLiteQueue.open(path: path, options: DurableQueueOptions(capacity: 100))
        let store = try await SQLiteEventStore.open(path: path, maxStored: 4)
        _ = try await contract(store)
        let last = try await store.lastSeq()
        let posted = try await store.postedSeq()
        await store.close()
        let again = try await SQLiteEventStore.open(path: path, maxStored: 4)
        let lastAgain = try await again.lastSeq()
        let postedAgain = try await again.postedSeq()
        XCTAssertEqual(lastAgain, last, "ids go on after a restart")
        XCTAssertEqual(postedAgain, posted, "the cursor is kept")
        let (next, _) = try await again.append([Self.event("a", 11)])
        XCTAssertEqual(next.first?.seq, last + 1)
        let unposted = try await again.events(after: postedAgain, app: nil, limit: 100)
        XCTAssertEqual(unposted.count, 4)
        await again.close()
        queue.shutdown()
        await queue.close()
    }

    func testPostgresStore() async throws {
        guard let url = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"], !url.isEmpty else {
            throw XCTSkip("PUSHGATE_TEST_POSTGRES_URL is not set (scripts/start-postgres.sh)")
        }
        let client = PostgresClient(configuration: try PostgresBackend.configuration(url: url))
        let run = Task { await client.run() }
        try await client.query("DROP TABLE IF EXISTS pushgate_events")
        try await client.query("DROP SEQUENCE IF EXISTS pushgate_event_seq")
        try await client.query("CREATE TABLE IF NOT EXISTS pushgate_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)")
        try await client.query("DELETE FROM pushgate_meta WHERE key = 'events_posted'")
        run.cancel()
        let store = try await PostgresEventStore.open(url: url, maxStored: 4)
        _ = try await contract(store)
        // A second gateway on the same database sees the same events and cursor.
        let other = try await PostgresEventStore.open(url: url, maxStored: 4)
        let a = try await store.lastSeq()
        let b = try await other.lastSeq()
        XCTAssertEqual(a, b)
        let (mine, _) = try await other.append([Self.event("c", 12)])
        XCTAssertGreaterThan(mine[0].seq, a)
        let seen = try await store.events(after: a, app: "c", limit: 10)
        XCTAssertEqual(seen.map(\.seq), mine.map(\.seq))
        await store.close()
        await other.close()
    }
}
