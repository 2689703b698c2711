import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import MatrixIngest
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore
import SwiftProtobuf
import XCTest

@testable import GatewayCore
@testable import GorushRPC

/// A corpus of requests through every way in (gorush's `/api/push`, gorush's gRPC `Send`, the
/// Matrix `/_matrix/push/v1/notify`) and what the gateway answered, kept in
/// `Tests/system/fixtures/answer-corpus.json`: each answer must stay byte for byte what it is there,
/// and each rich request's provider request (the APNs payload and headers, the FCM, HMS and HarmonyOS
/// messages, the Web Push plaintext and headers) the same JSON. The file was recorded by release
/// 83bd60d, so a change of the request model that alters any answer fails here, naming the request.
///
/// `PUSHGATE_RECORD_ANSWERS=1 swift test --filter AnswerCorpusTests` writes the file anew from the
/// build under test (only for a deliberate change of answers, said in its commit).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class AnswerCorpusTests: XCTestCase {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("system/fixtures/answer-corpus.json")

    /// One request and its answer. `request` may hold placeholders filled in when it is sent
    /// (`{sub:ID}`: a Web Push subscription whose keys the mock holds; `{rep:C:N}`: C written N times).
    struct Entry: Codable, Equatable {
        var way: String
        var name: String
        var request: String
        var answer: String
        /// What the provider received (rich requests only), as sorted-key JSON.
        var received: String?
    }

    static let apnsToken = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
    /// The rich requests' targets all carry "rich" (their provider requests are told from the
    /// asynchronous ones' retries by it).
    static let richAPNsToken = "0000000000000000000000000000000000000000000000000000000000000001"

    /// Every member a notification of 83bd60d reads, top level (some nested ones are in `nested`).
    static let members = [
        "notif_id", "tokens", "platform", "message", "title", "topic", "priority", "content_available", "mutable_content", "sound",
        "name", "volume", "data", "badge", "category", "thread-id", "url-args", "alert", "expiration", "apns_id", "collapse_id",
        "push_type", "interruption_level", "relevance-score", "content-state", "stale-date", "dismissal-date", "event", "timestamp",
        "attributes-type", "attributes", "production", "development", "retry", "image", "condition", "to", "input-push-token",
        "input-push-channel", "channels", "dry_run", "notification", "android", "apns", "webpush", "fcm_options", "subscriptions",
        "payload", "time_to_live", "urgency", "declarative", "navigate", "silent", "huawei_notification", "huawei_data",
        "huawei_collapse_key", "huawei_ttl", "bi_tag", "fast_app_target", "harmony_payload", "dedup_key", "coalesce_seconds",
        "fallback", "send_at", "delay_seconds", "deliver_between", "quiet", "analytics_label", "app_id", "app_secret",
        "Thread-ID", "TOKENS", "unknown_member",
    ]

    /// Values of the wrong type or range for most members.
    static let badValues = [#"{"a":1}"#, #""x""#, "1e19", "-1", "[1]", "true", #""""#, "2147483648", "1.5"]

    /// Nested members and shapes, each a fragment added to a valid notification.
    static let nested = [
        #""alert":{"title":1}"#, #""alert":{"loc-args":"x"}"#, #""alert":{"summary-arg-count":-1}"#, #""alert":{"unknown":1}"#,
        #""sound":{"critical":1,"name":"a","volume":2}"#, #""sound":{"critical":"x"}"#, #""sound":5"#, #""volume":1e300"#,
        #""android":{"ttl":"3.5s"}"#, #""android":{"ttl":"-1s"}"#, #""android":{"ttl":99999999}"#, #""android":{"priority":"urgent"}"#,
        #""android":{"notification":{"proxy":"allow"}}"#, #""android":{"notification":{"proxy":"sometimes"}}"#,
        #""android":{"direct_boot_ok":"yes"}"#, #""android":{"fcm_options":{"analytics_label":"bad label!"}}"#,
        #""apns":{"live_activity_token":""}"#, #""apns":{"live_activity_token":5}"#, #""webpush":{"fcm_options":{"analytics_label":"ok"}}"#,
        #""fcm_options":{"analytics_label":"a b"}"#, #""analytics_label":"ok_label-1.~%"#,
        #""analytics_label":"\#(String(repeating: "a", count: 51))""#,
        #""huawei_ttl":"86400s""#, #""huawei_ttl":"1.1234567890s""#, #""huawei_ttl":"99999999""#, #""huawei_collapse_key":101"#,
        #""fast_app_target":3"#, #""deliver_between":{"tz":"Europe/Paris","from":"08:00","to":"22:00"}"#,
        #""deliver_between":{"tz":"Mars/Base","from":"08:00","to":"22:00"}"#, #""deliver_between":{"tz":"UTC","from":"25:00","to":"22:00"}"#,
        #""deliver_between":{"tz":"UTC","from":"08:00"}"#, #""quiet":"drop""#,
        #""quiet":"drop","deliver_between":{"tz":"UTC","from":"08:00","to":"09:00"}"#,
        #""send_at":"2999-01-01T00:00:00Z""#, #""send_at":"not a date""#, #""send_at":1e300"#, #""delay_seconds":60,"send_at":5"#,
        #""coalesce_seconds":60"#, #""coalesce_seconds":60,"collapse_id":"c""#, #""coalesce_seconds":0,"collapse_id":"c""#,
        #""coalesce_seconds":60,"collapse_id":"c","delay_seconds":5"#, #""dedup_key":"""#,
        #""fallback":{"message":"short"}"#, #""fallback":{"tokens":["x"]}"#, #""fallback":{"data":{"aps":1}}"#, #""fallback":5"#,
        #""fallback":{"fallback":{}}"#, #""data":{"aps":{"alert":"x"}}"#, #""data":{"from":"x"}"#, #""data":{"message_type":"x"}"#,
        #""data":{"google.x":"x"}"#, #""data":{"gcm.x":"x"}"#, #""data":{"collapse_key":"x"}"#, #""data":{"notification":"x"}"#,
        #""subscriptions":[{"endpoint":5}]"#, #""subscriptions":[{"endpoint":"https://x.example/p","keys":{"p256dh":"a"}}]"#,
        #""subscriptions":[{}]"#, #""channels":["Y2hhbm5lbA=="]"#, #""push_type":"liveactivity","channels":["Y2hhbm5lbA=="]"#,
        #""input-push-token":2"#, #""input-push-token":1"#, #""message":"{rep:m:5000}""#,
        #""title":"{rep:t:300000}""#, #""tokens":["{rep:a:4097}"]"#,
        #""topic":"/topics/news","to":"legacy-token""#, #""condition":"'a' in topics""#, #""time_to_live":2419201"#,
        #""time_to_live":2419200"#, #""expiration":17179869184"#, #""expiration":60"#, #""priority":"high""#, #""priority":"normal""#,
        #""push_type":"voip""#, #""push_type":"bogus""#, #""push_type":"background","content_available":true"#,
        #""interruption_level":"critical""#, #""interruption_level":"loud""#, #""relevance-score":2"#, #""urgency":"bogus""#,
        #""urgency":"very-low""#, #""declarative":true,"navigate":"https://example.com/x""#, #""declarative":true,"navigate":"ftp://x""#,
        #""navigate":"/relative""#, #""payload":"raw text""#, #""harmony_payload":{"notification":{"category":"IM"}}"#,
        #""harmony_payload":[1]"#, #""huawei_data":"{\"k\":1}""#, #""huawei_notification":{"title":"x"}"#, #""bi_tag":"b""#,
        #""platform":0"#, #""platform":7"#, #""platform":"hms""#, #""platform":"HarmonyOS""#, #""platform":1.5"#, #""platform":null"#,
    ]

    /// A valid notification of each platform, without its closing brace.
    static func base(_ platform: Int) -> String {
        switch platform {
        case 1: return #"{"platform":1,"tokens":["\#(apnsToken)"],"topic":"com.example.app","message":"hi""#
        case 2: return #"{"platform":2,"tokens":["corpus-android"],"message":"hi""#
        case 3: return #"{"platform":3,"tokens":["corpus-hms"],"message":"hi""#
        case 4: return #"{"platform":4,"subscriptions":[{sub:corpus-web}],"message":"hi""#
        case 5: return #"{"platform":5,"subscriptions":[{sub:corpus-up}],"message":"hi""#
        default: return #"{"platform":6,"tokens":["corpus-harmony"],"message":"hi""#
        }
    }

    /// Whole bodies: request-level members and shapes.
    static let bodies = [
        "", "[]", "null", #"{}"#, #"{"notifications":null}"#, #"{"notifications":{}}"#, #"{"notifications":[]}"#,
        #"{"notifications":[null]}"#, #"{"notifications":[5]}"#, #"{"notifications":[{}]}"#, #"{"notifications":[{"platform":1}]}"#,
        #"{"notifications":[{"platform":1,"tokens":[]}]}"#, #"{"notifications":[{"platform":2,"message":"x"}]}"#,
        #"{"notifications":[{"platform":1,"tokens":["\#(apnsToken)"],"message":"x"}],"sync":"yes"}"#,
        #"{"notifications":[{"platform":1,"tokens":["\#(apnsToken)"],"message":"x"}],"app_id":"no such app"}"#,
        #"{"notifications":[{"platform":2,"tokens":["a","b"],"message":"x"},{"platform":0},{"platform":3,"tokens":["c"],"message":"y"}]}"#,
        #"{"notifications":[{"platform":2,"tokens":["a"],"message":"x"}],"notifications":[]}"#,
        #"{"notifications":[{"platform":2,"tokens":["a"],"message":"x\ud800"}]}"#,
        #"{"notifications":[{"platform":2,"tokens":["a"],"message":"x"}]} trailing"#,
        #"{"notifications":[{"platform":2,"tokens":["a"],"message":"x",}]}"#,
    ]

    /// Requests sent with `"sync":true` whose provider requests are recorded: each platform's
    /// members as a sender uses them.
    static let rich: [(name: String, body: String)] = [
        (
            "ios alert, every alert member",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","title":"T","message":"M","badge":3,"sound":"ping.caf","category":"C","thread-id":"th","url-args":["a","b"],"alert":{"subtitle":"S","action-loc-key":"A","launch-image":"L","loc-args":["x"],"loc-key":"K","title-loc-args":["y"],"title-loc-key":"TK","summary-arg":"sa","summary-arg-count":2},"mutable_content":true,"interruption_level":"time-sensitive","relevance-score":0.5,"data":{"k":"v","n":1},"apns_id":"123e4567-e89b-12d3-a456-426614174000","collapse_id":"col","expiration":4102444800,"priority":"normal","image":"https://example.com/i.png"}"#
        ),
        (
            "ios critical sound",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","message":"M","name":"alarm.caf","volume":0.7}"#
        ),
        (
            "ios sound object",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","message":"M","sound":{"critical":1,"name":"a.caf","volume":0.5}}"#
        ),
        (
            "ios background",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","content_available":true,"data":{"sync":"now"}}"#
        ),
        ("ios voip", #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","push_type":"voip","data":{"call":"1"}}"#),
        (
            "ios liveactivity update",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","push_type":"liveactivity","event":"update","timestamp":1700000000,"content-state":{"score":"1-0"},"stale-date":1700003600,"dismissal-date":1700007200,"relevance-score":10}"#
        ),
        (
            "ios liveactivity start",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","push_type":"liveactivity","event":"start","timestamp":1700000000,"content-state":{"s":1},"attributes-type":"Match","attributes":{"team":"A"},"input-push-token":1,"title":"T","message":"M"}"#
        ),
        ("ios development", #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","message":"M","development":true}"#),
        (
            "ios too large with fallback",
            #"{"platform":1,"tokens":["\#(richAPNsToken)"],"topic":"com.example.app","message":"{rep:x:5000}","fallback":{"message":"short","data":{"big":false}}}"#
        ),
        (
            "android notification",
            #"{"platform":2,"tokens":["rich-android"],"title":"T","message":"M","image":"https://example.com/i.png","sound":"s","badge":2,"priority":"high","collapse_id":"c","time_to_live":600,"data":{"a":"1","b":2,"c":{"d":true}},"content_available":true,"mutable_content":true,"category":"cat","analytics_label":"lbl"}"#
        ),
        ("android data only", #"{"platform":2,"tokens":["rich-android"],"data":{"sync":"now"},"priority":"high"}"#),
        (
            "android pass-through objects",
            #"{"platform":2,"tokens":["rich-android"],"notification":{"title":"NT","body":"NB"},"android":{"ttl":"3.5s","priority":"high","direct_boot_ok":true,"notification":{"channel_id":"ch","proxy":"allow"}},"apns":{"headers":{"apns-priority":"5"},"payload":{"aps":{"badge":1}}},"webpush":{"headers":{"Urgency":"high"}},"fcm_options":{"analytics_label":"x"}}"#
        ),
        ("android topic", #"{"platform":2,"topic":"/topics/rich-news","message":"M"}"#),
        ("android condition", #"{"platform":2,"condition":"'rich-a' in topics || 'rich-b' in topics","message":"M"}"#),
        ("android legacy to", #"{"platform":2,"to":"rich-android-to","message":"M","dry_run":true}"#),
        (
            "huawei every member",
            #"{"platform":3,"tokens":["rich-hms"],"title":"T","message":"M","image":"https://example.com/i.png","sound":"s","badge":1,"priority":"high","category":"IM","data":{"k":"v"},"huawei_notification":{"title":"HT","body":"HB","click_action":{"type":3}},"huawei_data":"{\"raw\":1}","huawei_collapse_key":5,"huawei_ttl":"86400s","bi_tag":"bt","fast_app_target":1,"time_to_live":60}"#
        ),
        ("huawei data only", #"{"platform":3,"tokens":["rich-hms"],"huawei_data":"{\"x\":1}"}"#),
        ("huawei topic", #"{"platform":3,"topic":"rich-news","message":"M"}"#),
        (
            "webpush plain",
            #"{"platform":4,"subscriptions":[{sub:rich-web}],"title":"T","message":"M","data":{"url":"https://example.com"},"urgency":"high","time_to_live":60,"topic":"upd"}"#
        ),
        ("webpush payload", #"{"platform":4,"subscriptions":[{sub:rich-web}],"payload":"raw text","urgency":"low"}"#),
        (
            "webpush declarative",
            #"{"platform":4,"subscriptions":[{sub:rich-web}],"title":"T","message":"M","declarative":true,"navigate":"https://example.com/open","silent":true,"badge":4,"image":"https://example.com/i.png"}"#
        ),
        ("unifiedpush", #"{"platform":5,"subscriptions":[{sub:rich-up}],"message":"M","data":{"k":"v"},"priority":"high"}"#),
        ("harmony alert", #"{"platform":6,"tokens":["rich-harmony"],"title":"T","message":"M","badge":2,"data":{"k":"v"},"category":"IM"}"#),
        ("harmony background", #"{"platform":6,"tokens":["rich-harmony"],"push_type":"background","data":{"k":"v"}}"#),
        (
            "harmony payload", #"{"platform":6,"tokens":["rich-harmony"],"push_type":"voip","harmony_payload":{"extraData":"{\"call\":1}"}}"#
        ),
    ]

    /// Matrix notify bodies (`/_matrix/push/v1/notify`).
    static let matrixBodies = [
        "", "{}", #"{"notification":{}}"#, #"{"notification":{"devices":[]}}"#, #"{"notification":{"devices":5}}"#,
        #"{"notification":{"event_id":"$e","room_id":"!r:x","type":"m.room.message","sender":"@a:x","sender_display_name":"Alice","content":{"msgtype":"m.text","body":"hello"},"counts":{"unread":2,"missed_calls":1},"prio":"high","devices":[{"app_id":"com.example.ios","pushkey":"q80B","pushkey_ts":1,"data":{"default_payload":{"aps":{"mutable-content":1}}}},{"app_id":"com.example.android","pushkey":"corpus-mx","data":{"format":"event_id_only"}},{"app_id":"org.unknown","pushkey":"x"}]}}"#,
        #"{"notification":{"event_id":"$e2","room_id":"!r:x","counts":{"unread":0},"devices":[{"app_id":"com.example.ios","pushkey":"not base64!"}]}}"#,
        #"{"notification":{"event_id":"$e3","devices":[{"app_id":"com.example.android","pushkey":""}]}}"#,
        #"{"notification":{"event_id":5,"devices":[{"app_id":"com.example.android","pushkey":"k"}]}}"#,
        #"{"notification":{"counts":{"unread":-1},"devices":[{"app_id":"com.example.android","pushkey":"k2"}]}}"#,
        #"{"notification":{"counts":{"unread":1e19},"devices":[{"app_id":"com.example.android","pushkey":"k3"}]}}"#,
    ]

    /// gRPC requests, as protobuf JSON.
    static let rpcRequests = [
        #"{}"#, #"{"platform":1}"#, #"{"platform":1,"tokens":["\#(apnsToken)"],"message":"m","topic":"com.example.app"}"#,
        #"{"platform":1,"tokens":["\#(apnsToken)"],"message":"m","topic":"com.example.app","badge":-5,"sound":"s","threadID":"t","category":"c","contentAvailable":true,"mutableContent":true,"pushType":"alert","development":true,"alert":{"title":"T","body":"B","subtitle":"S","locArgs":["a"]},"ID":"id-1","priority":"HIGH","data":{"k":"v","n":1}}"#,
        #"{"platform":1,"tokens":["\#(apnsToken)"],"message":"m","pushType":"bogus"}"#,
        #"{"platform":2,"tokens":["corpus-rpc"],"message":"m","title":"t","image":"https://example.com/i.png","fcmOptions":{"analyticsLabel":"ok"}}"#,
        #"{"platform":2,"tokens":["corpus-rpc"],"message":"m","fcmOptions":{"analyticsLabel":"bad label"}}"#,
        #"{"platform":2,"topic":"news","message":"m"}"#, #"{"platform":3,"tokens":["corpus-rpc"],"message":"m","priority":"HIGH"}"#,
        #"{"platform":3,"topic":"news","message":"m"}"#, #"{"platform":4,"tokens":["https://x.example/p"],"message":"m"}"#,
        #"{"platform":6,"tokens":["corpus-rpc"],"message":"m"}"#, #"{"platform":9,"tokens":["x"],"message":"m"}"#,
        #"{"platform":2,"tokens":["{rep:a:4097}"],"message":"m"}"#,
    ]

    /// The gorush bodies of the corpus, in order, with their names.
    static func httpCases() -> [(name: String, body: String)] {
        var out: [(String, String)] = bodies.enumerated().map { ("body \($0.offset)", $0.element) }
        for p in 1...6 {
            for m in members {
                for (k, v) in badValues.enumerated() {
                    out.append(("p\(p) \(m) #\(k)", #"{"notifications":[\#(base(p)),"\#(m)":\#(v)}]}"#))
                }
            }
            for (k, fragment) in nested.enumerated() {
                out.append(("p\(p) nested #\(k)", #"{"notifications":[\#(base(p)),\#(fragment)}]}"#))
            }
        }
        return out
    }

    func testAnswersAreThoseOfTheRecordedRelease() async throws {
        let recording = ProcessInfo.processInfo.environment["PUSHGATE_RECORD_ANSWERS"] == "1"
        let expected: [Entry]
        if recording {
            expected = []
        } else {
            let data = try Data(contentsOf: Self.fixture)
            expected = try JSONDecoder().decode([Entry].self, from: data)
        }
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let hmsSnippet = try XCTUnwrap(env.stack.mock(RunningMockHMS.self)).configSnippet
        let extra = hmsSnippet + MatrixNotifyTests.matrixYAML
        var made: [String: WebPushSubscription] = [:]
        for id in ["corpus-web", "corpus-up", "rich-web", "rich-up"] { made[id] = env.webpush.makeSubscription(id: id).0 }
        let subs = made
        @Sendable func fill(_ request: String) -> String {
            var s = request
            for (id, sub) in subs {
                let keys = sub.keys.map { #","keys":{"p256dh":"\#($0.p256dh)","auth":"\#($0.auth)"}"# } ?? ""
                s = s.replacingOccurrences(of: "{sub:\(id)}", with: #"{"endpoint":"\#(sub.endpoint)"\#(keys)}"#)
            }
            return Self.expand(s)
        }
        let recorded = NIOLockedValueBox<[Entry]>([])
        let raw = try RawConfig(
            yaml: env.merge(env.yaml(), extra),
            environment: ["PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0"])
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let app = try gateway.makeApplication(extraServices: [server])
        try await app.test(.live) { client in
            // gorush's /api/push, asynchronous: the answer only.
            for (name, body) in Self.httpCases() {
                let (status, answer) = try await Self.post(client, "/api/push", fill(body))
                recorded.withLockedValue { $0.append(Entry(way: "http", name: name, request: body, answer: "\(status) \(answer)")) }
            }
            // Rich requests, synchronous: the answer and what the provider received.
            for (k, (name, notification)) in Self.rich.enumerated() {
                let body = #"{"notifications":[\#(notification.dropLast()),"notif_id":"rich-\#(k)"}],"sync":true}"#
                let before = Self.receivedCount(env)
                let (status, answer) = try await Self.post(client, "/api/push", fill(body))
                let received = Self.received(env, after: before)
                recorded.withLockedValue {
                    $0.append(Entry(way: "http-sync", name: name, request: body, answer: "\(status) \(answer)", received: received))
                }
            }
            // The Matrix Push Gateway API.
            let settings = try MatrixSettings(raw: gateway.raw)
            let matrix = Application(router: MatrixServer.makeRouter(gateway: gateway, settings: settings))
            try await matrix.test(.live) { mx in
                for (k, body) in Self.matrixBodies.enumerated() {
                    let (status, answer) = try await Self.post(mx, "/_matrix/push/v1/notify", body)
                    recorded.withLockedValue { $0.append(Entry(way: "matrix", name: "matrix #\(k)", request: body, answer: "\(status) \(answer)")) }
                }
            }
            // gorush's gRPC Send.
            do {
                let port = try await server.listeningPort
                try await withGRPCClient(transport: try GorushRPCTests.transport(port: port, caPEM: nil)) { rpc in
                    _ = try await GorushRPCTests.health(rpc)
                    for (k, json) in Self.rpcRequests.enumerated() {
                        let request = try Proto_NotificationRequest(jsonString: Self.expand(json))
                        let answer: String
                        do {
                            let (reply, _) = try await GorushRPCTests.send(rpc, request)
                            answer = "ok success=\(reply.success) counts=\(reply.counts)"
                        } catch let e as RPCError {
                            answer = "\(e.code) \(e.message)"
                        }
                        recorded.withLockedValue { $0.append(Entry(way: "grpc", name: "grpc #\(k)", request: json, answer: answer)) }
                    }
                }
            }
        }
        let got = recorded.withLockedValue { $0 }
        if recording {
            // One entry a line: a change of answers reads as a diff of lines.
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let lines = try got.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
            try ("[\n" + lines.joined(separator: ",\n") + "\n]\n").write(to: Self.fixture, atomically: true, encoding: .utf8)
            print("recorded \(got.count) answers to \(Self.fixture.path)")
            return
        }
        XCTAssertEqual(got.count, expected.count, "the corpus has \(expected.count) requests")
        var differences = 0
        for (g, e) in zip(got, expected) where g != e {
            differences += 1
            if differences <= 40 {
                XCTFail(
                    "\(e.way) \(e.name): \(e.request.prefix(300))\n  was:  \(e.answer.prefix(400))\n  now:  \(g.answer.prefix(400))"
                        + (g.received == e.received ? "" : "\n  received was: \(e.received ?? "-")\n  received now: \(g.received ?? "-")"))
            }
        }
        XCTAssertEqual(differences, 0, "answers that differ from the recorded release's")
    }

    /// `{rep:C:N}` written out: C repeated N times.
    static func expand(_ s: String) -> String {
        var out = s
        while let open = out.range(of: "{rep:") {
            guard let close = out[open.upperBound...].firstIndex(of: "}") else { break }
            let parts = out[open.upperBound..<close].split(separator: ":")
            guard parts.count == 2, let n = Int(parts[1]) else { break }
            out.replaceSubrange(open.lowerBound...close, with: String(repeating: String(parts[0]), count: n))
        }
        return out
    }

    static func post(_ client: some TestClientProtocol, _ uri: String, _ body: String) async throws -> (Int, String) {
        try await client.execute(uri: uri, method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: body)) { r in
            (Int(r.status.code), String(buffer: r.body))
        }
    }

    struct Counts {
        var apns = 0, fcm = 0, hms = 0, harmony = 0, webpush = 0
    }

    static func receivedCount(_ env: TestEnvironment) -> Counts {
        Counts(
            apns: env.apns.requests.count, fcm: env.fcm.messages.count, hms: env.hms.messages.count, harmony: env.hms.v3Messages.count,
            webpush: env.webpush.pushes.count)
    }

    /// What the providers received since `before`, as sorted-key JSON (nil: nothing).
    static func received(_ env: TestEnvironment, after before: Counts) -> String? {
        var out: [[String: Any]] = []
        for r in env.apns.requests.dropFirst(before.apns) where r.token == richAPNsToken {
            var headers: [String: String] = [:]
            for (k, v) in r.headers where k.lowercased().hasPrefix("apns-") && k.lowercased() != "apns-id" { headers[k.lowercased()] = v }
            if let id = r.apnsID, id == "123e4567-e89b-12d3-a456-426614174000" { headers["apns-id"] = id }
            out.append(["apns": ["token": r.token, "headers": headers, "payload": json(r.body)]])
        }
        for m in env.fcm.messages.dropFirst(before.fcm) where m.target.contains("rich") {
            out.append(["fcm": ["validate_only": m.validateOnly, "message": json(Array(m.messageJSON.utf8))]])
        }
        for m in env.hms.messages.dropFirst(before.hms) where String(decoding: m.body, as: UTF8.self).contains("rich") {
            out.append(["hms": json(m.body)])
        }
        for m in env.hms.v3Messages.dropFirst(before.harmony) where String(decoding: m.body, as: UTF8.self).contains("rich") {
            out.append(["harmony": ["payload": json(Array(m.payloadJSON.utf8)), "pushOptions": json(Array(m.pushOptionsJSON.utf8))]])
        }
        for p in env.webpush.pushes.dropFirst(before.webpush) where p.subscriptionID.hasPrefix("rich") {
            out.append([
                "webpush": [
                    "plaintext": p.plaintextString, "ttl": p.ttl.map { "\($0)" } ?? "-", "urgency": p.urgency ?? "-", "topic": p.topic ?? "-",
                    "encrypted": p.encrypted,
                ]
            ])
        }
        guard !out.isEmpty else { return nil }
        let data = (try? JSONSerialization.data(withJSONObject: out, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    static func json(_ bytes: [UInt8]) -> Any {
        (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) ?? String(decoding: bytes, as: UTF8.self)
    }
}
