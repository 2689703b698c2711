import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// OPPO's answer to one send or auth request, classified (codes: OPPO's API doc copy, table with
/// sources in docs/china-vendors.md).
public enum OppoAnswer: Sendable, Equatable {
    case outcome(SendOutcome)
    /// 33: the app's daily message limit is reached.
    case dailyQuota(reason: String)
}

public enum OppoResponseClassifier {
    public static let maxBodyBytes = 64 * 1024
    public static let transientCodes: Set<Int64> = [-2, -1, 13, 55]
    public static let invalidAuthToken: Int64 = 11
    public static let dailyLimit: Int64 = 33
    public static let invalidRegid: Int64 = 10000

    public struct Body: Sendable, Equatable {
        public var code: Int64?
        public var message: String?
        public var data: [String: String] = [:]
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        if let n = json["code"] as? NSNumber, let i = Int64(exactly: n.doubleValue), abs(i) < 1_000_000_000 { out.code = i }
        out.message = (json["message"] as? String).map { oneLine($0, max: 300) }
        if let d = json["data"] as? [String: Any] {
            for (k, v) in d.prefix(16) {
                if let s = v as? String { out.data[k] = oneLine(s, max: 4096) } else if let n = v as? NSNumber { out.data[k] = n.stringValue }
            }
        }
        return out
    }

    public static func classify(status: Int, body: [UInt8], retryAfter: String?) -> OppoAnswer {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        if let parsed, let code = parsed.code {
            let reason = parsed.message.map { "\(code): \($0)" } ?? "\(code)"
            switch code {
            case 0 where (200..<300).contains(status): return .outcome(.delivered(providerID: parsed.data["messageId"]))
            case invalidRegid: return .outcome(.tokenDead(reason: reason, status: status))
            case invalidAuthToken: return .outcome(.credentials(reason: reason, status: status))
            case dailyLimit: return .dailyQuota(reason: reason)
            case let c where transientCodes.contains(c): return .outcome(.transient(reason: reason, status: status, retryAfter: delay))
            case 0: break
            default: return .outcome(.permanent(reason: reason, status: status))
            }
        }
        switch status {
        case 408, 429, 500...599: return .outcome(.transient(reason: "HTTP \(status)", status: status, retryAfter: delay))
        default: return .outcome(.permanent(reason: parsed == nil ? "unreadable OPPO answer (HTTP \(status))" : "HTTP \(status)", status: status))
        }
    }
}

/// OPPO Push: an `auth_token` from `POST /server/v1/auth` (app_key, millisecond timestamp,
/// SHA-256 signature with the MasterSecret) shared by every send and refreshed an hour before its
/// 24 hours end, re-fetched when OPPO refuses it (11); one `unicast` per token, form-encoded.
public final class OppoProvider: PushProvider {
    public var platform: Platform { .oppo }
    public let configuration: OppoConfiguration
    public let quota: DailyQuotaHold
    public let tokens: VendorTokenCache
    let client: HTTPClient
    let timeout: TimeAmount
    let logger: Logger

    public init(
        configuration: OppoConfiguration, httpClient: HTTPClient, timeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }, quotaClock: (@Sendable () -> Date)? = nil,
        logger: Logger = Logger(label: "pushgate.oppo")
    ) {
        self.configuration = configuration
        self.client = httpClient
        self.timeout = timeout
        self.logger = logger
        self.quota = DailyQuotaHold(now: quotaClock ?? now)
        let c = configuration
        self.tokens = VendorTokenCache(vendor: "OPPO", logger: logger, now: now) { issued in
            let (status, body) = try await OppoProvider.post(
                httpClient, c.endpoint + OppoConfiguration.authPath, Array(c.authForm(at: issued).utf8), timeout)
            let parsed = OppoResponseClassifier.parse(body)
            guard status == 200, let parsed, parsed.code == 0, let token = parsed.data["auth_token"] else {
                let code = parsed?.code
                // 14 bad app key, 16 bad signature: the credentials are wrong; anything else may pass.
                throw VendorTokenCache.Failure(
                    "OPPO auth refused (HTTP \(status), code \(code.map(String.init) ?? "none"): \(parsed?.message ?? ""))",
                    permanent: code == 14 || code == 16 || code == 28)
            }
            return (token, OppoConfiguration.tokenLifetime)
        }
    }

    static func post(_ client: HTTPClient, _ url: String, _ body: [UInt8], _ timeout: TimeAmount) async throws -> (Int, [UInt8]) {
        let answer = try await BoundedPOST.send(
            client, url: url, contentType: "application/x-www-form-urlencoded;charset=UTF-8", body: body,
            maxBytes: OppoResponseClassifier.maxBodyBytes + 1, timeout: timeout)
        return (answer.status, answer.body)
    }

    /// The ingest rule that needs the app's configuration: the classification from the request or
    /// the app's default (else a 400 naming the field), with the message checks of the vendor.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: OppoOptions?
        do { options = try OppoRequestMember.options(of: n) } catch { return error.ingestProblem }
        return checkIngest(n, options: options)
    }

    public func checkIngest(_ n: PushNotification, options: OppoOptions?) -> IngestProblem? {
        OppoMessageMapper.check(n, options: options, defaultCategory: configuration.defaultCategory)?.ingestProblem
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        let options: OppoOptions?
        do { options = try OppoRequestMember.options(of: notification) } catch { throw PushFailure(error.description) }
        return try prepare(notification, options: options)
    }

    public func prepare(_ notification: PushNotification, options: OppoOptions?) throws(PushFailure) -> OppoPreparedMessage {
        try OppoMessageMapper.prepare(notification, options: options, configuration: configuration)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard case .token(let t) = target else { return PushFailure("OPPO sends to registration ids only") }
        return OppoMessageMapper.isRegistrationID(t) ? nil : PushFailure("InvalidRegistrationId (not an OPPO regid)")
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? OppoPreparedMessage, case .token(let regid) = target, OppoMessageMapper.isRegistrationID(regid) else {
            return .permanent(reason: "unsupported OPPO target", status: nil)
        }
        if let held = await quota.current() {
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "OPPO", until: held.until, reason: held.reason), status: nil)
        }
        let token: String
        switch await tokens.bearer(name: "OPPO", logger: logger) {
        case .success(let t): token = t
        case .failure(let f): return f.outcome
        }
        let form = "auth_token=" + OAuthTokenCache.formEncode(token) + "&message=" + OAuthTokenCache.formEncode(p.message(for: regid))
        let status: Int
        let body: [UInt8]
        do {
            (status, body) = try await Self.post(client, configuration.endpoint + OppoConfiguration.unicastPath, Array(form.utf8), timeout)
        } catch {
            return .transient(reason: "\(error)", status: nil, retryAfter: nil)
        }
        switch OppoResponseClassifier.classify(status: status, body: body, retryAfter: nil) {
        case .outcome(let o):
            if case .credentials = o {
                await tokens.invalidate(token)
                logger.warning("OPPO refused the auth_token: fetching a new one")
            }
            return o
        case .dailyQuota(let reason):
            let (until, started) = await quota.hold(reason: reason)
            if started {
                logger.warning(
                    "OPPO daily limit reached: sends to this app held until OPPO's day resets",
                    metadata: ["until": "\(until)", "answer": "\(reason)"])
            }
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "OPPO", until: until, reason: reason), status: status)
        }
    }

    public func shutdown() async {}
}
