import Foundation
import Logging
import ProviderKit
import PushgateCore

/// The APNs provider as the gateway sees it: the `ios:` section, its ingest checks, how it is built.
public struct APNsModule: ProviderModule {
    public init() {}

    /// The `ios:` keys (gorush's, plus Pushgate's `topic`, `endpoint` and `connections`).
    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let keyPath = Setting<String>("key_path", "", secrecy: .identifier)
        public static let keyBase64 = Setting<String>("key_base64", "", secrecy: .secret)
        public static let keyType = Setting<String>("key_type", "p8")
        public static let keyID = Setting<String>("key_id", "", secrecy: .identifier)
        public static let teamID = Setting<String>("team_id", "")
        public static let production = Setting<Bool>("production", false)
        public static let maxTokens = ProviderSettings.maxTokens(10000)
        public static let maxRetry = ProviderSettings.maxRetry(3)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(512)
        public static let connections = Setting<Int>("connections", 2, range: 1...1000)
        public static let topic = Setting<String>("topic", "")
        public static let endpoint = Setting<String>("endpoint", "")
    }

    public var platforms: [Platform] { [.ios] }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                "ios",
                keys: [
                    Keys.enabled.key, Keys.keyPath.key, Keys.keyBase64.key, Keys.keyType.key, Keys.keyID.key, Keys.teamID.key,
                    Keys.production.key, Keys.maxTokens.key, Keys.maxRetry.key, Keys.maxConcurrentPushes.key, Keys.connections.key,
                    Keys.topic.key, Keys.endpoint.key,
                ], ignoredKeys: ["password"])
        ]
    }

    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        if let c = n.collapseID, c.utf8.count > 64 {
            return IngestProblem(message: "Invalid collapse_id.", detail: "collapse_id: apns-collapse-id is at most 64 bytes")
        }
        return nil
    }

    /// The provider's configuration from the `ios:` section (the key from `key_path`, else `key_base64`).
    public static func configuration(_ s: SectionValues) throws(APNsConfigurationError) -> APNsConfiguration {
        let keyB64 = s[Keys.keyBase64]
        if s[Keys.keyPath].isEmpty, !keyB64.isEmpty {
            guard let data = Data(base64Encoded: keyB64), let pem = String(data: data, encoding: .utf8) else {
                throw APNsConfigurationError(key: s.path(Keys.keyBase64), "not base64 of a .p8 PEM key")
            }
            return try APNsConfiguration(
                keyPEM: pem, keyID: s[Keys.keyID], teamID: s[Keys.teamID], production: s[Keys.production], topic: s[Keys.topic],
                endpoint: s[Keys.endpoint], maxRetry: s[Keys.maxRetry], connectionsPerEnvironment: s[Keys.connections])
        }
        return try APNsConfiguration(
            keyPath: s[Keys.keyPath], keyID: s[Keys.keyID], teamID: s[Keys.teamID], production: s[Keys.production], topic: s[Keys.topic],
            endpoint: s[Keys.endpoint], maxRetry: s[Keys.maxRetry], connectionsPerEnvironment: s[Keys.connections])
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config["ios"]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let apnsConfig: APNsConfiguration
        do {
            apnsConfig = try Self.configuration(s)
        } catch {
            throw ConfigError(key: error.key, problem: error.problem)
        }
        let provider: APNsProvider
        do {
            provider = try APNsProvider(
                configuration: apnsConfig, poolConfiguration: context.poolConfiguration,
                eventLoopGroup: context.eventLoopGroup, logger: Logger(label: "pushgate.apns"))
        } catch {
            throw ConfigError(key: error.key, problem: error.problem)
        }
        return ProviderBuild(
            providers: [BuiltProvider(provider: provider, maxRetry: apnsConfig.maxRetry, concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() })
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "apns-id" }
}
