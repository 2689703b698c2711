import AsyncHTTPClient
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore
import ServiceLifecycle
import SwiftProtobuf
import TestSupport
import XCTest

@testable import GatewayCore
@testable import GorushRPC
@testable import HTTPIngest

/// gorush's gRPC API end to end: a grpc-swift client -> Pushgate's gRPC listener (real socket) ->
/// the same queue as `POST /api/push` -> the TLS HTTP/2 mock APNs / FCM.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class GorushRPCTests: XCTestCase {
    let token1 = String(repeating: "a1", count: 32)
    let token2 = String(repeating: "b2", count: 32)

    typealias Client = GRPCClient<HTTP2ClientTransport.Posix>

    /// A live gateway with `grpc.enabled` on a free port, and a gRPC client connected to it.
    func withRPC(
        _ env: TestEnvironment, _ extraYAML: String = "", environment: [String: String] = [:], caPEM: String? = nil,
        _ body: @escaping @Sendable (Client, any TestClientProtocol, Gateway, _ port: Int) async throws -> Void
    ) async throws {
        try await Self.withRPC(env, extraYAML, environment: environment, caPEM: caPEM, body)
    }

    /// `withRPC` for other suites; `logger` is the gateway's (warnings and up by default).
    static func withRPC(
        _ env: TestEnvironment, _ extraYAML: String = "", environment: [String: String] = [:], caPEM: String? = nil,
        logger: Logger? = nil,
        _ body: @escaping @Sendable (Client, any TestClientProtocol, Gateway, _ port: Int) async throws -> Void
    ) async throws {
        let env2 = ["PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0"].merging(environment) { _, n in n }
        let raw = try RawConfig(yaml: env.merge(env.yaml(), extraYAML), environment: env2)
        var defaultLogger = Logger(label: "test")
        defaultLogger.logLevel = .warning
        let logger = logger ?? defaultLogger
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let app = try gateway.makeApplication(extraServices: [server])
        try await app.test(.live) { http in
            let port = try await server.listeningPort
            try await withGRPCClient(transport: try Self.transport(port: port, caPEM: caPEM)) { client in
                try await body(client, http, gateway, port)
            }
        }
    }

    static func transport(port: Int, caPEM: String?) throws -> HTTP2ClientTransport.Posix {
        let security: HTTP2ClientTransport.Posix.TransportSecurity
        if let caPEM {
            security = .tls { $0.trustRoots = .certificates([.bytes(Array(caPEM.utf8), format: .pem)]) }
        } else {
            security = .plaintext
        }
        return try HTTP2ClientTransport.Posix(target: .ipv4(address: "127.0.0.1", port: port), transportSecurity: security)
    }

    static func health(_ client: Client, service: String = "") async throws -> Proto_HealthCheckResponse.ServingStatus {
        var request = Proto_HealthCheckRequest()
        request.service = service
        return try await Proto_Health.Client(wrapping: client).check(request).status
    }

    /// `Send`: the reply and the response metadata, or the RPC error.
    static func send(_ client: Client, _ request: Proto_NotificationRequest, metadata: Metadata = [:]) async throws
        -> (reply: Proto_NotificationReply, metadata: Metadata)
    {
        try await Proto_Gorush.Client(wrapping: client).send(request, metadata: metadata) { response in
            (try response.message, response.metadata)
        }
    }

    static func sendError(_ client: Client, _ request: Proto_NotificationRequest, metadata: Metadata = [:]) async -> RPCError? {
        do {
            _ = try await send(client, request, metadata: metadata)
            return nil
        } catch let e as RPCError {
            return e
        } catch {
            return RPCError(code: .unknown, message: "\(error)")
        }
    }

    static func data(_ json: String) throws -> Google_Protobuf_Struct {
        try Google_Protobuf_Struct(jsonString: json)
    }

    /// An iOS request with every field gorush's `Send` maps.
    func iosRequest(token: String) throws -> Proto_NotificationRequest {
        var r = Proto_NotificationRequest()
        r.tokens = [token]
        r.platform = 1
        r.message = "Hello"
        r.title = "Hi"
        r.topic = "com.example.app"
        r.badge = 3
        r.category = "CHAT"
        r.sound = "default"
        r.threadID = "th-1"
        r.mutableContent = true
        r.id = "rpc-ios-\(token.prefix(4))"
        var alert = Proto_Alert()
        alert.title = "Alert title"
        alert.body = "Alert body"
        alert.subtitle = "Sub"
        alert.action = "OPEN"
        alert.actionLocKey = "ignored by gorush"
        alert.locKey = "LK"
        alert.locArgs = ["a", "b"]
        r.alert = alert
        r.data = try Self.data(#"{"chatId":"42","n":7,"ratio":0.5,"nested":{"b":true,"l":[1,"x",null]}}"#)
        return r
    }

    /// The gorush JSON of `iosRequest` (what gorush's `rpc/server.go` builds): priority "normal",
    /// `action` also as `action-loc-key`, `data` keys sorted.
    func iosJSON(token: String) -> String {
        #"""
        {"notifications":[{"notif_id":"http-ios","tokens":["\#(token)"],"platform":1,"message":"Hello","title":"Hi","topic":"com.example.app","badge":3,"category":"CHAT","sound":"default","thread-id":"th-1","mutable_content":true,"priority":"normal","alert":{"title":"Alert title","body":"Alert body","subtitle":"Sub","action":"OPEN","action-loc-key":"OPEN","loc-key":"LK","loc-args":["a","b"]},"data":{"chatId":"42","n":7,"nested":{"b":true,"l":[1,"x",null]},"ratio":0.5}}]}
        """#
    }

    /// gorush's `rpc/server.go` mapping, as the gorush JSON it amounts to.
    func testMappingIsGorushs() throws {
        var r = try iosRequest(token: "tok")
        r.data = try Self.data(#"{"b":1,"a":{"z":null,"y":[true,"s",1e300]},"B":-2.5}"#)
        XCTAssertEqual(
            String(decoding: try GorushMapping.body(r), as: UTF8.self),
            #"{"notifications":[{"notif_id":"rpc-ios-tok","platform":1,"tokens":["tok"],"message":"Hello","title":"Hi","topic":"com.example.app","#
                + #""category":"CHAT","sound":"default","thread-id":"th-1","mutable_content":true,"badge":3,"priority":"normal","alert":{"title":"Alert title","#
                + #""body":"Alert body","subtitle":"Sub","action":"OPEN","action-loc-key":"OPEN","loc-key":"LK","loc-args":["a","b"]},"#
                + #""data":{"B":-2.5,"a":{"y":[true,"s",1e+300],"z":null},"b":1}}]}"#)
        // Zero values are gorush's "not set"; an unknown priority is named by its number; an empty alert is left out.
        var bare = Proto_NotificationRequest()
        bare.platform = 2
        bare.badge = -4
        bare.priority = .UNRECOGNIZED(7)
        bare.alert = Proto_Alert()
        XCTAssertEqual(
            String(decoding: try GorushMapping.body(bare), as: UTF8.self), #"{"notifications":[{"platform":2,"tokens":[],"priority":"7"}]}"#)
        // JSON has no NaN: refused naming the field.
        var nan = Proto_NotificationRequest()
        var value = Google_Protobuf_Value()
        value.numberValue = .nan
        nan.data.fields["x"] = value
        XCTAssertThrowsError(try GorushMapping.body(nan)) {
            XCTAssertEqual("\($0)", "Missing notifications field. (notifications[0].data.x: nan is not a JSON number)")
        }
    }

    func testHealthServingAndIOSSendDeliversWhatHTTPDelivers() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (token1, token2)
        let request = try iosRequest(token: t1)
        let json = iosJSON(token: t2)
        try await withRPC(env) { client, http, _, _ in
            let health = try await Self.health(client)
            XCTAssertEqual(health, .serving)
            let service = try await Self.health(client, service: "proto.Gorush")
            XCTAssertEqual(service, .serving)
            do {
                _ = try await Self.health(client, service: "nope")
                XCTFail("an unknown service must be NOT_FOUND")
            } catch let e as RPCError {
                XCTAssertEqual(e.code, .notFound)
            }

            let (reply, metadata) = try await Self.send(client, request)
            XCTAssertTrue(reply.success)
            XCTAssertEqual(reply.counts, 1, "gorush counts the tokens")
            XCTAssertEqual(Array(metadata[stringValues: "x-pushgate-notif-ids"]), ["rpc-ios-a1a1"])
            let r = try await http.push(json)
            XCTAssertEqual(r.status, 200)

            try await waitUntil("both delivered") { env.apns.requests(for: t1).count == 1 && env.apns.requests(for: t2).count == 1 }
            let viaRPC = try XCTUnwrap(env.apns.requests(for: t1).first)
            let viaHTTP = try XCTUnwrap(env.apns.requests(for: t2).first)
            XCTAssertEqual(viaRPC.status, 200, "mock refused: \(env.apns.rejections)")
            // The same bytes and headers as the HTTP API sends for gorush's JSON of the request.
            XCTAssertEqual(viaRPC.bodyString, viaHTTP.bodyString)
            XCTAssertEqual(viaRPC.topic, "com.example.app")
            XCTAssertEqual(viaRPC.topic, viaHTTP.topic)
            XCTAssertEqual(viaRPC.pushType, viaHTTP.pushType)
            XCTAssertEqual(viaRPC.priority, "5", "gorush sends priority \"normal\" (the enum's default): apns-priority 5")
            XCTAssertEqual(viaRPC.priority, viaHTTP.priority)
            let aps = viaRPC.aps
            let alert = try XCTUnwrap(aps["alert"] as? [String: Any])
            XCTAssertEqual(alert["title"] as? String, "Alert title")
            XCTAssertEqual(alert["body"] as? String, "Alert body")
            XCTAssertEqual(alert["subtitle"] as? String, "Sub")
            XCTAssertEqual(alert["action-loc-key"] as? String, "OPEN", "gorush copies action into action-loc-key")
            XCTAssertEqual(alert["loc-key"] as? String, "LK")
            XCTAssertEqual(alert["loc-args"] as? [String], ["a", "b"])
            XCTAssertEqual(aps["badge"] as? Int, 3)
            XCTAssertEqual(aps["sound"] as? String, "default")
            XCTAssertEqual(aps["category"] as? String, "CHAT")
            XCTAssertEqual(aps["thread-id"] as? String, "th-1")
            XCTAssertEqual(aps["mutable-content"] as? Int, 1)
            XCTAssertEqual(viaRPC.payload["chatId"] as? String, "42")
            XCTAssertEqual(viaRPC.payload["n"] as? Int, 7)
            XCTAssertEqual(viaRPC.payload["ratio"] as? Double, 0.5)
            let nested = try XCTUnwrap(viaRPC.payload["nested"] as? [String: Any])
            XCTAssertEqual(nested["b"] as? Bool, true)

            // Same status records as the HTTP API.
            let status = try await http.execute(uri: "/api/push/rpc-ios-a1a1", method: .get) { jsonObject(String(buffer: $0.body)) }
            XCTAssertEqual(status["notif_id"] as? String, "rpc-ios-a1a1")
            let deliveries = try XCTUnwrap(status["deliveries"] as? [[String: Any]], "\(status)")
            XCTAssertEqual(deliveries.count, 1)
        }
    }

    /// A client generated from gorush.proto by another implementation (grpcio-tools, stubs made at
    /// test time from the committed proto) against the live listener. Runs when
    /// `PUSHGATE_INTEROP_PYTHON` names a python with Tests/interop/requirements.txt (scripts/test.sh).
    func testPythonGrpcioClientGeneratedFromGorushProto() async throws {
        guard let python = ProcessInfo.processInfo.environment["PUSHGATE_INTEROP_PYTHON"], !python.isEmpty else {
            throw XCTSkip("set PUSHGATE_INTEROP_PYTHON to a python with grpcio and grpcio-tools (Tests/interop/requirements.txt)")
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let script = root.appendingPathComponent("Tests/interop/gorush_grpc_client.py").path
        let proto = root.appendingPathComponent("Sources/GorushRPC/Proto/gorush.proto").path
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (t1, t2) = (token1, token2)
        let key = "interop-key-0123456789"
        try await withRPC(env, environment: ["PUSHGATE_CORE_API_KEYS": key]) { _, http, _, port in
            let (status, out, err) = await Self.run(
                python, [script, "--proto", proto, "--port", String(port), "--ios-token", t1, "--android-token", "fcm-interop", "--key", key])
            XCTAssertEqual(status, 0, err)
            let result = jsonObject(out)
            XCTAssertEqual(result["health"] as? String, "SERVING", out + err)
            for call in ["ios", "android"] {
                let reply = result[call] as? [String: Any]
                XCTAssertEqual(reply?["success"] as? Bool, true, "\(call): \(out)")
                XCTAssertEqual(reply?["counts"] as? Int, 1, "\(call): \(out)")
            }
            let errors = try XCTUnwrap(result["errors"] as? [String: [String: String]], out)
            XCTAssertEqual(errors["bad_platform"]?["code"], "INVALID_ARGUMENT")
            XCTAssertEqual(
                errors["bad_platform"]?["details"],
                "Invalid platform. (notifications[0].platform: unknown platform 42 (\(Platform.numbered)))"
            )
            XCTAssertEqual(errors["no_tokens"]?["code"], "INVALID_ARGUMENT")
            // grpcio (grpc-core) reads the status answered on HEADERS, before the message, as sent.
            XCTAssertEqual(errors["no_key"]?["code"], "UNAUTHENTICATED", out)
            XCTAssertEqual(errors["no_key"]?["details"], "send an API key: metadata authorization: Bearer <key>", out)
            XCTAssertEqual(result["health_without_key"] as? String, "SERVING", out)

            // What gorush builds from that request, through the HTTP API, for comparison.
            let h = try await http.execute(
                uri: "/api/push", method: .post, headers: [.authorization: "Bearer \(key)"],
                body: ByteBuffer(
                    string: #"""
                        {"notifications":[{"tokens":["\#(t2)"],"platform":1,"message":"Hello from grpcio","topic":"com.example.app","badge":2,"sound":"default","priority":"normal","alert":{"title":"Interop","body":"Hello from grpcio","subtitle":"py"},"data":{"chatId":"42","count":7,"flags":{"urgent":true},"tags":["a","b"]}}]}
                        """#)
            ) { Int($0.status.code) }
            XCTAssertEqual(h, 200)
            try await waitUntil("delivered") {
                env.apns.requests(for: t1).count == 1 && env.apns.requests(for: t2).count == 1 && env.fcm.messages.count == 1
            }
            let viaPython = try XCTUnwrap(env.apns.requests(for: t1).first)
            let viaHTTP = try XCTUnwrap(env.apns.requests(for: t2).first)
            XCTAssertEqual(viaPython.status, 200, "mock refused: \(env.apns.rejections)")
            XCTAssertEqual(viaPython.bodyString, viaHTTP.bodyString)
            XCTAssertEqual(viaPython.priority, viaHTTP.priority)
            XCTAssertEqual(viaPython.topic, "com.example.app")
            XCTAssertEqual((viaPython.aps["alert"] as? [String: Any])?["title"] as? String, "Interop")
            XCTAssertEqual(viaPython.aps["badge"] as? Int, 2)
            XCTAssertEqual(viaPython.payload["chatId"] as? String, "42")
            XCTAssertEqual(viaPython.payload["count"] as? Int, 7)
            XCTAssertEqual(viaPython.payload["tags"] as? [String], ["a", "b"])
            let fcm = try XCTUnwrap(env.fcm.messages.first)
            XCTAssertEqual(fcm.target, "fcm-interop")
            XCTAssertEqual(fcm.data?["chatId"], "42")
            XCTAssertEqual(fcm.data?["count"], "7")
            XCTAssertEqual(fcm.data?["flags"], #"{"urgent":true}"#)
            XCTAssertEqual(fcm.notification?["title"], "Interop")
        }
    }

    /// Runs a process off the concurrency pool; (exit status, stdout, stderr).
    static func run(_ executable: String, _ args: [String]) async -> (Int32, String, String) {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: executable)
                p.arguments = args
                let out = Pipe()
                let err = Pipe()
                p.standardOutput = out
                p.standardError = err
                do { try p.run() } catch {
                    continuation.resume(returning: (-1, "", "\(error)"))
                    return
                }
                let o = out.fileHandleForReading.readDataToEndOfFile()
                let e = err.fileHandleForReading.readDataToEndOfFile()
                p.waitUntilExit()
                continuation.resume(returning: (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self)))
            }
        }
    }

    func testAndroidSendReachesFCM() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        var r = Proto_NotificationRequest()
        r.tokens = ["fcm-token-rpc"]
        r.platform = 2
        r.title = "You got message"
        r.message = "Hello Android"
        r.priority = .high
        r.data = try Self.data(#"{"n":42,"flag":true,"s":"x"}"#)
        var fcm = Proto_FCMOptions()
        fcm.analyticsLabel = "campaign-1"
        r.fcmOptions = fcm
        let request = r
        try await withRPC(env) { client, http, _, _ in
            let (reply, _) = try await Self.send(client, request)
            XCTAssertTrue(reply.success)
            XCTAssertEqual(reply.counts, 1)
            let json = #"""
                {"notifications":[{"tokens":["fcm-token-http"],"platform":2,"title":"You got message","message":"Hello Android","priority":"high","data":{"flag":true,"n":42,"s":"x"},"fcm_options":{"analytics_label":"campaign-1"}}]}
                """#
            let h = try await http.push(json)
            XCTAssertEqual(h.status, 200)
            try await waitUntil("both at the mock FCM") { env.fcm.messages.count == 2 }
            let viaRPC = try XCTUnwrap(env.fcm.messages.first { $0.target == "fcm-token-rpc" })
            let viaHTTP = try XCTUnwrap(env.fcm.messages.first { $0.target == "fcm-token-http" })
            XCTAssertEqual(viaRPC.data?["n"], "42")
            XCTAssertEqual(viaRPC.data?["flag"], "true")
            XCTAssertEqual(viaRPC.notification?["title"], "You got message")
            XCTAssertEqual(viaRPC.notification?["body"], "Hello Android")
            XCTAssertEqual((viaRPC.message["android"] as? [String: Any])?["priority"] as? String, "HIGH")
            XCTAssertEqual(
                viaRPC.messageJSON.replacingOccurrences(of: "fcm-token-rpc", with: "T"),
                viaHTTP.messageJSON.replacingOccurrences(of: "fcm-token-http", with: "T"))
        }
    }

    func testInvalidInputIsInvalidArgumentWithTheHTTPMessage() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let t = token1
        try await withRPC(env) { client, http, _, _ in
            var badPlatform = Proto_NotificationRequest()
            badPlatform.tokens = [t]
            badPlatform.platform = 200
            badPlatform.message = "x"
            var e = await Self.sendError(client, badPlatform)
            XCTAssertEqual(e?.code, .invalidArgument)
            XCTAssertEqual(
                e?.message,
                "Invalid platform. (notifications[0].platform: unknown platform 200 (\(Platform.numbered)))"
            )
            var noPlatform = badPlatform
            noPlatform.platform = 0
            e = await Self.sendError(client, noPlatform)
            XCTAssertEqual(e?.code, .invalidArgument)
            XCTAssertEqual(
                e?.message,
                "Invalid platform. (notifications[0].platform: unknown platform 0 (\(Platform.numbered)))"
            )

            var noTokens = Proto_NotificationRequest()
            noTokens.platform = 1
            noTokens.message = "x"
            e = await Self.sendError(client, noTokens)
            XCTAssertEqual(e?.code, .invalidArgument)
            XCTAssertEqual(
                e?.message,
                "please provide at least one device token (notifications[0].tokens: empty (only an Android or Huawei topic send needs none))")
            var emptyToken = noTokens
            emptyToken.tokens = [""]
            e = await Self.sendError(client, emptyToken)
            XCTAssertEqual(e?.code, .invalidArgument)

            // The HTTP 400's message and detail, word for word: data.aps, a token over the limit, NUL.
            let cases: [(String, (inout Proto_NotificationRequest) throws -> Void)] = [
                (
                    #"{"notifications":[{"tokens":["\#(t)"],"platform":1,"message":"x","data":{"aps":{"alert":"x"}}}]}"#,
                    { $0.data = try Self.data(#"{"aps":{"alert":"x"}}"#) }
                ),
                (
                    #"{"notifications":[{"tokens":["\#(String(repeating: "a", count: 5000))"],"platform":1,"message":"x"}]}"#,
                    { $0.tokens = [String(repeating: "a", count: 5000)] }
                ),
                (#"{"notifications":[{"tokens":["\#(t)"],"platform":1,"message":"x\u0000y"}]}"#, { $0.message = "x\u{0}y" }),
            ]
            for (json, change) in cases {
                var r = Proto_NotificationRequest()
                r.tokens = [t]
                r.platform = 1
                r.message = "x"
                try change(&r)
                let h = try await http.push(json)
                XCTAssertEqual(h.status, 400, json)
                let body = jsonObject(h.body)
                let expected = "\(body["message"] as? String ?? "?") (\(body["detail"] as? String ?? "?"))"
                let got = await Self.sendError(client, r)
                XCTAssertEqual(got?.code, .invalidArgument, json)
                XCTAssertEqual(got?.message, expected)
            }
            // The HTTP API is unaffected: an unknown platform is skipped there, as in gorush (200, counts 0).
            let skipped = try await http.push(#"{"notifications":[{"tokens":["\#(t)"],"platform":200,"message":"x"}]}"#)
            XCTAssertEqual(skipped.status, 200)
            XCTAssertEqual(skipped.body, #"{"counts":0,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(env.apns.requestCount, 0, "nothing refused was sent")

            // /metrics counts the RPCs by method and code.
            let metrics = try await http.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(metrics.contains(#"pushgate_grpc_requests_total{method="proto.Gorush/Send",code="INVALID_ARGUMENT"}"#), metrics)
        }
    }

    func testKeysAreRequiredInMetadata() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let key = "rpc-test-key-0123456789"
        let t = token1
        try await withRPC(env, environment: ["PUSHGATE_CORE_API_KEYS": key]) { client, _, _, _ in
            var r = Proto_NotificationRequest()
            r.tokens = [t]
            r.platform = 1
            r.message = "with a key"
            var e = await Self.sendError(client, r)
            XCTAssertEqual(e?.code, .unauthenticated)
            e = await Self.sendError(client, r, metadata: ["authorization": "Bearer wrong-key-0123456789"])
            XCTAssertEqual(e?.code, .unauthenticated)
            XCTAssertEqual(e?.message, "the API key is not valid")
            // An app's key names its app; a different app-id is refused as the HTTP API refuses it (403).
            e = await Self.sendError(client, r, metadata: ["authorization": "Bearer \(key)", "app-id": "other"])
            XCTAssertEqual(e?.code, .permissionDenied)
            let (reply, _) = try await Self.send(client, r, metadata: ["authorization": "Bearer \(key)"])
            XCTAssertTrue(reply.success)
            // Health stays open (load balancers probe it without a key, as /healthz).
            let health = try await Self.health(client)
            XCTAssertEqual(health, .serving)
            try await waitUntil("delivered") { env.apns.requests(for: t).count == 1 }
        }
    }

    /// A request message is held to grpc.max_message_bytes (RESOURCE_EXHAUSTED); garbage is INVALID_ARGUMENT.
    func testOversizeAndMalformedMessages() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let t = token1
        try await withRPC(env, environment: ["PUSHGATE_GRPC_MAX_MESSAGE_BYTES": "4096"]) { client, _, _, _ in
            var r = Proto_NotificationRequest()
            r.tokens = [t]
            r.platform = 1
            r.message = String(repeating: "x", count: 5000)
            let e = await Self.sendError(client, r)
            XCTAssertEqual(e?.code, .resourceExhausted, "a message over grpc.max_message_bytes: \(String(describing: e))")
            // Bytes that are no NotificationRequest (field 1 declared as 100 bytes long, 3 there).
            let garbage: [UInt8] = [0x0A, 100, 1, 2, 3]
            do {
                _ = try await client.unary(
                    request: ClientRequest(message: garbage), descriptor: Proto_Gorush.Method.Send.descriptor, serializer: RawSerializer(),
                    deserializer: RawDeserializer(), options: .defaults
                ) { try $0.message }
                XCTFail("garbage was accepted")
            } catch let e as RPCError {
                XCTAssertEqual(e.code, .invalidArgument)
            }
            // Nesting in `data`: past core.max_json_depth (32) the HTTP 400 "over a limit"; past
            // swift-protobuf's decoding depth (100) the message does not decode. Both INVALID_ARGUMENT.
            for depth in [40, 150] {
                var deep = Proto_NotificationRequest()
                deep.tokens = [t]
                deep.platform = 1
                var value = Google_Protobuf_Value()
                value.stringValue = "leaf"
                for _ in 0..<depth {
                    var s = Google_Protobuf_Struct()
                    s.fields["k"] = value
                    value = Google_Protobuf_Value()
                    value.structValue = s
                }
                deep.data = value.structValue
                let e = await Self.sendError(client, deep)
                XCTAssertEqual(e?.code, .invalidArgument, "depth \(depth): \(String(describing: e))")
                if depth == 40 {
                    XCTAssertTrue(e?.message.hasPrefix("Request over a limit. (notifications[0].data") ?? false, "\(String(describing: e))")
                }
            }
            r.message = "fits"
            r.id = "id,with\nnewline%é"
            let (reply, metadata) = try await Self.send(client, r)
            XCTAssertEqual(Array(metadata[stringValues: "x-pushgate-notif-ids"]), ["id%2Cwith%0Anewline%25%C3%A9"], "encoded as the HTTP header is")
            XCTAssertTrue(reply.success)
            try await waitUntil("delivered") { env.apns.requests(for: t).count == 1 }
            XCTAssertEqual(env.apns.requests(for: t).first?.aps["alert"] as? String, "fits", "only the message that fits was sent")
        }
    }

    func testQueueFullIsResourceExhausted() async throws {
        // APNs holds its answers: deliveries stay pending; the queue holds 5.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        env.apns.setDefaultReply(.ok)
        try await withRPC(env, environment: ["PUSHGATE_QUEUE_MAX_PENDING": "5", "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": "1"]) { client, _, _, _ in
            var r = Proto_NotificationRequest()
            r.tokens = (0..<5).map { String(format: "%064x", $0) }
            r.platform = 1
            r.message = "fill"
            var refused: RPCError?
            for _ in 0..<20 {
                if let e = await Self.sendError(client, r) {
                    refused = e
                    break
                }
            }
            let e = try XCTUnwrap(refused, "the queue never filled")
            XCTAssertEqual(e.code, .resourceExhausted)
            XCTAssertTrue(e.message.hasPrefix("Queue is full, try again later."), e.message)
            XCTAssertNotNil(e.metadata[stringValues: "retry-after"].first { _ in true })
            hold.release()
        }
    }

    func testTLSWithTheIngestCertificate() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try env.pki.leafCertificatePEM.write(toFile: env.directory + "/ingest-cert.pem", atomically: true, encoding: .utf8)
        try env.pki.leafPrivateKeyPEM.write(toFile: env.directory + "/ingest-key.pem", atomically: true, encoding: .utf8)
        let t = token1
        let raw = try RawConfig(
            yaml: env.yaml(),
            environment: [
                "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0", "PUSHGATE_CORE_SSL": "true",
                "PUSHGATE_CORE_CERT_PATH": env.directory + "/ingest-cert.pem", "PUSHGATE_CORE_KEY_PATH": env.directory + "/ingest-key.pem",
            ])
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let app = try gateway.makeApplication(extraServices: [server])
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let running = Task { try await group.run() }
        let port = try await server.listeningPort
        // A plaintext client does not get through; one trusting the CA does.
        let plain = await Self.healthOutcome(port: port, caPEM: nil)
        XCTAssertNotEqual(plain, "SERVING")
        let viaTLS = await Self.healthOutcome(port: port, caPEM: env.pki.caCertificatePEM)
        XCTAssertEqual(viaTLS, "SERVING")
        try await withGRPCClient(transport: try Self.transport(port: port, caPEM: env.pki.caCertificatePEM)) { client in
            var r = Proto_NotificationRequest()
            r.tokens = [t]
            r.platform = 1
            r.message = "over TLS"
            let (reply, _) = try await Self.send(client, r)
            XCTAssertTrue(reply.success)
        }
        try await waitUntil("delivered") { env.apns.requests(for: t).count == 1 }
        await group.triggerGracefulShutdown()
        try await running.value
    }

    static func healthOutcome(port: Int, caPEM: String?) async -> String {
        do {
            var options = CallOptions.defaults
            options.timeout = .seconds(5)
            return try await withGRPCClient(transport: try transport(port: port, caPEM: caPEM)) { client in
                let status = try await Proto_Health.Client(wrapping: client).check(Proto_HealthCheckRequest(), options: options).status
                return status == .serving ? "SERVING" : "\(status)"
            }
        } catch {
            return "error: \(error)"
        }
    }

    /// Run as `pushgate serve` runs it (`[app, gateway.drainSignal]`): from the shutdown signal on,
    /// health is NOT_SERVING and Send UNAVAILABLE, while an HTTP request in sync mode still finishes
    /// and the workers drain what was accepted.
    func testNotServingFromShutdownWhileHTTPAndQueueDrain() async throws {
        // A slow APNs keeps an HTTP sync request in flight and the workers draining after shutdown starts.
        let env = try await TestEnvironment.start(apnsDelay: .seconds(1))
        defer { Task { await env.stop() } }
        env.apns.setDefaultReply(.ok)
        let raw = try RawConfig(
            yaml: env.yaml(),
            environment: [
                "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0",
                "PUSHGATE_IOS_MAX_CONCURRENT_PUSHES": "1",
            ])
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let httpPort = NIOLockedValueBox<Int?>(nil)
        let app = try gateway.makeApplication(extraServices: [server]) { channel in
            httpPort.withLockedValue { $0 = channel.localAddress?.port }
        }
        let group = ServiceGroup(configuration: .init(services: [app, gateway.drainSignal], logger: logger))
        let running = Task { try await group.run() }
        let port = try await server.listeningPort
        try await waitUntil("HTTP listening") { httpPort.withLockedValue { $0 } != nil }
        let http = try XCTUnwrap(httpPort.withLockedValue { $0 })
        let (t, viaHTTP) = (token1, token2)
        try await withGRPCClient(transport: try Self.transport(port: port, caPEM: nil)) { client in
            let before = try await Self.health(client)
            XCTAssertEqual(before, .serving)
            var r = Proto_NotificationRequest()
            r.tokens = [t, String(repeating: "c3", count: 32)]
            r.platform = 1
            r.message = "in flight at shutdown"
            let (reply, _) = try await Self.send(client, r)
            XCTAssertTrue(reply.success)
            // An HTTP request in sync mode: answered only when its delivery is done, after the two above.
            let syncRequest = Task {
                var req = HTTPClientRequest(url: "http://127.0.0.1:\(http)/api/push")
                req.method = .POST
                req.body = .bytes(
                    ByteBuffer(string: #"{"sync":true,"notifications":[{"tokens":["\#(viaHTTP)"],"platform":1,"message":"sync"}]}"#))
                let response = try await HTTPClient.shared.execute(req, timeout: .seconds(30))
                return (Int(response.status.code), String(buffer: try await response.body.collect(upTo: 1 << 16)))
            }
            try await waitUntil("the HTTP request's delivery queued behind the two") { gateway.dispatcher.queue.pendingCount == 3 }
            await group.triggerGracefulShutdown()
            var last = Proto_HealthCheckResponse.ServingStatus.serving
            try await waitUntil("NOT_SERVING") {
                last = (try? await Self.health(client)) ?? last
                return last == .notServing
            }
            let e = await Self.sendError(client, r)
            XCTAssertEqual(e?.code, .unavailable)
            XCTAssertEqual(env.apns.requests(for: viaHTTP).count, 0, "NOT_SERVING came before the HTTP request's delivery")
            let (status, body) = try await syncRequest.value
            XCTAssertEqual(status, 200, body)
            XCTAssertEqual(body, #"{"counts":1,"logs":[],"success":"ok"}"#)
        }
        try await running.value
        // The deliveries accepted before shutdown went out while draining.
        XCTAssertEqual(env.apns.requests(for: t).count, 1)
        XCTAssertEqual(env.apns.requests(for: viaHTTP).count, 1)
    }
}

/// Bytes as they are, to send what no generated client would.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
struct RawSerializer: MessageSerializer {
    func serialize<Bytes: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Bytes { Bytes(message) }
}

@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
struct RawDeserializer: MessageDeserializer {
    func deserialize<Bytes: GRPCContiguousBytes>(_ serializedMessageBytes: Bytes) throws -> [UInt8] {
        serializedMessageBytes.withUnsafeBytes { Array($0) }
    }
}
