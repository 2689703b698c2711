import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

/// A request received by `MockHTTPServer` (HTTP/2 or HTTP/1.1).
public struct MockRequest: Sendable {
    public var method: String
    public var path: String
    /// Lowercase names, pseudo-headers excluded (HTTP/2 `:authority` is exposed as `host`).
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Which accepted connection carried the request (1, 2, ... in accept order).
    public var connectionID: Int
    /// The client certificate (DER) the connection's TLS handshake presented and the server's
    /// verification accepted (nil: none presented, or plaintext).
    public var clientCertificate: [UInt8]?

    public init(
        method: String, path: String, headers: [(String, String)], body: [UInt8], connectionID: Int, clientCertificate: [UInt8]? = nil
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.connectionID = connectionID
        self.clientCertificate = clientCertificate
    }

    /// Case-insensitive, first value.
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        for (n, v) in self.headers where n == lower || n.lowercased() == lower {
            return v
        }
        return nil
    }

    /// Body as UTF-8 text.
    public var bodyString: String { String(decoding: self.body, as: UTF8.self) }
}

public struct MockResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response; `object` is the JSON text.
    public static func json(_ status: Int, _ object: String, headers: [(String, String)] = []) -> MockResponse {
        MockResponse(status: status, headers: [("content-type", "application/json")] + headers, body: Array(object.utf8))
    }
}

/// HTTP/2 over TLS server on 127.0.0.1 (HTTP/1.1 via ALPN fallback, so AsyncHTTPClient and
/// `curl --http1.1` work too). Without TLS it speaks h2c with prior knowledge and HTTP/1.1 on the
/// same port (detected from the connection preface).
///
/// HTTP/2 is handled at frame level (no per-stream child channel). A `syncHandler` runs directly on
/// the connection's event loop (fast, for load tests); the async `handler` runs in a Task per request
/// (for scripted delays / awaiting).
public final class MockHTTPServer: Sendable {
    public typealias Handler = @Sendable (MockRequest) async -> MockResponse
    public typealias SyncHandler = @Sendable (MockRequest) -> MockResponse

    public struct Options: Sendable {
        public var host = "127.0.0.1"
        public var port = 0
        /// nil = plaintext (h2c prior knowledge + HTTP/1.1). TLS is the normal case.
        public var tls: TLSConfiguration? = nil
        /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients.
        public var maxConcurrentStreams: Int = 1000
        /// Delay added before every response is written.
        public var responseDelay: TimeAmount? = nil
        /// While held, answers wait until the test releases them (a provider that is slow for exactly
        /// as long as the test needs, whatever the machine's speed).
        public var responseHold: MockResponseHold? = nil
        public init() {}
    }

    enum AnyHandler: Sendable {
        case sync(SyncHandler)
        case async(Handler)
    }

    struct Connection {
        let channel: any Channel
        var h2: MockH2ServerHandler?
    }

    struct State {
        var serverChannel: (any Channel)?
        var port = 0
        var connectionsAccepted = 0
        var connections: [Int: Connection] = [:]
        var maxConcurrentStreams: Int
        var requestsHandled = 0
    }

    public let options: Options
    let handler: AnyHandler
    let eventLoopGroup: any EventLoopGroup
    let state: NIOLockedValueBox<State>
    private let sslContext: NIOSSLContext?

    public convenience init(options: Options, eventLoopGroup: any EventLoopGroup, handler: @escaping Handler) {
        self.init(options: options, eventLoopGroup: eventLoopGroup, anyHandler: .async(handler))
    }

    /// `syncHandler` is called on the connection's event loop: it must not block.
    public convenience init(
        options: Options,
        eventLoopGroup: any EventLoopGroup,
        syncHandler: @escaping SyncHandler
    ) {
        self.init(options: options, eventLoopGroup: eventLoopGroup, anyHandler: .sync(syncHandler))
    }

    init(options: Options, eventLoopGroup: any EventLoopGroup, anyHandler: AnyHandler) {
        self.options = options
        self.handler = anyHandler
        self.eventLoopGroup = eventLoopGroup
        self.state = NIOLockedValueBox(State(maxConcurrentStreams: options.maxConcurrentStreams))
        if let tls = options.tls {
            // A bad configuration surfaces in start().
            self.sslContext = try? NIOSSLContext(configuration: tls)
        } else {
            self.sslContext = nil
        }
    }

