import GRPCCore
import NIOCore
import NIOHPACK
import NIOHTTP2
import Synchronization

/// What a gRPC method needs once ingest keys are configured (with none, every method is open, as
/// in gorush). Declared per method here, and checked on the stream's HEADERS for the method
/// grpc-swift will route the stream to, never on a spelling of its path.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
enum RPCAccess: Sendable, Equatable {
    /// No key: `proto.Health/Check` (load balancers probe it without credentials).
    case open
    /// An app key (`core.api_keys`, `apps[].api_keys`) or an admin key (`core.admin_keys`).
    case ingestKey

    /// The methods this gateway serves and what each needs, by fully qualified name
    /// ("proto.Gorush/Send"); any other method needs a key too, so an unknown method answers
    /// UNAUTHENTICATED before UNIMPLEMENTED (as unknown HTTP routes answer 401 before 404).
    static let methods: [String: RPCAccess] = [
        Proto_Health.Method.Check.descriptor.fullyQualifiedMethod: .open,
        Proto_Gorush.Method.Send.descriptor.fullyQualifiedMethod: .ingestKey,
    ]

    /// The fully qualified method of a request's `:path`, split as grpc-swift's server splits it to
    /// route the stream ("/" service "/" method, the method being everything after the second slash).
    static func method(path: String) -> String? {
        guard path.hasPrefix("/") else { return nil }
        let rest = path.dropFirst()
        guard let slash = rest.firstIndex(of: "/") else { return nil }
        return MethodDescriptor(
            service: ServiceDescriptor(fullyQualifiedService: String(rest[..<slash])), method: String(rest[rest.index(after: slash)...])
        ).fullyQualifiedMethod
    }

    /// What the stream of `path` needs, and the method's name for metrics ("unknown" for a method
    /// not served: a client-chosen path never becomes a label).
    static func of(path: String) -> (access: RPCAccess, label: String) {
        if let method = method(path: path), let access = methods[method] { return (access, method) }
        return (.ingestKey, "unknown")
    }
}

/// The request bytes the gRPC port holds for messages not yet complete: one budget per connection
/// (`grpc.max_pending_bytes_per_connection`) and one for the whole port (`grpc.max_pending_bytes`).
/// A stream whose next bytes would take either past its cap is refused (RESOURCE_EXHAUSTED); the
/// bytes of a message are given back when it is complete (grpc-swift hands it to the handler) or
/// its stream ends.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCPendingBudget: Sendable {
    let cap: Int
    private let held = Atomic<Int>(0)

    init(cap: Int) {
        self.cap = cap
    }

    /// Takes `bytes` when they fit under the cap.
    func reserve(_ bytes: Int) -> Bool {
        let now = held.add(bytes, ordering: .relaxed).newValue
        if now <= cap { return true }
        held.subtract(bytes, ordering: .relaxed)
        return false
    }

    func release(_ bytes: Int) {
        held.subtract(bytes, ordering: .relaxed)
    }

    var current: Int { held.load(ordering: .relaxed) }
}

