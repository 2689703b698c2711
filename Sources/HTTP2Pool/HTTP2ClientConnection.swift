import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS

/// A request waiting for (or occupying) an HTTP/2 stream.
struct PendingRequest {
    var request: HTTP2Request
    var promise: EventLoopPromise<HTTP2Response>
    var deadline: NIODeadline
    /// How many times this request was transparently re-queued (GOAWAY / REFUSED_STREAM / lost start race).
    var requeues: Int
}

/// Frame-level HTTP/2 client connection handler, placed directly after `NIOHTTP2Handler`
/// (no stream multiplexer, no child channels): each request is one HEADERS (+ DATA) write,
/// each response is collected from HEADERS + DATA frames into one `HTTP2Response`.
///
/// All mutable state is confined to the channel's event loop (hence `@unchecked Sendable`).
final class HTTP2ClientConnectionHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// Stream state of one in-flight request.
    struct Stream {
        var pending: PendingRequest
        var status: Int = 0
        var headers: [(String, String)] = []
        var body: ByteBuffer? = nil
        var gotHeaders = false
        var bodyTruncated = false
    }

    enum Lifecycle {
        case starting
        case ready
        /// GOAWAY received (or stream IDs exhausted / idle): no new streams.
        case draining
        case closed
    }

    static let connectionWindowTarget = 4 << 20
    static let streamWindowTarget = 65_535
    /// Past this stream ID the connection drains and a new one is made (IDs are 31-bit).
    static let maxStreamIDBeforeDrain: Int32 = Int32.max - 4_096

    let id: Int
    let eventLoop: any EventLoop
    private let core: HTTP2PoolCore
    private let authority: String
    private let scheme: String
    private let requireALPNH2: Bool
    private let logger: Logger

    private var context: ChannelHandlerContext?
    private(set) var lifecycle: Lifecycle = .starting
    private var streams: [Int32: Stream] = [:]
    private var nextStreamID: Int32 = 1
    private var goawayLastStreamID: Int32 = .max
    private var remoteMaxStreams: Int = 100
    private var sawFirstSettings = false
    private var inRead = false
    private var flushPending = false
    private var flushScheduled = false
    private var sweepTask: RepeatedTask?
    private var lastError: (any Error)?
    private var shutdownRequested = false

    private var connectTimeoutTask: Scheduled<Void>?

    init(
        id: Int,
        eventLoop: any EventLoop,
        core: HTTP2PoolCore,
        target: HTTP2Target,
        logger: Logger
    ) {
        self.id = id
        self.eventLoop = eventLoop
        self.core = core
        self.authority = target.authority
        self.scheme = target.scheme
        self.requireALPNH2 = target.isTLS
        self.logger = logger
    }

    // MARK: - Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // Covers TCP connect + TLS handshake + the server's SETTINGS.
        self.connectTimeoutTask = context.eventLoop.scheduleTask(in: self.core.configuration.connectTimeout) {
            guard self.lifecycle == .starting else { return }
            if self.lastError == nil {
                self.lastError = HTTP2PoolError.connectFailed("timed out after \(self.core.configuration.connectTimeout)")
            }
            if let context = self.context {
                context.close(promise: nil)
            } else {
                self.connectionGone(error: .connectionClosed)
            }
        }
    }

    /// The bootstrap's connect failed (event loop).
    func connectFailed(_ error: any Error) {
        if self.lastError == nil { self.lastError = error }
        self.connectionGone(error: .connectionClosed)
    }

    /// The proxy tunnel of this connection failed (event loop): this is the error its requests get
    /// (it names the proxy), whatever the channel reports next.
    func proxyFailed(_ error: HTTP2PoolError) {
        self.lastError = error
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.connectionGone(error: HTTP2PoolError.connectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            // A stream-level error on one of our writes (or a protocol violation on a stream).
            let sid = Int32(streamError.streamID)
            if let stream = self.streams.removeValue(forKey: sid) {
                self.streamDone()
                stream.pending.promise.fail(HTTP2PoolError.streamReset("local: \(streamError.baseError)"))
            }
            return
        }
        if self.lastError == nil { self.lastError = error }
        self.logger.debug("HTTP/2 connection error", metadata: ["connection": "\(self.id)", "error": "\(error)"])
        context.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let event as NIOHTTP2WindowUpdatedEvent:
            self.windowUpdated(event)
        case let event as StreamClosedEvent:
            let sid = Int32(event.streamID)
            if let stream = self.streams.removeValue(forKey: sid) {
                // Closed without a complete response (e.g. reset while we were writing).
                let code = event.reason ?? .cancel
                self.streamDone()
                self.streamFailed(stream, code: code)
            }
        case let tls as TLSUserEvent where self.requireALPNH2 && self.lifecycle == .starting:
            // Require ALPN "h2".
            if case .handshakeCompleted(let negotiated) = tls, negotiated != "h2" {
                self.lastError = HTTP2PoolError.alpnNotNegotiated(
                    "server did not negotiate HTTP/2 via ALPN: \(negotiated.map { "\"\($0)\"" } ?? "no protocol")")
                context.close(promise: nil)
            }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        self.inRead = true
        let sid = Int32(frame.streamID)
        switch frame.payload {
        case .headers(let h):
            self.receivedHeaders(streamID: sid, h)
        case .data(let d):
            self.receivedData(streamID: sid, d)
        case .rstStream(let code):
            if let stream = self.streams.removeValue(forKey: sid) {
                self.streamDone()
                self.streamFailed(stream, code: code)
            }
        case .settings(.settings(let settings)):
            self.receivedSettings(settings)
        case .goAway(let lastStreamID, let code, _):
            self.receivedGoAway(lastStreamID: Int32(lastStreamID), code: code)
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

    // MARK: - Frames

    private func receivedSettings(_ settings: HTTP2Settings) {
        var newMax: Int? = nil
        for s in settings where s.parameter == .maxConcurrentStreams {
            newMax = s.value
        }
        if !self.sawFirstSettings {
            self.sawFirstSettings = true
            // RFC 9113: absent means unlimited; cap like Go's transport does.
            self.remoteMaxStreams = newMax ?? 1000
            guard self.lifecycle == .starting else { return }
            self.lifecycle = .ready
            self.connectTimeoutTask?.cancel()
            self.connectTimeoutTask = nil
            self.startSweepTimer()
            let toStart = self.core.connectionReady(self, maxStreams: self.remoteMaxStreams)
            self.start(toStart)
        } else if let newMax, newMax != self.remoteMaxStreams {
            self.remoteMaxStreams = newMax
            let toStart = self.core.maxStreamsChanged(connectionID: self.id, maxStreams: newMax)
            self.start(toStart)
        }
    }

    private func receivedGoAway(lastStreamID: Int32, code: HTTP2ErrorCode) {
        self.goawayLastStreamID = min(self.goawayLastStreamID, lastStreamID)
        self.logger.debug(
            "HTTP/2 GOAWAY received",
            metadata: ["connection": "\(self.id)", "lastStreamID": "\(lastStreamID)", "code": "\(code.name)"]
        )
        if self.lifecycle == .starting {
            if self.lastError == nil { self.lastError = HTTP2PoolError.goaway(code.name) }
            self.context?.close(promise: nil)
            return
        }
        if self.lifecycle == .ready { self.lifecycle = .draining }
        // Streams above last-stream-id were not processed: re-queue them on another connection.
        let refusedIDs = self.streams.keys.filter { $0 > lastStreamID }.sorted()
        var refused: [Stream] = []
        refused.reserveCapacity(refusedIDs.count)
        for sid in refusedIDs {
            if let s = self.streams.removeValue(forKey: sid) { refused.append(s) }
        }
        self.core.connectionDraining(connectionID: self.id, released: refused.count)
        for s in refused.reversed() {
            // reversed + requeue-at-front keeps the original order.
            self.core.requeue(s.pending, error: .goaway(code.name))
        }
        self.closeIfDrained()
    }

    private func receivedHeaders(streamID: Int32, _ h: HTTP2Frame.FramePayload.Headers) {
        // Taken out of the table (moved, where reading it copied the request it holds) and put back
        // only if the stream goes on: most answers end with their HEADERS.
        guard var stream = self.streams.removeValue(forKey: streamID) else { return }
        let maxFields = self.core.configuration.maxResponseHeaderFields
        if !stream.gotHeaders {
            switch HTTP2HeaderCheck.responseHead(h.headers, maxFields: maxFields) {
            case .failure(let malformed):
                self.resetMalformed(streamID: streamID, stream, malformed)
                return
            case .success(let head):
                if head.status < 200 {
                    // Informational (1xx): wait for the final response; one that ends the stream is malformed.
                    if h.endStream {
                        self.resetMalformed(streamID: streamID, stream, .status("\(head.status)"))
                    } else {
                        self.streams[streamID] = stream
                    }
                    return
                }
                stream.status = head.status
                stream.headers = head.fields
                stream.gotHeaders = true
            }
        } else {
            // Trailers.
            if let malformed = HTTP2HeaderCheck.trailers(h.headers, into: &stream.headers, maxFields: maxFields) {
                self.resetMalformed(streamID: streamID, stream, malformed)
                return
            }
        }
        if h.endStream {
            self.complete(stream)
        } else {
            self.streams[streamID] = stream
        }
    }

    /// A response whose header block breaks RFC 9113 §8.2-8.3 (`stream`, taken out of the table):
    /// the stream is reset (PROTOCOL_ERROR, as swift-nio-http2's own validation would) and its
    /// request fails; the connection stays.
    private func resetMalformed(streamID: Int32, _ stream: Stream, _ malformed: HTTP2HeaderCheck.Malformed) {
        if let context = self.context {
            context.write(self.wrapOutboundOut(HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .rstStream(.protocolError))), promise: nil)
            self.flushSoon()
        }
        self.streamDone()
        stream.pending.promise.fail(HTTP2PoolError.malformedResponse(malformed.description))
    }

    private func receivedData(streamID: Int32, _ d: HTTP2Frame.FramePayload.Data) {
        guard self.streams[streamID] != nil else { return }
        if case .byteBuffer(var buffer) = d.data, buffer.readableBytes > 0 {
            let cap = self.core.configuration.maxResponseBodyBytes
            let have = self.streams[streamID]!.body?.readableBytes ?? 0
            if have + buffer.readableBytes > cap {
                // Over the cap: keep the first `cap` bytes, stop the stream (RST_STREAM CANCEL, so the
                // server stops sending) and answer now; later DATA of this stream is ignored unbuffered.
                var slice = buffer.readSlice(length: max(0, cap - have)) ?? ByteBuffer()
                if self.streams[streamID]!.body == nil {
                    self.streams[streamID]!.body = slice
                } else {
                    self.streams[streamID]!.body!.writeBuffer(&slice)
                }
                var stream = self.streams.removeValue(forKey: streamID)!
                stream.bodyTruncated = true
                if !d.endStream, let context = self.context {
                    context.write(
                        self.wrapOutboundOut(HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .rstStream(.cancel))),
                        promise: nil
                    )
                    self.flushSoon()
                }
                self.complete(stream)
                return
            }
            // Modify in place (no copy of the stream struct).
            if self.streams[streamID]!.body == nil {
                self.streams[streamID]!.body = buffer
            } else {
                self.streams[streamID]!.body!.writeBuffer(&buffer)
            }
        }
        if d.endStream, let stream = self.streams.removeValue(forKey: streamID) {
            self.complete(stream)
        }
    }

    private func windowUpdated(_ event: NIOHTTP2WindowUpdatedEvent) {
        guard let size = event.inboundWindowSize, self.lifecycle != .closed else { return }
        let target: Int
        if event.streamID == .rootStream {
            target = Self.connectionWindowTarget
        } else {
            // Only streams still expecting data.
            guard self.streams[Int32(event.streamID)] != nil else { return }
            target = Self.streamWindowTarget
        }
        if size <= target / 2 {
            let increment = target - size
            guard increment > 0, let context = self.context else { return }
            context.write(
                self.wrapOutboundOut(HTTP2Frame(streamID: event.streamID, payload: .windowUpdate(windowSizeIncrement: increment))),
                promise: nil
            )
            self.flushSoon()
        }
    }

    // MARK: - Completion

    private func complete(_ stream: Stream) {
        let response = HTTP2Response(
            status: stream.status,
            headers: stream.headers,
            body: stream.body ?? ByteBuffer(),
            bodyTruncated: stream.bodyTruncated
        )
        // Free the slot first, so that a caller reacting to this response sees the stream free.
        self.streamDone()
        stream.pending.promise.succeed(response)
    }

    private func streamFailed(_ stream: Stream, code: HTTP2ErrorCode) {
        if code == .refusedStream {
            // Not processed by the server (RFC 9113 8.7): transparently re-queue.
            self.core.requeue(stream.pending, error: .streamReset(code.name))
        } else {
            stream.pending.promise.fail(HTTP2PoolError.streamReset(code.name))
        }
    }

    /// A stream slot was freed: give it back to the pool and start whatever it hands us.
    private func streamDone() {
        let toStart = self.core.streamReleased(connectionID: self.id)
        self.start(toStart)
        if self.streams.isEmpty { self.closeIfDrained() }
    }

    private func closeIfDrained() {
        if self.lifecycle == .draining && self.streams.isEmpty, let context = self.context {
            context.close(promise: nil)
        }
    }

    // MARK: - Starting requests

    func start(_ requests: [(HTTP2ClientConnectionHandler, PendingRequest)]) {
        for (handler, request) in requests {
            if handler === self {
                self.startRequest(request)
            } else {
                handler.startRequestOnLoop(request)
            }
        }
    }

    /// Start a request for which the pool already reserved a stream slot on this connection. Any thread.
    func startRequestOnLoop(_ request: PendingRequest) {
        if self.eventLoop.inEventLoop {
            self.startRequest(request)
        } else {
            self.eventLoop.execute { self.startRequest(request) }
        }
    }

    /// Event loop only. The slot was reserved by the pool.
    func startRequest(_ request: PendingRequest) {
        guard self.lifecycle == .ready, let context = self.context, self.nextStreamID < Self.maxStreamIDBeforeDrain else {
            // Lost a race with GOAWAY / close: nothing was sent, so re-queue it elsewhere.
            if self.lifecycle == .ready {
                self.lifecycle = .draining  // stream IDs exhausted
                self.core.connectionDraining(connectionID: self.id, released: 0)
                self.closeIfDrained()
            }
            let toStart = self.core.streamReleased(connectionID: self.id)
            self.core.requeue(request, error: .connectionClosed)
            self.start(toStart)
            return
        }
        let req = request.request
        var headers = HPACKHeaders()
        headers.reserveCapacity(req.headers.count + 5)
        headers.add(name: ":method", value: req.method)
        headers.add(name: ":scheme", value: self.scheme)
        headers.add(name: ":authority", value: self.authority)
        let unique = req.uniqueHeaders
        headers.add(name: ":path", value: req.path, indexing: unique.contains(":path") ? .nonIndexable : .indexable)
        var hasContentLength = false
        var invalid: String? = HTTP2HeaderCheck.isValidRequestLine(method: req.method, path: req.path) ? nil : "bad :method or :path"
        for (name, value) in req.headers where invalid == nil {
            let lower = Self.isLowercase(name) ? name : name.lowercased()
            // Dropped: fields HTTP/2 forbids (RFC 9113 §8.2.2), and `host`, which `:authority` replaces.
            if HTTP2HeaderCheck.isConnectionSpecific(lower) || lower == "host" { continue }
            guard HTTP2HeaderCheck.isValidName(lower), lower != "te" || value == "trailers" else {
                invalid = "bad header name \(HTTP2HeaderCheck.Malformed.printable(lower))"
                break
            }
            guard HTTP2HeaderCheck.isValidValue(value) else {
                invalid = "bad value of header \(HTTP2HeaderCheck.Malformed.printable(lower))"
                break
            }
            if lower == "content-length" { hasContentLength = true }
            headers.add(name: lower, value: value, indexing: unique.contains(lower) ? .nonIndexable : .indexable)
        }
        if let invalid {
            // Nothing was written: the slot goes back and the caller learns which field it was.
            let toStart = self.core.streamReleased(connectionID: self.id)
            request.promise.fail(HTTP2PoolError.invalidRequest(invalid))
            self.start(toStart)
            return
        }
        let sid = self.nextStreamID
        self.nextStreamID += 2
        let streamID = HTTP2StreamID(sid)
        let body = req.body.flatMap { $0.readableBytes > 0 ? $0 : nil }
        if let body, !hasContentLength {
            headers.add(name: "content-length", value: String(body.readableBytes))
        }
        self.streams[sid] = Stream(pending: request)
        context.write(
            self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: body == nil)))),
            promise: nil
        )
        if let body {
            context.write(
                self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))),
                promise: nil
            )
        }
        self.flushSoon()
    }

    private static func isLowercase(_ s: String) -> Bool {
        for b in s.utf8 where b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z") { return false }
        return true
    }

    private func flushSoon() {
        if self.inRead {
            self.flushPending = true
        } else if !self.flushScheduled {
            // Coalesce all writes issued in this event-loop tick into one flush.
            self.flushScheduled = true
            self.eventLoop.execute {
                self.flushScheduled = false
                self.context?.flush()
            }
        }
    }

    // MARK: - Timers

    private func startSweepTimer() {
        var tick = self.core.configuration.requestTimeout.nanoseconds / 8
        tick = max(min(tick, 1_000_000_000), 5_000_000)
        self.sweepTask = self.eventLoop.scheduleRepeatedTask(
            initialDelay: .nanoseconds(tick),
            delay: .nanoseconds(tick)
        ) { _ in
            self.sweep()
        }
    }

    private func sweep() {
        guard self.lifecycle == .ready || self.lifecycle == .draining else { return }
        let now = NIODeadline.now()
        if !self.streams.isEmpty {
            var expired: [Int32] = []
            for (sid, s) in self.streams where s.pending.deadline <= now {
                expired.append(sid)
            }
            for sid in expired {
                guard let s = self.streams.removeValue(forKey: sid) else { continue }
                self.context?.write(
                    self.wrapOutboundOut(HTTP2Frame(streamID: HTTP2StreamID(sid), payload: .rstStream(.cancel))),
                    promise: nil
                )
                self.flushSoon()
                self.streamDone()
                s.pending.promise.fail(HTTP2PoolError.timeout)
            }
        }
    }

    /// Event loop only: the pool retired this idle connection (no stream in flight, none to come):
    /// it drains, and closes once its streams (none, unless one raced in) are done.
    func retire() {
        guard self.lifecycle == .ready else { return }
        self.lifecycle = .draining
        self.closeIfDrained()
    }

    // MARK: - Teardown

    /// Event loop only: fail everything with `.shutdown` and close.
    func shutdown() {
        self.shutdownRequested = true
        if let context = self.context {
            context.close(promise: nil)
        } else {
            self.connectionGone(error: .shutdown)
        }
    }

    private func connectionGone(error: HTTP2PoolError) {
        guard self.lifecycle != .closed else { return }
        let wasStarted = self.lifecycle != .starting
        self.lifecycle = .closed
        self.sweepTask?.cancel()
        self.sweepTask = nil
        self.connectTimeoutTask?.cancel()
        self.connectTimeoutTask = nil
        let err: HTTP2PoolError = self.shutdownRequested ? .shutdown : error
        let failure: HTTP2PoolError
        if wasStarted || self.shutdownRequested {
            failure = err
        } else {
            failure = Self.mapConnectError(self.lastError) ?? .connectFailed("connection closed during TLS/HTTP/2 preface")
        }
        let streams = self.streams
        self.streams = [:]
        self.core.connectionClosed(connectionID: self.id, wasReady: wasStarted, error: failure)
        for (_, s) in streams {
            s.pending.promise.fail(err)
        }
    }

    static func mapConnectError(_ error: (any Error)?) -> HTTP2PoolError? {
        guard let error else { return nil }
        if let e = error as? HTTP2PoolError { return e }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            return .tls(String(describing: error))
        }
        if let ce = error as? ChannelError, case .connectTimeout = ce {
            return .connectFailed("connect timeout")
        }
        return .connectFailed(String(describing: error))
    }
}

extension HTTP2ErrorCode {
    /// RFC 9113 name, e.g. "REFUSED_STREAM".
    var name: String {
        switch self {
        case .noError: return "NO_ERROR"
        case .protocolError: return "PROTOCOL_ERROR"
        case .internalError: return "INTERNAL_ERROR"
        case .flowControlError: return "FLOW_CONTROL_ERROR"
        case .settingsTimeout: return "SETTINGS_TIMEOUT"
        case .streamClosed: return "STREAM_CLOSED"
        case .frameSizeError: return "FRAME_SIZE_ERROR"
        case .refusedStream: return "REFUSED_STREAM"
        case .cancel: return "CANCEL"
        case .compressionError: return "COMPRESSION_ERROR"
        case .connectError: return "CONNECT_ERROR"
        case .enhanceYourCalm: return "ENHANCE_YOUR_CALM"
        case .inadequateSecurity: return "INADEQUATE_SECURITY"
        case .http11Required: return "HTTP_1_1_REQUIRED"
        default: return "0x\(String(self.networkCode, radix: 16))"
        }
    }
}
