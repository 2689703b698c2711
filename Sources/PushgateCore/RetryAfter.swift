import Foundation

/// The one `Retry-After` parser (RFC 9110 section 10.2.3), used by every provider.
///
/// Accepts delta-seconds (decimals tolerated, surrounding spaces ignored) and an HTTP-date
/// (IMF-fixdate, plus the obsolete RFC 850 and asctime forms). The result is seconds from `now`,
/// never negative (a date in the past is 0), clamped to `maximum`; NaN, infinities, negative
/// numbers and anything else are refused (nil).
public enum RetryAfter {
    /// Default ceiling (30 days): keeps the value finite and meaningful. `RetryPolicy` applies its
    /// own, shorter ceiling (`maxRetryAfter`, one hour) when it schedules the next attempt.
    public static let defaultMaximum: Double = 30 * 86_400

    public static func parse(_ value: String?, now: Date = Date(), maximum: Double = defaultMaximum) -> Double? {
        guard let raw = value?.trimmingCharacters(in: .whitespaces), !raw.isEmpty else { return nil }
        let ceiling = maximum.isNaN ? defaultMaximum : max(0, maximum)
        if raw.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") }) {
            guard let seconds = Double(raw), seconds.isFinite, seconds >= 0 else { return nil }
            return min(seconds, ceiling)
        }
        // A signed or exotic number ("-3", "nan", "inf", "1e3") is not delta-seconds.
        if Double(raw) != nil { return nil }
        guard let date = httpDate(raw) else { return nil }
        let delta = date.timeIntervalSince(now)
        guard delta.isFinite else { return nil }
        return min(max(0, delta), ceiling)
    }

    private static let formats = ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]

    /// An HTTP-date, or nil.
    public static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in formats {
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
