import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import GorushRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import TestSupport
import XCTest

@testable import GatewayCore
@testable import GorushRPC
@testable import HTTPIngest

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

/// Admission on the gRPC port: what each method needs is decided on the stream's HEADERS, before
/// any of its message is read; the message size and the bytes held for unfinished messages are
/// bounded; one address cannot take every connection.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class GorushRPCAdmissionTests: XCTestCase {
    static let key = "rpc-admission-key-0123456789"

    /// With keys configured, a `Send` stream without a valid key is answered UNAUTHENTICATED as soon
    /// as its HEADERS arrive: no byte of a message was sent. Any spelling of a path is judged by the
    /// method grpc-swift would route it to (unknown: a key first, then UNIMPLEMENTED);
    /// `Health/Check` stays open; a keyed `Send` works.
    func testUnauthenticatedStreamIsRefusedOnItsHeaders() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await GorushRPCTests.withRPC(env, environment: ["PUSHGATE_CORE_API_KEYS": Self.key]) { client, _, _, port in
            let h2 = try RawHTTP2(port: port)
            XCTAssertTrue(h2.sendPreface())
            // Stream 1: Send, no key, the request left open and no DATA at all.
            XCTAssertTrue(h2.sendRequestHeaders(stream: 1, path: "/proto.Gorush/Send", endStream: false))
            let refused = h2.status(stream: 1, within: 10)
            XCTAssertEqual(refused?.code, "16", "UNAUTHENTICATED before any message byte")
            XCTAssertEqual(refused?.message, "send an API key: metadata authorization: Bearer <key>")
            XCTAssertNotNil(h2.waitFor(stream: 1, within: 10) { $0.type == RawHTTP2.rstStream }, "and the stream is reset")
            // A wrong key, and paths grpc-swift does not route to Send: all refused the same way.
            let cases: [(UInt32, String, [(String, String)])] = [
                (3, "/proto.Gorush/Send", [("authorization", "Bearer wrong-key-0123456789")]),
                (5, "/proto.Gorush/Send", [("x-api-key", "wrong-key-0123456789")]),
                (7, "//proto.Gorush/Send", []), (9, "/proto.Gorush/Send/", []), (11, "/proto.gorush/send", []),
                (13, "/proto.Gorush/Unknown", []),
            ]
            for (stream, path, extra) in cases {
                XCTAssertTrue(h2.sendRequestHeaders(stream: stream, path: path, endStream: false, extra: extra))
                XCTAssertEqual(h2.status(stream: stream, within: 10)?.code, "16", "\(path) \(extra.map(\.0))")
            }
            XCTAssertFalse(h2.goaway, "refusals end streams, not the connection")
            // Health/Check needs no key, on the same connection.
            XCTAssertTrue(h2.sendRequestHeaders(stream: 15, path: "/proto.Health/Check", endStream: false))
            XCTAssertTrue(h2.send(type: RawHTTP2.data, flags: RawHTTP2.endStream, stream: 15, RawHTTP2.message(length: 0, [])))
            XCTAssertTrue(h2.replied(stream: 15, within: 10), "Health/Check is open")
            // With the key an unknown method gets as far as grpc-swift's router: UNIMPLEMENTED.
            let keyed = [("authorization", "Bearer \(Self.key)")]
            XCTAssertTrue(h2.sendRequestHeaders(stream: 17, path: "/proto.Gorush/Unknown", endStream: true, extra: keyed))
            XCTAssertEqual(h2.status(stream: 17, within: 10)?.code, "12")
            // A keyed Send through grpc-swift's client.
            let (reply, _) = try await GorushRPCTests.send(
                client, GorushRPCLimitsTests.androidRequest(), metadata: ["authorization": "Bearer \(Self.key)"])
            XCTAssertTrue(reply.success)
        }
    }

    /// A message announcing more than grpc.max_message_bytes is refused (RESOURCE_EXHAUSTED) on its
    /// 5-byte prefix, the rest never sent; the grpc-swift client gets the same code.
    func testMessageOverMaxMessageBytesIsRefusedOnItsPrefix() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await GorushRPCTests.withRPC(env, environment: ["PUSHGATE_GRPC_MAX_MESSAGE_BYTES": "4096"]) { client, _, _, port in
            let h2 = try RawHTTP2(port: port)
            XCTAssertTrue(h2.sendPreface())
            XCTAssertTrue(h2.sendRequestHeaders(stream: 1, path: "/proto.Gorush/Send", endStream: false))
            XCTAssertTrue(h2.send(type: RawHTTP2.data, flags: 0, stream: 1, RawHTTP2.message(length: 5_000_000, [0x0a])))
            let status = h2.status(stream: 1, within: 10)
            XCTAssertEqual(status?.code, "8")
            XCTAssertEqual(status?.message, "a message of 5000000 bytes is larger than grpc.max_message_bytes (4096)")
            var r = GorushRPCLimitsTests.androidRequest()
            r.message = String(repeating: "x", count: 5000)
            let e = await GorushRPCTests.sendError(client, r)
            XCTAssertEqual(e?.code, .resourceExhausted)
            r.message = String(repeating: "x", count: 3000)
            let (reply, _) = try await GorushRPCTests.send(client, r)
            XCTAssertTrue(reply.success, "a message under the limit is served")
        }
    }

    /// The bytes of unfinished messages: a stream that would take its connection past
    /// grpc.max_pending_bytes_per_connection, or the port past grpc.max_pending_bytes, is refused
    /// (RESOURCE_EXHAUSTED); the bytes come back as a message completes or its connection closes.
    func testBytesOfUnfinishedMessagesAreCappedPerConnectionAndInTotal() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let environment = [
            "PUSHGATE_GRPC_MAX_MESSAGE_BYTES": "1024", "PUSHGATE_GRPC_MAX_PENDING_BYTES_PER_CONNECTION": "1100",
            "PUSHGATE_GRPC_MAX_PENDING_BYTES": "1800",
        ]
        try await GorushRPCTests.withRPC(env, environment: environment) { _, _, _, port in
            // A HealthCheckRequest of 1,000 bytes: field 2 (unknown to Health, kept) holding 997 bytes.
            let health: [UInt8] = [0x12, 0xE5, 0x07] + [UInt8](repeating: 0x78, count: 997)
            let whole = RawHTTP2.message(length: health.count, health)
            let first = Array(whole[0..<605])
            let rest = Array(whole[605...])
            func start(_ h2: RawHTTP2, stream: UInt32) -> Bool {
                h2.sendRequestHeaders(stream: stream, path: "/proto.Health/Check", endStream: false)
                    && h2.send(type: RawHTTP2.data, flags: 0, stream: stream, first)
            }
            let a = try RawHTTP2(port: port)
            XCTAssertTrue(a.sendPreface())
            XCTAssertTrue(start(a, stream: 1))  // 605 held on a
            XCTAssertTrue(start(a, stream: 3))  // 1,210 > 1,100: the one read second is refused
            var refusedStream: UInt32?
            let oneOfTwoRefused = await eventually(timeout: 15, interval: .milliseconds(50)) {
                for s in [UInt32(1), 3] where a.status(stream: s, within: 0.01) != nil { refusedStream = s }
                return refusedStream != nil
            }
            XCTAssertTrue(oneOfTwoRefused, "one of the two streams is refused")
            guard let refused = refusedStream else { return }
            let kept: UInt32 = refused == 1 ? 3 : 1
            let perConnection = a.status(stream: refused, within: 0)
            XCTAssertEqual(perConnection?.code, "8")
            XCTAssertTrue(
                perConnection?.message?.contains("grpc.max_pending_bytes_per_connection (1100)") ?? false, "\(String(describing: perConnection))")
            // The other finishes its message: answered, and its 605 bytes are given back ...
            XCTAssertTrue(a.send(type: RawHTTP2.data, flags: RawHTTP2.endStream, stream: kept, rest))
            XCTAssertTrue(a.replied(stream: kept, within: 10))
            // ... so a whole message fits again on the same connection.
            XCTAssertTrue(start(a, stream: 5))
            XCTAssertTrue(a.send(type: RawHTTP2.data, flags: RawHTTP2.endStream, stream: 5, rest))
            XCTAssertTrue(a.replied(stream: 5, within: 10), "the budget was released by the finished message")
            XCTAssertNil(a.received.first { $0.stream == kept && $0.fields["grpc-status"] == "8" })

            // The port's total: three connections each start a stream holding 605 bytes; whichever the
            // gateway reads third takes the port to 1,815 > 1,800 and is refused, the other two hold on.
            let three = [try RawHTTP2(port: port), try RawHTTP2(port: port), try RawHTTP2(port: port)]
            for h in three { XCTAssertTrue(h.sendPreface() && start(h, stream: 1)) }
            var refusedIndex: Int?
            let oneRefused = await eventually(timeout: 15, interval: .milliseconds(50)) {
                for (k, h) in three.enumerated() where h.status(stream: 1, within: 0.01) != nil { refusedIndex = k }
                return refusedIndex != nil
            }
            XCTAssertTrue(oneRefused, "one of the three streams is refused")
            guard let k = refusedIndex else { return }
            let total = three[k].status(stream: 1, within: 0)
            XCTAssertEqual(total?.code, "8")
            XCTAssertTrue(total?.message?.contains("grpc.max_pending_bytes (1800)") ?? false, "\(String(describing: total))")
            // One of the others closes: its bytes are given back and the refused one's next stream fits.
            let d = three[k]
            three[(k + 1) % 3].connection.shutdown()
            var stream: UInt32 = 3
            let servedAgain = await eventually(timeout: 15, interval: .milliseconds(200)) {
                defer { stream += 2 }
                guard start(d, stream: stream), d.send(type: RawHTTP2.data, flags: RawHTTP2.endStream, stream: stream, rest) else {
                    return false
                }
                return d.replied(stream: stream, within: 2)
            }
            XCTAssertTrue(servedAgain, "a closed connection's unfinished bytes are given back")
        }
    }

    /// core.max_connections_per_address (2): a third connection from 127.0.0.1 is closed at once on
    /// the gRPC and on the HTTP port, while 127.0.0.2 is served; refused connections do not use up
    /// core.max_connections (4 here); a closed connection frees its address's place.
    func testConnectionsPastThePerAddressCapAreClosedAtOnce() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let logs = CapturedLogs()
        let environment = ["PUSHGATE_CORE_MAX_CONNECTIONS_PER_ADDRESS": "2", "PUSHGATE_CORE_MAX_CONNECTIONS": "4"]
        try await GorushRPCTests.withRPC(env, environment: environment, logger: logs.logger) { client, http, _, grpcPort in
            let httpPort = try XCTUnwrap(http.port)
            // The test's own grpc-swift client holds one of 127.0.0.1's two gRPC places.
            let health = try await GorushRPCLimitsTests.health(client, timeout: .seconds(10))
            XCTAssertEqual(health, .serving)
            let second = try RawHTTP2(port: grpcPort)
            XCTAssertTrue(second.sendPreface())
            XCTAssertNotNil(second.waitFor(stream: 0, within: 10) { $0.type == RawHTTP2.settings }, "the second is served")
            var refused: [RawConnection] = []
            for _ in 0..<8 {
                let extra = try RawConnection(port: grpcPort)
                extra.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                refused.append(extra)
            }
            for (k, extra) in refused.enumerated() { XCTAssertTrue(extra.closedByServer(within: 10), "gRPC connection \(k + 3) is closed") }
            let other = try RawHTTP2(port: grpcPort, from: "127.0.0.2")
            XCTAssertTrue(other.sendPreface())
            XCTAssertTrue(other.sendRequestHeaders(stream: 1, path: "/proto.Health/Check", endStream: false))
            XCTAssertTrue(other.send(type: RawHTTP2.data, flags: RawHTTP2.endStream, stream: 1, RawHTTP2.message(length: 0, [])))
            XCTAssertTrue(other.replied(stream: 1, within: 10), "another address is served on the gRPC port")

            // HTTP: two idle connections from 127.0.0.3 (the test's HTTP client holds one from
            // 127.0.0.1), then more from there closed at once. Each idle one answers a request first
            // (so both are accepted and counted), then stays open.
            let idle = [try RawConnection(port: httpPort, from: "127.0.0.3"), try RawConnection(port: httpPort, from: "127.0.0.3")]
            for c in idle {
                c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                XCTAssertTrue(c.receive(within: 10).hasPrefix("HTTP/1.1 200"))
            }
            for k in 0..<8 {
                let extra = try RawConnection(port: httpPort, from: "127.0.0.3")
                extra.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                XCTAssertTrue(extra.closedByServer(within: 10), "HTTP connection \(k + 3) is closed at once")
            }
            // 8 connections were refused past core.max_connections (4): had they kept their global
            // places, 127.0.0.2 would wait in the backlog.
            for _ in 0..<2 {
                let fromOther = try RawConnection(port: httpPort, from: "127.0.0.2")
                fromOther.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                XCTAssertTrue(fromOther.receive(within: 10).hasPrefix("HTTP/1.1 200"), "another address is served on the HTTP port")
            }
            // One of 127.0.0.3's idle connections closes: its place is free again.
            idle[0].shutdown()
            let servedAgain = await eventually(timeout: 15, interval: .milliseconds(200)) {
                guard let again = try? RawConnection(port: httpPort, from: "127.0.0.3") else { return false }
                again.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                return again.receive(within: 2).hasPrefix("HTTP/1.1 200")
            }
            XCTAssertTrue(servedAgain)
            let warnings = logs.messages.filter { $0.contains("core.max_connections_per_address") }
            XCTAssertEqual(warnings.filter { $0.hasPrefix("gRPC port") }.count, 1, "one warning a minute: \(warnings)")
            XCTAssertEqual(warnings.filter { $0.hasPrefix("HTTP port") }.count, 1, "one warning a minute: \(warnings)")
            _ = idle[1]
        }
    }

    /// `grpc:` is read by the gRPC way in: a value that cannot work stops the start naming the key,
    /// and a reload bringing one is refused (the running configuration kept).
    func testGRPCSettingsAreCheckedAtStartAndOnReload() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pushgate-grpc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("config.yml").path
        let environment = ["PUSHGATE_QUEUE_ENGINE": "memory"]
        func write(_ grpc: String) throws { try "core:\n  port: 18088\ngrpc:\n\(grpc)".write(toFile: path, atomically: true, encoding: .utf8) }
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        func gateway() throws -> Gateway {
            try GatewayBuilder.build(
                raw: try RawConfig.load(path: path, environment: environment), logger: logger,
                reloadSource: { try RawConfig.load(path: path, environment: environment) })
        }

        try write("  enabled: true\n  port: 18088\n")
        let conflicting = try gateway()
        XCTAssertThrowsError(try GorushRPCServer.make(gateway: conflicting)) {
            XCTAssertEqual("\($0)", "config error: grpc.port: 18088 is also core.port; gRPC needs a port of its own")
        }
        await conflicting.runShutdownHooks()

        try write("  enabled: false\n")
        let running = try gateway()
        XCTAssertNil(try GorushRPCServer.make(gateway: running), "grpc.enabled: false serves nothing")
        try write("  enabled: false\n  max_message_bytes: 4096\n  max_pending_bytes_per_connection: 4096\n")
        do {
            _ = try await running.reload()
            XCTFail("a reload with grpc.max_pending_bytes_per_connection below a message is refused")
        } catch {
            XCTAssertTrue("\(error)".contains("grpc.max_pending_bytes_per_connection"), "\(error)")
        }
        XCTAssertEqual(running.raw.values["grpc.max_message_bytes"], .int(1 << 20), "the running configuration is kept")
        try write("  enabled: false\n  max_message_bytes: 4096\n")
        let summary = try await running.reload()
        XCTAssertTrue(summary.needsRestart.contains("grpc.max_message_bytes"), "\(summary.needsRestart)")
        await running.runShutdownHooks()
    }

    /// Every new key is range-checked, with an error naming it.
    func testNewLimitsAreRangeChecked() throws {
        func problem(_ yaml: String) -> String? {
            do {
                let raw = try RawConfig(yaml: yaml, environment: [:])
                _ = try GRPCSettings(raw.section("grpc"), corePort: try GatewaySettings(raw).port)
                return nil
            } catch {
                return "\(error)"
            }
        }
        XCTAssertTrue(problem("core:\n  max_connections_per_address: 0\n")?.contains("core.max_connections_per_address") ?? false)
        XCTAssertTrue(problem("grpc:\n  max_message_bytes: 100\n")?.contains("grpc.max_message_bytes") ?? false)
        XCTAssertTrue(problem("grpc:\n  max_message_bytes: 1000000000\n")?.contains("grpc.max_message_bytes") ?? false)
        XCTAssertTrue(
            problem("grpc:\n  max_message_bytes: 2048\n  max_pending_bytes_per_connection: 2048\n")?.contains(
                "grpc.max_pending_bytes_per_connection") ?? false)
        XCTAssertTrue(
            problem("grpc:\n  max_pending_bytes_per_connection: 8000000\n  max_pending_bytes: 4000000\n")?.contains(
                "grpc.max_pending_bytes") ?? false)
        for bad in ["1.1", "1.0", "1", "tls1.2", ""] {
            XCTAssertEqual(
                problem("core:\n  tls_min_version: \"\(bad)\"\n"),
                #"config error: core.tls_min_version: ""# + bad + #"" is not accepted: "1.2" or "1.3""#)
        }
        XCTAssertNil(problem("core:\n  tls_min_version: \"1.3\"\n"))
        let raw = try RawConfig(yaml: "", environment: [:])
        let defaults = try GatewaySettings(raw)
        XCTAssertEqual(defaults.maxConnectionsPerAddress, 256)
        XCTAssertEqual(try GRPCSettings(raw.section("grpc"), corePort: defaults.port).maxMessageBytes, 1 << 20)
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
/// (frames of RFC 9113 §4.1, HPACK literals without Huffman coding), and the frames it gets back
/// (header blocks decoded with NIOHPACK, in order, as the connection's one decoder must).
final class RawHTTP2 {
    static let data: UInt8 = 0x0
    static let headers: UInt8 = 0x1
    static let rstStream: UInt8 = 0x3
    static let settings: UInt8 = 0x4
    static let goawayType: UInt8 = 0x7
    static let endStream: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4

    struct Frame {
        var type: UInt8
        var flags: UInt8
        var stream: UInt32
        var payload: [UInt8]
        /// A HEADERS frame's fields (name: first value).
        var fields: [String: String] = [:]
    }

    let connection: RawConnection
    private var buffer: [UInt8] = []
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private(set) var goaway = false
    /// Every frame read so far.
    private(set) var received: [Frame] = []

    init(port: Int, from source: String? = nil) throws {
        connection = try RawConnection(port: port, from: source)
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

    /// A gRPC request's HEADERS frame (plaintext), END_HEADERS set, with `extra` fields (metadata).
    func sendRequestHeaders(stream: UInt32, path: String, endStream: Bool, extra: [(String, String)] = []) -> Bool {
        let fields =
            [
                (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
                ("content-type", "application/grpc"), ("te", "trailers"),
            ] + extra
        var block: [UInt8] = []
        for (name, value) in fields {
            // Literal header field without indexing, new name (RFC 7541 §6.2.2); every length < 127.
            block += [0x00, UInt8(name.utf8.count)] + Array(name.utf8) + [UInt8(value.utf8.count)] + Array(value.utf8)
        }
        return send(type: Self.headers, flags: Self.endHeaders | (endStream ? Self.endStream : 0), stream: stream, block)
    }

    /// A gRPC message: its 5-byte prefix (uncompressed, `length`) and `body` (may be a part of it).
    static func message(length: Int, _ body: [UInt8]) -> [UInt8] {
        [0, UInt8((length >> 24) & 0xff), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff)] + body
    }

    /// The frames that arrive within `seconds`.
    func read(within seconds: Double) -> [Frame] {
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
        var frames: [Frame] = []
        while buffer.count >= 9 {
            let length = Int(buffer[0]) << 16 | Int(buffer[1]) << 8 | Int(buffer[2])
            guard buffer.count >= 9 + length else { break }
            let stream = UInt32(buffer[5] & 0x7f) << 24 | UInt32(buffer[6]) << 16 | UInt32(buffer[7]) << 8 | UInt32(buffer[8])
            var frame = Frame(type: buffer[3], flags: buffer[4], stream: stream, payload: Array(buffer[9..<(9 + length)]))
            if frame.type == Self.headers {
                // No padding or priority flags from NIO's server: the payload is the header block.
                var block = ByteBuffer(bytes: frame.payload)
                if let decoded = try? decoder.decodeHeaders(from: &block) {
                    for (name, value, _) in decoded where frame.fields[name] == nil { frame.fields[name] = value }
                }
            }
            if frame.type == Self.goawayType { goaway = true }
            frames.append(frame)
            buffer.removeFirst(9 + length)
        }
        received += frames
        return frames
    }

    /// Reads until a frame on `stream` matching `what` arrives (or `seconds` pass): that frame.
    func waitFor(stream: UInt32, within seconds: Double, _ what: (Frame) -> Bool) -> Frame? {
        if let seen = received.first(where: { $0.stream == stream && what($0) }) { return seen }
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let f = read(within: 0.1).first(where: { $0.stream == stream && what($0) }) { return f }
        }
        return nil
    }

    /// The trailers-only answer (HEADERS with END_STREAM) of `stream`, if it comes within `seconds`.
    func status(stream: UInt32, within seconds: Double) -> (code: String?, message: String?)? {
        guard let f = waitFor(stream: stream, within: seconds, { $0.type == Self.headers && $0.flags & Self.endStream != 0 }) else {
            return nil
        }
        return (f.fields["grpc-status"], f.fields["grpc-message"]?.removingPercentEncoding)
    }

    /// Whether a DATA frame (a reply message) came on `stream` within `seconds`.
    func replied(stream: UInt32, within seconds: Double) -> Bool {
        waitFor(stream: stream, within: seconds) { $0.type == Self.data } != nil
    }
}

/// `RPCStreamAdmissionHandler`'s accounting of unfinished-message bytes, frame by frame on an
/// `EmbeddedChannel` (no keys configured: every stream is admitted).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class RPCStreamAdmissionAccountingTests: XCTestCase {
    func makeChannel(connection: RPCPendingBudget, total: RPCPendingBudget) throws -> EmbeddedChannel {
        let handler = RPCStreamAdmissionHandler(
            authorize: { _, _, _ in nil }, maxMessageBytes: 1000, connection: connection, total: total)
        let channel = EmbeddedChannel(handler: handler)
        let headers: HPACKHeaders = [":method": "POST", ":path": "/proto.Health/Check", "content-type": "application/grpc"]
        try channel.writeInbound(HTTP2Frame.FramePayload.headers(.init(headers: headers)))
        _ = try channel.readInbound(as: HTTP2Frame.FramePayload.self)
        return channel
    }

    func data(_ bytes: [UInt8], end: Bool = false) -> HTTP2Frame.FramePayload {
        .data(.init(data: .byteBuffer(ByteBuffer(bytes: bytes)), endStream: end))
    }

    func testBytesAreHeldUntilTheMessageCompletesAcrossFrames() throws {
        let connection = RPCPendingBudget(cap: 10_000)
        let total = RPCPendingBudget(cap: 10_000)
        let channel = try makeChannel(connection: connection, total: total)
        // The prefix split over two frames, then the payload (300 bytes) in two.
        try channel.writeInbound(data([0, 0, 0]))
        XCTAssertEqual(connection.current, 3)
        try channel.writeInbound(data([1, 44] + [UInt8](repeating: 1, count: 100)))
        XCTAssertEqual(connection.current, 105)
        XCTAssertEqual(total.current, 105)
        try channel.writeInbound(data([UInt8](repeating: 1, count: 200)))
        XCTAssertEqual(connection.current, 0, "the message is complete: its bytes are given back")
        // Two whole messages and the start of a third in one frame: only the third's bytes are held.
        let two = RawHTTP2.message(length: 2, [7, 7]) + RawHTTP2.message(length: 1, [7])
        try channel.writeInbound(data(two + RawHTTP2.message(length: 50, [7, 7, 7])))
        XCTAssertEqual(connection.current, 8)
        XCTAssertEqual(total.current, 8)
        // The stream ends: what it held is given back.
        try channel.close().wait()
        XCTAssertEqual(connection.current, 0)
        XCTAssertEqual(total.current, 0)
    }

    func testTheResponseEndingGivesTheBytesBack() throws {
        let connection = RPCPendingBudget(cap: 10_000)
        let total = RPCPendingBudget(cap: 10_000)
        let channel = try makeChannel(connection: connection, total: total)
        try channel.writeInbound(data(RawHTTP2.message(length: 500, [UInt8](repeating: 1, count: 200))))
        XCTAssertEqual(connection.current, 205)
        // The RPC answered (trailers-only, END_STREAM) before reading the message: grpc-swift drops the rest.
        try channel.writeOutbound(HTTP2Frame.FramePayload.headers(.init(headers: [":status": "200", "grpc-status": "3"], endStream: true)))
        XCTAssertEqual(connection.current, 0)
        try channel.writeInbound(data([UInt8](repeating: 1, count: 300)))
        XCTAssertEqual(connection.current, 0, "nothing is counted once the response ended")
    }

    func testAStreamOverABudgetIsRefusedAndHoldsNothing() throws {
        let connection = RPCPendingBudget(cap: 300)
        let total = RPCPendingBudget(cap: 10_000)
        XCTAssertTrue(connection.reserve(200))  // another stream's bytes on the same connection
        let channel = try makeChannel(connection: connection, total: total)
        try channel.writeInbound(data(RawHTTP2.message(length: 900, [UInt8](repeating: 1, count: 150))))
        XCTAssertNil(try channel.readInbound(as: HTTP2Frame.FramePayload.self), "the frame is not passed on")
        let answer = try channel.readOutbound(as: HTTP2Frame.FramePayload.self)
        guard case .headers(let trailers) = answer else { return XCTFail("no trailers-only answer: \(String(describing: answer))") }
        XCTAssertTrue(trailers.endStream)
        XCTAssertEqual(trailers.headers.first(name: "grpc-status"), "8")
        XCTAssertEqual(connection.current, 200, "only the other stream's bytes")
        XCTAssertEqual(total.current, 0)
        // An announced length over grpc.max_message_bytes (1000 here) is refused on the prefix.
        let other = try makeChannel(connection: RPCPendingBudget(cap: 10_000), total: total)
        try other.writeInbound(data(RawHTTP2.message(length: 1001, [])))
        guard case .headers(let tooLarge) = try other.readOutbound(as: HTTP2Frame.FramePayload.self) else { return XCTFail() }
        XCTAssertEqual(tooLarge.headers.first(name: "grpc-status"), "8")
        XCTAssertEqual(total.current, 0)
    }
}
