import NIOConcurrencyHelpers
import PushgateCore
import TestSupport
import XCTest

@testable import PushDispatch

/// The dispatcher keeps at most `concurrency` deliveries in flight per provider, starts them only
/// when there is work, and still delivers everything.
final class DispatcherConcurrencyTests: XCTestCase {
    struct Prepared: PreparedPush {}

    /// Holds every send until the test lets it go, and records how many were in flight at once.
    final class HoldingProvider: PushProvider {
        struct State {
            var inFlight = 0
            var maxInFlight = 0
            var sent: [String] = []
            var held: [CheckedContinuation<Void, Never>] = []
        }
        let platform: Platform = .ios
        let state = NIOLockedValueBox(State())

        func prepare(_ notification: PushNotification) throws -> any PreparedPush { Prepared() }

        func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                state.withLockedValue { s in
                    s.inFlight += 1
                    s.maxInFlight = max(s.maxInFlight, s.inFlight)
                    s.sent.append(target.reportedToken)
                    s.held.append(c)
                }
            }
            state.withLockedValue { $0.inFlight -= 1 }
            return .delivered(providerID: nil)
        }

        /// Resumes the sends held so far; returns how many.
        func releaseHeld() -> Int {
            let held = state.withLockedValue { s -> [CheckedContinuation<Void, Never>] in
                defer { s.held = [] }
                return s.held
            }
            for c in held { c.resume() }
            return held.count
        }

        func shutdown() async {}
    }

    func testInFlightNeverExceedsConcurrencyAndEverythingIsDelivered() async throws {
        let provider = HoldingProvider()
        let queue = MemoryQueue(capacity: 100)
        let stats = Stats()
        let dispatcher = Dispatcher(providers: [ProviderSlot(provider: provider, concurrency: 3)], queue: queue, stats: stats)
        let running = Task { await dispatcher.run() }

        let tokens = (0..<10).map { "token-\($0)" }
        let result = try await dispatcher.submit(PushRequest(notifications: [PushNotification(platform: .ios, tokens: tokens)]), sync: false)
        XCTAssertEqual(result.counts, 10)

        var released = 0
        while released < 10 {
            try await waitUntil("held sends") { provider.state.withLockedValue { !$0.held.isEmpty } }
            // a fourth send never starts while three are held
            try await Task.sleep(for: .milliseconds(30))
            let (inFlight, maxInFlight) = provider.state.withLockedValue { ($0.inFlight, $0.maxInFlight) }
            XCTAssertLessThanOrEqual(inFlight, 3)
            XCTAssertLessThanOrEqual(maxInFlight, 3)
            released += provider.releaseHeld()
        }
        try await waitUntil("all finished") { stats.snapshot.counts(.ios).pushSuccess == 10 }
        let (sent, maxInFlight) = provider.state.withLockedValue { ($0.sent, $0.maxInFlight) }
        XCTAssertEqual(Set(sent), Set(tokens))
        XCTAssertEqual(sent.count, 10, "each token sent once")
        XCTAssertEqual(maxInFlight, 3, "the limit was reached")

        dispatcher.shutdown()
        await running.value
    }

    func testGateHandsTheSlotToTheWaiter() async {
        let gate = InFlightGate(limit: 2)
        await gate.enter()
        await gate.enter()
        XCTAssertEqual(gate.inFlight, 2)
        let third = Task {
            await gate.enter()
            return gate.inFlight
        }
        try? await Task.sleep(for: .milliseconds(50))
        gate.leave()
        let inFlightAfter = await third.value
        XCTAssertEqual(inFlightAfter, 2, "the freed slot went to the waiter")
        gate.leave()
        gate.leave()
        XCTAssertEqual(gate.inFlight, 0)
    }
}
