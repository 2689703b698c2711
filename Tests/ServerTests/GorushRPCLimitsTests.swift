import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import Logging
import NIOConcurrencyHelpers
import TestSupport
import XCTest

@testable import GorushRPC
@testable import Server

#if canImport(Glibc)
    import Glibc
#endif

/// `core.max_connections` and `core.read_timeout` on the gRPC port, over real sockets: grpc-swift
/// clients for the RPCs that must keep working, raw TCP / hand-made HTTP/2 for the hostile ones.
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

    /// A stream whose request is started (HEADERS, then part of a message) and trickled a byte at a
    /// time is reset at core.read_timeout (1 s); the connection stays usable for a whole request, and
    /// another connection's RPCs are served meanwhile.
    func testTrickledRequestStreamIsResetAtReadTimeout() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await GorushRPCTests.withRPC(env, environment: ["PUSHGATE_CORE_READ_TIMEOUT": "1"]) { client, _, _, port in
            let h2 = try RawHTTP2(port: port)
            XCTAssertTrue(h2.sendPreface())
            XCTAssertTrue(h2.sendRequestHeaders(stream: 1, path: "/proto.Health/Check", endStream: false))
            // A gRPC message prefix announcing 10 bytes, then 1 of them.
            XCTAssertTrue(h2.send(type: RawHTTP2.data, flags: 0, stream: 1, [0, 0, 0, 0, 10, 0x0a]))
            let started = Date()
            let clientStatus = try await Self.health(client, timeout: .seconds(10))
            XCTAssertEqual(clientStatus, .serving, "another connection is served meanwhile")
            let (reply, _) = try await GorushRPCTests.send(client, Self.androidRequest())
            XCTAssertTrue(reply.success)
            var reset = false
            while !reset, Date().timeIntervalSince(started) < 10 {
                _ = h2.send(type: RawHTTP2.data, flags: 0, stream: 1, [0x41])
                reset = h2.read(within: 0.2).contains { $0.type == RawHTTP2.rstStream && $0.stream == 1 }
            }
            let elapsed = Date().timeIntervalSince(started)
            XCTAssertTrue(reset, "the trickled stream is reset (RST_STREAM) within 10 s")
            XCTAssertGreaterThan(elapsed, 0.5, "reset by the read timeout, not refused at once")
            XCTAssertFalse(h2.goaway, "only the stream, not the connection")
            // The same connection answers a whole request: HEADERS, then the message and END_STREAM.
            XCTAssertTrue(h2.sendRequestHeaders(stream: 3, path: "/proto.Health/Check", endStream: false))
            XCTAssertTrue(h2.send(type: RawHTTP2.data, flags: RawHTTP2.endStream, stream: 3, [0, 0, 0, 0, 0]))
            var answered = false
            let asked = Date()
            while !answered, Date().timeIntervalSince(asked) < 10 {
                answered = h2.read(within: 0.2).contains { $0.type == RawHTTP2.data && $0.stream == 3 }
            }
            XCTAssertTrue(answered, "a complete request on the same connection is answered")
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

/// HTTP/2 by hand over a `RawConnection`: what a client that never finishes its request sends
/// (frames of RFC 9113 §4.1, HPACK literals without Huffman coding), and the frames it gets back.
final class RawHTTP2 {
    static let data: UInt8 = 0x0
    static let headers: UInt8 = 0x1
    static let rstStream: UInt8 = 0x3
    static let settings: UInt8 = 0x4
    static let goawayType: UInt8 = 0x7
    static let endStream: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4

    let connection: RawConnection
    private var buffer: [UInt8] = []
    private(set) var goaway = false

    init(port: Int) throws {
        connection = try RawConnection(port: port)
    }

    func send(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8]) -> Bool {
        let n = payload.count
        var frame: [UInt8] = [UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff), type, flags]
        frame += [UInt8((stream >> 24) & 0x7f), UInt8((stream >> 16) & 0xff), UInt8((stream >> 8) & 0xff), UInt8(stream & 0xff)]
        return connection.send(bytes: frame + payload)
    }

    /// The client preface and an empty SETTINGS frame.
    func sendPreface() -> Bool {
        connection.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") && send(type: Self.settings, flags: 0, stream: 0, [])
    }

    /// A gRPC request's HEADERS frame (plaintext), END_HEADERS set.
    func sendRequestHeaders(stream: UInt32, path: String, endStream: Bool) -> Bool {
        let fields = [
            (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"), ("te", "trailers"),
        ]
        var block: [UInt8] = []
        for (name, value) in fields {
            // Literal header field without indexing, new name (RFC 7541 §6.2.2); every length < 127.
            block += [0x00, UInt8(name.utf8.count)] + Array(name.utf8) + [UInt8(value.utf8.count)] + Array(value.utf8)
        }
        return send(type: Self.headers, flags: Self.endHeaders | (endStream ? Self.endStream : 0), stream: stream, block)
    }

    /// The frames (type, flags, stream) that arrive within `seconds`.
    func read(within seconds: Double) -> [(type: UInt8, flags: UInt8, stream: UInt32)] {
        let deadline = Date().addingTimeInterval(seconds)
        var chunk = [UInt8](repeating: 0, count: 16384)
        while Date() < deadline {
            let n = recv(connection.fd, &chunk, chunk.count, 0)
            if n > 0 {
                buffer += chunk[0..<n]
            } else if n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) {
                break
            }
        }
        var frames: [(type: UInt8, flags: UInt8, stream: UInt32)] = []
        while buffer.count >= 9 {
            let length = Int(buffer[0]) << 16 | Int(buffer[1]) << 8 | Int(buffer[2])
            guard buffer.count >= 9 + length else { break }
            let stream = UInt32(buffer[5] & 0x7f) << 24 | UInt32(buffer[6]) << 16 | UInt32(buffer[7]) << 8 | UInt32(buffer[8])
            frames.append((buffer[3], buffer[4], stream))
            if buffer[3] == Self.goawayType { goaway = true }
            buffer.removeFirst(9 + length)
        }
        return frames
    }
}
