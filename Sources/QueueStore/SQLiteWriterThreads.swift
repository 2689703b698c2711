import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PushDispatch
import PushgateCore
import SQLiteNIO

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The event loop the queue's writer task runs on, and with it the writer connection's statements
/// (`WriterConnection`, see `SQLiteBackend.open`). That loop is one per process and never shut down
/// (as NIO's singletons): the writer task calls `close`, and a loop cannot be shut down from its own
/// thread. It only ever runs writer tasks (several queues in one process share it: one transaction
/// at a time, each run to its end without suspending, as its statements do not).
final class WriterThreads: Sendable {
    private static let loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    var loop: any EventLoop { Self.loops.any() }
}

/// Copies WAL frames into the database from its own connection and thread, so commits never wait
/// for a checkpoint.
///
/// With SQLite's automatic checkpoint, the commit that takes the WAL past 1,000 pages copies them
/// into the database and syncs it before it returns, and every request arriving meanwhile waits for
/// it (the p99 latency figure in docs/benchmarks.md). Here a PASSIVE checkpoint runs every `interval` on a
/// separate connection (it takes no writer lock). Under steady writes it never quite catches up
/// (frames keep arriving while it runs), and SQLite only starts the WAL over when every frame has
/// been copied; so when the WAL is longer than `restartFrames` the writer is asked to copy the last
/// few frames itself between two transactions (`SQLiteBackend.afterCommit`), which keeps the WAL
/// bounded at the cost of one short checkpoint now and then.
final class WALCheckpointer: Sendable {
    private enum Phase {
        /// the background checkpoint may run
        case background
        /// it left a long WAL: waiting for the writer to finish it (no background checkpoint meanwhile:
        /// the writer's would find the checkpoint lock taken)
        case finishRequested
        case writerFinishing
    }

    private struct State {
        var phase = Phase.background
        var task: Task<Void, Never>?
        /// A transaction committed since the last background checkpoint (none: nothing to copy, and
        /// an idle gateway makes no query).
        var written = true
        /// The loop's sleep while it backs off (idle): a commit cuts it short.
        var idleSleep: Task<Void, Never>?
    }

    private let connection: SQLiteConnection
    private let pool: NIOThreadPool
    private let state = NIOLockedValueBox(State())
    let interval: Duration
    let restartFrames: Int

    private init(connection: SQLiteConnection, pool: NIOThreadPool, interval: Duration, restartFrames: Int) {
        self.connection = connection
        self.pool = pool
        self.interval = interval
        self.restartFrames = restartFrames
    }

    static func start(
        path: String, synchronous: String, interval: Duration, restartFrames: Int,
        logger: Logger
    ) async throws -> WALCheckpointer {
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let connection: SQLiteConnection
        do {
            connection = try await SQLiteConnection.open(
                storage: .file(path: path), threadPool: pool, logger: logger,
                on: MultiThreadedEventLoopGroup.singleton.any())
            // the checkpoint syncs like the writer's would have
            _ = try await connection.query("PRAGMA synchronous=\(synchronous)")
        } catch {
            try? await pool.shutdownGracefully()
            throw error
        }
        let c = WALCheckpointer(connection: connection, pool: pool, interval: interval, restartFrames: restartFrames)
        let task = Task { await c.loop(logger: logger) }
        c.state.withLockedValue { $0.task = task }
        return c
    }

    private func loop(logger: Logger) async {
        // Every `interval` while transactions are committed; while none are, the sleep doubles up to
        // 5 s and a commit cuts it short (an idle gateway barely wakes, a busy one checkpoints as before).
        var backoff = interval
        let longest = max(interval, .seconds(5))
        while !Task.isCancelled {
            if backoff > interval {
                let nap = backoff
                let sleeper: Task<Void, Never>? = state.withLockedValue { s in
                    if s.written { return nil }
                    let t = Task { _ = try? await Task.sleep(for: nap) }
                    s.idleSleep = t
                    return t
                }
                if let sleeper {
                    await withTaskCancellationHandler {
                        await sleeper.value
                    } onCancel: {
                        sleeper.cancel()
                    }
                    state.withLockedValue { $0.idleSleep = nil }
                }
            } else {
                try? await Task.sleep(for: interval)
            }
            if Task.isCancelled { break }
            let due = state.withLockedValue { s -> Bool in
                guard s.phase == .background, s.written else { return false }
                s.written = false
                return true
            }
            guard due else {
                backoff = min(backoff * 2, longest)
                continue
            }
            backoff = interval
            do {
                // one row: busy, frames in the WAL (`log`), frames copied into the database
                let row = try await connection.query("PRAGMA wal_checkpoint(PASSIVE)").first
                if (row?.column("log")?.integer ?? 0) > restartFrames {
                    state.withLockedValue { $0.phase = .finishRequested }
                }
            } catch {
                logger.warning("WAL checkpoint failed: \(error)")
            }
        }
    }

    /// Called after every commit (which marks the WAL written). True once after a background
    /// checkpoint left a long WAL; the caller then checkpoints with RESTART on the writer connection
    /// and calls `finished()`.
    func takeFinishRequest() -> Bool {
        state.withLockedValue { s in
            s.written = true
            if let nap = s.idleSleep {
                s.idleSleep = nil
                nap.cancel()
            }
            guard s.phase == .finishRequested else { return false }
            s.phase = .writerFinishing
            return true
        }
    }

    func finished() {
        state.withLockedValue { $0.phase = .background }
    }

    func stop() async {
        let task = state.withLockedValue { s -> Task<Void, Never>? in
            defer { s.task = nil }
            return s.task
        }
        task?.cancel()
        await task?.value
        try? await connection.close()
        try? await pool.shutdownGracefully()
    }
}
