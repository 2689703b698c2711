import Foundation
import HTTPTypes
import HummingbirdTesting
import MockProviders
import NIOCore
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// gorush v1.22's request leniency and observability names, end to end: HTTP client -> Pushgate
/// (live server) -> TLS HTTP/2 -> mock APNs / FCM, then `/metrics` and `/api/stat/app` scraped.
final class GorushCompatTests: XCTestCase {
    let ok1 = String(repeating: "a1", count: 32)
    let ok2 = String(repeating: "b2", count: 32)
    let dead = "dddddddd" + String(repeating: "e5", count: 28)

    func testPascalCaseBodyPriorityTenAndPlatformZeroInOneRequest() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (ok1, ok2)
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"""
                {"Notifications":[
                  {"Tokens":["\#(t1)"],"Platform":1,"Message":"Hello","Topic":"com.example.app","Priority":"10","Badge":1},
                  {"Tokens":["skipped-1"],"Platform":0,"Message":"no platform"},
                  {"tokens":["skipped-2"],"message":"platform missing"},
                  {"Tokens":["fcm-1"],"Platform":2,"Title":"T","Message":"to Android","Priority":"10",
                   "Android":{"Collapse_Key":"k"}},
                  {"tokens":["\#(t2)"],"platform":1,"message":"low","priority":"5"},
                  {"tokens":["\#(t2)"],"platform":1,"message":"unknown priority","priority":"urgent"}
                ]}
                """#)
            XCTAssertEqual(r.status, 200, r.body)
            // gorush's counts: iOS token + its topic (2), android 1, the two other iOS notifications 1 each;
            // the skipped ones are not counted and have no log entry.
            XCTAssertEqual(r.body, #"{"counts":5,"logs":[],"success":"ok"}"#)
            let requestID = try XCTUnwrap(r.headers.first { $0.name.canonicalName == "x-pushgate-request-id" }?.value)
            XCTAssertEqual(
                r.headers.first { $0.name.canonicalName == "x-pushgate-notif-ids" }?.value,
                "\(requestID)-0,,,\(requestID)-3,\(requestID)-4,\(requestID)-5", "skipped notifications keep their (empty) slot")

            let first = try XCTUnwrap(env.apns.requests(for: t1).first)
            XCTAssertEqual(first.priority, "10", "\"10\" is apns-priority 10")
            XCTAssertEqual(first.aps["alert"] as? String, "Hello")
            XCTAssertEqual(first.aps["badge"] as? Int, 1)
            let second = env.apns.requests(for: t2)
            XCTAssertEqual(second.count, 2)
            XCTAssertEqual(Set(second.map { $0.priority ?? "none" }), ["5", "none"], "\"5\" is 5; an unknown priority is left out")
            XCTAssertTrue(second.allSatisfy { $0.status == 200 }, "\(env.apns.rejections)")

            let m = try XCTUnwrap(env.fcm.messages.first { $0.target == "fcm-1" })
            let android = m.message["android"] as? [String: Any]
            XCTAssertEqual(android?["priority"] as? String, "HIGH")
            XCTAssertEqual(android?["collapse_key"] as? String, "k", "FCM field names take Firebase's spelling")
            XCTAssertEqual(env.fcm.messages.count, 1)
            XCTAssertTrue(env.apns.requests(for: "skipped-1").isEmpty && env.apns.requests(for: "skipped-2").isEmpty)
        }
    }

    func testTopLevelSoundNameAndVolumeMakeTheCriticalSound() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (ok1, ok2)
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["\#(t1)"],"platform":1,"message":"x","sound":"ignored.aiff","name":"alarm.caf"},{"tokens":["\#(t2)"],"platform":1,"message":"y","Volume":0.5}]}"#
            )
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            let a = try XCTUnwrap(env.apns.requests(for: t1).first)
            XCTAssertTrue(a.bodyString.contains(#""sound":{"critical":1,"name":"alarm.caf","volume":1}"#), a.bodyString)
            let b = try XCTUnwrap(env.apns.requests(for: t2).first)
            XCTAssertTrue(b.bodyString.contains(#""sound":{"critical":1,"name":"default","volume":0.5}"#), b.bodyString)
        }
    }

    func testMetricsAndAppStatsAfterRealDeliveries() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2, t3) = (ok1, ok2, dead)
        env.apns.script(t3, [.unregistered])
        env.fcm.script(token: "fcm-dead", responses: [.unregistered])
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"""
                {"notifications":[
                  {"tokens":["\#(t1)","\#(t2)","\#(t3)"],"platform":1,"message":"m"},
                  {"tokens":["fcm-ok","fcm-dead"],"platform":2,"message":"m"},
                  {"tokens":["hw-1"],"platform":3,"message":"m"},
                  {"tokens":["x"],"platform":0}
                ]}
                """#)
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual(jsonObject(r.body)["counts"] as? Int, 5, r.body)
            // A payload refused before sending: the platform's error, but no task.
            let pad = String(repeating: "y", count: 4200)
            _ = try await client.push(#"{"notifications":[{"tokens":["\#(t1)"],"platform":1,"message":"\#(pad)"}]}"#)

            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let series = Self.samples(metrics)
            let expected: [String: Int] = [
                "gorush_total_push_count": 6, "gorush_ios_success": 2, "gorush_ios_error": 2, "gorush_android_success": 1,
                "gorush_android_fail": 1, "gorush_huawei_success": 0, "gorush_huawei_fail": 0, "gorush_busy_workers": 0,
                "gorush_success_tasks": 3, "gorush_failure_tasks": 2, "gorush_submitted_tasks": 5,
            ]
            for (name, value) in expected { XCTAssertEqual(series[name], value, "\(name) in\n\(metrics)") }
            // gorush's help texts and types (metric/metrics.go).
            for line in [
                "# HELP gorush_total_push_count Number of push count", "# TYPE gorush_total_push_count counter",
                "# HELP gorush_ios_error Number of iOS fail count", "# HELP gorush_android_fail Number of android fail count",
                "# HELP gorush_huawei_fail Number of huawei fail count", "# TYPE gorush_busy_workers gauge",
                "# HELP gorush_busy_workers Length of busy workers", "# HELP gorush_success_tasks Length of Success Tasks",
                "# HELP gorush_failure_tasks Length of Failure Tasks", "# HELP gorush_submitted_tasks Length of Submitted Tasks",
                "# TYPE gorush_submitted_tasks counter",
            ] {
                XCTAssertTrue(metrics.split(separator: "\n").contains(Substring(line)), "missing \(line)")
            }
            // Pushgate's own series are still there.
            XCTAssertNotNil(series["pushgate_queue_capacity"])
            XCTAssertTrue(metrics.contains("pushgate_push_success_total"), metrics)

            let stat = try await client.execute(uri: "/api/stat/app", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual(stat["total_count"] as? Int, 6)
            XCTAssertEqual(stat["busy_workers"] as? Int, 0)
            XCTAssertEqual(stat["success_tasks"] as? Int, 3)
            XCTAssertEqual(stat["failure_tasks"] as? Int, 2)
            XCTAssertEqual(stat["submitted_tasks"] as? Int, 5)
            XCTAssertEqual((stat["ios"] as? [String: Int]) ?? [:], ["push_success": 2, "push_error": 2])
            XCTAssertEqual((stat["android"] as? [String: Int]) ?? [:], ["push_success": 1, "push_error": 1])
            XCTAssertEqual((stat["huawei"] as? [String: Int]) ?? [:], ["push_success": 0, "push_error": 0])
        }
    }

    func testBusyWorkersAreTheDeliveriesInFlight() async throws {
        // The mock APNs holds its answers: the three deliveries are in flight until it is released.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        let tokens = (1...3).map { String(format: "%064x", $0) }
        try await env.withGateway { client, _ in
            let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
            let r = try await client.push(#"{"notifications":[{"tokens":[\#(list)],"platform":1,"message":"slow"}]}"#)
            XCTAssertEqual(r.status, 200)
            var seen = 0
            let busy = await eventually {
                let m = (try? await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }) ?? ""
                seen = Self.samples(m)["gorush_busy_workers"] ?? -1
                return seen == 3
            }
            XCTAssertTrue(busy, "gorush_busy_workers \(seen), expected 3 while APNs holds the answers")
            let stat = try await client.execute(uri: "/api/stat/app", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual(stat["busy_workers"] as? Int, 3)
            hold.release()
            let idle = await eventually {
                let m = (try? await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }) ?? ""
                let s = Self.samples(m)
                return s["gorush_busy_workers"] == 0 && s["gorush_success_tasks"] == 3
            }
            XCTAssertTrue(idle, "back to 0 once the answers came")
        }
    }

    /// `name value` sample lines of a Prometheus text exposition (unlabelled series only).
    static func samples(_ text: String) -> [String: Int] {
        var out: [String: Int] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, !parts[0].contains("{"), let v = Double(parts[1]) else { continue }
            out[String(parts[0])] = Int(v)
        }
        return out
    }
}
