import Foundation
import PushgateCore

/// What to do after one delivery attempt. Pure: the caller supplies the time and the random draw.
public enum RetryDecision: Sendable, Equatable {
    /// The delivery is over, one way or the other.
    case finish(FinalOutcome)
    /// Try again, no sooner than `at`.
    case retry(at: Date, reason: String)
    /// Credentials were refused as stale: the provider has re-minted; retry at once, once.
    case retryWithFreshCredentials(reason: String)
}

/// The retry policy as a pure state machine over (attempt, outcome, now, deadline).
///
/// - attempts = 1 + retries, retries = the request's `retry` when it is between 1 and
///   `<provider>.max_retry`, else `max_retry` (gorush's rule);
/// - exponential backoff with jitter (`Backoff.delay`): `min(maxDelay, baseDelay * 2^(attempt-1))`,
///   scaled by a random factor in `[1 - jitter, 1]`;
/// - a `Retry-After` from the provider is a floor: the next try is never sooner;
/// - never retried past the deadline (`PushNotification.retryDeadline(acceptedAt:)`).
public struct RetryPolicy: Sendable, Equatable {
    public var baseDelay: Double
    public var maxDelay: Double
    public var jitter: Double
    /// Retry-After values above this are clamped (a hostile or broken server cannot park a job for days).
    public var maxRetryAfter: Double

    public init(baseDelay: Double = 1.0, maxDelay: Double = 60, jitter: Double = 0.25, maxRetryAfter: Double = 3600) {
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.jitter = min(max(jitter, 0), 1)
        self.maxRetryAfter = maxRetryAfter
    }

    /// Total attempts allowed for a delivery.
    public static func maxAttempts(requestRetry: Int?, providerMaxRetry: Int) -> Int {
        let cap = max(0, providerMaxRetry)
        if let r = requestRetry, r > 0, r < cap { return 1 + r }
        return 1 + cap
    }

    /// Backoff before attempt `attempt + 1`, given `attempt` attempts made so far (>= 1).
    public func backoff(afterAttempt attempt: Int, random: Double) -> Double {
        Backoff.delay(attempt: attempt, base: baseDelay, maximum: maxDelay, jitter: jitter, random: random)
    }

    /// - Parameters:
    ///   - outcome: what the provider answered for attempt number `attempt` (1-based).
    ///   - maxAttempts: from `maxAttempts(requestRetry:providerMaxRetry:)`.
    ///   - credentialRetryUsed: whether a fresh-credentials retry was already spent on this delivery.
    ///   - deadline: no retry is scheduled after this time (the notification's expiry in absolute
    ///     time: `PushNotification.retryDeadline(acceptedAt:)`).
    ///   - random: a draw in [0, 1) for the jitter.
    public func decide(
        outcome: SendOutcome,
        attempt: Int,
        maxAttempts: Int,
        credentialRetryUsed: Bool,
        now: Date,
        deadline: Date?,
        random: Double
    ) -> RetryDecision {
        switch outcome {
        case .delivered(let id, let detail):
            return .finish(.delivered(providerID: id, detail: detail))
        case .tokenDead(let reason, _):
            return .finish(.failed(reason: reason, tokenDead: true))
        case .permanent(let reason, _), .quotaExceeded(let reason, _):
            return .finish(.failed(reason: reason, tokenDead: false))
        case .credentials(let reason, _):
            if credentialRetryUsed { return .finish(.failed(reason: reason, tokenDead: false)) }
            if let deadline, now > deadline {
                return .finish(.failed(reason: "\(reason) (expired before retry)", tokenDead: false))
            }
            return .retryWithFreshCredentials(reason: reason)
        case .transient(let reason, _, let retryAfter):
            if attempt >= maxAttempts {
                return .finish(.failed(reason: reason, tokenDead: false))
            }
            var delay = backoff(afterAttempt: attempt, random: random)
            if let ra = retryAfter, ra > 0 { delay = max(delay, min(ra, maxRetryAfter)) }
            let at = now.addingTimeInterval(delay)
            if let deadline, at > deadline {
                return .finish(.failed(reason: "\(reason) (expired before retry)", tokenDead: false))
            }
            return .retry(at: at, reason: reason)
        }
    }
}
