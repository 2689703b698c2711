import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// An HTTP CONNECT proxy for tests and `pushgate mock`: listens on loopback, answers
/// `CONNECT host:port` by dialing the target and splicing bytes both ways, and records every
/// CONNECT (target and the `Proxy-Authorization` it carried).
///
/// Loopback only, both ways: it listens on 127.0.0.1 and tunnels only to loopback targets
/// (`127.0.0.0/8`, `::1`, `localhost`); any other target is answered `403`. Anything but CONNECT is
/// answered `405`. With `credentials` set, a CONNECT without the matching `Proxy-Authorization: Basic`
/// is answered `407` with `Proxy-Authenticate`.
public final class MockConnectProxy: Sendable {
    /// One CONNECT request as the proxy saw it.
    public struct Connect: Sendable, Equatable {
        /// The request target, `host:port`.
        public var target: String
        /// The `Proxy-Authorization` header, if any.
        public var proxyAuthorization: String?
        /// The status the proxy answered (200 when the tunnel was made).
        public var status: Int
    }

    public struct Options: Sendable {
        public var port = 0
        /// Required `user:password` (Basic); nil = no authentication.
        public var credentials: (user: String, password: String)? = nil
        /// Answer every CONNECT with this status instead of tunnelling (e.g. 502, 403).
        public var refuseWith: Int? = nil
        public init() {}
    }

    struct State {
        var serverChannel: (any Channel)?
        var port = 0
        var connects: [Connect] = []
        var children: [ObjectIdentifier: any Channel] = [:]
    }

    public let options: Options
    let eventLoopGroup: any EventLoopGroup
    let state = NIOLockedValueBox(State())

    public init(options: Options = Options(), eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.options = options
        self.eventLoopGroup = eventLoopGroup
    }

    public func start() async throws {
        let channel = try await ServerBootstrap(group: self.eventLoopGroup)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    let decoder = ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes))
                    let encoder = HTTPResponseEncoder()
                    try sync.addHandler(decoder)
                    try sync.addHandler(encoder)
                    try sync.addHandler(ConnectRequestHandler(proxy: self, decoder: decoder, encoder: encoder))
                    self.state.withLockedValue { $0.children[ObjectIdentifier(channel)] = channel }
                    channel.closeFuture.whenComplete { _ in
                        self.state.withLockedValue { _ = $0.children.removeValue(forKey: ObjectIdentifier(channel)) }
                    }
                }
            }
            .bind(host: "127.0.0.1", port: self.options.port).get()
        let port = channel.localAddress?.port ?? 0
        self.state.withLockedValue {
            $0.serverChannel = channel
            $0.port = port
        }
    }

    /// The bound port (after `start`).
    public var port: Int { self.state.withLockedValue { $0.port } }

    /// `http://127.0.0.1:PORT`, or with `user:password@` when credentials are required.
    public var url: String {
        guard let c = self.options.credentials else { return "http://127.0.0.1:\(self.port)" }
        return "http://\(c.user):\(c.password)@127.0.0.1:\(self.port)"
    }

    /// Every CONNECT received so far, in order.
    public var connects: [Connect] { self.state.withLockedValue { $0.connects } }
    /// The targets of the tunnels made (status 200), in order.
    public var tunnelledTargets: [String] { self.connects.filter { $0.status == 200 }.map(\.target) }

    func record(_ c: Connect) { self.state.withLockedValue { $0.connects.append(c) } }

    /// Closes the listener and every open tunnel.
    public func stop() async throws {
        let (server, children) = self.state.withLockedValue { s in (s.serverChannel, Array(s.children.values)) }
        for c in children { c.close(promise: nil) }
        try await server?.close()
    }

    /// Whether `target` (`host:port`, IPv6 bracketed) is a loopback address or localhost.
    static func splitLoopbackTarget(_ target: String) -> (host: String, port: Int)? {
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]), (1...65535).contains(port) else {
            return nil
        }
        var host = String(target[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.lowercased() == "localhost" { return ("127.0.0.1", port) }
        var a = in_addr()
        if inet_pton(AF_INET, host, &a) == 1 {
            return withUnsafeBytes(of: &a) { $0[0] == 127 } ? (host, port) : nil
        }
        var a6 = in6_addr()
        if inet_pton(AF_INET6, host, &a6) == 1 {
            let b = withUnsafeBytes(of: &a6) { Array($0) }
            return b[0..<15].allSatisfy { $0 == 0 } && b[15] == 1 ? (host, port) : nil
        }
        return nil
    }
}

