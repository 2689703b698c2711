import Foundation
import GRPCCore
import HummingbirdTesting
import MockProviders
import NIOPosix
import PushgateCore
import TestSupport
import WNSMock
import XCTest

@testable import GatewayCore
@testable import GorushRPC
@testable import HTTPIngest

/// End to end through WNS: HTTP client -> Pushgate -> HTTPS/1.1 -> the strict mock WNS (both token
/// endpoints and the channels). Channel URIs are on `*.notify.windows.com`; `wns.resolve` answers
/// their addresses and `wns.connect_to` sends them to the mock (the guard still checks every URI).
final class GatewayWNSTests: XCTestCase {
    static let channelHost = "db5p.notify.windows.com"
    static func channel(_ id: String) -> String { "https://\(channelHost)/?token=\(id)" }

    func start() async throws -> (TestEnvironment, MockWNS) {
        let env = try await TestEnvironment.start()
        let wns = MockWNS(options: MockWNS.Options(tls: try env.pki.serverTLSConfiguration()), eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await wns.start()
        return (env, wns)
    }

    func yaml(_ wns: MockWNS, entra: Bool = false, maxRetry: Int = 0) -> String {
        let o = wns.options
        let credentials =
            entra
            ? """
              tenant_id: "\(o.tenantID)"
              client_id: "\(o.clientID)"
              client_secret: "\(o.clientSecret)"
              token_url: "\(wns.entraTokenURL)"
            """
            : """
              package_sid: "\(o.packageSID)"
              package_secret: "\(o.packageSecret)"
              token_url: "\(wns.liveTokenURL)"
            """
        return """
            wns:
              enabled: true
            \(credentials)
              connect_to: "\(wns.connectTo)"
              resolve: ["\(Self.channelHost)=20.1.2.3", "loop.notify.windows.com=127.0.0.1", "lan.notify.windows.com=192.168.1.10"]
              max_retry: \(maxRetry)
            """
    }

    func testToastTileBadgeAndRawDeliveredWithTheirHeaders() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        try await env.withGateway(yaml(wns), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let body = """
                {"notifications":[
                {"platform":7,"tokens":["\(Self.channel("toast"))"],"title":"Score <1-0>","message":"Tom & Jerry"},
                {"platform":"wns","tokens":["\(Self.channel("tile"))"],"wns":{"type":"tile","xml":"<tile><visual><binding template=\\"TileSmall\\"><text>1-0</text></binding></visual></tile>","tag":"match","ttl":600,"cache_policy":"no-cache"}},
                {"platform":"windows","tokens":["\(Self.channel("badge"))"],"wns":{"type":"badge","xml":"<badge value=\\"3\\"/>","request_for_status":true}},
                {"platform":7,"tokens":["\(Self.channel("raw"))"],"wns":{"type":"raw","raw":"{\\"sync\\":1}"}}
                ]}
                """
            let r = try await client.push(body)
            XCTAssertEqual(r.status, 200, r.body)
            XCTAssertEqual(r.body, #"{"counts":4,"logs":[],"success":"ok"}"#)
            let m = Dictionary(uniqueKeysWithValues: wns.messages.map { ($0.channel, $0) })
            let toast = try XCTUnwrap(m["/?token=toast"])
            XCTAssertEqual(toast.type, "wns/toast")
            XCTAssertEqual(toast.contentType, "text/xml")
            XCTAssertEqual(
                toast.bodyString,
                #"<toast><visual><binding template="ToastGeneric"><text>Score &lt;1-0&gt;</text><text>Tom &amp; Jerry</text></binding></visual></toast>"#
            )
            let tile = try XCTUnwrap(m["/?token=tile"])
            XCTAssertEqual(tile.wnsHeaders, ["x-wns-type": "wns/tile", "x-wns-tag": "match", "x-wns-ttl": "600", "x-wns-cache-policy": "no-cache"])
            let badge = try XCTUnwrap(m["/?token=badge"])
            XCTAssertEqual(badge.wnsHeaders, ["x-wns-type": "wns/badge", "x-wns-requestforstatus": "true"])
            let raw = try XCTUnwrap(m["/?token=raw"])
            XCTAssertEqual(raw.contentType, "application/octet-stream")
            XCTAssertEqual(raw.bodyString, #"{"sync":1}"#)
            for msg in m.values { XCTAssertEqual(msg.contentLength, String(msg.body.count)) }
            XCTAssertEqual(wns.sendRejections, [])
            XCTAssertEqual(wns.tokenRequests.count, 1, "one token for every send")

            // Counted like every platform: /metrics and /api/stat/app.
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains("\ngorush_wns_success 4\n"), metrics)
            let stat = try await client.execute(uri: "/api/stat/app", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual((stat["wns"] as? [String: Int]) ?? [:], ["push_success": 4, "push_error": 0])
        }
    }

    func testRefusedChannelURIs() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        try await env.withGateway(yaml(wns), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            for (uri, why) in [
                ("https://evil.example/?token=x", "is not on notify.windows.com"), ("https://\(Self.channelHost):8443/?token=x", "has a port"),
                ("https://u:p@\(Self.channelHost)/?token=x", "has userinfo"), ("http://\(Self.channelHost)/?token=x", "not an https URL"),
            ] {
                let r = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("ok"))","\#(uri)"],"message":"m"}]}"#)
                XCTAssertEqual(r.status, 400, r.body)
                XCTAssertTrue(r.body.contains("notifications[0].tokens[1]"), r.body)
                XCTAssertTrue(r.body.contains(why), r.body)
            }
            // Resolving to loopback or a private address: refused before any connection.
            let r = try await client.push(
                #"{"notifications":[{"platform":7,"tokens":["https://loop.notify.windows.com/?token=a","https://lan.notify.windows.com/?token=b"],"message":"m"}]}"#
            )
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 2, r.body)
            XCTAssertTrue(r.body.contains("loop.notify.windows.com resolves to 127.0.0.1, a loopback address"), r.body)
            XCTAssertTrue(r.body.contains("lan.notify.windows.com resolves to 192.168.1.10, a private address"), r.body)
            XCTAssertEqual(wns.sendRequests, 0)
            XCTAssertEqual(wns.connectionsAccepted, 0, "never a connection")
        }
    }

    func testGoneChannelReachesTheFeedbackHook() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        wns.script(channel: "/?token=expired", [.status(410)])
        wns.script(channel: "/?token=unknown", [.status(404)])
        wns.script(channel: "/?token=other-app", [.status(403)])
        try await env.withGateway(yaml(wns) + "\nlog:\n  hide_token: false", environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("expired"))","\#(Self.channel("unknown"))","\#(Self.channel("fine"))","\#(Self.channel("other-app"))"],"message":"m"}]}"#
            )
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 3, r.body)
            XCTAssertTrue(r.body.contains("Forbidden"), r.body)
            try await waitUntil("feedback posts") { env.feedbackCount == 3 }
            let posted = env.feedbackPosts.withLockedValue { $0.map(\.bodyString) }.joined()
            XCTAssertTrue(
                posted.contains(Self.channel("expired").replacingOccurrences(of: "/", with: "\\/")) || posted.contains(Self.channel("expired")),
                posted)
            XCTAssertEqual(wns.messages.filter { $0.channel == "/?token=expired" }.count, 1, "a dead channel is never retried")
            // 404 and 410 are dead channels; a 403 (a token for another app) is not.
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains("\npushgate_dead_tokens_total 2\n"), metrics)
        }
    }

    func testThrottledIsRetriedAfterItsRetryAfter() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        wns.script(channel: "/?token=busy", [.status(406, retryAfter: 1), .ok])
        wns.script(channel: "/?token=down", [.status(503, retryAfter: 1), .ok])
        try await env.withGateway(yaml(wns, maxRetry: 2), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("busy"))","\#(Self.channel("down"))"],"message":"m"}]}"#)
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            for channel in ["/?token=busy", "/?token=down"] {
                let tries = wns.messages.filter { $0.channel == channel }
                XCTAssertEqual(tries.count, 2, channel)
                if tries.count == 2 {
                    // Only a lower bound: the retry is never earlier than the answer's Retry-After.
                    XCTAssertGreaterThanOrEqual(tries[1].receivedAt.timeIntervalSince(tries[0].receivedAt), 1.0, channel)
                }
            }
        }
    }

    func testBothTokenFlowsAsTheMockChecksThem() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        for entra in [false, true] {
            try await env.withGateway(yaml(wns, entra: entra), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
                let r = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("t"))"],"message":"m"}]}"#)
                XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#, "entra: \(entra)")
                let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
                XCTAssertFalse(config.contains(wns.options.clientSecret) || config.contains(wns.options.packageSecret), config)
            }
        }
        XCTAssertEqual(wns.tokenRejections, [])
        XCTAssertEqual(wns.tokenRequests.map(\.flow), ["live", "entra"])
        XCTAssertEqual(wns.tokenRequests.first?.form["scope"], "notify.windows.com")
        XCTAssertEqual(wns.tokenRequests.last?.form["scope"], "https://wns.windows.com/.default")
        XCTAssertEqual(wns.tokenRequests.last?.tenant, wns.options.tenantID)
    }

    func testHostileInputIsA400NamingTheField() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        try await env.withGateway(yaml(wns), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let ch = Self.channel("h")
            let megabyte = "<toast>" + String(repeating: "a", count: 1 << 20) + "</toast>"
            let nested = String(repeating: "<a>", count: 10_000) + String(repeating: "</a>", count: 10_000)
            let cases: [(String, String)] = [
                (#"{"xml":"\#(megabyte)"}"#, "wns.xml"),
                (#"{"xml":"\#(nested)"}"#, "wns.xml"),
                (#"{"type":"raw","raw":"a\u0000b"}"#, "wns.raw"),
                (#"{"ttl":1e19}"#, "wns.ttl"),
                (#"{"type":"tile","xml":"<tile>"}"#, "wns.xml"),
                (#"{"bogus":1}"#, "wns.bogus"),
                (#"{"type":"toast","tag":"x"}"#, "wns.tag"),
            ]
            for (wnsObject, field) in cases {
                let r = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(ch)"],"message":"m","wns":\#(wnsObject)}]}"#)
                XCTAssertEqual(r.status, 400, "\(field): \(r.body.prefix(300))")
                XCTAssertTrue(r.body.contains("notifications[0].\(field)"), "\(field): \(r.body.prefix(300))")
            }
            // Another platform may not carry a wns object.
            let other = try await client.push(#"{"notifications":[{"platform":1,"tokens":["aa"],"message":"m","wns":{"type":"toast"}}]}"#)
            XCTAssertEqual(other.status, 400, other.body)
            XCTAssertTrue(other.body.contains("wns"), other.body)
            XCTAssertEqual(wns.sendRequests, 0)
        }
    }

    /// The retry's time is the answer's Retry-After, read from the delivery's status: no waiting for it.
    func testThrottledRetryIsScheduledAtItsRetryAfter() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        wns.script(channel: "/?token=busy", [.status(406, retryAfter: 3600)])
        let engine = ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/wns-q.sqlite"]
        try await env.withGateway(yaml(wns, maxRetry: 2), environment: engine) { client, _ in
            let before = Date()
            let r = try await client.push(
                #"{"notifications":[{"notif_id":"wns-406","platform":7,"tokens":["\#(Self.channel("busy"))"],"message":"m"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            var delivery: [String: Any] = [:]
            try await waitUntil("the 406 is answered and the retry scheduled") {
                let s = try await client.execute(uri: "/api/push/wns-406", method: .get) { jsonObject(String(buffer: $0.body)) }
                delivery = (s["deliveries"] as? [[String: Any]])?.first ?? [:]
                return delivery["state"] as? String == "retrying"
            }
            XCTAssertEqual(delivery["attempts"] as? Int, 1)
            XCTAssertTrue((delivery["last_error"] as? String)?.contains("Throttled") ?? false, "\(delivery)")
            let fractional = ISO8601DateFormatter()
            fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let next = try XCTUnwrap(
                (delivery["next_try"] as? String).flatMap { fractional.date(from: $0) ?? ISO8601DateFormatter().date(from: $0) }, "\(delivery)")
            XCTAssertGreaterThanOrEqual(next.timeIntervalSince(before), 3600 - 1, "not before its Retry-After")
            XCTAssertLessThan(next.timeIntervalSince(before), 3600 + 600)
            XCTAssertEqual(wns.messages.count, 1)
        }
    }

    /// gorush's proto carries the platform as a number and has no wns member: a gRPC client sends
    /// platform 7 with title and message, which make a toast.
    func testGRPCSendsAToastToPlatform7() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        try await GorushRPCTests.withRPC(env, yaml(wns), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _, _, _ in
            var request = Proto_NotificationRequest()
            request.platform = 7
            request.tokens = [Self.channel("rpc")]
            request.title = "From gRPC"
            request.message = "a < b"
            let (reply, _) = try await GorushRPCTests.send(client, request)
            XCTAssertTrue(reply.success)
            // gorush's Send answers before the deliveries are made.
            try await waitUntil("the toast reaches the mock") { !wns.messages.isEmpty }
            let m = try XCTUnwrap(wns.messages.first)
            XCTAssertEqual(m.type, "wns/toast")
            XCTAssertTrue(m.bodyString.contains("<text>From gRPC</text><text>a &lt; b</text>"), m.bodyString)
            // A channel URI the guard refuses is an invalid argument naming the token.
            request.tokens = ["https://evil.example/?token=x"]
            let refused = await GorushRPCTests.sendError(client, request)
            XCTAssertEqual(refused?.code, .invalidArgument)
            XCTAssertTrue(refused?.message.contains("tokens[0]") ?? false, "\(String(describing: refused))")
        }
    }

    /// WNS refuses the token (401): a new one is fetched and the send made again, once.
    func testExpiredTokenIsRefetchedOnce() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        try await env.withGateway(yaml(wns), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("one"))"],"message":"m"}]}"#)
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            wns.revokeAccessTokens()
            let r2 = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("two"))"],"message":"m"}]}"#)
            XCTAssertEqual(r2.body, #"{"counts":1,"logs":[],"success":"ok"}"#, "max_retry 0: the credentials retry is on top")
            XCTAssertEqual(wns.tokenRequests.count, 2)
            XCTAssertEqual(wns.sendRejections, ["the access token is invalid or expired"])
        }
    }
}
