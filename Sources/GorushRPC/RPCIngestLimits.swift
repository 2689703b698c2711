import GRPCNIOTransportHTTP2Posix
import GatewayCore
import Logging
import NIOCore
import NIOHTTP2
import NIOSSL
import NIOTLS
import Synchronization

/// `core.max_connections`, `core.max_connections_per_address` and `core.read_timeout` on the gRPC
/// port, as the HTTP server applies them, and the admission of each stream (`RPCStreamAdmissionHandler`:
/// the key its method needs, `grpc.max_message_bytes`, the pending-bytes budgets).
///
/// grpc-swift's transport has no connection limit and no per-request read deadline, and it builds its
/// own NIO pipelines; its only way in is `Config.channelDebuggingCallbacks`, which hands us the
/// listening channel before it binds, and each accepted TCP connection and each accepted HTTP/2
/// stream after gRPC configured it. We use those
/// hooks rather than a transport of our own (`HTTP2ServerTransport.Custom` would mean writing the
/// bootstrap, TLS and ALPN set-up again).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCIngestLimits: Sendable {
    /// The gRPC port's own count of open connections, held to `core.max_connections` (the HTTP port
    /// counts its own against the same setting): at most that many on each port.
    let maxConnections: Int
    /// `core.max_connections_per_address`, counted on this port.
    let perAddress: AddressConnectionLimit
    /// `core.read_timeout`: from a stream's first frame (its HEADERS) to the end of its request.
    let readTimeout: TimeAmount
    /// `grpc.max_message_bytes`.
    let maxMessageBytes: Int
    /// `grpc.max_pending_bytes_per_connection`: each connection's budget is made with this cap.
    let maxPendingBytesPerConnection: Int
    /// `grpc.max_pending_bytes`: the whole port's budget.
    let pending: RPCPendingBudget
    /// Why a stream is refused on its HEADERS (nil: admitted); reads the keys as last loaded.
    let authorize: RPCStreamAdmissionHandler.Authorize
    /// `core.tls_min_version` when it is above what grpc-swift's TLS set-up enforces itself (1.2).
    let minimumTLSVersion: TLSVersion?
    let logger: Logger
    /// How often, at most, a refused connection is logged (with the count refused since).
    static let warningInterval = TimeAmount.seconds(60)

    private struct State {
        var open = 0
        var refusals = RefusalLog()
    }
    private let state = Mutex(State())

    init(
        maxConnections: Int, maxConnectionsPerAddress: Int, readTimeout: TimeAmount, maxMessageBytes: Int,
        maxPendingBytesPerConnection: Int, maxPendingBytes: Int, authorize: @escaping RPCStreamAdmissionHandler.Authorize,
        minimumTLSVersion: TLSVersion? = nil, logger: Logger
    ) {
        self.maxConnections = maxConnections
        self.perAddress = AddressConnectionLimit(maxPerAddress: maxConnectionsPerAddress, portName: "gRPC port", logger: logger)
        self.readTimeout = readTimeout
        self.maxMessageBytes = maxMessageBytes
        self.maxPendingBytesPerConnection = maxPendingBytesPerConnection
        self.pending = RPCPendingBudget(cap: maxPendingBytes)
        self.authorize = authorize
        self.minimumTLSVersion = minimumTLSVersion
        self.logger = logger
    }

    /// The settings of `gateway` and `grpc`; streams are authorized with the gateway's keys as last
    /// loaded (a reload applies).
    convenience init(gateway: Gateway, grpc: GRPCSettings) {
        let settings = gateway.settings
        self.init(
            maxConnections: settings.maxConnections, maxConnectionsPerAddress: settings.maxConnectionsPerAddress,
            readTimeout: .seconds(Int64(settings.readTimeout)), maxMessageBytes: grpc.maxMessageBytes,
            maxPendingBytesPerConnection: grpc.maxPendingBytesPerConnection, maxPendingBytes: grpc.maxPendingBytes,
            authorize: { [gateway] access, authorization, apiKey in
                RPCIngestLimits.refusal(access: access, auth: gateway.auth, authorization: authorization, apiKey: apiKey)
            },
            // grpc-swift's server TLS has TLS 1.2 as its minimum and no setting for it.
            minimumTLSVersion: settings.tls?.minimumVersion == .tlsv13 ? .tlsv13 : nil,
            logger: gateway.logger)
    }

    /// Why a stream of a method needing `access` is refused with these keys, nil when it may go on.
    static func refusal(access: RPCAccess, auth: IngestAuth, authorization: String?, apiKey: String?) -> String? {
        guard auth.enabled, access != .open else { return nil }
        let presented = IngestAuth.presentedKey(authorization: authorization, apiKey: apiKey)
        switch auth.identify(presented: presented) {
        case .app, .admin: return nil
        case nil: return presented == nil ? "send an API key: metadata authorization: Bearer <key>" : "the API key is not valid"
        }
    }

    /// The hooks for `HTTP2ServerTransport.Posix.Config.channelDebuggingCallbacks`.
    var callbacks: HTTP2ServerTransport.Config.ChannelDebuggingCallbacks {
        .init(
            onBindTCPListener: { [self] channel in self.listen(channel) },
            onAcceptTCPConnection: { [self] channel in self.accept(channel) },
            onAcceptHTTP2Stream: { [self] channel in self.bound(stream: channel) })
    }

    /// Puts `RPCListenerAdmission` on the listening channel, in front of NIO's accept handler: a
    /// connection past a cap is closed before any of gRPC's pipeline is built for it. Also sets the
    /// listen backlog to the HTTP port's (1024): grpc-swift leaves NIO's 128, and a burst of
    /// connections from one client filled it, so that others' connections waited for SYN retries.
    /// (This runs before the channel binds, when the backlog is applied.)
    func listen(_ channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            try channel.syncOptions?.setOption(ChannelOptions.backlog, value: 1024)
            try channel.pipeline.syncOperations.addHandler(RPCListenerAdmission(limits: self))
        }
    }

    /// Counts an accepted connection until it closes (true), or answers false past
    /// `core.max_connections` or its address's `core.max_connections_per_address` (the caller closes
    /// it, uncounted). Logs the refusals past the first cap once, then at most once a minute.
    func admit(_ channel: any Channel) -> Bool {
        let now = NIODeadline.now()
        // (admitted, refused connections to report now: the first past the cap, then at most one
        // warning a minute counting those refused since the last one).
        let (admitted, report) = state.withLock { (s: inout State) -> (Bool, Int?) in
            if s.open < maxConnections {
                s.open += 1
                return (true, nil)
            }
            return (false, s.refusals.refused(now: now, interval: Self.warningInterval))
        }
        guard admitted else {
            if let refused = report {
                logger.warning(
                    "gRPC port: core.max_connections (\(maxConnections)) connections open, new ones are closed at once (\(refused) since the last warning; logged at most once a minute)"
                )
            }
            return false
        }
        guard perAddress.admit(channel) else {
            state.withLock { $0.open -= 1 }
            return false
        }
        channel.closeFuture.whenComplete { [self] _ in
            self.state.withLock { $0.open -= 1 }
        }
        return true
    }

    /// An admitted connection, after gRPC configured its pipeline: its budget of unfinished-message
    /// bytes, and with `core.tls_min_version` 1.3 the TLS version check.
    func accept(_ channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            let sync = channel.pipeline.syncOperations
            // Found by the connection's stream handlers (`bound(stream:)`).
            try sync.addHandler(RPCConnectionBudget(cap: maxPendingBytesPerConnection))
            if let minimumTLSVersion {
                try sync.addHandler(RPCTLSVersionCheck(minimum: minimumTLSVersion), position: .after(try sync.handler(type: NIOSSLHandler.self)))
            }
        }
    }

    /// Adds the admission check and the read deadline in front of gRPC's handler on a new stream
    /// channel: [admission, read deadline, grpc-swift's stream handler].
    func bound(stream channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            // Stream channels run on their connection's event loop: the connection's pipeline may be read here.
            let budget =
                (try? channel.parent?.pipeline.syncOperations.handler(type: RPCConnectionBudget.self).budget)
                ?? RPCPendingBudget(cap: maxPendingBytesPerConnection)
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(RPCRequestReadTimeoutHandler(timeout: readTimeout), position: .first)
            try sync.addHandler(
                RPCStreamAdmissionHandler(authorize: authorize, maxMessageBytes: maxMessageBytes, connection: budget, total: pending),
                position: .first)
        }
    }
}

