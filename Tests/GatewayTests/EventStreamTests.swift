import AsyncHTTPClient
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PushDispatch
import PushgateCore
import QueueStore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// The delivery event stream: the signed, durable webhook and `GET /api/events` (Server-Sent Events).
final class EventStreamTests: XCTestCase {
    static let secret = "events-secret-0123456789"
    /// Events the outage test produces (two per delivery: `accepted`, `sent`): `PUSHGATE_EVENTS_TEST_COUNT`,
    /// 2,000 by default (the process-level `Tests/system/events-test.py` makes 10,000 against a real gateway).
    static var eventCount: Int {
        let n = Int(ProcessInfo.processInfo.environment["PUSHGATE_EVENTS_TEST_COUNT"] ?? "") ?? 2_000
        return max(2, n - n % 2)
    }

    static func token(_ i: Int) -> String { String(format: "%064x", 0xe0e0_0000 + i) }

    /// A webhook receiver (HTTPS on the mocks' CA) on a fixed port: down until `start()`.
    final class Receiver: Sendable {
        let port: Int
        let pki: TestPKI
        let posts = NIOLockedValueBox<[MockRequest]>([])
        let server = NIOLockedValueBox<MockHTTPServer?>(nil)

        init(pki: TestPKI) async throws {
            self.pki = pki
            // A free port, closed again: the webhook finds nobody listening until `start()`.
            var o = MockHTTPServer.Options()
            o.tls = try pki.serverTLSConfiguration()
            let probe = MockHTTPServer(
                options: o, eventLoopGroup: MultiThreadedEventLoopGroup.singleton, syncHandler: { _ in MockResponse(status: 200) })
            try await probe.start()
            port = probe.port
            try await probe.stop()
        }

        var url: String { "https://127.0.0.1:\(port)/hooks/pushgate" }

        func start() async throws {
            var o = MockHTTPServer.Options()
            o.tls = try pki.serverTLSConfiguration()
            o.port = port
            let posts = self.posts
            let s = MockHTTPServer(
                options: o, eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                syncHandler: { req in
                    posts.withLockedValue { $0.append(req) }
                    return MockResponse(status: 200)
                })
            try await s.start()
            server.withLockedValue { $0 = s }
        }

        func stop() async {
            if let s = server.withLockedValue({ $0 }) { try? await s.stop() }
        }

        /// Every event received, in arrival order.
        var events: [[String: Any]] {
            posts.withLockedValue { $0 }.flatMap { p in
                ((try? JSONSerialization.jsonObject(with: Data(p.body))) as? [[String: Any]]) ?? []
            }
        }

        var distinctIDs: Set<String> { Set(events.compactMap { $0["id"] as? String }) }
    }

    static func eventsYAML(_ receiver: Receiver?, _ extra: String = "") -> String {
        var s = "events:\n  enabled: true\n  batch_max: 500\n  batch_ms: 20\n  retry_max_ms: 200\n  secret: \"\(Self.secret)\"\n"
        if let receiver { s += "  webhook_url: \"\(receiver.url)\"\n" }
        return s + extra
    }

