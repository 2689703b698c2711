import Foundation
import HTTP2Pool
import Huawei
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// HarmonyOS Push Kit v3 provider (platform 6, `harmony`): one HTTP/2 `POST /v3/{projectId}/messages:send`
/// per token over pooled connections, authorised with the service account's JWT, with the
/// `push-type` header of the notification's message type. Answers are HMS-shaped
/// (`{"code","msg","requestId"}`) and classified as HMS v1's are.
public final class HarmonyProvider: PushProvider {
    public let platform: Platform = .harmony
    public let name = "harmony"
    public let configuration: HarmonyConfiguration
    public let jwt: HarmonyJWTSource
    public var pool: HTTP2ConnectionPool { sender.pool }
    let sender: BearerJSONSender

    public init(
        configuration: HarmonyConfiguration, poolConfiguration: HTTP2PoolConfiguration, eventLoopGroup: any EventLoopGroup,
        jwt: HarmonyJWTSource? = nil, logger: Logger = Logger(label: "pushgate.harmony")
    ) throws(HuaweiConfigurationError) {
        let (target, _) = try HuaweiConfiguration.parseEndpoint(configuration.endpoint, key: "harmony.endpoint")
        self.configuration = configuration
        let jwt = jwt ?? HarmonyJWTSource(account: configuration.serviceAccount)
        self.jwt = jwt
        var pc = poolConfiguration
        pc.label.provider = "harmony"
        self.sender = BearerJSONSender(
            name: "HarmonyOS",
            pool: HTTP2ConnectionPool(target: target, configuration: pc, eventLoopGroup: eventLoopGroup, logger: logger),
            path: configuration.sendPath, contentType: "application/json", tokens: jwt, maxResponseBytes: HuaweiResponseClassifier.maxBodyBytes + 1,
            logger: logger, classify: { HuaweiResponseClassifier.classify(status: $0, body: $1, retryAfter: $2) })
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        try HarmonyMessageMapper.prepare(notification)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard let p = prepared as? HarmonyPreparedMessage else { return PushFailure("not a HarmonyOS message") }
        guard case .token(let t) = target else { return PushFailure("HarmonyOS Push Kit sends to device tokens only") }
        if t.isEmpty { return PushFailure("the token must not be empty") }
        let size = p.body(token: t).count
        if size > HarmonyMessageMapper.maxMessageSize { return .payloadTooLarge(size: size, limit: HarmonyMessageMapper.maxMessageSize) }
        return nil
    }

    /// Sends a delivery the dispatcher planned: `validate` passed when it was planned.
    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? HarmonyPreparedMessage, case .token(let token) = target else {
            return .permanent(reason: "unsupported HarmonyOS target", status: nil)
        }
        return await sender.send(p.body(token: token), headers: [("push-type", String(p.pushType.rawValue))], context: context)
    }

    public func shutdown() async {
        await pool.shutdown()
    }
}
