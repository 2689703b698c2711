import Foundation
import ProviderKit
import PushgateCore

/// Classifies FCM HTTP v1 `messages:send` responses.
public enum FCMResponseClassifier {
    /// The parts of FCM's error body (`{"error":{"code","message","status","details":[{"@type","errorCode"}]}}`).
    public struct ErrorBody: Sendable, Equatable {
        public var code: Int?
        public var message: String?
        public var status: String?
        /// `errorCode` of the `google.firebase.fcm.v1.FcmError` detail, if any.
        public var fcmErrorCode: String?
    }

    public static func parseError(_ body: [UInt8]) -> ErrorBody? {
        guard !body.isEmpty,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
            let error = json["error"] as? [String: Any]
        else { return nil }
        var out = ErrorBody()
        out.code = (error["code"] as? NSNumber)?.intValue
        out.message = error["message"] as? String
        out.status = error["status"] as? String
        if let details = error["details"] as? [[String: Any]] {
            // Prefer the FcmError detail; accept any detail with an errorCode.
            let fcm = details.first { ($0["@type"] as? String)?.hasSuffix("google.firebase.fcm.v1.FcmError") == true && $0["errorCode"] is String }
            out.fcmErrorCode = (fcm ?? details.first { $0["errorCode"] is String })?["errorCode"] as? String
        }
        return out
    }

    /// The outcome of one `messages:send` response.
    public static func classify(status: Int, body: [UInt8], retryAfter: String?) -> SendOutcome {
        if status >= 200 && status < 300 {
            var name: String? = nil
            if let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] {
                name = json["name"] as? String
            }
            return .delivered(providerID: name)
        }
        let parsed = parseError(body)
        let message = parsed?.message.map { oneLine($0, max: 300) }
        func withMessage(_ code: String) -> String {
            guard let message, !message.isEmpty else { return code }
            return "\(code): \(message)"
        }
        let delay = RetryAfter.parse(retryAfter)
        let code = parsed?.fcmErrorCode ?? parsed?.status ?? httpStatusCode(status)

        switch code {
        case "UNREGISTERED", "SENDER_ID_MISMATCH":
            return .tokenDead(reason: code, status: status)
        case "INVALID_ARGUMENT", "THIRD_PARTY_AUTH_ERROR":
            return .permanent(reason: withMessage(code), status: status)
        case "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL", "RESOURCE_EXHAUSTED":
            return .transient(reason: code, status: status, retryAfter: delay)
        case "UNAUTHENTICATED":
            return .credentials(reason: code, status: status)
        default:
            break
        }
        switch status {
        case 401:
            return .credentials(reason: "UNAUTHENTICATED", status: status)
        case 408, 429, 500...599:
            return .transient(reason: code, status: status, retryAfter: delay)
        default:
            return .permanent(reason: withMessage(code), status: status)
        }
    }

    /// The canonical google.rpc code name FCM uses for an HTTP status.
    static func httpStatusCode(_ status: Int) -> String {
        switch status {
        case 400: return "INVALID_ARGUMENT"
        case 401: return "UNAUTHENTICATED"
        case 403: return "PERMISSION_DENIED"
        case 404: return "NOT_FOUND"
        case 408: return "DEADLINE_EXCEEDED"
        case 409: return "ABORTED"
        case 429: return "QUOTA_EXCEEDED"
        case 500: return "INTERNAL"
        case 503: return "UNAVAILABLE"
        default: return "HTTP \(status)"
        }
    }
}
