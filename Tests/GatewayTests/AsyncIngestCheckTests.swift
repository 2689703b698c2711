import Foundation
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore

/// `IngestValidation.checkProvidersAsync`: the providers' ingest checks that wait on the network,
/// named by their notification in the request, per device for the Matrix API, and never waited for
/// past their deadline.
final class AsyncIngestCheckTests: XCTestCase {
    /// Refuses the tokens it is told to; with `hang`, answers only when cancelled.
    struct CheckingProvider: PushProvider {
        let platform: Platform
        var refusedToken = "bad"
        var hang = false
        let seen = Counter()
        var checks = true
        var checksIngestAsync: Bool { checks }

        func prepare(_ notification: PushNotification) throws -> any PreparedPush { throw PushFailure("not for sending") }
        func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
            .permanent(reason: "not for sending", status: nil)
        }
        func shutdown() async {}

        func checkIngestAsync(_ notifications: [PushNotification]) async -> [Int: IngestProblem] {
            seen.add(notifications.count)
            if hang { try? await Task.sleep(for: .seconds(3600)) }
            var out: [Int: IngestProblem] = [:]
            for (i, n) in notifications.enumerated() {
                if let k = n.tokens.firstIndex(of: refusedToken) { out[i] = IngestProblem(message: "Refused.", detail: "tokens[\(k)]: refused") }
            }
            return out
        }
    }

    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var n = 0
        func add(_ k: Int) {
            lock.lock()
            n += k
            lock.unlock()
        }
        var value: Int {
            lock.lock()
            defer { lock.unlock() }
            return n
        }
    }

    func request() -> PushRequest {
        PushRequest(notifications: [
            PushNotification(platform: .ios, tokens: ["a"]), PushNotification(platform: .android, tokens: ["x"]),
            PushNotification(platform: .ios, tokens: ["b", "bad"]),
        ])
    }

    func testARefusalNamesItsNotificationInTheRequest() async {
        let ios = CheckingProvider(platform: .ios)
        let result = await IngestValidation.checkProvidersAsync(request(), alone: false, provider: { $0 == .ios ? ios : nil })
        guard case .failure(let error) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(error.detail, "notifications[2].tokens[1]: refused")
        XCTAssertEqual(ios.seen.value, 2, "the provider sees its notifications only, once per request")
    }

    func testTheMatrixWayRefusesThatNotificationAlone() async throws {
        let ios = CheckingProvider(platform: .ios)
        let result = await IngestValidation.checkProvidersAsync(request(), alone: true, provider: { $0 == .ios ? ios : nil })
        let kept = try result.get()
        XCTAssertEqual(kept.notifications.map(\.tokens), [["a"], ["x"]])
        XCTAssertEqual(kept.skipped.map(\.index), [2])
        XCTAssertEqual(kept.skipped.first?.reason, "refused: notifications[2].tokens[1]: refused")
    }

    func testAProviderWithoutSuchACheckIsNotCalled() async throws {
        let ios = CheckingProvider(platform: .ios, checks: false)
        let result = await IngestValidation.checkProvidersAsync(request(), alone: false, provider: { $0 == .ios ? ios : nil })
        XCTAssertEqual(try result.get().notifications.count, 3)
        XCTAssertEqual(ios.seen.value, 0)
    }

    func testPastTheDeadlineTheRequestGoesOn() async throws {
        let ios = CheckingProvider(platform: .ios, hang: true)
        let result = await IngestValidation.checkProvidersAsync(
            request(), alone: false, provider: { $0 == .ios ? ios : nil }, deadline: .milliseconds(50))
        XCTAssertEqual(try result.get().notifications.count, 3, "unanswered: accepted, the send-time checks decide")
    }
}
