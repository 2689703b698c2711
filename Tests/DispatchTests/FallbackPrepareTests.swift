import PushgateCore
import XCTest

@testable import PushDispatch

/// `Dispatcher.prepare`: the fallback is rendered only when the notification is over the limit, and
/// only a typed PayloadTooLarge (not its text) leads to it.
final class FallbackPrepareTests: XCTestCase {
    struct Sized: PreparedPush {
        let bytes: Int
        var payloadBytes: Int? { bytes }
    }

    /// Renders `message` as its bytes; over 10 bytes is too large. `"bad"` fails otherwise, and
    /// `"text"` fails with PayloadTooLarge's text but untyped.
    struct SizeProvider: PushProvider {
        let platform: Platform = .ios
        func prepare(_ n: PushNotification) throws -> any PreparedPush {
            let m = n.message ?? ""
            if m == "bad" { throw PushFailure("topic: missing") }
            if m == "text" { throw PushFailure("PayloadTooLarge (99 > 10 bytes)") }
            if m.utf8.count > 10 { throw PushFailure.payloadTooLarge(size: m.utf8.count, limit: 10) }
            return Sized(bytes: m.utf8.count)
        }
        func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
            .delivered(providerID: nil)
        }
        func shutdown() async {}
    }

    func notification(_ message: String, fallback: String?) -> PushNotification {
        var n = PushNotification(platform: .ios, tokens: ["t"])
        n.message = message
        if let fallback {
            var f = n
            f.message = fallback
            n.fallback = FallbackNotification(f)
        }
        return n
    }

    func testFallbackOnlyWhenOverTheLimit() throws {
        let p = SizeProvider()
        // Fits: sent as it is.
        let fits = try Dispatcher.prepare(notification("short", fallback: "x"), with: p).get()
        XCTAssertEqual(fits.notification.message, "short")
        XCTAssertNil(fits.fallback)
        // Over: the fallback, with the sizes.
        let over = try Dispatcher.prepare(notification("a long message", fallback: "ping"), with: p).get()
        XCTAssertEqual(over.notification.message, "ping")
        XCTAssertNil(over.notification.fallback)
        XCTAssertEqual(over.fallback, FallbackInfo(payloadBytes: 14, limit: 10, fallbackBytes: 4))
        // A stored fallback (after a restart) renders directly.
        let stored = try Dispatcher.prepare(over.notification, with: p).get()
        XCTAssertEqual(stored.notification.message, "ping")
        XCTAssertNil(stored.fallback)
    }

    func testFailures() {
        let p = SizeProvider()
        func reason(_ n: PushNotification) -> String? {
            if case .failure(let f) = Dispatcher.prepare(n, with: p) { return f.reason }
            return nil
        }
        XCTAssertEqual(reason(notification("a long message", fallback: nil)), "PayloadTooLarge (14 > 10 bytes)")
        XCTAssertEqual(
            reason(notification("a long message", fallback: "still too long")), "PayloadTooLarge (14 > 10 bytes; fallback 14 > 10 bytes)")
        XCTAssertEqual(reason(notification("a long message", fallback: "bad")), "PayloadTooLarge (14 > 10 bytes); fallback: topic: missing")
        XCTAssertEqual(reason(notification("bad", fallback: "ping")), "topic: missing", "only a size failure falls back")
        XCTAssertEqual(reason(notification("text", fallback: "ping")), "PayloadTooLarge (99 > 10 bytes)", "typed, not string-matched")
    }
}
