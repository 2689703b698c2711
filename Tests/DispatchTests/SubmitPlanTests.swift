import Foundation
import PushgateCore
import XCTest

@testable import PushDispatch

/// `Dispatcher.plan`: a request as deliveries, with nothing queued, logged or counted yet.
final class SubmitPlanTests: XCTestCase {
    struct Sized: PreparedPush {
        let bytes: Int
        var payloadBytes: Int? { bytes }
    }

    /// Renders `message` as its bytes (over 10 bytes is too large, "bad" fails); refuses the token "refused".
    struct SizeProvider: PushProvider {
        let platform: Platform = .ios
        func prepare(_ n: PushNotification) throws -> any PreparedPush {
            let m = n.message ?? ""
            if m == "bad" { throw PushFailure("topic: missing") }
            if m.utf8.count > 10 { throw PushFailure.payloadTooLarge(size: m.utf8.count, limit: 10) }
            return Sized(bytes: m.utf8.count)
        }
        func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
            target == .token("refused") ? PushFailure("token refused") : nil
        }
        func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
            .delivered(providerID: nil)
        }
        func shutdown() async {}
    }

    func notification(_ platform: Platform, _ message: String, tokens: [String], fallback: String? = nil, id: String? = nil) -> PushNotification {
        var n = PushNotification(platform: platform, tokens: tokens)
        n.message = message
        n.notifID = id
        if let fallback {
            var f = n
            f.message = fallback
            n.fallback = FallbackNotification(f)
        }
        return n
    }

    func testPlanOfAMixedRequest() {
        let app = AppProviders(id: AppID.defaultApp, slots: [ProviderSlot(provider: SizeProvider(), maxRetry: 2)])
        let request = PushRequest(
            notifications: [
                notification(.ios, "hi", tokens: ["a", "refused", "b"], id: "n1"),
                notification(.android, "hi", tokens: ["c"]),
                notification(.ios, "a long message", tokens: ["d"], fallback: "ping"),
                notification(.ios, "bad", tokens: ["e"]),
                notification(.ios, "hi", tokens: []),
            ],
            skipped: [SkippedNotification(index: 1, notifID: nil, reason: "platform missing")])
        let t = Date(timeIntervalSince1970: 1_000)
        let plan = Dispatcher.plan(request, app: app, rules: [:], appID: AppID.defaultApp, requestID: "r", fallbackBudget: 1 << 20, at: t)

        XCTAssertEqual(plan.notifIDs, ["n1", "", "r-2", "r-3", "r-4", "r-5"])
        // Served notifications' deliveries only (the android one is not served).
        XCTAssertEqual(plan.counts, 3 + 1 + 1)
        XCTAssertEqual(plan.jobs.map(\.target), [.token("a"), .token("b"), .token("d")])
        XCTAssertEqual(plan.jobs.map(\.maxAttempts), [3, 3, 3])
        XCTAssertTrue(plan.jobs.allSatisfy { $0.id == 0 && $0.waiterID == nil })
        // Sent as its fallback: the fallback is what is queued.
        XCTAssertEqual(plan.jobs[2].accepted.notification.message, "ping")
        XCTAssertEqual(plan.early.map(\.job.target), [.token("refused"), .token("c"), .token("e"), .token("")])
        XCTAssertEqual(plan.early.map(\.served), [true, false, true, true])
        XCTAssertEqual(plan.early[0].reason, "token refused")
        XCTAssertEqual(plan.early[1].reason, "platform android is not enabled")
        XCTAssertEqual(plan.early[3].reason, "tokens must not be nil or empty")
        // Positions in request order, across queued and failed deliveries.
        XCTAssertEqual(plan.jobPositions, [0, 2, 4])
        XCTAssertEqual(plan.earlyPositions, [1, 3, 5, 6])
        XCTAssertEqual(plan.fallbacks.map(\.notifID), ["r-3"])
        XCTAssertEqual(plan.notices.count, 2)
        guard case .notServed(let notifID, _) = plan.notices[0], case .fallback(let fallbackID, .ios, _) = plan.notices[1] else {
            return XCTFail("notices: \(plan.notices)")
        }
        XCTAssertEqual(notifID, "r-2")
        XCTAssertEqual(fallbackID, "r-3")
    }

    func testFallbacksHeldToTheBudget() {
        let app = AppProviders(id: AppID.defaultApp, slots: [ProviderSlot(provider: SizeProvider())])
        let request = PushRequest(notifications: (0..<3).map { _ in notification(.ios, "a long message", tokens: ["t"], fallback: "ping") })
        // Each fallback costs its notif_id's bytes + 96: room for one of "r-0", "r-1", "r-2".
        let plan = Dispatcher.plan(request, app: app, rules: [:], appID: AppID.defaultApp, requestID: "r", fallbackBudget: 120, at: Date())
        XCTAssertEqual(plan.fallbacks.map(\.notifID), ["r-0"])
        XCTAssertEqual(plan.omittedFallbacks, 2)
        XCTAssertEqual(plan.jobs.count, 3)
        XCTAssertEqual(plan.notices.count, 3)
    }

    func testNoAppFailsEveryDeliveryUnserved() {
        let request = PushRequest(notifications: [notification(.ios, "hi", tokens: ["a", "b"])])
        let plan = Dispatcher.plan(request, app: nil, rules: [:], appID: "other", requestID: "r", fallbackBudget: 1 << 20, at: Date())
        XCTAssertTrue(plan.jobs.isEmpty)
        XCTAssertEqual(plan.counts, 0)
        XCTAssertEqual(plan.early.map(\.reason), ["app other is not configured", "app other is not configured"])
        XCTAssertEqual(plan.early.map(\.served), [false, false])
    }
}
