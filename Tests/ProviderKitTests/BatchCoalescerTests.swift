import Foundation
import ProviderKit
import TestSupport
import XCTest

/// A send the test holds open: every request the coalescer makes shows up in `calls` and waits
/// until the test answers it (or its task is cancelled: it then answers "cancelled" for each item).
final class HeldSends: @unchecked Sendable {
    final class Call: @unchecked Sendable {
        let key: String
        let items: [Int]
        private let lock = NSLock()
        private var continuation: CheckedContinuation<[String], Never>?

        init(key: String, items: [Int]) {
            self.key = key
            self.items = items
        }

        func attach(_ c: CheckedContinuation<[String], Never>) -> Bool {
            lock.withLock {
                guard continuation == nil else { return false }
                continuation = c
                return true
            }
        }

        /// Answers the request (once; later answers are ignored).
        func answer(_ results: [String]) {
            let c = lock.withLock {
                defer { continuation = nil }
                return continuation
            }
            c?.resume(returning: results)
        }

        func answerEach(_ prefix: String = "r") { answer(items.map { "\(prefix)\($0)" }) }
    }

    let calls: AsyncStream<Call>
    private let sink: AsyncStream<Call>.Continuation

    init() { (calls, sink) = AsyncStream.makeStream(of: Call.self) }

    func send(_ key: String, _ items: [Int]) async -> [String] {
        let call = Call(key: key, items: items)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { c in
                _ = call.attach(c)
                sink.yield(call)
            }
        } onCancel: {
            call.answer(items.map { _ in "cancelled" })
        }
    }
}

final class BatchCoalescerTests: XCTestCase {
    func coalescer(_ held: HeldSends, maxBatch: Int = 1000, maxCost: Int = .max, maxWaiting: Int = 100) -> BatchCoalescer<String, Int, String> {
        BatchCoalescer(
            maxBatch: maxBatch, maxCost: maxCost, maxWaiting: maxWaiting, cost: { $0 >= 1000 ? 10 : 1 }, unsent: { i, why in "unsent \(i): \(why)" }
        ) { key, items in await held.send(key, items) }
    }

    func next(_ it: inout AsyncStream<HeldSends.Call>.Iterator) async throws -> HeldSends.Call {
        let call = await it.next()
        return try XCTUnwrap(call)
    }

    func testOneCallerAtATimeSendsAloneEachTime() async throws {
        let held = HeldSends()
        let c = coalescer(held)
        var it = held.calls.makeAsyncIterator()
        for i in 0..<3 {
            let t = Task { await c.submit(i, key: "app") }
            let call = try await next(&it)
            XCTAssertEqual(call.items, [i])
            call.answerEach()
            let r = await t.value
            XCTAssertEqual(r, "r\(i)")
        }
        let requests = await c.requests
        let batched = await c.batchedItems
        XCTAssertEqual(requests, 3)
        XCTAssertEqual(batched, 0)
    }

    func testCallsWaitingWhileOneIsInFlightGoTogetherEachWithItsOwnResult() async throws {
        let held = HeldSends()
        let c = coalescer(held)
        var it = held.calls.makeAsyncIterator()
        let first = Task { await c.submit(0, key: "app") }
        let call0 = try await next(&it)
        XCTAssertEqual(call0.items, [0], "the first goes at once, alone")
        let others = (1...5).map { i in Task { await c.submit(i, key: "app") } }
        try await waitUntil("5 waiting") { await c.waiting == 5 }
        // Another key is not held up by this one's request.
        let otherKey = Task { await c.submit(99, key: "other") }
        let callOther = try await next(&it)
        XCTAssertEqual(callOther.key, "other")
        callOther.answerEach()
        let otherResult = await otherKey.value
        XCTAssertEqual(otherResult, "r99")

        call0.answerEach()
        let firstResult = await first.value
        XCTAssertEqual(firstResult, "r0")
        let call1 = try await next(&it)
        XCTAssertEqual(call1.key, "app")
        XCTAssertEqual(Set(call1.items), Set(1...5), "the waiters in one request")
        call1.answer(call1.items.map { "ok\($0)" })
        for (i, t) in others.enumerated() {
            let r = await t.value
            XCTAssertEqual(r, "ok\(i + 1)")
        }
        let requests = await c.requests
        XCTAssertEqual(requests, 3)
        let waiting = await c.waiting
        XCTAssertEqual(waiting, 0)
    }

