import Foundation
import HTTPTypes
import HummingbirdTesting
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Scheduled sends (`send_at`, `delay_seconds`), cancel (`DELETE /api/push/{notif_id}`), quiet
/// hours (`deliver_between`) and `analytics_label`, through a live gateway to the TLS HTTP/2 mocks.
/// No assertion is on elapsed time: "not before" compares the time the mock recorded a request
/// with the scheduled time, and waits only fail on their (generous) timeout.
final class ScheduleTests: XCTestCase {
    static func token(_ i: Int) -> String { String(format: "%064x", i + 0x5C_0000) }

    static let engines: [(name: String, sqlite: Bool)] = [("memory", false), ("sqlite", true)]

    static func sqlite(_ env: TestEnvironment) -> [String: String] {
        ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/sched/q.sqlite"]
    }

    static func call(
        _ client: any TestClientProtocol, _ uri: String, _ method: HTTPRequest.Method = .get, body: String? = nil, key: String? = nil
    ) async throws -> (status: Int, body: String) {
        var h: HTTPFields = [.contentType: "application/json"]
        if let key { h[.authorization] = "Bearer \(key)" }
        return try await client.execute(uri: uri, method: method, headers: h, body: body.map { ByteBuffer(string: $0) }) { r in
            (Int(r.status.code), String(buffer: r.body))
        }
    }

