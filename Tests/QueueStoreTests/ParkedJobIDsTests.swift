import XCTest

@testable import QueueStore

/// The parked jobs' id list (`ParkedJobIDs`): consecutive ids share a range, jobs come out oldest
/// first in the sizes asked for, and a failed read puts them back in front.
final class ParkedJobIDsTests: XCTestCase {
    func ids(_ ranges: [ClosedRange<Int64>]) -> [Int64] { ranges.flatMap { Array($0) } }

    func testTakesTheOldestAcrossRangesAndPutsBackInFront() {
        var p = ParkedJobIDs()
        for id: Int64 in [1, 2, 3, 7, 8, 10] { p.append(id) }
        XCTAssertEqual(p.count, 6)
        XCTAssertEqual(ids(p.take(4)), [1, 2, 3, 7])
        XCTAssertEqual(p.count, 2)
        let taken = p.take(5)
        XCTAssertEqual(ids(taken), [8, 10], "fewer than asked when it holds fewer")
        XCTAssertTrue(p.isEmpty)
        p.append(11)
        p.putBack(taken)
        XCTAssertEqual(p.count, 3)
        XCTAssertEqual(ids(p.take(10)), [8, 10, 11], "put back ahead of newer ids")
        XCTAssertEqual(p.take(0), [])
        XCTAssertEqual(p.take(-1), [])
    }

    func testALongBacklogIsAFewRangesAndDrainsInOrder() {
        var p = ParkedJobIDs()
        var next: Int64 = 0
        var expected: [Int64] = []
        // 1,000 requests of 100 jobs, every tenth id held in memory instead (a gap).
        for _ in 0..<100_000 {
            next += 1
            if next % 10 == 0 { continue }
            p.append(next)
            expected.append(next)
        }
        var got: [Int64] = []
        while !p.isEmpty { got += ids(p.take(256)) }
        XCTAssertEqual(got, expected)
        XCTAssertEqual(p.count, 0)
    }

    func testTheLargestIDsDoNotOverflow() {
        var p = ParkedJobIDs()
        p.append(Int64.max - 1)
        p.append(Int64.max)
        XCTAssertEqual(p.count, 2)
        XCTAssertEqual(p.take(1), [(Int64.max - 1)...(Int64.max - 1)])
        XCTAssertEqual(p.take(5), [Int64.max...Int64.max])
    }
}
