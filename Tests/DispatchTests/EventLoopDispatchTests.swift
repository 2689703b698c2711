import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PushgateCore
import TestSupport
import XCTest

@testable import PushDispatch

/// Deliveries run on the event loops the dispatcher is given (the providers' loops), within the
/// provider's in-flight limit, and all are delivered; message ids are random version-4 UUIDs.
final class EventLoopDispatchTests: XCTestCase {
    struct Prepared: PreparedPush {}

    /// Records on which of `loops` each send ran (nil: on none of them) and the most in flight at once.
    final class LoopRecordingProvider: PushProvider {
        struct State {
            var loopOfSend: [Int?] = []
            var inFlight = 0
            var maxInFlight = 0
            var messageIDs: [String] = []
        }
        let platform: Platform = .ios
        let loops: [any EventLoop]
        let state = NIOLockedValueBox(State())

        init(loops: [any EventLoop]) { self.loops = loops }

        func prepare(_ notification: PushNotification) throws -> any PreparedPush { Prepared() }

        func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
            let before = loops.firstIndex { $0.inEventLoop }
            state.withLockedValue { s in
                s.inFlight += 1
                s.maxInFlight = max(s.maxInFlight, s.inFlight)
                s.messageIDs.append(context.messageID)
            }
            // An answer arriving on that loop later (as the HTTP/2 pool's does): the delivery resumes there.
            if let before { try? await loops[before].scheduleTask(in: .milliseconds(2)) {}.futureResult.get() }
            let after = loops.firstIndex { $0.inEventLoop }
            state.withLockedValue { s in
                s.inFlight -= 1
                s.loopOfSend.append(before == after ? before : nil)
            }
            return .delivered(providerID: nil)
        }

        func shutdown() async {}
    }

    func testDeliveriesRunOnTheGivenEventLoopsWithinTheLimit() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let provider = LoopRecordingProvider(loops: loops)
        let stats = Stats()
        let dispatcher = Dispatcher(
            apps: [AppProviders(id: AppID.defaultApp, slots: [ProviderSlot(provider: provider, concurrency: 5)])],
            queue: MemoryQueue(capacity: 1000), stats: stats, eventLoops: loops)
        let running = Task { await dispatcher.run() }

        let tokens = (0..<200).map { "token-\($0)" }
        let result = try await dispatcher.submit(PushRequest(notifications: [PushNotification(platform: .ios, tokens: tokens)]), sync: false)
        XCTAssertEqual(result.counts, 200)
        try await waitUntil("all delivered") { stats.snapshot.counts(.ios).pushSuccess == 200 }

        let s = provider.state.withLockedValue { $0 }
        XCTAssertEqual(s.loopOfSend.count, 200)
        XCTAssertEqual(s.loopOfSend.filter { $0 == nil }.count, 0, "every send ran, and resumed, on one of the given loops")
        XCTAssertEqual(Set(s.loopOfSend.compactMap { $0 }), [0, 1], "both loops took deliveries")
        XCTAssertLessThanOrEqual(s.maxInFlight, 5, "max_concurrent_pushes holds across the loops")
        XCTAssertEqual(Set(s.messageIDs).count, 200, "a message id per delivery")

        dispatcher.shutdown()
        await running.value
        try await group.shutdownGracefully()
    }

    func testRandomIDsAreVersion4UUIDsAndDistinct() {
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let id = RandomID.uuid()
            let u = Array(id.utf8)
            XCTAssertEqual(u.count, 36, id)
            for (i, c) in u.enumerated() {
                if [8, 13, 18, 23].contains(i) {
                    XCTAssertEqual(c, UInt8(ascii: "-"), id)
                } else {
                    XCTAssertTrue((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66), "lower-case hex: \(id)")
                }
            }
            XCTAssertEqual(u[14], UInt8(ascii: "4"), "version 4: \(id)")
            XCTAssertTrue("89ab".utf8.contains(u[19]), "RFC 4122 variant: \(id)")
            XCTAssertNotNil(UUID(uuidString: id), id)
            seen.insert(id)
        }
        XCTAssertEqual(seen.count, 10_000)
        // Every hex digit position that is random takes several values (the buffer is really refilled).
        let positions = [0, 9, 15, 20, 35]
        for p in positions {
            let values = Set((0..<64).map { _ in Array(RandomID.uuid().utf8)[p] })
            XCTAssertGreaterThan(values.count, 4, "position \(p)")
        }
    }

    /// Request ids are version 7 UUIDs (RFC 9562): the millisecond time first, so ids made later
    /// sort after (a store's index of notification ids grows at its end), the rest random.
    func testTimeOrderedIDsAreVersion7UUIDsSortedByTheirMillisecond() {
        let ms: UInt64 = 0x0193_4A5B_6C7D
        let id = RandomID.timeOrdered(milliseconds: ms)
        XCTAssertTrue(id.hasPrefix("01934a5b-6c7d-7"), id)
        XCTAssertTrue("89ab".utf8.contains(Array(id.utf8)[19]), "RFC 9562 variant: \(id)")
        XCTAssertNotNil(UUID(uuidString: id), id)
        XCTAssertLessThan(RandomID.timeOrdered(milliseconds: ms), RandomID.timeOrdered(milliseconds: ms + 1))
        XCTAssertTrue(RandomID.timeOrdered(milliseconds: UInt64.max).hasPrefix("ffffffff-ffff-7"), "only 48 bits of time")
        XCTAssertEqual(Set((0..<10_000).map { _ in RandomID.timeOrdered(milliseconds: ms) }).count, 10_000, "74 random bits")
        let t = RandomID.currentMilliseconds()
        XCTAssertGreaterThan(t, 1_700_000_000_000)
        XCTAssertEqual(String(RandomID.timeOrdered(milliseconds: t).prefix(8)), String(format: "%08llx", t >> 16))
    }
}
