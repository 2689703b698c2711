import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import ProviderKit
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
    let sender: BearerJSONSender

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
        var pc = poolConfiguration
        pc.label.provider = "hms"
        let pool = HTTP2ConnectionPool(target: target, configuration: pc, eventLoopGroup: eventLoopGroup, logger: logger)
        self.pool = pool
        self.sender = BearerJSONSender(
            name: "HMS", pool: pool, path: configuration.sendPath, contentType: "application/json;charset=utf-8", tokens: tokenProvider.cache,
            maxResponseBytes: HuaweiResponseClassifier.maxBodyBytes + 1, logger: logger
        ) { status, body, retryAfter in HuaweiResponseClassifier.classify(status: status, body: body, retryAfter: retryAfter) }
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        try HuaweiMessageMapper.prepare(notification)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard let p = prepared as? HuaweiPreparedMessage else { return PushFailure("not an HMS message") }
        return p.check(target: target, provider: "HMS", limit: HuaweiMessageMapper.maxMessageSize)
    }

    /// Sends a delivery the dispatcher planned: `validate` passed when it was planned.
    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? HuaweiPreparedMessage, let body = p.body(for: target) else {
            return .permanent(reason: "unsupported HMS target", status: nil)
        }
        return await sender.send(body, context: context)
    }

    public func shutdown() async {
        await pool.shutdown()
    }
}
