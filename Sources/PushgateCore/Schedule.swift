import Foundation

/// What a delivery due outside its `deliver_between` window does.
public enum QuietMode: String, Sendable, Codable, Equatable {
    /// Waits for the window's next start (the default).
    case wait
    /// Ends skipped (`quiet_hours`), unsent.
    case drop
}

/// `deliver_between`: the local hours of an IANA time zone in which a delivery may be sent,
/// `from` inclusive, `to` exclusive. `from` after `to` spans midnight (`22:00`-`06:00`).
///
/// Pure: the instant to judge is passed in (the caller's clock), and local times follow the zone's
/// rules for that instant, daylight saving time included: a window start inside the hour skipped by
/// a spring-forward change begins at the change; one inside the hour repeated in autumn begins at
/// its first occurrence.
public struct DeliveryWindow: Sendable, Codable, Equatable {
    /// The IANA name (`Europe/Berlin`).
    public let tz: String
    /// `HH:MM`, as given.
    public let from: String
    public let to: String
    /// Minutes after local midnight.
    public let fromMinute: Int
    public let toMinute: Int
    public let zone: TimeZone

    /// Why a window was refused: the member and the problem.
    public struct Problem: Error, Sendable, Equatable {
        public var member: String
        public var problem: String
    }

    public init(tz: String, from: String, to: String) throws(Problem) {
        guard !tz.isEmpty, tz.utf8.count <= 64, let zone = TimeZone(identifier: tz) else {
            throw Problem(member: "tz", problem: "not a known IANA time zone name (e.g. Europe/Berlin)")
        }
        guard let f = Self.minutes(from) else { throw Problem(member: "from", problem: "expected a local time HH:MM (00:00 to 23:59)") }
        guard let t = Self.minutes(to) else { throw Problem(member: "to", problem: "expected a local time HH:MM (00:00 to 23:59)") }
        guard f != t else { throw Problem(member: "to", problem: "must differ from from (an empty or whole-day window)") }
        self.tz = tz
        self.from = from
        self.to = to
        self.fromMinute = f
        self.toMinute = t
        self.zone = zone
    }

    enum CodingKeys: String, CodingKey { case tz, from, to }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        do {
            try self.init(
                tz: try c.decode(String.self, forKey: .tz), from: try c.decode(String.self, forKey: .from), to: try c.decode(String.self, forKey: .to)
            )
        } catch let p as Problem {
            throw DecodingError.dataCorrupted(.init(codingPath: c.codingPath, debugDescription: "\(p.member): \(p.problem)"))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(tz, forKey: .tz)
        try c.encode(from, forKey: .from)
        try c.encode(to, forKey: .to)
    }

    public static func == (a: DeliveryWindow, b: DeliveryWindow) -> Bool { a.tz == b.tz && a.from == b.from && a.to == b.to }

    /// `HH:MM` (two digits each) as minutes after midnight; nil for anything else.
    static func minutes(_ s: String) -> Int? {
        let b = Array(s.utf8)
        guard b.count == 5, b[2] == UInt8(ascii: ":") else { return nil }
        func digit(_ i: Int) -> Int? { b[i] >= 0x30 && b[i] <= 0x39 ? Int(b[i] - 0x30) : nil }
        guard let h1 = digit(0), let h2 = digit(1), let m1 = digit(3), let m2 = digit(4) else { return nil }
        let h = h1 * 10 + h2
        let m = m1 * 10 + m2
        guard h < 24, m < 60 else { return nil }
        return h * 60 + m
    }

    private var calendar: Calendar {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = zone
        return c
    }

    private static let utc: Calendar = {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = TimeZone(secondsFromGMT: 0) ?? c.timeZone
        return c
    }()

    /// Whether a delivery may be sent at `instant` (its local time, to the minute, is in the window).
    public func contains(_ instant: Date) -> Bool {
        let c = calendar.dateComponents([.hour, .minute], from: instant)
        let m = (c.hour ?? 0) * 60 + (c.minute ?? 0)
        return fromMinute < toMinute ? (m >= fromMinute && m < toMinute) : (m >= fromMinute || m < toMinute)
    }

    /// The first instant at or after `instant` in the window: `instant` itself when it is inside,
    /// else the window's next start.
    public func nextAllowed(atOrAfter instant: Date) -> Date {
        if contains(instant) { return instant }
        let local = calendar.dateComponents([.year, .month, .day], from: instant)
        guard let day0 = Self.utc.date(from: DateComponents(year: local.year, month: local.month, day: local.day)) else { return instant }
        // The start on the local day of `instant` or one of the next two (a start is at most a day away).
        for k in 0..<3 {
            let naive = day0.addingTimeInterval(Double(k) * 86_400 + Double(fromMinute) * 60)
            for start in starts(naiveLocal: naive) where start >= instant && contains(start) {
                return start
            }
        }
        return instant  // not reached for a valid zone: sent rather than held for ever
    }

    /// The instants whose local time is the wall time `naive` (that wall time read as UTC), earliest
    /// first: one, two in a repeated hour, or, for a wall time skipped by a change, the change itself
    /// (the first instant after the skipped time).
    func starts(naiveLocal naive: Date) -> [Date] {
        var offsets: [Int] = []
        for probe in [naive.addingTimeInterval(-50_400), naive, naive.addingTimeInterval(50_400)] {
            let o = zone.secondsFromGMT(for: probe)
            if !offsets.contains(o) { offsets.append(o) }
        }
        let wanted = Self.utc.dateComponents([.year, .month, .day, .hour, .minute], from: naive)
        var found: [Date] = []
        for o in offsets {
            let u = naive.addingTimeInterval(-Double(o))
            let c = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: u)
            if c.year == wanted.year, c.month == wanted.month, c.day == wanted.day, c.hour == wanted.hour, c.minute == wanted.minute {
                found.append(u)
            }
        }
        if found.isEmpty, let change = zone.nextDaylightSavingTimeTransition(after: naive.addingTimeInterval(-50_400)) {
            found.append(change)
        }
        return found.sorted()
    }
}

/// `send_at` / `delay_seconds` bounds.
public enum Schedule {
    /// The latest `send_at`: 9999-12-31T23:59:59Z.
    public static let maxUnixSeconds: Double = 253_402_300_799
    /// `core.max_schedule_horizon`'s default: 30 days.
    public static let defaultHorizon = 2_592_000
}
