import Foundation
import MockProviders
import NIOPosix
import Server
import WebPush
import NIOCore

/// The built-in mock providers on loopback (TLS with a throwaway CA), and the configuration that
/// points a gateway at them.
final class MockStack: Sendable {
    let pki: TestPKI
    let apnsKey: TestAPNsKey
    let apns: MockAPNs
    let serviceAccount: TestServiceAccount
    let fcm: MockFCM
    let webpush: MockWebPush
    let directory: String
    /// A VAPID key pair for gateways sent at the mock Web Push service.
    let vapid: VAPIDKeys
    let keepDirectory: Bool
    /// One key pair shared by the bench's Web Push subscription ids (see `registerBenchSubscribers`).
    let benchSubscriber = TestWebPushSubscriber(id: "bench")

    private init(pki: TestPKI, apnsKey: TestAPNsKey, apns: MockAPNs, serviceAccount: TestServiceAccount, fcm: MockFCM, webpush: MockWebPush, directory: String,
                 vapid: VAPIDKeys, keepDirectory: Bool) {
        self.vapid = vapid
        self.keepDirectory = keepDirectory
        self.pki = pki
        self.apnsKey = apnsKey
        self.apns = apns
        self.serviceAccount = serviceAccount
        self.fcm = fcm
        self.webpush = webpush
        self.directory = directory
    }

    /// How to run the mocks (ports, scripted failures and latency, recording).
    struct Settings: Sendable {
        var apnsPort = 0
        var fcmPort = 0
        var webpushPort = 0
        /// Where the CA PEM, the APNs .p8, the FCM service account and the snippet go (nil: a temp dir, removed on stop).
        var directory: String? = nil
        /// Added before every answer, per mock.
        var apnsLatencyMs = 0
        var fcmLatencyMs = 0
        var webpushLatencyMs = 0
        /// Keep every request in memory (tests, `serve --mock`). Off for `pushgate mock` / `bench`: the recorder counts instead.
        var recordRequests = true
        /// Counts per token, latency, scripted failure rates (nil: the mocks answer as scripted only).
        var recorder: MockRecorder? = nil
    }

    static func start(apnsPort: Int = 0, fcmPort: Int = 0, webpushPort: Int = 0) async throws -> MockStack {
        try await start(Settings(apnsPort: apnsPort, fcmPort: fcmPort, webpushPort: webpushPort))
    }

