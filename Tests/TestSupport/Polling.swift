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

/// Polls `condition` until it holds, failing the test (at the caller's line) and throwing when it
/// does not within `timeout` seconds; an error the condition throws ends the wait and is thrown.
public func waitUntil(
    _ what: String = "condition",
    timeout: Double = 10,
    file: StaticString = #filePath,
    line: UInt = #line,
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(5))
    }
    if try await condition() { return }
    XCTFail("\(what) not met within \(timeout) s", file: file, line: line)
    throw WaitTimedOut(description: "\(what) not met within \(timeout) s")
}
