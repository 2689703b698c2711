import Foundation
import HTTP2Pool
import Logging
import Metrics
import NIOCore
import PushgateCore

/// The APNs provider: token-based auth (a JWT per request) or certificate-based trust (the client
/// certificate presented on every TLS connection), two long-lived HTTP/2 connection pools (production and
/// sandbox) chosen per notification, one attempt per `send`, every answer classified.
///
/// The environment is fixed per notification at `prepare` time
/// (`PushNotification.productionOverride ?? configuration.production`), so there is no shared,
/// switched client (gorush's race).
public final class APNsProvider: PushProvider {
    public let platform: Platform = .ios
    public let configuration: APNsConfiguration
    /// The provider token of the first signing key, shared by every connection of both pools (nil
    /// with certificate auth).
    public let tokens: APNsTokenManager?
    /// The pools of the first signing key (of the certificate with certificate auth).
    public let productionPool: HTTP2ConnectionPool
    public let sandboxPool: HTTP2ConnectionPool
    /// One per `configuration.signingKeys`, in order: its token and its own connections (APNs binds a
    /// connection to the key of the tokens it carries, so keys do not share connections).
    public let signers: [Signer]
    /// Broadcast channel management (`POST/GET/DELETE /api/apns/channels`), with the same credentials.
    public let channels: APNsChannels
    private let logger: Logger

    /// A signing key at work: its provider token and the connections its pushes use.
    public struct Signer: Sendable {
        public let key: APNsSigningKey
        public let tokens: APNsTokenManager
        public let productionPool: HTTP2ConnectionPool
        public let sandboxPool: HTTP2ConnectionPool
        public func pool(production: Bool) -> HTTP2ConnectionPool { production ? productionPool : sandboxPool }
    }
    /// Keeps `pushgate_apns_certificate_expiry_days` current (certificate auth only).
    private let expiryGaugeTask: RepeatedTask?

    /// - Parameters:
    ///   - poolConfiguration: TLS (e.g. `HTTP2PoolConfiguration.tls(extraRootsPEM:)` for `core.ca_file`),
    ///     timeouts; `connectionsPerTarget` and `maxConnectionsPerTarget` are set from
    ///     `configuration.connectionsPerEnvironment` and `maxConnectionsPerEnvironment`.
    ///   - tokenManager: injected by tests (clock); by default one made from the configuration.
    public init(
        configuration: APNsConfiguration,
        poolConfiguration: HTTP2PoolConfiguration = HTTP2PoolConfiguration(),
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.apns"),
        tokenManager: APNsTokenManager? = nil
    ) throws(APNsConfigurationError) {
        try configuration.validate()
        guard let productionTarget = HTTP2Target(url: configuration.baseURL(production: true)) else {
            throw APNsConfigurationError(key: "ios.endpoint", "\"\(configuration.baseURL(production: true))\" is not an http(s) base URL")
        }
        guard let sandboxTarget = HTTP2Target(url: configuration.baseURL(production: false)) else {
            throw APNsConfigurationError(key: "ios.endpoint", "\"\(configuration.baseURL(production: false))\" is not an http(s) base URL")
        }
        var pc = poolConfiguration
        pc.connectionsPerTarget = configuration.connectionsPerEnvironment
        pc.label.provider = "apns"
        pc.maxConnectionsPerTarget = max(configuration.connectionsPerEnvironment, configuration.maxConnectionsPerEnvironment)
        if let certificate = configuration.certificate {
            // Both environments' connections present the certificate.
            pc.presentClientCertificate(chain: certificate.chain, privateKey: certificate.privateKey)
            let gauge = Gauge(label: "pushgate_apns_certificate_expiry_days", dimensions: [("topic", certificate.bundleID ?? certificate.subject)])
            gauge.record(certificate.daysToExpiry())
            self.expiryGaugeTask = eventLoopGroup.next().scheduleRepeatedTask(initialDelay: .seconds(60), delay: .seconds(60)) { _ in
                gauge.record(certificate.daysToExpiry())
            }
            self.tokens = nil
        } else {
            self.expiryGaugeTask = nil
            self.tokens = tokenManager ?? APNsTokenManager(configuration: configuration)
        }
        self.configuration = configuration
        self.logger = logger
        var productionLogger = logger
        productionLogger[metadataKey: "apns-env"] = "production"
        var sandboxLogger = logger
        sandboxLogger[metadataKey: "apns-env"] = "sandbox"
        // Each environment's pool (and each further key's) is labelled: they may reach one origin.
        func labelled(_ production: Bool, keyID: String) -> HTTP2PoolConfiguration {
            var c = pc
            c.label.environment = production ? "production" : "sandbox"
            c.label.keyID = keyID
            return c
        }
        let firstKeyID = configuration.certificate == nil ? configuration.signingKeys.first?.keyID ?? "" : ""
        self.productionPool = HTTP2ConnectionPool(
            target: productionTarget, configuration: labelled(true, keyID: firstKeyID), eventLoopGroup: eventLoopGroup, logger: productionLogger)
        self.sandboxPool = HTTP2ConnectionPool(
            target: sandboxTarget, configuration: labelled(false, keyID: firstKeyID), eventLoopGroup: eventLoopGroup, logger: sandboxLogger)
        var signers: [Signer] = []
        if let first = self.tokens {
            for (i, key) in configuration.signingKeys.enumerated() {
                if i == 0 {
                    signers.append(Signer(key: key, tokens: first, productionPool: self.productionPool, sandboxPool: self.sandboxPool))
                    continue
                }
                var keyLogger = logger
                keyLogger[metadataKey: "apns-key-id"] = "\(key.keyID)"
                var p = keyLogger
                p[metadataKey: "apns-env"] = "production"
                var sb = keyLogger
                sb[metadataKey: "apns-env"] = "sandbox"
                // Connections are opened on first use: a key restricted to one environment never
                // opens the other's.
                signers.append(
                    Signer(
                        key: key, tokens: APNsTokenManager(key: key.key, keyID: key.keyID, teamID: key.teamID),
                        productionPool: HTTP2ConnectionPool(
                            target: productionTarget, configuration: labelled(true, keyID: key.keyID), eventLoopGroup: eventLoopGroup, logger: p),
                        sandboxPool: HTTP2ConnectionPool(
                            target: sandboxTarget, configuration: labelled(false, keyID: key.keyID), eventLoopGroup: eventLoopGroup, logger: sb)))
            }
        }
        self.signers = signers
        self.channels = APNsChannels(
            configuration: configuration, tokens: self.tokens, keyTokens: signers.map(\.tokens), poolConfiguration: pc,
            eventLoopGroup: eventLoopGroup, logger: logger)
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        var push = try APNsPreparedPush(notification, defaultTopic: configuration.topic, defaultProduction: configuration.production)
        if !signers.isEmpty {
            guard let i = configuration.signingKeyIndex(topic: push.topic, bundleID: push.bundleID, production: push.production) else {
                throw PushFailure(noKeyReason(push))
            }
            push.signingKey = i
            push.signingKeyID = signers[i].key.keyID
        }
        return push
    }

