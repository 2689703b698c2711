import PushgateCore
import XCTest

@testable import PushDispatch

final class RetryPolicyTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let policy = RetryPolicy(baseDelay: 1, maxDelay: 60, jitter: 0.25)

    func testMaxAttempts() {
        XCTAssertEqual(RetryPolicy.maxAttempts(requestRetry: nil, providerMaxRetry: 3), 4)
        XCTAssertEqual(RetryPolicy.maxAttempts(requestRetry: 1, providerMaxRetry: 3), 2)
        XCTAssertEqual(RetryPolicy.maxAttempts(requestRetry: 10, providerMaxRetry: 3), 4)
        XCTAssertEqual(RetryPolicy.maxAttempts(requestRetry: 0, providerMaxRetry: 0), 1)
    }

    func testDeliveredAndDead() {
        XCTAssertEqual(
            policy.decide(
                outcome: .delivered(providerID: "x"), attempt: 1, maxAttempts: 4, credentialRetryUsed: false, now: t0, deadline: nil, random: 0),
            .finish(.delivered(providerID: "x")))
        XCTAssertEqual(
            policy.decide(
                outcome: .tokenDead(reason: "Unregistered", status: 410), attempt: 1, maxAttempts: 4, credentialRetryUsed: false, now: t0,
                deadline: nil, random: 0), .finish(.failed(reason: "Unregistered", tokenDead: true)))
        XCTAssertEqual(
            policy.decide(
                outcome: .permanent(reason: "BadTopic", status: 400), attempt: 1, maxAttempts: 4, credentialRetryUsed: false, now: t0,
                deadline: nil, random: 0), .finish(.failed(reason: "BadTopic", tokenDead: false)))
    }

    func testExponentialBackoffWithJitter() {
        // random 0 -> no jitter reduction; random 1 -> 25% less.
        XCTAssertEqual(policy.backoff(afterAttempt: 1, random: 0), 1)
        XCTAssertEqual(policy.backoff(afterAttempt: 2, random: 0), 2)
        XCTAssertEqual(policy.backoff(afterAttempt: 3, random: 0), 4)
        XCTAssertEqual(policy.backoff(afterAttempt: 3, random: 1), 3)
        XCTAssertEqual(policy.backoff(afterAttempt: 20, random: 0), 60)
        let d = policy.decide(
            outcome: .transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil), attempt: 2, maxAttempts: 4, credentialRetryUsed: false,
            now: t0, deadline: nil, random: 0.5)
        XCTAssertEqual(d, .retry(at: t0.addingTimeInterval(2 * 0.875), reason: "ServiceUnavailable"))
    }

    func testRetryAfterIsAFloor() {
        let d = policy.decide(
            outcome: .transient(reason: "TooManyRequests", status: 429, retryAfter: 2), attempt: 1, maxAttempts: 4, credentialRetryUsed: false,
            now: t0, deadline: nil, random: 0)
        XCTAssertEqual(d, .retry(at: t0.addingTimeInterval(2), reason: "TooManyRequests"))
        let clamped = policy.decide(
            outcome: .transient(reason: "TooManyRequests", status: 429, retryAfter: 1e9), attempt: 1, maxAttempts: 4, credentialRetryUsed: false,
            now: t0, deadline: nil, random: 0)
        XCTAssertEqual(clamped, .retry(at: t0.addingTimeInterval(3600), reason: "TooManyRequests"))
    }

    func testAttemptsExhausted() {
        let d = policy.decide(
            outcome: .transient(reason: "InternalServerError", status: 500, retryAfter: nil), attempt: 4, maxAttempts: 4, credentialRetryUsed: false,
            now: t0, deadline: nil, random: 0)
        XCTAssertEqual(d, .finish(.failed(reason: "InternalServerError", tokenDead: false)))
    }

    func testNeverRetriesPastExpiration() {
        let exp = Int64(t0.timeIntervalSince1970) + 1
        let d = policy.decide(
            outcome: .transient(reason: "ServiceUnavailable", status: 503, retryAfter: 5), attempt: 1, maxAttempts: 4, credentialRetryUsed: false,
            now: t0, deadline: Date(timeIntervalSince1970: Double(exp)), random: 0)
        XCTAssertEqual(d, .finish(.failed(reason: "ServiceUnavailable (expired before retry)", tokenDead: false)))
        let ok = policy.decide(
            outcome: .transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil), attempt: 1, maxAttempts: 4, credentialRetryUsed: false,
            now: t0, deadline: Date(timeIntervalSince1970: Double(exp + 100)), random: 0)
        XCTAssertEqual(ok, .retry(at: t0.addingTimeInterval(1), reason: "ServiceUnavailable"))
    }

    func testCredentialsRetriedOnce() {
        let first = policy.decide(
            outcome: .credentials(reason: "ExpiredProviderToken", status: 403), attempt: 1, maxAttempts: 1, credentialRetryUsed: false, now: t0,
            deadline: nil, random: 0)
        XCTAssertEqual(first, .retryWithFreshCredentials(reason: "ExpiredProviderToken"))
        let second = policy.decide(
            outcome: .credentials(reason: "ExpiredProviderToken", status: 403), attempt: 1, maxAttempts: 1, credentialRetryUsed: true, now: t0,
            deadline: nil, random: 0)
        XCTAssertEqual(second, .finish(.failed(reason: "ExpiredProviderToken", tokenDead: false)))
    }
}
