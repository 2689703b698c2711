import NIOConcurrencyHelpers
import NIOCore
import SQLiteNIO
// SQLite's C API as sqlite-nio vendors and builds it (its `VaporCSQLite` target, not a product of
// the package: imported as SQLiteNIO's own dependency). The same SQLite library, no other C code.
import VaporCSQLite

/// The SQLite queue writer's connection: its statements run on the calling thread, each prepared
/// once and kept (`query`).
///
/// sqlite-nio's `SQLiteConnection.query` prepares its statement again on every call, and runs it on
/// a thread pool, resuming the caller on its event loop: per statement a prepare, a thread wake-up
/// and a hop back. In the bench (docs/benchmarks.md, the SQLite engine's writer)
/// preparing was 19 % of the writer's SQLite thread, and the wake-ups and hops of the 3-5
/// statements of each group commit a fifth of the SQLite engine's extra CPU. sqlite-nio keeps its
/// statements internal and has no cache, so the writer speaks to SQLite's C API itself. The queue's
/// writer task is the only caller on the hot path, on an event loop of its own that runs nothing
/// else (`WriterThreads`): a statement blocking it blocks nothing else. The reader and the
/// checkpoints stay on sqlite-nio.
final class WriterConnection: @unchecked Sendable {
    // @unchecked: `handle` and `cache` are used under `lock` only.
    private var handle: OpaquePointer?
    private var cache: [String: Prepared] = [:]
    private let lock = NIOLock()

    /// A statement prepared once, and its result columns' names.
    private struct Prepared {
        var statement: OpaquePointer
        var names: [String]
    }

    /// Statements kept at most: the texts of the queue's statements are few, but a multi-row insert
    /// has one per row count; past this the cache starts over.
    static let cacheLimit = 96

    /// How long a statement waits for another connection's write lock (a process sharing the file,
    /// a checkpoint) before it fails with SQLITE_BUSY. The writer's transaction then fails, and the
    /// queue retries its parts one by one (`DurableQueue.isolate`).
    static let busyTimeoutMilliseconds: Int32 = 30_000

    private init(handle: OpaquePointer) {
        self.handle = handle
    }

    /// SQLite's global set-up, once per process before a connection opens (as sqlite-nio does for its own).
    private static let initialized: Int32 = sqlite_nio_sqlite3_initialize()

    /// Opens `path` as sqlite-nio opens a file (the reader's and the checkpoints' connections).
    static func open(path: String) throws -> WriterConnection {
        guard initialized == SQLITE_OK else { throw QueueStoreError("SQLite failed to initialize (\(initialized))") }
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_URI | SQLITE_OPEN_EXRESCODE
        let ret = sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil)
        guard ret == SQLITE_OK, let handle else {
            let message = handle.flatMap { sqlite_nio_sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "error \(ret)"
            sqlite_nio_sqlite3_close(handle)
            throw QueueStoreError("cannot open \(path): \(message)")
        }
        sqlite_nio_sqlite3_busy_timeout(handle, busyTimeoutMilliseconds)
        return WriterConnection(handle: handle)
    }

    /// `body` with the kept statement of `sql` and the connection, under the lock; the statement is
    /// reset and its bindings cleared after it.
    private func withStatement<T>(_ sql: String, _ body: (Prepared, OpaquePointer) throws -> T) throws -> T {
        try lock.withLock {
            guard let handle else { throw QueueStoreError("the SQLite queue's writer connection is closed") }
            let p = try prepared(sql, handle)
            defer {
                sqlite_nio_sqlite3_reset(p.statement)
                sqlite_nio_sqlite3_clear_bindings(p.statement)
            }
            return try body(p, handle)
        }
    }

