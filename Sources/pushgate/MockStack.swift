import Foundation
import MockProviders
import NIOPosix
import Server

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

    private init(pki: TestPKI, apnsKey: TestAPNsKey, apns: MockAPNs, serviceAccount: TestServiceAccount, fcm: MockFCM, webpush: MockWebPush, directory: String) {
        self.pki = pki
        self.apnsKey = apnsKey
        self.apns = apns
        self.serviceAccount = serviceAccount
        self.fcm = fcm
        self.webpush = webpush
        self.directory = directory
    }

    static func start(apnsPort: Int = 0, fcmPort: Int = 0, webpushPort: Int = 0) async throws -> MockStack {
        let group = MultiThreadedEventLoopGroup.singleton
        let pki = try TestPKI.generate()
        let tls = try pki.serverTLSConfiguration()
        let apnsKey = TestAPNsKey.generate()
        var apnsOptions = MockAPNs.Options(key: apnsKey, tls: tls)
        apnsOptions.port = apnsPort
        let apns = MockAPNs(options: apnsOptions, eventLoopGroup: group)
        try await apns.start()

        let account = try TestServiceAccount.generate()
        var fcmOptions = MockFCM.Options(serviceAccount: account, tls: tls)
        fcmOptions.port = fcmPort
        let fcm = MockFCM(options: fcmOptions, eventLoopGroup: group)
        try await fcm.start()

        var wpOptions = MockWebPush.Options(tls: tls)
        wpOptions.port = webpushPort
        let webpush = MockWebPush(options: wpOptions, eventLoopGroup: group)
        try await webpush.start()

        let dir = NSTemporaryDirectory() + "pushgate-mock-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try pki.caCertificatePEM.write(toFile: dir + "/mock-ca.pem", atomically: true, encoding: .utf8)
        try apnsKey.write(to: dir + "/mock-apns.p8")
        try account.json(tokenURI: fcm.tokenURL).write(toFile: dir + "/mock-fcm.json", atomically: true, encoding: .utf8)
        return MockStack(pki: pki, apnsKey: apnsKey, apns: apns, serviceAccount: account, fcm: fcm, webpush: webpush, directory: dir)
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
          Web Push   \(webpush.baseURL)

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

        """
    }

    func stop() async throws {
        try await apns.stop()
        try await fcm.stop()
        try await webpush.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
