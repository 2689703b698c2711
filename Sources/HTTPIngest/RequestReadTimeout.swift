import GatewayCore
import HTTPTypes
import HummingbirdCore
import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request, once started, is not fully received within `timeout`, and
/// answers `Expect: 100-continue`.
///
/// Hummingbird's idle timeout closes connections that send nothing; it is reset by every body part,
/// so a client trickling a body a byte at a time would hold its connection (and the request's
/// buffers) for ever. This handler bounds the whole request instead: head to end.
final class RequestReadTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let timeout: TimeAmount
    private let maxBodyBytes: Int
    private var deadline = RequestReadDeadline()

    init(timeout: TimeAmount, maxBodyBytes: Int) {
        self.timeout = timeout
        self.maxBodyBytes = maxBodyBytes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            // curl (and other clients) send `Expect: 100-continue` with large bodies and wait up to a
            // second for the go-ahead: answer it here, as Go's server (gorush) does.
            // Not when the declared length is over the limit: the 413 comes without the body.
            let declared = head.headerFields[.contentLength].flatMap { Int($0) } ?? 0
            if head.headerFields[.expect]?.lowercased() == "100-continue", declared <= maxBodyBytes {
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
            }
            deadline.start(timeout, context: context)
        case .body:
            break
        case .end:
            deadline.clear()
        }
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline.clear()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline.clear()
        context.fireChannelInactive()
    }
}