    func noKeyReason(_ push: APNsPreparedPush) -> String {
        let environment = APNsEnvironment(production: push.production).rawValue
        return
            "no APNs token key signs for topic \(push.topic) in the \(environment) environment (ios.keys: \(signers.map(\.key.label).joined(separator: "; ")))"
    }

    /// The signer of `push`: the one `prepare` chose, or, for a push prepared under an earlier
    /// configuration (a reload changed the keys), the one that covers it now. nil with certificate
    /// auth or when no key covers it.
    func signer(for push: APNsPreparedPush) -> Signer? {
        if push.signingKey < signers.count, signers[push.signingKey].key.keyID == push.signingKeyID { return signers[push.signingKey] }
        guard let i = configuration.signingKeyIndex(topic: push.topic, bundleID: push.bundleID, production: push.production) else { return nil }
        return signers[i]
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        switch target {
        case .token: return nil
        case .channel(let id):
            guard let push = prepared as? APNsPreparedPush, push.pushType == .liveactivity else {
                return PushFailure("push_type: a broadcast channel takes Live Activity updates (push_type liveactivity)")
            }
            return APNsBroadcast.isValidChannelID(id) ? nil : PushFailure("BadChannelId")
        default: return PushFailure("APNs delivers to device tokens and broadcast channels only")
        }
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let push = prepared as? APNsPreparedPush else {
            return .permanent(reason: "internal error: not an APNs notification", status: nil)
        }
        let token: String
        switch target {
        case .token(let t): token = t
        case .channel(let id): return await broadcast(push, channel: id, context: context)
        default: return .permanent(reason: "APNs delivers to device tokens and broadcast channels only", status: nil)
        }
        if token.isEmpty { return .permanent(reason: "MissingDeviceToken", status: nil) }
        // The token goes into the request path: anything but hex digits is what APNs calls BadDeviceToken.
        guard token.utf8.allSatisfy(Self.isHexDigit) else { return .tokenDead(reason: "BadDeviceToken", status: nil) }

        var headers: [(String, String)]
        let auth: APNsTokenManager.Token?
        switch authorization(room: push.headers.count + 2, push: push) {
        case .success(let h, let a): (headers, auth) = (h, a)
        case .failure(let reason): return .permanent(reason: reason, status: nil)
        }
        headers.append(("apns-id", context.messageID))
        headers.append(contentsOf: push.headers)
        var request = HTTP2Request(method: "POST", path: "/3/device/" + token, headers: headers, body: push.body)
        request.uniqueHeaders = [":path", "apns-id"]
        return await execute(request, push: push, auth: auth, context: context, idHeader: "apns-id")
    }

