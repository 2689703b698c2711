import Foundation
// The mock APNs (and its throwaway PKI and .p8) only; the gateway side uses PushgateKit alone.
import MockProviders
import NIOPosix
import PushgateKit
import XCTest

/// The embedding API against the mock APNs over real HTTP/2 TLS.
final class PushgateKitTests: XCTestCase {
    struct MockSetup {
        let pki: TestPKI
        let key: TestAPNsKey
        let apns: MockAPNs
        let directory: String

        static func start() async throws -> MockSetup {
            let pki = try TestPKI.generate()
            let key = TestAPNsKey.generate()
            let apns = MockAPNs(
                options: MockAPNs.Options(key: key, tls: try pki.serverTLSConfiguration()), eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
            try await apns.start()
            let dir = NSTemporaryDirectory() + "pushgatekit-test-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            return MockSetup(pki: pki, key: key, apns: apns, directory: dir)
        }

        func stop() async {
            try? await apns.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }

        /// A configuration value pointing at the mock: the key as PEM text, the mock's CA as a trust root.
        func configuration() -> PushgateConfiguration {
            var config = PushgateConfiguration()
            config.apns = .init(
                auth: .token(key: .contents(Secret(key.p8PEM)), keyID: key.keyID, teamID: key.teamID), topic: "com.example.app",
                endpoint: apns.baseURL)
            config.trustRootsPEM = [pki.caCertificatePEM]
            config.retryBackoffMilliseconds = 50
            return config
        }
    }

    static let good = String(repeating: "ab", count: 32)
    static let bad = String(repeating: "cd", count: 32)

    func testSendDeliversToMockAPNsAndReportsEveryToken() async throws {
        let mock = try await MockSetup.start()
        mock.apns.script(Self.bad, [.badDeviceToken])
        let gateway = try await PushgateGateway(configuration: mock.configuration())
        do {
            var n = PushNotification(platform: .ios, tokens: [Self.good, Self.bad])
            n.notifID = "order-42"
            n.title = "Hello"
            n.message = "Your order shipped"
            n.badge = 3
            let outcomes = try await gateway.send([n], timeout: 30)

            let received = mock.apns.requests(for: Self.good)
            XCTAssertEqual(received.count, 1)
            let request = try XCTUnwrap(received.first)
            XCTAssertEqual(request.topic, "com.example.app")
            XCTAssertEqual(request.pushType, "alert")
            XCTAssertEqual(
                request.payload as NSDictionary,
                ["aps": ["alert": ["title": "Hello", "body": "Your order shipped"], "badge": 3]] as NSDictionary, request.bodyString)

            XCTAssertEqual(outcomes.count, 2)
            XCTAssertEqual(outcomes.map(\.token), [Self.good, Self.bad])
            XCTAssertEqual(outcomes.map(\.notifID), ["order-42", "order-42"])
            XCTAssertEqual(outcomes[0].result, .delivered(providerID: request.apnsID))
            XCTAssertNotNil(request.apnsID)
            XCTAssertEqual(outcomes[0].attempts, 1)
            XCTAssertEqual(outcomes[1].result, .failed(reason: "BadDeviceToken", tokenDead: true))
            XCTAssertEqual(outcomes[1].platform, .ios)

            let status = try await gateway.status(notifID: "order-42")
            XCTAssertEqual(status?.map(\.state), [.delivered, .failed])
            XCTAssertEqual(status?.first?.providerID, request.apnsID)
            XCTAssertEqual(status?.last?.error, "BadDeviceToken")
            XCTAssertNotEqual(status?.first?.token, Self.good, "masked per hideToken, as GET /api/push/{notif_id}")
            let unknown = try await gateway.status(notifID: "never-sent")
            XCTAssertNil(unknown)
        } catch {
            await gateway.shutdown()
            await mock.stop()
            throw error
        }
        await gateway.shutdown()
        await gateway.shutdown()  // idempotent
        do {
            try await gateway.submit([PushNotification(platform: .ios, tokens: [Self.good])])
            XCTFail("submit after shutdown")
        } catch let e as PushgateError {
            XCTAssertEqual(e, .shutDown)
        }
        await mock.stop()
    }

