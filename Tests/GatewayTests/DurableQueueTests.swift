import Foundation
import HummingbirdTesting
import MockProviders
import PushDispatch
import PushgateCore
import QueueStore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

func statusJSON(_ client: any TestClientProtocol, _ id: String) async -> [String: Any] {
    let s = try? await client.execute(uri: "/api/push/\(id)", method: .get) { String(buffer: $0.body) }
    return jsonObject(s ?? "")
}

/// The durable queue engines behind a live gateway (HTTP -> gateway -> TLS HTTP/2 -> mock APNs).
final class DurableQueueTests: XCTestCase {
    func token(_ i: Int) -> String { String(format: "%064x", i + 0xd00d) }

    func sqliteEnv(_ env: TestEnvironment, _ extra: [String: String] = [:]) -> [String: String] {
        ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/durable/q.sqlite"].merging(extra) { $1 }
    }

    func testDefaultConfigurationIsDurable() throws {
        var raw = try RawConfig(yaml: nil, environment: [:])
        let settings = try GatewaySettings(raw)
        XCTAssertEqual(settings.queueEngine, "sqlite", "no queue section means the durable engine")
        XCTAssertEqual(raw.string("queue.sqlite.path"), "data/pushgate.sqlite")
        let dir = NSTemporaryDirectory() + "pushgate-default-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        raw.set("queue.sqlite.path", .string(dir + "/data/pushgate.sqlite"))
        let engine = try QueueWiring.make(raw: raw, settings: try GatewaySettings(raw), logger: .init(label: "t"))
        let queue = engine.driver
        XCTAssertTrue(queue is DurableQueue)
        XCTAssertEqual((queue as? DurableQueue)?.options.maxHeld, 10_000, "queue.max_held's default")
        XCTAssertTrue(engine.sinks.isEmpty, "no memory status records: the store is the status source")
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/data/pushgate.sqlite"), "directory and file created")
        queue.shutdown()
        var small = try RawConfig(yaml: nil, environment: ["PUSHGATE_QUEUE_MAX_HELD": "1234"])
        small.set("queue.sqlite.path", .string(dir + "/data/small.sqlite"))
        let smallEngine = try QueueWiring.make(raw: small, settings: try GatewaySettings(small), logger: .init(label: "t"))
        XCTAssertEqual((smallEngine.driver as? DurableQueue)?.options.maxHeld, 1234, "queue.max_held reaches the queue")
        smallEngine.driver.shutdown()
        XCTAssertThrowsError(try GatewaySettings(RawConfig(yaml: "queue:\n  engine: redis\n", environment: [:]))) { e in
            XCTAssertEqual((e as? ConfigError)?.key, "queue.engine")
        }
        XCTAssertEqual(try GatewaySettings(RawConfig(yaml: "queue:\n  engine: local\n", environment: [:])).queueEngine, "memory")
        XCTAssertThrowsError(
            try QueueWiring.make(
                raw: RawConfig(yaml: "queue:\n  engine: postgres\n", environment: [:]),
                settings: GatewaySettings(RawConfig(yaml: "queue:\n  engine: postgres\n", environment: [:])),
                logger: .init(label: "t"))
        ) { e in
            XCTAssertEqual((e as? ConfigError)?.key, "queue.postgres.url")
        }
    }

