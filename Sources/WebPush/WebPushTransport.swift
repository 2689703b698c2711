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
        lock.lock(); defer { lock.unlock() }
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
    case asyncHTTPClient
}

/// Sends one POST to a push endpoint over HTTP/2 (pooled per origin) or HTTP/1.1. Redirects are never followed.
final class WebPushTransport: Sendable {
    enum OriginProtocol: Sendable { case http2, http1 }

    let mode: WebPushTransportMode
    let client: HTTPClient
    let pools: HTTP2PoolGroup
    let timeout: TimeAmount
    let logger: Logger
    private let protocols = Locked<[String: OriginProtocol]>([:])
    private let isShutDown = Locked(false)

    init(mode: WebPushTransportMode, tlsConfiguration: TLSConfiguration?, poolConfiguration: HTTP2PoolConfiguration?,
         timeoutSeconds: Double, connectionsPerOrigin: Int, eventLoopGroup: any EventLoopGroup, logger: Logger) {
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
        self.client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: config, backgroundActivityLogger: logger)
        var poolConfig = poolConfiguration ?? HTTP2PoolConfiguration()
        if let tlsConfiguration { poolConfig.tlsConfiguration = tlsConfiguration }
        poolConfig.requestTimeout = timeout
        poolConfig.connectionsPerTarget = connectionsPerOrigin
        poolConfig.idleTimeout = .seconds(300)
        self.pools = HTTP2PoolGroup(configuration: poolConfig, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    /// The protocol learnt for an origin (nil = not contacted yet).
    func learntProtocol(origin: String) -> OriginProtocol? { protocols.withLock { $0[origin] } }

    func post(_ endpoint: WebPushEndpoint, headers: [(String, String)], body: [UInt8]) async throws -> WebPushHTTPResponse {
        if mode == .automatic, endpoint.scheme == "https", learntProtocol(origin: endpoint.origin) == .http2 {
            do {
                return try await postHTTP2(endpoint, headers: headers, body: body)
            } catch let error as HTTP2PoolError {
                switch error {
                case .tls(let why) where why.contains("ALPN"):
                    // The origin stopped offering h2: fall back to HTTP/1.1 (the request was never sent).
                    protocols.withLock { $0[endpoint.origin] = .http1 }
                case _ where error.isRetryable:
                    // One transparent re-attempt on a connection-level failure.
                    return try await postHTTP2(endpoint, headers: headers, body: body)
                default:
                    throw error
                }
            }
        }
        let response = try await postAHC(endpoint, headers: headers, body: body)
        return response
    }

    private func postHTTP2(_ endpoint: WebPushEndpoint, headers: [(String, String)], body: [UInt8]) async throws -> WebPushHTTPResponse {
        let pool = pools.pool(for: HTTP2Target(scheme: endpoint.scheme, host: endpoint.host, port: endpoint.port))
        let request = HTTP2Request(method: "POST", path: endpoint.pathAndQuery, headers: headers, body: ByteBuffer(bytes: body))
        let r = try await pool.execute(request)
        var b = r.body
        return WebPushHTTPResponse(status: r.status, headers: r.headers, body: b.readBytes(length: min(b.readableBytes, 64 * 1024)) ?? [])
    }

    private func postAHC(_ endpoint: WebPushEndpoint, headers: [(String, String)], body: [UInt8]) async throws -> WebPushHTTPResponse {
        var request = HTTPClientRequest(url: endpoint.url)
        request.method = .POST
        for (n, v) in headers { request.headers.add(name: n, value: v) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: timeout, logger: logger)
        if mode == .automatic, endpoint.scheme == "https" {
            let proto: OriginProtocol = response.version.major == 2 ? .http2 : .http1
            protocols.withLock { table in
                if table.count >= 10_000 { table.removeAll(keepingCapacity: true) }
                table[endpoint.origin] = proto
            }
        }
        // Keep at most 64 KiB of the answer (error texts are short; a huge body is not worth reading).
        var bytes: [UInt8] = []
        for try await chunk in response.body {
            bytes.append(contentsOf: chunk.readableBytesView.prefix(64 * 1024 - bytes.count))
            if bytes.count >= 64 * 1024 { break }
        }
        return WebPushHTTPResponse(status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
                                   body: bytes)
    }

    func shutdown() async {
        let already = isShutDown.withLock { s -> Bool in defer { s = true }; return s }
        if already { return }
        await pools.shutdown()
        try? await client.shutdown()
    }
}