/// Sits first in each accepted HTTP/2 stream's pipeline, in front of grpc-swift's stream handler,
/// and decides on the stream's HEADERS, before any of its message is read:
/// - a method that needs a key (`RPCAccess`) without a valid one in `authorization: Bearer` or
///   `x-api-key` is answered UNAUTHENTICATED (trailers-only) and the stream reset; nothing of it
///   reaches grpc-swift, whose handler would otherwise buffer the whole message before the RPC's
///   code (or an interceptor) runs;
/// - a message announcing more than `grpc.max_message_bytes` is refused (RESOURCE_EXHAUSTED) on its
///   5-byte prefix;
/// - the bytes of an unfinished message count against the connection's and the port's budgets.
///
/// grpc-swift has no hook between HEADERS and the message: its interceptors run on a task after the
/// stream handler has started deframing, and a rejected RPC still has its DATA read until the
/// status is written. Hence a handler of our own, added through `channelDebuggingCallbacks`.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCStreamAdmissionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload
    typealias OutboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    /// Why a stream's HEADERS are refused (nil: admitted), given what its method needs.
    typealias Authorize = @Sendable (RPCAccess, _ authorization: String?, _ apiKey: String?) -> String?

    private let authorize: Authorize
    private let maxMessageBytes: Int
    private let connection: RPCPendingBudget
    private let total: RPCPendingBudget

    private enum Phase {
        case awaitingHeaders
        case admitted
        /// Refused: every further frame is dropped.
        case refused
    }
    private var phase = Phase.awaitingHeaders
    private var label = "unknown"
    /// Response HEADERS sent (a refusal can no longer be trailers-only).
    private var responseStarted = false
    /// The response ended (END_STREAM sent): grpc-swift drops what the client still sends.
    private var responseEnded = false
    /// The gRPC prefix (compression flag, 4-byte length) of the message being read, while incomplete.
    private var prefix: [UInt8] = []
    /// Payload bytes the current message still lacks once its prefix is read.
    private var remaining: Int?
    /// Bytes of the current, unfinished message received (prefix included), reserved in both budgets.
    private var held = 0

    init(authorize: @escaping Authorize, maxMessageBytes: Int, connection: RPCPendingBudget, total: RPCPendingBudget) {
        self.authorize = authorize
        self.maxMessageBytes = maxMessageBytes
        self.connection = connection
        self.total = total
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch phase {
        case .refused:
            return
        case .awaitingHeaders:
            guard case .headers(let headers) = frame else { break }
            let (access, label) = RPCAccess.of(path: headers.headers.first(name: ":path") ?? "")
            self.label = label
            if let problem = authorize(access, headers.headers.first(name: "authorization"), headers.headers.first(name: "x-api-key")) {
                refuse(context: context, code: .unauthenticated, message: problem)
                return
            }
            phase = .admitted
        case .admitted:
            if case .data(let body) = frame, !responseEnded, case .byteBuffer(let buffer) = body.data {
                if let problem = account(buffer) {
                    refuse(context: context, code: .resourceExhausted, message: problem)
                    return
                }
            }
        }
        context.fireChannelRead(data)
    }

    /// Follows the gRPC framing of `buffer` (length-prefixed messages) and reserves the growth of
    /// the unfinished message's bytes; nil, or why the stream is refused.
    private func account(_ buffer: ByteBuffer) -> String? {
        let reserved = held
        var before = held
        var completed = 0
        var view = buffer.readableBytesView[...]
        while !view.isEmpty {
            if let left = remaining {
                let take = min(left, view.count)
                view = view.dropFirst(take)
                held += take
                remaining = left - take
            } else {
                let take = min(5 - prefix.count, view.count)
                prefix += view.prefix(take)
                view = view.dropFirst(take)
                held += take
                if prefix.count == 5 {
                    let length = Int(prefix[1]) << 24 | Int(prefix[2]) << 16 | Int(prefix[3]) << 8 | Int(prefix[4])
                    prefix = []
                    if length > maxMessageBytes {
                        held = reserved
                        return "a message of \(length) bytes is larger than grpc.max_message_bytes (\(maxMessageBytes))"
                    }
                    remaining = length
                }
            }
            if remaining == 0 {
                // A whole message: grpc-swift hands it on as it reads this frame; its bytes leave the budget.
                completed += held
                remaining = nil
                held = 0
            }
        }
        // What was reserved for the message(s) completed here is given back; the unfinished one's growth is taken.
        let returned = min(before, completed)
        before -= returned
        if returned > 0 { give(returned) }
        let growth = held - before
        if growth > 0 {
            guard connection.reserve(growth) else {
                held = before
                return "the connection holds grpc.max_pending_bytes_per_connection (\(connection.cap)) bytes of unfinished messages"
            }
            guard total.reserve(growth) else {
                connection.release(growth)
                held = before
                return "the gRPC port holds grpc.max_pending_bytes (\(total.cap)) bytes of unfinished messages"
            }
        }
        return nil
    }

    private func give(_ bytes: Int) {
        connection.release(bytes)
        total.release(bytes)
    }

    private func releaseHeld() {
        if held > 0 { give(held) }
        held = 0
    }

    /// Answers the stream with a trailers-only status (when no response started), then resets it.
    private func refuse(context: ChannelHandlerContext, code: RPCError.Code, message: String) {
        phase = .refused
        releaseHeld()
        RequestMetricsInterceptor.count(label, RequestMetricsInterceptor.name(code))
        guard !responseStarted else {
            context.close(promise: nil)
            return
        }
        let trailers: HPACKHeaders = [
            ":status": "200", "content-type": "application/grpc", "grpc-status": String(code.rawValue),
            "grpc-message": Self.percentEncoded(message),
        ]
        responseStarted = true
        responseEnded = true
        // Closing a stream whose request is not finished resets it (RST_STREAM), after the status.
        context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: trailers, endStream: true))))
            .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    /// `grpc-message` is percent-encoded outside printable ASCII (and "%"), as the gRPC spec asks.
    static func percentEncoded(_ s: String) -> String {
        var out = ""
        for byte in s.utf8 {
            if byte >= 0x20, byte <= 0x7e, byte != UInt8(ascii: "%") {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .headers(let headers) = unwrapOutboundIn(data) {
            responseStarted = true
            if headers.endStream {
                // grpc-swift ignores the rest of the request from here on: nothing more is held.
                responseEnded = true
                releaseHeld()
                remaining = nil
                prefix = []
            }
        }
        context.write(data, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        releaseHeld()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        releaseHeld()
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
