import GRPCNIOTransportHTTP2Posix
import Logging
import NIOCore
import NIOHTTP2
import Server
import Synchronization

/// `core.max_connections` and `core.read_timeout` on the gRPC port, as the HTTP server applies them.
///
/// grpc-swift's transport has no connection limit and no per-request read deadline, and it builds its
/// own NIO pipelines; its only way in is `Config.channelDebuggingCallbacks`, which hands us each
/// accepted TCP connection and each accepted HTTP/2 stream after gRPC configured it. We use those
/// hooks rather than a transport of our own (`HTTP2ServerTransport.Custom` would mean writing the
/// bootstrap, TLS and ALPN set-up again).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCIngestLimits: Sendable {
    /// The gRPC port's own count of open connections, held to `core.max_connections` (the HTTP port
    /// counts its own against the same setting): at most that many on each port.
    let maxConnections: Int
    /// `core.read_timeout`: from a stream's first frame (its HEADERS) to the end of its request.
    let readTimeout: TimeAmount
    let logger: Logger
    /// How often, at most, a refused connection is logged (with the count refused since).
    static let warningInterval = TimeAmount.seconds(60)

    private struct State {
        var open = 0
        var refusedUnlogged = 0
        var lastWarning: NIODeadline?
    }
    private let state = Mutex(State())

    init(maxConnections: Int, readTimeout: TimeAmount, logger: Logger) {
        self.maxConnections = maxConnections
        self.readTimeout = readTimeout
        self.logger = logger
    }

    /// The hooks for `HTTP2ServerTransport.Posix.Config.channelDebuggingCallbacks`.
    var callbacks: HTTP2ServerTransport.Config.ChannelDebuggingCallbacks {
        .init(
            onBindTCPListener: nil,
            onAcceptTCPConnection: { [self] channel in self.accept(channel) },
            onAcceptHTTP2Stream: { [self] channel in self.bound(stream: channel) })
    }

    /// Counts an accepted connection until it closes, or closes it at once past the cap. This runs in
    /// NIO's child channel initializer, before the connection is registered: on a failed future NIO
    /// drops it without registering it (gRPC never sees it, nothing is read from it) and leaves the
    /// closing to us.
    func accept(_ channel: any Channel) -> EventLoopFuture<Void> {
        let now = NIODeadline.now()
        // (admitted, refused connections to report now: the first past the cap, then at most one
        // warning a minute counting those refused since the last one).
        let (admitted, report) = state.withLock { (s: inout State) -> (Bool, Int?) in
            if s.open < maxConnections {
                s.open += 1
                return (true, nil)
            }
            s.refusedUnlogged += 1
            if let last = s.lastWarning, now - last < Self.warningInterval { return (false, nil) }
            let refused = s.refusedUnlogged
            s.lastWarning = now
            s.refusedUnlogged = 0
            return (false, refused)
        }
        guard admitted else {
            if let refused = report {
                logger.warning(
                    "gRPC port: core.max_connections (\(maxConnections)) connections open, new ones are closed at once (\(refused) since the last warning; logged at most once a minute)"
                )
            }
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(ConnectionLimitReached())
        }
        channel.closeFuture.whenComplete { [self] _ in
            self.state.withLock { $0.open -= 1 }
        }
        return channel.eventLoop.makeSucceededVoidFuture()
    }

    /// Adds the read deadline in front of gRPC's handler on a new stream channel.
    func bound(stream channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(RPCRequestReadTimeoutHandler(timeout: readTimeout), position: .first)
        }
    }
}

struct ConnectionLimitReached: Error, CustomStringConvertible {
    var description: String { "core.max_connections reached on the gRPC port" }
}

/// Resets an HTTP/2 stream whose request has not ended (END_STREAM) within `timeout` of the stream's
/// first frame. Each frame is forwarded untouched; a trickled or unfinished request message would
/// otherwise hold the stream and its buffer for as long as the connection lives (grpc-swift has no
/// read deadline, and its idle timer only counts connections with no stream open). A small handler
/// because grpc-swift has no setting for this; the same bound as `RequestReadTimeoutHandler` on HTTP, with its `RequestReadDeadline`.
final class RPCRequestReadTimeoutHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload

    private let timeout: TimeAmount
    private var deadline = RequestReadDeadline()
    private var requestEnded = false

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    /// Added as the stream channel is created for its first (HEADERS) frame: the clock starts here.
    func handlerAdded(context: ChannelHandlerContext) {
        // Closing an HTTP/2 stream channel whose stream is open sends RST_STREAM (CANCEL); the RPC
        // handler sees the stream end as if the client had cancelled it.
        deadline.start(timeout, context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !requestEnded {
            switch unwrapInboundIn(data) {
            case .headers(let headers) where headers.endStream: endOfRequest()
            case .data(let body) where body.endStream: endOfRequest()
            default: break
            }
        }
        context.fireChannelRead(data)
    }

    private func endOfRequest() {
        requestEnded = true
        deadline.clear()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline.clear()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline.clear()
        context.fireChannelInactive()
    }
}
