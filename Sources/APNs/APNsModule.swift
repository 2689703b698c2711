import Foundation
import Logging
import ProviderKit
import PushgateCore

extension Platform {
    /// Apple Push Notification service (gorush's 1).
    public static let ios = Platform(1, "ios", aliases: ["apns"])
}

/// The APNs provider as the gateway sees it: the `ios:` section, its ingest checks, how it is built.
public struct APNsModule: ProviderModule {
    public init() {}

    /// The `ios:` keys (gorush's, plus Pushgate's `topic`, `endpoint` and `connections`).
    public enum Keys {
        public static let enabled = ProviderSettings.enabled
        public static let keyPath = Setting<String>(
            "key_path", "", secrecy: .identifier,
            doc:
                "token auth: the `.p8` key (P-256 PKCS#8); certificate auth: a `.p12` or `.pem` client certificate with its key ([docs/apns-certificates.md](docs/apns-certificates.md))"
        )
        public static let keyBase64 = Setting<String>(
            "key_base64", "", secrecy: .secret,
            doc:
                "token auth: the `.p8` key (P-256 PKCS#8); certificate auth: a `.p12` or `.pem` client certificate with its key ([docs/apns-certificates.md](docs/apns-certificates.md))"
        )
        /// `p12`, `pem` or `p8`; "" = from `key_path`'s extension (which wins when it names one, as in
        /// gorush), or from the bytes of `key_base64`.
        public static let keyType = Setting<String>(
            "key_type", "",
            doc:
                "`p8`, `p12` or `pem`; empty: from `key_path`'s extension (which decides when it is one of these, as in gorush) or from the bytes of `key_base64`"
        )
        /// The `.p12` password, or the passphrase of an encrypted private key in a `.pem`.
        public static let password = Setting<String>(
            "password", "", secrecy: .secret, doc: "the `.p12` password / the passphrase of an encrypted key in a `.pem` (secret)")
        public static let keyID = Setting<String>("key_id", "", secrecy: .identifier, doc: "JWT `kid`: the key id of the `.p8` key (token auth only)")
        public static let teamID = Setting<String>("team_id", "", doc: "JWT `iss`: the Apple developer team id (token auth only)")
        /// Further provider-token keys, each restricted to an environment and/or a set of topics
        /// (Apple's team-scoped and topic-specific keys): a list of mappings.
        public static let keys = Setting<[String]>(
            "keys", [], secrecy: .secret,
            doc:
                "(new) further `.p8` token keys, a list of mappings `{key_id, team_id (default ios.team_id), key_path or key_base64, environment: sandbox|production (default both), topics: [bundle ids] (default all)}`; each push is signed by the most specific key that covers its topic and environment ([docs/apns-keys.md](docs/apns-keys.md))"
        )
        public static let production = Setting<Bool>(
            "production", false, doc: "default environment; per notification `\"production\": true` or `\"development\": true`")
        public static let maxTokens = ProviderSettings.maxTokens(10000)
        public static let maxRetry = ProviderSettings.maxRetry(3)
        public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(2048)
        public static let connections = Setting<Int>(
            "connections", 2, range: 1...1000,
            doc: "(new) HTTP/2 connections per environment opened as soon as deliveries overlap and kept open while idle (the floor)")
        public static let maxConnections = Setting<Int>(
            "max_connections", APNsConfiguration.defaultMaxConnections, range: 1...1000,
            doc:
                "(new) HTTP/2 connections per environment at most (at least `ios.connections`): another opens while deliveries wait and every open one has all the streams APNs allows (SETTINGS_MAX_CONCURRENT_STREAMS) in use; those beyond `ios.connections` close after 60 s without a stream ([docs/http2-pool.md](docs/http2-pool.md))"
        )
        public static let topic = Setting<String>(
            "topic", "", doc: "(new) bundle id when a notification has no `topic` (certificate auth: defaults to the certificate's bundle id)")
        public static let endpoint = Setting<String>(
            "endpoint", "", doc: "(new) base URL override for both environments, e.g. `https://localhost:8443`")
        /// Base URL of the broadcast channel-management API, for both environments (tests, proxies);
        /// "" = Apple's (`api-manage-broadcast[.sandbox].push.apple.com`, ports 2196 / 2195).
        public static let channelsEndpoint = Setting<String>(
            "channels_endpoint", "",
            doc:
                "(new) base URL of the broadcast channel-management API for both environments (default Apple's `https://api-manage-broadcast[.sandbox].push.apple.com:2196` / `:2195`)"
        )
    }

