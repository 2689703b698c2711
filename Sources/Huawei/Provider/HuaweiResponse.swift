import Foundation
import ProviderKit
import PushgateCore

/// Classifies HMS `messages:send` responses: `{"code":"80000000","msg":"Success","requestId":"..."}`.
/// HMS answers most results with HTTP 200 (some with 400 / 401 / 5xx); the `code` decides.
/// The result codes and their sources are in docs/huawei.md.
public enum HuaweiResponseClassifier {
    public static let success = "80000000"
    /// Some tokens refused; `msg` is JSON text `{"success":n,"failure":m,"illegal_tokens":[...]}`.
    public static let partialSuccess = "80100000"
    public static let parameterError = "80100001"
    public static let badMessage = "80100003"
    public static let badTTL = "80100004"
    public static let sensitiveContent = "80100016"
    public static let oauthFailed = "80200001"
    public static let oauthExpired = "80200003"
    public static let noPermission = "80300002"
    public static let invalidToken = "80300007"
    public static let messageTooLarge = "80300008"
    public static let tokenCount = "80300010"
    public static let internalError = "81000001"

    /// The largest response body parsed (anything longer is not an HMS answer).
    public static let maxBodyBytes = 64 * 1024

    /// The parts of an HMS answer.
    public struct Body: Sendable, Equatable {
        public var code: String?
        public var msg: String?
        public var requestID: String?
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        // `code` is a string in HMS's answers; a number is taken too (an integer of at most 12 digits).
        if let s = json["code"] as? String, s.utf8.count <= 16 {
            out.code = s
        } else if let n = json["code"] as? NSNumber, let i = Int64(exactly: n.doubleValue), (0...999_999_999_999).contains(i) {
            out.code = String(i)
        }
        out.msg = (json["msg"] as? String).map { oneLine($0, max: 300) }
        out.requestID = (json["requestId"] as? String).map { oneLine($0, max: 128) }
        return out
    }

    /// How many tokens a partial-success `msg` says were accepted (nil when it cannot be read).
    static func partialSuccessCount(_ msg: String?) -> Int? {
        guard let msg, msg.utf8.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(msg.utf8))) as? [String: Any],
            let n = json["success"] as? NSNumber
        else { return nil }
        let d = n.doubleValue
        guard d.isFinite, d >= 0, d <= 1_000_000 else { return nil }
        return Int(d)
    }

    /// The outcome of one `messages:send` (to one token, a topic or a condition).
    public static func classify(status: Int, body: [UInt8], retryAfter: String?) -> SendOutcome {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        func reason(_ code: String) -> String {
            guard let msg = parsed?.msg, !msg.isEmpty else { return code }
            return "\(code): \(msg)"
        }
        if let code = parsed?.code {
            switch code {
            case success where (200..<300).contains(status):
                return .delivered(providerID: parsed?.requestID)
            case partialSuccess:
                // One token per request: a partial success accepted none, unless msg says otherwise.
                // The msg lists the refused tokens; it is not repeated (tokens are masked in logs).
                if let n = partialSuccessCount(parsed?.msg), n > 0 { return .delivered(providerID: parsed?.requestID) }
                return .tokenDead(reason: "\(code): illegal token", status: status)
            case invalidToken:
                return .tokenDead(reason: "\(code): invalid token", status: status)
            case oauthFailed, oauthExpired:
                return .credentials(reason: reason(code), status: status)
            case internalError:
                return .transient(reason: reason(code), status: status, retryAfter: delay)
            case messageTooLarge:
                return .permanent(reason: "PayloadTooLarge (\(code))", status: status)
            case parameterError, badMessage, badTTL, sensitiveContent, noPermission, tokenCount:
                return .permanent(reason: reason(code), status: status)
            default:
                break
            }
        }
        let code = parsed?.code ?? "HTTP \(status)"
        switch status {
        case 401:
            return .credentials(reason: reason(code), status: status)
        case 408, 429, 500...599:
            return .transient(reason: reason(code), status: status, retryAfter: delay)
        case 200..<300:
            // A 2xx without a success code: not sent, and nothing says retrying would help.
            return .permanent(reason: parsed == nil ? "unreadable HMS answer (HTTP \(status))" : reason(code), status: status)
        default:
            return .permanent(reason: reason(code), status: status)
        }
    }
}
