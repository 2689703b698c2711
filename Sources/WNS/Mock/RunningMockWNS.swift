import MockProviders
import NIOCore
import NIOSSL
import ProviderKit

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