    public func start() async throws {
        if self.options.tls != nil && self.sslContext == nil {
            // Re-run to get the error.
            _ = try NIOSSLContext(configuration: self.options.tls!)
        }
        let bootstrap = ServerBootstrap(group: self.eventLoopGroup)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                self.initializeConnection(channel)
            }
        let channel = try await bootstrap.bind(host: self.options.host, port: self.options.port).get()
        let port = channel.localAddress?.port ?? 0
        self.state.withLockedValue {
            $0.serverChannel = channel
            $0.port = port
        }
    }

    /// Actual bound port (after `start`).
    public var port: Int { self.state.withLockedValue { $0.port } }

    /// "https://127.0.0.1:PORT" ("http://..." without TLS).
    public var baseURL: String {
        let host = self.options.host.contains(":") ? "[\(self.options.host)]" : self.options.host
        return "\(self.options.tls == nil ? "http" : "https")://\(host):\(self.port)"
    }

    /// TCP connections accepted so far.
    public var connectionsAccepted: Int { self.state.withLockedValue { $0.connectionsAccepted } }
    /// Connections currently open.
    public var openConnections: Int { self.state.withLockedValue { $0.connections.count } }
    /// Requests answered so far (both protocols).
    public var requestsHandled: Int { self.state.withLockedValue { $0.requestsHandled } }

    /// Sends a SETTINGS update (MAX_CONCURRENT_STREAMS) on all open HTTP/2 connections; new connections get it in their preface.
    public func setMaxConcurrentStreams(_ n: Int) {
        let handlers = self.state.withLockedValue { s -> [MockH2ServerHandler] in
            s.maxConcurrentStreams = n
            return s.connections.values.compactMap { $0.h2 }
        }
        for h in handlers {
            h.eventLoop.execute { h.sendMaxConcurrentStreams(n) }
        }
    }

    /// Sends GOAWAY (NO_ERROR, last-stream-id = last stream seen) on every HTTP/2 connection; each
    /// connection closes once its open streams are answered. HTTP/1.1 connections are closed.
    public func sendGoAwayToAll() {
        self.sendGoAwayToAll(refusingUnanswered: false)
    }

    /// With `refusingUnanswered`, last-stream-id is set below the oldest stream not yet answered:
    /// those streams are dropped unanswered (as a server that did not process them), so a client
    /// must retry them on a new connection.
    public func sendGoAwayToAll(refusingUnanswered: Bool) {
        let connections = self.state.withLockedValue { Array($0.connections.values) }
        for c in connections {
            if let h = c.h2 {
                h.eventLoop.execute { h.goAway(refusingUnanswered: refusingUnanswered) }
            } else {
                c.channel.close(promise: nil)
            }
        }
    }

    /// Closes the listener and every connection.
    public func stop() async throws {
        let (server, connections) = self.state.withLockedValue { s -> ((any Channel)?, [any Channel]) in
            let server = s.serverChannel
            s.serverChannel = nil
            return (server, s.connections.values.map { $0.channel })
        }
        if let server {
            try? await server.close()
        }
        for c in connections {
            c.close(promise: nil)
        }
        for c in connections {
            try? await c.closeFuture.get()
        }
    }

    // MARK: - Pipeline

    private func initializeConnection(_ channel: any Channel) -> EventLoopFuture<Void> {
        let id = self.state.withLockedValue { s -> Int in
            s.connectionsAccepted += 1
            let id = s.connectionsAccepted
            s.connections[id] = Connection(channel: channel, h2: nil)
            return id
        }
        channel.closeFuture.whenComplete { _ in
            _ = self.state.withLockedValue { $0.connections.removeValue(forKey: id) }
        }
        return channel.eventLoop.makeCompletedFuture {
            let sync = channel.pipeline.syncOperations
            if let sslContext = self.sslContext {
                try sync.addHandler(NIOSSLServerHandler(context: sslContext))
            } else {
                try sync.addHandler(PriorKnowledgeDetector(server: self, connectionID: id))
            }
        }.flatMap {
            if self.sslContext != nil {
                return channel.configureHTTP2SecureUpgrade(
                    h2ChannelConfigurator: { channel in
                        channel.eventLoop.makeCompletedFuture { try self.configureHTTP2(channel, connectionID: id) }
                    },
                    http1ChannelConfigurator: { channel in
                        channel.eventLoop.makeCompletedFuture { try self.configureHTTP1(channel, connectionID: id) }
                    }
                )
            }
            return channel.eventLoop.makeSucceededVoidFuture()
        }
    }

    func configureHTTP2(_ channel: any Channel, connectionID: Int) throws {
        let maxStreams = self.state.withLockedValue { $0.maxConcurrentStreams }
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(
            NIOHTTP2Handler(
                mode: .server,
                initialSettings: [
                    HTTP2Setting(parameter: .maxConcurrentStreams, value: maxStreams),
                    HTTP2Setting(parameter: .maxHeaderListSize, value: 1 << 16),
                ]
            )
        )
        let handler = MockH2ServerHandler(
            server: self, connectionID: connectionID, eventLoop: channel.eventLoop, clientCertificate: Self.clientCertificate(channel))
        try sync.addHandler(handler)
        self.state.withLockedValue { $0.connections[connectionID]?.h2 = handler }
    }

    func configureHTTP1(_ channel: any Channel, connectionID: Int) throws {
        let sync = channel.pipeline.syncOperations
        try sync.configureHTTPServerPipeline(withErrorHandling: true)
        try sync.addHandler(MockHTTP1ServerHandler(server: self, connectionID: connectionID, clientCertificate: Self.clientCertificate(channel)))
    }

    /// The DER of the certificate the client presented in the TLS handshake (nil without one / without TLS).
    static func clientCertificate(_ channel: any Channel) -> [UInt8]? {
        guard let tls = try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self) else { return nil }
        return try? tls.peerCertificate?.toDERBytes()
    }

    /// Runs the handler; `respond` is called on `eventLoop`.
    func handle(
        _ request: MockRequest,
        on eventLoop: any EventLoop,
        respond: @escaping @Sendable (MockResponse) -> Void
    ) {
        let delay = self.options.responseDelay
        let hold = self.options.responseHold
        let send: @Sendable (MockResponse) -> Void = { response in
            let write: @Sendable () -> Void = { eventLoop.execute { respond(response) } }
            if let hold { hold.after(write) } else { write() }
        }
        switch self.handler {
        case .sync(let h):
            let response = h(request)
            self.state.withLockedValue { $0.requestsHandled += 1 }
            if let delay {
                eventLoop.scheduleTask(in: delay) { send(response) }
            } else if hold != nil {
                send(response)
            } else {
                respond(response)
            }
        case .async(let h):
            Task {
                let response = await h(request)
                self.state.withLockedValue { $0.requestsHandled += 1 }
                if let delay {
                    eventLoop.scheduleTask(in: delay) { send(response) }
                } else {
                    send(response)
                }
            }
        }
    }
}

