import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Several apps per gateway, each with its own keys and providers; fairness; reload; durability.
final class MultiAppTests: XCTestCase {
    static let adminKey = "admin-key-0123456789abcdef"
    static let defaultKey = "default-key-0123456789abcdef"
    static let chatKey = "chat-key-0123456789abcdef"
    static let walletKey = "wallet-key-0123456789abcdef"
    static var chatDigest: String { SHA256.hash(data: Array(chatKey.utf8)).map { String(format: "%02x", $0) }.joined() }
    static let keys = ["PUSHGATE_CORE_ADMIN_KEYS": adminKey, "PUSHGATE_CORE_API_KEYS": defaultKey]

    static func token(_ i: Int) -> String { String(format: "%064x", i) }

    /// `apps:` with chat (sha256: key, its own .p8) and wallet (plain key, its own .p8), both on the mock APNs.
    static func appsYAML(_ env: TestEnvironment, chat: String = "", wallet: String? = "", extraIOS: String = "") -> String {
        func ios(_ name: String, _ key: TestAPNsKey) -> String {
            "    ios: { key_path: \"\(env.directory)/\(name).p8\", key_id: \"\(key.keyID)\", team_id: \"\(key.teamID)\", "
                + "topic: com.example.\(name), endpoint: \"\(env.apns.baseURL)\"\(extraIOS) }\n"
        }
        var s = "apps:\n  - id: chat\n    api_keys: [\"sha256:\(chatDigest)\"]\n" + ios("chat", env.chatKey)
        if !chat.isEmpty { s += "    \(chat)\n" }
        if let wallet {
            s += "  - id: wallet\n    api_keys: [\"\(walletKey)\"]\n" + ios("wallet", env.walletKey)
            if !wallet.isEmpty { s += "    \(wallet)\n" }
        }
        return s
    }

