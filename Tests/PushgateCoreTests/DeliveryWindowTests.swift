import Foundation
import XCTest

@testable import PushgateCore

/// `deliver_between`'s pure window computation, over Europe/Berlin's daylight saving changes:
/// 2026-03-29 (02:00 CET -> 03:00 CEST, the hour 02:00-03:00 does not exist) and 2026-10-25
/// (03:00 CEST -> 02:00 CET, the hour 02:00-03:00 happens twice).
final class DeliveryWindowTests: XCTestCase {
    /// An instant given in UTC.
    private func utc(_ s: String) -> Date {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        guard let d = f.date(from: s) else {
            XCTFail("bad date \(s)")
            return Date(timeIntervalSince1970: 0)
        }
        return d
    }

    private func window(_ from: String, _ to: String, tz: String = "Europe/Berlin") throws -> DeliveryWindow {
        try DeliveryWindow(tz: tz, from: from, to: to)
    }

    func testInsideIsSentAtOnce() throws {
        let w = try window("08:00", "21:00")
        // 12:00 UTC in November is 13:00 in Berlin.
        let t = utc("2026-11-27T12:00:00Z")
        XCTAssertTrue(w.contains(t))
        XCTAssertEqual(w.nextAllowed(atOrAfter: t), t)
    }

    func testBeforeTheWindowWaitsForItsStartSameDay() throws {
        let w = try window("08:00", "21:00")
        // 05:30 UTC = 06:30 CET: waits for 08:00 CET = 07:00 UTC.
        XCTAssertEqual(w.nextAllowed(atOrAfter: utc("2026-11-27T05:30:00Z")), utc("2026-11-27T07:00:00Z"))
    }

    func testAfterTheWindowWaitsForTheNextDay() throws {
        let w = try window("08:00", "21:00")
        // 21:00 CET (20:00 UTC) is the end (exclusive): the next start is 08:00 CET the next day.
        let t = utc("2026-11-27T20:00:00Z")
        XCTAssertFalse(w.contains(t))
        XCTAssertEqual(w.nextAllowed(atOrAfter: t), utc("2026-11-28T07:00:00Z"))
    }

    func testWindowOverMidnight() throws {
        let w = try window("22:00", "06:00")
        XCTAssertTrue(w.contains(utc("2026-11-27T23:30:00Z")))  // 00:30 CET
        XCTAssertTrue(w.contains(utc("2026-11-27T21:00:00Z")))  // 22:00 CET
        XCTAssertFalse(w.contains(utc("2026-11-27T05:00:00Z")))  // 06:00 CET: the end
        XCTAssertEqual(w.nextAllowed(atOrAfter: utc("2026-11-27T11:00:00Z")), utc("2026-11-27T21:00:00Z"))
    }

    func testSpringForwardWindowStartInsideTheSkippedHour() throws {
        // 02:30 does not exist on 2026-03-29 in Berlin: the window opens at the change, 03:00 CEST = 01:00 UTC.
        let w = try window("02:30", "09:00")
        let t = utc("2026-03-28T22:00:00Z")  // 23:00 CET on the 28th
        XCTAssertFalse(w.contains(t))
        let start = w.nextAllowed(atOrAfter: t)
        XCTAssertEqual(start, utc("2026-03-29T01:00:00Z"))
        XCTAssertTrue(w.contains(start))
        // One second before the change (01:59:59 CET) is outside.
        XCTAssertFalse(w.contains(utc("2026-03-29T00:59:59Z")))
    }

    func testSpringForwardDayOrdinaryStart() throws {
        // 08:00 on the change day is CEST (UTC+2): 06:00 UTC, not 07:00.
        let w = try window("08:00", "21:00")
        XCTAssertEqual(w.nextAllowed(atOrAfter: utc("2026-03-29T00:00:00Z")), utc("2026-03-29T06:00:00Z"))
        // The day before it is still CET (UTC+1).
        XCTAssertEqual(w.nextAllowed(atOrAfter: utc("2026-03-28T00:00:00Z")), utc("2026-03-28T07:00:00Z"))
    }

    func testFallBackRepeatedHourStartsAtTheFirstOccurrence() throws {
        // 02:30 happens twice on 2026-10-25: 02:30 CEST = 00:30 UTC, then 02:30 CET = 01:30 UTC.
        let w = try window("02:30", "09:00")
        let t = utc("2026-10-24T22:00:00Z")  // 00:00 CEST
        XCTAssertEqual(w.nextAllowed(atOrAfter: t), utc("2026-10-25T00:30:00Z"))
        // Between the two (02:10 CET, the second pass of the hour): local 02:10 is before 02:30,
        // so the next start is the second 02:30.
        XCTAssertEqual(w.nextAllowed(atOrAfter: utc("2026-10-25T01:10:00Z")), utc("2026-10-25T01:30:00Z"))
    }

    func testFallBackDayOrdinaryStart() throws {
        // 08:00 on 2026-10-25 is CET (UTC+1): 07:00 UTC.
        let w = try window("08:00", "21:00")
        XCTAssertEqual(w.nextAllowed(atOrAfter: utc("2026-10-25T03:00:00Z")), utc("2026-10-25T07:00:00Z"))
    }

    func testRefusedWindows() {
        XCTAssertThrowsError(try window("08:00", "08:00")) { XCTAssertEqual(($0 as? DeliveryWindow.Problem)?.member, "to") }
        XCTAssertThrowsError(try window("8:00", "21:00")) { XCTAssertEqual(($0 as? DeliveryWindow.Problem)?.member, "from") }
        XCTAssertThrowsError(try window("08:00", "24:00")) { XCTAssertEqual(($0 as? DeliveryWindow.Problem)?.member, "to") }
        XCTAssertThrowsError(try window("08:60", "21:00")) { XCTAssertEqual(($0 as? DeliveryWindow.Problem)?.member, "from") }
        XCTAssertThrowsError(try window("08:00", "21:00", tz: "Mars/Olympus")) { XCTAssertEqual(($0 as? DeliveryWindow.Problem)?.member, "tz") }
        XCTAssertThrowsError(try window("08:00", "21:00", tz: "")) { XCTAssertEqual(($0 as? DeliveryWindow.Problem)?.member, "tz") }
    }

    func testStoredFormRoundTrips() throws {
        let w = try window("22:00", "06:00")
        let d = try JSONEncoder().encode(w)
        XCTAssertEqual(try JSONDecoder().decode(DeliveryWindow.self, from: d), w)
    }
}
