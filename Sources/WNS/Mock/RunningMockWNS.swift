import MockKit
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore
import WNS

/// The WNS mock as `pushgate mock`, `serve --mock` and the gateway tests run it: the gateway's
/// `wns` section points every send at the mock (`connect_to`), its token requests at the mock's
/// legacy Live endpoint, and `mock.notify.windows.com` resolves to a fixed public address (never
/// contacted: `connect_to` wins). Channel URIs look like `https://mock.notify.windows.com/?token=<id>`.
public struct RunningMockWNS: RunningProviderMock {
    public let mock: MockWNS
    public var name: String { "wns" }
    public var baseURL: String { mock.baseURL }
    /// The channel host the configuration resolves (any other `*.notify.windows.com` host goes to DNS).
    public static let channelHost = "mock.notify.windows.com"
    /// A public address for the channel host (TEST-NET ranges would be refused as documentation addresses).
    public static let channelAddress = "20.0.0.1"

    public init(mock: MockWNS) { self.mock = mock }

    /// A channel URI of the mock for `id`.
    public static func channel(_ id: String) -> String { "https://\(channelHost)/?token=\(id)" }

    /// Starts the mock with the throwaway CA's server TLS (http/1.1 only).
    public static func start(tls: TLSConfiguration, settings: MockRunSettings, group: any EventLoopGroup) async throws -> RunningMockWNS {
        var options = MockWNS.Options(tls: tls)
        options.port = settings.port
        options.recordRequests = settings.recordRequests
        options.responseDelay = settings.delay
        options.hold = settings.hold
        if let verdict = settings.verdict {
            options.hook = { channel, body in
                let id = channel.hasPrefix("/?token=") ? String(channel.dropFirst(8)) : channel
                switch verdict(id, body) {
                case .ok: return nil
                case .dead: return .status(410)
                case .injected(let status): return .status(status)
                }
            }
        }
        let mock = MockWNS(options: options, eventLoopGroup: group)
        try await mock.start()
        return RunningMockWNS(mock: mock)
    }

    public var configOverrides: [(key: String, value: ConfigValue)] {
        [
            ("wns.enabled", .bool(true)),
            ("wns.package_sid", .string(mock.options.packageSID)),
            ("wns.package_secret", .string(mock.options.packageSecret)),
            ("wns.token_url", .string(mock.liveTokenURL)),
            ("wns.connect_to", .string(mock.connectTo)),
            ("wns.resolve", .list(["\(Self.channelHost)=\(Self.channelAddress)"])),
        ]
    }

    public var configSnippet: String {
        """
        wns:
          enabled: true
          package_sid: "\(mock.options.packageSID)"
          package_secret: "\(mock.options.packageSecret)"   # the mock's throwaway secret
          token_url: "\(mock.liveTokenURL)"
          connect_to: "\(mock.connectTo)"   # every channel's notifications go to the mock
          resolve: ["\(Self.channelHost)=\(Self.channelAddress)"]

        """
    }

    public var bannerLine: String {
        "  WNS        \(mock.baseURL)   (channels \(Self.channel("<id>")); Live token endpoint \(mock.liveTokenURL))"
    }

    public func stop() async throws { try await mock.stop() }
}

extension ProviderMockModule {
    /// The WNS mock: `MockRegistry` lists it. Bench ids become channel URIs of the mock.
    public static let wns = ProviderMockModule(
        name: "wns", title: "WNS", platforms: [.wns],
        benchTargets: { _, tokens, _ in
            "\"tokens\":[" + tokens.map { "\"\(RunningMockWNS.channel($0))\"" }.joined(separator: ",") + "]"
        }
    ) { tls, _, settings, group in
        try await RunningMockWNS.start(tls: tls, settings: settings, group: group)
    }
}
