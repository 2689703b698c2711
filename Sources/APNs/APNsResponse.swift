import Foundation
import PushgateCore

/// Classifies an APNs answer (protocols.md section 2) into a `SendOutcome`.
public enum APNsResponseClassifier {
    /// Reasons of a 400 meaning the token itself is bad: reported like a dead token (feedback).
    public static let badTokenReasons: Set<String> = ["BadDeviceToken", "DeviceTokenNotForTopic"]

    /// - Parameters:
    ///   - apnsID: the `apns-id` response header.
    ///   - retryAfter: the `Retry-After` response header.
    ///   - body: the response body (`{"reason":"...","timestamp":...}` on errors).
    public static func classify(status: Int, apnsID: String?, retryAfter: String?, body: [UInt8]) -> SendOutcome {
        if status == 200 { return .delivered(providerID: apnsID) }
        let reason = self.reason(in: body) ?? defaultReason(status)
        switch status {
        case 410:
            return .tokenDead(reason: reason, status: status)
        case 400:
            return badTokenReasons.contains(reason) ? .tokenDead(reason: reason, status: status) : .permanent(reason: reason, status: status)
        case 403:
            return reason == "ExpiredProviderToken" ? .credentials(reason: reason, status: status) : .permanent(reason: reason, status: status)
        case 429, 500, 502, 503, 504:
            return .transient(reason: reason, status: status, retryAfter: RetryAfter.parse(retryAfter))
        case 500...599:
            return .transient(reason: reason, status: status, retryAfter: RetryAfter.parse(retryAfter))
        default:
            // 404 BadPath, 405 MethodNotAllowed, 413 PayloadTooLarge, anything else unexpected.
            return .permanent(reason: reason, status: status)
        }
    }

    /// APNs' name for a status when the body carries no `reason`.
    public static func defaultReason(_ status: Int) -> String {
        switch status {
        case 400: return "BadRequest"
        case 403: return "Forbidden"
        case 404: return "BadPath"
        case 405: return "MethodNotAllowed"
        case 410: return "Unregistered"
        case 413: return "PayloadTooLarge"
        case 429: return "TooManyRequests"
        case 500: return "InternalServerError"
        case 503: return "ServiceUnavailable"
        default: return "HTTP \(status)"
        }
    }

    /// The `reason` string of an APNs error body, nil when absent or not JSON.
    public static func reason(in body: [UInt8]) -> String? {
        guard !body.isEmpty, body.count < 64 * 1024,
            let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let reason = object["reason"] as? String, !reason.isEmpty
        else { return nil }
        return reason
    }
}
