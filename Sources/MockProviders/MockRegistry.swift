import Foundation
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore
import WebPush

/// How a load tool's recorder wants one request answered.
public enum MockVerdict: Sendable {
    case ok
    /// The provider's "dead token" answer (410 Unregistered, 404 UNREGISTERED, 410 Gone).
    case dead
    /// An injected failure with this HTTP status.
    case injected(status: Int)
}

/// How to run one mock provider.
public struct MockRunSettings: Sendable {
    public var port = 0
    /// Added before every answer.
    public var latencyMs = 0
    /// Keep every request in memory (tests, `serve --mock`).
    public var recordRequests = true
    /// Decides each answer (nil: the mock answers as scripted only).
    public var verdict: (@Sendable (_ token: String, _ body: [UInt8]) -> MockVerdict)?
    /// CA certificates (PEM) client certificates may chain to (the mock APNs' certificate-based
    /// trust); empty: no client certificates are asked for.
    public var clientCertificateRootsPEM: [String] = []
    /// HTTP/2 mocks: the streams a connection may open (nil: the mock's default).
    public var maxConcurrentStreams: Int?
    /// Mocks that support it: answers wait until the hold lets them go (tests of in-flight work).
    public var hold: MockResponseHold?

    public init(
        port: Int = 0, latencyMs: Int = 0, recordRequests: Bool = true,
        verdict: (@Sendable (_ token: String, _ body: [UInt8]) -> MockVerdict)? = nil
    ) {
        self.port = port
        self.latencyMs = latencyMs
        self.recordRequests = recordRequests
        self.verdict = verdict
    }

    var delay: TimeAmount? { latencyMs > 0 ? .milliseconds(Int64(latencyMs)) : nil }
}

/// A running mock provider and the configuration that points a gateway at it.
public protocol RunningProviderMock: Sendable {
    /// The registry name (`apns`): `--apns-port`, `mock.apns_port`, `/__mock/stats` counts.
    var name: String { get }
    var baseURL: String { get }
    /// Keys (`section.key`) that point a gateway at this mock.
    var configOverrides: [(key: String, value: ConfigValue)] { get }
    /// Keys set only when the gateway's configuration leaves them empty.
    var configDefaults: [(key: String, value: ConfigValue)] { get }
    /// The same as YAML sections.
    var configSnippet: String { get }
    /// One line for the start banner.
    var bannerLine: String { get }
    func stop() async throws
}

extension RunningProviderMock {
    public var configDefaults: [(key: String, value: ConfigValue)] { [] }
}

/// One provider's mock: how to start it.
public struct ProviderMockModule: Sendable {
    public var name: String
    /// How the banner and `pushgate mock` name it ("APNs").
    public var title: String
    /// The platforms whose deliveries it receives (what `pushgate bench` can send to with it).
    public var platforms: [Platform]
    /// Starts the mock with the throwaway CA's server TLS; files (keys, accounts) go to `directory`.
    public var start:
        @Sendable (_ tls: TLSConfiguration, _ directory: String, _ settings: MockRunSettings, _ group: any EventLoopGroup)
            async throws -> any RunningProviderMock

    /// How `pushgate bench` addresses its tokens on one of `platforms`: the notification's target
    /// members (`"tokens":[…]`, no trailing comma), given the subscriber it registered (if any).
    public var benchTargets: @Sendable (_ platform: Platform, _ tokens: [String], _ subscriber: BenchSubscriber?) -> String
    /// The platforms whose bench tokens are registered with this mock first (`BenchSubscriber`):
    /// true when every id is registered (encrypted Web Push), false when only the endpoint prefix is needed.
    public var benchSubscriptions: [Platform: Bool]

    public init(
        name: String, title: String, platforms: [Platform],
        benchTargets: @escaping @Sendable (Platform, [String], BenchSubscriber?) -> String = ProviderMockModule.tokenTargets,
        benchSubscriptions: [Platform: Bool] = [:],
        start: @escaping @Sendable (TLSConfiguration, String, MockRunSettings, any EventLoopGroup) async throws -> any RunningProviderMock
    ) {
        self.name = name
        self.title = title
        self.platforms = platforms
        self.benchTargets = benchTargets
        self.benchSubscriptions = benchSubscriptions
        self.start = start
    }

    /// `"tokens":["…",…]`: the bench tokens as they are.
    public static let tokenTargets: @Sendable (Platform, [String], BenchSubscriber?) -> String = { _, tokens, _ in
        "\"tokens\":[" + tokens.map { "\"\($0)\"" }.joined(separator: ",") + "]"
    }
}

