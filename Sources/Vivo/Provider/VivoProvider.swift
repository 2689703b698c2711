import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// vivo's answer to one send, classified (codes: docs/china-vendors.md, "vivo", with sources).
public enum VivoAnswer: Sendable, Equatable {
    case outcome(SendOutcome)
    /// 10070: the app's daily total is reached.
    case dailyQuota(reason: String)
}

public enum VivoResponseClassifier {
    public static let maxBodyBytes = 64 * 1024
    public static let invalidRegid: Int64 = 10302
    public static let dailyLimit: Int64 = 10070
    /// The authToken was refused (expired, unknown).
    public static let authCodes: Set<Int64> = [10000, 10050]
    /// Call limits and vivo's own failures: retried.
    public static let transientCodes: Set<Int64> = [10093, 10250, 10500, 10501]

    public struct Body: Sendable, Equatable {
        public var result: Int64?
        public var desc: String?
        public var taskID: String?
        public var authToken: String?
        /// `invalidUser.status` (1 unknown, 2 uninstalled or unsubscribed, 4 not a test device).
        public var invalidUserStatus: Int64?
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        if let n = json["result"] as? NSNumber, let i = Int64(exactly: n.doubleValue), abs(i) < 1_000_000_000 { out.result = i }
        out.desc = (json["desc"] as? String).map { oneLine($0, max: 300) }
        out.taskID = (json["taskId"] as? String).map { oneLine($0, max: 128) } ?? (json["taskId"] as? NSNumber)?.stringValue
        if let t = json["authToken"] as? String, (1...VendorTokenCache.maxTokenBytes).contains(t.utf8.count) { out.authToken = t }
        if let u = json["invalidUser"] as? [String: Any], let s = u["status"] as? NSNumber, let i = Int64(exactly: s.doubleValue) {
            out.invalidUserStatus = i
        }
        return out
    }

    public static func classify(status: Int, body: [UInt8], retryAfter: String?) -> VivoAnswer {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        if let parsed, let code = parsed.result {
            let reason = parsed.desc.map { "\(code): \($0)" } ?? "\(code)"
            switch code {
            case 0 where (200..<300).contains(status): return .outcome(.delivered(providerID: parsed.taskID))
            // A regId vivo does not know or that was uninstalled: dead; "not a test device" (4) is not.
            case invalidRegid where parsed.invalidUserStatus != 4:
                return .outcome(.tokenDead(reason: reason + (parsed.invalidUserStatus.map { " (invalidUser status \($0))" } ?? ""), status: status))
            case dailyLimit: return .dailyQuota(reason: reason)
            case let c where authCodes.contains(c): return .outcome(.credentials(reason: reason, status: status))
            case let c where transientCodes.contains(c): return .outcome(.transient(reason: reason, status: status, retryAfter: delay))
            case 0: break
            default: return .outcome(.permanent(reason: reason, status: status))
            }
        }
        switch status {
        case 408, 429, 500...599: return .outcome(.transient(reason: "HTTP \(status)", status: status, retryAfter: delay))
        default: return .outcome(.permanent(reason: parsed == nil ? "unreadable vivo answer (HTTP \(status))" : "HTTP \(status)", status: status))
        }
    }
}

/// vivo Push: an `authToken` from `POST /message/auth` (appId, appKey, millisecond timestamp, MD5
/// signature with the AppSecret) shared by every send, fetched again an hour after it was issued
/// and when vivo refuses it, never more than 10 auth calls a second; one `/message/send` per token.
public final class VivoProvider: PushProvider {
    public var platform: Platform { .vivo }
    public let configuration: VivoConfiguration
    public let quota: DailyQuotaHold
    public let tokens: VendorTokenCache
    let client: HTTPClient
    let timeout: TimeAmount
    let logger: Logger

