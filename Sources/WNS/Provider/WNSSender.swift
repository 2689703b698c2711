import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore

/// What the sender is configured with (the `wns:` section, validated).
public struct WNSSenderConfiguration: Sendable {
    public var credentials: WNSCredentials
    /// The token endpoint (nil: the flow's own).
    public var tokenURL: String?
    /// Connections per channel host (`wns.max_connections`).
    public var maxConnectionsPerHost: Int = 16
    public var requestTimeoutSeconds: Double = 30
    /// Every send goes to this `host:port` instead of the channel's host (tests and `pushgate
    /// mock`; the channel URI is still checked in full). nil: the channel's host.
    public var connectTo: String?
    /// Fixed DNS answers for channel hosts (`wns.resolve`: tests and `pushgate mock`).
    public var staticAnswers: [String: [[UInt8]]] = [:]

    public init(credentials: WNSCredentials) {
        self.credentials = credentials
    }
}

/// What the sender saw in WNS's 200 answers and its refusals of the credentials, for the status
/// page and logs: `X-WNS-Status` and `X-WNS-DeviceConnectionStatus` counts, and the 403s that mark
/// the provider failing (a token for another app: a configuration error).
public struct WNSSenderStats: Sendable, Equatable {
    public var wnsStatus: [String: Int] = [:]
    public var deviceConnectionStatus: [String: Int] = [:]
    public var forbidden = 0
    /// Why the provider is failing (the last 403), nil while it is not: from a 403 until a send is
    /// accepted again (with a token fetched after the 403: a 403 drops the token it was answered to).
    public var failing: String?
    /// The first 403 of the spell `failing` tells of.
    public var failingSince: Date?
}

/// The WNS provider's work that needs no gateway wiring: render, check a channel URI, send one
/// notification to one channel and classify the answer.
///
/// Sends: `POST <channel URI>` over HTTPS/1.1 (WNS does not take HTTP/2, chunking or pipelining)
/// through AsyncHTTPClient with a `Content-Length` body (never chunked, no `Expect: 100-continue`),
/// redirects never followed, at most `maxConnectionsPerHost` keep-alive connections per channel host.
public final class WNSSender: Sendable {
    public let configuration: WNSSenderConfiguration
    public let tokens: WNSTokenProvider
    public let addressGuard: WNSAddressGuard
    let client: HTTPClient
    let resolver: DNSResolver?
    let logger: Logger
    let now: @Sendable () -> Date
    private let statsBox = NIOLockedValueBox(WNSSenderStats())
    static let maxResponseBytes = 64 * 1024

