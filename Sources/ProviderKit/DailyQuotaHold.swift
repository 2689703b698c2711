import Foundation

/// A vendor's daily sending quota, once exhausted: every further send to that app is held, without
/// a network call, until the vendor's day resets (midnight in the vendor's time zone), instead of
/// hammering a service that has said no for the rest of the day. Xiaomi, OPPO and vivo count their
/// quotas per calendar day in China Standard Time (UTC+8, no daylight saving time).
///
/// One value per provider instance, so per app (each app builds its own providers). The clock is
/// injected: tests move it past the reset instead of waiting.
public actor DailyQuotaHold {
    /// China Standard Time: UTC+8 all year.
    public static let chinaStandardTime = 8 * 3600

    /// Seconds east of UTC of the vendor's day.
    public nonisolated let utcOffsetSeconds: Int
    private var now: @Sendable () -> Date
    private var until: Date?
    private var why = ""
    /// Times a hold started (a quota answer while not held).
    public private(set) var holdsStarted = 0

    public init(utcOffsetSeconds: Int = DailyQuotaHold.chinaStandardTime, now: @escaping @Sendable () -> Date = { Date() }) {
        self.utcOffsetSeconds = utcOffsetSeconds
        self.now = now
    }

    /// Replaces the clock (a gateway's provider, built without one, driven by a test's clock).
    public func setClock(_ now: @escaping @Sendable () -> Date) { self.now = now }

    /// The first instant of the vendor's next day after `date`.
    public static func nextReset(after date: Date, utcOffsetSeconds: Int) -> Date {
        let local = date.timeIntervalSince1970 + Double(utcOffsetSeconds)
        let day = (local / 86_400).rounded(.down)
        return Date(timeIntervalSince1970: (day + 1) * 86_400 - Double(utcOffsetSeconds))
    }

    /// While held: when it ends and the vendor's answer that started it; nil when sends may go.
    public func current() -> (until: Date, reason: String)? {
        guard let until else { return nil }
        if now() >= until {
            self.until = nil
            return nil
        }
        return (until, why)
    }

    /// The vendor said the day's quota is spent (`reason`: its code and message): holds sends until
    /// the next reset. Answers the reset and whether this call started the hold (log it once).
    @discardableResult
    public func hold(reason: String) -> (until: Date, started: Bool) {
        if let held = current() { return (held.until, false) }
        let reset = Self.nextReset(after: now(), utcOffsetSeconds: utcOffsetSeconds)
        until = reset
        why = reason
        holdsStarted += 1
        return (reset, true)
    }

    /// The outcome of a send made while held: a permanent failure of its own reason, which names
    /// the reset (not retried that day).
    public static func heldOutcome(vendor: String, until: Date, reason: String) -> String {
        "DailyQuotaExceeded: \(vendor) daily quota spent (\(reason)); sends held until \(RFC3339Text.format(until))"
    }
}

/// `2026-05-14T16:00:00Z`.
enum RFC3339Text {
    static func format(_ d: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: d)
    }
}