    static func json(_ s: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(s.utf8))) as? [String: Any] ?? [:]
    }

    static func rfc3339(_ d: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: d)
    }

    /// A whole second a few seconds ahead (RFC 3339 text has whole seconds).
    static func ahead(_ seconds: Double) -> Date { Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + seconds).rounded(.up)) }

    static func deliveries(_ body: String) -> [[String: Any]] { json(body)["deliveries"] as? [[String: Any]] ?? [] }

    // MARK: scheduled sends

    func testScheduledSendIsSentAtItsTimeNotBefore() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let tok = Self.token(1)
            let at = Self.ahead(3)
            let body =
                #"{"notifications":[{"notif_id":"sched-1","tokens":["\#(tok)"],"platform":1,"message":"later","send_at":"\#(Self.rfc3339(at))"}]}"#
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                let r = try await Self.call(client, "/api/push", .post, body: body)
                XCTAssertEqual(r.status, 200, r.body)
                let status = try await Self.call(client, "/api/push/sched-1")
                XCTAssertEqual(status.status, 200, status.body)
                if Date() < at {
                    // Still ahead: reported scheduled with its time.
                    let d = Self.deliveries(status.body).first
                    XCTAssertEqual(d?["state"] as? String, "scheduled", "\(engine.name): \(status.body)")
                    XCTAssertEqual(d?["send_at"] as? String, Self.rfc3339(at).replacingOccurrences(of: "Z", with: ".000Z"), status.body)
                    XCTAssertEqual((Self.json(status.body)["counts"] as? [String: Int])?["scheduled"], 1, status.body)
                }
                let sent = await eventually(timeout: 60) { env.apns.requests(for: tok).count == 1 }
                XCTAssertTrue(sent, engine.name)
                let received = try XCTUnwrap(env.apns.requests(for: tok).first?.receivedAt)
                XCTAssertGreaterThanOrEqual(received, at, "\(engine.name): sent before its send_at")
                let over = await eventually(timeout: 30) { gateway.dispatcher.queue.pendingCount == 0 }
                XCTAssertTrue(over)
                let done = await eventually(timeout: 30) {
                    let s = try? await Self.call(client, "/api/push/sched-1")
                    return Self.deliveries(s?.body ?? "").first?["state"] as? String == "delivered"
                }
                XCTAssertTrue(done, engine.name)
                let stats = Self.json(try await Self.call(client, "/api/stat/app").body)
                XCTAssertEqual(stats["scheduled"] as? Int, 1, "\(engine.name): \(stats)")
            }
        }
    }

    func testDelaySecondsAndPastSendAt() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (a, b) = (Self.token(2), Self.token(3))
        try await env.withGateway { client, gateway in
            let before = Date()
            let r = try await Self.call(
                client, "/api/push", .post,
                body: #"{"notifications":[{"tokens":["\#(a)"],"platform":1,"message":"d","delay_seconds":2},"#
                    + #"{"tokens":["\#(b)"],"platform":1,"message":"past","send_at":1000000000}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            // A send_at in the past is sent now; the delayed one 2 s after acceptance, not before.
            let sent = await eventually(timeout: 60) { env.apns.requests(for: a).count == 1 && env.apns.requests(for: b).count == 1 }
            XCTAssertTrue(sent)
            let received = try XCTUnwrap(env.apns.requests(for: a).first?.receivedAt)
            XCTAssertGreaterThanOrEqual(received.timeIntervalSince(before), 2, "sent before its delay_seconds")
            // Stats: only the delayed one counts as scheduled; a gorush client's answer keeps its members.
            let stats = Self.json(try await Self.call(client, "/api/stat/app").body)
            XCTAssertEqual(stats["scheduled"] as? Int, 1, "\(stats)")
            XCTAssertNil(stats["cancelled"], "absent while zero")
        }
    }

    func testAnswersWithoutTheseFieldsAreUnchanged() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let tok = Self.token(4)
        try await env.withGateway { client, _ in
            let r = try await Self.call(
                client, "/api/push", .post, body: #"{"notifications":[{"notif_id":"plain","tokens":["\#(tok)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200)
            let sent = await eventually { env.apns.requests(for: tok).count == 1 }
            XCTAssertTrue(sent)
            let stats = Self.json(try await Self.call(client, "/api/stat/app").body)
            XCTAssertNil(stats["scheduled"])
            XCTAssertNil(stats["cancelled"])
            let done = await eventually {
                let s = try? await Self.call(client, "/api/push/plain")
                return (Self.json(s?.body ?? "")["counts"] as? [String: Int]) == ["queued": 0, "retrying": 0, "delivered": 1, "failed": 0]
            }
            XCTAssertTrue(done, "gorush's four counts only")
        }
    }

    func testScheduledSendSurvivesARestart() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let tok = Self.token(5)
        let at = Self.ahead(4)
        let body =
            #"{"notifications":[{"notif_id":"sched-restart","tokens":["\#(tok)"],"platform":1,"message":"later","send_at":\#(Int(at.timeIntervalSince1970))}]}"#
        try await env.withGateway(environment: Self.sqlite(env)) { client, _ in
            let r = try await Self.call(client, "/api/push", .post, body: body)
            XCTAssertEqual(r.status, 200, r.body)
        }
        // The first gateway stopped (before or after the time: either way it is stored until sent).
        let sentByFirst = env.apns.requests(for: tok).count
        try await env.withGateway(environment: Self.sqlite(env)) { client, gateway in
            let sent = await eventually(timeout: 60) { env.apns.requests(for: tok).count == 1 }
            XCTAssertTrue(sent, "sent once, by the gateway that found it stored")
            let received = try XCTUnwrap(env.apns.requests(for: tok).first?.receivedAt)
            XCTAssertGreaterThanOrEqual(received, at, "sent before its send_at")
            if sentByFirst == 0 {
                let over = await eventually(timeout: 30) { gateway.dispatcher.queue.pendingCount == 0 }
                XCTAssertTrue(over)
            }
        }
    }

    /// Two gateways sharing PostgreSQL: one accepts a scheduled notification and a second one, and
    /// stops before their time; the other cancels the second and sends the first when due.
    func testScheduledSendAcrossGatewaysSharingPostgreSQL() async throws {
        guard let url = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"], !url.isEmpty else {
            throw XCTSkip("PUSHGATE_TEST_POSTGRES_URL is not set (scripts/start-postgres.sh)")
        }
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let pg = ["PUSHGATE_QUEUE_ENGINE": "postgres", "PUSHGATE_QUEUE_POSTGRES_URL": url]
        let id = UUID().uuidString.lowercased()
        let (a, b) = (Self.token(60), Self.token(61))
        let at = Self.ahead(4)
        @Sendable func body(_ notif: String, _ tok: String) -> String {
            #"{"notifications":[{"notif_id":"\#(notif)","tokens":["\#(tok)"],"platform":1,"message":"later","send_at":"\#(Self.rfc3339(at))","analytics_label":"pg-label"}]}"#
        }
        try await env.withGateway(environment: pg) { client, _ in
            let r1 = try await Self.call(client, "/api/push", .post, body: body("pg-send-" + id, a))
            XCTAssertEqual(r1.status, 200, r1.body)
            let r2 = try await Self.call(client, "/api/push", .post, body: body("pg-cancel-" + id, b))
            XCTAssertEqual(r2.status, 200, r2.body)
        }
        let sentByFirst = env.apns.requests(for: a).count
        try await env.withGateway(environment: pg) { client, _ in
            let c = try await Self.call(client, "/api/push/pg-cancel-" + id, .delete)
            XCTAssertEqual(c.status, 200, c.body)
            if Date() < at { XCTAssertEqual(Self.json(c.body)["cancelled"] as? Int, 1, c.body) }
            let cancelled = Self.json(c.body)["cancelled"] as? Int ?? 0
            let sent = await eventually(timeout: 60) { env.apns.requests(for: a).count == 1 }
            XCTAssertTrue(sent, "sent once, by the second gateway (the first sent \(sentByFirst))")
            let received = try XCTUnwrap(env.apns.requests(for: a).first?.receivedAt)
            XCTAssertGreaterThanOrEqual(received, at, "sent before its send_at")
            while Date() < at.addingTimeInterval(2.5) { try await Task.sleep(for: .milliseconds(200)) }
            XCTAssertEqual(env.apns.requests(for: b).count, 1 - cancelled, "the cancelled one is never sent")
            let status = try await Self.call(client, "/api/push/pg-send-" + id)
            XCTAssertEqual(Self.deliveries(status.body).first?["analytics_label"] as? String, "pg-label", status.body)
        }
    }

    // MARK: cancel

    func testCancelBeforeItsTimeSendsNothing() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let (a, b) = (Self.token(10), Self.token(11))
            let at = Self.ahead(3)
            let body =
                #"{"notifications":[{"notif_id":"sched-cancel","tokens":["\#(a)","\#(b)"],"platform":1,"message":"never","send_at":"\#(Self.rfc3339(at))"}]}"#
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                let r = try await Self.call(client, "/api/push", .post, body: body)
                XCTAssertEqual(r.status, 200, r.body)
                let c = try await Self.call(client, "/api/push/sched-cancel", .delete)
                XCTAssertEqual(c.status, 200, c.body)
                let answer = Self.json(c.body)
                XCTAssertEqual(answer["notif_id"] as? String, "sched-cancel")
                if Date() < at {
                    XCTAssertEqual(answer["cancelled"] as? Int, 2, "\(engine.name): \(c.body)")
                    XCTAssertEqual(answer["in_flight"] as? Int, 0, c.body)
                    XCTAssertEqual(answer["already_sent"] as? Int, 0, c.body)
                }
                let cancelled = (answer["cancelled"] as? Int) ?? 0
                let status = try await Self.call(client, "/api/push/sched-cancel")
                let states = Self.deliveries(status.body).compactMap { $0["state"] as? String }
                XCTAssertEqual(states.filter { $0 == "cancelled" }.count, cancelled, status.body)
                XCTAssertEqual((Self.json(status.body)["counts"] as? [String: Int])?["cancelled"], cancelled, status.body)
                XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 2 - cancelled, engine.name)
                // Past its time (and a poll of the store): nothing was sent.
                while Date() < at.addingTimeInterval(2.5) { try await Task.sleep(for: .milliseconds(200)) }
                XCTAssertEqual(env.apns.requests(for: a).count + env.apns.requests(for: b).count, 2 - cancelled, engine.name)
                // Again: nothing left to cancel; the two are over already.
                let again = Self.json(try await Self.call(client, "/api/push/sched-cancel", .delete).body)
                XCTAssertEqual(again["cancelled"] as? Int, 0)
                XCTAssertEqual((again["already_over"] as? Int ?? 0) + (again["already_sent"] as? Int ?? 0), 2, "\(again)")
                let stats = Self.json(try await Self.call(client, "/api/stat/app").body)
                XCTAssertEqual(stats["cancelled"] as? Int, cancelled, "\(stats)")
                // Unknown notif_id: 404 as the status route.
                let unknown = try await Self.call(client, "/api/push/no-such-id", .delete)
                XCTAssertEqual(unknown.status, 404)
            }
        }
    }

    /// Cancel while the deliveries are being sent: each ends either sent or cancelled, never both,
    /// and the answer tells the truth about each.
    func testCancelRacingTheSendsEndsEachDeliveryOnce() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let tokens = (0..<300).map { Self.token(1000 + $0) }
            let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
            let body = #"{"notifications":[{"notif_id":"race","tokens":[\#(list)],"platform":1,"message":"race"}]}"#
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                let r = try await Self.call(client, "/api/push", .post, body: body)
                XCTAssertEqual(r.status, 200, r.body)
                let c = try await Self.call(client, "/api/push/race", .delete)
                XCTAssertEqual(c.status, 200, c.body)
                let answer = Self.json(c.body)
                let cancelled = try XCTUnwrap(answer["cancelled"] as? Int)
                let sentBefore = try XCTUnwrap(answer["already_sent"] as? Int)
                let inFlight = try XCTUnwrap(answer["in_flight"] as? Int)
                let over = try XCTUnwrap(answer["already_over"] as? Int)
                XCTAssertEqual(cancelled + sentBefore + inFlight + over, tokens.count, "\(engine.name): \(c.body)")
                let drained = await eventually(timeout: 60) { gateway.dispatcher.queue.pendingCount == 0 }
                XCTAssertTrue(drained)
                let status = try await Self.call(client, "/api/push/race")
                let ds = Self.deliveries(status.body)
                XCTAssertEqual(ds.count, tokens.count)
                let cancelledTokens = Set(ds.filter { $0["state"] as? String == "cancelled" }.compactMap { $0["token"] as? String })
                XCTAssertEqual(cancelledTokens.count, cancelled, "the status agrees with the answer")
                var received = 0
                for t in tokens {
                    let n = env.apns.requests(for: t).count
                    received += n
                    XCTAssertLessThanOrEqual(n, 1)
                    if cancelledTokens.contains(t) { XCTAssertEqual(n, 0, "\(engine.name): \(t) both sent and cancelled") }
                }
                XCTAssertEqual(received, tokens.count - cancelled, engine.name)
                XCTAssertGreaterThanOrEqual(received, sentBefore)
            }
        }
    }

    /// An app's key cancels its own app's notifications only (404 for another app's), the admin key any.
    func testCancelIsScopedToTheKeysApp() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let at = Self.ahead(600)
        let send = #""send_at":"\#(Self.rfc3339(at))""#
        try await env.withGateway(MultiAppTests.appsYAML(env), environment: MultiAppTests.keys) { client, _ in
            let chat = try await Self.call(
                client, "/api/push", .post,
                body: #"{"notifications":[{"notif_id":"scoped","tokens":["\#(Self.token(20))"],"platform":1,"message":"x",\#(send)}]}"#,
                key: MultiAppTests.chatKey)
            XCTAssertEqual(chat.status, 200, chat.body)
            let wallet = try await Self.call(client, "/api/push/scoped", .delete, key: MultiAppTests.walletKey)
            XCTAssertEqual(wallet.status, 404, "another app's notification is unknown to this key")
            let none = try await Self.call(client, "/api/push/scoped", .delete)
            XCTAssertEqual(none.status, 401)
            let status = try await Self.call(client, "/api/push/scoped", key: MultiAppTests.chatKey)
            XCTAssertEqual(Self.deliveries(status.body).first?["state"] as? String, "scheduled", status.body)
            let own = try await Self.call(client, "/api/push/scoped", .delete, key: MultiAppTests.chatKey)
            XCTAssertEqual(own.status, 200, own.body)
            XCTAssertEqual(Self.json(own.body)["cancelled"] as? Int, 1, own.body)
            let admin = try await Self.call(client, "/api/push/scoped", .delete, key: MultiAppTests.adminKey)
            XCTAssertEqual(admin.status, 200, admin.body)
            XCTAssertEqual(Self.json(admin.body)["already_over"] as? Int, 1, admin.body)
        }
    }

    // MARK: quiet hours

    /// A UTC window that starts `from` hours from now and lasts an hour: now is outside it.
    static func windowAhead(_ hours: Int) -> (from: String, to: String, start: Date) {
        var cal = Calendar(identifier: .gregorian)
        cal.timeZone = TimeZone(identifier: "UTC")!
        let now = Date()
        let startHour = (cal.component(.hour, from: now) + hours) % 24
        let start = cal.nextDate(after: now, matching: DateComponents(hour: startHour, minute: 0), matchingPolicy: .nextTime) ?? now
        return (String(format: "%02d:00", startHour), String(format: "%02d:00", (startHour + 1) % 24), start)
    }

    func testQuietHoursWaitOrDrop() async throws {
        for engine in Self.engines {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let (a, b) = (Self.token(30), Self.token(31))
            let w = Self.windowAhead(3)
            let between = #""deliver_between":{"tz":"UTC","from":"\#(w.from)","to":"\#(w.to)"}"#
            try await env.withGateway(environment: engine.sqlite ? Self.sqlite(env) : [:]) { client, gateway in
                let r = try await Self.call(
                    client, "/api/push", .post,
                    body: #"{"notifications":[{"notif_id":"quiet-wait","tokens":["\#(a)"],"platform":1,"message":"w",\#(between)},"#
                        + #"{"notif_id":"quiet-drop","tokens":["\#(b)"],"platform":1,"message":"d","quiet":"drop",\#(between)}]}"#)
                XCTAssertEqual(r.status, 200, r.body)
                let dropped = await eventually(timeout: 30) {
                    let s = try? await Self.call(client, "/api/push/quiet-drop")
                    return Self.deliveries(s?.body ?? "").first?["state"] as? String == "quiet_hours"
                }
                XCTAssertTrue(dropped, engine.name)
                print("quiet \(engine.name) dropped at \(Date())")
                let waiting = try await Self.call(client, "/api/push/quiet-wait")
                let d = Self.deliveries(waiting.body).first
                XCTAssertEqual(d?["state"] as? String, "scheduled", waiting.body)
                XCTAssertEqual(d?["send_at"] as? String, Self.rfc3339(w.start).replacingOccurrences(of: "Z", with: ".000Z"), waiting.body)
                XCTAssertEqual(env.apns.requests(for: a).count + env.apns.requests(for: b).count, 0)
                XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 1, "the waiting one")
            }
        }
    }

    // MARK: analytics_label

    func testAnalyticsLabelGoesToFCMAndTheStatus() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let r = try await Self.call(
                client, "/api/push", .post,
                body:
                    #"{"notifications":[{"notif_id":"labelled","tokens":["fcm-token-label"],"platform":2,"message":"hi","analytics_label":"spring_sale-2026.a~%"}]}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let sent = await eventually { env.fcm.messages.contains { $0.target == "fcm-token-label" } }
            XCTAssertTrue(sent)
            let msg = env.fcm.messages.first { $0.target == "fcm-token-label" }?.message ?? [:]
            XCTAssertEqual((msg["fcm_options"] as? [String: Any])?["analytics_label"] as? String, "spring_sale-2026.a~%")
            let status = try await Self.call(client, "/api/push/labelled")
            XCTAssertEqual(Self.deliveries(status.body).first?["analytics_label"] as? String, "spring_sale-2026.a~%", status.body)
        }
    }

    // MARK: hostile values

    func testHostileValuesAre400NamingTheField() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let tok = Self.token(40)
        let far = Self.rfc3339(Date().addingTimeInterval(2_592_000 + 3600))
        let cases: [(String, String)] = [
            (#""send_at":1e19"#, "notifications[0].send_at"),
            (#""send_at":-1"#, "notifications[0].send_at"),
            (#""send_at":253402300800"#, "notifications[0].send_at"),
            (#""send_at":1.7976931348623157e308"#, "notifications[0].send_at"),
            (#""send_at":"tomorrow""#, "notifications[0].send_at"),
            (#""send_at":"2026-13-01T00:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":true"#, "notifications[0].send_at"),
            (#""send_at":"\#(far)""#, "notifications[0].send_at"),
            (#""send_at":"9999-12-31T23:59:59Z""#, "notifications[0].send_at"),
            (#""delay_seconds":1e19"#, "notifications[0].delay_seconds"),
            (#""delay_seconds":-5"#, "notifications[0].delay_seconds"),
            (#""delay_seconds":2592001"#, "notifications[0].delay_seconds"),
            (#""delay_seconds":1.5"#, "notifications[0].delay_seconds"),
            (#""delay_seconds":"60""#, "notifications[0].delay_seconds"),
            (#""delay_seconds":60,"send_at":1000000000"#, "notifications[0].delay_seconds"),
            (#""send_at":4000000000,"expiration":3000000000"#, "notifications[0].send_at"),
            (#""deliver_between":{"tz":"Mars/Olympus","from":"08:00","to":"21:00"}"#, "notifications[0].deliver_between.tz"),
            (#""deliver_between":{"tz":"Europe/Berlin","from":"25:00","to":"21:00"}"#, "notifications[0].deliver_between.from"),
            (#""deliver_between":{"tz":"Europe/Berlin","from":"08:00","to":"8pm"}"#, "notifications[0].deliver_between.to"),
            (#""deliver_between":{"tz":"Europe/Berlin","from":"08:00","to":"08:00"}"#, "notifications[0].deliver_between.to"),
            (#""deliver_between":{"from":"08:00","to":"21:00"}"#, "notifications[0].deliver_between.tz"),
            (#""deliver_between":{"tz":7,"from":"08:00","to":"21:00"}"#, "notifications[0].deliver_between.tz"),
            (#""deliver_between":"08-21""#, "notifications[0].deliver_between"),
            (#""quiet":"later","deliver_between":{"tz":"UTC","from":"08:00","to":"21:00"}"#, "notifications[0].quiet"),
            (#""quiet":"drop""#, "notifications[0].quiet"),
            (#""analytics_label":"bad label!""#, "notifications[0].analytics_label"),
            (#""analytics_label":"\#(String(repeating: "a", count: 51))""#, "notifications[0].analytics_label"),
            (#""analytics_label":"""#, "notifications[0].analytics_label"),
        ]
        try await env.withGateway { client, gateway in
            for (member, field) in cases {
                let body = #"{"notifications":[{"tokens":["\#(tok)"],"platform":1,"message":"x",\#(member)}]}"#
                let r = try await Self.call(client, "/api/push", .post, body: body)
                XCTAssertEqual(r.status, 400, "\(member): \(r.body)")
                XCTAssertTrue(r.body.contains(field), "\(member) should name \(field): \(r.body)")
            }
            XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 0)
            XCTAssertEqual(env.apns.requests(for: tok).count, 0)
        }
    }

    /// One strict RFC 3339 parser for every date given as text: a date that does not exist, and the
    /// forms Foundation reads leniently, are 400s naming the field (nothing queued, nothing sent);
    /// the forms RFC 3339 allows are accepted (past times: sent now). The other dates of a request
    /// take numbers (`expiration`, `stale-date`, `dismissal-date`: UNIX seconds) or `HH:MM`
    /// (`deliver_between`): a date-time text or an impossible time there is a 400 naming it too.
    func testDatesAreStrictRFC3339Or400NamingTheField() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let tok = Self.token(41)
        let refused: [(String, String)] = [
            (#""send_at":"2026-02-30T10:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2027-02-29T10:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-04-31T10:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-31T10:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27T24:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27T10:00:00+24:00""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27T10:00:00-25:00""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27T10:00:00+23:60""#, "notifications[0].send_at"),
            (#""send_at":"2026-12-31T23:59:60Z""#, "notifications[0].send_at"),
            (#""send_at":"0000-01-01T00:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27t10:00:00Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27T10:00:00z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27T10:00:00.12345678901234567890Z""#, "notifications[0].send_at"),
            (#""send_at":"2026-11-27 10:00:00Z""#, "notifications[0].send_at"),
            (#""expiration":"2026-02-30T10:00:00Z""#, "notifications[0].expiration"),
            (#""expiration":"2026-11-27T10:00:00Z""#, "notifications[0].expiration"),
            (#""stale-date":"2026-11-27T10:00:00Z""#, "notifications[0].stale-date"),
            (#""dismissal-date":"2026-02-30T10:00:00Z""#, "notifications[0].dismissal-date"),
            (#""deliver_between":{"tz":"UTC","from":"24:00","to":"06:00"}"#, "notifications[0].deliver_between.from"),
            (#""deliver_between":{"tz":"UTC","from":"22:00","to":"06:60"}"#, "notifications[0].deliver_between.to"),
        ]
        let accepted = [
            "2024-02-29T10:00:00Z", "2026-04-30T23:59:59+05:30", "2026-01-01T00:00:00-00:00", "2026-01-01T10:00:00.5+01:00",
            "2026-01-01T10:00:00.123456789Z", "2026-01-01T10:00:00-23:59",
        ]
        try await env.withGateway { client, gateway in
            for (member, field) in refused {
                let body = #"{"notifications":[{"tokens":["\#(tok)"],"platform":1,"message":"x",\#(member)}]}"#
                let r = try await Self.call(client, "/api/push", .post, body: body)
                XCTAssertEqual(r.status, 400, "\(member): \(r.body)")
                XCTAssertTrue(r.body.contains(field), "\(member) should name \(field): \(r.body)")
            }
            XCTAssertEqual(gateway.dispatcher.queue.pendingCount, 0)
            XCTAssertEqual(env.apns.requests(for: tok).count, 0, "nothing refused was sent")
            for (i, text) in accepted.enumerated() {
                let t = Self.token(42 + i)
                let body = #"{"notifications":[{"tokens":["\#(t)"],"platform":1,"message":"x","send_at":"\#(text)"}]}"#
                let r = try await Self.call(client, "/api/push", .post, body: body)
                XCTAssertEqual(r.status, 200, "\(text): \(r.body)")
                let sent = await eventually { env.apns.requests(for: t).count == 1 }
                XCTAssertTrue(sent, "\(text): a send_at in the past is sent now")
            }
        }
    }

    /// `core.max_schedule_horizon` is range-checked and applies to both fields.
    func testHorizonIsConfigurable() async throws {
        XCTAssertThrowsError(try GatewaySettings(RawConfig(yaml: "core:\n  max_schedule_horizon: 0\n", environment: [:])))
        XCTAssertThrowsError(try GatewaySettings(RawConfig(yaml: "core:\n  max_schedule_horizon: 1e30\n", environment: [:])))
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway(environment: ["PUSHGATE_CORE_MAX_SCHEDULE_HORIZON": "60"]) { client, _ in
            let over = try await Self.call(
                client, "/api/push", .post, body: #"{"notifications":[{"tokens":["\#(Self.token(50))"],"platform":1,"delay_seconds":61}]}"#)
            XCTAssertEqual(over.status, 400)
            XCTAssertTrue(over.body.contains("delay_seconds"), over.body)
            let ok = try await Self.call(
                client, "/api/push", .post, body: #"{"notifications":[{"tokens":["\#(Self.token(50))"],"platform":1,"delay_seconds":60}]}"#)
            XCTAssertEqual(ok.status, 200, ok.body)
        }
    }
}
