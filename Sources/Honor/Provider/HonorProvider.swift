import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// Honor's answer to one send, classified (docs/china-vendors.md, "Honor", with sources).
public enum HonorAnswer: Sendable, Equatable {
    case outcome(SendOutcome)
    /// A code of `honor.quota_codes`: the app's daily quota is spent.
    case dailyQuota(reason: String)
}

/// Honor's answers: `{"code":200,"message":"…","data":{"sendResult":true,"requestId":"…",
/// "failTokens":[],"expireTokens":[]}}` (meetleev/go-multipush, cossim/hipush). Honor publishes no
/// table of its codes: success is `code` 200 (cossim/hipush); a token in `expireTokens` is dead
/// (the field's name); the HTTP-like codes 401, 429 and 5xx, and the HMS codes Honor's API was
/// derived from (80200001 / 80200003 refused access token, 80300007 invalid token, 81000001
/// internal error), are read as they are there [inferred].
public enum HonorResponseClassifier {
    public static let maxBodyBytes = 64 * 1024
    public static let success: Int64 = 200
    /// The access token was refused (expired, unknown, another app's).
    public static let authCodes: Set<Int64> = [401, 80_200_001, 80_200_003]
    /// Every token of the request is invalid.
    public static let invalidTokenCodes: Set<Int64> = [80_300_007]
    /// Flow control and Honor's own failures: retried with backoff.
    public static let transientCodes: Set<Int64> = [408, 429, 500, 502, 503, 504, 81_000_001]

    public struct Body: Sendable, Equatable {
        public var code: Int64?
        public var message: String?
        public var sendResult: Bool?
        public var requestID: String?
        public var failTokens: [String] = []
        public var expireTokens: [String] = []
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        out.code = code(json["code"])
        out.message = (json["message"] as? String ?? json["msg"] as? String).map { oneLine($0, max: 300) }
        if let d = json["data"] as? [String: Any] {
            if let b = d["sendResult"] as? Bool { out.sendResult = b }
            out.requestID = (d["requestId"] as? String).map { oneLine($0, max: 128) }
            out.failTokens = tokens(d["failTokens"])
            out.expireTokens = tokens(d["expireTokens"])
        }
        return out
    }

    /// A code as a number or a numeric string, range-checked before any conversion.
    static func code(_ v: Any?) -> Int64? {
        if let n = v as? NSNumber {
            let d = n.doubleValue
            guard d.isFinite, abs(d) < 1e15 else { return nil }
            return Int64(exactly: d)
        }
        if let s = v as? String, (1...15).contains(s.utf8.count), s.utf8.allSatisfy({ (48...57).contains($0) }) { return Int64(s) }
        return nil
    }

    /// At most 1000 strings of a list (a one-token send's answer names at most one).
    static func tokens(_ v: Any?) -> [String] {
        guard let a = v as? [Any] else { return [] }
        return a.prefix(1000).compactMap { $0 as? String }
    }

    public static func classify(status: Int, body: [UInt8], retryAfter: String?, token: String, quotaCodes: Set<Int64> = []) -> HonorAnswer {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        if let parsed {
            let reason = parsed.code.map { c in parsed.message.map { "\(c): \($0)" } ?? "\(c)" } ?? "HTTP \(status)"
            if parsed.expireTokens.contains(token) {
                return .outcome(.tokenDead(reason: "expireTokens (\(reason))", status: status))
            }
            if let code = parsed.code {
                switch code {
                case success where (200..<300).contains(status):
                    if parsed.failTokens.contains(token) || parsed.sendResult == false {
                        return .outcome(.permanent(reason: "failTokens (\(reason))", status: status))
                    }
                    return .outcome(.delivered(providerID: parsed.requestID))
                case let c where quotaCodes.contains(c): return .dailyQuota(reason: reason)
                case let c where authCodes.contains(c): return .outcome(.credentials(reason: reason, status: status))
                case let c where invalidTokenCodes.contains(c): return .outcome(.tokenDead(reason: reason, status: status))
                case let c where transientCodes.contains(c): return .outcome(.transient(reason: reason, status: status, retryAfter: delay))
                case success: break
                default: return .outcome(.permanent(reason: reason, status: status))
                }
            }
        }
        switch status {
        case 401: return .outcome(.credentials(reason: "HTTP 401", status: status))
        case 408, 429, 500...599: return .outcome(.transient(reason: "HTTP \(status)", status: status, retryAfter: delay))
        default: return .outcome(.permanent(reason: parsed == nil ? "unreadable Honor answer (HTTP \(status))" : "HTTP \(status)", status: status))
        }
    }
}

