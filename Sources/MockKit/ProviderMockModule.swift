import Foundation
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore

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

    public var delay: TimeAmount? { latencyMs > 0 ? .milliseconds(Int64(latencyMs)) : nil }
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
    /// What it kept, by name (`GET /__mock/<name>` on `pushgate mock`'s control port).
    var records: [MockRecords] { get }
    func stop() async throws
}

extension RunningProviderMock {
    public var configDefaults: [(key: String, value: ConfigValue)] { [] }
    public var records: [MockRecords] { [] }
}

/// What a running mock kept (with `--record`), served by `pushgate mock`'s control port as
/// `GET /__mock/<name>` (a JSON array).
public struct MockRecords: Sendable {
    public var name: String
    public var json: @Sendable () -> String

    public init(_ name: String, json: @escaping @Sendable () -> String) {
        self.name = name
        self.json = json
    }
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
