import Crypto
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ProviderKit
import PushgateCore

/// The shared machinery of the Web Push and UnifiedPush `WebPushProvider`s: VAPID, SSRF guard,
/// encryption, transport and response classification. One engine may back both providers.
public final class WebPushEngine: Sendable {
    public let configuration: WebPushConfiguration
    public let vapid: VAPIDAuthorizer
    public let policy: EndpointPolicy
    let transport: WebPushTransport
    let logger: Logger
    /// Checked DNS answers by host: the addresses (all allowed) or the refusal, reused briefly.
    private let resolutions = Locked<[String: (addresses: [[UInt8]], refusal: PushFailure?, expires: Double)]>([:])
    /// Replaceable for tests: host, port -> addresses (default `dns`: getaddrinfo on its own threads).
    let resolver: @Sendable (String, Int) async throws -> [[UInt8]]
    let dns: DNSResolver

    /// - Parameters:
    ///   - configuration: the `webpush:` section; validated here (throws `WebPushConfigurationError`).
    ///   - tlsConfiguration: client TLS (system roots by default; add `core.ca_file` roots, e.g. with
    ///     `HTTP2PoolConfiguration.tls(extraRootsPEM:)`). Defaults to `poolConfiguration`'s.
    ///   - poolConfiguration: base settings of the per-origin HTTP/2 pools (its TLS configuration is also
    ///     used for the HTTP/1.1 client); `requestTimeout` and `connectionsPerTarget` come from `configuration`.
    ///     The engine owns its own AsyncHTTPClient (redirects disabled) and pools: call `shutdown()`.
    public convenience init(
        configuration: WebPushConfiguration,
        tlsConfiguration: TLSConfiguration? = nil,
        poolConfiguration: HTTP2PoolConfiguration? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        transportMode: WebPushTransportMode = .automatic,
        logger: Logger = Logger(label: "pushgate.webpush"),
        resolver: (@Sendable (String, Int) async throws -> [[UInt8]])? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        try self.init(
            configuration: configuration, tlsConfiguration: tlsConfiguration, poolConfiguration: poolConfiguration,
            eventLoopGroup: eventLoopGroup, transportMode: transportMode, logger: logger, resolver: resolver,
            addressClassifier: nil, now: now)
    }

    /// - Parameters:
    ///   - addressClassifier: replaces `IPAddressClassifier` in the SSRF guard (tests: loopback only).
    ///   - maxOrigins / originIdleTimeout: bounds of the per-origin pools (see `WebPushTransport`).
    init(
        configuration: WebPushConfiguration,
        tlsConfiguration: TLSConfiguration? = nil,
        poolConfiguration: HTTP2PoolConfiguration? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        transportMode: WebPushTransportMode = .automatic,
        logger: Logger = Logger(label: "pushgate.webpush"),
        resolver: (@Sendable (String, Int) async throws -> [[UInt8]])? = nil,
        addressClassifier: (@Sendable ([UInt8]) -> IPAddressClass)?,
        maxOrigins: Int = 512,
        originIdleTimeout: TimeAmount = .seconds(300),
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        let keys = try configuration.validate()
        self.configuration = configuration
        self.vapid = VAPIDAuthorizer(keys: keys, subject: configuration.vapidSubject.trimmingCharacters(in: .whitespaces), now: now)
        var policy = EndpointPolicy(configuration)
        if let addressClassifier { policy.addressClassifier = addressClassifier }
        self.policy = policy
        self.logger = logger
        self.transport = WebPushTransport(
            mode: transportMode, tlsConfiguration: tlsConfiguration, poolConfiguration: poolConfiguration,
            timeoutSeconds: configuration.requestTimeoutSeconds,
            connectionsPerOrigin: configuration.connectionsPerOrigin,
            maxConnectionsPerOrigin: configuration.maxConnectionsPerOrigin,
            eventLoopGroup: eventLoopGroup, logger: logger,
            maxOrigins: maxOrigins, originIdleTimeout: originIdleTimeout)
        // DNS never on NIOThreadPool.singleton: sqlite-nio runs the SQLite queue there.
        let dns = DNSResolver(eventLoopGroup: eventLoopGroup)
        self.dns = dns
        self.resolver = resolver ?? { host, port in try await dns.resolve(host, port: port) }
    }