// MARK: - HTTP/2 (frame level)

final class MockH2ServerHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    struct Stream {
        var method = ""
        var path = ""
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var receiving = true
    }

    static let connectionWindowTarget = 4 << 20
    static let streamWindowTarget = 65_535

    let server: MockHTTPServer
    let connectionID: Int
    let eventLoop: any EventLoop
    let clientCertificate: [UInt8]?
    private var context: ChannelHandlerContext?
    private var streams: [Int32: Stream] = [:]
    private var lastStreamID: Int32 = 0
    private var goingAway = false
    private var inRead = false
    private var flushPending = false
    private var flushScheduled = false

    init(server: MockHTTPServer, connectionID: Int, eventLoop: any EventLoop, clientCertificate: [UInt8]? = nil) {
        self.server = server
        self.connectionID = connectionID
        self.eventLoop = eventLoop
        self.clientCertificate = clientCertificate
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        self.inRead = true
        let sid = Int32(frame.streamID)
        switch frame.payload {
        case .headers(let h):
            if var stream = self.streams[sid] {
                // Trailers.
                if h.endStream {
                    stream.receiving = false
                    self.streams[sid] = stream
                    self.dispatch(sid, stream)
                }
                return
            }
            guard sid > 0 else { return }
            if self.goingAway && sid > self.lastStreamID {
                // Opened after our GOAWAY: refuse (not processed; the client may retry elsewhere).
                context.write(self.wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .rstStream(.refusedStream))), promise: nil)
                self.flushSoon()
                return
            }
            self.lastStreamID = max(self.lastStreamID, sid)
            var stream = Stream()
            stream.headers.reserveCapacity(h.headers.count)
            for (name, value, _) in h.headers {
                switch name {
                case ":method": stream.method = value
                case ":path": stream.path = value
                case ":authority": stream.headers.append(("host", value))
                case ":scheme": break
                default: stream.headers.append((name, value))
                }
            }
            stream.receiving = !h.endStream
            self.streams[sid] = stream
            if h.endStream { self.dispatch(sid, stream) }
        case .data(let d):
            guard self.streams[sid] != nil else { return }
            if case .byteBuffer(let buffer) = d.data {
                self.streams[sid]!.body.append(contentsOf: buffer.readableBytesView)
            }
            if d.endStream {
                self.streams[sid]!.receiving = false
                self.dispatch(sid, self.streams[sid]!)
            }
        case .rstStream:
            self.streams.removeValue(forKey: sid)
            self.closeIfDone()
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.inRead = false
        if self.flushPending {
            self.flushPending = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let e as StreamClosedEvent:
            if self.streams.removeValue(forKey: Int32(e.streamID)) != nil {
                self.closeIfDone()
            }
        case let e as NIOHTTP2WindowUpdatedEvent:
            guard let size = e.inboundWindowSize else { break }
            let target: Int
            if e.streamID == .rootStream {
                target = Self.connectionWindowTarget
            } else {
                guard self.streams[Int32(e.streamID)]?.receiving == true else { break }
                target = Self.streamWindowTarget
            }
            if size <= target / 2 && target - size > 0 {
                context.write(
                    self.wrapOutboundOut(HTTP2Frame(streamID: e.streamID, payload: .windowUpdate(windowSizeIncrement: target - size))),
                    promise: nil
                )
                self.flushSoon()
            }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.StreamError { return }
        context.close(promise: nil)
    }

    private func dispatch(_ sid: Int32, _ stream: Stream) {
        let request = MockRequest(
            method: stream.method,
            path: stream.path,
            headers: stream.headers,
            body: stream.body,
            connectionID: self.connectionID,
            clientCertificate: self.clientCertificate
        )
        self.streams[sid]!.body = []
        self.server.handle(request, on: self.eventLoop) { response in
            self.respond(sid, response)
        }
    }

    private func respond(_ sid: Int32, _ response: MockResponse) {
        guard self.streams.removeValue(forKey: sid) != nil, let context = self.context else { return }
        var headers = HPACKHeaders()
        headers.reserveCapacity(response.headers.count + 2)
        headers.add(name: ":status", value: String(response.status))
        var hasLength = false
        for (name, value) in response.headers {
            let lower = name.lowercased()
            if lower == "content-length" { hasLength = true }
            if lower == "connection" || lower == "transfer-encoding" || lower == "keep-alive" { continue }
            headers.add(name: lower, value: value)
        }
        if !hasLength && !response.body.isEmpty {
            headers.add(name: "content-length", value: String(response.body.count))
        }
        let streamID = HTTP2StreamID(sid)
        context.write(
            self.wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: response.body.isEmpty)))
            ),
            promise: nil
        )
        if !response.body.isEmpty {
            let buffer = context.channel.allocator.buffer(bytes: response.body)
            context.write(
                self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true)))),
                promise: nil
            )
        }
        self.flushSoon()
        self.closeIfDone()
    }

    private func flushSoon() {
        if self.inRead {
            self.flushPending = true
        } else if !self.flushScheduled {
            self.flushScheduled = true
            self.eventLoop.execute {
                self.flushScheduled = false
                self.context?.flush()
            }
        }
    }

    private func closeIfDone() {
        guard self.goingAway, self.streams.isEmpty, let context = self.context else { return }
        // Let the flush of the last response / GOAWAY go out first.
        let channel = context.channel
        self.eventLoop.execute {
            self.context?.flush()
            channel.close(promise: nil)
        }
    }

    func sendMaxConcurrentStreams(_ n: Int) {
        guard let context = self.context else { return }
        context.writeAndFlush(
            self.wrapOutboundOut(
                HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: n)])))
            ),
            promise: nil
        )
    }

    func goAway(refusingUnanswered: Bool) {
        guard !self.goingAway, let context = self.context else { return }
        self.goingAway = true
        if refusingUnanswered, let oldest = self.streams.keys.min() {
            self.lastStreamID = oldest - 2
            for sid in self.streams.keys where sid > self.lastStreamID {
                self.streams.removeValue(forKey: sid)
            }
        }
        context.writeAndFlush(
            self.wrapOutboundOut(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .goAway(lastStreamID: HTTP2StreamID(max(self.lastStreamID, 0)), errorCode: .noError, opaqueData: nil)
                )
            ),
            promise: nil
        )
        self.closeIfDone()
    }
}

