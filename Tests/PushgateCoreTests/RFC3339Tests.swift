import Foundation
import XCTest

@testable import PushgateCore

/// The one RFC 3339 parser: the forms RFC 3339 (as Go's `time.RFC3339` reads it) allows give the
/// right instant; impossible dates and the lenient forms are refused with the reason.
final class RFC3339Tests: XCTestCase {
    func testValidFormsGiveTheInstant() {
        let cases: [(String, Double)] = [
            ("1970-01-01T00:00:00Z", 0),
            ("2026-11-27T08:00:00Z", 1_795_766_400),
            ("2026-11-27T09:00:00+01:00", 1_795_766_400),
            ("2026-11-27T13:30:00+05:30", 1_795_766_400),
            ("2026-11-27T03:00:00-05:00", 1_795_766_400),
            ("2026-11-27T08:00:00-00:00", 1_795_766_400),
            ("2026-11-28T07:59:00+23:59", 1_795_766_400),
            ("2026-11-27T09:00:00.5+01:00", 1_795_766_400.5),
            ("2026-11-27T08:00:00.123456789Z", 1_795_766_400.123456789),
            ("2024-02-29T00:00:00Z", 1_709_164_800),
            ("2000-02-29T00:00:00Z", 951_782_400),
            ("2026-04-30T23:59:59Z", 1_777_593_599),
            ("0001-01-01T00:00:00Z", -62_135_596_800),
            ("9999-12-31T23:59:59Z", 253_402_300_799),
        ]
        for (text, want) in cases {
            switch RFC3339.parse(text) {
            case .success(let t): XCTAssertEqual(t, want, accuracy: 1e-6, text)
            case .failure(let p): XCTFail("\(text) refused: \(p)")
            }
        }
        // Agrees with Foundation on valid dates.
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        for text in ["2026-11-27T09:00:00+01:00", "2024-02-29T23:00:00-04:00", "1999-12-31T23:59:59Z"] {
            XCTAssertEqual(RFC3339.seconds(text), f.date(from: text)?.timeIntervalSince1970, text)
        }
    }

    func testLenientFormsAreRefusedWithTheReason() {
        let cases: [(String, String)] = [
            ("2026-02-30T10:00:00Z", "day 30 does not exist in 2026-02"),
            ("2026-02-29T10:00:00Z", "day 29 does not exist in 2026-02"),
            ("1900-02-29T10:00:00Z", "day 29 does not exist"),
            ("2026-04-31T10:00:00Z", "day 31 does not exist in 2026-04"),
            ("2026-06-31T10:00:00Z", "day 31"),
            ("2026-09-31T10:00:00Z", "day 31"),
            ("2026-11-31T10:00:00Z", "day 31"),
            ("2026-01-32T10:00:00Z", "day 32"),
            ("2026-01-00T10:00:00Z", "day 0"),
            ("2026-00-10T10:00:00Z", "month 0"),
            ("2026-13-01T10:00:00Z", "month 13"),
            ("2026-11-27T24:00:00Z", "hour 24"),
            ("2026-11-27T10:60:00Z", "minute 60"),
            ("2026-12-31T23:59:60Z", "second 60"),
            ("2026-11-27T10:00:00+24:00", "offset beyond"),
            ("2026-11-27T10:00:00-24:00", "offset beyond"),
            ("2026-11-27T10:00:00+23:60", "offset beyond"),
            ("2026-11-27T10:00:00+99:99", "offset beyond"),
            ("0000-01-01T00:00:00Z", "year 0000"),
            ("2026-11-27t10:00:00Z", "upper-case T"),
            ("2026-11-27T10:00:00z", "upper-case Z"),
            ("2026-11-27 10:00:00Z", "upper-case T"),
            ("2026-11-27T10:00:00.12345678901234567890Z", "more than 9 fraction digits"),
            ("2026-11-27T10:00:00.Z", "no digit after the decimal point"),
            ("2026-11-27T10:00:00", "no time zone"),
            ("2026-11-27T10:00Z", "not a time"),
            ("2026-11-27", "upper-case T"),
            ("2026-1-27T10:00:00Z", "not a date"),
            ("+2026-11-27T10:00:00Z", "not a date"),
            ("2026-11-27T10:00:00+0100", "not an offset"),
            ("2026-11-27T10:00:00Z ", "unexpected text"),
            (" 2026-11-27T10:00:00Z", "not a date"),
            ("2026-11-27T10:00:00ZZ", "unexpected text"),
            ("２０２６-11-27T10:00:00Z", "not a date"),
            ("", "not a date"),
            (String(repeating: "9", count: 100_000), "too long"),
        ]
        for (text, why) in cases {
            switch RFC3339.parse(text) {
            case .success(let t): XCTFail("\(text.prefix(60)) accepted as \(t)")
            case .failure(let p): XCTAssertTrue(p.description.contains(why), "\(text.prefix(60)): \(p.description)")
            }
        }
    }

    /// Writer and parser agree.
    func testMillisecondsReadBack() {
        for t in [0, 1_795_766_400.123, 951_782_400, 253_402_300_799.999] {
            let text = RFC3339.milliseconds(Date(timeIntervalSince1970: t))
            XCTAssertEqual(RFC3339.seconds(text) ?? -1, t, accuracy: 1e-6, text)
        }
    }
}
