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

/// Every registered provider mock (the shared `MockStack` of `pushgate mock`: one per `MockRegistry`
/// module) + a feedback receiver, all TLS on 127.0.0.1, and a gateway configured for them.
final class TestEnvironment: Sendable {
    let stack: MockStack
    let feedbackServer: MockHTTPServer
    let feedbackPosts: NIOLockedValueBox<[MockRequest]>

    init(stack: MockStack, feedbackServer: MockHTTPServer, feedbackPosts: NIOLockedValueBox<[MockRequest]>) {
        self.stack = stack
        self.feedbackServer = feedbackServer
        self.feedbackPosts = feedbackPosts
    }

    // The mocks the tests talk to, by provider.
    var pki: TestPKI { stack.pki }
    var directory: String { stack.directory }
    var apnsMock: RunningMockAPNs { stack.mock(RunningMockAPNs.self)! }
    var apns: MockAPNs { apnsMock.mock }
    var apnsKey: TestAPNsKey { apnsMock.key }
    /// Two further APNs keys the mock trusts (the apps `chat` and `wallet` of the multi-app tests),
    /// also written to `<directory>/chat.p8` and `wallet.p8`.
    var chatKey: TestAPNsKey { apnsMock.appKeys[0] }
    var walletKey: TestAPNsKey { apnsMock.appKeys[1] }
    var fcmMock: RunningMockFCM { stack.mock(RunningMockFCM.self)! }
    var fcm: MockFCM { fcmMock.mock }
    var serviceAccount: TestServiceAccount { fcmMock.serviceAccount }
    var hms: MockHMS { stack.mock(RunningMockHMS.self)!.mock }
    var webpushMock: RunningMockWebPush { stack.mock(RunningMockWebPush.self)! }
    var webpush: MockWebPush { webpushMock.mock }
    var vapid: VAPIDKeys { webpushMock.vapid }

    /// `holds`: the answers of the mocks named hold until released (the APNs mock's: `apnsHold`).
    static func start(
        apnsMaxStreams: Int = 1000, apnsDelay: TimeAmount? = nil, apnsHold: MockResponseHold? = nil, holds: [String: MockResponseHold] = [:]
    ) async throws -> TestEnvironment {
        let group = MultiThreadedEventLoopGroup.singleton
        let dir = NSTemporaryDirectory() + "pushgate-test-\(UUID().uuidString)"
        let settings = MockStack.Settings(directory: dir) { name, run in
            if let hold = holds[name] { run.hold = hold }
            guard name == ProviderMockModule.apns.name else { return }
            run.maxConcurrentStreams = apnsMaxStreams
            run.latencyMs = apnsDelay.map { Int($0.nanoseconds / 1_000_000) } ?? 0
            run.hold = apnsHold
        }
        let stack = try await MockStack.start(settings)
        let posts = NIOLockedValueBox<[MockRequest]>([])
        var fo = MockHTTPServer.Options()
        fo.tls = try stack.pki.serverTLSConfiguration()
        let feedback = MockHTTPServer(
            options: fo, eventLoopGroup: group,
            syncHandler: { req in
                posts.withLockedValue { $0.append(req) }
                return MockResponse(status: 200)
            })
        try await feedback.start()
        let env = TestEnvironment(stack: stack, feedbackServer: feedback, feedbackPosts: posts)
        try env.chatKey.write(to: dir + "/chat.p8")
        try env.walletKey.write(to: dir + "/wallet.p8")
        return env
    }

    func stop() async {
        try? await stack.stop()
        try? await feedbackServer.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    var feedbackCount: Int { feedbackPosts.withLockedValue { $0.count } }

    func yaml(_ extra: String = "") -> String {
        """
        core:
          address: "127.0.0.1"
          port: 0
          ca_file: "\(stack.caFile)"
          feedback_hook_url: "\(feedbackServer.baseURL)/feedback"
          feedback_header: ["X-Token: s3cret"]
          retry_backoff_ms: 50
          retry_backoff_max_ms: 400
        ios:
          enabled: true
          key_path: "\(directory)/mock-apns.p8"
          key_id: "\(apnsKey.keyID)"
          team_id: "\(apnsKey.teamID)"
          endpoint: "\(apns.baseURL)"
          channels_endpoint: "\(apns.channelsBaseURL)"
          topic: "com.example.app"
        android:
          enabled: true
          key_path: "\(directory)/mock-fcm.json"
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

extension TestClientProtocol {
    /// Posts `json` and checks the answer is a 400 whose message or detail names `field` (`shown`
    /// says which case failed).
    func pushExpectingRefusal(_ json: String, naming field: String, shown: String, file: StaticString = #filePath, line: UInt = #line)
        async throws
    {
        let r = try await push(json)
        XCTAssertEqual(r.status, 400, "\(shown): \(r.body.prefix(300))", file: file, line: line)
        let answer = jsonObject(r.body)
        XCTAssertTrue(
            "\(answer["message"] ?? "") \(answer["detail"] ?? "")".contains(field), "\(shown) must name \(field): \(r.body.prefix(300))",
            file: file, line: line)
    }
}

func jsonObject(_ s: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(s.utf8))) as? [String: Any] ?? [:]
}