    // MARK: prepare / validate

    public func prepare(_ notification: PushNotification) throws -> PreparedWebPush {
        try WebPushRequestValidator.prepare(notification, defaultTTL: configuration.defaultTTL, declarativeDefault: configuration.declarative)
    }

    /// What one target resolves to before any network call.
    enum Delivery {
        case encrypted(WebPushEndpoint, WebPushReceiverKeys)
        case legacy(WebPushEndpoint)
    }

    func delivery(for target: PushTarget, platform: Platform, plaintextSize: Int) -> Result<Delivery, PushFailure> {
        let endpoint: String
        var keys: WebPushSubscription.Keys?
        switch target {
        case .topic:
            return .failure(PushFailure("\(platform.name) has no topic sends"))
        case .channel:
            return .failure(PushFailure("\(platform.name) has no broadcast channels"))
        case .token(let t):
            guard platform == .unifiedpush else {
                return .failure(PushFailure("Web Push needs a subscription with keys (p256dh, auth), not a bare endpoint"))
            }
            endpoint = t
        case .subscription(let s):
            endpoint = s.endpoint
            keys = s.keys
            if keys == nil && platform == .webpush {
                return .failure(PushFailure("subscription has no keys (p256dh, auth): Web Push payloads must be encrypted"))
            }
        }
        let ep: WebPushEndpoint
        switch policy.check(endpoint) {
        case .failure(let f): return .failure(f)
        case .success(let e): ep = e
        }
        if let keys {
            if plaintextSize > WebPushCrypto.maxPlaintextSize {
                return .failure(.payloadTooLarge(size: plaintextSize, limit: WebPushCrypto.maxPlaintextSize))
            }
            do { return .success(.encrypted(ep, try WebPushReceiverKeys.cached(keys))) } catch {
                return .failure(PushFailure("InvalidSubscriptionKeys: \(error)"))
            }
        }
        if plaintextSize > WebPushRequestValidator.maxLegacyBodySize {
            return .failure(.payloadTooLarge(size: plaintextSize, limit: WebPushRequestValidator.maxLegacyBodySize))
        }
        return .success(.legacy(ep))
    }

    func validate(target: PushTarget, of prepared: any PreparedPush, platform: Platform) -> PushFailure? {
        guard let p = prepared as? PreparedWebPush else { return PushFailure("internal: not a Web Push rendering") }
        if case .failure(let f) = delivery(for: target, platform: platform, plaintextSize: p.plaintext.count) { return f }
        return nil
    }

    // MARK: SSRF resolution check

    /// What the SSRF guard says before a send: where to connect, or why not.
    enum Resolution {
        /// Private endpoints allowed: the clients resolve the host themselves.
        case unguarded
        /// Connect to exactly these addresses (all checked).
        case pinned([SocketAddress])
        case refused(PushFailure)
        /// DNS failed or timed out: transient.
        case dnsFailed(PushFailure)
    }