    /// - Parameters:
    ///   - tlsConfiguration: client TLS for the sends (`core.ca_file` roots included).
    ///   - tokenTransport: how token requests are made (`OAuthTokenCache.httpTransport` over the shared client).
    ///   - lookup: DNS for channel hosts (nil: `getaddrinfo` on the sender's own small thread pool).
    public init(
        configuration: WNSSenderConfiguration, tlsConfiguration: TLSConfiguration, proxy: HTTPClient.Configuration.Proxy? = nil,
        eventLoopGroup: any EventLoopGroup, tokenTransport: @escaping @Sendable (String, [UInt8]) async throws -> (status: Int, body: [UInt8]),
        lookup: (@Sendable (String) async throws -> [[UInt8]])? = nil,
        classify: (@Sendable ([UInt8]) -> IPAddressClass)? = nil,
        logger: Logger = Logger(label: "pushgate.wns"), now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.configuration = configuration
        self.logger = logger
        self.now = now
        self.tokens = WNSTokenProvider(
            credentials: configuration.credentials, tokenURL: configuration.tokenURL, transport: tokenTransport, logger: logger, now: now)
        let resolver = lookup == nil ? DNSResolver(eventLoopGroup: eventLoopGroup) : nil
        self.resolver = resolver
        let resolve: @Sendable (String) async throws -> [[UInt8]] =
            lookup ?? { host in
                guard let resolver else { throw HostResolver.Failure(description: "no resolver") }
                return try await resolver.resolve(host, port: 443)
            }
        if let classify {
            self.addressGuard = WNSAddressGuard(staticAnswers: configuration.staticAnswers, classify: classify, now: now, lookup: resolve)
        } else {
            self.addressGuard = WNSAddressGuard(staticAnswers: configuration.staticAnswers, now: now, lookup: resolve)
        }
        let timeout = TimeAmount.nanoseconds(Int64(configuration.requestTimeoutSeconds * 1e9))
        var config = HTTPClient.Configuration(
            tlsConfiguration: tlsConfiguration, redirectConfiguration: .disallow,
            timeout: .init(connect: min(.seconds(10), timeout), read: timeout),
            connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, configuration.maxConnectionsPerHost)),
            proxy: proxy, decompression: .disabled)
        config.httpVersion = .http1Only
        // A channel URI is a device's address: no spans of AsyncHTTPClient's own carry it.
        config.tracing.tracer = nil
        self.client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: config, backgroundActivityLogger: logger)
    }

    public var stats: WNSSenderStats { statsBox.withLockedValue { $0 } }

    /// `.failing` from a 403 (the credentials are not those of the channel's app: a configuration
    /// error) until a send is accepted again; a reload that changes the `wns` section builds a new sender.
    public var health: ProviderHealth {
        statsBox.withLockedValue { s in
            guard let reason = s.failing, let since = s.failingSince else { return .ok }
            return .failing(reason: reason, since: since)
        }
    }

    // MARK: prepare / validate

    /// Renders a notification: its `wns` object, else a toast of its title and message.
    public func prepare(_ n: PushNotification, options: WNSOptions?) throws(WNSFieldProblem) -> PreparedWNS {
        try PreparedWNS.render(options, title: n.title, message: n.message, timeToLive: n.timeToLive)
    }

    /// The shape checks of a channel URI (no DNS).
    public func validate(channel uri: String) -> PushFailure? {
        if case .failure(let f) = WNSChannel.parse(uri) { return f }
        return nil
    }

    // MARK: send

    /// One attempt to one channel. Never throws: every failure is classified.
    public func send(_ prepared: PreparedWNS, to uri: String, messageID: String) async -> SendOutcome {
        let channel: WNSChannel
        switch WNSChannel.parse(uri) {
        case .failure(let f): return .permanent(reason: f.reason, status: nil)
        case .success(let c): channel = c
        }
        switch await addressGuard.check(channel.host) {
        case .allowed: break
        case .refused(let why): return .permanent(reason: why, status: nil)
        case .unresolved(let why): return .transient(reason: why, status: nil, retryAfter: nil)
        }
        let accessToken: String
        do {
            accessToken = try await tokens.accessToken()
        } catch let error as OAuthTokenError {
            logger.error("WNS access token unavailable", metadata: ["error": "\(error)"])
            if error.isPermanent { return .permanent(reason: error.description, status: error.status) }
            return .transient(reason: error.description, status: error.status, retryAfter: nil)
        } catch {
            return .transient(reason: "WNS OAuth: \(tokens.cache.scrub("\(error)"))", status: nil, retryAfter: nil)
        }
        let url = configuration.connectTo.map { "https://\($0)\(channel.pathAndQuery)" } ?? channel.uri
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(accessToken)")
        for (n, v) in prepared.headers { request.headers.add(name: n, value: v) }
        request.body = .bytes(ByteBuffer(bytes: prepared.body))
        let answer: WNSAnswer
        do {
            let timeout = TimeAmount.nanoseconds(Int64(configuration.requestTimeoutSeconds * 1e9))
            let response = try await client.execute(request, timeout: timeout)
            answer = WNSAnswer(status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) })
            // Drain a bounded body so the connection can be reused; a longer one closes it.
            var read = 0
            for try await chunk in response.body {
                read += chunk.readableBytes
                if read > Self.maxResponseBytes { break }
            }
        } catch {
            let reason = "\(error)".logSafe(max: 300)
            logger.debug("WNS send failed at the connection level", metadata: ["error": "\(reason)", "message_id": "\(messageID)"])
            return .transient(reason: reason, status: nil, retryAfter: nil)
        }
        let outcome = WNSResponseClassifier.classify(answer)
        record(answer, outcome)
        if case .credentials = outcome { await tokens.invalidate(accessToken) }
        if !outcome.isDelivered {
            logger.debug(
                "WNS send not delivered",
                metadata: [
                    "status": "\(answer.status)", "outcome": "\(outcome.className)", "reason": "\(outcome.reason ?? "")",
                    "host": "\(channel.host)",
                ])
        }
        return outcome
    }

    private func record(_ a: WNSAnswer, _ outcome: SendOutcome) {
        let t = now()
        let (firstForbidden, recovered) = statsBox.withLockedValue { s -> (Bool, Bool) in
            if let w = a.wnsStatus, WNSAnswer.wnsStatusValues.contains(w) { s.wnsStatus[w, default: 0] += 1 }
            if let d = a.deviceConnectionStatus, WNSAnswer.deviceConnectionStatusValues.contains(d) {
                s.deviceConnectionStatus[d, default: 0] += 1
            }
            if a.status / 100 == 2 {
                let was = s.failing != nil
                s.failing = nil
                s.failingSince = nil
                return (false, was)
            }
            guard a.status == 403 else { return (false, false) }
            s.forbidden += 1
            let first = s.failing == nil
            s.failing = outcome.reason
            if first { s.failingSince = t }
            return (first, false)
        }
        if firstForbidden {
            logger.error(
                "WNS refused the credentials for a channel (403): the configured wns credentials are not those of the channel's app",
                metadata: ["reason": "\(a.errorDescription ?? "")"])
        }
        if recovered { logger.notice("WNS accepts sends again: the provider is no longer failing") }
        if a.status / 100 == 2, let w = a.wnsStatus, w != "received" {
            logger.debug("WNS accepted but did not deliver", metadata: ["x_wns_status": "\(w)", "msg_id": "\(a.messageID ?? "")"])
        }
    }

    public func shutdown() async {
        try? await client.shutdown()
        await resolver?.shutdown()
    }
}