/// `core.tls_min_version: "1.3"` on the gRPC port: grpc-swift builds its TLS context itself with
/// TLS 1.2 as the minimum, so a connection that negotiated less than `minimum` is closed as its
/// handshake completes, before anything it sent is passed on (this handler sits right after TLS).
final class RPCTLSVersionCheck: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    let minimum: TLSVersion
    private var refused = false

    init(minimum: TLSVersion) {
        self.minimum = minimum
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            let version = try? context.pipeline.syncOperations.nioSSL_tlsVersion()
            if Self.rank(version) < Self.rank(minimum) {
                refused = true
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        context.fireChannelRead(data)
    }

    static func rank(_ version: TLSVersion?) -> Int {
        switch version {
        case .tlsv1: return 10
        case .tlsv11: return 11
        case .tlsv12: return 12
        case .tlsv13: return 13
        case nil: return 0
        }
    }
}

/// Holds a connection's `RPCPendingBudget` in its pipeline, where the connection's stream channels
/// find it (`channel.parent`); goes with the connection. Last in the pipeline, it forwards whatever
/// reaches it (NIO takes only inbound or outbound handlers).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCConnectionBudget: ChannelInboundHandler {
    typealias InboundIn = Any
    let budget: RPCPendingBudget

    init(cap: Int) {
        budget = RPCPendingBudget(cap: cap)
    }
}

/// On the gRPC listening channel, before NIO's accept handler: each accepted connection is admitted
/// (`RPCIngestLimits.admit`) or closed there, unregistered, before gRPC builds its pipeline (TLS,
/// HTTP/2) for it, so that a flood of connections past a cap costs little.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCListenerAdmission: ChannelInboundHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    let limits: RPCIngestLimits

    init(limits: RPCIngestLimits) {
        self.limits = limits
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        guard limits.admit(child) else {
            child.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
    }
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
