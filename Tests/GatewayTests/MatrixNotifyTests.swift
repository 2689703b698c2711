import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import MatrixIngest
import MockProviders
import NIOCore
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore

/// `POST /_matrix/push/v1/notify` end to end: a live listener -> `Gateway.accept` -> TLS HTTP/2 ->
/// the mock APNs and FCM; the answer's `rejected` from the providers' outcomes.
final class MatrixNotifyTests: XCTestCase {
    static let matrixYAML = """
        matrix:
          enabled: true
          sync_timeout: 5
          apps:
            com.example.ios: { platform: ios }
            com.example.android: { platform: android }
        """

    static func notify(_ client: some TestClientProtocol, _ json: String) async throws -> (status: Int, body: String, notifIDs: [String]) {
        try await client.execute(
            uri: "/_matrix/push/v1/notify", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: json)
        ) { r in
            let ids = r.headers[HTTPField.Name("X-Pushgate-Notif-Ids")!].map { $0.split(separator: ",").map(String.init) } ?? []
            return (Int(r.status.code), String(buffer: r.body), ids)
        }
    }

    func testLiveAndDeadPushkeysUnknownAppAndMalformedBody() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let live = Data([0xAB, 0xCD, 0x01]).base64EncodedString()
        let dead = Data([0xDE, 0xAD, 0x02]).base64EncodedString()
        env.apns.script("dead02", [.unregistered])
        env.fcm.script(token: "fcm-dead", responses: [.unregistered])
        try await env.withGateway(Self.matrixYAML) { gatewayClient, gateway in
            let settings = try MatrixSettings(raw: gateway.raw)
            let app = Application(router: MatrixServer.makeRouter(gateway: gateway, settings: settings))
            try await app.test(.live) { client in
                let body = """
                    {"notification":{"event_id":"$ev1","room_id":"!room:x","type":"m.room.message","sender":"@a:x",
                    "sender_display_name":"Alice","content":{"msgtype":"m.text","body":"hello"},"counts":{"unread":4},
                    "devices":[{"app_id":"com.example.ios","pushkey":"\(live)"},{"app_id":"com.example.ios","pushkey":"\(dead)"},
                    {"app_id":"com.example.android","pushkey":"fcm-live","data":{"format":"event_id_only"}},
                    {"app_id":"com.example.android","pushkey":"fcm-dead"},{"app_id":"org.unknown","pushkey":"nobody"}]}}
                    """
                let r = try await Self.notify(client, body)
                XCTAssertEqual(r.status, 200, r.body)
                let rejected = (jsonObject(r.body)["rejected"] as? [String]) ?? []
                XCTAssertEqual(Set(rejected), [dead, "fcm-dead", "nobody"], r.body)

                // Four deliveries queued (the unknown app's device was not): each followed on the
                // status route, and the dead tokens reached the feedback hook.
                XCTAssertEqual(r.notifIDs.count, 4, r.body)
                if let first = r.notifIDs.first {
                    let status = try await gatewayClient.execute(uri: "/api/push/\(first)", method: .get) { Int($0.status.code) }
                    XCTAssertEqual(status, 200)
                }
                let fed = await eventually { env.feedbackCount >= 2 }
                XCTAssertTrue(fed, "the dead tokens' feedback")

                let sent = try XCTUnwrap(env.apns.requests.first { $0.token == "abcd01" })
                let payload = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(sent.body)) as? [String: Any])
                let aps = try XCTUnwrap(payload["aps"] as? [String: Any])
                XCTAssertEqual(aps["badge"] as? Int, 4)
                let alert = try XCTUnwrap(aps["alert"] as? [String: Any])
                XCTAssertEqual(alert["loc-key"] as? String, "MSG_FROM_USER_WITH_CONTENT")
                XCTAssertEqual(alert["loc-args"] as? [String], ["Alice", "hello"])
                XCTAssertEqual(payload["event_id"] as? String, "$ev1")
                let message = try XCTUnwrap(env.fcm.messages.first { $0.target == "fcm-live" })
                XCTAssertEqual(message.data?["event_id"], "$ev1")
                XCTAssertEqual(message.data?["room_id"], "!room:x")

                // The same event to the same pushkey again (a homeserver's retry): not sent twice.
                let before = env.apns.requests.filter { $0.token == "abcd01" }.count
                let again = try await Self.notify(client, body)
                XCTAssertEqual(again.status, 200, again.body)
                XCTAssertEqual(env.apns.requests.filter { $0.token == "abcd01" }.count, before)

                // A pushkey the gateway cannot take (over core.max_token_bytes) is rejected alone.
                let long = String(repeating: "k", count: 5000)
                let mixed = try await Self.notify(
                    client,
                    #"{"notification":{"event_id":"$ev2","counts":{"unread":1},"devices":[{"app_id":"com.example.android","pushkey":"\#(long)"},{"app_id":"com.example.android","pushkey":"fcm-live"}]}}"#
                )
                XCTAssertEqual(mixed.status, 200, mixed.body)
                XCTAssertEqual(jsonObject(mixed.body)["rejected"] as? [String], [long])
                XCTAssertEqual(mixed.notifIDs.count, 1)

                let bad = try await Self.notify(client, "{not json")
                XCTAssertEqual(bad.status, 400)
                XCTAssertEqual(jsonObject(bad.body)["errcode"] as? String, "M_NOT_JSON")
                let noDevices = try await Self.notify(client, #"{"notification":{"devices":[]}}"#)
                XCTAssertEqual(noDevices.status, 400)
                XCTAssertEqual(jsonObject(noDevices.body)["errcode"] as? String, "M_BAD_JSON")

                let huge = try await Self.notify(client, "{\"pad\":\"" + String(repeating: "x", count: 600 * 1024) + "\"}")
                XCTAssertEqual(huge.status, 413)
                XCTAssertEqual(jsonObject(huge.body)["errcode"] as? String, "M_TOO_LARGE")

                // Sygnal's series as its Prometheus client names them, beside the gateway's own.
                let metrics = String(decoding: MetricsSetup.exposition(gateway: gateway), as: UTF8.self)
                for series in [
                    "sygnal_notifications_received_total", #"sygnal_pushgateway_status_codes_total{code="200"}"#, "sygnal_notify_time_bucket",
                ] {
                    XCTAssertTrue(metrics.contains(series), series)
                }

                let health = try await client.execute(uri: "/health", method: .get) { Int($0.status.code) }
                XCTAssertEqual(health, 200)
            }
        }
    }
}
