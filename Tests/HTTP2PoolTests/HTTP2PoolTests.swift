import HTTP2Pool
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import TestSupport
import XCTest

final class HTTP2PoolTests: XCTestCase {
    static let pki: TestPKI = try! TestPKI.generate()

    var group: MultiThreadedEventLoopGroup!

    override func setUp() {
        super.setUp()
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    }

    override func tearDown() {
        try? self.group.syncShutdownGracefully()
        self.group = nil
        super.tearDown()
    }

    // MARK: helpers

    func makeServer(
        maxConcurrentStreams: Int = 1000,
        tls: Bool = true,
        syncHandler: @escaping MockHTTPServer.SyncHandler
    ) async throws -> MockHTTPServer {
        var options = MockHTTPServer.Options()
        options.tls = tls ? try Self.pki.serverTLSConfiguration() : nil
        options.maxConcurrentStreams = maxConcurrentStreams
        let server = MockHTTPServer(options: options, eventLoopGroup: self.group, syncHandler: syncHandler)
        try await server.start()
        return server
    }

    func makeServer(
        maxConcurrentStreams: Int = 1000,
        handler: @escaping MockHTTPServer.Handler
    ) async throws -> MockHTTPServer {
        var options = MockHTTPServer.Options()
        options.tls = try Self.pki.serverTLSConfiguration()
        options.maxConcurrentStreams = maxConcurrentStreams
        let server = MockHTTPServer(options: options, eventLoopGroup: self.group, handler: handler)
        try await server.start()
        return server
    }

    func makePool(
        _ server: MockHTTPServer,
        _ configure: (inout HTTP2PoolConfiguration) throws -> Void = { _ in }
    ) throws -> HTTP2ConnectionPool {
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try Self.pki.clientTLSConfiguration()
        // Generous: a timeout here is a failure, and the suite must pass on a loaded machine.
        config.requestTimeout = .seconds(300)
        config.connectTimeout = .seconds(60)
        try configure(&config)
        let target = try XCTUnwrap(HTTP2Target(url: server.baseURL + "/ignored"))
        return HTTP2ConnectionPool(target: target, configuration: config, eventLoopGroup: self.group)
    }

    func body(_ s: String) -> ByteBuffer { ByteBuffer(string: s) }

    // MARK: tests

    func testTargetParsing() throws {
        let t = try XCTUnwrap(HTTP2Target(url: "https://localhost:8443/any/path"))
        XCTAssertEqual(t, HTTP2Target(scheme: "https", host: "localhost", port: 8443))
        XCTAssertEqual(t.origin, "https://localhost:8443")
        XCTAssertEqual(HTTP2Target(url: "https://api.push.apple.com/3/device/x")?.origin, "https://api.push.apple.com")
        XCTAssertEqual(HTTP2Target(url: "https://api.push.apple.com/3/device/x")?.port, 443)
        XCTAssertEqual(HTTP2Target(url: "http://example.com")?.port, 80)
        XCTAssertEqual(HTTP2Target(url: "https://[::1]:9000/x")?.host, "::1")
        XCTAssertEqual(HTTP2Target(url: "https://[::1]:9000/x")?.origin, "https://[::1]:9000")
        XCTAssertNil(HTTP2Target(url: "ftp://example.com"))
        XCTAssertNil(HTTP2Target(url: "https://:80/"))
        XCTAssertNil(HTTP2Target(url: "https://host:notaport/"))
    }

