import Foundation
import GRPCCore
import HummingbirdTesting
import Logging
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
            // Resolving to loopback or a private address: a 400 at ingest naming the token, never a connection.
            for (k, host, why) in [
                (1, "loop.notify.windows.com", "loop.notify.windows.com resolves to 127.0.0.1, a loopback address"),
                (2, "lan.notify.windows.com", "lan.notify.windows.com resolves to 192.168.1.10, a private address"),
            ] {
                let tokens = (0..<k).map { Self.channel("ok\($0)") } + ["https://\(host)/?token=b"]
                let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
                let r = try await client.push(#"{"notifications":[{"platform":7,"tokens":[\#(list)],"message":"m"}]}"#)
                XCTAssertEqual(r.status, 400, r.body)
                XCTAssertTrue(r.body.contains("notifications[0].tokens[\(k)]"), r.body)
                XCTAssertTrue(r.body.contains(why), r.body)
            }
            // The second notification's channel: named by its notification.
            let second = try await client.push(
                #"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("ok"))"],"message":"m"},{"platform":7,"tokens":["https://loop.notify.windows.com/?token=a"],"message":"m"}]}"#
            )
            XCTAssertEqual(second.status, 400, second.body)
            XCTAssertTrue(second.body.contains("notifications[1].tokens[0]"), second.body)
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
        // A 403 is a credentials failure: sent once more with a new token, refused again.
        wns.script(channel: "/?token=other-app", [.status(403), .status(403)])
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

    /// A 403 (the credentials are for another app) marks the provider failing: the status page's data,
    /// `/metrics` and `/readyz`'s body (still 200) show it, until a send is accepted again or a reload
    /// builds the provider anew.
    func test403MarksTheProviderFailingUntilASendSucceedsOrAReload() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        let path = env.directory + "/wns-health.yml"
        let reloadedYAML = env.yaml(yaml(wns, maxRetry: 1))
        try env.yaml(yaml(wns)).write(toFile: path, atomically: true, encoding: .utf8)
        let environment = ["PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_SYNC": "true"]
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let gateway = try GatewayBuilder.build(
            raw: try RawConfig.load(path: path, environment: environment), logger: logger,
            reloadSource: { try RawConfig.load(path: path, environment: environment) })
        let app = try gateway.makeApplication()
        try await app.test(.live) { client in
            func get(_ uri: String) async throws -> (status: Int, body: String) {
                try await client.execute(uri: uri, method: .get) { (Int($0.status.code), String(buffer: $0.body)) }
            }
            func wnsHealth() async throws -> [String: Any] {
                let live = jsonObject(try await get("/api/stat/live").body)
                return ((live["health"] as? [String: Any])?["default"] as? [String: Any])?["wns"] as? [String: Any] ?? [:]
            }
            func refuse() async throws {
                // Refused twice: the credentials retry with a new token is refused too.
                wns.script(channel: "/?token=other-app", [.status(403, description: "wrong app"), .status(403, description: "wrong app")])
                let r = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("other-app"))"],"message":"m"}]}"#)
                XCTAssertTrue(r.body.contains("Forbidden"), r.body)
            }
            let okHealth = try await wnsHealth()
            XCTAssertEqual(okHealth["state"] as? String, "ok")

            try await refuse()
            let failing = try await wnsHealth()
            XCTAssertEqual(failing["state"] as? String, "failing", "\(failing)")
            XCTAssertTrue((failing["reason"] as? String)?.contains("Forbidden") ?? false, "\(failing)")
            XCTAssertTrue((failing["reason"] as? String)?.contains("wrong app") ?? false, "\(failing)")
            XCTAssertNotNil(failing["since"] as? String)
            let metrics = try await get("/metrics").body
            XCTAssertTrue(metrics.contains("\npushgate_provider_failing{app=\"default\",provider=\"wns\"} 1\n"), metrics)
            XCTAssertTrue(metrics.contains("\npushgate_provider_failing{app=\"default\",provider=\"ios\"} 0\n"), metrics)
            let ready = try await get("/readyz")
            XCTAssertEqual(ready.status, 200, "one provider's configuration error leaves the gateway ready")
            let readyBody = jsonObject(ready.body)
            XCTAssertEqual(readyBody["status"] as? String, "ready")
            let listed = try XCTUnwrap(readyBody["failing"] as? [[String: Any]], ready.body)
            XCTAssertEqual(listed.first?["provider"] as? String, "wns")
            XCTAssertEqual(listed.first?["app"] as? String, "default")

            // A send accepted again (with a token fetched after the 403): ok.
            let fine = try await client.push(#"{"notifications":[{"platform":7,"tokens":["\#(Self.channel("fine"))"],"message":"m"}]}"#)
            XCTAssertEqual(fine.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            let recovered = try await wnsHealth()
            XCTAssertEqual(recovered["state"] as? String, "ok", "\(recovered)")
            let metricsAfter = try await get("/metrics").body
            XCTAssertTrue(metricsAfter.contains("\npushgate_provider_failing{app=\"default\",provider=\"wns\"} 0\n"), metricsAfter)
            let readyAfter = try await get("/readyz").body
            XCTAssertEqual(readyAfter, #"{"status":"ready"}"#)

            // Failing again; a reload that changes the wns section builds a new provider: ok.
            try await refuse()
            let again = try await wnsHealth()
            XCTAssertEqual(again["state"] as? String, "failing")
            try reloadedYAML.write(toFile: path, atomically: true, encoding: .utf8)
            let summary = try await gateway.reload()
            XCTAssertEqual(summary.changed, [AppID.defaultApp])
            let reloaded = try await wnsHealth()
            XCTAssertEqual(reloaded["state"] as? String, "ok", "\(reloaded)")
        }
    }

    /// A 200's `X-WNS-Status` and `X-WNS-DeviceConnectionStatus` are kept with the delivery: its
    /// status, with the memory and the SQLite engines (and PostgreSQL with `PUSHGATE_TEST_POSTGRES_URL`).
    func testDeliveryStatusShowsWhatWNSAnswered() async throws {
        let (env, wns) = try await start()
        defer {
            Task {
                try? await wns.stop()
                await env.stop()
            }
        }
        let postgres = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"]
        for engine in ["memory", "sqlite"] + (postgres == nil ? [] : ["postgres"]) {
            wns.script(channel: "/?token=off-\(engine)", [.okWithStatus("dropped", device: "disconnected")])
            let environment = [
                "PUSHGATE_CORE_SYNC": "true", "PUSHGATE_QUEUE_ENGINE": engine, "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/wns-detail.sqlite",
                "PUSHGATE_QUEUE_POSTGRES_URL": postgres ?? "",
            ]
            let notifID = "wns-\(engine)-\(UUID().uuidString)"
            try await env.withGateway(yaml(wns), environment: environment) { client, _ in
                let r = try await client.push(
                    #"{"notifications":[{"notif_id":"\#(notifID)","platform":7,"tokens":["\#(Self.channel("off-\(engine)"))","\#(Self.channel("on-\(engine)"))"],"message":"m"}]}"#
                )
                XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#, engine)
                var deliveries: [[String: Any]] = []
                try await waitUntil("both deliveries are recorded (\(engine))") {
                    let s = try await client.execute(uri: "/api/push/\(notifID)", method: .get) { jsonObject(String(buffer: $0.body)) }
                    deliveries = s["deliveries"] as? [[String: Any]] ?? []
                    return deliveries.count == 2 && deliveries.allSatisfy { $0["state"] as? String == "delivered" }
                }
                XCTAssertEqual(
                    deliveries[0]["provider_detail"] as? String, "X-WNS-Status: dropped, X-WNS-DeviceConnectionStatus: disconnected", engine)
                XCTAssertEqual(deliveries[1]["provider_detail"] as? String, "X-WNS-Status: received", engine)
                XCTAssertNotNil(deliveries[0]["provider_id"] as? String, "the X-WNS-Msg-ID stays the provider id (\(engine))")
                XCTAssertFalse((deliveries[0]["provider_id"] as? String ?? "").contains("dropped"), engine)
            }
        }
    }
}
