import AsyncHTTPClient
import Foundation
import Logging
import MockKit
import NIOCore
import NIOPosix
import NIOSSL
import ProviderKit
import PushgateCore
import TestSupport
import WNSMock
import XCTest

@testable import WNS

/// A settable clock (token lifetimes; no timed waits).
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var t = Date(timeIntervalSince1970: 1_800_000_000)
    var now: Date {
        lock.lock()
        defer { lock.unlock() }
        return t
    }
    func advance(_ s: TimeInterval) {
        lock.lock()
        t += s
        lock.unlock()
    }
}

/// The sender against the mock over real loopback sockets (HTTPS/1.1, TLS from a throwaway CA).
final class WNSSenderTests: XCTestCase {
    static let pki = try! TestPKI.generate(hosts: ["127.0.0.1", "localhost"])
    let group = MultiThreadedEventLoopGroup.singleton
    var mock: MockWNS!
    var tokenClient: HTTPClient!
    var senders: [WNSSender] = []
    let clock = TestClock()

    static let host = "db5p.notify.windows.com"
    static let channel = "https://\(host)/?token=AwYAAAD1"

    /// Answers of the mock wait for it while held (released at once unless a test holds it).
    let hold = MockResponseHold()

    override func setUp() async throws {
        var options = MockWNS.Options(tls: try Self.pki.serverTLSConfiguration(alpn: ["http/1.1"]))
        let clock = self.clock
        options.now = { clock.now }
        options.hold = hold
        if !name.contains("ConnectionsPerHost") { hold.release() }
        mock = MockWNS(options: options, eventLoopGroup: group)
        try await mock.start()
        tokenClient = HTTPClient(
            eventLoopGroup: group, configuration: HTTPClient.Configuration(tlsConfiguration: try Self.pki.clientTLSConfiguration()))
    }

    override func tearDown() async throws {
        for s in senders { await s.shutdown() }
        try await tokenClient.shutdown()
        try await mock.stop()
    }

    func sender(_ credentials: WNSCredentials? = nil, tokenURL: String? = nil, resolve: [String] = []) throws -> WNSSender {
        let creds = credentials ?? .live(packageSID: mock.options.packageSID, secret: mock.options.packageSecret)
        var c = WNSSenderConfiguration(credentials: creds)
        c.tokenURL = tokenURL ?? (creds.flowName == "Live" ? mock.liveTokenURL : mock.entraTokenURL)
        c.connectTo = mock.connectTo
        // Channel hosts answer as public addresses, except the ones a test names; never real DNS.
        c.staticAnswers = try WNSAddressGuard.parseStaticAnswers(["\(Self.host)=20.1.2.3"] + resolve)
        c.maxConnectionsPerHost = 2
        let clock = self.clock
        let s = WNSSender(
            configuration: c, tlsConfiguration: try Self.pki.clientTLSConfiguration(), eventLoopGroup: group,
            tokenTransport: OAuthTokenCache.httpTransport(tokenClient, timeout: .seconds(10)),
            lookup: { host in throw HostResolver.Failure(description: "no DNS in tests: \(host)") }, now: { clock.now })
        senders.append(s)
        return s
    }

    func prepared(_ members: [(String, JSONValue)]) throws -> PreparedWNS {
        try PreparedWNS.render(try WNSOptions(decoding: .object(JSONObject(members))), title: nil, message: nil, timeToLive: nil)
    }

