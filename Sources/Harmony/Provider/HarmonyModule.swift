import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// HarmonyOS Push Kit v3.
    public static let harmony = Platform(6, "harmony", aliases: ["harmonyos"])
}

/// HarmonyOS Push Kit v3 (platform 6, `harmony`) as the gateway sees it: the `harmony:` section,
/// the ingest checks and how the provider is built. It lives beside HMS v1 (same answers, same
/// mock server) but is its own platform: HarmonyOS 5+ devices take only v3, with a service-account
/// JWT instead of HMS's OAuth client credentials, and their tokens cannot be told apart from HMS ones.
public struct HarmonyModule: ProviderModule {
    public init() {}

    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let serviceAccountFile = Setting<String>(
            "service_account_file", "", secrecy: .identifier,
            doc: "(new) path of the Push Kit service-account key file (JSON: project_id, key_id, private_key, sub_account)")
        public static let projectID = Setting<String>(
            "project_id", "", doc: "(new) project id in `/v3/{projectId}/messages:send`; empty: the key file's `project_id`")
        public static let endpoint = Setting<String>(
            "endpoint", HarmonyConfiguration.defaultEndpoint, doc: "(new) Push Kit base URL override, for tests and proxies")
        public static let maxTokens = ProviderSettings.maxTokens(500)
        public static let maxRetry = ProviderSettings.maxRetry(0)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(2048)
        public static let maxConnections = ProviderSettings.maxConnections(32)
    }

    public var platforms: [Platform] { [.harmony] }
    public var requestMembers: [RequestMember] { HarmonyRequestMembers.all }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                "harmony",
                keys: [
                    Keys.enabled.key, Keys.serviceAccountFile.key, Keys.projectID.key, Keys.endpoint.key, Keys.maxTokens.key,
                    Keys.maxRetry.key, Keys.maxConcurrentPushes.key, Keys.maxConnections.key,
                ], about: "HarmonyOS Push Kit v3 (platform `6`, docs/harmonyos.md).", inGorush: false)
        ]
    }

    /// `harmony_payload` is Push Kit v3's own; a background (push type 6) message is what
    /// `coalesce_seconds` applies to by default.
    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(
            maxTokens: defaultMaxTokens(for: platform),
            exclusiveMembers: [
                .init(["harmony_payload"], problem: "only for platform harmony (HarmonyOS Push Kit v3); {platform} has no such field")
            ],
            backgroundPush: .init("harmony-background") { n in HarmonyMessageMapper.pushType(n) == .background })
    }

    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        HarmonyMessageMapper.problem(n).map { IngestProblem(message: "Invalid HarmonyOS notification.", detail: $0) }
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config["harmony"]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let path = s[Keys.serviceAccountFile]
        guard !path.isEmpty else {
            throw ConfigError(key: "harmony.service_account_file", problem: "required when harmony.enabled is true")
        }
        let provider: HarmonyProvider
        do {
            let account = try HarmonyServiceAccount(path: path)
            let configuration = try HarmonyConfiguration(
                serviceAccount: account, projectID: s[Keys.projectID], endpoint: s[Keys.endpoint], maxRetry: s[Keys.maxRetry])
            provider = try HarmonyProvider(
                configuration: configuration, poolConfiguration: context.poolConfiguration(maxConnections: s[Keys.maxConnections]),
                eventLoopGroup: context.eventLoopGroup)
        } catch {
            throw ConfigError(key: "harmony", problem: error.description)
        }
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: s[Keys.maxRetry], concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() })
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "requestId" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "HarmonyOS", color: "#c7254e") }
}
