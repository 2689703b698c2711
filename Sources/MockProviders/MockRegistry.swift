import APNs
import FCM
import Foundation
import Harmony
@_exported import HarmonyMock
import HonorMock
import Huawei
@_exported import HuaweiMock
@_exported import MockKit
import NIOCore
import NIOSSL
import OppoMock
import ProviderKit
import PushgateCore
import VivoMock
import WNSMock
import WebPush
import XiaomiMock

/// Every provider's mock, for tests, `pushgate serve --mock`, `pushgate mock` and `pushgate bench`.
/// Adding a provider: one line here next to the one in `ProviderRegistry`.
public enum MockRegistry {
    public static let modules: [ProviderMockModule] = [.apns, .fcm, .hms, .webpush, .wns, .honor, .xiaomi, .oppo, .vivo]

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

    /// `harmony-messages`: what the v3 endpoint accepted (each message's push-type header, token,
    /// bearer JWT and payload).
    public var records: [MockRecords] {
        let mock = self.mock
        return [
            MockRecords("harmony-messages") {
                var w = JSONWriter()
                w.raw("[")
                for (i, m) in mock.v3Messages.enumerated() {
                    var first = true
                    w.raw(i == 0 ? "{" : ",{")
                    w.key("push_type", first: &first)
                    w.int(m.pushType)
                    w.key("token", first: &first)
                    w.string(m.token)
                    w.key("jwt", first: &first)
                    w.string(m.jwt)
                    w.key("payload", first: &first)
                    w.raw(m.payloadJSON)
                    w.raw("}")
                }
                w.raw("]")
                return w.string
            }
        ]
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