    func testRoundTrip() async throws {
        let seen = NIOLockedValueBox<MockRequest?>(nil)
        let server = try await makeServer { request in
            seen.withLockedValue { $0 = request }
            return MockResponse(
                status: 201,
                headers: [("apns-id", "abc-123"), ("X-Echo-Path", request.path)],
                body: Array("echo:".utf8) + request.body
            )
        }
        let pool = try makePool(server)
        let response = try await pool.execute(
            HTTP2Request(
                method: "POST",
                path: "/3/device/abcd",
                headers: [("apns-topic", "com.example.app"), ("apns-push-type", "alert")],
                body: body(#"{"aps":{"alert":"hi"}}"#)
            )
        )
        XCTAssertEqual(response.status, 201)
        XCTAssertEqual(response.header("apns-id"), "abc-123")
        XCTAssertEqual(response.header("APNS-ID"), "abc-123")
        XCTAssertEqual(response.header("x-echo-path"), "/3/device/abcd")
        XCTAssertNil(response.header("missing"))
        XCTAssertEqual(String(buffer: response.body), #"echo:{"aps":{"alert":"hi"}}"#)

        let request = try XCTUnwrap(seen.withLockedValue { $0 })
        XCTAssertEqual(request.method, "POST")
        XCTAssertEqual(request.path, "/3/device/abcd")
        XCTAssertEqual(request.header("apns-topic"), "com.example.app")
        XCTAssertEqual(request.header("apns-push-type"), "alert")
        XCTAssertEqual(request.header("host"), "127.0.0.1:\(server.port)")
        XCTAssertEqual(request.header("content-length"), "22")
        XCTAssertEqual(request.bodyString, #"{"aps":{"alert":"hi"}}"#)

        // A GET without body, and a second request on the same connection.
        let r2 = try await pool.execute(HTTP2Request(method: "GET", path: "/x")).get()
        XCTAssertEqual(r2.status, 201)
        XCTAssertEqual(String(buffer: r2.body), "echo:")
        XCTAssertEqual(pool.connectionsOpened, 1)
        XCTAssertEqual(server.connectionsAccepted, 1)
        await pool.shutdown()
        try await server.stop()
    }

    func testLargeBodiesFlowControl() async throws {
        // 300 KB each way: more than the 64 KB initial stream and connection windows.
        let big = [UInt8](repeating: UInt8(ascii: "z"), count: 300_000)
        let server = try await makeServer { request in
            MockResponse(status: 200, headers: [("x-request-length", String(request.body.count))], body: big)
        }
        let pool = try makePool(server) { $0.maxResponseBodyBytes = 1 << 20 }
        let upload = ByteBuffer(repeating: UInt8(ascii: "u"), count: 300_000)
        let futures = (0..<4).map { _ in pool.execute(HTTP2Request(path: "/big", body: upload)) }
        for f in futures {
            let r = try await f.get()
            XCTAssertEqual(r.body.readableBytes, big.count)
            XCTAssertEqual(r.header("x-request-length"), "300000")
        }
        await pool.shutdown()
        try await server.stop()
    }

    func testTwoThousandConcurrentRequestsShareConnections() async throws {
        // 500 streams per connection: 1000 in flight, the rest waits in the pool's queue.
        let server = try await makeServer(maxConcurrentStreams: 500) { request in
            MockResponse(status: 200, headers: [("x-conn", String(request.connectionID))], body: request.body)
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 2
            $0.maxConnectionsPerTarget = 2
            // Debug builds of swift-nio-http2 on a busy 2-core machine manage only a few hundred
            // requests/s; the timeout includes the time spent queued.
            $0.requestTimeout = .seconds(300)
        }
        let futures = (0..<2000).map { i in
            pool.execute(HTTP2Request(path: "/3/device/\(i)", headers: [("apns-topic", "t")], body: self.body("payload-\(i)")))
        }
        var connectionIDs = Set<String>()
        for (i, f) in futures.enumerated() {
            let r = try await f.get()
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual(String(buffer: r.body), "payload-\(i)")
            if let c = r.header("x-conn") { connectionIDs.insert(c) }
        }
        XCTAssertLessThanOrEqual(server.connectionsAccepted, 2)
        XCTAssertLessThanOrEqual(pool.connectionsOpened, 2)
        XCTAssertGreaterThanOrEqual(pool.connectionsOpened, 1)
        XCTAssertLessThanOrEqual(connectionIDs.count, 2)
        XCTAssertEqual(server.requestsHandled, 2000)
        XCTAssertEqual(pool.pendingRequests, 0)
        await pool.shutdown()
        try await server.stop()
    }

    func testMaxConcurrentStreamsOneThenRaised() async throws {
        struct Counters {
            var inFlight: [Int: Int] = [:]
            var maxInFlight: [Int: Int] = [:]
            var handled = 0
        }
        let counters = NIOLockedValueBox(Counters())
        let server = try await makeServer(maxConcurrentStreams: 1) { request in
            counters.withLockedValue { c in
                c.inFlight[request.connectionID, default: 0] += 1
                c.maxInFlight[request.connectionID] = max(c.maxInFlight[request.connectionID] ?? 0, c.inFlight[request.connectionID]!)
            }
            try? await Task.sleep(for: .milliseconds(10))
            counters.withLockedValue { c in
                c.inFlight[request.connectionID]! -= 1
                c.handled += 1
            }
            return MockResponse(status: 200)
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 2
            $0.maxConnectionsPerTarget = 2
        }
        let futures = (0..<200).map { i in pool.execute(HTTP2Request(path: "/\(i)")) }

        try await waitUntil { counters.withLockedValue { $0.handled } >= 10 }
        let maxWhileLimited = counters.withLockedValue { $0.maxInFlight }
        XCTAssertFalse(maxWhileLimited.isEmpty)
        for (conn, m) in maxWhileLimited {
            XCTAssertEqual(m, 1, "connection \(conn) had \(m) streams in flight while limited to 1")
        }
        counters.withLockedValue { $0.maxInFlight = [:] }
        server.setMaxConcurrentStreams(100)

        for f in futures {
            let r = try await f.get()
            XCTAssertEqual(r.status, 200)
        }
        let maxAfterRaise = counters.withLockedValue { $0.maxInFlight.values.max() ?? 0 }
        XCTAssertGreaterThan(maxAfterRaise, 1, "the raised limit was not used")
        XCTAssertLessThanOrEqual(maxAfterRaise, 100)
        XCTAssertLessThanOrEqual(server.connectionsAccepted, 2)
        await pool.shutdown()
        try await server.stop()
    }

    func testGoAwayThenNewConnection() async throws {
        let server = try await makeServer { request in
            MockResponse(status: 200, headers: [("x-conn", String(request.connectionID))])
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 1
            $0.maxConnectionsPerTarget = 1
        }
        let r1 = try await pool.execute(HTTP2Request(path: "/1"))
        XCTAssertEqual(r1.header("x-conn"), "1")
        XCTAssertEqual(pool.activeConnections, 1)

        server.sendGoAwayToAll()
        try await waitUntil { pool.activeConnections == 0 }

        let r2 = try await pool.execute(HTTP2Request(path: "/2"))
        XCTAssertEqual(r2.status, 200)
        XCTAssertEqual(r2.header("x-conn"), "2")
        XCTAssertEqual(pool.connectionsOpened, 2)
        XCTAssertEqual(server.connectionsAccepted, 2)
        await pool.shutdown()
        try await server.stop()
    }

    func testGoAwayRefusingInFlightStreamsRequeuesThem() async throws {
        let server = try await makeServer(maxConcurrentStreams: 50) { request in
            try? await Task.sleep(for: .milliseconds(5))
            return MockResponse(status: 200, headers: [("x-conn", String(request.connectionID))], body: Array(request.path.utf8))
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 1
            $0.maxConnectionsPerTarget = 1
        }
        let futures = (0..<300).map { i in pool.execute(HTTP2Request(path: "/\(i)")) }
        try await waitUntil { server.requestsHandled >= 60 }
        // last-stream-id below the streams in flight: those were "not processed" and must be retried.
        server.sendGoAwayToAll(refusingUnanswered: true)
        var conns = Set<String>()
        for (i, f) in futures.enumerated() {
            let r = try await f.get()
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual(String(buffer: r.body), "/\(i)")
            conns.insert(r.header("x-conn") ?? "?")
        }
        XCTAssertEqual(pool.connectionsOpened, 2)
        XCTAssertEqual(conns, ["1", "2"])
        await pool.shutdown()
        try await server.stop()
    }

    func testServerStoppedFailsFast() async throws {
        let server = try await makeServer { _ in MockResponse(status: 200) }
        let pool = try makePool(server) {
            $0.requestTimeout = .seconds(30)
            $0.reconnectBackoffInitial = .milliseconds(50)
        }
        _ = try await pool.execute(HTTP2Request(path: "/ok"))
        try await server.stop()

        let start = ContinuousClock.now
        do {
            _ = try await pool.execute(HTTP2Request(path: "/after-stop"))
            XCTFail("request to a stopped server succeeded")
        } catch let error as HTTP2PoolError {
            switch error.code {
            case .connectFailed, .connectionClosed: XCTAssertTrue(error.isRetryable)
            default: XCTFail("unexpected error \(error)")
            }
        }
        // Fails fast rather than hanging (the bound is far above any machine's connect time).
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(30))

        // Still failing fast on the next attempt (backoff does not turn into a hang).
        let start2 = ContinuousClock.now
        do {
            _ = try await pool.execute(HTTP2Request(path: "/again"))
            XCTFail("request to a stopped server succeeded")
        } catch let error as HTTP2PoolError {
            guard error.code == .connectFailed else { return XCTFail("unexpected error \(error)") }
        }
        XCTAssertLessThan(ContinuousClock.now - start2, .seconds(30))
        await pool.shutdown()
    }

    func testRequestTimeoutWithSlowHandler() async throws {
        let server = try await makeServer { request in
            if request.path == "/slow" {
                try? await Task.sleep(for: .seconds(60))
            }
            return MockResponse(status: 200)
        }
        let pool = try makePool(server) { $0.requestTimeout = .milliseconds(300) }
        let start = ContinuousClock.now
        do {
            _ = try await pool.execute(HTTP2Request(path: "/slow"))
            XCTFail("slow request did not time out")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error, .timeout)
            XCTAssertFalse(error.isRetryable)
        }
        let elapsed = ContinuousClock.now - start
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(250))
        XCTAssertLessThan(elapsed, .seconds(30), "the timeout, not the handler's minute")
        // The connection is still usable.
        let r = try await pool.execute(HTTP2Request(path: "/fast"))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(pool.connectionsOpened, 1)
        await pool.shutdown()
        try await server.stop()
    }

