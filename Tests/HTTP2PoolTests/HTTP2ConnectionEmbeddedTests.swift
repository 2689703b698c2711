import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import XCTest

@testable import HTTP2Pool

/// Connection-level tests: the pool core and its connection handler on `EmbeddedChannel`s, the
/// server's frames written by hand. No sockets, no sleeps.
final class HTTP2ConnectionEmbeddedTests: XCTestCase {
    /// The pool core with a connector that hands every new connection's handler to the test.
    final class Harness: @unchecked Sendable {
        let loop = EmbeddedEventLoop()
        private let opened = NIOLockedValueBox<[HTTP2ClientConnectionHandler]>([])
        var core: HTTP2PoolCore!

        init(connectionsPerTarget: Int = 1) {
            var configuration = HTTP2PoolConfiguration()
            configuration.connectionsPerTarget = connectionsPerTarget
            self.core = HTTP2PoolCore(
                target: HTTP2Target(scheme: "http", host: "push.example", port: 80),
                configuration: configuration,
                eventLoopGroup: self.loop,
                logger: Logger(label: "test"),
                connector: { [opened] core, id, eventLoop, _ in
                    opened.withLockedValue { $0.append(core.makeHandler(id: id, eventLoop: eventLoop)) }
                }
            )
        }

        var handlers: [HTTP2ClientConnectionHandler] { self.opened.withLockedValue { $0 } }

        /// Puts connection `index` on a channel and completes its preface (server SETTINGS).
        func establish(_ index: Int, maxStreams: Int = 100) throws -> EmbeddedChannel {
            let channel = EmbeddedChannel(handler: self.handlers[index], loop: self.loop)
            try channel.writeInbound(
                HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: maxStreams)])))
            )
            self.loop.run()
            return channel
        }

        func execute(_ path: String) -> Box {
            let box = Box()
            self.core.execute(HTTP2Request(path: path)).whenComplete { box.result = $0 }
            self.loop.run()
            return box
        }
    }

    final class Box: @unchecked Sendable {
        var result: Result<HTTP2Response, any Error>? = nil
        var status: Int? { if case .success(let r) = self.result { return r.status } else { return nil } }
        var error: HTTP2PoolError? {
            if case .failure(let e) = self.result { return e as? HTTP2PoolError } else { return nil }
        }
    }

    /// Stream IDs and paths of the HEADERS frames the client wrote.
    func sentRequests(_ channel: EmbeddedChannel) throws -> [(Int, String)] {
        var out: [(Int, String)] = []
        while let frame = try channel.readOutbound(as: HTTP2Frame.self) {
            if case .headers(let h) = frame.payload {
                out.append((Int(frame.streamID), h.headers.first(name: ":path") ?? ""))
            }
        }
        return out
    }

    func respond(_ channel: EmbeddedChannel, stream: Int, status: Int = 200) throws {
        let headers = HPACKHeaders([(":status", String(status))])
        try channel.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: headers, endStream: true))))
    }

    func testRequestResponseOnOneStream() throws {
        let h = Harness()
        let a = h.execute("/a")
        XCTAssertEqual(h.handlers.count, 1, "the first request opens a connection")
        XCTAssertNil(a.result)
        let channel = try h.establish(0)
        XCTAssertEqual(try sentRequests(channel).map { $0.0 }, [1])
        try respond(channel, stream: 1, status: 200)
        XCTAssertEqual(a.status, 200)
        XCTAssertTrue(h.core.isIdle)
    }

    func testGoAwayRequeuesOnlyStreamsAboveLastStreamID() throws {
        let h = Harness()
        let a = h.execute("/a")
        let b = h.execute("/b")
        let c0 = try h.establish(0)
        XCTAssertEqual(try sentRequests(c0).map { $0.1 }, ["/a", "/b"])
        // The server processes stream 1 and refuses stream 3.
        try c0.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: 1, errorCode: .noError, opaqueData: nil)))
        h.loop.run()
        XCTAssertNil(b.result, "stream 3 was not processed: re-queued, not failed")
        XCTAssertEqual(h.handlers.count, 2, "a replacement connection")
        let c1 = try h.establish(1)
        XCTAssertEqual(try sentRequests(c1).map { $0.1 }, ["/b"])
        try respond(c1, stream: 1)
        XCTAssertEqual(b.status, 200)
        // Stream 1 completes on the draining connection, which then closes.
        let closed = NIOLockedValueBox(false)
        c0.closeFuture.whenComplete { _ in closed.withLockedValue { $0 = true } }
        XCTAssertFalse(closed.withLockedValue { $0 })
        try respond(c0, stream: 1)
        h.loop.run()
        XCTAssertEqual(a.status, 200)
        XCTAssertTrue(closed.withLockedValue { $0 })
    }

    func testRefusedStreamIsRequeuedOtherResetsAreReturned() throws {
        let h = Harness()
        let a = h.execute("/a")
        let c0 = try h.establish(0)
        XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [1])
        try c0.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.refusedStream)))
        h.loop.run()
        XCTAssertNil(a.result)
        XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [3], "sent again on a new stream")
        try respond(c0, stream: 3)
        XCTAssertEqual(a.status, 200)

        // Any other reset goes back to the caller, typed, for its retry policy.
        let b = h.execute("/b")
        XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [5])
        try c0.writeInbound(HTTP2Frame(streamID: 5, payload: .rstStream(.internalError)))
        XCTAssertEqual(b.error?.code, .streamReset)
        XCTAssertEqual(b.error?.detail, "INTERNAL_ERROR")
    }

    func testRefusedStreamRequeuesAreBounded() throws {
        let h = Harness()
        let a = h.execute("/a")
        let c0 = try h.establish(0)
        var stream = 1
        for _ in 0..<4 {
            XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [stream])
            try c0.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .rstStream(.refusedStream)))
            h.loop.run()
            stream += 2
        }
        XCTAssertEqual(a.error?.code, .streamRefused)
        XCTAssertEqual(a.error?.isRetryable, true)
    }

    func testConnectionLostWithAStreamInFlightFailsItWithoutRequeue() throws {
        let h = Harness()
        let a = h.execute("/a")
        let c0 = try h.establish(0)
        _ = try sentRequests(c0)
        c0.pipeline.fireChannelInactive()
        h.loop.run()
        // Maybe processed: the pool does not resend it; the retry policy decides.
        XCTAssertEqual(a.error, .connectionClosed)
        XCTAssertEqual(h.handlers.count, 1, "nothing waiting: no reconnect")
    }

    func testMaxConcurrentStreamsQueuesThenRaisedStartsTheRest() throws {
        let h = Harness()
        let boxes = (0..<3).map { h.execute("/\($0)") }
        let c0 = try h.establish(0, maxStreams: 1)
        XCTAssertEqual(try sentRequests(c0).map { $0.1 }, ["/0"])
        try c0.writeInbound(
            HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: 5)])))
        )
        h.loop.run()
        XCTAssertEqual(try sentRequests(c0).map { $0.1 }, ["/1", "/2"])
        for s in [1, 3, 5] { try respond(c0, stream: s) }
        XCTAssertEqual(boxes.map(\.status), [200, 200, 200])
    }
}
