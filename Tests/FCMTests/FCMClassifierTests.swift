import Foundation
import PushgateCore
import XCTest

@testable import FCM

final class FCMClassifierTests: XCTestCase {
    func fcmError(_ code: Int, _ status: String, _ message: String, _ errorCode: String?) -> [UInt8] {
        var error: [String: Any] = ["code": code, "message": message, "status": status]
        if let errorCode {
            error["details"] = [
                ["@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [["field": "message.token"]]],
                ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": errorCode],
            ]
        }
        return Array(try! JSONSerialization.data(withJSONObject: ["error": error]))
    }

    func classify(_ status: Int, _ body: [UInt8], retryAfter: String? = nil) -> SendOutcome {
        FCMResponseClassifier.classify(status: status, body: body, retryAfter: retryAfter)
    }

    func testSuccess() {
        XCTAssertEqual(classify(200, Array(#"{"name":"projects/p/messages/0:1"}"#.utf8)), .delivered(providerID: "projects/p/messages/0:1"))
    }

    func testTokenDead() {
        XCTAssertEqual(
            classify(404, fcmError(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED")),
            .tokenDead(reason: "UNREGISTERED", status: 404))
        XCTAssertEqual(
            classify(403, fcmError(403, "PERMISSION_DENIED", "SenderId mismatch", "SENDER_ID_MISMATCH")),
            .tokenDead(reason: "SENDER_ID_MISMATCH", status: 403))
    }

    func testPermanentCarriesFCMMessage() {
        XCTAssertEqual(
            classify(400, fcmError(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token", "INVALID_ARGUMENT")),
            .permanent(reason: "INVALID_ARGUMENT: The registration token is not a valid FCM registration token", status: 400))
        XCTAssertEqual(
            classify(401, fcmError(401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service", "THIRD_PARTY_AUTH_ERROR")),
            .permanent(reason: "THIRD_PARTY_AUTH_ERROR: Auth error from APNS or Web Push Service", status: 401))
        // Without details: falls back to error.status.
        XCTAssertEqual(
            classify(403, fcmError(403, "PERMISSION_DENIED", "Permission denied", nil)),
            .permanent(reason: "PERMISSION_DENIED: Permission denied", status: 403))
        XCTAssertEqual(classify(400, []), .permanent(reason: "INVALID_ARGUMENT", status: 400))
    }

    func testTransientWithRetryAfter() {
        XCTAssertEqual(
            classify(429, fcmError(429, "RESOURCE_EXHAUSTED", "quota", "QUOTA_EXCEEDED"), retryAfter: "2"),
            .transient(reason: "QUOTA_EXCEEDED", status: 429, retryAfter: 2))
        XCTAssertEqual(
            classify(503, fcmError(503, "UNAVAILABLE", "unavailable", "UNAVAILABLE"), retryAfter: "7"),
            .transient(reason: "UNAVAILABLE", status: 503, retryAfter: 7))
        XCTAssertEqual(
            classify(500, fcmError(500, "INTERNAL", "internal", "INTERNAL")),
            .transient(reason: "INTERNAL", status: 500, retryAfter: nil))
        // HTML from a proxy: HTTP status decides.
        XCTAssertEqual(classify(502, Array("<html>bad gateway</html>".utf8)), .transient(reason: "HTTP 502", status: 502, retryAfter: nil))
        XCTAssertEqual(classify(503, [], retryAfter: "Wed, 21 Oct 2099 07:28:00 GMT").status, 503)
        if case .transient(_, _, let ra) = classify(503, [], retryAfter: "Wed, 21 Oct 2099 07:28:00 GMT") {
            XCTAssertGreaterThan(ra ?? 0, 1_000_000)
        } else {
            XCTFail()
        }
    }

    func testUnauthenticatedMeansCredentials() {
        XCTAssertEqual(
            classify(401, fcmError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.", nil)),
            .credentials(reason: "UNAUTHENTICATED", status: 401))
        XCTAssertEqual(classify(401, []), .credentials(reason: "UNAUTHENTICATED", status: 401))
    }
}