    public var platforms: [Platform] { [.ios] }
    public var requestMembers: [RequestMember] { APNsRequestMembers.all }

    public var sections: [ConfigSection] {
        [
            ConfigSection(
                "ios",
                keys: [
                    Keys.enabled.key, Keys.keyPath.key, Keys.keyBase64.key, Keys.keyType.key, Keys.keyID.key, Keys.teamID.key,
                    Keys.production.key, Keys.maxTokens.key, Keys.maxRetry.key, Keys.maxConcurrentPushes.key, Keys.connections.key,
                    Keys.maxConnections.key, Keys.topic.key, Keys.endpoint.key, Keys.channelsEndpoint.key, Keys.password.key, Keys.keys.key,
                ], about: "Apple Push Notification service (platform `1`).")
        ]
    }

    /// `data.aps` would clash with the payload's own `aps`; broadcast channels are APNs'.
    public func requestRules(for platform: Platform) -> PlatformRules {
        PlatformRules(
            maxTokens: defaultMaxTokens(for: platform), reservedDataKeys: [.init("aps", reservedFor: "the APNs payload")],
            exclusiveMembers: [.init(["channels"], problem: "APNs broadcast channels are for platform 1 (ios) only")],
            backgroundPush: APNsPayload.backgroundPush)
    }