    /// Resolves the endpoint's host once (answers cached for `resolutionCacheSeconds`) and checks every
    /// address; the send then connects to exactly the checked addresses.
    func resolve(_ ep: WebPushEndpoint) async -> Resolution {
        if policy.allowPrivateEndpoints { return .unguarded }
        let bytes: [[UInt8]]
        if let literal = IPAddressClassifier.parse(ep.host) {
            // Checked by `policy.check(_:)` already (in `delivery(for:)`); checked again, cheaply.
            if let refusal = policy.check(resolved: [literal], host: ep.host) { return .refused(refusal) }
            bytes = [literal]
        } else {
            let now = Date().timeIntervalSince1970
            if let hit = resolutions.withLock({ $0[ep.host] }), hit.expires > now {
                if let refusal = hit.refusal { return .refused(refusal) }
                bytes = hit.addresses
            } else {
                let answer: [[UInt8]]
                do {
                    answer = try await resolver(ep.host, ep.port)
                } catch {
                    // Not cached: a resolution failure is transient.
                    return .dnsFailed(PushFailure("DNS: \(error)"))
                }
                let refusal = answer.isEmpty ? PushFailure("DNS: \(ep.host) has no addresses") : policy.check(resolved: answer, host: ep.host)
                let ttl = configuration.resolutionCacheSeconds
                if ttl > 0 {
                    resolutions.withLock { table in
                        if table.count >= 10_000 { table.removeAll(keepingCapacity: true) }
                        table[ep.host] = (refusal == nil ? answer : [], refusal, now + ttl)
                    }
                }
                if let refusal { return .refused(refusal) }
                bytes = answer
            }
        }
        let addresses = bytes.compactMap { Self.socketAddress($0, port: ep.port) }
        if addresses.isEmpty { return .dnsFailed(PushFailure("DNS: \(ep.host) has no usable addresses")) }
        return .pinned(addresses)
    }

    static func socketAddress(_ bytes: [UInt8], port: Int) -> SocketAddress? {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        return try? SocketAddress(ipAddress: IPAddressClassifier.format(bytes), port: port)
    }

    // MARK: send

    /// Headers and body for one delivery (exposed for tests and benchmarks).
    func render(_ prepared: PreparedWebPush, _ delivery: Delivery) throws -> (headers: [(String, String)], body: [UInt8]) {
        var headers: [(String, String)] = []
        headers.reserveCapacity(7)
        headers.append(("ttl", String(prepared.ttlSeconds())))
        if let u = prepared.urgency { headers.append(("urgency", u)) }
        if let t = prepared.topic { headers.append(("topic", t)) }
        switch delivery {
        case .encrypted(let ep, let keys):
            let body = try WebPushCrypto.encrypt(prepared.plaintext, for: keys)
            headers.append(("content-encoding", "aes128gcm"))
            headers.append(("content-type", "application/octet-stream"))
            headers.append(("authorization", try vapid.authorization(origin: ep.origin)))
            return (headers, body)
        case .legacy(let ep):
            headers.append(("content-type", "application/octet-stream"))
            if configuration.unifiedPushLegacyVAPID { headers.append(("authorization", try vapid.authorization(origin: ep.origin))) }
            return (headers, prepared.plaintext)
        }
    }

    func send(_ prepared: any PreparedPush, to target: PushTarget, platform: Platform) async -> SendOutcome {
        guard let p = prepared as? PreparedWebPush else { return .permanent(reason: "internal: not a Web Push rendering", status: nil) }
        let delivery: Delivery
        switch self.delivery(for: target, platform: platform, plaintextSize: p.plaintext.count) {
        case .failure(let f): return .permanent(reason: f.reason, status: nil)
        case .success(let d): delivery = d
        }
        let ep: WebPushEndpoint
        switch delivery {
        case .encrypted(let e, _), .legacy(let e): ep = e
        }
        let addresses: [SocketAddress]?
        switch await resolve(ep) {
        case .unguarded: addresses = nil
        case .pinned(let a): addresses = a
        case .refused(let refusal): return .permanent(reason: refusal.reason, status: nil)
        case .dnsFailed(let f): return .transient(reason: f.reason, status: nil, retryAfter: nil)
        }
        let request: (headers: [(String, String)], body: [UInt8])
        do { request = try render(p, delivery) } catch {
            return .permanent(reason: "EncryptionFailed: \(error)", status: nil)
        }
        let response: WebPushHTTPResponse
        do {
            response = try await transport.post(ep, headers: request.headers, body: request.body, addresses: addresses)
        } catch {
            return .transient(reason: "ConnectionError: \(Self.describe(error))", status: nil, retryAfter: nil)
        }
        if response.status == 401 || response.status == 403 { vapid.invalidate(origin: ep.origin) }
        return Self.classify(response, platform: platform, sentVAPID: request.headers.contains { $0.0 == "authorization" })
    }

    static func describe(_ error: any Error) -> String {
        if let e = error as? HTTP2PoolError { return e.description }
        if let e = error as? WebPushHTTP1Error { return e.description }
        return String(describing: error)
    }