    func testSQLiteGatewayDeliversAndReportsStatus() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (ok, bad) = (token(1), token(2))
        env.apns.script(bad, [.badDeviceToken])
        try await env.withGateway(environment: sqliteEnv(env)) { client, gateway in
            XCTAssertTrue(gateway.dispatcher.queue is DurableQueue)
            let r = try await client.push(#"{"notifications":[{"notif_id":"durable-1","tokens":["\#(ok)","\#(bad)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200)
            let done = await eventually { gateway.dispatcher.stats.snapshot.successTasks + gateway.dispatcher.stats.snapshot.failureTasks == 2 }
            XCTAssertTrue(done)
            _ = await eventually { (await statusJSON(client, "durable-1")["counts"] as? [String: Int])?["delivered"] == 1 }
            let body = await statusJSON(client, "durable-1")
            XCTAssertEqual(body["notif_id"] as? String, "durable-1")
            XCTAssertEqual(body["counts"] as? [String: Int], ["queued": 0, "retrying": 0, "delivered": 1, "failed": 1])
            let ds = try XCTUnwrap(body["deliveries"] as? [[String: Any]])
            XCTAssertEqual(ds.count, 2)
            XCTAssertEqual(ds[0]["state"] as? String, "delivered")
            XCTAssertEqual(ds[0]["provider_id"] as? String, env.apns.requests(for: ok).first?.apnsID, "the apns-id APNs answered")
            XCTAssertEqual(ds[0]["token"] as? String, TokenMask.mask(ok), "tokens masked per log.hide_token")
            XCTAssertEqual(ds[1]["state"] as? String, "failed")
            XCTAssertEqual(ds[1]["reason"] as? String, "BadDeviceToken")
            let missing = try await client.execute(uri: "/api/push/nope", method: .get) { Int($0.status.code) }
            XCTAssertEqual(missing, 404)

            // Without notif_id: ids are generated and returned in headers (the body stays gorush's).
            let other = String(format: "%064x", 4 + 0xd00d)
            let r2 = try await client.push(
                #"{"notifications":[{"notif_id":"a,b%","tokens":["\#(ok)"],"platform":1,"message":"x"},{"tokens":["\#(other)"],"platform":1,"message":"y"}]}"#
            )
            XCTAssertEqual(r2.status, 200)
            XCTAssertEqual(r2.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            let requestID = try XCTUnwrap(r2.headers.first { $0.name.canonicalName == "x-pushgate-request-id" }?.value)
            XCTAssertEqual(r2.headers.first { $0.name.canonicalName == "x-pushgate-notif-ids" }?.value, "a%2Cb%25,\(requestID)-1")
            let generated = "\(requestID)-1"
            let delivered = await eventually { (await statusJSON(client, generated)["counts"] as? [String: Int])?["delivered"] == 1 }
            let status = await statusJSON(client, generated)
            XCTAssertTrue(delivered, "\(status)")
            XCTAssertEqual(status["notif_id"] as? String, generated)
        }
    }

    func testMemoryEngineReportsRetryingThenDelivered() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let t = token(3)
        env.apns.script(t, [.serviceUnavailable(retryAfter: 1)])
        try await env.withGateway(environment: ["PUSHGATE_LOG_HIDE_TOKEN": "false"]) { client, gateway in
            XCTAssertTrue(gateway.dispatcher.queue is MemoryQueue)
            let r = try await client.push(#"{"notifications":[{"notif_id":"mem-1","tokens":["\#(t)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200)
            let retrying = await eventually {
                ((await statusJSON(client, "mem-1")["deliveries"] as? [[String: Any]])?.first?["state"] as? String) == "retrying"
            }
            let body = await statusJSON(client, "mem-1")
            XCTAssertTrue(retrying, "\(body)")
            let d = try XCTUnwrap((body["deliveries"] as? [[String: Any]])?.first)
            XCTAssertEqual(d["attempts"] as? Int, 1)
            XCTAssertEqual(d["last_error"] as? String, "ServiceUnavailable")
            XCTAssertNotNil(d["next_try"] as? String)
            XCTAssertEqual(d["token"] as? String, t, "hide_token false shows the token")
            let delivered = await eventually(timeout: 10) {
                ((await statusJSON(client, "mem-1")["deliveries"] as? [[String: Any]])?.first?["state"] as? String) == "delivered"
            }
            XCTAssertTrue(delivered)
        }
    }

    /// A graceful stop with retries pending leaves them in the store; the next gateway on the same
    /// file sends them with the same apns-id; counters carry over.
    func testPendingRetriesSurviveARestart() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let tokens = (10..<15).map(token)
        env.apns.setDefaultReply(.serviceUnavailable(retryAfter: nil))
        let cfg = sqliteEnv(env, ["PUSHGATE_CORE_SHUTDOWN_TIMEOUT": "0", "PUSHGATE_IOS_MAX_RETRY": "50"])
        try await env.withGateway(environment: cfg) { client, gateway in
            let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
            let r = try await client.push(#"{"notifications":[{"notif_id":"restart-1","tokens":[\#(list)],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200)
            let tried = await eventually { tokens.allSatisfy { !env.apns.requests(for: $0).isEmpty } }
            XCTAssertTrue(tried)
            XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 5)
        }
        XCTAssertTrue(tokens.allSatisfy { env.apns.requests(for: $0).allSatisfy { $0.status == 503 } })
        env.apns.setDefaultReply(.ok)
        try await env.withGateway(environment: cfg) { client, gateway in
            let delivered = await eventually(timeout: 15) { tokens.allSatisfy { env.apns.requests(for: $0).contains { $0.status == 200 } } }
            XCTAssertTrue(delivered, "every pending delivery is sent after the restart")
            for t in tokens {
                let ids = Set(env.apns.requests(for: t).compactMap(\.apnsID))
                XCTAssertEqual(ids.count, 1, "same apns-id on every attempt, across the restart")
            }
            let drained = await eventually { gateway.dispatcher.queue.pendingCount == 0 }
            XCTAssertTrue(drained)
            let s = gateway.dispatcher.stats.snapshot
            XCTAssertEqual(s.totalCount, 5, "counts of the first run are kept")
            XCTAssertEqual(s.successTasks, 5)
            XCTAssertGreaterThanOrEqual(s.retries, 5)
            let stat = try await client.execute(uri: "/api/stat/app", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual(stat["total_count"] as? Int, 5)
            let st = try await client.execute(uri: "/api/push/restart-1", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual((st["counts"] as? [String: Int])?["delivered"], 5)
        }
    }

    /// Async mode: a payload too large, a malformed token and a platform not enabled answer 200 with
    /// nothing sent; `GET /api/push/{notif_id}` then says why, next to the deliveries that went out.
    func testFailuresBeforeSendingShowInDeliveryStatus() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let ok = token(30)
        let pad = String(repeating: "y", count: 4097 - #"{"aps":{"alert":""}}"#.utf8.count)
        for (engine, extra) in [("memory", [String: String]()), ("sqlite", sqliteEnv(env))] {
            try await env.withGateway(environment: extra) { client, gateway in
                let body =
                    #"{"notifications":["#
                    + #"{"notif_id":"pre-big-\#(engine)","tokens":["\#(ok)"],"platform":1,"message":"\#(pad)"},"#
                    + #"{"notif_id":"pre-mix-\#(engine)","tokens":["\#(ok)","not-hex"],"platform":1,"message":"hi"},"#
                    + #"{"notif_id":"pre-hms-\#(engine)","tokens":["hms-token"],"platform":3,"message":"hi"}]}"#
                let r = try await client.push(body)
                XCTAssertEqual(r.status, 200, r.body)
                let big = await statusJSON(client, "pre-big-\(engine)")
                let bigDeliveries = big["deliveries"] as? [[String: Any]]
                XCTAssertEqual(bigDeliveries?.count, 1, "\(engine): \(big)")
                XCTAssertEqual(bigDeliveries?.first?["state"] as? String, "failed", engine)
                XCTAssertEqual(bigDeliveries?.first?["reason"] as? String, "PayloadTooLarge (4097 > 4096 bytes)", engine)
                // The two deliveries are independent: the malformed token's may end after the good one's.
                let delivered = await eventually {
                    let counts = await statusJSON(client, "pre-mix-\(engine)")["counts"] as? [String: Int]
                    return counts?["delivered"] == 1 && counts?["failed"] == 1
                }
                let mix = await statusJSON(client, "pre-mix-\(engine)")
                XCTAssertTrue(delivered, "\(engine): \(mix)")
                XCTAssertEqual(mix["counts"] as? [String: Int], ["queued": 0, "retrying": 0, "delivered": 1, "failed": 1], engine)
                let hms = await statusJSON(client, "pre-hms-\(engine)")
                let hmsDeliveries = hms["deliveries"] as? [[String: Any]]
                XCTAssertEqual(hmsDeliveries?.first?["state"] as? String, "failed", "\(engine): \(hms)")
                XCTAssertEqual(hmsDeliveries?.first?["reason"] as? String, "platform huawei is not enabled", engine)
                XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 0)
            }
        }
        XCTAssertEqual(env.apns.requests(for: ok).count, 2, "only the two valid deliveries reach APNs")
    }

    func testQueueFullWithSQLiteAnswers503() async throws {
        // APNs holds its answers until the queue was seen full.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        let body =
            #"{"notifications":[{"tokens":["# + (20..<24).map { "\"\(self.token($0))\"" }.joined(separator: ",") + #"],"platform":1,"message":"x"}]}"#
        try await env.withGateway(environment: sqliteEnv(env, ["PUSHGATE_QUEUE_MAX_PENDING": "5", "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": "1"])) {
            client, gateway in
            let full = try await client.pushUntil503(body, attempts: 10)
            XCTAssertNotNil(full)
            XCTAssertEqual(full?.headers[.retryAfter], "1")
            hold.release()
            let drained = await eventually(timeout: 20) { gateway.dispatcher.queue.pendingCount == 0 }
            XCTAssertTrue(drained, "earlier work is still delivered")
        }
    }
}
