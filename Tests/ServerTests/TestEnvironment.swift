import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PushDispatch
import PushgateCore
import TestSupport
import WebPush
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Mock APNs + mock FCM + a feedback receiver, all TLS on 127.0.0.1, and a gateway configured for them.
final class TestEnvironment: Sendable {
    let pki: TestPKI
    let apnsKey: TestAPNsKey
    /// Two further APNs keys the mock trusts (the apps `chat` and `wallet` of the multi-app tests),
    /// written to `<directory>/chat.p8` and `wallet.p8`.
    let chatKey: TestAPNsKey
    let walletKey: TestAPNsKey
    let apns: MockAPNs
    let serviceAccount: TestServiceAccount
    let fcm: MockFCM
    let webpush: MockWebPush
    let vapid = VAPIDKeys.generate()
    let feedbackServer: MockHTTPServer
    let feedbackPosts: NIOLockedValueBox<[MockRequest]>
    let directory: String

    init(
        pki: TestPKI, apnsKey: TestAPNsKey, chatKey: TestAPNsKey, walletKey: TestAPNsKey, apns: MockAPNs, serviceAccount: TestServiceAccount,
        fcm: MockFCM, webpush: MockWebPush,
        feedbackServer: MockHTTPServer, feedbackPosts: NIOLockedValueBox<[MockRequest]>, directory: String
    ) {
        self.pki = pki
        self.apnsKey = apnsKey
        self.chatKey = chatKey
        self.walletKey = walletKey
        self.apns = apns
        self.serviceAccount = serviceAccount
        self.fcm = fcm
        self.webpush = webpush
        self.feedbackServer = feedbackServer
        self.feedbackPosts = feedbackPosts
        self.directory = directory
    }

    static func start(apnsMaxStreams: Int = 1000, apnsDelay: TimeAmount? = nil, apnsHold: MockResponseHold? = nil) async throws -> TestEnvironment {
        let group = MultiThreadedEventLoopGroup.singleton
        let pki = try TestPKI.generate()
        let tls = try pki.serverTLSConfiguration()
        let key = TestAPNsKey.generate()
        var options = MockAPNs.Options(key: key, tls: tls)
        let chatKey = TestAPNsKey.generate(keyID: "CHATKEY001", teamID: "CHATTEAM01")
        let walletKey = TestAPNsKey.generate(keyID: "WALLETKEY1", teamID: "WALLTEAM01")
        options.additionalKeys = [chatKey, walletKey]
        options.maxConcurrentStreams = apnsMaxStreams
        options.responseDelay = apnsDelay
        options.responseHold = apnsHold
        let apns = MockAPNs(options: options, eventLoopGroup: group)
        try await apns.start()
        let account = try TestServiceAccount.generate()
        let fcm = MockFCM(options: MockFCM.Options(serviceAccount: account, tls: tls), eventLoopGroup: group)
        try await fcm.start()
        let webpush = MockWebPush(options: MockWebPush.Options(tls: tls), eventLoopGroup: group)
        try await webpush.start()
        let posts = NIOLockedValueBox<[MockRequest]>([])
        var fo = MockHTTPServer.Options()
        fo.tls = tls
        let feedback = MockHTTPServer(
            options: fo, eventLoopGroup: group,
            syncHandler: { req in
                posts.withLockedValue { $0.append(req) }
                return MockResponse(status: 200)
            })
        try await feedback.start()
        let dir = NSTemporaryDirectory() + "pushgate-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try pki.caCertificatePEM.write(toFile: dir + "/ca.pem", atomically: true, encoding: .utf8)
        try key.write(to: dir + "/apns.p8")
        try chatKey.write(to: dir + "/chat.p8")
        try walletKey.write(to: dir + "/wallet.p8")
        try account.json(tokenURI: fcm.tokenURL).write(toFile: dir + "/fcm.json", atomically: true, encoding: .utf8)
        return TestEnvironment(
            pki: pki, apnsKey: key, chatKey: chatKey, walletKey: walletKey, apns: apns, serviceAccount: account, fcm: fcm, webpush: webpush,
            feedbackServer: feedback, feedbackPosts: posts,
            directory: dir)
    }

    func stop() async {
        try? await apns.stop()
        try? await fcm.stop()
        try? await webpush.stop()
        try? await feedbackServer.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    var feedbackCount: Int { feedbackPosts.withLockedValue { $0.count } }

    func yaml(_ extra: String = "") -> String {
        """
        core:
          address: "127.0.0.1"
          port: 0
          ca_file: "\(directory)/ca.pem"
          feedback_hook_url: "\(feedbackServer.baseURL)/feedback"
          feedback_header: ["X-Token: s3cret"]
          retry_backoff_ms: 50
          retry_backoff_max_ms: 400
        ios:
          enabled: true
          key_path: "\(directory)/apns.p8"
          key_id: "\(apnsKey.keyID)"
          team_id: "\(apnsKey.teamID)"
          endpoint: "\(apns.baseURL)"
          channels_endpoint: "\(apns.channelsBaseURL)"
          topic: "com.example.app"
        android:
          enabled: true
          key_path: "\(directory)/fcm.json"
          endpoint: "\(fcm.baseURL)"
        webpush:
          enabled: true
          vapid_private_key: "\(vapid.privateKeyBase64URL)"
          vapid_subject: "mailto:ops@example.com"
          allow_private_endpoints: true
        unifiedpush:
          enabled: true
        queue:
          engine: memory
          sqlite:
            path: "\(directory)/queue.sqlite"
        \(extra)
        """
    }

    /// Runs a live gateway (real HTTP server on 127.0.0.1) for the body.
    func withGateway(
        _ extraYAML: String = "", environment: [String: String] = [:], clock: (@Sendable () -> Double)? = nil,
        _ body: @escaping @Sendable (any TestClientProtocol, Gateway) async throws -> Void
    ) async throws {
        // The memory engine unless a test asks for another (durable engines get their own tests).
        let env = ["PUSHGATE_QUEUE_ENGINE": "memory"].merging(environment) { _, new in new }
        let raw = try RawConfig(yaml: merge(yaml(), extraYAML), environment: env)
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway =
            try clock.map { try GatewayBuilder.build(raw: raw, logger: logger, clock: $0) } ?? GatewayBuilder.build(raw: raw, logger: logger)
        let app = try gateway.makeApplication()
        try await app.test(.live) { client in
            try await body(client, gateway)
        }
    }

    /// Later sections in `extra` replace keys of the base YAML (simple two-level merge).
    func merge(_ base: String, _ extra: String) -> String {
        guard !extra.isEmpty else { return base }
        return base + "\n" + extra
    }
}

extension TestClientProtocol {
    @discardableResult
    func push(_ json: String) async throws -> (status: Int, body: String, headers: HTTPFields) {
        try await execute(uri: "/api/push", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: json)) { r in
            (Int(r.status.code), String(buffer: r.body), r.headers)
        }
    }
}

extension TestClientProtocol {
    /// Posts `json` up to `attempts` times until the gateway answers 503 (queue full); returns that
    /// answer, or nil if it never came. Every answer before it must be 200.
    func pushUntil503(_ json: String, attempts: Int, file: StaticString = #filePath, line: UInt = #line) async throws
        -> (status: Int, body: String, headers: HTTPFields)?
    {
        for _ in 0..<attempts {
            let r = try await push(json)
            if r.status == 503 { return r }
            XCTAssertEqual(r.status, 200, file: file, line: line)
        }
        return nil
    }
}

func jsonObject(_ s: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(s.utf8))) as? [String: Any] ?? [:]
}