    func testEachTypeIsDeliveredWithItsHeaders() async throws {
        let s = try sender()
        let toast = try PreparedWNS.render(nil, title: "Score <1-0> & more", message: "Goal", timeToLive: nil)
        let tile = try prepared([
            ("type", .string("tile")), ("xml", .string("<tile><visual/></tile>")), ("tag", .string("match1")), ("cache_policy", .string("cache")),
            ("ttl", .int(600)),
        ])
        let badge = try prepared([("type", .string("badge")), ("xml", .string("<badge value=\"7\"/>")), ("request_for_status", .bool(true))])
        let raw = try prepared([("type", .string("raw")), ("raw", .string("{\"sync\":true}")), ("cache_policy", .string("no-cache"))])
        for p in [toast, tile, badge, raw] {
            let outcome = await s.send(p, to: Self.channel, messageID: "m")
            guard case .delivered(let id, _) = outcome else { return XCTFail("\(outcome): \(mock.sendRejections)") }
            XCTAssertNotNil(id, "X-WNS-Msg-ID is the provider id")
        }
        let m = mock.messages
        XCTAssertEqual(m.map(\.type), ["wns/toast", "wns/tile", "wns/badge", "wns/raw"])
        XCTAssertEqual(m.map(\.contentType), ["text/xml", "text/xml", "text/xml", "application/octet-stream"])
        XCTAssertEqual(m.map(\.channel), Array(repeating: "/?token=AwYAAAD1", count: 4))
        XCTAssertEqual(m[0].bodyString, String(decoding: toast.body, as: UTF8.self))
        XCTAssertTrue(m[0].bodyString.contains("Score &lt;1-0&gt; &amp; more"))
        XCTAssertEqual(m[1].wnsHeaders, ["x-wns-type": "wns/tile", "x-wns-tag": "match1", "x-wns-cache-policy": "cache", "x-wns-ttl": "600"])
        XCTAssertEqual(m[2].wnsHeaders["x-wns-requestforstatus"], "true")
        XCTAssertEqual(m[3].bodyString, "{\"sync\":true}")
        for msg in m { XCTAssertEqual(msg.contentLength, String(msg.body.count), "a Content-Length body, never chunked") }
        XCTAssertEqual(mock.tokenRequests.count, 1, "one token for every send")
        XCTAssertEqual(s.stats.wnsStatus, ["received": 4])
        XCTAssertEqual(s.stats.deviceConnectionStatus, ["connected": 1])
    }