    /// One broadcast: `POST /4/broadcasts/apps/<bundle id>` with `apns-channel-id`, on the same
    /// connections as device pushes (Apple's broadcast endpoint is the push host).
    /// `validate` passed when the delivery was planned (push type and channel id).
    func broadcast(_ push: APNsPreparedPush, channel: String, context: DeliveryContext) async -> SendOutcome {
        var headers: [(String, String)]
        let auth: APNsTokenManager.Token?
        switch authorization(room: push.broadcastHeaders.count + 3, push: push) {
        case .success(let h, let a): (headers, auth) = (h, a)
        case .failure(let reason): return .permanent(reason: reason, status: nil)
        }
        headers.append(("apns-request-id", context.messageID))
        headers.append(("apns-channel-id", channel))
        headers.append(contentsOf: push.broadcastHeaders)
        var request = HTTP2Request(method: "POST", path: "/4/broadcasts/apps/" + push.bundleID, headers: headers, body: push.body)
        request.uniqueHeaders = ["apns-request-id"]
        return await execute(request, push: push, auth: auth, context: context, idHeader: "apns-request-id")
    }

    enum Authorization {
        case success([(String, String)], APNsTokenManager.Token?)
        case failure(String)
    }

    /// A request's headers begun with `authorization` (token auth; none with a certificate), with room
    /// for `room` headers; or why the provider token cannot be signed.
    func authorization(room: Int, push: APNsPreparedPush) -> Authorization {
        var headers: [(String, String)] = []
        headers.reserveCapacity(room)
        if signers.isEmpty { return .success(headers, nil) }
        guard let tokens = signer(for: push)?.tokens else { return .failure(noKeyReason(push)) }
        do {
            let auth = try tokens.token()
            headers.append(("authorization", auth.authorization))
            return .success(headers, auth)
        } catch {
            return .failure("cannot sign the APNs provider token (key id \(tokens.keyID)): \(error)")
        }
    }

    /// APNs' answers about the provider token itself: the outcome names the key that signed it.
    static let keyReasons: Set<String> = [
        "InvalidProviderToken", "ExpiredProviderToken", "MissingProviderToken", "BadEnvironmentKeyIdInToken", "UnrelatedKeyIdInToken",
        "TooManyProviderTokenUpdates",
    ]

    /// `outcome` with its reason followed by `(key id K)` when it is about the provider token.
    static func namingKey(_ outcome: SendOutcome, keyID: String) -> SendOutcome {
        guard let reason = outcome.reason, keyReasons.contains(reason) else { return outcome }
        let named = "\(reason) (key id \(keyID))"
        switch outcome {
        case .permanent(_, let status): return .permanent(reason: named, status: status)
        case .credentials(_, let status): return .credentials(reason: named, status: status)
        case .transient(_, let status, let retryAfter): return .transient(reason: named, status: status, retryAfter: retryAfter)
        case .tokenDead(_, let status): return .tokenDead(reason: named, status: status)
        default: return outcome
        }
    }

    /// Sends `request` on the notification's environment and classifies the answer; `idHeader` is
    /// the response header naming the message (`apns-id`, `apns-request-id` for broadcasts).
    func execute(
        _ request: HTTP2Request, push: APNsPreparedPush, auth: APNsTokenManager.Token?, context: DeliveryContext, idHeader: String
    ) async -> SendOutcome {
        let signer = self.signer(for: push)
        let pool = signer?.pool(production: push.production) ?? (push.production ? productionPool : sandboxPool)
        let response: HTTP2Response
        do {
            response = try await pool.execute(request)
        } catch {
            // One attempt: a connection-level failure goes back to the retry policy (the pool has
            // already re-queued what the server refused unprocessed).
            logger.debug("APNs request failed", metadata: ["error": "\(error)", "apns-id": "\(context.messageID)"])
            return .transient(reason: "\(error)", status: nil, retryAfter: nil)
        }

        if response.status == 200 {
            return .delivered(providerID: response.header(idHeader))
        }
        var outcome = APNsResponseClassifier.classify(
            status: response.status,
            apnsID: response.header(idHeader),
            retryAfter: response.header("retry-after"),
            body: Array(response.body.readableBytesView))
        if case .credentials = outcome, let tokens = signer?.tokens ?? tokens, let auth {
            tokens.invalidate(auth.jwt)
        }
        if let signer, configuration.namesKeys { outcome = Self.namingKey(outcome, keyID: signer.key.keyID) }
        logger.debug(
            "APNs refused a push",
            metadata: [
                "status": "\(response.status)", "reason": "\(outcome.reason ?? "")", "apns-id": "\(context.messageID)",
                "apns-key-id": "\(signer?.key.keyID ?? "")",
            ])
        return outcome
    }

    public func shutdown() async {
        expiryGaugeTask?.cancel()
        await productionPool.shutdown()
        await sandboxPool.shutdown()
        for signer in signers.dropFirst() {
            await signer.productionPool.shutdown()
            await signer.sandboxPool.shutdown()
        }
        await channels.shutdown()
    }

    @inline(__always) static func isHexDigit(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) || (b >= 0x41 && b <= 0x46)
    }
}