// MARK: - HTTP/1.1

final class MockHTTP1ServerHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: MockHTTPServer
    let connectionID: Int
    let clientCertificate: [UInt8]?
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var context: ChannelHandlerContext?

    init(server: MockHTTPServer, connectionID: Int, clientCertificate: [UInt8]? = nil) {
        self.server = server
        self.connectionID = connectionID
        self.clientCertificate = clientCertificate
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            self.body = []
        case .body(let buffer):
            self.body.append(contentsOf: buffer.readableBytesView)
        case .end:
            guard let head = self.head else { return }
            self.head = nil
            let request = MockRequest(
                method: head.method.rawValue,
                path: head.uri,
                headers: head.headers.map { ($0.name.lowercased(), $0.value) },
                body: self.body,
                connectionID: self.connectionID,
                clientCertificate: self.clientCertificate
            )
            self.body = []
            let keepAlive = head.isKeepAlive
            let version = head.version
            self.server.handle(request, on: context.eventLoop) { response in
                self.respond(response, version: version, keepAlive: keepAlive)
            }
        }
    }

    private func respond(_ response: MockResponse, version: HTTPVersion, keepAlive: Bool) {
        guard let context = self.context else { return }
        var headers = HTTPHeaders()
        for (n, v) in response.headers where n.lowercased() != "content-length" {
            headers.add(name: n, value: v)
        }
        headers.add(name: "content-length", value: String(response.body.count))
        if !keepAlive { headers.add(name: "connection", value: "close") }
        let head = HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
        context.write(self.wrapOutboundOut(.head(head)), promise: nil)
        if !response.body.isEmpty {
            context.write(self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        }
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { channel.close(promise: nil) }
        }
    }
}