    func testPendingRequestsTimeOutWhenStreamsStayBusy() async throws {
        // One stream allowed, first request hangs: the queued one must time out, not hang.
        let server = try await makeServer(maxConcurrentStreams: 1) { _ in
            try? await Task.sleep(for: .seconds(3))
            return MockResponse(status: 200)
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 1
            $0.maxConnectionsPerTarget = 1
            $0.requestTimeout = .milliseconds(300)
        }
        let a: EventLoopFuture<HTTP2Response> = pool.execute(HTTP2Request(path: "/a"))
        let b: EventLoopFuture<HTTP2Response> = pool.execute(HTTP2Request(path: "/b"))
        for f in [a, b] {
            do {
                _ = try await f.get()
                XCTFail("expected timeout")
            } catch let error as HTTP2PoolError {
                XCTAssertEqual(error, .timeout)
            }
        }
        await pool.shutdown()
        try await server.stop()
    }

    func testTooManyPending() async throws {
        let server = try await makeServer(maxConcurrentStreams: 1) { _ in
            try? await Task.sleep(for: .milliseconds(200))
            return MockResponse(status: 200)
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 1
            $0.maxConnectionsPerTarget = 1
            $0.maxPendingRequests = 5
        }
        // Establish the connection so that exactly one stream is in flight.
        _ = try await pool.execute(HTTP2Request(path: "/warm"))
        let futures = (0..<7).map { i in pool.execute(HTTP2Request(path: "/\(i)")) }
        var ok = 0
        var tooMany = 0
        for f in futures {
            do {
                _ = try await f.get()
                ok += 1
            } catch HTTP2PoolError.tooManyPending {
                tooMany += 1
            }
        }
        XCTAssertEqual(ok, 6)  // 1 in flight + 5 pending
        XCTAssertEqual(tooMany, 1)
        await pool.shutdown()
        try await server.stop()
    }

