import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import PushgateCore

/// Huawei HMS Push Kit provider (gorush platform 3): one HTTP/2 `messages:send` per token over
/// pooled connections, authorised with a shared OAuth 2.0 access token (client-credentials grant).
public final class HuaweiProvider: PushProvider {
    public let platform: Platform = .huawei
    /// Name used in logs and metrics.
    public let name = "hms"
    public let configuration: HuaweiConfiguration
    public let tokenProvider: HuaweiTokenProvider
    public let pool: HTTP2ConnectionPool
    let sendPath: String
    let logger: Logger

    /// - Parameters:
    ///   - httpClient: used for the OAuth token requests to `token_url` (owned by the caller).
    ///   - poolConfiguration: HTTP/2 pool settings for the push endpoint (TLS trust, extra CA, proxy).
    public convenience init(
        configuration: HuaweiConfiguration,
        httpClient: HTTPClient,
        poolConfiguration: HTTP2PoolConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.hms")
    ) throws(HuaweiConfigurationError) {
        let tokens = HuaweiTokenProvider(
            appID: configuration.appID, appSecret: configuration.appSecret, tokenURL: configuration.tokenURL, httpClient: httpClient,
            logger: logger)
        try self.init(
            configuration: configuration, tokenProvider: tokens, poolConfiguration: poolConfiguration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    /// With an explicit token provider (tests).
    public init(
        configuration: HuaweiConfiguration,
        tokenProvider: HuaweiTokenProvider,
        poolConfiguration: HTTP2PoolConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.hms")
    ) throws(HuaweiConfigurationError) {
        let (target, _) = try HuaweiConfiguration.parseEndpoint(configuration.endpoint)
        self.configuration = configuration
        self.tokenProvider = tokenProvider
        self.sendPath = configuration.sendPath
        self.logger = logger
        self.pool = HTTP2ConnectionPool(target: target, configuration: poolConfiguration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        try HuaweiMessageMapper.prepare(notification)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard let p = prepared as? HuaweiPreparedMessage else { return PushFailure("not an HMS message") }
        switch target {
        case .subscription:
            return PushFailure("HMS cannot deliver to a Web Push subscription")
        case .topic where p.topicTarget == nil:
            return PushFailure("HMS topic send without topic or condition")
        case .token(let t) where t.isEmpty:
            return PushFailure("the token must not be empty")
        default:
            let size = p.size(for: target)
            if size > HuaweiMessageMapper.maxMessageSize {
                return .payloadTooLarge(size: size, limit: HuaweiMessageMapper.maxMessageSize)
            }
            return nil
        }
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? HuaweiPreparedMessage else {
            return .permanent(reason: "not an HMS message", status: nil)
        }
        if let failure = validate(target: target, of: p) {
            return .permanent(reason: failure.reason, status: nil)
        }
        guard let body = p.body(for: target) else {
            return .permanent(reason: "unsupported HMS target", status: nil)
        }

        let accessToken: String
        do {
            accessToken = try await tokenProvider.accessToken()
        } catch let error as HuaweiAuthError {
            logger.error("HMS access token unavailable", metadata: ["error": "\(error)"])
            if error.isPermanent { return .permanent(reason: error.description, status: error.status) }
            return .transient(reason: error.description, status: error.status, retryAfter: nil)
        } catch {
            return .transient(reason: "HMS OAuth: \(tokenProvider.scrub("\(error)"))", status: nil, retryAfter: nil)
        }

        let request = HTTP2Request(
            method: "POST",
            path: sendPath,
            headers: [
                ("authorization", "Bearer \(accessToken)"),
                ("content-type", "application/json;charset=utf-8"),
            ],
            body: ByteBuffer(bytes: body)
        )

        // One attempt: a connection-level failure goes back to the retry policy.
        let response: HTTP2Response
        do {
            response = try await pool.execute(request)
        } catch {
            let reason = "\(error)"
            logger.debug("HMS send failed at the connection level", metadata: ["error": "\(reason)", "message_id": "\(context.messageID)"])
            return .transient(reason: reason, status: nil, retryAfter: nil)
        }

        var bodyBuffer = response.body
        let responseBytes = bodyBuffer.readBytes(length: min(bodyBuffer.readableBytes, HuaweiResponseClassifier.maxBodyBytes + 1)) ?? []
        let outcome = HuaweiResponseClassifier.classify(status: response.status, body: responseBytes, retryAfter: response.header("retry-after"))
        if case .credentials = outcome {
            await tokenProvider.invalidate(accessToken)
        }
        if !outcome.isDelivered {
            logger.debug(
                "HMS send not delivered",
                metadata: [
                    "status": "\(response.status)", "outcome": "\(outcome.className)", "reason": "\(outcome.reason ?? "")",
                ])
        }
        return outcome
    }

    public func shutdown() async {
        await pool.shutdown()
    }
}
