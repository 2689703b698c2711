import Foundation
import MockKit
import NIOCore
import NIOPosix
import ProviderKit
import WebPush

/// The built-in mock providers on loopback (TLS with a throwaway CA), one per `MockRegistry`
/// module, and the configuration that points a gateway at them: what `pushgate serve --mock`,
/// `pushgate mock`, `pushgate bench` and the gateway tests run.
public final class MockStack: Sendable {
    public let pki: TestPKI
    public let mocks: [any RunningProviderMock]
    public let directory: String
    let keepDirectory: Bool
    /// One key pair shared by the bench's Web Push subscription ids.
    public let benchSubscriber = TestWebPushSubscriber(id: "bench")

    private init(pki: TestPKI, mocks: [any RunningProviderMock], directory: String, keepDirectory: Bool) {
        self.pki = pki
        self.mocks = mocks
        self.directory = directory
        self.keepDirectory = keepDirectory
    }

    /// How to run the mocks (ports, latency, recording, anything else per mock), by mock name (`apns` ...).
    public struct Settings: Sendable {
        public var ports: [String: Int] = [:]
        /// Where the CA PEM, the mocks' keys and accounts and the snippet go (nil: a temp dir, removed on stop).
        public var directory: String? = nil
        /// Added before every answer, per mock.
        public var latencyMs: [String: Int] = [:]
        /// SETTINGS_MAX_CONCURRENT_STREAMS per mock (absent: the mock's default, 1000).
        public var maxConcurrentStreams: [String: Int] = [:]
        /// Keep every request in memory (tests, `serve --mock`). Off for `pushgate mock` / `bench`: a recorder counts instead.
        public var recordRequests = true
        /// Sets the rest of one mock's run settings (verdicts, client certificate roots, holds), given its name.
        public var customize: (@Sendable (_ name: String, _ run: inout MockRunSettings) -> Void)? = nil

        public init(
            ports: [String: Int] = [:], directory: String? = nil, latencyMs: [String: Int] = [:], recordRequests: Bool = true,
            customize: (@Sendable (_ name: String, _ run: inout MockRunSettings) -> Void)? = nil
        ) {
            self.ports = ports
            self.directory = directory
            self.latencyMs = latencyMs
            self.recordRequests = recordRequests
            self.customize = customize
        }
    }

    public static func start(_ settings: Settings) async throws -> MockStack {
        let group = MultiThreadedEventLoopGroup.singleton
        let pki = try TestPKI.generate()
        let tls = try pki.serverTLSConfiguration()
        let dir = settings.directory ?? (NSTemporaryDirectory() + "pushgate-mock-\(getpid())")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try pki.caCertificatePEM.write(toFile: dir + "/mock-ca.pem", atomically: true, encoding: .utf8)
        // The mocks' own certificate (localhost, 127.0.0.1, ::1; signed by mock-ca.pem): also good for
        // trying `core.ssl` on a gateway (`core.cert_path` / `core.key_path`).
        try pki.leafCertificatePEM.write(toFile: dir + "/mock-server-cert.pem", atomically: true, encoding: .utf8)
        try pki.leafPrivateKeyPEM.write(toFile: dir + "/mock-server-key.pem", atomically: true, encoding: .utf8)
        chmod(dir + "/mock-server-key.pem", 0o600)
        var mocks: [any RunningProviderMock] = []
        do {
            for module in MockRegistry.modules {
                var run = MockRunSettings(
                    port: settings.ports[module.name] ?? 0, latencyMs: settings.latencyMs[module.name] ?? 0,
                    recordRequests: settings.recordRequests)
                run.maxConcurrentStreams = settings.maxConcurrentStreams[module.name]
                settings.customize?(module.name, &run)
                mocks.append(try await module.start(tls, dir, run, group))
            }
        } catch {
            for m in mocks { try? await m.stop() }
            throw error
        }
        let stack = MockStack(pki: pki, mocks: mocks, directory: dir, keepDirectory: settings.directory != nil)
        try stack.configSnippet.write(toFile: dir + "/gateway-snippet.yml", atomically: true, encoding: .utf8)
        return stack
    }

    /// The running mock of a type (`stack.mock(RunningMockAPNs.self)`).
    public func mock<M: RunningProviderMock>(_ type: M.Type) -> M? { mocks.lazy.compactMap { $0 as? M }.first }

    /// The running mock Web Push service (the bench and the control port register subscribers there).
    public var webpush: MockWebPush {
        guard let m = mock(RunningMockWebPush.self) else { preconditionFailure("no Web Push mock registered") }
        return m.mock
    }

    /// The running mock APNs.
    public var apns: RunningMockAPNs? { mock(RunningMockAPNs.self) }

    /// The running mock FCM.
    public var fcm: RunningMockFCM? { mock(RunningMockFCM.self) }

    /// The CA the mocks' certificates chain to (`core.ca_file`).
    public var caFile: String { directory + "/mock-ca.pem" }

    /// Config keys that point a gateway at these mocks.
    public var overrides: [(key: String, value: ConfigValue)] {
        [("core.ca_file", .string(caFile))] + mocks.flatMap(\.configOverrides)
    }

    public var banner: String {
        "pushgate: mock providers on loopback (throwaway CA \(caFile)):\n"
            + mocks.map { $0.bannerLine + "\n" }.joined()
    }

    /// The config snippet that points another gateway at these mocks.
    public var configSnippet: String {
        "core:\n  ca_file: \"\(caFile)\"\n" + mocks.map(\.configSnippet).joined()
    }

    public func stop() async throws {
        for m in mocks { try await m.stop() }
        if !keepDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }
}
