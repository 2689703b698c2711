import NIOCore

/// The deadline of one request being read (`core.read_timeout`): closes the channel when it passes
/// before `clear()`. Used on a handler's event loop only. The HTTP server's
/// `RequestReadTimeoutHandler` and the gRPC port's per-stream handler share it.
package struct RequestReadDeadline {
    private var timer: Scheduled<Void>?

    package init() {}

    /// Starts it again: `context`'s channel is closed `timeout` from now.
    package mutating func start(_ timeout: TimeAmount, context: ChannelHandlerContext) {
        timer?.cancel()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            loopBound.value.close(promise: nil)
        }
    }

    /// The request ended (or the handler went away): no close.
    package mutating func clear() {
        timer?.cancel()
        timer = nil
    }
}
