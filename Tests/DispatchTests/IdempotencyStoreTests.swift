import Foundation
import PushDispatch
import PushgateCore
import XCTest

/// The memory engine's Idempotency-Key store: the decisions, and its bounds (a flood of distinct
/// keys with large answers must not grow it without limit).
final class IdempotencyStoreTests: XCTestCase {
    func answer(_ bytes: Int, _ id: String = "rid") -> IdempotentAnswer {
        IdempotentAnswer(status: 200, body: Array(repeating: UInt8(ascii: "x"), count: bytes), requestID: id, notifIDs: "")
    }

    func testClaimReplayMismatchInProgressTakeoverAndExpiry() async throws {
        let store = MemoryIdempotencyStore()
        let t = Date(timeIntervalSince1970: 1_000_000)
        var c = try await store.claim(app: "a", key: "k", bodyHash: "h", now: t, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .claimed)
        c = try await store.claim(app: "a", key: "k", bodyHash: "h", now: t + 1, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .inProgress)
        c = try await store.claim(app: "a", key: "k", bodyHash: "other", now: t + 1, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .mismatch)
        c = try await store.claim(app: "b", key: "k", bodyHash: "other", now: t + 1, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .claimed, "per app")
        try await store.finish(app: "a", key: "k", answer: answer(10))
        c = try await store.claim(app: "a", key: "k", bodyHash: "h", now: t + 2, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .replay(answer(10)))
        // Released (the request was refused): the next one is processed.
        _ = try await store.claim(app: "a", key: "r", bodyHash: "h", now: t, ttl: 60, abandonAfter: 30)
        await store.release(app: "a", key: "r")
        c = try await store.claim(app: "a", key: "r", bodyHash: "h2", now: t + 1, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .claimed)
        // Never answered, older than abandonAfter: taken over. Expired: free.
        c = try await store.claim(app: "b", key: "k", bodyHash: "other", now: t + 31, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .claimed)
        c = try await store.claim(app: "a", key: "k", bodyHash: "new", now: t + 61, ttl: 60, abandonAfter: 30)
        XCTAssertEqual(c, .claimed)
    }

    func testKeysAndAnswerBytesAreBounded() async throws {
        let store = MemoryIdempotencyStore(maxEntries: 100, maxBytes: 10_000)
        let t = Date(timeIntervalSince1970: 1_000_000)
        for i in 0..<1000 {
            _ = try await store.claim(app: "a", key: "k\(i)", bodyHash: "h", now: t, ttl: 3600, abandonAfter: 30)
            try await store.finish(app: "a", key: "k\(i)", answer: answer(500, "r\(i)"))
        }
        XCTAssertLessThanOrEqual(store.count, 21, "10,000 bytes hold about 20 answers of 500 bytes")
        // The newest is kept, the oldest forgotten.
        let newest = try await store.claim(app: "a", key: "k999", bodyHash: "h", now: t, ttl: 3600, abandonAfter: 30)
        XCTAssertEqual(newest, .replay(answer(500, "r999")))
        let oldest = try await store.claim(app: "a", key: "k0", bodyHash: "h", now: t, ttl: 3600, abandonAfter: 30)
        XCTAssertEqual(oldest, .claimed)
        let small = MemoryIdempotencyStore(maxEntries: 100)
        for i in 0..<1000 { _ = try await small.claim(app: "a", key: "k\(i)", bodyHash: "h", now: t, ttl: 3600, abandonAfter: 30) }
        XCTAssertLessThanOrEqual(small.count, 100)
    }
}
