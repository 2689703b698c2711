import Foundation
import PushgateCore
import XCTest

final class RetryAfterAndBackoffTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_445_412_480)  // Wed, 21 Oct 2015 07:28:00 GMT

    func testDeltaSeconds() {
        XCTAssertEqual(RetryAfter.parse("0"), 0)
        XCTAssertEqual(RetryAfter.parse("120"), 120)
        XCTAssertEqual(RetryAfter.parse(" 1.5 "), 1.5)
        XCTAssertNil(RetryAfter.parse(nil))
        XCTAssertNil(RetryAfter.parse(""))
        XCTAssertNil(RetryAfter.parse("   "))
    }

    func testRefusesNegativeNaNInfinityAndGarbage() {
        for bad in ["-3", "-0.5", "nan", "NaN", "inf", "-inf", "infinity", "1e3", "+5", "soon", "5s", "0x10"] {
            XCTAssertNil(RetryAfter.parse(bad, now: now), bad)
        }
    }

    func testClampedToMaximum() {
        XCTAssertEqual(RetryAfter.parse("999999999"), RetryAfter.defaultMaximum)
        XCTAssertEqual(RetryAfter.parse("120", maximum: 60), 60)
        XCTAssertEqual(RetryAfter.parse("Thu, 01 Jan 2099 00:00:00 GMT", now: now), RetryAfter.defaultMaximum)
        XCTAssertEqual(RetryAfter.parse("5", maximum: -1), 0)
    }

    func testHTTPDates() {
        XCTAssertEqual(RetryAfter.parse("Wed, 21 Oct 2015 07:28:30 GMT", now: now), 30)
        XCTAssertEqual(RetryAfter.parse("Wednesday, 21-Oct-15 07:28:30 GMT", now: now), 30)
        XCTAssertEqual(RetryAfter.parse("Wed Oct 21 07:28:30 2015", now: now), 30)
        // In the past: retry now, never a negative delay.
        XCTAssertEqual(RetryAfter.parse("Wed, 21 Oct 2015 07:00:00 GMT", now: now), 0)
    }

    func testBackoffIsExponentialCappedWithJitter() {
        XCTAssertEqual(Backoff.delay(attempt: 1, base: 1, maximum: 60, jitter: 0.25, random: 0), 1)
        XCTAssertEqual(Backoff.delay(attempt: 3, base: 1, maximum: 60, jitter: 0.25, random: 0), 4)
        XCTAssertEqual(Backoff.delay(attempt: 3, base: 1, maximum: 60, jitter: 0.25, random: 1), 3)
        XCTAssertEqual(Backoff.delay(attempt: 10, base: 1, maximum: 60, jitter: 0, random: 0.7), 60)
        XCTAssertEqual(Backoff.delay(attempt: 1_000, base: 0.1, maximum: 10, jitter: 0.2, random: 0), 10)
        XCTAssertEqual(Backoff.delay(attempt: 0, base: 2, maximum: 10, jitter: 0, random: 0), 2)
        XCTAssertEqual(Backoff.delay(attempt: 2, base: 1, maximum: 60, jitter: 5, random: .nan), 2)
        XCTAssertEqual(Backoff.delay(attempt: 2, base: .infinity, maximum: 60, jitter: 0, random: 0), 0)
    }
}
