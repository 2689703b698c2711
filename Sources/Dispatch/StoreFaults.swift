/// The queue's store cannot take writes now: its disk is full, it answers an I/O error, it cannot be
/// reached, or it did not answer within `queue.store_timeout`. Nothing of the refused write was
/// stored. Ingest answers it `507` (full disk) or `503`, with `Retry-After`; readiness is down
/// while a store has one (`QueueDriver.storeProblem`).
public struct StoreUnavailableError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Cause: String, Sendable, Equatable {
        /// No space left for the store's files (SQLite `SQLITE_FULL`, `ENOSPC`; PostgreSQL `53100`).
        case full
        /// The store's files cannot be written or read (SQLite `SQLITE_IOERR`, a read-only file system).
        case ioError
        /// The database server cannot be reached or closed the connection.
        case unreachable
        /// The store did not answer within `queue.store_timeout`.
        case timeout
    }

    public var cause: Cause
    /// Seconds a client should wait before trying again.
    public var retryAfter: Int

    public init(_ cause: Cause, retryAfter: Int = 5) {
        self.cause = cause
        self.retryAfter = retryAfter
    }

    /// What a client is told: the cause, never a path, table or value of the store.
    public var description: String {
        switch cause {
        case .full: return "the queue store is full (no space left on its disk)"
        case .ioError: return "the queue store cannot write (I/O error)"
        case .unreachable: return "the queue store (database) is unreachable"
        case .timeout: return "the queue store did not answer within queue.store_timeout"
        }
    }

    /// `507 Insufficient Storage` for a full disk, `503 Service Unavailable` otherwise.
    public var httpStatus: Int { cause == .full ? 507 : 503 }
}