    func testBatchesSplitAtTheMaximumSizeAndCost() async throws {
        let held = HeldSends()
        let c = coalescer(held, maxBatch: 3, maxCost: 20)
        var it = held.calls.makeAsyncIterator()
        let first = Task { await c.submit(0, key: "k") }
        let call0 = try await next(&it)
        var tasks: [Task<String, Never>] = []
        for i in 1...7 {
            tasks.append(Task { await c.submit(i, key: "k") })
            try await waitUntil("\(i) waiting") { await c.waiting == i }
        }
        // Two costly items (10 each): at most 20 per request.
        for (n, i) in [1000, 1001, 1002].enumerated() {
            tasks.append(Task { await c.submit(i, key: "k") })
            try await waitUntil("\(8 + n) waiting") { await c.waiting == 8 + n }
        }
        call0.answerEach()
        _ = await first.value
        var sizes: [Int] = []
        var seen: [Int] = []
        while seen.count < 10 {
            let call = try await next(&it)
            sizes.append(call.items.count)
            seen += call.items
            call.answerEach()
        }
        XCTAssertEqual(sizes, [3, 3, 2, 2], "in arrival order: 1-3, 4-6 (3 at most), 7 and 1000 (cost 11), 1001 and 1002 (cost 20 at most)")
        XCTAssertEqual(seen, [1, 2, 3, 4, 5, 6, 7, 1000, 1001, 1002])
        for t in tasks {
            let r = await t.value
            XCTAssertTrue(r.hasPrefix("r"), r)
        }
    }

    func testAnAnswerOfTheWrongLengthStillGivesEveryCallerOneResult() async throws {
        let held = HeldSends()
        let c = coalescer(held)
        var it = held.calls.makeAsyncIterator()
        let first = Task { await c.submit(0, key: "k") }
        let call0 = try await next(&it)
        let waiters = (1...3).map { i in Task { await c.submit(i, key: "k") } }
        try await waitUntil("3 waiting") { await c.waiting == 3 }
        call0.answer([])  // no result at all
        let r0 = await first.value
        XCTAssertEqual(r0, "unsent 0: the request's answer has no result for it")
        let call1 = try await next(&it)
        // A failure of the whole request: every caller gets it.
        call1.answer(Array(repeating: "quota", count: 5))
        for t in waiters {
            let r = await t.value
            XCTAssertEqual(r, "quota")
        }
    }

    func testACancelledWaiterIsAnsweredAtOnceAndLeftOut() async throws {
        let held = HeldSends()
        let c = coalescer(held)
        var it = held.calls.makeAsyncIterator()
        let first = Task { await c.submit(0, key: "k") }
        let call0 = try await next(&it)
        let stays = Task { await c.submit(1, key: "k") }
        try await waitUntil("1 waiting") { await c.waiting == 1 }
        let leaves = Task { await c.submit(2, key: "k") }
        try await waitUntil("2 waiting") { await c.waiting == 2 }
        leaves.cancel()
        let left = await leaves.value
        XCTAssertEqual(left, "unsent 2: cancelled", "answered while the request is still in flight")
        call0.answerEach()
        _ = await first.value
        let call1 = try await next(&it)
        XCTAssertEqual(call1.items, [1])
        call1.answerEach()
        let r = await stays.value
        XCTAssertEqual(r, "r1")
    }

    func testCloseAnswersEveryWaiterAndTheRequestInFlightAndSendsNothingNew() async throws {
        let held = HeldSends()
        let c = coalescer(held)
        var it = held.calls.makeAsyncIterator()
        let first = Task { await c.submit(0, key: "k") }
        let call0 = try await next(&it)
        let waiters = (1...3).map { i in Task { await c.submit(i, key: "k") } }
        try await waitUntil("3 waiting") { await c.waiting == 3 }
        call0.answerEach()
        _ = await first.value
        // The waiters' request is in flight (held): closing cancels it, and answers all.
        let call1 = try await next(&it)
        XCTAssertEqual(call1.items.count, 3)
        let more = (4...5).map { i in Task { await c.submit(i, key: "k") } }
        try await waitUntil("2 waiting") { await c.waiting == 2 }
        await c.close()
        for t in waiters {
            let r = await t.value
            XCTAssertEqual(r, "cancelled")
        }
        for t in more {
            let r = await t.value
            XCTAssertTrue(r.hasSuffix("shutting down"), r)
        }
        let after = await c.submit(6, key: "k")
        XCTAssertEqual(after, "unsent 6: shutting down")
        let requests = await c.requests
        XCTAssertEqual(requests, 2)
    }

    func testWaitingIsBoundedAndACallerBeyondItGoesAlone() async throws {
        let held = HeldSends()
        let c = coalescer(held, maxWaiting: 2)
        var it = held.calls.makeAsyncIterator()
        let first = Task { await c.submit(0, key: "k") }
        let call0 = try await next(&it)
        let a = Task { await c.submit(1, key: "k") }
        let b = Task { await c.submit(2, key: "k") }
        try await waitUntil("2 waiting") { await c.waiting == 2 }
        let beyond = Task { await c.submit(3, key: "k") }
        let alone = try await next(&it)
        XCTAssertEqual(alone.items, [3], "the third waiter would pass the bound: it goes alone, now")
        alone.answerEach()
        let r3 = await beyond.value
        XCTAssertEqual(r3, "r3")
        call0.answerEach()
        _ = await first.value
        let call1 = try await next(&it)
        XCTAssertEqual(Set(call1.items), [1, 2])
        call1.answerEach()
        _ = await (a.value, b.value)
        let most = await c.mostWaiting
        let overflowed = await c.overflowed
        XCTAssertEqual(most, 2)
        XCTAssertEqual(overflowed, 1)
    }
}