// MARK: - h2c prior knowledge / HTTP/1.1 detection (plaintext)

final class PriorKnowledgeDetector: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    let server: MockHTTPServer
    let connectionID: Int
    private var buffered: ByteBuffer?

    init(server: MockHTTPServer, connectionID: Int) {
        self.server = server
        self.connectionID = connectionID
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = self.unwrapInboundIn(data)
        if self.buffered == nil {
            self.buffered = incoming
        } else {
            self.buffered!.writeBuffer(&incoming)
        }
        let buffer = self.buffered!
        let n = min(buffer.readableBytes, Self.preface.count)
        let prefix = buffer.getBytes(at: buffer.readerIndex, length: n) ?? []
        let isH2: Bool
        if prefix[...] != Self.preface[0..<n] {
            isH2 = false
        } else if n == Self.preface.count {
            isH2 = true
        } else {
            return  // need more bytes
        }
        do {
            if isH2 {
                try self.server.configureHTTP2(context.channel, connectionID: self.connectionID)
            } else {
                try self.server.configureHTTP1(context.channel, connectionID: self.connectionID)
            }
        } catch {
            context.close(promise: nil)
            return
        }
        self.buffered = nil
        context.fireChannelRead(self.wrapInboundOut(buffer))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    typealias InboundOut = ByteBuffer
}

/// Holds a mock's answers until released: the requests are handled (and recorded) at once, their
/// answers written when `release()` is called.
public final class MockResponseHold: Sendable {
    private let state = NIOLockedValueBox<(held: Bool, waiting: [@Sendable () -> Void])>((true, []))

    public init() {}

    /// Runs `write` now when released, else at the release.
    func after(_ write: @escaping @Sendable () -> Void) {
        let now = state.withLockedValue { s -> Bool in
            if !s.held { return true }
            s.waiting.append(write)
            return false
        }
        if now { write() }
    }

    /// Answers held so far.
    public var waiting: Int { state.withLockedValue { $0.waiting.count } }

    /// Writes the held answers and every later one at once.
    public func release() {
        let writes = state.withLockedValue { s -> [@Sendable () -> Void] in
            s.held = false
            defer { s.waiting = [] }
            return s.waiting
        }
        for w in writes { w() }
    }
}

extension MockHTTPServer {
    /// A provider mock's server (FCM, HMS): TLS, port, answer delay or hold and streams limit as given, each
    /// request answered by `handle` on the mock, which it holds weakly (503 once the mock is gone).
    public static func serving<Mock: AnyObject & Sendable>(
        _ mock: Mock, tls: TLSConfiguration?, port: Int, responseDelay: TimeAmount?, maxConcurrentStreams: Int? = nil,
        responseHold: MockResponseHold? = nil, eventLoopGroup: any EventLoopGroup,
        handle: @escaping @Sendable (Mock, MockRequest) -> MockResponse
    ) -> MockHTTPServer {
        var options = MockHTTPServer.Options()
        options.tls = tls
        options.port = port
        options.responseDelay = responseDelay
        options.responseHold = responseHold
        if let maxConcurrentStreams { options.maxConcurrentStreams = maxConcurrentStreams }
        return MockHTTPServer(
            options: options, eventLoopGroup: eventLoopGroup,
            syncHandler: { [weak mock] request in
                guard let mock else { return MockResponse(status: 503, headers: [], body: []) }
                return handle(mock, request)
            })
    }
}