    /// A notification scheduled an hour ahead shows `scheduled`; `cancel` ends it unsent.
    func testScheduledNotificationIsCancelled() async throws {
        let mock = try await MockSetup.start()
        let gateway = try await PushgateGateway(configuration: mock.configuration())
        let at = Int(Date().timeIntervalSince1970) + 3600
        let json = #"{"notifications":[{"notif_id":"kit-later","platform":1,"tokens":["\#(Self.good)"],"message":"later","send_at":\#(at)}]}"#
        _ = try await gateway.submit(try gateway.decodeRequest(Array(json.utf8)))
        let before = try await gateway.status(notifID: "kit-later")?.first
        XCTAssertEqual(before?.state, .scheduled)
        XCTAssertEqual(before?.nextTry, Date(timeIntervalSince1970: Double(at)))
        let summary = try await gateway.cancel(notifID: "kit-later")
        XCTAssertEqual(summary?.cancelled, 1)
        XCTAssertEqual(summary?.inFlight, 0)
        let after = try await gateway.status(notifID: "kit-later")?.first
        XCTAssertEqual(after?.state, .cancelled)
        XCTAssertEqual(gateway.pendingCount, 0)
        let unknown = try await gateway.cancel(notifID: "never-sent")
        XCTAssertNil(unknown)
        XCTAssertEqual(mock.apns.requests(for: Self.good).count, 0)
        await gateway.shutdown()
        await mock.stop()
    }