/// The Web Push subscriber `pushgate bench` registered with the mock: the endpoint every bench id
/// is appended to, and the keys all of them share.
public struct BenchSubscriber: Sendable {
    public var endpointPrefix: String
    public var p256dh: String
    public var auth: String

    public init(endpointPrefix: String, p256dh: String, auth: String) {
        self.endpointPrefix = endpointPrefix
        self.p256dh = p256dh
        self.auth = auth
    }
}

/// Every provider's mock, for tests, `pushgate serve --mock`, `pushgate mock` and `pushgate bench`.
/// Adding a provider: one line here next to the one in `ProviderRegistry`.
public enum MockRegistry {
    public static let modules: [ProviderMockModule] = [.apns, .fcm, .hms, .webpush]

    public static func module(named name: String) -> ProviderMockModule? { modules.first { $0.name == name } }

    /// The mock receiving `platform`'s deliveries.
    public static func module(for platform: Platform) -> ProviderMockModule? { modules.first { $0.platforms.contains(platform) } }

    /// Every platform a mock stands in for, in registry order.
    public static var platforms: [Platform] { modules.flatMap(\.platforms) }
}

// MARK: the mocks

extension ProviderMockModule {
    public static let apns = ProviderMockModule(
        name: "apns", title: "APNs", platforms: [.ios],
        benchTargets: { p, tokens, s in ProviderMockModule.tokenTargets(p, tokens, s) + #","topic":"com.example.app""# }
    ) { tls, directory, settings, group in
        let key = TestAPNsKey.generate()
        var options = MockAPNs.Options(key: key, tls: tls)
        // Two more signing keys of the same team, for the apps of a multi-app gateway
        // (mock-apns-app1.p8 key id MOCKAPP001, mock-apns-app2.p8 MOCKAPP002).
        let appKeys = (1...2).map { TestAPNsKey.generate(keyID: "MOCKAPP00\($0)", teamID: key.teamID) }
        options.additionalKeys = appKeys
        options.port = settings.port
        options.responseDelay = settings.delay
        options.recordRequests = settings.recordRequests
        options.clientCertificateRootsPEM = settings.clientCertificateRootsPEM
        options.responseHold = settings.hold
        if let n = settings.maxConcurrentStreams { options.maxConcurrentStreams = n }
        if let verdict = settings.verdict {
            options.hook = { token, body in
                switch verdict(token, body) {
                case .ok: return nil
                case .dead: return .unregistered
                case .injected(let status): return status == 429 ? .tooManyRequests(retryAfter: nil) : .status(status)
                }
            }
        }
        let mock = MockAPNs(options: options, eventLoopGroup: group)
        try await mock.start()
        try key.write(to: directory + "/mock-apns.p8")
        for (i, k) in appKeys.enumerated() { try k.write(to: directory + "/mock-apns-app\(i + 1).p8") }
        return RunningMockAPNs(mock: mock, key: key, appKeys: appKeys, directory: directory)
    }

    public static let fcm = ProviderMockModule(name: "fcm", title: "FCM", platforms: [.android]) { tls, directory, settings, group in
        let account = try TestServiceAccount.generate()
        var options = MockFCM.Options(serviceAccount: account, tls: tls)
        options.port = settings.port
        options.responseDelay = settings.delay
        options.recordRequests = settings.recordRequests
        if let n = settings.maxConcurrentStreams { options.maxConcurrentStreams = n }
        if let verdict = settings.verdict {
            options.hook = { target, body in
                switch verdict(target, body) {
                case .ok: return nil
                case .dead: return .unregistered
                case .injected(let status):
                    switch status {
                    case 503: return .unavailable(retryAfter: nil)
                    case 429: return .quotaExceeded(retryAfter: nil)
                    case 500: return .internalError
                    case 404: return .unregistered
                    default:
                        return .custom(
                            status: status, body: #"{"error":{"code":\#(status),"message":"injected failure","status":"UNKNOWN"}}"#, retryAfter: nil)
                    }
                }
            }
        }
        let mock = MockFCM(options: options, eventLoopGroup: group)
        try await mock.start()
        try account.json(tokenURI: mock.tokenURL).write(toFile: directory + "/mock-fcm.json", atomically: true, encoding: .utf8)
        return RunningMockFCM(mock: mock, serviceAccount: account, directory: directory)
    }

    public static let hms = ProviderMockModule(name: "hms", title: "HMS", platforms: [.huawei, .harmony]) { tls, directory, settings, group in
        var random = SystemRandomNumberGenerator()
        let appID = String(UInt64.random(in: 100_000_000...999_999_999, using: &random))
        let appSecret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined()
        var options = MockHMS.Options(appID: appID, appSecret: appSecret, tls: tls)
        // HarmonyOS Push Kit v3 on the same server: its service-account key goes to mock-harmony.json.
        let harmony = try TestHarmonyServiceAccount.generate()
        options.harmony = harmony
        options.port = settings.port
        options.responseDelay = settings.delay
        options.recordRequests = settings.recordRequests
        if let n = settings.maxConcurrentStreams { options.maxConcurrentStreams = n }
        if let verdict = settings.verdict {
            options.hook = { token, body in
                switch verdict(token, body) {
                case .ok: return nil
                case .dead: return .invalidToken
                case .injected(let status):
                    switch status {
                    case 429: return .tooManyRequests(retryAfter: nil)
                    case 503: return .trafficControl(retryAfter: nil)
                    case 500: return .internalError(retryAfter: nil)
                    case 401: return .oauthExpired
                    case 404, 410: return .invalidToken
                    default:
                        return .custom(status: status, body: #"{"code":"81000001","msg":"injected failure","requestId":"0"}"#, retryAfter: nil)
                    }
                }
            }
        }
        let mock = MockHMS(options: options, eventLoopGroup: group)
        try await mock.start()
        let keyFile = directory + "/mock-harmony.json"
        try harmony.json.write(toFile: keyFile, atomically: true, encoding: .utf8)
        try harmony.publicKeyPEM.write(toFile: directory + "/mock-harmony-public.pem", atomically: true, encoding: .utf8)
        return RunningMockHMS(mock: mock, harmonyKeyFile: keyFile)
    }

    public static let webpush = ProviderMockModule(
        name: "webpush", title: "Web Push", platforms: [.webpush, .unifiedpush],
        benchTargets: { platform, tokens, subscriber in
            let sub = subscriber ?? BenchSubscriber(endpointPrefix: "", p256dh: "", auth: "")
            guard platform == .webpush else {
                // UnifiedPush: the endpoints are the tokens (no encryption keys).
                return "\"tokens\":[" + tokens.map { "\"\(sub.endpointPrefix)\($0)\"" }.joined(separator: ",") + "]"
            }
            return "\"subscriptions\":["
                + tokens.map { "{\"endpoint\":\"\(sub.endpointPrefix)\($0)\",\"keys\":{\"p256dh\":\"\(sub.p256dh)\",\"auth\":\"\(sub.auth)\"}}" }
                .joined(separator: ",") + "]"
        },
        benchSubscriptions: [.webpush: true, .unifiedpush: false]
    ) { tls, directory, settings, group in
        var options = MockWebPush.Options(tls: tls)
        options.port = settings.port
        options.responseDelay = settings.delay
        options.recordRequests = settings.recordRequests
        if let n = settings.maxConcurrentStreams { options.maxConcurrentStreams = n }
        if let verdict = settings.verdict {
            options.hook = { id, plaintext in
                switch verdict(id, plaintext) {
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
        let mock = MockWebPush(options: options, eventLoopGroup: group)
        try await mock.start()
        return RunningMockWebPush(mock: mock, vapid: VAPIDKeys.generate())
    }
}

public struct RunningMockAPNs: RunningProviderMock {
    public let mock: MockAPNs
    public let key: TestAPNsKey
    /// The further keys of the same team (`mock-apns-app1.p8`, `mock-apns-app2.p8`).
    public let appKeys: [TestAPNsKey]
    public let directory: String
    public var name: String { "apns" }
    public var baseURL: String { mock.baseURL }

    public var configOverrides: [(key: String, value: ConfigValue)] {
        [
            ("ios.enabled", .bool(true)),
            ("ios.key_path", .string(directory + "/mock-apns.p8")),
            ("ios.key_id", .string(key.keyID)),
            ("ios.team_id", .string(key.teamID)),
            ("ios.endpoint", .string(mock.baseURL)),
            ("ios.channels_endpoint", .string(mock.channelsBaseURL)),
        ]
    }

    public var configDefaults: [(key: String, value: ConfigValue)] { [("ios.topic", .string("com.example.app"))] }

    public var configSnippet: String {
        """
        ios:
          enabled: true
          key_path: "\(directory)/mock-apns.p8"
          key_id: "\(key.keyID)"
          team_id: "\(key.teamID)"
          endpoint: "\(mock.baseURL)"
          channels_endpoint: "\(mock.channelsBaseURL)"
          topic: "com.example.app"

        """
    }

    public var bannerLine: String {
        "  APNs       \(mock.baseURL)   (key id \(key.keyID), team \(key.teamID), key \(directory)/mock-apns.p8; broadcast channels \(mock.channelsBaseURL))"
    }

    public func stop() async throws { try await mock.stop() }
}

public struct RunningMockFCM: RunningProviderMock {
    public let mock: MockFCM
    public let serviceAccount: TestServiceAccount
    public let directory: String
    public var name: String { "fcm" }
    public var baseURL: String { mock.baseURL }

    public var configOverrides: [(key: String, value: ConfigValue)] {
        [
            ("android.enabled", .bool(true)),
            ("android.key_path", .string(directory + "/mock-fcm.json")),
            ("android.endpoint", .string(mock.baseURL)),
        ]
    }

    public var configSnippet: String {
        """
        android:
          enabled: true
          key_path: "\(directory)/mock-fcm.json"
          endpoint: "\(mock.baseURL)"

        """
    }

    public var bannerLine: String {
        "  FCM        \(mock.baseURL)   (OAuth token endpoint \(mock.tokenURL), service account \(directory)/mock-fcm.json)"
    }

    public func stop() async throws { try await mock.stop() }
}

public struct RunningMockHMS: RunningProviderMock {
    public let mock: MockHMS
    /// The HarmonyOS service-account key file (`harmony.service_account_file`); its public key is
    /// beside it as `mock-harmony-public.pem`.
    public let harmonyKeyFile: String
    public var name: String { "hms" }

    public init(mock: MockHMS, harmonyKeyFile: String) {
        self.mock = mock
        self.harmonyKeyFile = harmonyKeyFile
    }
    public var baseURL: String { mock.baseURL }

    public var configOverrides: [(key: String, value: ConfigValue)] {
        [
            ("huawei.enabled", .bool(true)),
            ("huawei.appid", .string(mock.options.appID)),
            ("huawei.appsecret", .string(mock.options.appSecret)),
            ("huawei.endpoint", .string(mock.baseURL)),
            ("huawei.token_url", .string(mock.tokenURL)),
            ("harmony.enabled", .bool(true)),
            ("harmony.service_account_file", .string(harmonyKeyFile)),
            ("harmony.endpoint", .string(mock.baseURL)),
        ]
    }

    public var configSnippet: String {
        """
        huawei:
          enabled: true
          appid: "\(mock.options.appID)"
          appsecret: "\(mock.options.appSecret)"   # the mock's throwaway secret
          endpoint: "\(mock.baseURL)"
          token_url: "\(mock.tokenURL)"
        harmony:
          enabled: true
          service_account_file: "\(harmonyKeyFile)"
          endpoint: "\(mock.baseURL)"

        """
    }

    public var bannerLine: String {
        "  HMS        \(mock.baseURL)   (OAuth token endpoint \(mock.tokenURL), app id \(mock.options.appID); HarmonyOS v3 key \(harmonyKeyFile))"
    }

    public func stop() async throws { try await mock.stop() }
}

public struct RunningMockWebPush: RunningProviderMock {
    public let mock: MockWebPush
    /// A VAPID key pair for gateways sent at this mock.
    public let vapid: VAPIDKeys
    public var name: String { "webpush" }
    public var baseURL: String { mock.baseURL }

    public var configOverrides: [(key: String, value: ConfigValue)] {
        [
            ("webpush.enabled", .bool(true)),
            ("webpush.vapid_private_key", .string(vapid.privateKeyBase64URL)),
            ("webpush.vapid_subject", .string("mailto:mock@example.com")),
            ("webpush.allow_private_endpoints", .bool(true)),
            ("unifiedpush.enabled", .bool(true)),
        ]
    }

    public var configSnippet: String {
        """
        webpush:
          enabled: true
          vapid_private_key: "\(vapid.privateKeyBase64URL)"
          vapid_subject: "mailto:mock@example.com"
          allow_private_endpoints: true   # the mock listens on 127.0.0.1
        unifiedpush:
          enabled: true

        """
    }

    public var bannerLine: String {
        "  Web Push   \(mock.baseURL)/push/<id>   (VAPID public key \(vapid.publicKeyBase64URL))"
    }

    public func stop() async throws { try await mock.stop() }
}