    func testLiveFlowFormFields() async throws {
        let s = try sender(.live(packageSID: mock.options.packageSID, secret: mock.options.packageSecret))
        let outcome = await s.send(try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil), to: Self.channel, messageID: "m")
        XCTAssertTrue(outcome.isDelivered, "\(outcome)")
        let r = try XCTUnwrap(mock.tokenRequests.first)
        XCTAssertEqual(r.flow, "live")
        XCTAssertEqual(
            r.form,
            [
                "grant_type": "client_credentials", "client_id": mock.options.packageSID, "client_secret": mock.options.packageSecret,
                "scope": "notify.windows.com",
            ])
    }

    func testEntraFlowFormFields() async throws {
        let o = mock.options
        let s = try sender(.entra(tenantID: o.tenantID, clientID: o.clientID, clientSecret: o.clientSecret))
        let outcome = await s.send(try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil), to: Self.channel, messageID: "m")
        XCTAssertTrue(outcome.isDelivered, "\(outcome)")
        let r = try XCTUnwrap(mock.tokenRequests.first)
        XCTAssertEqual(r.flow, "entra")
        XCTAssertEqual(r.tenant, o.tenantID)
        XCTAssertEqual(
            r.form,
            [
                "grant_type": "client_credentials", "client_id": o.clientID, "client_secret": o.clientSecret,
                "scope": "https://wns.windows.com/.default",
            ])
    }

    func testRefusedCredentialsArePermanentAndTheSecretIsBlanked() async throws {
        let s = try sender(.live(packageSID: mock.options.packageSID, secret: "wrong-secret-value"))
        let outcome = await s.send(try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil), to: Self.channel, messageID: "m")
        XCTAssertEqual(outcome.className, "permanent")
        XCTAssertEqual(outcome.status, 401)
        XCTAssertFalse(outcome.reason?.contains("wrong-secret-value") ?? true)
        XCTAssertEqual(mock.sendRequests, 0, "nothing sent without a token")
    }

    func testTokenIsSharedRefreshedEarlyAndRefetchedOn401() async throws {
        let s = try sender()
        let p = try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil)
        await withTaskGroup(of: Void.self) { g in
            for _ in 0..<8 { g.addTask { _ = await s.send(p, to: Self.channel, messageID: "m") } }
        }
        XCTAssertEqual(mock.tokenRequests.count, 1, "concurrent sends share one token request")
        // Refreshed before it expires: 5 minutes before the mock's one-day lifetime ends.
        clock.advance(86_400 - 299)
        _ = await s.send(p, to: Self.channel, messageID: "m")
        XCTAssertEqual(mock.tokenRequests.count, 2, "refreshed early")
        XCTAssertEqual(mock.sendRejections, [])

        // WNS refuses the token (401): the outcome asks for fresh credentials, the token is dropped
        // and the next attempt fetches a new one.
        mock.revokeAccessTokens()
        let refused = await s.send(p, to: Self.channel, messageID: "m")
        XCTAssertEqual(refused.className, "credentials")
        let retried = await s.send(p, to: Self.channel, messageID: "m")
        XCTAssertTrue(retried.isDelivered, "\(retried)")
        XCTAssertEqual(mock.tokenRequests.count, 3)
    }

    func testScriptedAnswersAreClassified() async throws {
        let s = try sender()
        let p = try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil)
        let cases: [(MockWNS.Reply, SendOutcome)] = [
            (.status(404), .tokenDead(reason: "NotFound (channel URI not recognised)", status: 404)),
            (.status(410), .tokenDead(reason: "Gone (channel expired)", status: 410)),
            (.status(406, retryAfter: 120), .transient(reason: "Throttled", status: 406, retryAfter: 120)),
            (.status(503, retryAfter: 5), .transient(reason: "ServiceUnavailable", status: 503, retryAfter: 5)),
            (.status(413), .permanent(reason: "PayloadTooLarge", status: 413)),
            (.status(400, description: "Invalid header"), .permanent(reason: "BadRequest: Invalid header", status: 400)),
            (.okWithStatus("channelthrottled"), .delivered(providerID: nil)),
        ]
        for (i, (reply, expected)) in cases.enumerated() {
            let channel = "https://\(Self.host)/?token=c\(i)"
            mock.script(channel: "/?token=c\(i)", [reply])
            let outcome = await s.send(p, to: channel, messageID: "m")
            if case .delivered = expected {
                XCTAssertTrue(outcome.isDelivered, "\(reply): \(outcome)")
            } else {
                XCTAssertEqual(outcome, expected, "\(reply)")
            }
        }
        XCTAssertEqual(s.stats.wnsStatus["channelthrottled"], 1)
    }

    func test403MarksTheProviderFailing() async throws {
        let s = try sender()
        mock.script(channel: "/?token=other-app", [.status(403)])
        let outcome = await s.send(
            try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil), to: "https://\(Self.host)/?token=other-app", messageID: "m")
        XCTAssertEqual(outcome.className, "credentials", "a token for another app is not a dead channel")
        XCTAssertEqual(s.stats.forbidden, 1)
        guard case .failing(let reason, let since) = s.health else { return XCTFail("\(s.health)") }
        XCTAssertTrue(reason.hasPrefix("Forbidden"), reason)
        XCTAssertEqual(since, clock.now)
        // The 403 dropped the token: the next send fetches another, and its success ends the failing state.
        let ok = await s.send(try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil), to: Self.channel, messageID: "m")
        XCTAssertTrue(ok.isDelivered, "\(ok)")
        XCTAssertEqual(s.health, .ok)
        XCTAssertEqual(mock.tokenRequests.count, 2)
    }

    func testRefusedChannelsNeverConnect() async throws {
        let s = try sender(resolve: ["loop.notify.windows.com=127.0.0.1"])
        let p = try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil)
        let loop = await s.send(p, to: "https://loop.notify.windows.com/?token=x", messageID: "m")
        XCTAssertEqual(
            loop, .permanent(reason: "channel URI refused: loop.notify.windows.com resolves to 127.0.0.1, a loopback address", status: nil))
        for uri in ["https://evil.example/?token=x", "https://\(Self.host):444/?token=x", "https://u@\(Self.host)/?token=x"] {
            XCTAssertNotNil(s.validate(channel: uri), uri)
            let o = await s.send(p, to: uri, messageID: "m")
            XCTAssertEqual(o.className, "permanent", uri)
        }
        XCTAssertEqual(mock.connectionsAccepted, 0, "no connection for a refused channel")
        XCTAssertEqual(mock.tokenRequests.count, 0)
    }

    func testTheMockIsStrict() async throws {
        // Straight at the mock with AsyncHTTPClient: what the sender must never do is refused.
        let s = try sender()
        _ = await s.send(try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil), to: Self.channel, messageID: "m")
        let bearer = try XCTUnwrap(mock.messages.first?.bearer)
        let url = mock.baseURL + "/?token=strict"
        func post(_ headers: [(String, String)], _ body: HTTPClientRequest.Body) async throws -> (Int, String) {
            var r = HTTPClientRequest(url: url)
            r.method = .POST
            for (n, v) in headers { r.headers.add(name: n, value: v) }
            r.body = body
            let response = try await tokenClient.execute(r, timeout: .seconds(10))
            return (Int(response.status.code), response.headers.first(name: "x-wns-error-description") ?? "")
        }
        let auth = ("authorization", "Bearer \(bearer)")
        let xml = ByteBuffer(string: "<toast/>")
        let cases: [([(String, String)], HTTPClientRequest.Body, Int, String)] = [
            ([auth, ("x-wns-type", "wns/toast"), ("content-type", "application/octet-stream")], .bytes(xml), 400, "Content-Type"),
            ([auth, ("x-wns-type", "wns/raw"), ("content-type", "text/xml")], .bytes(xml), 400, "Content-Type"),
            (
                [("authorization", "Bearer forged"), ("x-wns-type", "wns/toast"), ("content-type", "text/xml")], .bytes(xml), 401,
                "invalid or expired"
            ),
            ([auth, ("x-wns-type", "wns/toast"), ("content-type", "text/xml"), ("x-wns-bogus", "1")], .bytes(xml), 400, "unknown header"),
            ([auth, ("x-wns-type", "wns/toast"), ("content-type", "text/xml"), ("x-wns-ttl", "soon")], .bytes(xml), 400, "X-WNS-TTL"),
            ([auth, ("x-wns-type", "wns/toast"), ("content-type", "text/xml"), ("x-wns-cache-policy", "cache")], .bytes(xml), 400, "toasts"),
            ([auth, ("x-wns-type", "wns/note"), ("content-type", "text/xml")], .bytes(xml), 400, "X-WNS-Type"),
            (
                [auth, ("x-wns-type", "wns/raw"), ("content-type", "application/octet-stream")],
                .bytes(ByteBuffer(repeating: UInt8(ascii: "x"), count: 5001)), 413, "5000"
            ),
            (
                [auth, ("x-wns-type", "wns/toast"), ("content-type", "text/xml")],
                .stream(
                    AsyncStream<ByteBuffer> { c in
                        c.yield(xml)
                        c.finish()
                    }, length: .unknown), 400, "chunked"
            ),
        ]
        for (headers, body, status, why) in cases {
            let (got, description) = try await post(headers, body)
            XCTAssertEqual(got, status, "\(headers)")
            XCTAssertTrue(description.contains(why), "\(description) should say \(why)")
        }
        // An expired token is refused.
        clock.advance(86_401)
        let (expired, _) = try await post([auth, ("x-wns-type", "wns/toast"), ("content-type", "text/xml")], .bytes(xml))
        XCTAssertEqual(expired, 401)
    }

    func testConnectionsPerHostAreBounded() async throws {
        // Every answer is held: 6 sends at once to one host may use at most max_connections (2).
        let token = mock.issueToken()
        var c = WNSSenderConfiguration(credentials: .live(packageSID: "p", secret: "s"))
        c.connectTo = mock.connectTo
        c.staticAnswers = try WNSAddressGuard.parseStaticAnswers(["\(Self.host)=20.1.2.3"])
        c.maxConnectionsPerHost = 2
        let s = WNSSender(
            configuration: c, tlsConfiguration: try Self.pki.clientTLSConfiguration(), eventLoopGroup: group,
            tokenTransport: { _, _ in (200, Array(#"{"access_token":"\#(token)","expires_in":3600}"#.utf8)) },
            lookup: { host in throw HostResolver.Failure(description: "no DNS in tests: \(host)") })
        senders.append(s)
        let p = try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: nil)
        async let sends = Self.sendAll(s, p, count: 6)
        try await waitUntil("two sends reach the mock") { self.mock.sendRequests >= 2 }
        hold.release()
        let outcomes = await sends
        XCTAssertEqual(outcomes.filter(\.isDelivered).count, 6, "\(outcomes)")
        XCTAssertEqual(mock.connectionsAccepted, 2, "the 4 waiting sends reuse the 2 connections")
    }

    static func sendAll(_ s: WNSSender, _ p: PreparedWNS, count: Int) async -> [SendOutcome] {
        await withTaskGroup(of: SendOutcome.self) { g in
            for i in 0..<count { g.addTask { await s.send(p, to: channel + "\(i)", messageID: "m") } }
            var all: [SendOutcome] = []
            for await o in g { all.append(o) }
            return all
        }
    }
}
