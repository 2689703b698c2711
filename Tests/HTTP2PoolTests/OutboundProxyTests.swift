import HTTP2Pool
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import XCTest

/// The pure proxy choice (gorush: `core.http_proxy`, else Go's `http.ProxyFromEnvironment`).
final class OutboundProxyTests: XCTestCase {
    func proxy(_ configured: String, _ env: [String: String]) throws -> OutboundProxy {
        try OutboundProxy(configured: configured, environment: env)
    }

    func proxy(_ env: [String: String]) throws -> OutboundProxy {
        try OutboundProxy(configured: "", environment: env)
    }

    func testConfiguredProxyWinsAndAppliesToBothSchemesAndLoopback() throws {
        let p = try proxy("http://proxy.corp:3128", ["HTTPS_PROXY": "http://other:1", "HTTP_PROXY": "http://other:2"])
        let e = ProxyEndpoint(host: "proxy.corp", port: 3128)
        XCTAssertEqual(p.proxy(forHost: "api.push.apple.com", port: 443, scheme: "https"), e)
        XCTAssertEqual(p.proxy(forHost: "hook.example.com", port: 80, scheme: "http"), e)
        // gorush's http.ProxyURL has no loopback exception.
        XCTAssertEqual(p.proxy(forHost: "127.0.0.1", port: 8443, scheme: "https"), e)
        XCTAssertEqual(p.proxy(forHost: "localhost", port: 8443, scheme: "https"), e)
        XCTAssertEqual(p.source, "core.http_proxy")
    }

    func testEnvironmentPerSchemeUpperCaseFirstAndLoopbackExempt() throws {
        let p = try proxy(["HTTPS_PROXY": "secure:8443", "https_proxy": "ignored:1", "http_proxy": "http://plain:8080"])
        XCTAssertEqual(p.proxy(forHost: "fcm.googleapis.com", port: 443, scheme: "https"), ProxyEndpoint(host: "secure", port: 8443))
        XCTAssertEqual(p.proxy(forHost: "hook.example.com", port: 80, scheme: "http"), ProxyEndpoint(host: "plain", port: 8080))
        for host in ["localhost", "127.0.0.1", "127.9.9.9", "::1", "[::1]"] {
            XCTAssertNil(p.proxy(forHost: host, port: 443, scheme: "https"), host)
        }
        // Only HTTP_PROXY: https targets go direct (Go never falls back from HTTPS_PROXY to HTTP_PROXY).
        let onlyHTTP = try proxy(["HTTP_PROXY": "plain:8080"])
        XCTAssertNil(onlyHTTP.proxy(forHost: "api.push.apple.com", port: 443, scheme: "https"))
        XCTAssertTrue(try proxy([:]).isDirect)
        XCTAssertTrue(try proxy("  ", ["NO_PROXY": "*"]).isDirect)
    }

    func testNoProxyRulesAsGo() throws {
        let env = [
            "HTTPS_PROXY": "proxy:3128",
            "no_proxy": " Example.COM, .internal.test,*.wild.test, 10.0.0.0/8, 192.168.1.7, [2001:db8::1]:8443, hook.test:8080, ,:99",
        ]
        let p = try proxy(env)
        func direct(_ host: String, _ port: Int = 443) -> Bool { p.proxy(forHost: host, port: port, scheme: "https") == nil }
        XCTAssertTrue(direct("example.com"), "a bare domain matches itself")
        XCTAssertTrue(direct("api.example.com"), "and its subdomains")
        XCTAssertFalse(direct("notexample.com"))
        XCTAssertFalse(direct("internal.test"), "a leading dot: subdomains only")
        XCTAssertTrue(direct("a.internal.test"))
        XCTAssertFalse(direct("wild.test"))
        XCTAssertTrue(direct("x.wild.test"))
        XCTAssertTrue(direct("10.20.30.40"))
        XCTAssertFalse(direct("11.0.0.1"))
        XCTAssertTrue(direct("192.168.1.7"))
        XCTAssertTrue(direct("::ffff:192.168.1.7"), "an IPv4-mapped address is the IPv4 address")
        XCTAssertFalse(direct("192.168.1.8"))
        XCTAssertTrue(direct("2001:db8::1", 8443))
        XCTAssertFalse(direct("2001:db8::1", 443), "the port must match when the entry has one")
        XCTAssertTrue(direct("hook.test", 8080))
        XCTAssertFalse(direct("hook.test", 443))
        XCTAssertTrue(direct("EXAMPLE.com."), "case and a trailing dot do not matter")
        XCTAssertTrue(p.hasExceptions)

        // Domains never match IP literals; "*" excludes everything.
        let ipOnly = try proxy(["HTTPS_PROXY": "proxy:3128", "NO_PROXY": "1.2.3.4.example"])
        XCTAssertNotNil(ipOnly.proxy(forHost: "1.2.3.4", port: 443, scheme: "https"))
        let all = try proxy(["HTTPS_PROXY": "proxy:3128", "NO_PROXY": "foo,*"])
        XCTAssertNil(all.proxy(forHost: "api.push.apple.com", port: 443, scheme: "https"))
    }