    public func shutdown() async {
        await transport.shutdown()
        await dns.shutdown()
    }

    // MARK: classification

    /// Maps a push service's answer to an outcome (RFC 8030 / UnifiedPush / ntfy semantics).
    /// A UnifiedPush push server answering 401 or 403 wants VAPID from the key the app registered
    /// with (a distributor that answered the app's registration with `VAPID_REQUIRED`): a permanent
    /// failure saying so, never retried.
    public static func classify(_ r: WebPushHTTPResponse, platform: Platform = .webpush, sentVAPID: Bool = true, now: Date = Date()) -> SendOutcome {
        let status = r.status
        let text = responseText(r.body)
        func named(_ name: String) -> String { text.isEmpty ? name : "\(name): \(text)" }
        switch status {
        case 200..<300:
            return .delivered(providerID: r.header("location"))
        case 404:
            return .tokenDead(reason: named("SubscriptionNotFound"), status: status)
        case 410:
            return .tokenDead(reason: named("SubscriptionGone"), status: status)
        case 413:
            return .permanent(reason: named("PayloadTooLarge"), status: status)
        case 429:
            return .transient(reason: named("TooManyRequests"), status: status, retryAfter: RetryAfter.parse(r.header("retry-after"), now: now))
        case 500..<600:
            return .transient(reason: named("ServerError \(status)"), status: status, retryAfter: RetryAfter.parse(r.header("retry-after"), now: now))
        case 300..<400:
            let location = r.header("location").map { " to \($0.prefix(200))" } ?? ""
            return .permanent(reason: "RedirectNotFollowed: \(status)\(location)", status: status)
        case 400:
            return .permanent(reason: named("BadRequest"), status: status)
        case 401 where platform == .unifiedpush, 403 where platform == .unifiedpush:
            let why =
                sentVAPID
                ? "the distributor's push server refused this server's VAPID key (the app registered with another one)"
                : "the distributor's push server requires VAPID (set unifiedpush.vapid: true for bare endpoints)"
            return .permanent(reason: named("VAPIDRequired (\(status)): \(why)"), status: status)
        case 401:
            return .permanent(reason: named("Unauthorized (VAPID)"), status: status)
        case 403:
            return .permanent(reason: named("Forbidden (VAPID)"), status: status)
        default:
            return .permanent(reason: named("HTTP \(status)"), status: status)
        }
    }

    /// The service's response text, one line, at most 200 characters.
    static func responseText(_ body: [UInt8]) -> String {
        guard !body.isEmpty else { return "" }
        var s = String(decoding: body.prefix(512), as: UTF8.self)
        s = s.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
            .trimmingCharacters(in: .whitespaces)
        if s.count > 200 { s = String(s.prefix(200)) + "…" }
        return s
    }
}

/// Web Push (platform 4): RFC 8291-encrypted POSTs with VAPID to browser push services; and
/// UnifiedPush (platform 5, `platform: .unifiedpush`): Web Push to distributor endpoints
/// (`subscriptions` with keys), or the legacy unencrypted POST to bare endpoint URLs in `tokens` (or
/// subscriptions without keys). Both platforms of one gateway share one engine.
public final class WebPushProvider: PushProvider {
    public let engine: WebPushEngine
    public let platform: Platform

    public init(engine: WebPushEngine, platform: Platform = .webpush) {
        self.engine = engine
        self.platform = platform
    }

    public convenience init(
        configuration: WebPushConfiguration, platform: Platform = .webpush, tlsConfiguration: TLSConfiguration? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "pushgate.webpush")
    ) throws {
        self.init(
            engine: try WebPushEngine(
                configuration: configuration, tlsConfiguration: tlsConfiguration,
                eventLoopGroup: eventLoopGroup, logger: logger), platform: platform)
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        try engine.prepare(notification)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        engine.validate(target: target, of: prepared, platform: platform)
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        await engine.send(prepared, to: target, platform: platform)
    }

    public func shutdown() async { await engine.shutdown() }
}
