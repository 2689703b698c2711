import Foundation
import XCTest

/// The one poll-until helper of the test suites: for state changes that have no event to await.
/// Polls `condition` every `interval` until it holds (true) or `timeout` passes (false).
public func eventually(
    timeout: Double = 10,
    interval: Duration = .milliseconds(10),
    _ condition: () async -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return await condition()
}

/// Thrown by `waitUntil` after it failed the test, so the test stops there.
public struct WaitTimedOut: Error, CustomStringConvertible {
    public var description: String
}

/// `eventually`, failing the test (at the caller's line) and throwing when the condition does not
/// hold in time.
public func waitUntil(
    _ what: String = "condition",
    timeout: Double = 5,
    file: StaticString = #filePath,
    line: UInt = #line,
    _ condition: () async -> Bool
) async throws {
    if await !eventually(timeout: timeout, interval: .milliseconds(5), condition) {
        XCTFail("\(what) not met within \(timeout) s", file: file, line: line)
        throw WaitTimedOut(description: "\(what) not met within \(timeout) s")
    }
}
