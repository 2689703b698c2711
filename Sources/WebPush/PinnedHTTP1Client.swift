import Foundation
import HTTP2Pool
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import ProviderKit

/// The HTTP/1.1 path of the SSRF-guarded transport: one POST per connection to addresses the guard
/// already checked, with the endpoint's host name for TLS SNI, the certificate check and `Host`.
///
/// Why our own (small) client and not AsyncHTTPClient: AHC resolves the URL's host itself at connect
/// time (its only override, `dnsOverride`, is fixed per client), so a DNS answer that changes between
/// our check and its lookup (rebinding) would reach whatever the second answer says. Here the
/// connection is made with NIO's `ClientBootstrap` over a resolver that answers only the checked
/// addresses; parsing and header limits are NIO's (`HTTPResponseDecoder` with
/// `NIOHTTPDecoderLimitConfiguration`), TLS and hostname verification NIOSSL's.
///
/// No keep-alive (`Connection: close`): every major push service speaks HTTP/2 (pooled, see
/// `HTTP2PoolGroup`); HTTP/1.1-only origins are rare self-hosted distributors.
final class PinnedHTTP1Client: Sendable {
    let eventLoopGroup: any EventLoopGroup
    let tlsConfiguration: TLSConfiguration
    let connectTimeout: TimeAmount
    let maxBodyBytes: Int
    /// With a proxy for the endpoint, the connection is a CONNECT tunnel to the first checked address.
    let proxy: OutboundProxy
    private let sslContext = Locked<Result<NIOSSLContext, any Error>?>(nil)

    static let limits: NIOHTTPDecoderLimitConfiguration = {
        var l = NIOHTTPDecoderLimitConfiguration()
        l.maxHeaderFieldCount = 100
        l.maxHeaderFieldSize = 16 * 1024
        l.maxHeaderListSize = 64 * 1024
        return l
    }()

    init(
        eventLoopGroup: any EventLoopGroup, tlsConfiguration: TLSConfiguration, connectTimeout: TimeAmount, maxBodyBytes: Int,
        proxy: OutboundProxy = .direct
    ) {
        self.eventLoopGroup = eventLoopGroup
        self.proxy = proxy
        var tls = tlsConfiguration
        tls.applicationProtocols = ["http/1.1"]
        self.tlsConfiguration = tls
        self.connectTimeout = connectTimeout
        self.maxBodyBytes = maxBodyBytes
    }

    private func context() throws -> NIOSSLContext {
        try sslContext.withLock { cached in
            if let cached { return try cached.get() }
            let made = Result { try NIOSSLContext(configuration: tlsConfiguration) }
            cached = made
            return try made.get()
        }
    }

