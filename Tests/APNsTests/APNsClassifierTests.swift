import APNs
import Foundation
import PushgateCore
import XCTest

final class APNsClassifierTests: XCTestCase {
    func classify(_ status: Int, _ reason: String? = nil, retryAfter: String? = nil, apnsID: String? = nil) -> SendOutcome {
        let body = reason.map { Array(#"{"reason":"\#($0)"}"#.utf8) } ?? []
        return APNsResponseClassifier.classify(status: status, apnsID: apnsID, retryAfter: retryAfter, body: body)
    }

    func testTable() {
        XCTAssertEqual(classify(200, apnsID: "ID"), .delivered(providerID: "ID"))
        XCTAssertEqual(
            APNsResponseClassifier.classify(
                status: 410, apnsID: nil, retryAfter: nil,
                body: Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8)),
            .tokenDead(reason: "Unregistered", status: 410))
        XCTAssertEqual(classify(410, "ExpiredToken"), .tokenDead(reason: "ExpiredToken", status: 410))
        XCTAssertEqual(classify(400, "BadDeviceToken"), .tokenDead(reason: "BadDeviceToken", status: 400))
        XCTAssertEqual(classify(400, "DeviceTokenNotForTopic"), .tokenDead(reason: "DeviceTokenNotForTopic", status: 400))
        for reason in [
            "BadCollapseId", "BadExpirationDate", "BadMessageId", "BadPriority", "BadTopic", "DuplicateHeaders",
            "InvalidPushType", "MissingTopic", "PayloadEmpty", "TopicDisallowed",
        ] {
            XCTAssertEqual(classify(400, reason), .permanent(reason: reason, status: 400))
        }
        XCTAssertEqual(classify(403, "ExpiredProviderToken"), .credentials(reason: "ExpiredProviderToken", status: 403))
        for reason in ["InvalidProviderToken", "BadCertificate", "MissingProviderToken", "Forbidden", "BadEnvironmentKeyIdInToken"] {
            XCTAssertEqual(classify(403, reason), .permanent(reason: reason, status: 403))
        }
        XCTAssertEqual(classify(404, "BadPath"), .permanent(reason: "BadPath", status: 404))
        XCTAssertEqual(classify(405, "MethodNotAllowed"), .permanent(reason: "MethodNotAllowed", status: 405))
        XCTAssertEqual(classify(413, "PayloadTooLarge"), .permanent(reason: "PayloadTooLarge", status: 413))
        XCTAssertEqual(classify(429, "TooManyRequests", retryAfter: "2"), .transient(reason: "TooManyRequests", status: 429, retryAfter: 2))
        XCTAssertEqual(classify(429, "TooManyProviderTokenUpdates"), .transient(reason: "TooManyProviderTokenUpdates", status: 429, retryAfter: nil))
        XCTAssertEqual(classify(500, "InternalServerError"), .transient(reason: "InternalServerError", status: 500, retryAfter: nil))
        XCTAssertEqual(classify(503, "ServiceUnavailable", retryAfter: "30"), .transient(reason: "ServiceUnavailable", status: 503, retryAfter: 30))
        XCTAssertEqual(classify(503, "Shutdown"), .transient(reason: "Shutdown", status: 503, retryAfter: nil))
    }

    func testReasonFallbacksWithoutBody() {
        XCTAssertEqual(classify(410), .tokenDead(reason: "Unregistered", status: 410))
        XCTAssertEqual(classify(503), .transient(reason: "ServiceUnavailable", status: 503, retryAfter: nil))
        XCTAssertEqual(
            APNsResponseClassifier.classify(status: 502, apnsID: nil, retryAfter: nil, body: Array("<html>".utf8)),
            .transient(reason: "HTTP 502", status: 502, retryAfter: nil))
    }

    func testRetryAfterParsing() {
        XCTAssertEqual(RetryAfter.parse("2"), 2)
        XCTAssertEqual(RetryAfter.parse(" 1.5 "), 1.5)
        XCTAssertNil(RetryAfter.parse("-3"))
        XCTAssertNil(RetryAfter.parse("soon"))
        let now = Date(timeIntervalSince1970: 1_445_412_480)  // Wed, 21 Oct 2015 07:28:00 GMT
        XCTAssertEqual(RetryAfter.parse("Wed, 21 Oct 2015 07:28:30 GMT", now: now), 30)
    }
}
