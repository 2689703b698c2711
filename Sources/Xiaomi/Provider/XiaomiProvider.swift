import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// Xiaomi MiPush: one form-encoded `POST /v3/message/regid` per token, authorised with the app's
/// AppSecret (`Authorization: key=<AppSecret>`, the same for every send), over the shared HTTP
/// client (HTTP/1.1 or HTTP/2 as the server offers; the `core.ca_file` roots and the outbound proxy
/// apply). A daily-quota answer holds further sends to the app until Xiaomi's day resets.
public final class XiaomiProvider: PushProvider {
    public var platform: Platform { .xiaomi }
    public let configuration: XiaomiConfiguration
    public let quota: DailyQuotaHold
    let client: HTTPClient
    let timeout: TimeAmount
    let logger: Logger

    public init(
        configuration: XiaomiConfiguration, httpClient: HTTPClient, timeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }, quotaClock: (@Sendable () -> Date)? = nil,
        logger: Logger = Logger(label: "pushgate.xiaomi")
    ) {
        self.configuration = configuration
        self.client = httpClient
        self.timeout = timeout
        self.quota = DailyQuotaHold(now: quotaClock ?? now)
        self.logger = logger
    }

    /// The ingest rule that needs the app's configuration: a channel in the request or the app's default.
    /// The ingest rule that needs the app's configuration: the classification from the request or
    /// the app's default (else a 400 naming the field), with the message checks of the vendor.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: XiaomiOptions?
        do { options = try XiaomiRequestMember.options(of: n) } catch { return error.ingestProblem }
        return checkIngest(n, options: options)
    }

    public func checkIngest(_ n: PushNotification, options: XiaomiOptions?) -> IngestProblem? {
        XiaomiMessageMapper.check(n, options: options, defaultChannelID: configuration.defaultChannelID)?.ingestProblem
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        let options: XiaomiOptions?
        do { options = try XiaomiRequestMember.options(of: notification) } catch { throw PushFailure(error.description) }
        return try prepare(notification, options: options)
    }

    public func prepare(_ notification: PushNotification, options: XiaomiOptions?) throws(PushFailure) -> XiaomiPreparedMessage {
        try XiaomiMessageMapper.prepare(notification, options: options, configuration: configuration)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard case .token(let t) = target else { return PushFailure("Xiaomi sends to registration ids only") }
        return XiaomiMessageMapper.isRegistrationID(t) ? nil : PushFailure("InvalidRegistrationId (not a Xiaomi regid)")
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? XiaomiPreparedMessage, case .token(let token) = target, XiaomiMessageMapper.isRegistrationID(token) else {
            return .permanent(reason: "unsupported Xiaomi target", status: nil)
        }
        if let held = await quota.current() {
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "Xiaomi", until: held.until, reason: held.reason), status: nil)
        }
        let status: Int
        let body: [UInt8]
        let retryAfter: String?
        do {
            (status, body, retryAfter) = try await BoundedPOST.send(
                client, url: configuration.sendURL, contentType: "application/x-www-form-urlencoded;charset=UTF-8",
                headers: [("authorization", "key=" + configuration.appSecret)], body: p.body(for: token),
                maxBytes: XiaomiResponseClassifier.maxBodyBytes + 1, timeout: timeout)
        } catch {
            logger.debug("Xiaomi send failed at the connection level", metadata: ["error": "\(error)", "message_id": "\(context.messageID)"])
            return .transient(reason: "\(error)", status: nil, retryAfter: nil)
        }
        switch XiaomiResponseClassifier.classify(status: status, body: body, retryAfter: retryAfter, token: token) {
        case .outcome(let outcome):
            return outcome
        case .dailyQuota(let reason):
            let (until, started) = await quota.hold(reason: reason)
            if started {
                logger.warning(
                    "Xiaomi daily quota spent: sends to this app held until Xiaomi's day resets",
                    metadata: ["package": "\(configuration.packageName)", "until": "\(until)", "answer": "\(reason)"])
            }
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "Xiaomi", until: until, reason: reason), status: status)
        case .authRefused(let reason):
            logger.error(
                "Xiaomi refused xiaomi.app_secret: check the app's AppSecret",
                metadata: ["package": "\(configuration.packageName)", "answer": "\(reason)"])
            return .permanent(reason: "Xiaomi refused the AppSecret (\(reason))", status: status)
        }
    }

    public func shutdown() async {}
}
