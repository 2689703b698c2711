import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import QueueStore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Idempotency-Key, dedup_key and coalesced wake-ups, through a live gateway to the TLS
/// HTTP/2 mock APNs, on the memory and the SQLite engines.
final class DeliveryControlsTests: XCTestCase {
    static func token(_ i: Int) -> String { String(format: "%064x", i + 0x15_0000) }

    static func sqlite(_ env: TestEnvironment, _ extra: [String: String] = [:]) -> [String: String] {
        ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/controls/q.sqlite"].merging(extra) { $1 }
    }

    static let engines: [(name: String, sqlite: Bool)] = [("memory", false), ("sqlite", true)]

    static func post(_ client: any TestClientProtocol, _ json: String, key: String? = nil) async throws -> (
        status: Int, body: String, headers: HTTPFields
    ) {
        var h: HTTPFields = [.contentType: "application/json"]
        if let key { h[HTTPField.Name("Idempotency-Key")!] = key }
        return try await client.execute(uri: "/api/push", method: .post, headers: h, body: ByteBuffer(string: json)) { r in
            (Int(r.status.code), String(buffer: r.body), r.headers)
        }
    }

    /// Waits until the gateway has nothing pending (every accepted delivery ended).
    static func drained(_ gateway: Gateway) async -> Bool {
        await eventually { gateway.dispatcher.queue.pendingCount == 0 }
    }

    // MARK: Idempotency-Key