    /// - Parameter addresses: the checked addresses to connect to; nil (only with a proxy for the
    ///   endpoint, private endpoints allowed) lets the proxy resolve the host name.
    func post(
        _ endpoint: WebPushEndpoint, addresses: [SocketAddress]?, headers: [(String, String)], body: [UInt8],
        timeout: TimeAmount
    ) async throws -> WebPushHTTPResponse {
        let tls: NIOSSLContext? = endpoint.scheme == "https" ? try context() : nil
        let serverHostname: String? = IPAddressClassifier.parse(endpoint.host) == nil ? endpoint.host : nil
        let loop = eventLoopGroup.next()
        let maxBody = maxBodyBytes
        let viaProxy = proxy.proxy(forHost: endpoint.host, port: endpoint.port, scheme: endpoint.scheme)
        let connectTimeout = min(connectTimeout, timeout)
        // Through a proxy: CONNECT names the checked address (the proxy never resolves the name), TLS
        // is added once the tunnel is up.
        let tunnelHost = addresses?.first?.ipAddress ?? endpoint.host
        let tunnel = Locked<EventLoopFuture<Void>?>(nil)
        var bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(connectTimeout)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
        if viaProxy == nil, let addresses {
            bootstrap = bootstrap.resolver(FixedAddressResolver(addresses: addresses, eventLoop: loop))
        }
        bootstrap = bootstrap.channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                let sync = channel.pipeline.syncOperations
                if let viaProxy {
                    let t = try ProxyTunnel.addHandlers(
                        to: channel, proxy: viaProxy, targetHost: tunnelHost, targetPort: endpoint.port,
                        deadline: .now() + connectTimeout)
                    tunnel.withLock { $0 = t }
                } else if let tls {
                    try sync.addHandler(NIOSSLClientHandler(context: tls, serverHostname: serverHostname))
                }
                try sync.addHandler(HTTPRequestEncoder())
                try sync.addHandler(
                    ByteToMessageHandler(
                        HTTPResponseDecoder(
                            leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .drop, limitConfiguration: Self.limits)))
                try sync.addHandler(HTTP1ResponseCollector(maxBodyBytes: maxBody, eventLoop: channel.eventLoop))
            }
        }
        let channel: any Channel
        if let viaProxy {
            do {
                channel = try await bootstrap.connect(host: viaProxy.host, port: viaProxy.port).get()
            } catch {
                throw ProxyTunnelError(
                    proxy: viaProxy.description, target: "\(tunnelHost):\(endpoint.port)", reason: "failed: cannot connect: \(error)")
            }
            do {
                try await tunnel.withLock { $0 }?.get()
                if let tls {
                    try await channel.eventLoop.submit {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: tls, serverHostname: serverHostname), position: .first)
                    }.get()
                }
            } catch {
                channel.close(promise: nil)
                throw error
            }
        } else {
            channel = try await bootstrap.connect(host: endpoint.host, port: endpoint.port).get()
        }
        let collector = try await channel.pipeline.handler(type: HTTP1ResponseCollector.self).get()
        let timer = channel.eventLoop.scheduleTask(in: timeout) {
            collector.fail(WebPushHTTP1Error.timeout)
            channel.close(promise: nil)
        }
        defer { timer.cancel() }

        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: endpoint.pathAndQuery)
        let defaultPort = endpoint.scheme == "https" ? 443 : 80
        let hostForURL = endpoint.host.contains(":") ? "[\(endpoint.host)]" : endpoint.host
        head.headers.add(name: "host", value: endpoint.port == defaultPort ? hostForURL : "\(hostForURL):\(endpoint.port)")
        for (n, v) in headers { head.headers.add(name: n, value: v) }
        head.headers.replaceOrAdd(name: "content-length", value: String(body.count))
        head.headers.replaceOrAdd(name: "connection", value: "close")
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        if !body.isEmpty { channel.write(HTTPClientRequestPart.body(.byteBuffer(ByteBuffer(bytes: body))), promise: nil) }
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        do {
            let response = try await collector.response.get()
            channel.close(promise: nil)
            return response
        } catch {
            channel.close(promise: nil)
            throw error
        }
    }
}

enum WebPushHTTP1Error: Error, CustomStringConvertible {
    case timeout
    case connectionClosed
    var description: String {
        switch self {
        case .timeout: return "HTTP/1.1 request timed out"
        case .connectionClosed: return "HTTP/1.1 connection closed before the response was complete"
        }
    }
}

/// Collects one response: status, headers, and at most `maxBodyBytes` of body; past the cap the
/// response completes at once and the connection is closed (the rest is never buffered).
final class HTTP1ResponseCollector: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart

    let maxBodyBytes: Int
    let promise: EventLoopPromise<WebPushHTTPResponse>
    var response: EventLoopFuture<WebPushHTTPResponse> { promise.futureResult }
    private var head: HTTPResponseHead?
    private var body: [UInt8] = []
    private var done = false

    init(maxBodyBytes: Int, eventLoop: any EventLoop) {
        self.maxBodyBytes = maxBodyBytes
        self.promise = eventLoop.makePromise()
    }

    /// Event loop only.
    func fail(_ error: any Error) {
        guard !done else { return }
        done = true
        promise.fail(error)
    }

    private func succeed(_ context: ChannelHandlerContext) {
        guard !done, let head else { return }
        done = true
        promise.succeed(WebPushHTTPResponse(status: Int(head.status.code), headers: head.headers.map { ($0.name, $0.value) }, body: body))
        body = []
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !done else { return }
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
        case .body(let buffer):
            let room = maxBodyBytes - body.count
            body.append(contentsOf: buffer.readableBytesView.prefix(max(0, room)))
            if buffer.readableBytes > room {
                succeed(context)
                context.close(promise: nil)
            }
        case .end:
            succeed(context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(WebPushHTTP1Error.connectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error)
        context.close(promise: nil)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        fail(WebPushHTTP1Error.connectionClosed)
    }
}
