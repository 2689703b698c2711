import Foundation

/// The one backoff function: exponential, capped, with jitter. Pure: the caller gives the random draw.
///
/// `delay = min(maximum, base * 2^(attempt-1)) * (1 - jitter * random)`, so with `jitter` 0.2 the
/// delay is 80%..100% of the capped exponential. Used by `RetryPolicy` (between delivery attempts)
/// and by the HTTP/2 pool (between connect attempts).
public enum Backoff {
    /// - Parameters:
    ///   - attempt: attempts (or consecutive failures) so far, >= 1 (smaller values count as 1).
    ///   - base: the first delay, in any unit; the result is in the same unit.
    ///   - maximum: the cap before jitter.
    ///   - jitter: fraction in [0, 1] taken off at most.
    ///   - random: a draw in [0, 1].
    public static func delay(attempt: Int, base: Double, maximum: Double, jitter: Double, random: Double) -> Double {
        let exponent = Double(min(max(attempt, 1) - 1, 30))
        let b = base.isFinite ? max(0, base) : 0
        let m = maximum.isFinite ? max(0, maximum) : 0
        let raw = min(m, b * pow(2, exponent))
        let j = jitter.isFinite ? min(max(jitter, 0), 1) : 0
        let r = random.isFinite ? min(max(random, 0), 1) : 0
        return raw * (1 - j * r)
    }

}
