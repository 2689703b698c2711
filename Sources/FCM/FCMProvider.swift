import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import PushgateCore

/// FCM HTTP v1 provider (platform 2): one HTTP/2 `messages:send` per token over pooled connections,
/// authorised with a shared OAuth2 access token minted from the service account.
public final class FCMProvider: PushProvider {
    public let platform: Platform = .android
    /// Name used in logs and metrics.
    public let name = "fcm"
    public let configuration: FCMConfiguration
    public let tokenProvider: FCMTokenProvider
    public let pool: HTTP2ConnectionPool
    let sendPath: String
    let logger: Logger

    /// - Parameters:
    ///   - httpClient: used for the OAuth2 token exchange with `token_uri` (owned by the caller).
    ///   - poolConfiguration: HTTP/2 pool settings for the FCM endpoint (TLS trust, extra CA).
    public convenience init(
        configuration: FCMConfiguration,
        httpClient: HTTPClient,
        poolConfiguration: HTTP2PoolConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.fcm")
    ) throws(FCMConfigurationError) {
        let tokens = FCMTokenProvider(serviceAccount: configuration.serviceAccount, httpClient: httpClient, logger: logger)
        try self.init(
            configuration: configuration, tokenProvider: tokens, poolConfiguration: poolConfiguration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    /// With an explicit token provider (tests, or sharing one provider).
    public init(
        configuration: FCMConfiguration,
        tokenProvider: FCMTokenProvider,
        poolConfiguration: HTTP2PoolConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.fcm")
    ) throws(FCMConfigurationError) {
        let (target, _) = try FCMConfiguration.parseEndpoint(configuration.endpoint)
        self.configuration = configuration
        self.tokenProvider = tokenProvider
        self.sendPath = configuration.sendPath
        self.logger = logger
        self.pool = HTTP2ConnectionPool(target: target, configuration: poolConfiguration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        try FCMMessageMapper.prepare(notification)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard let p = prepared as? FCMPreparedMessage else { return PushFailure("not an FCM message") }
        switch target {
        case .subscription:
            return PushFailure("FCM cannot deliver to a Web Push subscription")
        case .topic where p.topicTarget == nil:
            return PushFailure("FCM topic send without topic or condition")
        case .token(let t) where t.isEmpty:
            return PushFailure("the token must not be empty")
        default:
            let size = p.size(for: target)
            if size > FCMMessageMapper.maxMessageSize {
                return .payloadTooLarge(size: size, limit: FCMMessageMapper.maxMessageSize)
            }
            return nil
        }
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? FCMPreparedMessage else {
            return .permanent(reason: "not an FCM message", status: nil)
        }
        if let failure = validate(target: target, of: p) {
            return .permanent(reason: failure.reason, status: nil)
        }
        guard let body = p.body(for: target) else {
            return .permanent(reason: "unsupported FCM target", status: nil)
        }

        let accessToken: String
        do {
            accessToken = try await tokenProvider.accessToken()
        } catch let error as FCMAuthError {
            logger.error("FCM access token unavailable", metadata: ["error": "\(error)"])
            if error.isPermanent { return .permanent(reason: error.description, status: error.status) }
            return .transient(reason: error.description, status: error.status, retryAfter: nil)
        } catch {
            return .transient(reason: "FCM OAuth: \(error)", status: nil, retryAfter: nil)
        }

        let request = HTTP2Request(
            method: "POST",
            path: sendPath,
            headers: [
                ("authorization", "Bearer \(accessToken)"),
                ("content-type", "application/json"),
            ],
            body: ByteBuffer(bytes: body)
        )

        // One attempt: a connection-level failure goes back to the retry policy (the pool has
        // already re-queued what the server refused unprocessed).
        let response: HTTP2Response
        do {
            response = try await pool.execute(request)
        } catch {
            let reason = "\(error)"
            logger.debug("FCM send failed at the connection level", metadata: ["error": "\(reason)", "message_id": "\(context.messageID)"])
            return .transient(reason: reason, status: nil, retryAfter: nil)
        }

        var bodyBuffer = response.body
        let responseBytes = bodyBuffer.readBytes(length: bodyBuffer.readableBytes) ?? []
        let outcome = FCMResponseClassifier.classify(status: response.status, body: responseBytes, retryAfter: response.header("retry-after"))
        if case .credentials = outcome {
            await tokenProvider.invalidate(accessToken)
        }
        if !outcome.isDelivered {
            logger.debug(
                "FCM send not delivered",
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
