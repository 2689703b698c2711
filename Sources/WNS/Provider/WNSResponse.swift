import Foundation
import ProviderKit
import PushgateCore

/// WNS's answer to one send, as far as the classifier reads it (every value untrusted: cut, one line).
public struct WNSAnswer: Sendable, Equatable {
    public var status: Int
    /// `X-WNS-Status`: received, dropped, channelthrottled.
    public var wnsStatus: String?
    /// `X-WNS-DeviceConnectionStatus`: connected, disconnected, tempconnected (answered to `X-WNS-RequestForStatus`).
    public var deviceConnectionStatus: String?
    public var errorDescription: String?
    /// `X-WNS-Msg-ID`: the provider id of a delivered notification.
    public var messageID: String?
    public var retryAfter: String?
    /// `X-WNS-CONTINUE-AFTER`: seconds to wait on a throttled channel.
    public var continueAfter: String?

    /// The `X-WNS-Status` values WNS documents.
    public static let wnsStatusValues: Set<String> = ["received", "dropped", "channelthrottled"]
    /// The `X-WNS-DeviceConnectionStatus` values WNS documents.
    public static let deviceConnectionStatusValues: Set<String> = ["connected", "disconnected", "tempconnected", "tempdisconnected"]

    /// What a 200 tells of the notification beyond its acceptance, for the delivery's status
    /// (`SendOutcome.delivered`'s detail): "X-WNS-Status: dropped, X-WNS-DeviceConnectionStatus:
    /// disconnected"; only documented values, nil when neither header has one.
    public var deliveryDetail: String? {
        var parts: [String] = []
        if let w = wnsStatus, Self.wnsStatusValues.contains(w) { parts.append("X-WNS-Status: \(w)") }
        if let d = deviceConnectionStatus, Self.deviceConnectionStatusValues.contains(d) { parts.append("X-WNS-DeviceConnectionStatus: \(d)") }
        return parts.isEmpty ? nil : parts.joined(separator: ", ")
    }

    public init(status: Int, headers: [(String, String)]) {
        self.status = status
        func header(_ name: String, max: Int) -> String? {
            guard let v = headers.first(where: { $0.0.caseInsensitiveCompare(name) == .orderedSame })?.1 else { return nil }
            let cut = oneLine(v, max: max).logSafe(max: max)
            return cut.isEmpty ? nil : cut
        }
        wnsStatus = header("x-wns-status", max: 32)?.lowercased()
        deviceConnectionStatus = header("x-wns-deviceconnectionstatus", max: 32)?.lowercased()
        errorDescription = header("x-wns-error-description", max: 200)
        messageID = header("x-wns-msg-id", max: 128).flatMap { id in id.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F } ? id : nil }
        retryAfter = header("retry-after", max: 64)
        continueAfter = header("x-wns-continue-after", max: 32)
    }
}

/// Classifies WNS's answers (response codes and their sources in docs/wns.md).
public enum WNSResponseClassifier {
    public static func classify(_ a: WNSAnswer) -> SendOutcome {
        func reason(_ name: String) -> String {
            guard let d = a.errorDescription else { return name }
            return "\(name): \(d)"
        }
        let delay = RetryAfter.parse(a.retryAfter) ?? RetryAfter.parse(a.continueAfter)
        switch a.status {
        case 200..<300:
            return .delivered(providerID: a.messageID, detail: a.deliveryDetail)
        case 400:
            return .permanent(reason: reason("BadRequest"), status: a.status)
        case 401:
            return .credentials(reason: reason("Unauthorized"), status: a.status)
        case 403:
            // The token is valid but for another app than the channel's: a configuration error
            // (wrong credentials for this app), not a dead channel. A credentials failure: the token
            // is dropped and the send made once more with a new one (a fix made at Microsoft's end is
            // seen at once), and the sender marks the provider failing.
            return .credentials(reason: reason("Forbidden (the WNS credentials are not those of the channel's app)"), status: a.status)
        case 404:
            return .tokenDead(reason: reason("NotFound (channel URI not recognised)"), status: a.status)
        case 405:
            return .permanent(reason: reason("MethodNotAllowed"), status: a.status)
        case 406:
            return .transient(reason: reason("Throttled"), status: a.status, retryAfter: delay)
        case 410:
            // "410 Domain Blocked" (the sender's domain is blocked) is not about the channel.
            if let d = a.errorDescription?.lowercased(), d.contains("domain"), d.contains("blocked") {
                return .permanent(reason: reason("DomainBlocked"), status: a.status)
            }
            return .tokenDead(reason: reason("Gone (channel expired)"), status: a.status)
        case 413:
            return .permanent(reason: reason("PayloadTooLarge"), status: a.status)
        case 429:
            // "Monthly Quota Exceeded": nothing to gain from retrying within a delivery's lifetime.
            return .quotaExceeded(reason: reason("MonthlyQuotaExceeded"), status: a.status)
        case 408, 500...599:
            return .transient(reason: reason(a.status == 503 ? "ServiceUnavailable" : "HTTP \(a.status)"), status: a.status, retryAfter: delay)
        default:
            return .permanent(reason: reason("HTTP \(a.status)"), status: a.status)
        }
    }
}
