import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import Logging
import NIOConcurrencyHelpers
import TestSupport
import XCTest

@testable import GorushRPC
@testable import Server

/// `core.max_connections` on the gRPC port, over real sockets: grpc-swift clients for the RPCs that
/// must keep working, raw TCP for the hostile ones.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class GorushRPCLimitsTests: XCTestCase {
    typealias Client = GorushRPCTests.Client

    /// Health with a deadline, so a refused connection fails the call instead of waiting for ever.
    static func health(_ client: Client, timeout: Duration) async throws -> Proto_HealthCheckResponse.ServingStatus {
        var options = CallOptions.defaults
        options.timeout = timeout
        return try await Proto_Health.Client(wrapping: client).check(Proto_HealthCheckRequest(), options: options).status
    }

    static func androidRequest() -> Proto_NotificationRequest {
        var r = Proto_NotificationRequest()
        r.tokens = ["fcm-token-limits"]
        r.platform = 2
        r.message = "m"
        return r
    }

    /// Past core.max_connections (2 here) a new connection is closed at once, with one warning however
    /// many; the two open ones go on serving `Health/Check` and `Send`, and once one closes a new
    /// connection is served again.
    func testConnectionsPastMaxConnectionsAreClosedAtOnce() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let logs = CapturedLogs()
        try await GorushRPCTests.withRPC(env, environment: ["PUSHGATE_CORE_MAX_CONNECTIONS": "2"], logger: logs.logger) {
            first, _, _, port in
            let firstStatus = try await Self.health(first, timeout: .seconds(10))
            XCTAssertEqual(firstStatus, .serving)
            try await withGRPCClient(transport: try GorushRPCTests.transport(port: port, caPEM: nil)) { second in
                let secondStatus = try await Self.health(second, timeout: .seconds(10))
                XCTAssertEqual(secondStatus, .serving)
                for k in 0..<5 {
                    let extra = try RawConnection(port: port)
                    extra.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                    XCTAssertTrue(extra.closedByServer(within: 5), "connection \(k + 3) is closed at once")
                }
                // The first two are untouched.
                let firstStill = try await Self.health(first, timeout: .seconds(10))
                XCTAssertEqual(firstStill, .serving)
                let (reply, _) = try await GorushRPCTests.send(first, Self.androidRequest())
                XCTAssertTrue(reply.success)
                let secondStill = try await Self.health(second, timeout: .seconds(10))
                XCTAssertEqual(secondStill, .serving)
            }
            // `second` closed: its place is free again.
            let servedAgain = await eventually(timeout: 15, interval: .milliseconds(200)) {
                do {
                    return try await withGRPCClient(transport: try GorushRPCTests.transport(port: port, caPEM: nil)) { third in
                        try await Self.health(third, timeout: .seconds(2)) == .serving
                    }
                } catch {
                    return false
                }
            }
            XCTAssertTrue(servedAgain, "a connection is accepted once the count is under the cap")
            let warnings = logs.messages.filter { $0.contains("core.max_connections") }
            XCTAssertEqual(warnings.count, 1, "one warning for the refused connections: \(logs.messages)")
        }
    }
}

/// A log handler keeping the messages, for the tests that check what is logged (and how often).
final class CapturedLogs: Sendable {
    private let box = NIOLockedValueBox<[String]>([])

    var messages: [String] { box.withLockedValue { $0 } }

    var logger: Logger {
        var l = Logger(label: "test") { _ in Handler(logs: self) }
        l.logLevel = .warning
        return l
    }

    struct Handler: LogHandler {
        let logs: CapturedLogs
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .warning

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let message = "\(event.message)"
            logs.box.withLockedValue { $0.append(message) }
        }
    }
}