    func testUntrustedCAFailsWithTLSError() async throws {
        let server = try await makeServer { _ in MockResponse(status: 200) }
        let otherPKI = try TestPKI.generate(commonName: "Some Other CA")
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try otherPKI.clientTLSConfiguration()
        let pool = HTTP2ConnectionPool(
            target: HTTP2Target(url: server.baseURL)!,
            configuration: config,
            eventLoopGroup: self.group
        )
        let start = ContinuousClock.now
        do {
            _ = try await pool.execute(HTTP2Request(path: "/x"))
            XCTFail("TLS to an untrusted server succeeded")
        } catch let error as HTTP2PoolError {
            guard error.code == .tls else { return XCTFail("expected .tls, got \(error)") }
            let message = error.detail
            XCTAssertFalse(message.isEmpty)
            XCTAssertFalse(error.isRetryable)
        }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(30))
        XCTAssertEqual(pool.connectionsOpened, 0)

        // The system-roots + extra-PEM helper trusts our dev CA.
        var good = HTTP2PoolConfiguration()
        good.tlsConfiguration = try HTTP2PoolConfiguration.tls(extraRootsPEM: [Self.pki.caCertificatePEM])
        let pool2 = HTTP2ConnectionPool(
            target: HTTP2Target(url: server.baseURL)!,
            configuration: good,
            eventLoopGroup: self.group
        )
        let r = try await pool2.execute(HTTP2Request(path: "/x"))
        XCTAssertEqual(r.status, 200)
        await pool.shutdown()
        await pool2.shutdown()
        try await server.stop()
    }

    func testPlaintextH2CPriorKnowledge() async throws {
        let server = try await makeServer(tls: false) { request in
            MockResponse(status: 202, body: request.body)
        }
        XCTAssertTrue(server.baseURL.hasPrefix("http://"))
        let pool = try makePool(server)
        let r = try await pool.execute(HTTP2Request(path: "/h2c", body: body("plain")))
        XCTAssertEqual(r.status, 202)
        XCTAssertEqual(String(buffer: r.body), "plain")
        await pool.shutdown()
        try await server.stop()
    }

    /// Requests beyond the streams of the open connections open more, up to the ceiling; once idle,
    /// those beyond the floor close and the floor stays.
    func testConnectionsOpenOnDemandAndIdleOnesCloseDownToTheFloor() async throws {
        let gate = NIOLockedValueBox(false)
        let server = try await makeServer(maxConcurrentStreams: 5) { request in
            while !gate.withLockedValue({ $0 }) { try? await Task.sleep(for: .milliseconds(5)) }
            return MockResponse(status: 200, headers: [("x-conn", String(request.connectionID))])
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 1
            $0.maxConnectionsPerTarget = 4
            $0.idleTimeout = .milliseconds(200)
        }
        // The first request settles the first connection's limit (5 streams).
        gate.withLockedValue { $0 = true }
        _ = try await pool.execute(HTTP2Request(path: "/first"))
        gate.withLockedValue { $0 = false }
        let futures = (0..<30).map { i in pool.execute(HTTP2Request(path: "/\(i)")) }
        // 5 streams taken, 25 waiting: more connections open (the ceiling is 4).
        try await waitUntil("connections opened for the waiting requests") { server.connectionsAccepted >= 2 }
        gate.withLockedValue { $0 = true }
        var conns = Set<String>()
        for f in futures {
            let r = try await f.get()
            XCTAssertEqual(r.status, 200)
            conns.insert(r.header("x-conn") ?? "?")
        }
        XCTAssertGreaterThan(conns.count, 1, "only one connection carried the load")
        XCTAssertLessThanOrEqual(server.connectionsAccepted, 4, "past the ceiling")
        XCTAssertLessThanOrEqual(pool.activeConnections, 4)
        // Idle: back to the floor, which stays and serves the next request.
        try await waitUntil("idle connections closed", timeout: 60) { pool.activeConnections == 1 && server.openConnections == 1 }
        let r = try await pool.execute(HTTP2Request(path: "/after"))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(pool.activeConnections, 1)
        await pool.shutdown()
        try await server.stop()
    }

    func testShutdownFailsPendingAndInFlight() async throws {
        let server = try await makeServer(maxConcurrentStreams: 1) { _ in
            try? await Task.sleep(for: .seconds(2))
            return MockResponse(status: 200)
        }
        let pool = try makePool(server) {
            $0.connectionsPerTarget = 1
            $0.maxConnectionsPerTarget = 1
        }
        let futures = (0..<3).map { i in pool.execute(HTTP2Request(path: "/\(i)")) }
        try await waitUntil { pool.activeConnections == 1 && pool.pendingRequests == 2 }
        await pool.shutdown()
        for f in futures {
            do {
                _ = try await f.get()
                XCTFail("expected shutdown error")
            } catch let error as HTTP2PoolError {
                XCTAssertEqual(error, .shutdown)
            }
        }
        do {
            _ = try await pool.execute(HTTP2Request(path: "/late"))
            XCTFail("expected shutdown error")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error, .shutdown)
        }
        try await server.stop()
    }

    func testPoolGroupOnePoolPerOrigin() async throws {
        let s1 = try await makeServer { _ in MockResponse(status: 200, body: Array("one".utf8)) }
        let s2 = try await makeServer { _ in MockResponse(status: 200, body: Array("two".utf8)) }
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try Self.pki.clientTLSConfiguration()
        let poolGroup = HTTP2PoolGroup(configuration: config, eventLoopGroup: self.group)
        let p1 = poolGroup.pool(for: HTTP2Target(url: s1.baseURL + "/a")!)
        let p1b = poolGroup.pool(for: HTTP2Target(url: s1.baseURL + "/b")!)
        let p2 = poolGroup.pool(for: HTTP2Target(url: s2.baseURL)!)
        XCTAssertTrue(p1 === p1b)
        XCTAssertFalse(p1 === p2)
        let r1 = try await p1.execute(HTTP2Request(path: "/"))
        let r2 = try await p2.execute(HTTP2Request(path: "/"))
        XCTAssertEqual(String(buffer: r1.body), "one")
        XCTAssertEqual(String(buffer: r2.body), "two")
        await poolGroup.shutdown()
        do {
            _ = try await p1.execute(HTTP2Request(path: "/"))
            XCTFail("expected shutdown")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error, .shutdown)
        }
        try await s1.stop()
        try await s2.stop()
    }

    // MARK: hostile servers

    func testResponseBodyIsCappedAndTheRestDropped() async throws {
        // 5 MiB answer; the pool keeps 64 KiB, resets the stream and stays usable.
        let huge = [UInt8](repeating: UInt8(ascii: "h"), count: 5 << 20)
        let server = try await makeServer { request in
            request.path == "/huge"
                ? MockResponse(status: 500, headers: [("x-kind", "huge")], body: huge)
                : MockResponse(status: 200, body: Array("small".utf8))
        }
        let pool = try makePool(server)
        let r = try await pool.execute(HTTP2Request(path: "/huge"))
        XCTAssertEqual(r.status, 500)
        XCTAssertEqual(r.header("x-kind"), "huge")
        XCTAssertEqual(r.body.readableBytes, 64 * 1024)
        XCTAssertTrue(r.bodyTruncated)
        let ok = try await pool.execute(HTTP2Request(path: "/small"))
        XCTAssertEqual(String(buffer: ok.body), "small")
        XCTAssertFalse(ok.bodyTruncated)
        XCTAssertEqual(server.connectionsAccepted, 1, "the stream was reset, not the connection")
        await pool.shutdown()
        try await server.stop()
    }

    func testResponseHeaderFieldsAreBounded() async throws {
        let many = (0..<500).map { ("x-h\($0)", "v") }
        let server = try await makeServer { _ in MockResponse(status: 200, headers: many) }
        let pool = try makePool(server)
        let r = try await pool.execute(HTTP2Request(path: "/"))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(r.headers.count, 100)
        await pool.shutdown()
        try await server.stop()
    }

    func testConnectAddressesAreUsedInsteadOfResolvingTheHost() async throws {
        // The target's host is a name nothing resolves; the request carries the address to use. TLS
        // verifies the certificate for that name (the test PKI lists it) and SNI/:authority carry it.
        let pki = try TestPKI.generate(hosts: ["pinned.pool.test"])
        var options = MockHTTPServer.Options()
        options.tls = try pki.serverTLSConfiguration()
        let seen = NIOLockedValueBox<String?>(nil)
        let server = MockHTTPServer(options: options, eventLoopGroup: self.group) { request in
            seen.withLockedValue { $0 = request.header("host") }
            return MockResponse(status: 204)
        }
        try await server.start()
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try pki.clientTLSConfiguration()
        config.connectTimeout = .seconds(5)
        let pool = HTTP2ConnectionPool(
            target: HTTP2Target(scheme: "https", host: "pinned.pool.test", port: server.port),
            configuration: config, eventLoopGroup: self.group)
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: server.port)
        let r = try await pool.execute(HTTP2Request(path: "/", connectAddresses: [address]))
        XCTAssertEqual(r.status, 204)
        XCTAssertEqual(seen.withLockedValue { $0 }, "pinned.pool.test:\(server.port)")
        await pool.shutdown()
        try await server.stop()
    }

    func testPoolGroupIsBoundedAndClosesIdlePools() async throws {
        let servers = try await (0..<6).asyncMap { i in
            try await self.makeServer { _ in MockResponse(status: 200, body: Array("s\(i)".utf8)) }
        }
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try Self.pki.clientTLSConfiguration()
        let group = HTTP2PoolGroup(configuration: config, eventLoopGroup: self.group, maxPools: 3, poolIdleTimeout: .milliseconds(200))
        var pools: [HTTP2ConnectionPool] = []
        for (i, s) in servers.enumerated() {
            let p = group.pool(for: HTTP2Target(url: s.baseURL)!)
            pools.append(p)
            let r = try await p.execute(HTTP2Request(path: "/"))
            XCTAssertEqual(String(buffer: r.body), "s\(i)")
            XCTAssertLessThanOrEqual(group.count, 3)
        }
        XCTAssertEqual(group.count, 3)
        XCTAssertEqual(group.evictedCount, 3)
        // The evicted (least recently used) pools closed their connections.
        try await waitUntil { servers[0..<3].allSatisfy { $0.openConnections == 0 } }
        XCTAssertTrue(servers[3..<6].allSatisfy { $0.openConnections == 1 })
        do {
            _ = try await pools[0].execute(HTTP2Request(path: "/"))
            XCTFail("an evicted pool is shut down")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error, .shutdown)
        }
        // A new pool for an evicted origin works again.
        let again = try await group.pool(for: HTTP2Target(url: servers[0].baseURL)!).execute(HTTP2Request(path: "/"))
        XCTAssertEqual(String(buffer: again.body), "s0")
        // Idle pools go away with the timer, with their connections.
        try await waitUntil(timeout: 10) { group.count == 0 }
        try await waitUntil { servers.allSatisfy { $0.openConnections == 0 } }
        await group.shutdown()
        for s in servers { try await s.stop() }
    }

    func testPoolGroupPrefersEvictingIdlePools() async throws {
        let slow = try await makeServer { _ in
            try? await Task.sleep(for: .milliseconds(500))
            return MockResponse(status: 200)
        }
        let fast = try await makeServer { _ in MockResponse(status: 200) }
        let third = try await makeServer { _ in MockResponse(status: 200) }
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try Self.pki.clientTLSConfiguration()
        let group = HTTP2PoolGroup(configuration: config, eventLoopGroup: self.group, maxPools: 2)
        // The busy pool is the least recently used, but the idle one is evicted.
        let busyFuture: EventLoopFuture<HTTP2Response> = group.pool(for: HTTP2Target(url: slow.baseURL)!).execute(HTTP2Request(path: "/"))
        try await Task.sleep(for: .milliseconds(100))
        _ = try await group.pool(for: HTTP2Target(url: fast.baseURL)!).execute(HTTP2Request(path: "/"))
        _ = try await group.pool(for: HTTP2Target(url: third.baseURL)!).execute(HTTP2Request(path: "/"))
        let r = try await busyFuture.get()
        XCTAssertEqual(r.status, 200)
        await group.shutdown()
        for s in [slow, fast, third] { try await s.stop() }
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for e in self { out.append(try await transform(e)) }
        return out
    }
}
