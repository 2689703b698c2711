import Foundation
import GatewayCore
import MockProviders
import NIOCore
import NIOPosix

/// The built-in mock providers on loopback (TLS with a throwaway CA), one per `MockRegistry`
/// module, and the configuration that points a gateway at them.
final class MockStack: Sendable {
    let pki: TestPKI
    let mocks: [any RunningProviderMock]
    let directory: String
    let keepDirectory: Bool
    /// One key pair shared by the bench's Web Push subscription ids (see `registerBenchSubscribers`).
    let benchSubscriber = TestWebPushSubscriber(id: "bench")

    private init(pki: TestPKI, mocks: [any RunningProviderMock], directory: String, keepDirectory: Bool) {
        self.pki = pki
        self.mocks = mocks
        self.directory = directory
        self.keepDirectory = keepDirectory
    }

    /// How to run the mocks (ports, scripted failures and latency, recording), by mock name (`apns` ...).
    struct Settings: Sendable {
        var ports: [String: Int] = [:]
        /// Where the CA PEM, the mocks' keys and accounts and the snippet go (nil: a temp dir, removed on stop).
        var directory: String? = nil
        /// Added before every answer, per mock.
        var latencyMs: [String: Int] = [:]
        /// Keep every request in memory (tests, `serve --mock`). Off for `pushgate mock` / `bench`: the recorder counts instead.
        var recordRequests = true
        /// Counts per token, latency, scripted failure rates (nil: the mocks answer as scripted only).
        var recorder: MockRecorder? = nil
        /// CA certificates (PEM) the mock APNs accepts client certificates from (certificate-based trust).
        var apnsClientCAPEM: [String] = []
    }

    static func start(_ settings: Settings) async throws -> MockStack {
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
                if module.name == "apns" { run.clientCertificateRootsPEM = settings.apnsClientCAPEM }
                if let recorder = settings.recorder, let provider = MockRecorder.Provider(rawValue: module.name) {
                    run.verdict = { token, body in
                        switch recorder.observe(provider, token: token, body: body) {
                        case .ok: return .ok
                        case .dead: return .dead
                        case .injected(let status): return .injected(status: status)
                        }
                    }
                }
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

    /// The mocks at the ports of the `mock:` section (`mock.<name>_port`, 0: any free port).
    static func start(raw: RawConfig) async throws -> MockStack {
        var settings = Settings()
        for module in MockRegistry.modules { settings.ports[module.name] = raw.section("mock")[MockConfig.port(module.name)] }
        return try await start(settings)
    }

    /// The running mock Web Push service (the bench and the control port register subscribers there).
    var webpush: MockWebPush {
        guard let m = mocks.lazy.compactMap({ $0 as? RunningMockWebPush }).first else { preconditionFailure("no Web Push mock registered") }
        return m.mock
    }

    /// The running mock APNs.
    var apns: RunningMockAPNs? { mocks.lazy.compactMap { $0 as? RunningMockAPNs }.first }

    /// The running mock FCM.
    var fcm: RunningMockFCM? { mocks.lazy.compactMap { $0 as? RunningMockFCM }.first }

    /// Config keys that point a gateway at these mocks.
    var overrides: [(key: String, value: ConfigValue)] {
        [("core.ca_file", .string(directory + "/mock-ca.pem"))] + mocks.flatMap(\.configOverrides)
    }

    func apply(to raw: inout RawConfig) {
        for (k, v) in overrides { raw.set(k, v) }
        for m in mocks {
            for (k, v) in m.configDefaults where raw.values[k] == .string("") { raw.set(k, v) }
            for (k, v) in m.configDefaults { raw.setInApps(k, v) }
        }
    }

    var banner: String {
        "pushgate: mock providers on loopback (throwaway CA \(directory)/mock-ca.pem):\n"
            + mocks.map { $0.bannerLine + "\n" }.joined()
    }

    /// The config snippet that points another gateway at these mocks.
    var configSnippet: String {
        "core:\n  ca_file: \"\(directory)/mock-ca.pem\"\n" + mocks.map(\.configSnippet).joined()
    }

    func stop() async throws {
        for m in mocks { try await m.stop() }
        if !keepDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }
}
