import Foundation
import ProviderKit
import PushgateCore

/// Xiaomi's answer to one `/v3/message/regid`, classified: `{"result":"ok"|"error","code":0,
/// "description","reason","trace_id","data":{"id","bad_regids",…}}` (codes: dev.mi.com pId=1560,
/// 200001 pId=1656; the table with its sources is in docs/china-vendors.md).
public enum XiaomiAnswer: Sendable, Equatable {
    case outcome(SendOutcome)
    /// The app's daily quota is spent (10034, 200001): hold sends until Xiaomi's day resets.
    case dailyQuota(reason: String)
    /// The AppSecret was refused (21301, 21302, HTTP 401): a static key, so no new one can be had.
    case authRefused(reason: String)
}

public enum XiaomiResponseClassifier {
    public static let maxBodyBytes = 64 * 1024
    /// Retryable: Xiaomi busy or failing inside.
    public static let transientCodes: Set<Int64> = [-1, 1, 10001, 10002, 10003, 10027, 26003, 65029]
    public static let quotaCodes: Set<Int64> = [10034, 200001]
    public static let authCodes: Set<Int64> = [21301, 21302]

    public struct Body: Sendable, Equatable {
        public var code: Int64?
        public var result: String?
        public var reason: String?
        public var id: String?
        public var traceID: String?
        public var badRegids: [String] = []
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        if let n = json["code"] as? NSNumber, let i = Int64(exactly: n.doubleValue), i.magnitude < 1_000_000_000_000 {
            out.code = i
        } else if let s = json["code"] as? String, s.utf8.count <= 16, let i = Int64(s) {
            out.code = i
        }
        out.result = (json["result"] as? String).map { oneLine($0, max: 16) }
        var text: [String] = []
        for case let t as String in [json["description"], json["reason"]] where !t.isEmpty && !text.contains(t) { text.append(t) }
        out.reason = text.isEmpty ? nil : oneLine(text.joined(separator: "; "), max: 300)
        out.traceID = (json["trace_id"] as? String).map { oneLine($0, max: 128) }
        if let data = json["data"] as? [String: Any] {
            out.id = (data["id"] as? String).map { oneLine($0, max: 128) }
            if let bad = data["bad_regids"] as? String {
                out.badRegids = bad.split(separator: ",").prefix(1000).map { String($0).trimmingCharacters(in: .whitespaces) }
            }
        }
        return out
    }

    public static func classify(status: Int, body: [UInt8], retryAfter: String?, token: String) -> XiaomiAnswer {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        func reason(_ code: Int64) -> String {
            guard let r = parsed?.reason else { return "\(code)" }
            return "\(code): \(r)"
        }
        if let parsed, let code = parsed.code {
            if parsed.badRegids.contains(token) {
                return .outcome(.tokenDead(reason: "\(code): bad regid", status: status))
            }
            switch code {
            case 0 where (200..<300).contains(status):
                return .outcome(.delivered(providerID: parsed.id ?? parsed.traceID))
            case let c where quotaCodes.contains(c):
                return .dailyQuota(reason: reason(c))
            case let c where authCodes.contains(c):
                return .authRefused(reason: reason(c))
            case let c where transientCodes.contains(c):
                return .outcome(.transient(reason: reason(c), status: status, retryAfter: delay))
            case 65009:
                return .outcome(.permanent(reason: "PayloadTooLarge (\(reason(code)))", status: status))
            case 0:
                break
            default:
                return .outcome(.permanent(reason: reason(code), status: status))
            }
        }
        switch status {
        case 401, 403:
            return .authRefused(reason: "HTTP \(status)")
        case 408, 429, 500...599:
            return .outcome(.transient(reason: "HTTP \(status)", status: status, retryAfter: delay))
        default:
            return .outcome(.permanent(reason: parsed == nil ? "unreadable Xiaomi answer (HTTP \(status))" : "HTTP \(status)", status: status))
        }
    }
}