    func testNoProxyAlsoExemptsHostsFromTheConfiguredProxy() throws {
        let p = try proxy("http://proxy:3128", ["NO_PROXY": "127.0.0.1,.corp"])
        XCTAssertNil(p.proxy(forHost: "127.0.0.1", port: 9000, scheme: "https"))
        XCTAssertNil(p.proxy(forHost: "hooks.corp", port: 443, scheme: "http"))
        XCTAssertNotNil(p.proxy(forHost: "api.push.apple.com", port: 443, scheme: "https"))
    }

    func testProxyURLParsingAndCredentials() throws {
        let e = try ProxyEndpoint.parse("http://us%40er:p%3Ass@Proxy.Example:3128/").get()
        XCTAssertEqual(e, ProxyEndpoint(host: "proxy.example", port: 3128, username: "us@er", password: "p:ss"))
        XCTAssertEqual(e.description, "proxy.example:3128", "no credentials in the description")
        let dump = "\(OutboundProxy(proxy: e)) \(String(reflecting: e)) \(String(describing: [e]))"
        XCTAssertFalse(dump.contains("p:ss") || dump.contains("us@er"), dump)
        XCTAssertEqual(e.basicAuthorization, "Basic dXNAZXI6cDpzcw==")  // base64("us@er:p:ss")
        XCTAssertEqual(try ProxyEndpoint.parse("proxy").get(), ProxyEndpoint(host: "proxy", port: 80))
        XCTAssertEqual(try ProxyEndpoint.parse("http://[::1]:9").get().description, "[::1]:9")
        XCTAssertNil(try ProxyEndpoint.parse("proxy:3128").get().basicAuthorization)
        for bad in ["", "socks5://proxy:1080", "https://proxy:443", "http://proxy:0", "http://proxy:99999", "http://:3128", "http://u:%zz@p:1"] {
            XCTAssertThrowsError(try ProxyEndpoint.parse(bad).get(), bad)
        }
    }

    func testBadProxyIsAnErrorNamingTheKeyWithoutTheURL() {
        XCTAssertThrowsError(try proxy("socks5://user:hunter2@proxy:1080", [:])) { error in
            let e = error as? OutboundProxyError
            XCTAssertEqual(e?.key, "core.http_proxy")
            XCTAssertFalse("\(error)".contains("hunter2"), "\(error)")
            XCTAssertTrue("\(error)".contains("socks5"), "\(error)")
        }
        XCTAssertThrowsError(try proxy(["https_proxy": "http://proxy:notaport"])) { error in
            XCTAssertEqual((error as? OutboundProxyError)?.key, "https_proxy")
        }
    }
}

/// The HTTP/2 pool through a CONNECT proxy, over real sockets on loopback.
final class HTTP2PoolProxyTests: XCTestCase {
    var group: MultiThreadedEventLoopGroup!
    var pki: TestPKI!

    override func setUp() async throws {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        pki = try TestPKI.generate(hosts: ["localhost", "127.0.0.1", "pinned.proxy.test"])
    }

    override func tearDown() async throws {
        try await group.shutdownGracefully()
    }