    func testSamePostTwiceWithOneIdempotencyKeyAnswersTheSameAndSendsOnce() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let (a, b) = (Self.token(1), Self.token(2))
            let body = #"{"notifications":[{"tokens":["\#(a)","\#(b)"],"platform":1,"message":"once"}]}"#
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                let first = try await Self.post(client, body, key: "order-42")
                XCTAssertEqual(first.status, 200, first.body)
                let second = try await Self.post(client, body, key: #""order-42""#)  // the draft's sf-string form
                XCTAssertEqual(second.status, 200, engine.name)
                XCTAssertEqual(second.body, first.body, engine.name)
                XCTAssertEqual(second.headers[HTTPField.Name("X-Pushgate-Request-Id")!], first.headers[HTTPField.Name("X-Pushgate-Request-Id")!])
                XCTAssertEqual(second.headers[HTTPField.Name("X-Pushgate-Notif-Ids")!], first.headers[HTTPField.Name("X-Pushgate-Notif-Ids")!])
                XCTAssertEqual(second.headers[HTTPField.Name("Idempotent-Replayed")!], "true")
                XCTAssertNil(first.headers[HTTPField.Name("Idempotent-Replayed")!])
                let sent = await eventually { env.apns.requests(for: a).count == 1 && env.apns.requests(for: b).count == 1 }
                XCTAssertTrue(sent, engine.name)
                let ok1 = await Self.drained(gateway)
                XCTAssertTrue(ok1)
                XCTAssertEqual(gateway.dispatcher.stats.snapshot.totalCount, 2, "\(engine.name): the replay queued nothing")

                // Same key, another body: 422, nothing sent.
                let other = try await Self.post(client, body.replacingOccurrences(of: "once", with: "twice"), key: "order-42")
                XCTAssertEqual(other.status, 422, other.body)
                XCTAssertTrue(other.body.contains("Idempotency-Key"), other.body)
                // Another key: processed as a new request.
                let fresh = try await Self.post(client, body, key: "order-43")
                XCTAssertEqual(fresh.status, 200)
                XCTAssertNotEqual(
                    fresh.headers[HTTPField.Name("X-Pushgate-Request-Id")!], first.headers[HTTPField.Name("X-Pushgate-Request-Id")!])
                let ok2 = await eventually { env.apns.requests(for: a).count == 2 }
                XCTAssertTrue(ok2)
                // A key that is not 1-255 visible ASCII characters: 400 naming the header, nothing queued.
                for bad in [String(repeating: "k", count: 256), "two words", "\"\""] {
                    let r = try await Self.post(client, body, key: bad)
                    XCTAssertEqual(r.status, 400, bad)
                    XCTAssertTrue(r.body.contains("Idempotency-Key"), r.body)
                }
                // A request refused for its body does not hold the key.
                let refused = try await Self.post(client, #"{"notifications":[{"tokens":["x"],"platform":1,"badge":"nine"}]}"#, key: "order-44")
                XCTAssertEqual(refused.status, 400)
                let retried = try await Self.post(client, body, key: "order-44")
                XCTAssertEqual(retried.status, 200)
            }
        }
    }

    func testIdempotencyKeyHoldsAcrossARestart() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let t = Self.token(3)
        let body = #"{"notifications":[{"notif_id":"idem-restart","tokens":["\#(t)"],"platform":1,"message":"after restart"}]}"#
        let kept = NIOLockedValueBox<(status: Int, body: String, headers: HTTPFields)?>(nil)
        try await env.withGateway(environment: Self.sqlite(env)) { client, gateway in
            let answer = try await Self.post(client, body, key: "restart-key")
            kept.withLockedValue { $0 = answer }
            XCTAssertEqual(answer.status, 200)
            let ok3 = await eventually { env.apns.requests(for: t).count == 1 }
            XCTAssertTrue(ok3)
            let ok4 = await Self.drained(gateway)
            XCTAssertTrue(ok4)
        }
        try await env.withGateway(environment: Self.sqlite(env)) { client, gateway in
            let again = try await Self.post(client, body, key: "restart-key")
            XCTAssertEqual(again.status, 200)
            let firstAnswer = kept.withLockedValue { $0 }
            XCTAssertEqual(again.body, firstAnswer?.body)
            XCTAssertEqual(
                again.headers[HTTPField.Name("X-Pushgate-Request-Id")!], firstAnswer?.headers[HTTPField.Name("X-Pushgate-Request-Id")!])
            XCTAssertEqual(again.headers[HTTPField.Name("Idempotent-Replayed")!], "true")
            try await Task.sleep(for: .milliseconds(300))
            XCTAssertEqual(env.apns.requests(for: t).count, 1, "not sent again after the restart")
            XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 0, "nothing queued by the second gateway")
        }
    }

    func testTheSecondOfTwoConcurrentRequestsWithOneKeyIsTold409() async throws {
        // The first request is sync and waits for the provider's answer, held until the second was answered.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        let t = Self.token(4)
        let body = #"{"sync":true,"notifications":[{"tokens":["\#(t)"],"platform":1,"message":"slow"}]}"#
        try await env.withGateway { client, _ in
            let port = try XCTUnwrap(client.port)
            async let first = Self.post(client, body, key: "slow-key")
            try await waitUntil("the first request at the provider") { env.apns.requests(for: t).count == 1 }
            // On a second connection while the first waits for the provider.
            let second = try await withHTTPClient(HTTPClient.Configuration()) { http in
                var req = HTTPClientRequest(url: "http://127.0.0.1:\(port)/api/push")
                req.method = .POST
                req.headers.add(name: "Content-Type", value: "application/json")
                req.headers.add(name: "Idempotency-Key", value: "slow-key")
                req.body = .bytes(ByteBuffer(string: body))
                let r = try await http.execute(req, timeout: .seconds(10))
                let text = String(buffer: try await r.body.collect(upTo: 1 << 16))
                return (status: Int(r.status.code), body: text, retryAfter: r.headers.first(name: "Retry-After"))
            }
            XCTAssertEqual(second.status, 409, second.body)
            XCTAssertEqual(second.retryAfter, "1")
            hold.release()
            let f = try await first
            XCTAssertEqual(f.status, 200)
            let third = try await Self.post(client, body, key: "slow-key")
            XCTAssertEqual(third.status, 200)
            XCTAssertEqual(third.body, f.body)
            XCTAssertEqual(env.apns.requests(for: t).count, 1)
        }
    }

    // MARK: dedup_key

    func testTwoNotificationsWithOneDedupKeyToOneTokenSendOnce() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let (a, b) = (Self.token(5), Self.token(6))
            @Sendable func n(_ id: String, _ tokens: [String], key: String = "stmt-hash-1") -> String {
                #"{"notif_id":"\#(id)","tokens":[\#(tokens.map { "\"\($0)\"" }.joined(separator: ","))],"platform":1,"message":"statement","dedup_key":"\#(key)"}"#
            }
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                // Sender one, then sender two with the same statement hash: a gets it once; b (only in
                // the second) gets it too.
                let one = try await client.push(#"{"notifications":[\#(n("dd-1", [a]))]}"#)
                XCTAssertEqual(one.status, 200)
                let r = try await client.push(#"{"sync":true,"notifications":[\#(n("dd-2", [a, b]))]}"#)
                XCTAssertEqual(r.status, 200)
                XCTAssertEqual((jsonObject(r.body)["logs"] as? [Any])?.count, 0, "a duplicate is not a failure: \(r.body)")
                // The same key twice inside one request: the second is the duplicate.
                let inOne = try await client.push(#"{"notifications":[\#(n("dd-3", [b], key: "k2")),\#(n("dd-4", [b], key: "k2"))]}"#)
                XCTAssertEqual(inOne.status, 200)
                let ok5 = await Self.drained(gateway)
                XCTAssertTrue(ok5)
                XCTAssertEqual(env.apns.requests(for: a).count, 1, engine.name)
                XCTAssertEqual(env.apns.requests(for: b).count, 2, engine.name)

                let second = await statusJSON(client, "dd-2")
                XCTAssertEqual(second["counts"] as? [String: Int], ["queued": 0, "retrying": 0, "delivered": 1, "failed": 0, "duplicate": 1])
                let ds = try XCTUnwrap(second["deliveries"] as? [[String: Any]])
                XCTAssertEqual(ds.map { $0["state"] as? String }, ["duplicate", "delivered"], engine.name)
                let fourth = await statusJSON(client, "dd-4")
                XCTAssertEqual((fourth["deliveries"] as? [[String: Any]])?.first?["state"] as? String, "duplicate")
                // Not failures: no feedback post, not counted as errors.
                try await Task.sleep(for: .milliseconds(200))
                XCTAssertEqual(env.feedbackCount, 0)
                XCTAssertEqual(gateway.dispatcher.stats.snapshot.platforms["ios"]?.pushError ?? 0, 0)
                XCTAssertEqual(gateway.dispatcher.stats.snapshot.platforms["ios"]?.pushSuccess, 3)
            }
        }
    }

    // MARK: coalesced wake-ups

    func testTenBackgroundPushesInOneSecondReachTheDeviceAtMostTwice() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let t = Self.token(7)
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                // The window opens when the first push is accepted: never before this instant.
                let firstSent = Date()
                for i in 1...10 {
                    let r = try await client.push(
                        #"{"notifications":[{"notif_id":"wake-\#(i)","tokens":["\#(t)"],"platform":1,"content_available":true,"push_type":"background","collapse_id":"sync-now","coalesce_seconds":2,"data":{"seq":\#(i)}}]}"#
                    )
                    XCTAssertEqual(r.status, 200, r.body)
                    try await Task.sleep(for: .milliseconds(10))
                }
                let ok6 = await eventually(timeout: 15) { gateway.dispatcher.queue.pendingCount == 0 }
                XCTAssertTrue(ok6, engine.name)
                try await Task.sleep(for: .milliseconds(300))
                let got = env.apns.requests(for: t)
                XCTAssertEqual(got.count, 2, "\(engine.name): the first at once, the last at the window's end")
                func seq(_ r: MockAPNs.RecordedRequest) -> Int? {
                    ((try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any])?["seq"] as? Int
                }
                XCTAssertEqual(got.first.flatMap(seq), 1)
                XCTAssertEqual(got.last.flatMap(seq), 10, "the last push carries the tenth payload")
                if got.count == 2 {
                    XCTAssertGreaterThanOrEqual(got[1].receivedAt.timeIntervalSince(firstSent), 1.99, "held until the window closed")
                }
                var states: [String] = []
                for i in 1...10 {
                    let s = await statusJSON(client, "wake-\(i)")
                    states.append(((s["deliveries"] as? [[String: Any]])?.first?["state"] as? String) ?? "?")
                }
                XCTAssertEqual(states, ["delivered"] + Array(repeating: "coalesced", count: 8) + ["delivered"], engine.name)
                XCTAssertEqual(env.feedbackCount, 0, "coalesced is not a failure")

                // A push after the window of the last one went out waits for its window too (one per 2 s).
                let r = try await client.push(
                    #"{"notifications":[{"notif_id":"wake-11","tokens":["\#(t)"],"platform":1,"content_available":true,"collapse_id":"sync-now","coalesce_seconds":2,"data":{"seq":11}}]}"#
                )
                XCTAssertEqual(r.status, 200)
                let ok7 = await eventually(timeout: 10) { env.apns.requests(for: t).count == 3 }
                XCTAssertTrue(ok7)
                let all = env.apns.requests(for: t)
                // Held for a window opened when the tenth went out (a send takes milliseconds; without
                // the window this one would follow at once).
                XCTAssertGreaterThanOrEqual(all[2].receivedAt.timeIntervalSince(all[1].receivedAt), 1.0)
            }
        }
    }

    func testThePlatformDefaultWindowAppliesToBackgroundPushesOnly() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (bg, alert) = (Self.token(8), Self.token(9))
        try await env.withGateway(environment: ["PUSHGATE_IOS_COALESCE_SECONDS": "2"]) { client, gateway in
            for i in 1...4 {
                let r = try await client.push(
                    #"{"notifications":[{"tokens":["\#(bg)"],"platform":1,"content_available":true,"collapse_id":"c","data":{"seq":\#(i)}},{"tokens":["\#(alert)"],"platform":1,"message":"visible \#(i)","collapse_id":"c"}]}"#
                )
                XCTAssertEqual(r.status, 200)
            }
            let ok8 = await eventually { env.apns.requests(for: alert).count == 4 }
            XCTAssertTrue(ok8, "alerts are not coalesced by the default")
            let ok9 = await Self.drained(gateway)
            XCTAssertTrue(ok9)
            XCTAssertEqual(env.apns.requests(for: bg).count, 2)
        }
    }

    // MARK: input

    func testDeliveryControlFieldsAreChecked() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let t = Self.token(10)
            for (field, bad) in [
                ("coalesce_seconds", #""collapse_id":"c","coalesce_seconds":0"#),
                ("coalesce_seconds", #""collapse_id":"c","coalesce_seconds":86401"#),
                ("coalesce_seconds", #""collapse_id":"c","coalesce_seconds":1e300"#),
                ("coalesce_seconds", #""collapse_id":"c","coalesce_seconds":"2""#),
                ("coalesce_seconds", #""coalesce_seconds":2"#),
                ("dedup_key", #""dedup_key":"""#),
                ("dedup_key", #""dedup_key":7"#),
                ("dedup_key", #""dedup_key":"\#(String(repeating: "d", count: 1025))""#),
            ] {
                let r = try await client.push(#"{"notifications":[{"tokens":["\#(t)"],"platform":1,"message":"m",\#(bad)}]}"#)
                XCTAssertEqual(r.status, 400, bad)
                XCTAssertTrue(r.body.contains("notifications[0].\(field)"), r.body)
            }
            XCTAssertTrue(env.apns.requests(for: t).isEmpty)
        }
        XCTAssertThrowsError(try GatewaySettings(RawConfig(yaml: "core:\n  idempotency_ttl: forever\n", environment: [:]))) { e in
            XCTAssertEqual((e as? ConfigError)?.key, "core.idempotency_ttl")
        }
        XCTAssertThrowsError(try RawConfig(yaml: "ios:\n  coalesce_seconds: 100000\n", environment: [:])) { e in
            XCTAssertEqual((e as? ConfigError)?.key, "ios.coalesce_seconds")
        }
    }

    // MARK: the pure rule

    func testCoalescingRule() {
        // First at once; then held for the window's end, each replacing the one before.
        let a1 = Coalescing.arrive(nil, now: 100, seconds: 2, job: 1)
        XCTAssertEqual(a1.notBefore, 100)
        XCTAssertNil(a1.replaced)
        let a2 = Coalescing.arrive(a1.window, now: 100.5, seconds: 2, job: 2)
        XCTAssertEqual(a2.notBefore, 102)
        XCTAssertNil(a2.replaced)
        let a3 = Coalescing.arrive(a2.window, now: 101, seconds: 2, job: 3)
        XCTAssertEqual(a3.notBefore, 102)
        XCTAssertEqual(a3.replaced, 2)
        // After the held one went out at 102, the next window runs to 104.
        let a4 = Coalescing.arrive(a3.window, now: 102.5, seconds: 2, job: 4)
        XCTAssertEqual(a4.notBefore, 104)
        XCTAssertNil(a4.replaced, "job 3 went out at 102: it is not replaced")
        // Quiet for longer than a window: at once again.
        let a5 = Coalescing.arrive(a4.window, now: 110, seconds: 2, job: 5)
        XCTAssertEqual(a5.notBefore, 110)
        XCTAssertEqual(a5.window, CoalesceWindow(end: 112, held: nil, seconds: 2))
        // Nothing held and the window over: at once.
        XCTAssertEqual(Coalescing.arrive(a1.window, now: 103, seconds: 2, job: 6).notBefore, 103)
    }
}