    /// Runs `sql` (one statement) with `binds` for its parameters, in order; returns its rows.
    @discardableResult
    func query(_ sql: String, _ binds: [SQLiteData] = []) throws -> [WriterRow] {
        try withStatement(sql) { p, handle in
            let s = p.statement
            guard Int(sqlite_nio_sqlite3_bind_parameter_count(s)) == binds.count else {
                throw QueueStoreError("SQLite statement has \(sqlite_nio_sqlite3_bind_parameter_count(s)) parameters, \(binds.count) bound")
            }
            let binder = Binder(statement: s)
            // `binds.count` is the statement's parameter count (an Int32): k + 1 fits.
            for (k, value) in binds.enumerated() { binder.value(Int32(k + 1), value) }
            guard binder.failed == SQLITE_OK else { throw error(handle) }
            var rows: [WriterRow] = []
            while true {
                switch sqlite_nio_sqlite3_step(s) {
                case SQLITE_ROW:
                    var values: [SQLiteData] = []
                    values.reserveCapacity(p.names.count)
                    for c in 0..<Int32(p.names.count) { values.append(Self.value(s, c)) }
                    rows.append(WriterRow(names: p.names, values: values))
                case SQLITE_DONE:
                    return rows
                default:
                    throw error(handle)
                }
            }
        }
    }

    /// The first column of each row of `sql`, an integer (NULL and other types skipped), with ?1 and
    /// ?2 bound to `a` and `b`: no row made.
    func integers(_ sql: String, _ a: Int64, _ b: Int64) throws -> [Int64] {
        try withStatement(sql) { p, handle in
            let s = p.statement
            guard sqlite_nio_sqlite3_bind_int64(s, 1, a) == SQLITE_OK, sqlite_nio_sqlite3_bind_int64(s, 2, b) == SQLITE_OK else {
                throw error(handle)
            }
            var out: [Int64] = []
            while true {
                switch sqlite_nio_sqlite3_step(s) {
                case SQLITE_ROW:
                    if sqlite_nio_sqlite3_column_type(s, 0) == SQLITE_INTEGER { out.append(sqlite_nio_sqlite3_column_int64(s, 0)) }
                case SQLITE_DONE:
                    return out
                default:
                    throw error(handle)
                }
            }
        }
    }

    /// Runs `sql` (one statement, no result rows) `count` times, its parameters bound by `bind` for
    /// each of `0..<count` in turn: one statement prepared once and stepped per row, its values bound
    /// straight from the caller's data. Returns the rows changed in all.
    @discardableResult
    func executeEach(_ sql: String, count: Int, _ bind: (Int, Binder) throws -> Void) throws -> Int {
        try withStatement(sql) { p, handle in
            let s = p.statement
            let binder = Binder(statement: s)
            var changed = 0
            for k in 0..<count {
                try bind(k, binder)
                guard binder.failed == SQLITE_OK else { throw error(handle) }
                let ret = sqlite_nio_sqlite3_step(s)
                guard ret == SQLITE_DONE || ret == SQLITE_ROW else { throw error(handle) }
                changed += Int(sqlite_nio_sqlite3_changes64(handle))
                sqlite_nio_sqlite3_reset(s)
            }
            return changed
        }
    }

    /// Runs `count` rows through two kept statements of one shape: `full`, holding `per` rows, once
    /// for each `per` of them, then `one`, holding one, for the rest (`executeEach`). `bind(i, r, b)`
    /// binds row `i` as the statement's row `r`. Stepping a statement sets it up each time (its
    /// cursors opened, the B-tree walked from the root): rows go many to a statement.
    func executeRows(full: String, one: String, per: Int, count: Int, _ bind: (_ row: Int, _ at: Int, Binder) throws -> Void) throws {
        let whole = count / per
        try executeEach(full, count: whole) { k, b in
            for r in 0..<per { try bind(k * per + r, r, b) }
        }
        try executeEach(one, count: count - whole * per) { k, b in try bind(whole * per + k, 0, b) }
    }

    /// Binds a statement's parameters (`query`, and one row's in `executeEach`), by 1-based index.
    final class Binder {
        fileprivate let statement: OpaquePointer
        /// The first failed bind's code (SQLITE_OK: none failed).
        fileprivate var failed = SQLITE_OK

        fileprivate init(statement: OpaquePointer) { self.statement = statement }

        private func check(_ ret: Int32) { if failed == SQLITE_OK { failed = ret } }