    public init(
        configuration: VivoConfiguration, httpClient: HTTPClient, timeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }, quotaClock: (@Sendable () -> Date)? = nil,
        logger: Logger = Logger(label: "pushgate.vivo")
    ) {
        self.configuration = configuration
        self.client = httpClient
        self.timeout = timeout
        self.logger = logger
        self.quota = DailyQuotaHold(now: quotaClock ?? now)
        let c = configuration
        self.tokens = VendorTokenCache(
            vendor: "vivo", refreshMargin: VivoConfiguration.refreshMargin, minimumInterval: VivoConfiguration.minimumAuthInterval,
            logger: logger, now: now
        ) { issued in
            let (status, body) = try await VivoProvider.post(
                httpClient, c.endpoint + VivoConfiguration.authPath, Array(c.authBody(at: issued).utf8), token: nil, timeout)
            let parsed = VivoResponseClassifier.parse(body)
            guard status == 200, let parsed, parsed.result == 0, let token = parsed.authToken else {
                let code = parsed?.result
                // 10200 parameters, 10206 signature, 10094 appId: the credentials are wrong; a timestamp
                // (10207) or a call limit (10250, 10093) may pass.
                throw VendorTokenCache.Failure(
                    "vivo auth refused (HTTP \(status), result \(code.map(String.init) ?? "none"): \(parsed?.desc ?? ""))",
                    permanent: code == 10200 || code == 10206 || code == 10094)
            }
            return (token, VivoConfiguration.tokenLifetime)
        }
    }

    static func post(_ client: HTTPClient, _ url: String, _ body: [UInt8], token: String?, _ timeout: TimeAmount) async throws -> (Int, [UInt8]) {
        let answer = try await BoundedPOST.send(
            client, url: url, contentType: "application/json;charset=UTF-8", headers: token.map { [("authToken", $0)] } ?? [], body: body,
            maxBytes: VivoResponseClassifier.maxBodyBytes + 1, timeout: timeout)
        return (answer.status, answer.body)
    }

    /// The ingest rule that needs the app's configuration: a category from the request or the app.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: VivoOptions?
        do { options = try VivoRequestMember.options(of: n) } catch { return error.ingestProblem }
        return checkIngest(n, options: options)
    }

    public func checkIngest(_ n: PushNotification, options: VivoOptions?) -> IngestProblem? {
        VivoMessageMapper.check(n, options: options, defaultCategory: configuration.defaultCategory)?.ingestProblem
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        let options: VivoOptions?
        do { options = try VivoRequestMember.options(of: notification) } catch { throw PushFailure(error.description) }
        return try prepare(notification, options: options)
    }

    public func prepare(_ notification: PushNotification, options: VivoOptions?) throws(PushFailure) -> VivoPreparedMessage {
        try VivoMessageMapper.prepare(notification, options: options, configuration: configuration)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard case .token(let t) = target else { return PushFailure("vivo sends to regIds only") }
        return VivoMessageMapper.isRegistrationID(t) ? nil : PushFailure("InvalidRegistrationId (not a vivo regId)")
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? VivoPreparedMessage, case .token(let regid) = target, VivoMessageMapper.isRegistrationID(regid) else {
            return .permanent(reason: "unsupported vivo target", status: nil)
        }
        if let held = await quota.current() {
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "vivo", until: held.until, reason: held.reason), status: nil)
        }
        let token: String
        switch await tokens.bearer(name: "vivo", logger: logger) {
        case .success(let t): token = t
        case .failure(let f): return f.outcome
        }
        let status: Int
        let body: [UInt8]
        do {
            (status, body) = try await Self.post(
                client, configuration.endpoint + VivoConfiguration.sendPath, p.body(regID: regid, requestID: context.messageID), token: token, timeout
            )
        } catch {
            return .transient(reason: "\(error)", status: nil, retryAfter: nil)
        }
        switch VivoResponseClassifier.classify(status: status, body: body, retryAfter: nil) {
        case .outcome(let o):
            if case .credentials = o {
                await tokens.invalidate(token)
                logger.warning("vivo refused the authToken: fetching a new one")
            }
            return o
        case .dailyQuota(let reason):
            let (until, started) = await quota.hold(reason: reason)
            if started {
                logger.warning(
                    "vivo daily limit reached: sends to this app held until vivo's day resets",
                    metadata: ["until": "\(until)", "answer": "\(reason)"])
            }
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "vivo", until: until, reason: reason), status: status)
        }
    }

    public func shutdown() async {}
}
