import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// End to end through FCM HTTP v1: HTTP client -> Pushgate -> TLS HTTP/2 -> mock FCM (+ mock OAuth).
final class GatewayFCMTests: XCTestCase {
    func testFCMRetriesFeedbackAndOneTokenRequest() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        env.fcm.script(token: "dead-token", responses: [.unregistered])
        env.fcm.script(token: "flaky-token", responses: [.unavailable(retryAfter: nil), .unavailable(retryAfter: nil), .ok])
        env.fcm.script(token: "slow-token", responses: [.quotaExceeded(retryAfter: 2), .ok])
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["dead-token","flaky-token","slow-token"],"platform":2,"title":"T","message":"M","data":{"n":42,"o":{"k":"v"}}}]}"#
            )
            XCTAssertEqual(r.status, 200)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["counts"] as? Int, 3)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            XCTAssertEqual(logs.first?["platform"] as? String, "android")
            XCTAssertTrue((logs.first?["error"] as? String)?.contains("UNREGISTERED") == true, r.body)

            let msgs = env.fcm.messages
            XCTAssertEqual(msgs.filter { $0.target == "dead-token" }.count, 1, "UNREGISTERED is never retried")
            XCTAssertEqual(msgs.filter { $0.target == "flaky-token" }.count, 3, "503, 503, then delivered once")
            let slow = msgs.filter { $0.target == "slow-token" }
            XCTAssertEqual(slow.count, 2)
            if slow.count == 2 {
                XCTAssertGreaterThanOrEqual(slow[1].receivedAt.timeIntervalSince(slow[0].receivedAt), 2.0, "Retry-After: 2 honoured")
            }
            XCTAssertEqual(msgs.first?.data?["n"], "42")
            XCTAssertEqual(msgs.first?.data?["o"], #"{"k":"v"}"#)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed)
            try await Task.sleep(for: .milliseconds(200))
            XCTAssertEqual(env.feedbackCount, 1, "exactly one feedback POST")

            // 200 more sends: still exactly one OAuth token request.
            let tokens = (0..<200).map { "tok-\($0)" }
            let body = #"{"notifications":[{"tokens":["# + tokens.map { "\"\($0)\"" }.joined(separator: ",") + #"],"platform":2,"message":"burst"}]}"#
            let r2 = try await client.push(body)
            XCTAssertEqual(r2.body, #"{"counts":200,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.fcm.tokenRequestCount, 1)
            XCTAssertTrue(env.fcm.tokenRejections.isEmpty, "\(env.fcm.tokenRejections)")
        }
    }

    func testMixedRequestFansOutToBothProviders() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let ios = String(repeating: "0f", count: 32)
        try await env.withGateway { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["\#(ios)"],"platform":1,"message":"to iOS"},{"tokens":["android-1"],"platform":2,"message":"to Android","priority":"high"},{"platform":2,"topic":"news","message":"to a topic"}]}"#
            )
            XCTAssertEqual(r.body, #"{"counts":3,"logs":[],"success":"ok"}"#)
            let both = await eventually { env.apns.requestCount == 1 && env.fcm.messages.count == 2 }
            XCTAssertTrue(both, "apns \(env.apns.requestCount) fcm \(env.fcm.messages.count)")
            let android = env.fcm.messages.first { $0.target == "android-1" }
            XCTAssertEqual((android?.message["android"] as? [String: Any])?["priority"] as? String, "HIGH")
            XCTAssertEqual(env.fcm.messages.first { $0.targetKind == "topic" }?.target, "news")
        }
    }

    /// FCM v1's newer AndroidConfig booleans pass through to FCM; a non-boolean is a
    /// 400 naming the field, and the mock refuses an unknown android field as FCM does.
    func testAndroidDeliveryModeBooleansPassThroughAndAreValidated() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"tokens":["android-2"],"platform":2,"message":"m","android":{"direct_boot_ok":true,"bandwidth_constrained_ok":true,"restricted_satellite_ok":false}}],"sync":true}"#
            )
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            let android = try XCTUnwrap(env.fcm.messages.first { $0.target == "android-2" }?.message["android"] as? [String: Any])
            XCTAssertEqual(android["direct_boot_ok"] as? Bool, true)
            XCTAssertEqual(android["bandwidth_constrained_ok"] as? Bool, true)
            XCTAssertEqual(android["restricted_satellite_ok"] as? Bool, false)
            let bad = try await client.push(
                #"{"notifications":[{"tokens":["android-3"],"platform":2,"message":"m","android":{"bandwidth_constrained_ok":"yes"}}]}"#)
            XCTAssertEqual(bad.status, 400)
            XCTAssertTrue(bad.body.contains("notifications[0].android.bandwidth_constrained_ok"), bad.body)
            // An android field FCM does not know reaches the mock (pass-through) and is refused there, as by FCM.
            let unknown = try await client.push(
                #"{"notifications":[{"tokens":["android-4"],"platform":2,"message":"m","android":{"no_such_field":1}}],"sync":true}"#)
            XCTAssertEqual(unknown.status, 200)
            XCTAssertTrue(unknown.body.contains("INVALID_ARGUMENT") && unknown.body.contains("no_such_field"), unknown.body)
        }
    }

    /// FCM v1's newer fields reach FCM as given (FCM's camelCase names folded onto the snake_case
    /// ones): `android.notification.proxy`, `bypass_proxy_notification`, the delivery-mode booleans,
    /// `fcm_options.analytics_label`, `apns.live_activity_token`, and a `fid:` token sent as
    /// `message.fid`. What the mock received is what is asserted.
    func testNewestFCMFieldsReachFCM() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let fid = "cR2bC7qUTH-qhK4Vk_l3cD"
        try await env.withGateway { client, _ in
            let r = try await client.push(
                #"""
                {"notifications":[{"tokens":["android-new","fid:\#(fid)"],"platform":2,"message":"m",
                 "android":{"bandwidthConstrainedOk":true,"restricted_satellite_ok":true,
                            "notification":{"proxy":"if_priority_lowered","bypassProxyNotification":false}},
                 "fcm_options":{"analytics_label":"spring_sale-2026"},
                 "apns":{"liveActivityToken":"la-push-to-start-token","headers":{"apns-priority":"10"}}}],"sync":true}
                """#)
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.fcm.sendRejections, [])
            let sent = try XCTUnwrap(env.fcm.messages.first { $0.target == "android-new" })
            XCTAssertEqual(sent.targetKind, "token")
            let android = try XCTUnwrap(sent.message["android"] as? [String: Any])
            XCTAssertEqual(android["bandwidth_constrained_ok"] as? Bool, true)
            XCTAssertNil(android["bandwidthConstrainedOk"], "one spelling reaches FCM")
            XCTAssertEqual(android["restricted_satellite_ok"] as? Bool, true)
            let notification = try XCTUnwrap(android["notification"] as? [String: Any])
            XCTAssertEqual(notification["proxy"] as? String, "IF_PRIORITY_LOWERED")
            XCTAssertEqual(notification["bypass_proxy_notification"] as? Bool, false)
            XCTAssertEqual((sent.message["fcm_options"] as? [String: Any])?["analytics_label"] as? String, "spring_sale-2026")
            let apns = try XCTUnwrap(sent.message["apns"] as? [String: Any])
            XCTAssertEqual(apns["live_activity_token"] as? String, "la-push-to-start-token")
            let toInstallation = try XCTUnwrap(env.fcm.messages.first { $0.targetKind == "fid" })
            XCTAssertEqual(toInstallation.target, fid)
            XCTAssertNil(toInstallation.message["token"])
        }
    }

    /// A bad value of the new fields is a 400 naming the field, before anything is queued.
    func testNewestFCMFieldsAreValidatedAtIngest() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let cases: [(String, String)] = [
                (#""android":{"notification":{"proxy":"SOMETIMES"}}"#, "notifications[0].android.notification.proxy"),
                (#""android":{"notification":{"proxy":1}}"#, "notifications[0].android.notification.proxy"),
                (
                    #""android":{"notification":{"bypass_proxy_notification":"no"}}"#,
                    "notifications[0].android.notification.bypass_proxy_notification"
                ),
                (#""android":{"restrictedSatelliteOk":"yes"}"#, "notifications[0].android.restricted_satellite_ok"),
                (#""fcm_options":{"analytics_label":"no spaces allowed"}"#, "notifications[0].fcm_options.analytics_label"),
                (#""android":{"fcm_options":{"analytics_label":""}}"#, "notifications[0].android.fcm_options.analytics_label"),
                (
                    #""apns":{"fcm_options":{"analytics_label":"\#(String(repeating: "x", count: 51))"}}"#,
                    "notifications[0].apns.fcm_options.analytics_label"
                ),
                (#""apns":{"live_activity_token":42}"#, "notifications[0].apns.live_activity_token"),
                (#""tokens":["fid:not-an-installation-id"]"#, "notifications[0].tokens[0]"),
            ]
            for (member, field) in cases {
                let tokens = member.hasPrefix(#""tokens""#) ? "" : #""tokens":["android-x"],"#
                let r = try await client.push(#"{"notifications":[{\#(tokens)"platform":2,"message":"m",\#(member)}]}"#)
                XCTAssertEqual(r.status, 400, member)
                XCTAssertTrue(r.body.contains(field), "\(member): \(r.body)")
            }
            XCTAssertEqual(env.fcm.sendRequestCount, 0, "nothing reached FCM")
        }
    }
}
