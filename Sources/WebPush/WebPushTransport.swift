import AsyncHTTPClient
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// A small lock-protected box (WebPush has no NIOConcurrencyHelpers dependency).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// A push service's answer, independent of the HTTP version it came over.
public struct WebPushHTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    public init(status: Int, headers: [(String, String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }
}

/// How requests reach push services.
public enum WebPushTransportMode: String, Sendable {
    /// The first request to an origin goes through AsyncHTTPClient (ALPN h2 or HTTP/1.1); when the
    /// origin negotiated HTTP/2, later requests use the multiplexed `HTTP2PoolGroup` pool of that
    /// origin, else they stay on AsyncHTTPClient's HTTP/1.1 keep-alive pool. Plain-http origins
    /// (only with `allow_http`) always use AsyncHTTPClient.
    case automatic
    /// AsyncHTTPClient for everything (it negotiates h2 or HTTP/1.1 itself).
    ///
    /// Both modes apply only while private endpoints are allowed. With the SSRF guard on (the default)
    /// every connection goes to the addresses the guard checked (see `WebPushTransport`), and
    /// AsyncHTTPClient, which resolves host names itself, is not used.
    case asyncHTTPClient
}

/// Sends one POST to a push endpoint over HTTP/2 (pooled per origin) or HTTP/1.1. Redirects are never followed.
///
/// Two ways to connect:
/// - **Guarded** (`addresses` given: the SSRF guard is on, i.e. `allow_private_endpoints` is false): the
///   caller resolved the host once and checked every address; every connection goes to those
///   addresses (never a second DNS lookup), with the host name for SNI, the certificate check and
///   `Host`/`:authority`. https tries the origin's HTTP/2 pool first (ALPN offers h2 and http/1.1);
///   an origin that negotiates http/1.1 is served by `PinnedHTTP1Client`; plain http (only with
///   `allow_http`) always by `PinnedHTTP1Client`. AsyncHTTPClient is not used: it resolves host
///   names itself at connect time.
/// - **Unguarded** (private endpoints allowed, the operator trusts every endpoint): as before, the
///   first request of an origin through AsyncHTTPClient, then its HTTP/2 pool if it negotiated h2.
///
/// Bounded for a stream of distinct hostile endpoints: at most `maxOrigins` HTTP/2 pools (least
/// recently used closed first), pools idle for `originIdleTimeout` closed, and the origin -> protocol
/// table holds at most `maxOrigins * 4` entries. Response bodies are read up to `maxResponseBodyBytes`.
final class WebPushTransport: Sendable {
    enum OriginProtocol: Sendable { case http2, http1 }

    static let maxResponseBodyBytes = 64 * 1024

    let mode: WebPushTransportMode
    let client: HTTPClient
    let pools: HTTP2PoolGroup
    let http1: PinnedHTTP1Client
    let timeout: TimeAmount
    let logger: Logger
    let maxProtocolEntries: Int
    /// The outbound proxy (in the pools' configuration too). An endpoint it applies to never goes
    /// through AsyncHTTPClient: the pool / `PinnedHTTP1Client` tunnel to the checked address.
    let proxy: OutboundProxy
    private let protocols = Locked<[String: (proto: OriginProtocol, used: UInt64)]>([:])
    private let isShutDown = Locked(false)

    init(
        mode: WebPushTransportMode, tlsConfiguration: TLSConfiguration?, poolConfiguration: HTTP2PoolConfiguration?,
        timeoutSeconds: Double, connectionsPerOrigin: Int, maxConnectionsPerOrigin: Int? = nil, eventLoopGroup: any EventLoopGroup,
        logger: Logger,
        maxOrigins: Int = 512, originIdleTimeout: TimeAmount = .seconds(300)
    ) {
        self.mode = mode
        self.logger = logger
        let timeout = TimeAmount.nanoseconds(Int64(timeoutSeconds * 1e9))
        self.timeout = timeout
        var config = HTTPClient.Configuration(
            tlsConfiguration: tlsConfiguration ?? poolConfiguration?.tlsConfiguration,
            redirectConfiguration: .disallow,
            timeout: .init(connect: min(.seconds(10), timeout), read: timeout),
            connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 16),
            decompression: .disabled)
        config.httpVersion = .automatic
        // No spans of AsyncHTTPClient's own: a subscription's endpoint URL is its secret (the
        // delivery attempt's span is Pushgate's, `tracing`).
        config.tracing.tracer = nil
        self.client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: config, backgroundActivityLogger: logger)
        var poolConfig = poolConfiguration ?? HTTP2PoolConfiguration()
        if let tlsConfiguration { poolConfig.tlsConfiguration = tlsConfiguration }
        poolConfig.requestTimeout = timeout
        poolConfig.connectionsPerTarget = connectionsPerOrigin
        poolConfig.maxConnectionsPerTarget = max(connectionsPerOrigin, maxConnectionsPerOrigin ?? connectionsPerOrigin)
        // Connections beyond the floor close after the pool's idle timeout; a whole idle origin's
        // pool closes after `originIdleTimeout`.
        if let idle = poolConfig.idleTimeout, idle > originIdleTimeout { poolConfig.idleTimeout = originIdleTimeout }
        poolConfig.maxResponseBodyBytes = Self.maxResponseBodyBytes
        poolConfig.offeredALPN = ["h2", "http/1.1"]
        poolConfig.label.provider = "webpush"
        self.maxProtocolEntries = max(16, maxOrigins * 4)
        self.pools = HTTP2PoolGroup(
            configuration: poolConfig, eventLoopGroup: eventLoopGroup, logger: logger,
            maxPools: maxOrigins, poolIdleTimeout: originIdleTimeout)
        self.http1 = PinnedHTTP1Client(
            eventLoopGroup: eventLoopGroup, tlsConfiguration: poolConfig.tlsConfiguration,
            connectTimeout: min(poolConfig.connectTimeout, timeout), maxBodyBytes: Self.maxResponseBodyBytes,
            proxy: poolConfig.proxy)
        self.proxy = poolConfig.proxy
    }

    /// The protocol learnt for an origin (nil = not contacted yet).
    func learntProtocol(origin: String) -> OriginProtocol? { protocols.withLock { $0[origin]?.proto } }
    var learntOrigins: Int { protocols.withLock { $0.count } }

    private func learn(_ origin: String, _ proto: OriginProtocol) {
        let now = DispatchTime.now().uptimeNanoseconds
        protocols.withLock { table in
            if table[origin] == nil && table.count >= maxProtocolEntries {
                // Forget the least recently used origin (O(n), only when a new origin meets a full table).
                if let oldest = table.min(by: { $0.value.used < $1.value.used })?.key { table[oldest] = nil }
            }
            table[origin] = (proto, now)
        }
    }

    /// - Parameter addresses: the checked addresses to connect to (guarded mode), nil to let the
    ///   clients resolve the host (private endpoints allowed).
    func post(
        _ endpoint: WebPushEndpoint, headers: [(String, String)], body: [UInt8],
        addresses: [SocketAddress]? = nil
    ) async throws -> WebPushHTTPResponse {
        if addresses != nil || proxy.proxy(forHost: endpoint.host, port: endpoint.port, scheme: endpoint.scheme) != nil {
            return try await postGuarded(endpoint, addresses: addresses, headers: headers, body: body)
        }
        if mode == .automatic, endpoint.scheme == "https", learntProtocol(origin: endpoint.origin) == .http2 {
            do {
                return try await postHTTP2(endpoint, headers: headers, body: body, addresses: nil)
            } catch let error as HTTP2PoolError {
                switch error.code {
                case .alpnNotNegotiated:
                    // The origin stopped offering h2: fall back to HTTP/1.1 (the request was never sent).
                    learn(endpoint.origin, .http1)
                default:
                    // Connection-level failures go back to the retry policy as one transient attempt.
                    throw error
                }
            }
        }
        let response = try await postAHC(endpoint, headers: headers, body: body)
        return response
    }

    /// `addresses` nil: only through a proxy (private endpoints allowed), which resolves the name.
    private func postGuarded(
        _ endpoint: WebPushEndpoint, addresses: [SocketAddress]?, headers: [(String, String)],
        body: [UInt8]
    ) async throws -> WebPushHTTPResponse {
        if endpoint.scheme == "https", learntProtocol(origin: endpoint.origin) != .http1 {
            do {
                let r = try await postHTTP2(endpoint, headers: headers, body: body, addresses: addresses)
                learn(endpoint.origin, .http2)
                return r
            } catch let error as HTTP2PoolError {
                switch error.code {
                case .alpnNotNegotiated:
                    // HTTP/1.1 origin (the request was never sent on h2).
                    learn(endpoint.origin, .http1)
                default:
                    throw error
                }
            }
        }
        return try await http1.post(endpoint, addresses: addresses, headers: headers, body: body, timeout: timeout)
    }

    private func postHTTP2(
        _ endpoint: WebPushEndpoint, headers: [(String, String)], body: [UInt8],
        addresses: [SocketAddress]?
    ) async throws -> WebPushHTTPResponse {
        let pool = pools.pool(for: HTTP2Target(scheme: endpoint.scheme, host: endpoint.host, port: endpoint.port))
        var request = HTTP2Request(
            method: "POST", path: endpoint.pathAndQuery, headers: headers, body: ByteBuffer(bytes: body),
            connectAddresses: addresses)
        request.uniqueHeaders = [":path"]  // one subscription's path; the VAPID header repeats per service
        let r = try await pool.execute(request)
        var b = r.body
        return WebPushHTTPResponse(
            status: r.status, headers: r.headers,
            body: b.readBytes(length: min(b.readableBytes, Self.maxResponseBodyBytes)) ?? [])
    }

    private func postAHC(_ endpoint: WebPushEndpoint, headers: [(String, String)], body: [UInt8]) async throws -> WebPushHTTPResponse {
        var request = HTTPClientRequest(url: endpoint.url)
        request.method = .POST
        for (n, v) in headers { request.headers.add(name: n, value: v) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: timeout, logger: logger)
        if mode == .automatic, endpoint.scheme == "https" {
            learn(endpoint.origin, response.version.major == 2 ? .http2 : .http1)
        }
        // Keep at most 64 KiB of the answer (error texts are short; a huge body is not worth reading).
        var bytes: [UInt8] = []
        for try await chunk in response.body {
            bytes.append(contentsOf: chunk.readableBytesView.prefix(Self.maxResponseBodyBytes - bytes.count))
            if bytes.count >= Self.maxResponseBodyBytes { break }
        }
        return WebPushHTTPResponse(
            status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
            body: bytes)
    }

    func shutdown() async {
        let already = isShutDown.withLock { s -> Bool in
            defer { s = true }
            return s
        }
        if already { return }
        await pools.shutdown()
        try? await client.shutdown()
    }
}