/// Honor Push: one OAuth 2.0 access token (client credentials at Honor's token endpoint) shared by
/// every send, fetched again 5 minutes before it expires and when Honor refuses it; one
/// `POST /api/v1/<appId>/sendMessage` per token with the bearer and a millisecond `timestamp`.
public final class HonorProvider: PushProvider {
    public var platform: Platform { .honor }
    public let configuration: HonorConfiguration
    public let quota: DailyQuotaHold
    public let tokens: OAuthTokenCache
    let client: HTTPClient
    let timeout: TimeAmount
    let now: @Sendable () -> Date
    let logger: Logger

    public init(
        configuration: HonorConfiguration, httpClient: HTTPClient, tokenClient: HTTPClient? = nil, timeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }, quotaClock: (@Sendable () -> Date)? = nil,
        logger: Logger = Logger(label: "pushgate.honor")
    ) {
        self.configuration = configuration
        self.client = httpClient
        self.timeout = timeout
        self.now = now
        self.logger = logger
        self.quota = DailyQuotaHold(now: quotaClock ?? now)
        let url = configuration.tokenURL
        let form = Array(configuration.tokenForm.utf8)
        self.tokens = OAuthTokenCache(
            provider: "Honor", transport: OAuthTokenCache.httpTransport(tokenClient ?? httpClient, timeout: timeout), logger: logger,
            refreshMargin: HonorConfiguration.refreshMargin, lifetimeBounds: HonorConfiguration.lifetimeBounds,
            secrets: [configuration.clientSecret], now: now
        ) { _ in (url, form) }
    }

    /// The ingest rule that needs the app's configuration: an importance from the request or the app.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: HonorOptions?
        do { options = try HonorRequestMember.options(of: n) } catch { return error.ingestProblem }
        return HonorMessageMapper.check(n, options: options, defaultImportance: configuration.defaultImportance)?.ingestProblem
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        let options: HonorOptions?
        do { options = try HonorRequestMember.options(of: notification) } catch { throw PushFailure(error.description) }
        return try prepare(notification, options: options)
    }

    public func prepare(_ notification: PushNotification, options: HonorOptions?) throws(PushFailure) -> HonorPreparedMessage {
        try HonorMessageMapper.prepare(notification, options: options, configuration: configuration)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard case .token(let t) = target else { return PushFailure("Honor sends to push tokens only") }
        return HonorMessageMapper.isToken(t) ? nil : PushFailure("InvalidRegistration (not an Honor push token)")
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? HonorPreparedMessage, case .token(let token) = target, HonorMessageMapper.isToken(token) else {
            return .permanent(reason: "unsupported Honor target", status: nil)
        }
        if let held = await quota.current() {
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "Honor", until: held.until, reason: held.reason), status: nil)
        }
        let bearer: String
        switch await tokens.bearer(name: "Honor", logger: logger) {
        case .success(let t): bearer = t
        case .failure(let f):
            // Honor's token endpoint refused the client credentials: asked once more (the retry with
            // fresh credentials), then the delivery fails with this reason.
            guard case .permanent(let reason, let status) = f.outcome else { return f.outcome }
            logger.error(
                "Honor refused the client credentials: check honor.client_id and honor.client_secret",
                metadata: ["app_id": "\(configuration.appID)", "error": "\(reason)"])
            return .credentials(reason: reason, status: status)
        }
        let ms = Int64((now().timeIntervalSince1970 * 1000).rounded(.down))
        let answer: (status: Int, body: [UInt8], retryAfter: String?)
        do {
            answer = try await BoundedPOST.send(
                client, url: configuration.sendURL, contentType: "application/json; charset=UTF-8",
                headers: [("authorization", "Bearer " + bearer), ("timestamp", String(ms))], body: p.body(token: token),
                maxBytes: HonorResponseClassifier.maxBodyBytes + 1, timeout: timeout)
        } catch {
            return .transient(reason: tokens.scrub("\(error)"), status: nil, retryAfter: nil)
        }
        switch HonorResponseClassifier.classify(
            status: answer.status, body: answer.body, retryAfter: answer.retryAfter, token: token, quotaCodes: configuration.quotaCodes)
        {
        case .outcome(let o):
            if case .credentials(let reason, _) = o {
                await tokens.invalidate(bearer)
                logger.warning("Honor refused the access token: a new one is fetched for the retry", metadata: ["answer": "\(reason)"])
            }
            return o
        case .dailyQuota(let reason):
            let (until, started) = await quota.hold(reason: reason)
            if started {
                logger.warning(
                    "Honor daily quota spent: sends to this app held until Honor's day resets",
                    metadata: ["until": "\(until)", "answer": "\(reason)"])
            }
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "Honor", until: until, reason: reason), status: answer.status)
        }
    }

    public func shutdown() async {}
}