    static func push(_ tokens: [Int], id: String? = nil, app: String? = nil) -> ByteBuffer {
        let list = tokens.map { "\"\(token($0))\"" }.joined(separator: ",")
        let appField = app.map { #""app_id":"\#($0)","# } ?? ""
        let idField = id.map { #""notif_id":"\#($0)","# } ?? ""
        return ByteBuffer(string: #"{\#(appField)"notifications":[{\#(idField)"tokens":[\#(list)],"platform":1,"message":"hi"}]}"#)
    }

    /// The value of the series whose line starts with `series` (its name, labels and a space); 0 when absent.
    static func value(of series: String, in metrics: String) -> Double {
        for line in metrics.split(separator: "\n") where line.hasPrefix(series) {
            return Double(line.dropFirst(series.count).trimmingCharacters(in: .whitespaces)) ?? -1
        }
        return 0
    }

    static func call(
        _ client: any TestClientProtocol, _ uri: String, _ method: HTTPRequest.Method = .get, key: String? = nil, body: ByteBuffer? = nil
    ) async throws -> (status: Int, body: String, headers: HTTPFields) {
        var h: HTTPFields = [.contentType: "application/json"]
        if let key { h[.authorization] = "Bearer \(key)" }
        return try await client.execute(uri: uri, method: method, headers: h, body: body) { r in
            (Int(r.status.code), String(buffer: r.body), r.headers)
        }
    }

    /// APNs broadcast channels are per app: an app's key manages its own app's channels (with its APNs
    /// key, under its bundle id), the admin key any app's.
    func testEachAppManagesItsOwnBroadcastChannels() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let yaml = Self.appsYAML(env, extraIOS: ", channels_endpoint: \"\(env.apns.channelsBaseURL)\"")
        try await env.withGateway(yaml, environment: Self.keys) { client, _ in
            let create = ByteBuffer(string: #"{"message_storage_policy":0}"#)
            let none = try await Self.call(client, "/api/apns/channels", .post, body: create)
            XCTAssertEqual(none.status, 401)
            let chat = try await Self.call(client, "/api/apns/channels", .post, key: Self.chatKey, body: create)
            XCTAssertEqual(chat.status, 201, chat.body)
            let chatID = try XCTUnwrap(jsonObject(chat.body)["channel_id"] as? String)
            XCTAssertEqual(env.apns.channels(of: "com.example.chat"), [chatID: 0])
            XCTAssertEqual(env.apns.channelRequests.last?.providerKeyID, "MOCKAPP001")
            let cross = try await Self.call(
                client, "/api/apns/channels", .post, key: Self.chatKey, body: ByteBuffer(string: #"{"message_storage_policy":0,"app_id":"wallet"}"#))
            XCTAssertEqual(cross.status, 403, cross.body)
            let admin = try await Self.call(
                client, "/api/apns/channels", .post, key: Self.adminKey, body: ByteBuffer(string: #"{"message_storage_policy":1,"app_id":"wallet"}"#))
            XCTAssertEqual(admin.status, 201, admin.body)
            let walletID = try XCTUnwrap(jsonObject(admin.body)["channel_id"] as? String)
            XCTAssertEqual(env.apns.channels(of: "com.example.wallet"), [walletID: 1])
            XCTAssertEqual(env.apns.channelRequests.last?.providerKeyID, "MOCKAPP002")
            let chatList = try await Self.call(client, "/api/apns/channels", key: Self.chatKey)
            XCTAssertEqual(jsonObject(chatList.body)["channels"] as? [String], [chatID], chatList.body)
            let walletList = try await Self.call(client, "/api/apns/channels?app_id=wallet", key: Self.walletKey)
            XCTAssertEqual(jsonObject(walletList.body)["channels"] as? [String], [walletID], walletList.body)
            let crossList = try await Self.call(client, "/api/apns/channels?app_id=wallet", key: Self.chatKey)
            XCTAssertEqual(crossList.status, 403, crossList.body)
            // Nor another bundle id through `topic` (the APNs key may serve every app of the team):
            // chat's key reaches com.example.chat only, under either spelling of its topic.
            let before = env.apns.channels(of: "com.example.wallet")
            let walletSegment = walletID.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            for (method, uri, body) in [
                (HTTPRequest.Method.post, "/api/apns/channels", #"{"message_storage_policy":0,"topic":"com.example.wallet"}"#),
                (.get, "/api/apns/channels?topic=com.example.wallet", ""),
                (.delete, "/api/apns/channels/\(walletSegment)?topic=com.example.wallet", ""),
                (.get, "/api/apns/channels/\(walletSegment)?topic=com.example.wallet", ""),
            ] {
                let r = try await Self.call(client, uri, method, key: Self.chatKey, body: body.isEmpty ? nil : ByteBuffer(string: body))
                XCTAssertEqual(r.status, 403, "\(method) \(uri): \(r.body)")
                XCTAssertTrue(r.body.contains("topic"), r.body)
            }
            XCTAssertEqual(env.apns.channels(of: "com.example.wallet"), before, "nothing made or deleted under wallet's bundle id")
            let ownTopic = try await Self.call(client, "/api/apns/channels?topic=com.example.chat.push-type.liveactivity", key: Self.chatKey)
            XCTAssertEqual(ownTopic.status, 200, ownTopic.body)
            let adminTopic = try await Self.call(client, "/api/apns/channels?app_id=wallet&topic=com.example.wallet", key: Self.adminKey)
            XCTAssertEqual(adminTopic.status, 200, adminTopic.body)
        }
    }

    func testEachAppSendsWithItsOwnCredentialsAndSeesOnlyItsOwnStatus() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway(Self.appsYAML(env), environment: Self.keys) { client, _ in
            // swift-metrics counters are the process's: other tests of this process may have counted
            // deliveries of an app named chat before.
            let chatSeries = #"pushgate_push_success_total{app="chat",provider="ios"} "#
            let chatBefore = Self.value(of: chatSeries, in: try await Self.call(client, "/metrics").body)
            // No key: 401, nothing sent.
            let none = try await Self.call(client, "/api/push", .post, body: Self.push([1]))
            XCTAssertEqual(none.status, 401)
            // chat's key (configured as sha256:) sends with chat's APNs key and topic; wallet's with wallet's.
            let chat = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([1], id: "c1"))
            XCTAssertEqual(chat.status, 200, chat.body)
            let wallet = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([2], id: "w1"))
            XCTAssertEqual(wallet.status, 200, wallet.body)
            let sent = await eventually { env.apns.requests(for: Self.token(1)).count == 1 && env.apns.requests(for: Self.token(2)).count == 1 }
            XCTAssertTrue(sent)
            let c = try XCTUnwrap(env.apns.requests(for: Self.token(1)).first)
            XCTAssertEqual(c.providerKeyID, "MOCKAPP001")
            XCTAssertEqual(c.topic, "com.example.chat")
            XCTAssertEqual(c.status, 200)
            let w = try XCTUnwrap(env.apns.requests(for: Self.token(2)).first)
            XCTAssertEqual(w.providerKeyID, "MOCKAPP002")
            XCTAssertEqual(w.topic, "com.example.wallet")
            // The default app's key: the top-level sections.
            let d = try await Self.call(client, "/api/push", .post, key: Self.defaultKey, body: Self.push([3]))
            XCTAssertEqual(d.status, 200)
            let sentDefault = await eventually { env.apns.requests(for: Self.token(3)).count == 1 }
            XCTAssertTrue(sentDefault)
            XCTAssertEqual(env.apns.requests(for: Self.token(3)).first?.providerKeyID, env.apnsKey.keyID)

            // chat's key naming wallet: 403, nothing sent. The admin key may name any app; an unknown one is 400.
            let cross = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([4], app: "wallet"))
            XCTAssertEqual(cross.status, 403)
            XCTAssertTrue(cross.body.contains("app_id"), cross.body)
            let own = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([5], app: "chat"))
            XCTAssertEqual(own.status, 200)
            let admin = try await Self.call(client, "/api/push", .post, key: Self.adminKey, body: Self.push([6], app: "wallet"))
            XCTAssertEqual(admin.status, 200)
            let unknown = try await Self.call(client, "/api/push", .post, key: Self.adminKey, body: Self.push([7], app: "nope"))
            XCTAssertEqual(unknown.status, 400)
            XCTAssertTrue(unknown.body.contains("app_id"), unknown.body)
            let bad = try await Self.call(client, "/api/push", .post, key: Self.adminKey, body: Self.push([7], app: "no/such app"))
            XCTAssertEqual(bad.status, 400)
            let sentAll = await eventually { env.apns.requests(for: Self.token(5)).count == 1 && env.apns.requests(for: Self.token(6)).count == 1 }
            XCTAssertTrue(sentAll)
            XCTAssertEqual(env.apns.requests(for: Self.token(5)).first?.providerKeyID, "MOCKAPP001")
            XCTAssertEqual(env.apns.requests(for: Self.token(6)).first?.providerKeyID, "MOCKAPP002")
            XCTAssertTrue(env.apns.requests(for: Self.token(4)).isEmpty)

            // Status: chat's key cannot read wallet's notification (answered exactly as an unknown id,
            // so its existence is not told); wallet's and the admin key can.
            let delivered = await eventually {
                let s = try? await Self.call(client, "/api/push/w1", key: Self.walletKey)
                return s?.body.contains(#""delivered":1"#) == true
            }
            XCTAssertTrue(delivered)
            let denied = try await Self.call(client, "/api/push/w1", key: Self.chatKey)
            let unknownID = try await Self.call(client, "/api/push/w2", key: Self.chatKey)
            XCTAssertEqual(denied.status, 404)
            XCTAssertEqual(denied.body.replacingOccurrences(of: "w1", with: "w2"), unknownID.body)
            XCTAssertFalse(denied.body.contains(#""deliveries":"#), denied.body)
            let adminStatus = try await Self.call(client, "/api/push/w1", key: Self.adminKey)
            XCTAssertEqual(adminStatus.status, 200)
            XCTAssertTrue(adminStatus.body.contains(#""app":"wallet""#), adminStatus.body)

            // /api/config: admin only, no secret; the apps are listed.
            let config403 = try await Self.call(client, "/api/config", key: Self.chatKey)
            XCTAssertEqual(config403.status, 403)
            let config = try await Self.call(client, "/api/config", key: Self.adminKey)
            XCTAssertEqual(config.status, 200)
            XCTAssertTrue(config.body.contains("wallet"), config.body)
            for secret in [Self.chatKey, Self.chatDigest, Self.walletKey, Self.adminKey, Self.defaultKey, "chat.p8", "wallet.p8"] {
                XCTAssertFalse(config.body.contains(secret), "\(secret) in \(config.body)")
            }
            // Stats and metrics per app.
            let stat = jsonObject(try await Self.call(client, "/api/stat/app", key: Self.adminKey).body)
            let apps = try XCTUnwrap(stat["apps"] as? [String: Any])
            XCTAssertEqual(((apps["chat"] as? [String: Any])?["ios"] as? [String: Any])?["push_success"] as? Int, 2)
            XCTAssertEqual(((apps["wallet"] as? [String: Any])?["ios"] as? [String: Any])?["push_success"] as? Int, 2)
            XCTAssertEqual(((apps["default"] as? [String: Any])?["ios"] as? [String: Any])?["push_success"] as? Int, 1)
            XCTAssertEqual((stat["ios"] as? [String: Any])?["push_success"] as? Int, 5, "gorush's totals stay")
            let metrics = try await Self.call(client, "/metrics").body
            XCTAssertEqual(Self.value(of: chatSeries, in: metrics), chatBefore + 2, metrics)
            XCTAssertTrue(metrics.contains(#"pushgate_app_pending{app="wallet"} 0"#), metrics)
            XCTAssertTrue(metrics.contains("gorush_ios_success 5"), metrics)
        }
    }

    func testOneAppFillingItsShareLeavesTheOthersServedAndRateLimitAnswers429() async throws {
        // Held answers keep chat's deliveries pending while it floods.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        let yaml = Self.appsYAML(env, chat: "max_pending: 4", wallet: "rate_limit: 5")
        // The rate limits' clock stands still: wallet's bucket refills only when the test says.
        let now = NIOLockedValueBox(1_800_000_000.0)
        try await env.withGateway(yaml, environment: Self.keys, clock: { now.withLockedValue { $0 } }) { client, gateway in
            let first = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([1, 2, 3]))
            XCTAssertEqual(first.status, 200)
            let full = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([4, 5]))
            XCTAssertEqual(full.status, 503, full.body)
            XCTAssertNotNil(full.headers[.retryAfter])
            XCTAssertTrue(full.body.contains("chat"), full.body)
            let fits = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([6]))
            XCTAssertEqual(fits.status, 200, "one more fits the share of 4")
            // Another app is still accepted while chat is full.
            let other = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([7, 8, 9]))
            XCTAssertEqual(other.status, 200, other.body)
            let defaultApp = try await Self.call(client, "/api/push", .post, key: Self.defaultKey, body: Self.push([10]))
            XCTAssertEqual(defaultApp.status, 200)
            // wallet: 5 deliveries per second; 3 taken, 3 more is over: 429 with Retry-After.
            let limited = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([11, 12, 13]))
            XCTAssertEqual(limited.status, 429, limited.body)
            XCTAssertEqual(limited.headers[.retryAfter], "1")
            XCTAssertTrue(limited.body.contains("rate_limit"), limited.body)
            // After the deliveries finish, chat's share is free again.
            hold.release()
            let drained = await eventually(timeout: 20) { gateway.dispatcher.queue.pendingCount == 0 }
            XCTAssertTrue(drained)
            XCTAssertEqual(gateway.dispatcher.pendingCount(app: "chat"), 0)
            XCTAssertEqual(env.apns.requests.filter { $0.status == 200 }.count, 8)
            // A second later on the rate limits' clock, wallet's bucket holds 5 again.
            now.withLockedValue { $0 += 1 }
            let refilled = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([11, 12, 13]))
            XCTAssertEqual(refilled.status, 200, refilled.body)
            let again = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([14, 15, 16, 17]))
            XCTAssertEqual(again.status, 200, again.body)
            // A request larger than the whole share is taken when the app has nothing pending.
            let drained2 = await eventually(timeout: 20) { gateway.dispatcher.pendingCount(app: "chat") == 0 }
            XCTAssertTrue(drained2)
            let big = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push(Array(20..<26)))
            XCTAssertEqual(big.status, 200, big.body)
        }
    }

    /// `POST /api/reload` (what SIGHUP does): an app added works at once, a bad file changes nothing,
    /// an app removed loses its key.
    func testReloadAddsAndRemovesAppsAndKeepsTheRunningConfigOnABadFile() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let path = env.directory + "/multi.yml"
        let environment = ["PUSHGATE_QUEUE_ENGINE": "memory"].merging(Self.keys) { $1 }
        try (env.yaml() + "\n" + Self.appsYAML(env, wallet: nil)).write(toFile: path, atomically: true, encoding: .utf8)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let gateway = try GatewayBuilder.build(
            raw: try RawConfig.load(path: path, environment: environment), logger: logger,
            reloadSource: { try RawConfig.load(path: path, environment: environment) })
        let app = try gateway.makeApplication()
        try await app.test(.live) { client in
            let before = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([1]))
            XCTAssertEqual(before.status, 401)
            let byApp = try await Self.call(client, "/api/reload", .post, key: Self.chatKey)
            XCTAssertEqual(byApp.status, 403, "reload is admin-only")

            try (env.yaml() + "\n" + Self.appsYAML(env)).write(toFile: path, atomically: true, encoding: .utf8)
            let reloaded = try await Self.call(client, "/api/reload", .post, key: Self.adminKey)
            XCTAssertEqual(reloaded.status, 200, reloaded.body)
            XCTAssertTrue(reloaded.body.contains(#""added":["wallet"]"#), reloaded.body)
            XCTAssertTrue(reloaded.body.contains(#""rebuilt":[]"#), "chat and default unchanged keep their providers: \(reloaded.body)")
            let after = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([1]))
            XCTAssertEqual(after.status, 200, after.body)
            let sent = await eventually { env.apns.requests(for: Self.token(1)).first?.providerKeyID == "MOCKAPP002" }
            XCTAssertTrue(sent)

            // A bad file: 409 naming the key; the running configuration (both apps) stays.
            try (env.yaml() + "\n" + Self.appsYAML(env).replacingOccurrences(of: Self.walletKey, with: "short"))
                .write(toFile: path, atomically: true, encoding: .utf8)
            let refused = try await Self.call(client, "/api/reload", .post, key: Self.adminKey)
            XCTAssertEqual(refused.status, 409, refused.body)
            XCTAssertTrue(refused.body.contains("apps[wallet].api_keys"), refused.body)
            let still = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([2]))
            XCTAssertEqual(still.status, 200)

            // wallet removed: its key stops working; chat goes on.
            try (env.yaml() + "\n" + Self.appsYAML(env, wallet: nil)).write(toFile: path, atomically: true, encoding: .utf8)
            let removed = try await Self.call(client, "/api/reload", .post, key: Self.adminKey)
            XCTAssertEqual(removed.status, 200, removed.body)
            XCTAssertTrue(removed.body.contains(#""removed":["wallet"]"#), removed.body)
            let gone = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([3]))
            XCTAssertEqual(gone.status, 401)
            let chat = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([4]))
            XCTAssertEqual(chat.status, 200)
            let chatSent = await eventually { env.apns.requests(for: Self.token(4)).first?.providerKeyID == "MOCKAPP001" }
            XCTAssertTrue(chatSent)
        }
        XCTAssertEqual(gateway.dispatcher.appIDs, ["chat", "default"])
    }

    /// Stored jobs carry their app: after a restart they go out with their own app's key; a job whose
    /// app is gone from the configuration fails with that reason.
    func testStoredJobsKeepTheirAppAcrossARestart() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        env.apns.setDefaultReply(.serviceUnavailable(retryAfter: nil))
        let store = [
            "PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": env.directory + "/durable/q.sqlite",
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": "0", "PUSHGATE_IOS_MAX_RETRY": "50",
        ].merging(Self.keys) { $1 }
        // Both apps with max_retry 50: the deliveries stay queued while the mock answers 503.
        let chatRetry = Self.appsYAML(env, extraIOS: ", max_retry: 50")
        try await env.withGateway(chatRetry, environment: store) { client, _ in
            let c = try await Self.call(client, "/api/push", .post, key: Self.chatKey, body: Self.push([1, 2], id: "chat-1"))
            XCTAssertEqual(c.status, 200)
            let w = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([3, 4], id: "wallet-1"))
            XCTAssertEqual(w.status, 200)
            let tried = await eventually { (1...4).allSatisfy { !env.apns.requests(for: Self.token($0)).isEmpty } }
            XCTAssertTrue(tried)
        }
        env.apns.setDefaultReply(.ok)
        try await env.withGateway(chatRetry, environment: store) { client, gateway in
            let delivered = await eventually(timeout: 15) {
                (1...4).allSatisfy { env.apns.requests(for: Self.token($0)).contains { $0.status == 200 } }
            }
            XCTAssertTrue(delivered, "every stored delivery is sent after the restart")
            for i in 1...2 {
                XCTAssertEqual(env.apns.requests(for: Self.token(i)).last?.providerKeyID, "MOCKAPP001")
                XCTAssertEqual(env.apns.requests(for: Self.token(i)).last?.topic, "com.example.chat")
            }
            for i in 3...4 {
                XCTAssertEqual(env.apns.requests(for: Self.token(i)).last?.providerKeyID, "MOCKAPP002")
                XCTAssertEqual(env.apns.requests(for: Self.token(i)).last?.topic, "com.example.wallet")
            }
            // The mock's 200 comes before the gateway stores the outcome: wait for the record.
            var st = try await Self.call(client, "/api/push/wallet-1", key: Self.walletKey)
            for _ in 0..<300 where !st.body.contains(#""delivered":2"#) {
                try await Task.sleep(for: .milliseconds(50))
                st = try await Self.call(client, "/api/push/wallet-1", key: Self.walletKey)
            }
            XCTAssertTrue(st.body.contains(#""delivered":2"#), st.body)
            let denied = try await Self.call(client, "/api/push/wallet-1", key: Self.chatKey)
            XCTAssertEqual(denied.status, 404)
            _ = gateway
        }
        // A restart without wallet: its stored deliveries fail with the reason; chat's are unaffected.
        env.apns.setDefaultReply(.serviceUnavailable(retryAfter: nil))
        try await env.withGateway(chatRetry, environment: store) { client, _ in
            let w = try await Self.call(client, "/api/push", .post, key: Self.walletKey, body: Self.push([5], id: "wallet-2"))
            XCTAssertEqual(w.status, 200)
            let tried = await eventually { !env.apns.requests(for: Self.token(5)).isEmpty }
            XCTAssertTrue(tried)
        }
        env.apns.setDefaultReply(.ok)
        let before = env.feedbackCount
        try await env.withGateway(Self.appsYAML(env, wallet: nil, extraIOS: ", max_retry: 50"), environment: store) { client, _ in
            let failed = await eventually(timeout: 15) {
                let s = try? await Self.call(client, "/api/push/wallet-2", key: Self.adminKey)
                return s?.body.contains("app wallet is no longer configured") == true
            }
            XCTAssertTrue(failed)
            let fedBack = await eventually { env.feedbackCount > before }
            XCTAssertTrue(fedBack, "the failure goes to the feedback hook")
        }
        XCTAssertEqual(env.apns.requests(for: Self.token(5)).filter { $0.status == 200 }.count, 0)
    }

    func testAppsConfigErrorsNameTheKey() throws {
        func error(_ yaml: String) -> String {
            do {
                _ = try GatewaySettings(try RawConfig(yaml: yaml, environment: [:]))
                return ""
            } catch { return "\(error)" }
        }
        XCTAssertTrue(error("apps:\n  - api_keys: [x]\n").contains("apps[0].id"))
        XCTAssertTrue(error("apps:\n  - id: default\n").contains("apps[0].id"))
        XCTAssertTrue(error("apps:\n  - id: a\n  - id: a\n").contains("listed twice"))
        XCTAssertTrue(error("apps:\n  - id: a\n    max_pending: -1\n").contains("apps[a].max_pending"))
        XCTAssertTrue(error("apps:\n  - id: a\n    ios: { connections: 0 }\n").contains("apps[a].ios.connections"))
        XCTAssertTrue(
            error("apps:\n  - id: a\n    api_keys: [\"\(Self.chatKey)\"]\n  - id: b\n    api_keys: [\"\(Self.chatKey)\"]\n").contains(
                "each key belongs to one app"))
        let raw = try RawConfig(yaml: "apps:\n  - id: a\n    ios: { topic: x, nonsense: 1 }\n    colour: blue\n", environment: [:])
        XCTAssertTrue(raw.warnings.contains("unknown config key apps[a].ios.nonsense ignored"), "\(raw.warnings)")
        XCTAssertTrue(raw.warnings.contains("unknown config key apps[a].colour ignored"), "\(raw.warnings)")
        XCTAssertEqual(raw.apps.first?.values["ios.enabled"], .bool(true), "a section present is enabled")
        XCTAssertEqual(raw.apps.first?.values["android.enabled"], .bool(false), "a section absent is off")
    }

    func testRateLimiterBucket() {
        let l = RateLimiter(rate: 10, now: 0)
        XCTAssertNil(l.take(10, now: 0))
        XCTAssertEqual(l.take(1, now: 0), 1)
        XCTAssertNil(l.take(5, now: 0.5), "half a second refills half")
        // A request larger than the burst passes on a full bucket and leaves a debt.
        XCTAssertNil(l.take(30, now: 10))
        XCTAssertEqual(l.take(1, now: 10), 3)
        XCTAssertNil(l.take(1, now: 13))
        XCTAssertEqual(RateLimiter(rate: 1, now: 0).take(Int.max, now: .infinity), nil)
        let r = RateLimiter(rate: 10, now: 0)
        XCTAssertNil(r.take(10, now: 0))
        r.refund(10)
        XCTAssertNil(r.take(10, now: 0), "a refused request gets its share back")
    }
}