    /// Pushes `deliveries` iOS deliveries in requests of up to 1,000 tokens.
    static func pushDeliveries(_ client: any TestClientProtocol, _ deliveries: Int, from start: Int = 0) async throws {
        var i = start
        while i < start + deliveries {
            let n = min(1000, start + deliveries - i)
            let tokens = (i..<(i + n)).map { "\"\(Self.token($0))\"" }.joined(separator: ",")
            let r = try await client.push(#"{"notifications":[{"tokens":[\#(tokens)],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            i += n
        }
    }

    /// Events stored and not yet taken by the receiver.
    static func unposted(_ stream: EventStream) async throws -> Int64 {
        try await stream.store.lastSeq() - stream.store.postedSeq()
    }

    static func verifySignatures(_ receiver: Receiver, file: StaticString = #filePath, line: UInt = #line) {
        let posts = receiver.posts.withLockedValue { $0 }
        XCTAssertFalse(posts.isEmpty, file: file, line: line)
        for p in posts {
            let mac = HMAC<SHA256>.authenticationCode(for: p.body, using: SymmetricKey(data: Array(Self.secret.utf8)))
            let expected = "sha256=" + mac.map { String(format: "%02x", $0) }.joined()
            XCTAssertEqual(p.header("X-Pushgate-Signature"), expected, "HMAC-SHA256 of the body under events.secret", file: file, line: line)
            XCTAssertEqual(p.method, "POST", file: file, line: line)
            XCTAssertEqual(p.path, "/hooks/pushgate", file: file, line: line)
        }
    }

    // MARK: - Webhook

    /// The receiver is down while every event is produced, then comes up: it gets every event
    /// (each id at least once, none missing), each POST signed with the secret.
    func testWebhookOutageLosesNothing() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let receiver = try await Receiver(pki: env.pki)
        defer { Task { await receiver.stop() } }
        let total = Self.eventCount
        let deliveries = total / 2
        try await env.withGateway(Self.eventsYAML(receiver)) { client, gateway in
            let stream = try XCTUnwrap(gateway.events)
            try await Self.pushDeliveries(client, deliveries)
            try await waitUntil("every delivery sent", timeout: 300) { gateway.dispatcher.stats.snapshot.successTasks == Int64(deliveries) }
            try await waitUntil("every event stored", timeout: 120) { try await Self.unposted(stream) == Int64(total) }
            try await waitUntil("the webhook tried the receiver that is down", timeout: 60) { stream.snapshot.postFailures >= 2 }
            XCTAssertEqual(stream.snapshot.posted, 0)
            XCTAssertEqual(stream.snapshot.dropped, 0)
            let ready = try await client.execute(uri: "/readyz", method: .get) { Int($0.status.code) }
            XCTAssertEqual(ready, 200, "a webhook outage does not fail readiness")

            try await receiver.start()
            try await waitUntil("every event received", timeout: 300) { receiver.distinctIDs.count >= total }
            try await waitUntil("the cursor past every event", timeout: 60) { try await Self.unposted(stream) == 0 }
            let events = receiver.events
            let ids = receiver.distinctIDs
            XCTAssertEqual(ids.count, total, "every id, none missing")
            let seqs = ids.compactMap { Int64($0) }.sorted()
            XCTAssertEqual(seqs.count, total)
            XCTAssertEqual(seqs.last! - seqs.first! + 1, Int64(total), "consecutive ids: none missing")
            var byType: [String: Set<String>] = [:]
            for e in events { byType[e["type"] as? String ?? "", default: []].insert(e["id"] as? String ?? "") }
            XCTAssertEqual(byType["accepted"]?.count, deliveries)
            XCTAssertEqual(byType["sent"]?.count, deliveries)
            XCTAssertEqual(byType.count, 2, "\(byType.keys)")
            let sent = try XCTUnwrap(events.first { $0["type"] as? String == "sent" })
            XCTAssertEqual(sent["app"] as? String, AppID.defaultApp)
            XCTAssertEqual(sent["platform"] as? String, "ios")
            XCTAssertEqual(sent["attempt"] as? Int, 1)
            XCTAssertNotNil(sent["provider_message_id"] as? String)
            XCTAssertTrue((sent["token"] as? String ?? "").hasPrefix("**********"), "masked per log.hide_token")
            XCTAssertTrue((sent["time"] as? String ?? "").hasSuffix("Z"))
            Self.verifySignatures(receiver)
            XCTAssertLessThanOrEqual(
                receiver.posts.withLockedValue { $0 }.map { (($0.header("X-Pushgate-Event-Count")) ?? "") }.compactMap { Int($0) }.max() ?? 0, 500)
            XCTAssertEqual(stream.snapshot.dropped, 0)
            XCTAssertGreaterThanOrEqual(stream.snapshot.posted, Int64(total))
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains("pushgate_events_dropped_total 0"), metrics)
            XCTAssertTrue(metrics.contains("pushgate_events_pending 0"))
            XCTAssertTrue(metrics.contains("pushgate_events_post_failures_total "))
            XCTAssertFalse(metrics.contains(Self.secret))
            let config = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertFalse(config.contains(Self.secret), "events.secret is redacted")
        }
    }

    /// Past `events.max_stored` the oldest events go, and those not posted are counted and the
    /// receiver gets exactly the newest ones.
    func testBoundDropsOldestAndCountsThem() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let receiver = try await Receiver(pki: env.pki)
        defer { Task { await receiver.stop() } }
        try await env.withGateway(Self.eventsYAML(receiver, "  max_stored: 40\n")) { client, gateway in
            let stream = try XCTUnwrap(gateway.events)
            try await Self.pushDeliveries(client, 30)
            try await waitUntil("60 events recorded and stored", timeout: 60) {
                guard stream.snapshot.recorded == 60 else { return false }
                return try await Self.unposted(stream) >= 40
            }
            try await waitUntil("20 counted as dropped", timeout: 60) { stream.snapshot.dropped == 20 }
            let kept = try await stream.store.events(after: 0, app: nil, limit: 1000).map(\.id)
            XCTAssertEqual(kept.count, 40)
            try await receiver.start()
            try await waitUntil("the 40 kept received", timeout: 120) { receiver.distinctIDs.count >= 40 }
            // The newest 40, and none that was never recorded (a POST under way when the oldest were
            // dropped may still carry some of them: at least once, never invented).
            XCTAssertTrue(Set(kept).isSubset(of: receiver.distinctIDs), "every kept event")
            XCTAssertLessThanOrEqual(receiver.distinctIDs.count, 60)
            XCTAssertEqual(stream.snapshot.dropped, 20)
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains("pushgate_events_dropped_total 20"), metrics)
        }
    }

    /// SQLite: events not yet posted when the gateway stops are posted after it starts again, and
    /// ids go on increasing.
    func testSQLiteEventsSurviveRestart() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let receiver = try await Receiver(pki: env.pki)
        defer { Task { await receiver.stop() } }
        let sqlite = [
            "PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/events/q.sqlite",
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": "1",
        ]
        let deliveries = 300
        try await env.withGateway(Self.eventsYAML(receiver), environment: sqlite) { client, gateway in
            let stream = try XCTUnwrap(gateway.events)
            XCTAssertTrue(stream.store is SQLiteEventStore)
            try await Self.pushDeliveries(client, deliveries)
            try await waitUntil("every delivery sent", timeout: 120) { gateway.dispatcher.stats.snapshot.successTasks == Int64(deliveries) }
            try await waitUntil("every event stored", timeout: 60) { try await Self.unposted(stream) == Int64(2 * deliveries) }
        }
        XCTAssertEqual(receiver.posts.withLockedValue { $0.count }, 0)
        try await receiver.start()
        try await env.withGateway(Self.eventsYAML(receiver), environment: sqlite) { client, gateway in
            let stream = try XCTUnwrap(gateway.events)
            try await waitUntil("the stored events posted after the restart", timeout: 120) { receiver.distinctIDs.count >= 2 * deliveries }
            let before = receiver.distinctIDs.compactMap { Int64($0) }
            XCTAssertEqual(before.count, 2 * deliveries)
            XCTAssertEqual(before.max()! - before.min()! + 1, Int64(2 * deliveries))
            try await Self.pushDeliveries(client, 1, from: 10_000)
            try await waitUntil("the new events posted", timeout: 60) { receiver.distinctIDs.count >= 2 * deliveries + 2 }
            let after = receiver.distinctIDs.compactMap { Int64($0) }.filter { !before.contains($0) }
            XCTAssertEqual(after.count, 2)
            XCTAssertGreaterThan(after.min()!, before.max()!, "ids go on increasing after a restart")
            try await waitUntil("nothing left to post", timeout: 60) { try await Self.unposted(stream) == 0 }
            Self.verifySignatures(receiver)
        }
    }

    /// PostgreSQL: the events go through the queue's database to the receiver.
    func testPostgresWebhook() async throws {
        guard let url = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"], !url.isEmpty else {
            throw XCTSkip("PUSHGATE_TEST_POSTGRES_URL is not set (scripts/start-postgres.sh)")
        }
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let receiver = try await Receiver(pki: env.pki)
        defer { Task { await receiver.stop() } }
        try await receiver.start()
        let pg = ["PUSHGATE_QUEUE_ENGINE": "postgres", "PUSHGATE_QUEUE_POSTGRES_URL": url]
        let notifID = "pg-\(UUID().uuidString)"
        try await env.withGateway(Self.eventsYAML(receiver), environment: pg) { client, gateway in
            XCTAssertTrue(gateway.events?.store is PostgresEventStore)
            let tokens = (0..<100).map { "\"\(Self.token(20_000 + $0))\"" }.joined(separator: ",")
            let r = try await client.push(#"{"notifications":[{"notif_id":"\#(notifID)","tokens":[\#(tokens)],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            func mine() -> [[String: Any]] { receiver.events.filter { $0["notif_id"] as? String == notifID } }
            try await waitUntil("the 200 events of the notification", timeout: 120) { Set(mine().compactMap { $0["id"] as? String }).count >= 200 }
            let events = mine()
            XCTAssertEqual(Set(events.compactMap { $0["delivery"] as? Int }), Set(0..<100))
            XCTAssertEqual(events.filter { $0["type"] as? String == "sent" }.count, 100)
            Self.verifySignatures(receiver)
        }
    }

    /// PostgreSQL shared by two gateways: a client of one sees the events the other stores.
    func testPostgresSSESeesEveryGatewaysEvents() async throws {
        guard let url = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"], !url.isEmpty else {
            throw XCTSkip("PUSHGATE_TEST_POSTGRES_URL is not set (scripts/start-postgres.sh)")
        }
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let pg = ["PUSHGATE_QUEUE_ENGINE": "postgres", "PUSHGATE_QUEUE_POSTGRES_URL": url]
        let notifID = "pg-sse-\(UUID().uuidString)"
        try await env.withGateway(Self.eventsYAML(nil), environment: pg) { clientA, _ in
            let sse = try await SSEClient.connect(port: try XCTUnwrap(clientA.port))
            defer { sse.close() }
            try await env.withGateway(Self.eventsYAML(nil), environment: pg) { clientB, _ in
                let r = try await clientB.push(
                    #"{"notifications":[{"notif_id":"\#(notifID)","tokens":["\#(Self.token(30_000))"],"platform":1,"message":"hi"}]}"#)
                XCTAssertEqual(r.status, 200, r.body)
                try await waitUntil("the other gateway's two events", timeout: 60) {
                    sse.events.filter { $0.json["notif_id"] as? String == notifID }.count >= 2
                }
                let mine = sse.events.filter { $0.json["notif_id"] as? String == notifID }
                XCTAssertEqual(mine.map { $0.json["type"] as? String ?? "" }, ["accepted", "sent"])
                let ids = sse.events.compactMap { Int64($0.id) }
                XCTAssertEqual(ids, ids.sorted())
                XCTAssertEqual(Set(ids).count, ids.count, "each event once")
            }
        }
    }

    // MARK: - Server-Sent Events

    /// Live events to an app's key and an admin key; another app's key sees none of them; a
    /// reconnect with `Last-Event-ID` (or `?last_event_id=`) gets every event after it.
    func testServerSentEventsLiveResumeAndScope() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let dead = MultiAppTests.token(7)
        env.apns.script(dead, [.unregistered])
        // Apps of their own (metrics are per process: MultiAppTests counts its chat and wallet).
        func ios(_ name: String, _ key: TestAPNsKey) -> String {
            "    ios: { key_path: \"\(env.directory)/\(name).p8\", key_id: \"\(key.keyID)\", team_id: \"\(key.teamID)\", "
                + "topic: com.example.\(name), endpoint: \"\(env.apns.baseURL)\" }\n"
        }
        let apps =
            "apps:\n  - id: ev-chat\n    api_keys: [\"\(MultiAppTests.chatKey)\"]\n" + ios("chat", env.chatKey)
            + "  - id: ev-wallet\n    api_keys: [\"\(MultiAppTests.walletKey)\"]\n" + ios("wallet", env.walletKey)
        let yaml = apps + Self.eventsYAML(nil)
        try await env.withGateway(yaml, environment: MultiAppTests.keys) { client, gateway in
            let port = try XCTUnwrap(client.port)
            let admin = try await SSEClient.connect(port: port, key: MultiAppTests.adminKey)
            let chat = try await SSEClient.connect(port: port, key: MultiAppTests.chatKey)
            let wallet = try await SSEClient.connect(port: port, key: MultiAppTests.walletKey)
            defer {
                admin.close()
                chat.close()
                wallet.close()
            }
            XCTAssertTrue(admin.head.hasPrefix("HTTP/1.1 200"), admin.head)
            XCTAssertTrue(admin.head.lowercased().contains("content-type: text/event-stream"), admin.head)

            let r = try await MultiAppTests.call(
                client, "/api/push", .post, key: MultiAppTests.chatKey, body: MultiAppTests.push([1, 2, 7], id: "c1"))
            XCTAssertEqual(r.status, 200, r.body)
            try await waitUntil("chat's six events", timeout: 60) { chat.events.count >= 6 }
            try await waitUntil("the admin's six events", timeout: 60) { admin.events.count >= 6 }
            let chatEvents = chat.events
            XCTAssertEqual(chatEvents.map(\.id), admin.events.map(\.id), "the same events, the same order")
            let types = chatEvents.map { $0.json["type"] as? String ?? "" }
            XCTAssertEqual(types.filter { $0 == "accepted" }.count, 3)
            XCTAssertEqual(types.filter { $0 == "sent" }.count, 2)
            XCTAssertEqual(types.filter { $0 == "token_dead" }.count, 1)
            let deadEvent = try XCTUnwrap(chatEvents.first { $0.json["type"] as? String == "token_dead" }?.json)
            XCTAssertEqual(deadEvent["class"] as? String, "token_dead")
            XCTAssertEqual(deadEvent["reason"] as? String, "Unregistered")
            XCTAssertEqual(deadEvent["delivery"] as? Int, 2, "the third token of the notification")
            XCTAssertEqual(deadEvent["notif_id"] as? String, "c1")
            XCTAssertEqual(deadEvent["app"] as? String, "ev-chat")
            let ids = chatEvents.compactMap { Int64($0.id) }
            XCTAssertEqual(ids, ids.sorted(), "ids increase along the stream")
            for e in chatEvents { XCTAssertEqual(e.json["id"] as? String, e.id) }

            // Another app's key: a wallet push arrives, chat's events never did.
            let w = try await MultiAppTests.call(client, "/api/push", .post, key: MultiAppTests.walletKey, body: MultiAppTests.push([3], id: "w1"))
            XCTAssertEqual(w.status, 200, w.body)
            try await waitUntil("wallet's two events", timeout: 60) { wallet.events.count >= 2 }
            XCTAssertEqual(wallet.events.count, 2)
            XCTAssertTrue(wallet.events.allSatisfy { $0.json["app"] as? String == "ev-wallet" }, "\(wallet.events.map(\.data))")
            XCTAssertTrue(chat.events.allSatisfy { $0.json["app"] as? String == "ev-chat" })

            // Resume: disconnected after the third event, two more deliveries meanwhile.
            chat.close()
            let resumeAfter = chatEvents[2].id
            let r2 = try await MultiAppTests.call(client, "/api/push", .post, key: MultiAppTests.chatKey, body: MultiAppTests.push([4, 5], id: "c2"))
            XCTAssertEqual(r2.status, 200)
            try await waitUntil("the admin's chat events", timeout: 60) { admin.events.filter { $0.json["app"] as? String == "ev-chat" }.count >= 10 }
            let expected = admin.events.filter { $0.json["app"] as? String == "ev-chat" && Int64($0.id)! > Int64(resumeAfter)! }.map(\.id)
            XCTAssertEqual(expected.count, 7)
            let resumed = try await SSEClient.connect(port: port, key: MultiAppTests.chatKey, lastEventID: resumeAfter)
            defer { resumed.close() }
            try await waitUntil("every event after the last one seen", timeout: 60) { resumed.events.count >= 7 }
            XCTAssertEqual(resumed.events.map(\.id), expected, "none missed, none repeated")
            let byQuery = try await SSEClient.connect(port: port, key: MultiAppTests.chatKey, path: "/api/events?last_event_id=\(resumeAfter)")
            defer { byQuery.close() }
            try await waitUntil("the same by ?last_event_id=", timeout: 60) { byQuery.events.count >= 7 }
            XCTAssertEqual(byQuery.events.map(\.id), expected)

            // A wallet key resuming from the start gets wallet's events only.
            let walletAll = try await SSEClient.connect(port: port, key: MultiAppTests.walletKey, lastEventID: "0")
            defer { walletAll.close() }
            try await waitUntil("wallet's stored events", timeout: 60) { walletAll.events.count >= 2 }
            XCTAssertTrue(walletAll.events.allSatisfy { $0.json["app"] as? String == "ev-wallet" })

            // Hostile Last-Event-ID: a 400 naming it; no key: 401.
            let bad = try await client.execute(
                uri: "/api/events", method: .get,
                headers: [.authorization: "Bearer \(MultiAppTests.adminKey)", HTTPField.Name("Last-Event-ID")!: "-1"]
            ) { (Int($0.status.code), String(buffer: $0.body)) }
            XCTAssertEqual(bad.0, 400)
            XCTAssertTrue(bad.1.contains("Last-Event-ID"), bad.1)
            let huge = try await client.execute(
                uri: "/api/events?last_event_id=99999999999999999999999", method: .get, headers: [.authorization: "Bearer \(MultiAppTests.adminKey)"]
            ) { (Int($0.status.code), String(buffer: $0.body)) }
            XCTAssertEqual(huge.0, 400)
            XCTAssertTrue(huge.1.contains("last_event_id"), huge.1)
            let anonymous = try await client.execute(uri: "/api/events", method: .get) { Int($0.status.code) }
            XCTAssertEqual(anonymous, 401)
        }
    }

    /// A cap on clients (503 past it) and a slow client disconnected, not buffered without bound.
    func testClientCapAndSlowClient() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway(Self.eventsYAML(nil, "  sse_max_clients: 2\n  sse_client_buffer: 4\n")) { client, gateway in
            let port = try XCTUnwrap(client.port)
            let stream = try XCTUnwrap(gateway.events)
            let first = try await SSEClient.connect(port: port)
            defer { first.close() }
            XCTAssertTrue(first.head.hasPrefix("HTTP/1.1 200"), first.head)
            // A subscriber nobody reads takes the second place.
            let sub = try XCTUnwrap(stream.subscribe(app: nil))
            let third = try await SSEClient.connect(port: port)
            defer { third.close() }
            XCTAssertTrue(third.head.hasPrefix("HTTP/1.1 503"), third.head)
            XCTAssertTrue(third.head.lowercased().contains("retry-after"), third.head)
            XCTAssertNil(stream.subscribe(app: nil))

            // Past its buffer (4 events) it is closed and its buffer let go.
            // One delivery at a time, each one's events stored before the next: the first batch
            // fills it, a later one finds it still holding events and over its buffer.
            var i = 0
            while !sub.overflowed, i < 20 {
                try await Self.pushDeliveries(client, 1, from: 100 + i)
                i += 1
                let n = 2 * i
                try await waitUntil("the events of \(i) deliveries stored", timeout: 60) {
                    try await stream.store.events(after: 0, app: nil, limit: 1000).count >= n
                }
            }
            XCTAssertTrue(sub.overflowed)
            XCTAssertTrue(sub.take().isEmpty)
            stream.unsubscribe(sub)
            // (the connected client may have fallen behind too: its writer races the batches)
            XCTAssertGreaterThanOrEqual(stream.snapshot.sseDisconnectedSlow, 1)
        }
    }

    func testEventsOffAnswers404() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, gateway in
            XCTAssertNil(gateway.events)
            let r = try await client.execute(uri: "/api/events", method: .get) { (Int($0.status.code), String(buffer: $0.body)) }
            XCTAssertEqual(r.0, 404)
            XCTAssertTrue(r.1.contains("events.enabled"), r.1)
        }
    }

    // MARK: - Model and configuration

    func testSignatureAsGitHubSigns() {
        // GitHub's documented example (docs.github.com, "Validating webhook deliveries").
        XCTAssertEqual(
            EventWebhook.signature(secret: "It's a Secret to Everybody", body: Array("Hello, World!".utf8)),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
    }

    /// Log lines name the receiver's scheme, host and port, never a path or query that may hold a token.
    func testWebhookURLInLogs() async throws {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        let stream = EventStream(store: MemoryEventStore(maxStored: 1), hideToken: true, countsDrops: true)
        let w = EventWebhook(
            url: "https://user:pw@hooks.example.com:8443/in/t0k3n?sig=abc", secret: Self.secret, client: client, stream: stream, batchMax: 1,
            batchMilliseconds: 0)
        XCTAssertEqual(w.safeURL, "https://hooks.example.com:8443")
        try await client.shutdown()
    }

    func testTimeAndJSON() {
        XCTAssertEqual(RFC3339.milliseconds(Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(RFC3339.milliseconds(Date(timeIntervalSince1970: 1_767_323_045.678)), "2026-01-02T03:04:05.678Z")
        XCTAssertEqual(RFC3339.milliseconds(Date(timeIntervalSince1970: 951_782_400)), "2000-02-29T00:00:00.000Z")
        XCTAssertEqual(RFC3339.milliseconds(Date(timeIntervalSince1970: -5)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(RFC3339.milliseconds(Date(timeIntervalSince1970: .infinity)), "1970-01-01T00:00:00.000Z")
        let e = StoredEvent(seq: 42, app: "a", body: #"{"type":"sent"}"#)
        XCTAssertEqual(e.json, #"{"id":"42","type":"sent"}"#)
        XCTAssertEqual(Gateway.parseEventID("17"), 17)
        XCTAssertNil(Gateway.parseEventID("1e3"))
        XCTAssertNil(Gateway.parseEventID(""))
        XCTAssertNil(Gateway.parseEventID("-1"))
        XCTAssertNil(Gateway.parseEventID(String(repeating: "9", count: 19)))
    }

    /// Every `DeliveryEvent` case maps to its event type.
    func testMapping() {
        let n = PushNotification(platform: .ios, tokens: ["t0", "t1"])
        let accepted = AcceptedNotification(notifID: "n", notification: n, prepared: nil, app: "chat")
        var job = DeliveryJob(id: 9, messageID: "m", target: .token("t1"), accepted: accepted, maxAttempts: 3, now: Date())
        let mapper = PushEventMapper(hideToken: false)
        let t = Date(timeIntervalSince1970: 0)
        XCTAssertTrue(mapper.events(.submitted(counts: 1, queued: 1), now: t).isEmpty)
        let a = mapper.events(.accepted(job), now: t)
        XCTAssertEqual(a.map(\.type), [.accepted])
        XCTAssertEqual(a.first?.delivery, 1, "found in the notification when not set")
        XCTAssertEqual(a.first?.token, "t1")
        job.attempts = 1
        job.notBefore = Date(timeIntervalSince1970: 5)
        job.lastError = "TooManyRequests"
        XCTAssertTrue(
            mapper.events(.attempted(job, outcome: .transient(reason: "TooManyRequests", status: 429, retryAfter: 5), started: t, ended: t), now: t)
                .isEmpty)
        let r = mapper.events(.retrying(job, outcome: .transient(reason: "TooManyRequests", status: 429, retryAfter: 5)), now: t)
        XCTAssertEqual(r.map(\.type), [.retrying])
        XCTAssertEqual(r.first?.errorClass, "transient")
        XCTAssertEqual(r.first?.nextTry, Date(timeIntervalSince1970: 5))
        XCTAssertTrue(r.first?.body.contains(#""next_try":"1970-01-01T00:00:05.000Z""#) ?? false)
        _ = mapper.events(.attempted(job, outcome: .permanent(reason: "BadTopic", status: 400), started: t, ended: t), now: t)
        let f = mapper.events(.finished(job, .failed(reason: "BadTopic", tokenDead: false), phase: .afterSending, failure: nil), now: t)
        XCTAssertEqual(f.map(\.type), [.failed])
        XCTAssertEqual(f.first?.errorClass, "permanent")
        let d = mapper.events(.finished(job, .failed(reason: "Unregistered", tokenDead: true), phase: .afterSending, failure: nil), now: t)
        XCTAssertEqual(d.map(\.type), [.tokenDead])
        XCTAssertEqual(
            mapper.events(.finished(job, .failed(reason: "x", tokenDead: false), phase: .beforeSending, failure: nil), now: t).first?.errorClass,
            "rejected")
        let s = mapper.events(.finished(job, .delivered(providerID: "p-1"), phase: .afterSending, failure: nil), now: t)
        XCTAssertEqual(s.map(\.type), [.sent])
        XCTAssertEqual(s.first?.providerMessageID, "p-1")
        XCTAssertEqual(mapper.events(.finished(job, .skipped(.coalesced), phase: .skipped, failure: nil), now: t).map(\.type), [.coalesced])
        XCTAssertEqual(mapper.events(.finished(job, .skipped(.duplicate), phase: .skipped, failure: nil), now: t).map(\.type), [.duplicate])
        let fb = AcceptedNotification(
            notifID: "n", notification: n, prepared: nil, app: "chat", fallback: FallbackInfo(payloadBytes: 5000, limit: 4096, fallbackBytes: 100))
        var fj = job
        fj.accepted = fb
        XCTAssertEqual(
            mapper.events(.finished(fj, .delivered(providerID: nil), phase: .afterSending, failure: nil), now: t).map(\.type), [.fallbackSent])
        XCTAssertTrue(PushEventMapper(hideToken: true).events(.accepted(job), now: t).first?.token == TokenMask.mask("t1"))
        // Scheduled sends, cancelling, quiet hours, the analytics label.
        var ln = PushNotification(platform: .ios, tokens: ["t0"])
        ln.analyticsLabel = "spring_sale"
        var sj = DeliveryJob(
            id: 11, messageID: "m", target: .token("t0"), accepted: AcceptedNotification(notifID: "s", notification: ln, prepared: nil),
            maxAttempts: 1, now: t)
        sj.notBefore = Date(timeIntervalSince1970: 60)
        let sch = mapper.events(.accepted(sj), now: t)
        XCTAssertEqual(sch.map(\.type), [.accepted, .scheduled])
        XCTAssertEqual(sch.last?.nextTry, Date(timeIntervalSince1970: 60))
        XCTAssertEqual(sch.first?.analyticsLabel, "spring_sale")
        XCTAssertTrue(sch.first?.body.contains(#""analytics_label":"spring_sale""#) ?? false)
        XCTAssertEqual(mapper.events(.finished(sj, .skipped(.cancelled), phase: .skipped, failure: nil), now: t).map(\.type), [.cancelled])
        XCTAssertEqual(mapper.events(.finished(sj, .skipped(.quietHours), phase: .skipped, failure: nil), now: t).map(\.type), [.quietHours])

        // A job read back from a store (no index) of a large notification: found by its target.
        let big = AcceptedNotification(
            notifID: "big", notification: PushNotification(platform: .ios, tokens: (0..<100).map { "tok\($0)" }), prepared: nil)
        for k in [0, 57, 99, 57] {
            let j = DeliveryJob(id: UInt64(k), messageID: "m", target: .token("tok\(k)"), accepted: big, maxAttempts: 1, now: t)
            XCTAssertEqual(mapper.events(.accepted(j), now: t).first?.delivery, k)
        }
    }

    func testConfiguration() throws {
        func error(_ yaml: String) -> String {
            do {
                let raw = try RawConfig(yaml: yaml, environment: ["PUSHGATE_QUEUE_ENGINE": "memory"])
                _ = try EventsWiring.make(raw: raw, settings: try GatewaySettings(raw), clients: nil, logger: Logger(label: "t"))
                return ""
            } catch { return "\(error)" }
        }
        XCTAssertTrue(error("events:\n  webhook_url: \"file:///etc/passwd\"\n").contains("events.webhook_url"))
        XCTAssertTrue(error("events:\n  webhook_url: \"ftp://x/\"\n").contains("events.webhook_url"))
        XCTAssertTrue(error("events:\n  webhook_url: \"http://\"\n").contains("events.webhook_url"))
        XCTAssertTrue(error("events:\n  enabled: true\n  types: [sent, nonsense]\n").contains("events.types"))
        XCTAssertTrue(error("events:\n  batch_max: 0\n").contains("events.batch_max"))
        XCTAssertEqual(error("events:\n  enabled: true\n  types: [sent, token_dead]\n"), "")
        let raw = try RawConfig(yaml: "events:\n  secret: \"\(Self.secret)\"\n", environment: [:])
        XCTAssertFalse(raw.redactedYAML().contains(Self.secret))
        XCTAssertNil(try EventsWiring.make(raw: raw, settings: try GatewaySettings(raw), clients: nil, logger: Logger(label: "t")), "off by default")
    }

    func testMemoryStoreBoundAndResume() async throws {
        let store = MemoryEventStore(maxStored: 3, now: Date(timeIntervalSince1970: 1))
        func ev(_ app: String) -> PushEvent {
            PushEvent(type: .sent, time: Date(), app: app, notifID: "n", delivery: 0, platform: "ios", token: "t", attempt: 1)
        }
        let (s1, r1) = try await store.append([ev("a"), ev("b")])
        XCTAssertEqual(r1, 0)
        XCTAssertEqual(s1.map(\.seq), [1_000_001, 1_000_002])
        let (_, r2) = try await store.append([ev("a"), ev("a"), ev("b")])
        XCTAssertEqual(r2, 2, "the two oldest removed, not posted")
        let all = try await store.events(after: 0, app: nil, limit: 10)
        XCTAssertEqual(all.map(\.seq), [1_000_003, 1_000_004, 1_000_005])
        let mine = try await store.events(after: 1_000_003, app: "a", limit: 10)
        XCTAssertEqual(mine.map(\.seq), [1_000_004])
        try await store.setPosted(1_000_005)
        let (_, r3) = try await store.append([ev("a")])
        XCTAssertEqual(r3, 0, "posted events go without counting")
    }
}

/// A Server-Sent Events client on a raw socket (HTTP/1.1): the head and the events as they arrive.
final class SSEClient: Sendable {
    struct Event {
        var id: String
        var data: String
        var json: [String: Any] { jsonObject(data) }
    }

    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let text = NIOLockedValueBox<String>("")
        let closed = NIOLockedValueBox(false)

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let b = unwrapInboundIn(data)
            text.withLockedValue { $0 += String(buffer: b) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            closed.withLockedValue { $0 = true }
            context.fireChannelInactive()
        }
    }

    let channel: any Channel
    let collector: Collector

    init(channel: any Channel, collector: Collector) {
        self.channel = channel
        self.collector = collector
    }

    static func connect(port: Int, key: String? = nil, lastEventID: String? = nil, path: String = "/api/events") async throws -> SSEClient {
        let collector = Collector()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(collector) } }
            .connect(host: "127.0.0.1", port: port).get()
        var req = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        if let key { req += "Authorization: Bearer \(key)\r\n" }
        if let lastEventID { req += "Last-Event-ID: \(lastEventID)\r\n" }
        req += "\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: req)).get()
        let client = SSEClient(channel: channel, collector: collector)
        try await waitUntil("the answer's head", timeout: 30) { client.collector.text.withLockedValue { $0.contains("\r\n\r\n") } }
        return client
    }

    var head: String {
        let t = collector.text.withLockedValue { $0 }
        return t.components(separatedBy: "\r\n\r\n").first ?? ""
    }

    /// The complete events received (chunk-size lines of the chunked encoding skipped).
    var events: [Event] {
        let t = collector.text.withLockedValue { $0 }
        guard let start = t.range(of: "\r\n\r\n") else { return [] }
        var out: [Event] = []
        var id: String?
        var data: String?
        // By bytes: "\r\n" is one Character, which a split on "\n" would not cut.
        for raw in t[start.upperBound...].utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            let bytes = raw.last == UInt8(ascii: "\r") ? raw.dropLast() : raw[...]
            let line = String(decoding: bytes, as: UTF8.self)
            if line.hasPrefix("id: ") {
                id = String(line.dropFirst(4))
            } else if line.hasPrefix("data: ") {
                data = String(line.dropFirst(6))
            } else if line.isEmpty, let i = id, let d = data, d.hasSuffix("}") {
                out.append(Event(id: i, data: d))
                id = nil
                data = nil
            }
        }
        return out
    }

    var isClosed: Bool { collector.closed.withLockedValue { $0 } }

    func close() { channel.close(promise: nil) }
}
