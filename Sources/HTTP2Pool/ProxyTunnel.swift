import NIOCore
import NIOExtras
import NIOHTTP1

/// A CONNECT tunnel through an HTTP proxy could not be opened. Names the proxy as `host:port`
/// (never its credentials) and the target.
public struct ProxyTunnelError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `host:port` of the proxy.
    public var proxy: String
    /// `host:port` asked for in the CONNECT.
    public var target: String
    /// What went wrong: "answered 407 Proxy Authentication Required", "timed out", ...
    public var reason: String
    /// The proxy's HTTP status when it answered the CONNECT with one.
    public var status: Int?

    public init(proxy: String, target: String, reason: String, status: Int? = nil) {
        self.proxy = proxy
        self.target = target
        self.reason = reason
        self.status = status
    }

    public var description: String { "proxy \(self.proxy): CONNECT \(self.target) \(self.reason)" }
}

/// Opens a `CONNECT host:port` tunnel on a channel connected to an HTTP proxy, with swift-nio-extras'
/// `NIOHTTP1ProxyConnectHandler` (`Proxy-Authorization: Basic` when the proxy URL has credentials).
/// Used by the HTTP/2 pool and the Web Push HTTP/1.1 client; AsyncHTTPClient has its own.
public enum ProxyTunnel {
    /// Adds the tunnel's handlers at the front of the pipeline (on the channel's event loop, before
    /// the channel is active, i.e. in a `channelInitializer`). The future succeeds once the proxy
    /// answered 2xx and the handlers are gone again: the caller then adds TLS at the front. It fails
    /// with `ProxyTunnelError`.
    ///
    /// - Parameter targetHost: a host name or an IP literal (IPv6 without brackets).
    public static func addHandlers(
        to channel: any Channel, proxy: ProxyEndpoint, targetHost: String, targetPort: Int, deadline: NIODeadline
    ) throws -> EventLoopFuture<Void> {
        let authority = "\(targetHost.contains(":") ? "[\(targetHost)]" : targetHost):\(targetPort)"
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: authority)
        if let auth = proxy.basicAuthorization { headers.add(name: "Proxy-Authorization", value: auth) }
        let promise = channel.eventLoop.makePromise(of: Void.self)
        let encoder = HTTPRequestEncoder()
        let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .forwardBytes))
        let recorder = ProxyAnswerRecorder()
        let connect = NIOHTTP1ProxyConnectHandler(
            // The handler writes "\(targetHost):\(targetPort)" as the request target.
            targetHost: targetHost.contains(":") ? "[\(targetHost)]" : targetHost, targetPort: targetPort,
            headers: headers, deadline: deadline, promise: promise)
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(connect, position: .first)
        try sync.addHandler(recorder, position: .first)
        try sync.addHandler(decoder, position: .first)
        try sync.addHandler(encoder, position: .first)
        let proxyName = proxy.description
        let withCredentials = proxy.username != nil
        let loop = channel.eventLoop
        let handlers = NIOLoopBound((recorder: recorder, encoder: encoder, decoder: decoder), eventLoop: loop)
        return promise.futureResult.flatMapError { error -> EventLoopFuture<Void> in
            let recorder = handlers.value.recorder
            let status = recorder.status
            let reason: String
            switch error {
            case let e as NIOHTTP1ProxyConnectHandler.Error where e == .proxyAuthenticationRequired():
                reason =
                    "answered 407 Proxy Authentication Required"
                    + (withCredentials ? " (the credentials of the proxy URL were refused)" : " (the proxy URL has no credentials)")
            case let e as NIOHTTP1ProxyConnectHandler.Error where e == .invalidProxyResponseHead(.init(version: .http1_1, status: .ok)):
                reason = "answered \(status.map(String.init) ?? "?") \(recorder.reasonPhrase)"
            case let e as NIOHTTP1ProxyConnectHandler.Error where e == .httpProxyHandshakeTimeout():
                reason = "timed out"
            case let e as NIOHTTP1ProxyConnectHandler.Error
            where e == .remoteConnectionClosed() || e == .channelUnexpectedlyInactive() || e == .noResult():
                reason = "failed: the proxy closed the connection"
            case let e as NIOHTTP1ProxyConnectHandler.Error where e == .invalidProxyResponse():
                reason = "failed: the proxy sent a body with its 2xx answer"
            default:
                reason = "failed: \(error)"
            }
            return loop.makeFailedFuture(ProxyTunnelError(proxy: proxyName, target: authority, reason: reason, status: status))
        }.flatMap {
            let sync = channel.pipeline.syncOperations
            let h = handlers.value
            let removals = [sync.removeHandler(h.recorder), sync.removeHandler(h.encoder), sync.removeHandler(h.decoder)]
            return EventLoopFuture.andAllSucceed(removals, on: loop)
        }
    }
}

/// Remembers the status line of the proxy's answer (the CONNECT handler's error does not expose it).
final class ProxyAnswerRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    private(set) var status: Int?
    private(set) var reasonPhrase = ""

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = self.unwrapInboundIn(data) {
            self.status = Int(head.status.code)
            self.reasonPhrase = String(head.status.reasonPhrase.prefix(100).filter { $0.isASCII && !$0.isNewline })
        }
        context.fireChannelRead(data)
    }
}