    /// gorush's series.
    public func counters(for platform: Platform) -> PlatformCounters {
        PlatformCounters(
            success: "gorush_ios_success", successHelp: "Number of iOS success count", error: "gorush_ios_error",
            errorHelp: "Number of iOS fail count", gorush: true)
    }

    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        if let c = n.collapseID, c.utf8.count > 64 {
            return IngestProblem(message: "Invalid collapse_id.", detail: "collapse_id: apns-collapse-id is at most 64 bytes")
        }
        return APNsBroadcast.check(n)
    }

    /// The key type `ios.key_type` / `key_path`'s extension / the bytes of `key_base64` name, and a
    /// warning when `key_type` says otherwise than the extension (the extension wins, as in gorush).
    static func keyType(_ s: SectionValues, bytes: [UInt8]?) throws(APNsConfigurationError) -> (APNsKeyType, warning: String?) {
        let declared = s[Keys.keyType].trimmingCharacters(in: .whitespaces).lowercased()
        var explicit: APNsKeyType?
        if !declared.isEmpty {
            guard let t = APNsKeyType(rawValue: declared.hasPrefix(".") ? String(declared.dropFirst()) : declared) else {
                throw APNsConfigurationError(key: s.path(Keys.keyType), "must be p12, pem or p8, got \"\(s[Keys.keyType])\"")
            }
            explicit = t
        }
        let path = s[Keys.keyPath]
        if !path.isEmpty, let fromExtension = APNsKeyType.of(path: path) {
            var warning: String?
            if let explicit, explicit != fromExtension {
                warning =
                    "\(s.path(Keys.keyType)) is \"\(explicit.rawValue)\" but \(s.path(Keys.keyPath)) ends in .\(fromExtension.rawValue): read as \(fromExtension.rawValue) (the extension decides, as in gorush)"
            }
            return (fromExtension, warning)
        }
        if let explicit { return (explicit, nil) }
        if let bytes, let sniffed = APNsKeyType.sniff(bytes) { return (sniffed, nil) }
        let what = path.isEmpty ? s.path(Keys.keyBase64) : path
        throw APNsConfigurationError(key: s.path(Keys.keyType), "cannot tell what \(what) holds: set it to p12, pem or p8")
    }

    /// The provider's configuration from the `ios:` section (the key from `key_path`, else `key_base64`):
    /// token auth with a `.p8`, certificate auth with a `.p12` / `.pem` (and `password`).
    public static func configuration(_ s: SectionValues, now: Date = Date()) throws(APNsConfigurationError) -> APNsConfiguration {
        try configurationAndWarnings(s, now: now).configuration
    }

    /// `configuration(_:now:)` and the start-up warnings it has (`key_type` disagreeing with the
    /// extension, a certificate for the other environment only).
    public static func configurationAndWarnings(
        _ s: SectionValues, now: Date = Date()
    ) throws(APNsConfigurationError) -> (configuration: APNsConfiguration, warnings: [String]) {
        var (configuration, warnings) = try configurationAndWarningsWithoutPool(s, now: now)
        configuration.maxConnectionsPerEnvironment = s[Keys.maxConnections]
        return (configuration, warnings)
    }

    private static func configurationAndWarningsWithoutPool(
        _ s: SectionValues, now: Date
    ) throws(APNsConfigurationError) -> (configuration: APNsConfiguration, warnings: [String]) {
        let scoped = try APNsSigningKey.parse(
            s[Keys.keys], path: s.path(Keys.keys), defaultTeamID: s[Keys.teamID].trimmingCharacters(in: .whitespacesAndNewlines),
            read: { (p, k) throws(APNsConfigurationError) in try readKeyFile(p, key: k) })
        if !scoped.isEmpty && s[Keys.keyPath].isEmpty && s[Keys.keyBase64].isEmpty {
            var configuration = try APNsConfiguration(
                signingKeys: scoped, production: s[Keys.production], topic: s[Keys.topic], endpoint: s[Keys.endpoint],
                maxRetry: s[Keys.maxRetry], connectionsPerEnvironment: s[Keys.connections])
            try configuration.setChannelsEndpoint(s[Keys.channelsEndpoint], key: s.path(Keys.channelsEndpoint))
            try checkDefaultSigningKey(configuration, s)
            return (configuration, [])
        }
        let single = try singleKeyConfiguration(s, now: now)
        var configuration = single.configuration
        if !scoped.isEmpty {
            guard case .token = configuration.credentials else {
                throw APNsConfigurationError(
                    key: s.path(Keys.keys), "token keys cannot be combined with certificate authentication (\(s.path(Keys.keyPath)) is a certificate)"
                )
            }
            configuration.signingKeys += scoped
            try checkDefaultSigningKey(configuration, s)
        }
        return (configuration, single.warnings)
    }

    /// A start error when no token key signs for the configured default: `ios.topic` (when set) in
    /// the `ios.production` environment.
    static func checkDefaultSigningKey(_ c: APNsConfiguration, _ s: SectionValues) throws(APNsConfigurationError) {
        let environment = APNsEnvironment(production: c.production).rawValue
        if let topic = c.topic {
            guard c.signingKeyIndex(topic: topic, bundleID: topic, production: c.production) != nil else {
                throw APNsConfigurationError(
                    key: s.path(Keys.keys),
                    "no token key signs for \(s.path(Keys.topic)) \(topic) in the \(environment) environment (\(s.path(Keys.production)): \(c.production)): add a key for it or widen a key's environment / topics"
                )
            }
        } else if !c.signingKeys.contains(where: { $0.environment == nil || $0.environment?.isProduction == c.production }) {
            throw APNsConfigurationError(
                key: s.path(Keys.keys),
                "no token key signs in the \(environment) environment (\(s.path(Keys.production)): \(c.production)), the default one")
        }
    }

    /// The configuration of `ios.key_path` / `ios.key_base64` alone.
    static func singleKeyConfiguration(
        _ s: SectionValues, now: Date
    ) throws(APNsConfigurationError) -> (configuration: APNsConfiguration, warnings: [String]) {
        let keyB64 = s[Keys.keyBase64]
        let path = s[Keys.keyPath]
        var bytes: [UInt8]?
        var sourceKey = s.path(Keys.keyPath)
        var source = path
        if path.isEmpty, !keyB64.isEmpty {
            guard let data = Data(base64Encoded: keyB64, options: .ignoreUnknownCharacters), !data.isEmpty else {
                throw APNsConfigurationError(key: s.path(Keys.keyBase64), "not base64 of a .p8, .p12 or .pem file")
            }
            bytes = Array(data)
            sourceKey = s.path(Keys.keyBase64)
            source = "the \(s.path(Keys.keyBase64)) value"
        }
        if path.isEmpty && bytes == nil {
            throw APNsConfigurationError(key: s.path(Keys.keyPath), "missing (path of the APNs .p8 auth key, or of a .p12 / .pem certificate)")
        }
        var (type, warning) = try keyType(s, bytes: bytes)
        let warnings = warning.map { [$0] } ?? []
        if type == .p12 || type == .pem {
            if bytes == nil {
                bytes = try readKeyFile(path, key: sourceKey)
            }
        }
        // A `.pem` holding a private key and no certificate is an auth key saved under another
        // name (Pushgate read any key_path as a .p8 before certificates were supported).
        if type == .pem, let b = bytes, APNsKeyType.sniff(b) == .p8 {
            type = .p8
        }
        if type == .p12 || type == .pem {
            let certificate = try APNsCertificate.load(type: type, bytes: bytes ?? [], password: s[Keys.password], source: source, key: sourceKey)
            var warnings = warnings
            if certificate.development != certificate.production {
                let only = certificate.production ? "production" : "development (sandbox)"
                if s[Keys.production] != certificate.production {
                    warnings.append(
                        "the APNs certificate in \(source) is for the \(only) environment only but \(s.path(Keys.production)) is \(s[Keys.production]): APNs will answer BadCertificateEnvironment"
                    )
                }
            }
            var configuration = try APNsConfiguration(
                certificate: certificate, production: s[Keys.production], topic: s[Keys.topic], endpoint: s[Keys.endpoint],
                maxRetry: s[Keys.maxRetry], connectionsPerEnvironment: s[Keys.connections], now: now, key: sourceKey)
            try configuration.setChannelsEndpoint(s[Keys.channelsEndpoint], key: s.path(Keys.channelsEndpoint))
            return (configuration, warnings)
        }
        // The .p8 auth key: token auth.
        let keyBytes: [UInt8]
        if let bytes { keyBytes = bytes } else { keyBytes = try readKeyFile(path, key: sourceKey) }
        guard let pem = String(bytes: keyBytes, encoding: .utf8) else {
            throw APNsConfigurationError(key: sourceKey, "\(source) is not a P-256 PKCS#8 private key (an APNs .p8 auth key)")
        }
        do {
            var configuration = try APNsConfiguration(
                keyPEM: pem, keyID: s[Keys.keyID], teamID: s[Keys.teamID], production: s[Keys.production], topic: s[Keys.topic],
                endpoint: s[Keys.endpoint], maxRetry: s[Keys.maxRetry], connectionsPerEnvironment: s[Keys.connections])
            try configuration.setChannelsEndpoint(s[Keys.channelsEndpoint], key: s.path(Keys.channelsEndpoint))
            return (configuration, warnings)
        } catch  where error.key == "ios.key_path" {
            // The key's own problem: name where it came from.
            throw APNsConfigurationError(key: sourceKey, "\(source) is \(error.problem)")
        }
    }

    /// A `.p12` / `.pem` / `.p8` is a few kilobytes: a path to something else (a device, a FIFO, a
    /// huge file) is refused instead of read for ever.
    static let maxKeyFileBytes = 1 << 20

    static func readKeyFile(_ path: String, key: String) throws(APNsConfigurationError) -> [UInt8] {
        let attributes: [FileAttributeKey: Any]
        do {
            // Through symbolic links (Kubernetes mounts secrets as links to the files).
            attributes = try FileManager.default.attributesOfItem(atPath: URL(fileURLWithPath: path).resolvingSymlinksInPath().path)
        } catch {
            throw APNsConfigurationError(key: key, "cannot read \(path): no such file or no access")
        }
        guard attributes[.type] as? FileAttributeType == .typeRegular else {
            throw APNsConfigurationError(key: key, "\(path) is not a regular file")
        }
        if let size = attributes[.size] as? NSNumber, size.int64Value > Int64(maxKeyFileBytes) {
            throw APNsConfigurationError(key: key, "\(path) is \(size.int64Value) bytes, more than a key file holds (at most \(maxKeyFileBytes))")
        }
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            let data = try handle.read(upToCount: maxKeyFileBytes + 1) ?? Data()
            guard data.count <= maxKeyFileBytes else {
                throw APNsConfigurationError(key: key, "\(path) is more than \(maxKeyFileBytes) bytes, more than a key file holds")
            }
            return Array(data)
        } catch let error as APNsConfigurationError {
            throw error
        } catch {
            throw APNsConfigurationError(
                key: key, "cannot read \(path): \((error as NSError).localizedDescription.replacingOccurrences(of: "\n", with: " "))")
        }
    }

    public func build(_ config: ProviderConfig, context: ProviderBuildContext) throws -> ProviderBuild {
        let s = config["ios"]
        guard s[Keys.enabled] else { return ProviderBuild() }
        let apnsConfig: APNsConfiguration
        let warnings: [String]
        do {
            (apnsConfig, warnings) = try Self.configurationAndWarnings(s)
        } catch {
            throw ConfigError(key: error.key, problem: error.problem)
        }
        let logger = Logger(label: "pushgate.apns")
        if let certificate = apnsConfig.certificate {
            let environments = [certificate.development ? "development" : nil, certificate.production ? "production" : nil].compactMap { $0 }
            logger.info(
                "APNs certificate authentication",
                metadata: [
                    "subject": "\(certificate.subject)", "topics": "\(certificate.topics.joined(separator: ","))",
                    "not_after": "\(APNsCertificate.format(certificate.notValidAfter))",
                    "days_to_expiry": "\(Int(certificate.daysToExpiry().rounded(.down)))",
                    "environments": "\(environments.isEmpty ? "unspecified" : environments.joined(separator: ","))",
                    "default_topic": "\(apnsConfig.topic ?? "")",
                ])
            if certificate.daysToExpiry() < 30 {
                logger.warning(
                    "the APNs certificate expires soon",
                    metadata: ["subject": "\(certificate.subject)", "not_after": "\(APNsCertificate.format(certificate.notValidAfter))"])
            }
        }
        let provider: APNsProvider
        do {
            provider = try APNsProvider(
                configuration: apnsConfig, poolConfiguration: context.poolConfiguration,
                eventLoopGroup: context.eventLoopGroup, logger: logger)
        } catch {
            throw ConfigError(key: error.key, problem: error.problem)
        }
        return ProviderBuild(
            providers: [ProviderSlot(provider: provider, maxRetry: apnsConfig.maxRetry, concurrency: s[Keys.maxConcurrentPushes])],
            shutdown: { await provider.shutdown() }, warnings: warnings)
    }

    public func deliveredIDLabel(for platform: Platform) -> String { "apns-id" }
    public func presentation(for platform: Platform) -> PlatformPresentation { PlatformPresentation(title: "iOS", color: "#0a84ff") }

    /// `POST/GET/DELETE /api/apns/channels`: broadcast channel management.
    public var routes: [ProviderRoute] { APNsChannelRoutes.routes }
}