/// Reads one request head; answers CONNECT by dialing the target and gluing the two channels.
final class ConnectRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let proxy: MockConnectProxy
    let decoder: ByteToMessageHandler<HTTPRequestDecoder>
    let encoder: HTTPResponseEncoder
    private var head: HTTPRequestHead?
    private var done = false

    init(proxy: MockConnectProxy, decoder: ByteToMessageHandler<HTTPRequestDecoder>, encoder: HTTPResponseEncoder) {
        self.proxy = proxy
        self.decoder = decoder
        self.encoder = encoder
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.done else { return }
        switch self.unwrapInboundIn(data) {
        case .head(let h):
            self.head = h
        case .body:
            break
        case .end:
            guard let head = self.head else { return }
            self.done = true
            self.handle(head, context: context)
        }
    }

    private func answer(_ status: HTTPResponseStatus, headers: HTTPHeaders = HTTPHeaders(), context: ChannelHandlerContext) {
        var h = headers
        h.add(name: "Content-Length", value: "0")
        h.add(name: "Connection", value: "close")
        context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: h))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    private func handle(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let auth = head.headers.first(name: "Proxy-Authorization")
        var record = MockConnectProxy.Connect(target: head.uri, proxyAuthorization: auth, status: 200)
        guard head.method == .CONNECT else {
            record.status = 405
            self.proxy.record(record)
            return self.answer(.methodNotAllowed, context: context)
        }
        if let c = self.proxy.options.credentials {
            let expected = "Basic " + Data("\(c.user):\(c.password)".utf8).base64EncodedString()
            guard auth == expected else {
                record.status = 407
                self.proxy.record(record)
                var h = HTTPHeaders()
                h.add(name: "Proxy-Authenticate", value: "Basic realm=\"mock\"")
                return self.answer(.proxyAuthenticationRequired, headers: h, context: context)
            }
        }
        if let status = self.proxy.options.refuseWith {
            record.status = status
            self.proxy.record(record)
            return self.answer(HTTPResponseStatus(statusCode: status), context: context)
        }
        guard let (host, port) = MockConnectProxy.splitLoopbackTarget(head.uri) else {
            record.status = 403
            self.proxy.record(record)
            return self.answer(.forbidden, context: context)
        }
        let inbound = context.channel
        let tunnelRecord = record
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        ClientBootstrap(group: context.eventLoop)
            .connectTimeout(.seconds(5))
            .connect(host: host, port: port)
            .whenComplete { result in
                let (handler, context) = loopBound.value
                switch result {
                case .failure:
                    var failed = tunnelRecord
                    failed.status = 502
                    handler.proxy.record(failed)
                    handler.answer(.badGateway, context: context)
                case .success(let outbound):
                    handler.proxy.record(tunnelRecord)
                    handler.glue(inbound: inbound, outbound: outbound, context: context)
                }
            }
    }

    /// Takes the HTTP handlers out, splices the two channels and answers 200.
    private func glue(inbound: any Channel, outbound: any Channel, context: ChannelHandlerContext) {
        let (a, b) = GlueHandler.matchedPair()
        do {
            let sync = inbound.pipeline.syncOperations
            sync.removeHandler(self.encoder, promise: nil)
            sync.removeHandler(self.decoder, promise: nil)
            sync.removeHandler(context: context, promise: nil)
            try sync.addHandler(a)
            try outbound.pipeline.syncOperations.addHandler(b)
            // Written raw: a 2xx answer to CONNECT has no body framing (HTTPResponseEncoder would add chunking).
            inbound.writeAndFlush(ByteBuffer(string: "HTTP/1.1 200 Connection Established\r\n\r\n"), promise: nil)
        } catch {
            inbound.close(promise: nil)
            outbound.close(promise: nil)
        }
    }
}

/// Forwards everything read on one channel to its partner (NIO's "glue" pattern), with backpressure
/// (reads stop while the partner is not writable) and half-closure turned into close.
final class GlueHandler: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private var partner: GlueHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false

    static func matchedPair() -> (GlueHandler, GlueHandler) {
        let a = GlueHandler()
        let b = GlueHandler()
        a.partner = b
        b.partner = a
        return (a, b)
    }

    private func partnerWrite(_ data: NIOAny) { self.context?.write(data, promise: nil) }
    private func partnerFlush() { self.context?.flush() }
    private func partnerClose() { self.context?.close(promise: nil) }
    private var partnerWritable: Bool { self.context?.channel.isWritable ?? false }

    private func partnerBecameWritable() {
        if self.pendingRead {
            self.pendingRead = false
            self.context?.read()
        }
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        self.partner = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) { self.partner?.partnerWrite(data) }

    func channelReadComplete(context: ChannelHandlerContext) { self.partner?.partnerFlush() }

    func channelInactive(context: ChannelHandlerContext) { self.partner?.partnerClose() }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let e = event as? ChannelEvent, case .inputClosed = e { self.partner?.partnerClose() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.partner?.partnerBecameWritable() }
    }

    func read(context: ChannelHandlerContext) {
        if let partner = self.partner, partner.partnerWritable {
            context.read()
        } else {
            self.pendingRead = true
        }
    }
}