    func startServer(_ seen: NIOLockedValueBox<[String]>? = nil) async throws -> MockHTTPServer {
        var options = MockHTTPServer.Options()
        options.tls = try pki.serverTLSConfiguration()
        let server = MockHTTPServer(options: options, eventLoopGroup: group) { request in
            seen?.withLockedValue { $0.append("\(request.method) \(request.path) \(request.header("host") ?? "")") }
            return MockResponse(status: 200, body: Array("ok".utf8))
        }
        try await server.start()
        return server
    }

    func startProxy(_ configure: (inout MockConnectProxy.Options) -> Void = { _ in }) async throws -> MockConnectProxy {
        var options = MockConnectProxy.Options()
        configure(&options)
        let proxy = MockConnectProxy(options: options, eventLoopGroup: group)
        try await proxy.start()
        return proxy
    }

    func makePool(host: String = "127.0.0.1", port: Int, proxy: OutboundProxy) throws -> HTTP2ConnectionPool {
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try pki.clientTLSConfiguration()
        config.connectTimeout = .seconds(5)
        config.requestTimeout = .seconds(10)
        config.connectionsPerTarget = 1
        config.maxConnectionsPerTarget = 1
        config.proxy = proxy
        return HTTP2ConnectionPool(target: HTTP2Target(scheme: "https", host: host, port: port), configuration: config, eventLoopGroup: group)
    }

