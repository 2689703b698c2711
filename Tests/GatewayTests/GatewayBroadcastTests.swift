import Foundation
import HTTPTypes
import HummingbirdTesting
import MockProviders
import NIOCore
import NIOPosix
import PushgateCore
import Signing
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// APNs broadcast channels end to end: channel management through `/api/apns/channels` to the mock's
/// channel-management listener, broadcasts through `/api/push` to the mock's `/4/broadcasts`.
final class GatewayBroadcastTests: XCTestCase {
    static let bundleID = "com.example.app"

    static func call(
        _ client: any TestClientProtocol, _ method: HTTPRequest.Method, _ uri: String, _ body: String? = nil
    ) async throws -> (status: Int, body: String, json: [String: Any]) {
        try await client.execute(
            uri: uri, method: method, headers: body == nil ? [:] : [.contentType: "application/json"], body: body.map { ByteBuffer(string: $0) }
        ) { r in
            let text = String(buffer: r.body)
            return (Int(r.status.code), text, jsonObject(text))
        }
    }

    /// The path segment of a channel id (base64's `/` and `+` percent-encoded).
    static func segment(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
    }

    static func update(_ channel: String, score: String, extra: String = "") -> String {
        let now = Int(Date().timeIntervalSince1970)
        return
            #"{"notifications":[{"platform":1,"channels":["\#(channel)"],"event":"update","timestamp":\#(now),"content-state":{"score":"\#(score)"}\#(extra)}],"sync":true}"#
    }