    static func start(_ settings: Settings) async throws -> MockStack {
        let group = MultiThreadedEventLoopGroup.singleton
        let pki = try TestPKI.generate()
        let tls = try pki.serverTLSConfiguration()
        let recorder = settings.recorder
        func delay(_ ms: Int) -> TimeAmount? { ms > 0 ? .milliseconds(Int64(ms)) : nil }

        let apnsKey = TestAPNsKey.generate()
        var apnsOptions = MockAPNs.Options(key: apnsKey, tls: tls)
        apnsOptions.port = settings.apnsPort
        apnsOptions.responseDelay = delay(settings.apnsLatencyMs)
        apnsOptions.recordRequests = settings.recordRequests
        if let recorder {
            apnsOptions.hook = { token, body in
                switch recorder.observe(.apns, token: token, body: body) {
                case .ok: return nil
                case .dead: return .unregistered
                case .injected(let status): return status == 429 ? .tooManyRequests(retryAfter: nil) : .status(status)
                }
            }
        }
        let apns = MockAPNs(options: apnsOptions, eventLoopGroup: group)
        try await apns.start()

        let account = try TestServiceAccount.generate()
        var fcmOptions = MockFCM.Options(serviceAccount: account, tls: tls)
        fcmOptions.port = settings.fcmPort
        fcmOptions.responseDelay = delay(settings.fcmLatencyMs)
        fcmOptions.recordRequests = settings.recordRequests
        if let recorder {
            fcmOptions.hook = { target, body in
                switch recorder.observe(.fcm, token: target, body: body) {
                case .ok: return nil
                case .dead: return .unregistered
                case .injected(let status):
                    switch status {
                    case 503: return .unavailable(retryAfter: nil)
                    case 429: return .quotaExceeded(retryAfter: nil)
                    case 500: return .internalError
                    case 404: return .unregistered
                    default: return .custom(status: status, body: #"{"error":{"code":\#(status),"message":"injected failure","status":"UNKNOWN"}}"#, retryAfter: nil)
                    }
                }
            }
        }
        let fcm = MockFCM(options: fcmOptions, eventLoopGroup: group)
        try await fcm.start()

        var wpOptions = MockWebPush.Options(tls: tls)
        wpOptions.port = settings.webpushPort
        wpOptions.responseDelay = delay(settings.webpushLatencyMs)
        wpOptions.recordRequests = settings.recordRequests
        if let recorder {
            wpOptions.hook = { id, plaintext in
                switch recorder.observe(.webpush, token: id, body: plaintext) {
                case .ok: return nil
                case .dead: return .gone
                case .injected(let status):
                    switch status {
                    case 429: return .tooManyRequests(retryAfter: nil)
                    case 410: return .gone
                    case 404: return .notFound
                    default: return .serverError(status: status, retryAfter: nil)
                    }
                }
            }
        }
        let webpush = MockWebPush(options: wpOptions, eventLoopGroup: group)
        try await webpush.start()

        let dir = settings.directory ?? (NSTemporaryDirectory() + "pushgate-mock-\(getpid())")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try pki.caCertificatePEM.write(toFile: dir + "/mock-ca.pem", atomically: true, encoding: .utf8)
        try apnsKey.write(to: dir + "/mock-apns.p8")
        try account.json(tokenURI: fcm.tokenURL).write(toFile: dir + "/mock-fcm.json", atomically: true, encoding: .utf8)
        let stack = MockStack(pki: pki, apnsKey: apnsKey, apns: apns, serviceAccount: account, fcm: fcm, webpush: webpush, directory: dir,
                              vapid: VAPIDKeys.generate(), keepDirectory: settings.directory != nil)
        try stack.configSnippet.write(toFile: dir + "/gateway-snippet.yml", atomically: true, encoding: .utf8)
        return stack
    }

    static func start(raw: RawConfig) async throws -> MockStack {
        try await start(apnsPort: raw.int("mock.apns_port"), fcmPort: raw.int("mock.fcm_port"), webpushPort: raw.int("mock.webpush_port"))
    }

    /// Config keys that point a gateway at these mocks.
    var overrides: [(String, RawConfig.ConfigValue)] {
        [
            ("core.ca_file", .string(directory + "/mock-ca.pem")),
            ("ios.enabled", .bool(true)),
            ("ios.key_path", .string(directory + "/mock-apns.p8")),
            ("ios.key_id", .string(apnsKey.keyID)),
            ("ios.team_id", .string(apnsKey.teamID)),
            ("ios.endpoint", .string(apns.baseURL)),
            ("android.enabled", .bool(true)),
            ("android.key_path", .string(directory + "/mock-fcm.json")),
            ("android.endpoint", .string(fcm.baseURL)),
            ("webpush.enabled", .bool(true)),
            ("webpush.vapid_private_key", .string(vapid.privateKeyBase64URL)),
            ("webpush.vapid_subject", .string("mailto:mock@example.com")),
            ("webpush.allow_private_endpoints", .bool(true)),
            ("unifiedpush.enabled", .bool(true)),
        ]
    }

    func apply(to raw: inout RawConfig) {
        for (k, v) in overrides { raw.set(k, v) }
        if raw.string("ios.topic").isEmpty { raw.set("ios.topic", .string("com.example.app")) }
    }

    var banner: String {
        """
        pushgate: mock providers on loopback (throwaway CA \(directory)/mock-ca.pem):
          APNs       \(apns.baseURL)   (key id \(apnsKey.keyID), team \(apnsKey.teamID), key \(directory)/mock-apns.p8)
          FCM        \(fcm.baseURL)   (OAuth token endpoint \(fcm.tokenURL), service account \(directory)/mock-fcm.json)
          Web Push   \(webpush.baseURL)/push/<id>   (VAPID public key \(vapid.publicKeyBase64URL))

        """
    }

    /// The config snippet that points another gateway at these mocks.
    var configSnippet: String {
        """
        core:
          ca_file: "\(directory)/mock-ca.pem"
        ios:
          enabled: true
          key_path: "\(directory)/mock-apns.p8"
          key_id: "\(apnsKey.keyID)"
          team_id: "\(apnsKey.teamID)"
          endpoint: "\(apns.baseURL)"
          topic: "com.example.app"
        android:
          enabled: true
          key_path: "\(directory)/mock-fcm.json"
          endpoint: "\(fcm.baseURL)"
        webpush:
          enabled: true
          vapid_private_key: "\(vapid.privateKeyBase64URL)"
          vapid_subject: "mailto:mock@example.com"
          allow_private_endpoints: true   # the mock listens on 127.0.0.1
        unifiedpush:
          enabled: true

        """
    }

    func stop() async throws {
        try await apns.stop()
        try await fcm.stop()
        try await webpush.stop()
        if !keepDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }
}
