import Foundation

/// RFC 3339 date-times: the one strict parser of every date a request gives as text (`send_at`),
/// and the writer of the UTC timestamps the gateway gives out.
///
/// Accepted (RFC 3339 section 5.6, as Go's `time.RFC3339` reads it): `YYYY-MM-DDTHH:MM:SS`, an
/// optional fraction of 1 to 9 digits (`.5`, `.123456789`), then `Z` or an offset `+HH:MM` /
/// `-HH:MM` (`-00:00` included). Refused: a date that does not exist (2026-02-30, day 31 of a
/// 30-day month, February 29th outside leap years), year 0000, hour 24, minute or second 60 (leap
/// seconds included), offsets beyond ±23:59, lower-case `t` / `z`, a space for `T`, a fraction of
/// more than 9 digits, and anything around the date-time. Foundation's formatters accept several
/// of these (a February 30th is read as March 2nd), hence this parser.
public enum RFC3339 {
    /// Why a text is not an RFC 3339 date-time (said in the 400 naming the field).
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// Fraction digits read at most (nanoseconds).
    public static let maxFractionDigits = 9

    /// The text as UNIX seconds (negative before 1970; the caller checks its own range).
    public static func parse(_ s: String) -> Result<Double, Problem> {
        let b = Array(s.utf8.prefix(64))
        func fail(_ why: String) -> Result<Double, Problem> {
            .failure(Problem(description: "\(why): expected an RFC 3339 date-time such as 2026-11-27T08:00:00Z or 2026-11-27T09:00:00.5+01:00"))
        }
        guard s.utf8.count <= 64 else { return fail("too long") }
        func number(_ at: Int, _ n: Int) -> Int? {
            guard at + n <= b.count else { return nil }
            var v = 0
            for i in at..<(at + n) {
                guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        func byte(_ at: Int, _ c: Character) -> Bool { at < b.count && b[at] == c.asciiValue }
        guard let year = number(0, 4), byte(4, "-"), let month = number(5, 2), byte(7, "-"), let day = number(8, 2) else {
            return fail("not a date YYYY-MM-DD")
        }
        guard byte(10, "T") else { return fail("the date and the time are separated by an upper-case T") }
        guard let hour = number(11, 2), byte(13, ":"), let minute = number(14, 2), byte(16, ":"), let second = number(17, 2) else {
            return fail("not a time HH:MM:SS")
        }
        guard year >= 1 else { return fail("year 0000 does not exist") }
        guard (1...12).contains(month) else { return fail("month \(month) does not exist") }
        guard day >= 1, day <= daysIn(month: month, year: year) else { return fail("day \(day) does not exist in \(year)-\(pad(month))") }
        guard hour <= 23 else { return fail("hour \(hour) does not exist (00 to 23)") }
        guard minute <= 59 else { return fail("minute \(minute) does not exist (00 to 59)") }
        guard second <= 59 else { return fail("second \(second) is not accepted (00 to 59; no leap seconds)") }
        var i = 19
        var fraction = 0.0
        if byte(i, ".") {
            i += 1
            var digits = 0
            var scale = 0.1
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                digits += 1
                guard digits <= maxFractionDigits else { return fail("more than \(maxFractionDigits) fraction digits") }
                fraction += Double(b[i] - 0x30) * scale
                scale /= 10
                i += 1
            }
            guard digits > 0 else { return fail("no digit after the decimal point") }
        }
        var offset = 0
        if byte(i, "Z") {
            i += 1
        } else if byte(i, "+") || byte(i, "-") {
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            guard let oh = number(i + 1, 2), byte(i + 3, ":"), let om = number(i + 4, 2) else { return fail("not an offset +HH:MM or -HH:MM") }
            guard oh <= 23, om <= 59 else { return fail("offset beyond ±23:59") }
            offset = sign * (oh * 3600 + om * 60)
            i += 6
        } else {
            return fail("no time zone: Z or an offset +HH:MM / -HH:MM (upper-case Z)")
        }
        guard i == b.count else { return fail("unexpected text after the date-time") }
        let days = daysSinceEpoch(year: year, month: month, day: day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offset)
        return .success(Double(seconds) + fraction)
    }

    /// `parse`'s value, nil for a refused text.
    public static func seconds(_ s: String) -> Double? {
        if case .success(let t) = parse(s) { return t }
        return nil
    }

    static func isLeap(_ y: Int) -> Bool { (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = month > 2 ? month - 3 : month + 9
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    private static func pad(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }

    /// A UTC timestamp with milliseconds (`2026-01-02T03:04:05.678Z`), written without a formatter.
    public static func milliseconds(_ d: Date) -> String {
        let ms = d.timeIntervalSince1970 * 1000
        // Dates outside years 1970-9999 (a clock far off) are clamped, never trapped on.
        let total = Int64(ms.isFinite ? min(max(ms, 0), 253_402_300_799_999) : 0)
        let days = total / 86_400_000
        let inDay = total % 86_400_000
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = z / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ v: Int64, _ n: Int) -> String {
            let s = String(v)
            return s.count >= n ? s : String(repeating: "0", count: n - s.count) + s
        }
        let h = inDay / 3_600_000
        let m = inDay / 60000 % 60
        let s = inDay / 1000 % 60
        let f = inDay % 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(h, 2)):\(pad(m, 2)):\(pad(s, 2)).\(pad(f, 3))Z"
    }
}