    func testSubmitReturnsAtOnceAndStatusFollows() async throws {
        let mock = try await MockSetup.start()
        let gateway = try await PushgateGateway(configuration: mock.configuration())
        let json = #"{"notifications":[{"platform":1,"tokens":["\#(Self.good)"],"message":"gorush JSON"}]}"#
        let request = try gateway.decodeRequest(Array(json.utf8))
        let submission = try await gateway.submit(request)
        XCTAssertEqual(submission.counts, 1)
        XCTAssertEqual(submission.notifIDs, ["\(submission.requestID)-0"])
        var state: DeliveryStatus.State?
        for _ in 0..<200 {
            state = try await gateway.status(notifID: submission.notifIDs[0])?.first?.state
            if state == .delivered { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        XCTAssertEqual(state, .delivered)
        XCTAssertEqual(mock.apns.requests(for: Self.good).first?.aps["alert"] as? String, "gorush JSON")

        // Refused as /api/push refuses them, naming the field; nothing queued.
        XCTAssertThrowsError(try gateway.decodeRequest(Array(#"{"notifications":[]}"#.utf8))) { e in
            XCTAssertEqual(e as? PushgateError, .invalidNotification(message: "Notifications field is empty.", detail: nil))
        }
        var long = PushNotification(platform: .ios, tokens: [Self.good])
        long.collapseID = String(repeating: "c", count: 65)
        do {
            _ = try await gateway.send([long])
            XCTFail("a 65-byte collapse_id was accepted")
        } catch let e as PushgateError {
            guard case .invalidNotification(_, let detail?) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(detail.hasPrefix("notifications[0].collapse_id: "), detail)
        }
        // A NUL in a target (the JSON route refuses it while parsing): a store column would cut it short.
        for (note, field) in [
            (PushNotification(platform: .ios, tokens: [Self.good, "abc\u{0}def"]), "notifications[0].tokens[1]"),
            (
                {
                    var w = PushNotification(platform: .webpush)
                    w.subscriptions = [WebPushSubscription(endpoint: "https://push.example/\u{0}x", keys: .init(p256dh: "BPk", auth: "a"))]
                    return w
                }(), "notifications[0].subscriptions[0].endpoint"
            ),
        ] {
            do {
                _ = try await gateway.submit([note])
                XCTFail("a NUL in \(field) was accepted")
            } catch let e as PushgateError {
                guard case .invalidNotification(_, let detail?) = e else { return XCTFail("\(e)") }
                XCTAssertTrue(detail.hasPrefix("\(field): contains a NUL character"), detail)
            }
        }
        do {
            _ = try await gateway.submit([PushNotification(platform: .ios, tokens: [Self.good])], app: "chat")
            XCTFail("unknown app accepted")
        } catch let e as PushgateError {
            XCTAssertEqual(e, .unknownApp("chat"))
        }
        await gateway.shutdown()
        await mock.stop()
    }

    /// An app's keys, rate limit and idempotency keys through `submit`, as over HTTP: a wrong key is
    /// refused, an app's key acts for its own app only, a request over the app's rate waits, the same
    /// idempotency key and request replays the first submission and queues nothing.
    func testSubmitAppliesKeysRateLimitsAndIdempotencyKeys() async throws {
        let mock = try await MockSetup.start()
        var config = mock.configuration()
        let apns = try XCTUnwrap(config.apns)
        config.apps = [
            .init(id: "chat", apns: apns, rateLimit: 1, apiKeys: ["chat-key-0123456789abcdef"]),
            .init(id: "wallet", apns: apns, apiKeys: ["wallet-key-0123456789abcdef"]),
        ]
        let gateway = try await PushgateGateway(configuration: config)
        do {
            func request(_ tokens: Int, from: Int = 0) -> PushRequest {
                var n = PushNotification(platform: .ios, tokens: (from..<(from + tokens)).map { String(format: "%064x", $0) })
                n.message = "hi"
                return PushRequest(notifications: [n])
            }
            do {
                try await gateway.submit(request(1), app: "chat", apiKey: "not-a-key-0123456789abcdef")
                XCTFail("a wrong key was taken")
            } catch let e as PushgateError {
                guard case .unauthorized = e else { return XCTFail("\(e)") }
            }
            do {
                try await gateway.submit(request(1), app: "wallet", apiKey: "chat-key-0123456789abcdef")
                XCTFail("chat's key acted for wallet")
            } catch let e as PushgateError {
                guard case .forbidden = e else { return XCTFail("\(e)") }
            }
            // chat may submit 1 delivery a second: a request of 100 is let through on a full bucket and
            // leaves it 99 deliveries short, so the next request waits (whatever the machine's speed).
            let first = try await gateway.submit(request(100), app: "chat", apiKey: "chat-key-0123456789abcdef")
            XCTAssertEqual(first.counts, 100)
            do {
                try await gateway.submit(request(1, from: 500), app: "chat")
                XCTFail("over chat's rate_limit")
            } catch let e as PushgateError {
                guard case .rateLimited(let wait, _) = e else { return XCTFail("\(e)") }
                XCTAssertGreaterThanOrEqual(wait, 1)
            }
            let keyed = try await gateway.submit(request(2, from: 1000), app: "wallet", idempotencyKey: "order-7")
            XCTAssertFalse(keyed.replayed)
            let again = try await gateway.submit(request(2, from: 1000), app: "wallet", idempotencyKey: "order-7")
            XCTAssertTrue(again.replayed)
            XCTAssertEqual(again.requestID, keyed.requestID)
            XCTAssertEqual(again.notifIDs, keyed.notifIDs)
            XCTAssertEqual(again.counts, 2)
            do {
                try await gateway.submit(request(2, from: 2000), app: "wallet", idempotencyKey: "order-7")
                XCTFail("the key was taken with another request")
            } catch let e as PushgateError {
                guard case .idempotencyMismatch = e else { return XCTFail("\(e)") }
            }
        } catch {
            await gateway.shutdown()
            await mock.stop()
            throw error
        }
        await gateway.shutdown()
        await mock.stop()
    }

    func testInvalidConfigurationIsOneLineNamingTheKey() async throws {
        let mock = try await MockSetup.start()
        defer { Task { await mock.stop() } }
        func error(_ config: PushgateConfiguration) async -> String {
            do {
                let g = try await PushgateGateway(configuration: config)
                await g.shutdown()
                return "built"
            } catch {
                return String(describing: error)
            }
        }
        var missingKey = mock.configuration()
        missingKey.apns?.auth = .token(key: .file(mock.directory + "/missing.p8"), keyID: "K", teamID: "T")
        var text = await error(missingKey)
        XCTAssertTrue(text.hasPrefix("config error: ios.key_path: "), text)
        XCTAssertFalse(text.contains("\n"), text)

        var backoff = mock.configuration()
        backoff.retryBackoffMilliseconds = 0
        text = await error(backoff)
        XCTAssertEqual(text, "config error: core.retry_backoff_ms: 0 is out of range (1...86400000)")

        var unknown = mock.configuration()
        unknown.settings = ["core.max_notifcation": "5"]
        text = await error(unknown)
        XCTAssertEqual(text, "config error: core.max_notifcation: not a Pushgate configuration key")

        var badRoot = mock.configuration()
        badRoot.trustRootsPEM = ["not a certificate"]
        text = await error(badRoot)
        XCTAssertEqual(text, "config error: trustRootsPEM[0]: holds no PEM certificate")

        var badSetting = mock.configuration()
        badSetting.settings = ["core.max_notification": "many"]
        text = await error(badSetting)
        XCTAssertTrue(text.hasPrefix("config error: core.max_notification: expected an integer"), text)
    }

    func testDescriptionHidesSecrets() async throws {
        let key = TestAPNsKey.generate()
        var config = PushgateConfiguration()
        config.apns = .init(auth: .token(key: .contents(Secret(key.p8PEM)), keyID: "KEYID12345", teamID: "TEAM123456"), topic: "com.example.app")
        config.webPush = .init(vapidPrivateKey: "vapid-private-hunter2", vapidSubject: "mailto:ops@example.com")
        config.huawei = .init(appID: "123", appSecret: "huawei-hunter2")
        config.queue = .postgres(url: "postgres://pushgate:pg-hunter2@db/pushgate")
        config.feedback = .init(url: "https://hooks.example.com/push?token=q-hunter2", headers: ["Authorization": "Bearer h-hunter2"])
        let pem = key.p8PEM.split(separator: "\n")[1]
        for text in [
            config.description, String(describing: config), String(reflecting: config),
            {
                var s = ""
                dump(config, to: &s)
                return s
            }(),
        ] {
            XCTAssertFalse(text.contains("hunter2"), text)
            XCTAssertFalse(text.contains(pem), text)
        }
        XCTAssertTrue(config.description.contains("com.example.app"), config.description)
    }

    func testSQLiteQueueKeepsStatusAcrossRestarts() async throws {
        let mock = try await MockSetup.start()
        var config = mock.configuration()
        config.queue = .sqlite(path: mock.directory + "/queue.sqlite")
        var n = PushNotification(platform: .ios, tokens: [Self.good])
        n.notifID = "durable-1"
        n.message = "stored"
        let first = try await PushgateGateway(configuration: config)
        let outcomes = try await first.send([n], timeout: 30)
        XCTAssertEqual(outcomes.count, 1)
        guard case .delivered(let id?) = outcomes.first?.result else { return XCTFail("\(outcomes)") }
        await first.shutdown()
        XCTAssertTrue(FileManager.default.fileExists(atPath: mock.directory + "/queue.sqlite"))

        let second = try await PushgateGateway(configuration: config)
        let status = try await second.status(notifID: "durable-1")
        XCTAssertEqual(status?.map(\.state), [.delivered])
        XCTAssertEqual(status?.first?.providerID, id)
        await second.shutdown()
        XCTAssertEqual(mock.apns.requests(for: Self.good).count, 1)
        await mock.stop()
    }
}
