import Foundation
import Logging
import NIOConcurrencyHelpers
import PushDispatch

/// The embedded durable engine (`queue.engine: sqlite`).
public enum SQLiteQueue {
    /// Opens (creating the file, its directory and the schema if needed) a SQLite queue in WAL mode.
    /// - Parameter synchronous: "normal" (commits survive a process crash) or "full" (also an OS crash / power loss).
    public static func open(
        path: String, synchronous: String = "normal", options: DurableQueueOptions,
        logger: Logger = Logger(label: "pushgate.queue.sqlite"),
        now: @escaping @Sendable () -> Date = { Date() }
    ) async throws -> DurableQueue {
        let backend = try await SQLiteBackend.open(path: path, synchronous: synchronous, logger: logger)
        do {
            return try await DurableQueue(backend: backend, options: options, logger: logger, now: now)
        } catch {
            await backend.close()
            throw error
        }
    }
}

/// Runs async setup from synchronous code (the gateway builder), waiting at most `timeout` seconds.
public enum BlockingStartup {
    public struct TimedOut: Error, CustomStringConvertible {
        public var description: String
    }

    public static func run<T: Sendable>(timeout: Double = 60, what: String, _ body: @escaping @Sendable () async throws -> T) throws -> T {
        let box = NIOLockedValueBox<Result<T, any Error>?>(nil)
        let sem = DispatchSemaphore(value: 0)
        Task.detached {
            let r: Result<T, any Error>
            do { r = .success(try await body()) } catch { r = .failure(error) }
            box.withLockedValue { $0 = r }
            sem.signal()
        }
        if sem.wait(timeout: .now() + timeout) == .timedOut {
            throw TimedOut(description: "\(what) did not finish within \(Int(timeout)) s")
        }
        return try box.withLockedValue { $0! }.get()
    }
}

/// A durable engine (`queue.engine: sqlite` or `postgres`): the queue is its own status source and
/// saves the counters' increments, seeded from the store.
public struct DurableEngine: QueueEngine {
    public let queue: DurableQueue
    public let stats: Stats

    public init(_ queue: DurableQueue) {
        self.queue = queue
        stats = Stats(initial: queue.storedStats)
        queue.persist(stats: stats)
    }

    public var driver: any QueueDriver { queue }
    public var statusSource: (any DeliveryStatusSource)? { queue }
    public var sinks: [any DeliveryEventSink] { [] }
    public var idempotency: any IdempotencyStore { queue }
}
