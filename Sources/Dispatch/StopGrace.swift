/// Bounds how long a stop waits on a peer (the event webhook's receiver, the feedback hook, an
/// OpenTelemetry collector): `run` runs its work until it returns or, once `requestStop()` was
/// called, until `grace` has passed, then cancels it (a POST in progress, a backoff sleep). A peer
/// that is down or accepts the connection but never answers cannot hold a rolling restart.
public final class StopGrace: Sendable {
    /// How long a stop gives a peer, by default, to take what is left.
    public static let standard: Duration = .seconds(1)

    public let grace: Duration
    private let stops: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    public init(grace: Duration = StopGrace.standard) {
        self.grace = grace
        (stops, continuation) = AsyncStream.makeStream(of: Void.self)
    }

    /// Starts the grace period (idempotent).
    public func requestStop() { continuation.finish() }

    /// Runs `work` to its end, or cancels it `grace` after `requestStop()`. Returns true when it was
    /// cut short.
    @discardableResult
    public func run(_ work: @escaping @Sendable () async -> Void) async -> Bool {
        let stops = self.stops
        let grace = self.grace
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await work()
                return false
            }
            group.addTask {
                for await _ in stops {}
                guard !Task.isCancelled else { return false }
                do {
                    try await Task.sleep(for: grace)
                } catch {
                    return false
                }
                return true
            }
            let cut = await group.next() ?? false
            group.cancelAll()
            return cut
        }
    }
}
