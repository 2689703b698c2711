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

        func execute(_ path: String) -> Box { self.execute(HTTP2Request(path: path)) }

        func execute(_ request: HTTP2Request) -> Box {
            let box = Box()
            self.core.execute(request).whenComplete { box.result = $0 }
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

    /// The pool checks the header fields it sends (swift-nio-http2's own validation is off): a request
    /// with a field HTTP/2 forbids is never written, fails naming the field, and frees its slot.
    func testRequestWithAForbiddenFieldIsNotSent() throws {
        let h = Harness()
        _ = h.execute("/warm")
        let c0 = try h.establish(0, maxStreams: 1)
        XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [1])
        try respond(c0, stream: 1)
        let cases: [(HTTP2Request, String)] = [
            (HTTP2Request(path: "/a", headers: [("apns-topic", "com.example\r\nx-injected: 1")]), "apns-topic"),
            (HTTP2Request(path: "/a", headers: [("apns-topic", " padded")]), "apns-topic"),
            (HTTP2Request(path: "/a", headers: [("bad name", "v")]), "bad name"),
            (HTTP2Request(path: "/a", headers: [("x-nul", "a\u{0}b")]), "x-nul"),
            (HTTP2Request(path: "/a", headers: [("te", "gzip")]), "te"),
            (HTTP2Request(path: "/a b"), ":path"),
            (HTTP2Request(path: "no-slash"), ":path"),
            (HTTP2Request(method: "PO ST", path: "/a"), ":method"),
        ]
        for (request, field) in cases {
            let box = h.execute(request)
            XCTAssertEqual(box.error?.code, .invalidRequest, "\(request.headers) \(request.path)")
            XCTAssertTrue(box.error?.detail.contains(field) == true, "\(box.error?.detail ?? "") names \(field)")
            XCTAssertEqual(box.error?.wasNotProcessed, true)
            XCTAssertEqual(try sentRequests(c0).count, 0, "nothing written for \(field)")
        }
        // Uppercase names are lowercased, connection-specific ones dropped, as before; the one stream
        // the server allows was freed by each refused request.
        let ok = h.execute(HTTP2Request(path: "/b", headers: [("Apns-Topic", "com.example"), ("connection", "close"), ("te", "trailers")]))
        var sent: [HPACKHeaders] = []
        while let frame = try c0.readOutbound(as: HTTP2Frame.self) {
            if case .headers(let hd) = frame.payload { sent.append(hd.headers) }
        }
        XCTAssertEqual(sent.count, 1)
        XCTAssertEqual(sent.first?.first(name: "apns-topic"), "com.example")
        XCTAssertNil(sent.first?.first(name: "connection"))
        try respond(c0, stream: 3)
        XCTAssertEqual(ok.status, 200)
    }

    /// A response header block HTTP/2 forbids fails its request (`malformedResponse`) and resets its
    /// stream with PROTOCOL_ERROR; the connection carries the next request.
    func testMalformedResponseHeadersResetTheStream() throws {
        let blocks: [(HPACKHeaders, String)] = [
            (HPACKHeaders([("apns-id", "x")]), "no :status"),
            (HPACKHeaders([(":status", "20")]), "bad :status"),
            (HPACKHeaders([(":status", "abc")]), "bad :status"),
            (HPACKHeaders([(":status", "200"), (":status", "200")]), "pseudo-header"),
            (HPACKHeaders([(":status", "200"), (":path", "/")]), "pseudo-header"),
            (HPACKHeaders([("apns-id", "x"), (":status", "200")]), "pseudo-header"),
            (HPACKHeaders([(":status", "200"), ("Apns-Id", "x")]), "bad header name"),
            (HPACKHeaders([(":status", "200"), ("connection", "close")]), "bad header name"),
            (HPACKHeaders([(":status", "200"), ("apns-id", "a\rb")]), "bad value of header apns-id"),
            (HPACKHeaders([(":status", "100")]), "bad :status 100"),
        ]
        let h = Harness()
        _ = h.execute("/warm")
        let c0 = try h.establish(0)
        XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [1])
        try respond(c0, stream: 1)
        var stream = 3
        for (block, reason) in blocks {
            let box = h.execute("/x")
            XCTAssertEqual(try sentRequests(c0).map { $0.0 }, [stream])
            try c0.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: block, endStream: true))))
            h.loop.run()
            XCTAssertEqual(box.error?.code, .malformedResponse, "\(block)")
            XCTAssertTrue(box.error?.detail.contains(reason) == true, "\(box.error?.detail ?? "nil") says \(reason)")
            var resets: [HTTP2ErrorCode] = []
            while let frame = try c0.readOutbound(as: HTTP2Frame.self) {
                if case .rstStream(let code) = frame.payload, Int(frame.streamID) == stream { resets.append(code) }
            }
            XCTAssertEqual(resets, [.protocolError])
            stream += 2
        }
        // An informational head, then the final one with a trailer: read as before.
        let box = h.execute("/y")
        _ = try sentRequests(c0)
        try c0.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: HPACKHeaders([(":status", "103")])))))
        try c0.writeInbound(
            HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: HPACKHeaders([(":status", "410"), ("apns-id", "abc")]))))
        )
        try c0.writeInbound(
            HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: HPACKHeaders([("x-trailer", "t")]), endStream: true))))
        h.loop.run()
        XCTAssertEqual(box.status, 410)
        if case .success(let r) = box.result {
            XCTAssertEqual(r.header("apns-id"), "abc")
            XCTAssertEqual(r.header("x-trailer"), "t")
        }
        // A trailer block with a pseudo-header is malformed too.
        let bad = h.execute("/z")
        _ = try sentRequests(c0)
        stream += 2
        try c0.writeInbound(HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: HPACKHeaders([(":status", "200")])))))
        try c0.writeInbound(
            HTTP2Frame(streamID: HTTP2StreamID(stream), payload: .headers(.init(headers: HPACKHeaders([(":status", "200")]), endStream: true))))
        h.loop.run()
        XCTAssertEqual(bad.error?.code, .malformedResponse)
    }
}
