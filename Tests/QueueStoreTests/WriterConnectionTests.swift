import Foundation
import SQLiteNIO
import XCTest

@testable import QueueStore

/// The SQLite writer's own connection (`WriterConnection`): kept statements give the same answers
/// as new ones, errors are thrown with SQLite's message and leave the connection usable, and text
/// comes back byte for byte (NUL included: SQLite's length, not C's end of string).
final class WriterConnectionTests: XCTestCase {
    func testKeptStatementsValuesAndErrors() throws {
        let db = try WriterConnection.open(path: tempDir() + "/w.sqlite")
        defer { db.close() }
        try db.query("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, d REAL, b BLOB)")
        let odd = "a\u{0}b é 😀 \"q\""
        for i in 0..<3 {
            // the same text each time: one kept statement, bound again
            try db.query("INSERT INTO t (id, s, d, b) VALUES (?, ?, ?, ?)", [.integer(i), .text(odd), .float(0.5 + Double(i)), .null])
        }
        XCTAssertEqual(db.changes(), 1)
        let rows = try db.query("SELECT id, s, d, b FROM t ORDER BY id")
        XCTAssertEqual(rows.map { $0.column("id")?.integer }, [0, 1, 2])
        XCTAssertEqual(rows.map { $0.column("s")?.string }, [odd, odd, odd])
        XCTAssertEqual(rows.map { $0.column("d")?.double }, [0.5, 1.5, 2.5])
        XCTAssertEqual(rows.first?.column("b")?.isNull, true)
        XCTAssertNil(rows.first?.column("missing"))

        // a constraint error names SQLite's reason; the kept statement works again afterwards
        XCTAssertThrowsError(try db.query("INSERT INTO t (id, s, d, b) VALUES (?, ?, ?, ?)", [.integer(1), .text("x"), .float(0), .null])) {
            XCTAssertTrue("\($0)".contains("UNIQUE constraint failed"), "\($0)")
        }
        try db.query("INSERT INTO t (id, s, d, b) VALUES (?, ?, ?, ?)", [.integer(3), .text("x"), .float(0), .null])
        // too few or too many values for the statement's parameters: an error, nothing bound
        XCTAssertThrowsError(try db.query("SELECT ? AS a, ? AS b", [.integer(1)]))
        XCTAssertThrowsError(try db.query("SELECT ? AS a", [.integer(1), .integer(2)]))
        XCTAssertThrowsError(try db.query("SELEC nonsense"))

        // one statement stepped per row, bound straight from the caller's values
        let values = [(10, "x"), (11, nil), (12, "z")] as [(Int, String?)]
        let changed = try db.executeEach("INSERT INTO t (id, s) VALUES (?1, ?2)", count: values.count) { k, b in
            b.int(1, values[k].0)
            b.text(2, values[k].1)
        }
        XCTAssertEqual(changed, 3)
        let stepped = try db.query("SELECT s FROM t WHERE id >= 10 ORDER BY id")
        XCTAssertEqual(stepped.map { $0.column("s")?.isNull }, [false, true, false])
        XCTAssertEqual(stepped.last?.column("s")?.string, "z")
        // a failing row stops the run with the error (the row before it stays: no transaction here)
        XCTAssertThrowsError(
            try db.executeEach("INSERT INTO t (id) VALUES (?1)", count: 2) { k, b in b.int(1, 20 + k * 0) })

        // more distinct texts than the cache keeps: it starts over, answers stay right
        for i in 0..<(WriterConnection.cacheLimit + 10) {
            XCTAssertEqual(try db.query("SELECT \(i) AS n").first?.column("n")?.integer, i)
        }
        XCTAssertEqual(try db.query("SELECT count(*) AS n FROM t").first?.column("n")?.integer, 8)

        db.close()
        XCTAssertThrowsError(try db.query("SELECT 1 AS n"))
    }
}