    func testChannelIsCreatedBroadcastReachesTheMockAndChannelIsDeleted() async throws {
        for sqlite in [false, true] {
            let env = try await TestEnvironment.start()
            defer { Task { await env.stop() } }
            let environment = sqlite ? ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/b.sqlite"] : [:]
            try await env.withGateway(environment: environment) { client, _ in
                // Create: 201 with the id APNs gave in apns-channel-id.
                let created = try await Self.call(client, .post, "/api/apns/channels", #"{"message_storage_policy":1}"#)
                XCTAssertEqual(created.status, 201, created.body)
                let id = try XCTUnwrap(created.json["channel_id"] as? String)
                XCTAssertEqual(created.json["message_storage_policy"] as? Int, 1)
                XCTAssertEqual(created.json["production"] as? Bool, false)
                XCTAssertEqual(env.apns.channels(of: Self.bundleID), [id: 1])
                let create = try XCTUnwrap(env.apns.channelRequests.first)
                XCTAssertEqual(create.path, "/1/apps/com.example.app/channels")
                XCTAssertEqual(create.status, 201)
                XCTAssertNoThrow(try DecodedJWT(try XCTUnwrap(create.providerToken)).verify(es256: env.apnsKey.publicKey))
                let sent = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(create.body)) as? [String: Any])
                XCTAssertEqual(sent["message-storage-policy"] as? Int, 1)
                XCTAssertEqual(sent["push-type"] as? String, "LiveActivity")

                // List and read.
                let list = try await Self.call(client, .get, "/api/apns/channels")
                XCTAssertEqual(list.status, 200, list.body)
                XCTAssertEqual(list.json["channels"] as? [String], [id])
                let read = try await Self.call(client, .get, "/api/apns/channels/\(Self.segment(id))")
                XCTAssertEqual(read.status, 200, read.body)
                XCTAssertEqual(read.json["channel_id"] as? String, id)
                XCTAssertEqual(read.json["message_storage_policy"] as? Int, 1)
                XCTAssertEqual(read.json["push_type"] as? String, "LiveActivity")

                // Broadcast a content-state: one POST /4/broadcasts/apps/<bundle id> with the channel header.
                let r = try await client.push(Self.update(id, score: "2-1", extra: #","notif_id":"match-1""#))
                XCTAssertEqual(r.status, 200, r.body)
                XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
                let b = try XCTUnwrap(env.apns.broadcasts.first)
                XCTAssertEqual(env.apns.broadcasts.count, 1)
                XCTAssertEqual(b.status, 200, "mock refused: \(b.reason ?? "")")
                XCTAssertEqual(b.path, "/4/broadcasts/apps/com.example.app")
                XCTAssertEqual(b.channelID, id)
                XCTAssertEqual(b.header("apns-channel-id"), id)
                XCTAssertEqual(b.pushType, "liveactivity")
                XCTAssertNil(b.topic, "a broadcast names its bundle id in the path, not apns-topic")
                XCTAssertNotNil(UUID(uuidString: b.header("apns-request-id") ?? ""))
                XCTAssertEqual(b.aps["event"] as? String, "update")
                XCTAssertEqual((b.aps["content-state"] as? [String: Any])?["score"] as? String, "2-1")
                XCTAssertEqual(env.apns.requests.filter { $0.path.hasPrefix("/3/device/") }.count, 0)
                // Status: delivered, the provider id is APNs' apns-request-id.
                let status = try await Self.call(client, .get, "/api/push/match-1")
                let delivery = try XCTUnwrap((status.json["deliveries"] as? [[String: Any]])?.first)
                XCTAssertEqual(delivery["state"] as? String, "delivered", status.body)
                XCTAssertEqual(delivery["provider_id"] as? String, b.header("apns-request-id"))

                // Delete: 204, the channel is gone, a broadcast to it fails with APNs' reason (no feedback: not a device token).
                let deleted = try await Self.call(client, .delete, "/api/apns/channels/\(Self.segment(id))")
                XCTAssertEqual(deleted.status, 204, deleted.body)
                XCTAssertEqual(deleted.body, "")
                XCTAssertTrue(env.apns.channels(of: Self.bundleID).isEmpty)
                let again = try await Self.call(client, .delete, "/api/apns/channels/\(Self.segment(id))")
                XCTAssertEqual(again.status, 404, again.body)
                XCTAssertTrue(again.body.contains("ChannelNotRegistered"), again.body)
                let late = try await client.push(Self.update(id, score: "3-1"))
                XCTAssertEqual(late.status, 200)
                let logs = try XCTUnwrap(jsonObject(late.body)["logs"] as? [[String: Any]])
                XCTAssertEqual(logs.count, 1, late.body)
                XCTAssertEqual(logs.first?["error"] as? String, "ChannelNotRegistered")
                XCTAssertEqual(env.feedbackCount, 0)
            }
        }
    }

    /// A No Messages Stored channel takes `apns-expiration: 0` only (the mock answers BadExpirationDate
    /// otherwise, as APNs does); the gateway passes the notification's `expiration` through.
    func testExpirationOnANoMessagesStoredChannel() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let created = try await Self.call(client, .post, "/api/apns/channels", #"{"message_storage_policy":0}"#)
            let id = try XCTUnwrap(created.json["channel_id"] as? String, created.body)
            let refused = try await client.push(Self.update(id, score: "1-0", extra: #","expiration":4102444800"#))
            XCTAssertTrue(refused.body.contains("BadExpirationDate"), refused.body)
            let ok = try await client.push(Self.update(id, score: "1-0", extra: #","expiration":0,"priority":"normal""#))
            XCTAssertEqual(ok.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            let last = try XCTUnwrap(env.apns.broadcasts.last)
            XCTAssertEqual(last.expiration, "0")
            XCTAssertEqual(last.priority, "5")
        }
    }

    /// Live Activity start to a push-to-start token, subscribing the activity to a channel.
    func testLiveActivityStartWithInputPushChannel() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let token = String(repeating: "c3", count: 32)
        try await env.withGateway { client, _ in
            let created = try await Self.call(client, .post, "/api/apns/channels", #"{"message_storage_policy":1}"#)
            let id = try XCTUnwrap(created.json["channel_id"] as? String, created.body)
            let now = Int(Date().timeIntervalSince1970)
            let r = try await client.push(
                #"{"notifications":[{"platform":1,"tokens":["\#(token)"],"push_type":"liveactivity","event":"start","timestamp":\#(now),"content-state":{"score":"0-0"},"attributes-type":"MatchAttributes","attributes":{"home":"A","away":"B"},"input-push-channel":"\#(id)","title":"Kick-off","message":"A vs B"}],"sync":true}"#
            )
            XCTAssertEqual(r.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            let req = try XCTUnwrap(env.apns.requests(for: token).first)
            XCTAssertEqual(req.status, 200, "mock refused: \(req.reason ?? "")")
            XCTAssertEqual(req.topic, "com.example.app.push-type.liveactivity")
            XCTAssertEqual(req.aps["event"] as? String, "start")
            XCTAssertEqual(req.aps["input-push-channel"] as? String, id)
            XCTAssertNil(req.aps["input-push-token"])
            let r2 = try await client.push(
                #"{"notifications":[{"platform":1,"tokens":["\#(token)"],"push_type":"liveactivity","event":"start","timestamp":\#(now),"content-state":{},"attributes-type":"T","attributes":{},"input-push-token":1}],"sync":true}"#
            )
            XCTAssertEqual(r2.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.apns.requests(for: token).last?.aps["input-push-token"] as? Int, 1)
        }
    }

    /// A channel-management host answering nonsense (a policy of 1e300, a list of numbers, no channel
    /// id on create) gets a 502 naming what was wrong, never a crash or a value passed on.
    func testHostileChannelManagementAnswersAreRefused() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        var options = MockHTTPServer.Options()
        options.tls = try env.pki.serverTLSConfiguration()
        let hostile = MockHTTPServer(options: options, eventLoopGroup: MultiThreadedEventLoopGroup.singleton) { request in
            switch (request.method, request.path) {
            case ("GET", "/1/apps/com.example.app/channels"): return .json(200, #"{"message-storage-policy":1e300,"push-type":"LiveActivity"}"#)
            case ("GET", "/1/apps/com.example.app/all-channels"): return .json(200, #"{"channels":[1,"a b",null,"YWJj"]}"#)
            default: return MockResponse(status: 201)
            }
        }
        try await hostile.start()
        defer { Task { try? await hostile.stop() } }
        try await env.withGateway(environment: ["PUSHGATE_IOS_CHANNELS_ENDPOINT": hostile.baseURL]) { client, _ in
            let read = try await Self.call(client, .get, "/api/apns/channels/YWJj")
            XCTAssertEqual(read.status, 502, read.body)
            XCTAssertTrue(read.body.contains("message-storage-policy"), read.body)
            let list = try await Self.call(client, .get, "/api/apns/channels")
            XCTAssertEqual(list.status, 200, list.body)
            XCTAssertEqual(list.json["channels"] as? [String], ["YWJj"], "only ids that can be ids are passed on")
            let created = try await Self.call(client, .post, "/api/apns/channels", #"{"message_storage_policy":0}"#)
            XCTAssertEqual(created.status, 502, created.body)
            XCTAssertTrue(created.body.contains("apns-channel-id"), created.body)
        }
    }

    func testBadBroadcastFieldsAndChannelRequestsAreRefusedNamingTheField() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let now = Int(Date().timeIntervalSince1970)
            let cases: [(String, String)] = [
                (#"{"platform":2,"tokens":["t"],"channels":["YWJj"]}"#, "notifications[0].channels"),
                (#"{"platform":1,"channels":["a b"],"event":"update","timestamp":1}"#, "notifications[0].channels[0]"),
                (#"{"platform":1,"channels":[""],"event":"update","timestamp":1}"#, "notifications[0].channels[0]"),
                (#"{"platform":1,"channels":[5]}"#, "notifications[0].channels"),
                (#"{"platform":1,"channels":"YWJj"}"#, "notifications[0].channels"),
                (#"{"platform":1,"channels":["YWJj"],"push_type":"alert"}"#, "notifications[0].push_type"),
                (#"{"platform":1,"channels":["YWJj"],"event":"start","timestamp":\#(now)}"#, "notifications[0].event"),
                (
                    #"{"platform":1,"tokens":["aa"],"push_type":"liveactivity","event":"update","input-push-channel":"YWJj"}"#,
                    "notifications[0].input-push-channel"
                ),
                (
                    #"{"platform":1,"tokens":["aa"],"push_type":"liveactivity","event":"start","input-push-channel":"a/b c"}"#,
                    "notifications[0].input-push-channel"
                ),
                (
                    #"{"platform":1,"tokens":["aa"],"push_type":"liveactivity","event":"start","input-push-token":2}"#,
                    "notifications[0].input-push-token"
                ),
                (
                    #"{"platform":1,"tokens":["aa"],"push_type":"liveactivity","event":"update","input-push-token":true}"#,
                    "notifications[0].input-push-token"
                ),
            ]
            for (notification, field) in cases {
                let r = try await client.push(#"{"notifications":[\#(notification)]}"#)
                XCTAssertEqual(r.status, 400, "\(notification): \(r.body)")
                XCTAssertTrue((jsonObject(r.body)["detail"] as? String ?? "").hasPrefix(field), "\(notification): \(r.body)")
            }
            let bodies: [(String, String)] = [
                ("{}", "message_storage_policy"),
                (#"{"message_storage_policy":2}"#, "message_storage_policy"),
                (#"{"message_storage_policy":true}"#, "message_storage_policy"),
                (#"{"message_storage_policy":1e300}"#, "message_storage_policy"),
                (#"{"message_storage_policy":"1"}"#, "message_storage_policy"),
                (#"{"message_storage_policy":0,"colour":"red"}"#, "colour"),
                (#"{"message_storage_policy":0,"production":"yes"}"#, "production"),
                (#"{"message_storage_policy":0,"app_id":"nope"}"#, "app_id"),
                (#"{"message_storage_policy":0,"topic":"com/evil"}"#, "topic"),
                ("[1]", "body"),
                ("{", "body"),
            ]
            for (body, field) in bodies {
                let r = try await Self.call(client, .post, "/api/apns/channels", body)
                XCTAssertEqual(r.status, 400, "\(body): \(r.body)")
                XCTAssertTrue((r.json["detail"] as? String ?? "").hasPrefix(field), "\(body): \(r.body)")
            }
            let big = try await Self.call(
                client, .post, "/api/apns/channels", #"{"message_storage_policy":0,"topic":""# + String(repeating: "a", count: 5000) + #""}"#)
            XCTAssertEqual(big.status, 413, big.body)
            let badID = try await Self.call(client, .delete, "/api/apns/channels/a%20b")
            XCTAssertEqual(badID.status, 400, badID.body)
            XCTAssertTrue((badID.json["detail"] as? String ?? "").hasPrefix("channel_id"), badID.body)
            let badQuery = try await Self.call(client, .get, "/api/apns/channels?production=maybe")
            XCTAssertEqual(badQuery.status, 400, badQuery.body)
            // Nothing reached APNs.
            XCTAssertTrue(env.apns.channelRequests.isEmpty)
            XCTAssertTrue(env.apns.broadcasts.isEmpty)
        }
    }
}
