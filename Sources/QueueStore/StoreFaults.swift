import NIOCore
import PostgresNIO
import PushDispatch
import SQLiteNIO

/// Which store errors are faults of the store itself (it cannot take any write now: full disk, I/O
/// error, database unreachable), as opposed to one write's own problem (a bad value, a constraint).
/// A fault is answered `503`/`507` with `Retry-After`, the refused completions are kept and written
/// again, and readiness is down until a write succeeds.
enum StoreFaults {
    static func cause(of error: any Error) -> StoreUnavailableError.Cause? {
        switch error {
        case let e as StoreUnavailableError:
            return e.cause
        case let e as QueueStoreError:
            return e.sqliteCode.flatMap(sqliteCause)
        case let e as SQLiteError:
            return sqliteCause(reason: e.reason)
        case let e as PSQLError:
            return postgresCause(e)
        case let e as PostgresTransactionError:
            // `withTransaction` wraps what failed: BEGIN, the statements (or the commit gate) or COMMIT.
            return (e.beginError ?? e.closureError ?? e.commitError).flatMap { cause(of: $0) }
        case is IOError, is ChannelError:
            return .unreachable
        default:
            return nil
        }
    }

    /// SQLite's primary result codes (the low byte of an extended code) that mean the file system
    /// refuses: SQLITE_FULL (13), SQLITE_IOERR (10), SQLITE_READONLY (8), SQLITE_CANTOPEN (14),
    /// SQLITE_NOMEM (7).
    static func sqliteCause(_ code: Int32) -> StoreUnavailableError.Cause? {
        switch code & 0xff {
        case 13: return .full
        case 10, 8, 14, 7: return .ioError
        default: return nil
        }
    }

    private static func sqliteCause(reason: SQLiteError.Reason) -> StoreUnavailableError.Cause? {
        switch reason {
        case .full: return .full
        case .ioError, .readOnly, .cantOpen, .noMemory: return .ioError
        case .ioErrorFailedRead, .ioErrorIncompleteRead, .ioErrorFailedWrite, .ioErrorFailedSync, .ioErrorFailedDirSync,
            .ioErrorFailedTruncate, .ioErrorFailedStat, .ioErrorFailedDelete, .ioErrorNoMemory, .ioErrorFailedAccess,
            .ioErrorFailedSharedMemOpen, .ioErrorFailedSharedMemSize, .ioErrorFailedSharedMemMap, .ioErrorFailedMemoryMap,
            .ioErrorCorruptedFilesystem:
            return .ioError
        default: return nil
        }
    }

    /// A connection that failed or closed, and the server's own "cannot work now" classes:
    /// 53 (insufficient resources; 53100 disk full), 08 (connection exception), 57P01-57P03
    /// (shutting down, cannot connect now), 58 (system error: I/O), 25006 (a read-only standby).
    private static func postgresCause(_ e: PSQLError) -> StoreUnavailableError.Cause? {
        switch e.code {
        case .serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown, .poolClosed:
            return .unreachable
        case .server:
            guard let state = e.serverInfo?[.sqlState] else { return nil }
            if state == "53100" { return .full }
            if state.hasPrefix("58") { return .ioError }
            if state.hasPrefix("53") || state.hasPrefix("08") || ["57P01", "57P02", "57P03", "25006"].contains(state) { return .unreachable }
            return nil
        default:
            return nil
        }
    }
}