        func int(_ i: Int32, _ v: Int) { check(sqlite_nio_sqlite3_bind_int64(statement, i, Int64(v))) }
        func double(_ i: Int32, _ v: Double) { check(sqlite_nio_sqlite3_bind_double(statement, i, v)) }
        func text(_ i: Int32, _ v: String?) {
            guard var v else { return check(sqlite_nio_sqlite3_bind_null(statement, i)) }
            check(
                v.withUTF8 {
                    sqlite_nio_sqlite3_bind_text64(statement, i, $0.baseAddress, UInt64($0.count), WriterConnection.transient, UInt8(SQLITE_UTF8))
                })
        }
        func value(_ i: Int32, _ v: SQLiteData) {
            switch v {
            case .integer(let v): int(i, v)
            case .float(let v): double(i, v)
            case .text(let v): text(i, v)
            case .blob(let b):
                check(
                    b.withUnsafeReadableBytes {
                        sqlite_nio_sqlite3_bind_blob64(statement, i, $0.baseAddress, UInt64($0.count), WriterConnection.transient)
                    })
            case .null: check(sqlite_nio_sqlite3_bind_null(statement, i))
            }
        }
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    func changes() -> Int {
        lock.withLock { handle.map { Int(sqlite_nio_sqlite3_changes64($0)) } ?? 0 }
    }

    func close() {
        lock.withLock {
            for p in cache.values { sqlite_nio_sqlite3_finalize(p.statement) }
            cache = [:]
            if let handle { sqlite_nio_sqlite3_close(handle) }
            handle = nil
        }
    }

    deinit {
        close()
    }

    private func prepared(_ sql: String, _ handle: OpaquePointer) throws -> Prepared {
        if let p = cache[sql] { return p }
        if cache.count >= Self.cacheLimit {
            for p in cache.values { sqlite_nio_sqlite3_finalize(p.statement) }
            cache = [:]
        }
        var statement: OpaquePointer?
        let ret = sqlite_nio_sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard ret == SQLITE_OK, let statement else { throw error(handle) }
        let n = sqlite_nio_sqlite3_column_count(statement)
        let names = (0..<n).map { c in sqlite_nio_sqlite3_column_name(statement, c).map { String(cString: $0) } ?? "" }
        let p = Prepared(statement: statement, names: names)
        cache[sql] = p
        return p
    }

    private static func value(_ s: OpaquePointer, _ c: Int32) -> SQLiteData {
        switch sqlite_nio_sqlite3_column_type(s, c) {
        case SQLITE_INTEGER: return .integer(Int(sqlite_nio_sqlite3_column_int64(s, c)))
        case SQLITE_FLOAT: return .float(sqlite_nio_sqlite3_column_double(s, c))
        case SQLITE_TEXT:
            guard let p = sqlite_nio_sqlite3_column_text(s, c) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: Int(sqlite_nio_sqlite3_column_bytes(s, c))), as: UTF8.self))
        case SQLITE_BLOB:
            let n = Int(sqlite_nio_sqlite3_column_bytes(s, c))
            guard n > 0, let p = sqlite_nio_sqlite3_column_blob(s, c) else { return .blob(ByteBuffer()) }
            return .blob(ByteBuffer(bytes: UnsafeRawBufferPointer(start: p, count: n)))
        default: return .null
        }
    }

    private func error(_ handle: OpaquePointer) -> QueueStoreError {
        let code = sqlite_nio_sqlite3_extended_errcode(handle)
        let message = sqlite_nio_sqlite3_errmsg(handle).map { String(cString: $0) } ?? ""
        return QueueStoreError("SQLite error \(code): \(message)", sqliteCode: code)
    }

    fileprivate static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
}

/// A row of `WriterConnection.query`, read as sqlite-nio's `SQLiteRow` is.
struct WriterRow: StoreRow {
    let names: [String]
    let values: [SQLiteData]

    func column(_ name: String) -> SQLiteData? {
        names.firstIndex(of: name).map { values[$0] }
    }
}

/// A result row of either connection (the writer's own, sqlite-nio's reader).
protocol StoreRow {
    func column(_ name: String) -> SQLiteData?
}

extension SQLiteRow: StoreRow {}