    func testRequestsGoThroughTheTunnel() async throws {
        let seen = NIOLockedValueBox<[String]>([])
        let server = try await startServer(seen)
        let proxy = try await startProxy()
        let pool = try makePool(port: server.port, proxy: OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: proxy.port)))
        for i in 0..<3 {
            let r = try await pool.execute(HTTP2Request(path: "/3/device/\(i)", body: ByteBuffer(string: "{}")))
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual(String(buffer: r.body), "ok")
        }
        XCTAssertEqual(proxy.tunnelledTargets, ["127.0.0.1:\(server.port)"], "one CONNECT, one multiplexed connection")
        XCTAssertNil(proxy.connects.first?.proxyAuthorization)
        XCTAssertEqual(seen.withLockedValue { $0 }.first, "POST /3/device/0 127.0.0.1:\(server.port)")
        XCTAssertEqual(server.connectionsAccepted, 1, "the server's only connection is the proxy's")
        await pool.shutdown()
        try await proxy.stop()
        try await server.stop()
    }

    func testConnectNamesTheCheckedAddressWhileTLSKeepsTheHostName() async throws {
        let seen = NIOLockedValueBox<[String]>([])
        let server = try await startServer(seen)
        let proxy = try await startProxy()
        let pool = try makePool(
            host: "pinned.proxy.test", port: server.port, proxy: OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: proxy.port)))
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: server.port)
        let r = try await pool.execute(HTTP2Request(path: "/p", connectAddresses: [address]))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(proxy.tunnelledTargets, ["127.0.0.1:\(server.port)"], "the proxy never sees (or resolves) the name")
        XCTAssertEqual(seen.withLockedValue { $0 }, ["POST /p pinned.proxy.test:\(server.port)"])
        await pool.shutdown()
        try await proxy.stop()
        try await server.stop()
    }

    func testProxyCredentials407WithoutAndSuccessWith() async throws {
        let server = try await startServer()
        let proxy = try await startProxy { $0.credentials = ("pushgate", "hunter2") }
        let anonymous = try makePool(port: server.port, proxy: OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: proxy.port)))
        do {
            _ = try await anonymous.execute(HTTP2Request(path: "/"))
            XCTFail("a proxy that requires credentials let an anonymous CONNECT through")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error.code, .connectFailed)
            XCTAssertTrue(error.detail.contains("proxy 127.0.0.1:\(proxy.port)"), error.detail)
            XCTAssertTrue(error.detail.contains("407"), error.detail)
        }
        await anonymous.shutdown()

        let wrong = try makePool(
            port: server.port, proxy: OutboundProxy(proxy: try ProxyEndpoint.parse("http://pushgate:wrong@127.0.0.1:\(proxy.port)").get()))
        do {
            _ = try await wrong.execute(HTTP2Request(path: "/"))
            XCTFail("wrong credentials accepted")
        } catch let error as HTTP2PoolError {
            XCTAssertTrue(error.detail.contains("407"), error.detail)
            XCTAssertFalse(error.detail.contains("wrong"), "no password in errors: \(error.detail)")
        }
        await wrong.shutdown()

        let authed = try makePool(port: server.port, proxy: OutboundProxy(proxy: try ProxyEndpoint.parse(proxy.url).get()))
        let r = try await authed.execute(HTTP2Request(path: "/"))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(proxy.connects.map(\.status), [407, 407, 200])
        XCTAssertEqual(proxy.connects.last?.proxyAuthorization, "Basic cHVzaGdhdGU6aHVudGVyMg==")  // pushgate:hunter2
        XCTAssertEqual(server.connectionsAccepted, 1, "refused CONNECTs never reached the server")
        await authed.shutdown()
        try await proxy.stop()
        try await server.stop()
    }

    func testProxyDownOrRefusingIsAConnectFailureNamingTheProxy() async throws {
        let server = try await startServer()
        // A port nothing listens on: a proxy that was stopped.
        let gone = try await startProxy()
        let gonePort = gone.port
        try await gone.stop()
        let down = try makePool(port: server.port, proxy: OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: gonePort)))
        do {
            _ = try await down.execute(HTTP2Request(path: "/"))
            XCTFail("sent through a proxy that is down")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error.code, .connectFailed)
            XCTAssertTrue(error.isRetryable, "a later attempt may find the proxy back")
            XCTAssertTrue(error.detail.contains("proxy 127.0.0.1:\(gonePort)"), error.detail)
        }
        await down.shutdown()

        let refusing = try await startProxy { $0.refuseWith = 502 }
        let pool = try makePool(port: server.port, proxy: OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: refusing.port)))
        do {
            _ = try await pool.execute(HTTP2Request(path: "/"))
            XCTFail("sent through a refusing proxy")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error.code, .connectFailed)
            XCTAssertTrue(error.detail.contains("proxy 127.0.0.1:\(refusing.port): CONNECT 127.0.0.1:\(server.port) answered 502"), error.detail)
        }
        await pool.shutdown()
        try await refusing.stop()
        XCTAssertEqual(server.connectionsAccepted, 0)
        try await server.stop()
    }

    func testSilentProxyTimesOutNamingTheProxy() async throws {
        // Accepts the TCP connection, never answers the CONNECT.
        let silent = try await ServerBootstrap(group: group)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try XCTUnwrap(silent.localAddress?.port)
        var config = HTTP2PoolConfiguration()
        config.tlsConfiguration = try pki.clientTLSConfiguration()
        config.connectTimeout = .milliseconds(300)
        config.requestTimeout = .seconds(10)
        config.proxy = OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: port))
        let pool = HTTP2ConnectionPool(
            target: HTTP2Target(scheme: "https", host: "api.push.example", port: 443), configuration: config, eventLoopGroup: group)
        do {
            _ = try await pool.execute(HTTP2Request(path: "/"))
            XCTFail("a silent proxy produced a response")
        } catch let error as HTTP2PoolError {
            XCTAssertEqual(error.code, .connectFailed)
            XCTAssertTrue(error.detail.contains("proxy 127.0.0.1:\(port)"), error.detail)
            XCTAssertTrue(error.detail.contains("timed out"), error.detail)
        }
        await pool.shutdown()
        try await silent.close()
    }

    func testNoProxyHostConnectsDirectly() async throws {
        let server = try await startServer()
        let proxy = try await startProxy()
        let pool = try makePool(
            port: server.port, proxy: OutboundProxy(proxy: ProxyEndpoint(host: "127.0.0.1", port: proxy.port), noProxy: "localhost,127.0.0.1"))
        let r = try await pool.execute(HTTP2Request(path: "/"))
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(proxy.connects, [], "NO_PROXY host: no CONNECT")
        XCTAssertEqual(server.connectionsAccepted, 1)
        await pool.shutdown()
        try await proxy.stop()
        try await server.stop()
    }
}
