import NIOCore

/// Runs the jobs of a task on one NIO event loop (a task executor preference, SE-0417).
///
/// The dispatcher runs each delivery with the preference of one of the providers' event loops, in
/// turn. The HTTP/2 pool then starts the request on a connection of that loop (it prefers the
/// caller's loop), and the provider's answer resumes the delivery on the same thread. Without it a
/// delivery hopped from the Swift global executor to the connection's loop and back: at 35k
/// deliveries/s, thread wake-ups (futex, scheduling) were about a quarter of the gateway's CPU
/// (docs/benchmarks.md). NIO 2.101 has no `TaskExecutor` conformance of its own (only
/// `SerialExecutor`), hence this small adapter.
package final class EventLoopTaskExecutor: @unchecked Sendable {
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }
}

@available(macOS 15.0, iOS 18.0, *)
extension EventLoopTaskExecutor: TaskExecutor {
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
