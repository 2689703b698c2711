import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import ProviderKit
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
    let sender: BearerJSONSender

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
        var pc = poolConfiguration
        pc.label.provider = "fcm"
        let pool = HTTP2ConnectionPool(target: target, configuration: pc, eventLoopGroup: eventLoopGroup, logger: logger)
        self.pool = pool
        self.sender = BearerJSONSender(
            name: "FCM", pool: pool, path: configuration.sendPath, contentType: "application/json", tokens: tokenProvider.cache, logger: logger
        ) { status, body, retryAfter in FCMResponseClassifier.classify(status: status, body: body, retryAfter: retryAfter) }
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        try FCMMessageMapper.prepare(notification)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard let p = prepared as? FCMPreparedMessage else { return PushFailure("not an FCM message") }
        return p.check(target: target, provider: "FCM", limit: FCMMessageMapper.maxMessageSize)
    }

    /// Sends a delivery the dispatcher planned: `validate` passed when it was planned.
    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? FCMPreparedMessage, let body = p.body(for: target) else {
            return .permanent(reason: "unsupported FCM target", status: nil)
        }
        return await sender.send(body, context: context)
    }

    public func shutdown() async {
        await pool.shutdown()
    }
}
