import Crypto
import Foundation
import HTTP2Pool
import Signing

/// A configuration problem, described in one line naming the key (e.g. `ios.key_path: ...`).
public struct APNsConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var key: String
    public var problem: String
    public init(key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }
    public var description: String { "\(key): \(problem)" }
}

/// Settings of the APNs provider (gorush's `ios.*` section plus Pushgate's `ios.topic` and `ios.endpoint`).
public struct APNsConfiguration: Sendable {
    public static let productionURL = "https://api.push.apple.com"
    public static let sandboxURL = "https://api.sandbox.push.apple.com"
    /// Apple's broadcast channel-management hosts (docs/apns-broadcast.md).
    public static let channelsProductionURL = "https://api-manage-broadcast.push.apple.com:2196"
    public static let channelsSandboxURL = "https://api-manage-broadcast.sandbox.push.apple.com:2195"

    /// How the gateway proves itself to APNs.
    public enum Credentials: Sendable {
        /// Token-based: an ES256 JWT signed with the `.p8` key, its Key ID and Team ID.
        case token(key: P256.Signing.PrivateKey, keyID: String, teamID: String)
        /// Certificate-based: the client certificate is presented on every TLS connection; no JWT.
        case certificate(APNsCertificate)
    }

    public var credentials: Credentials
    /// Every provider-token signing key, each with the environment and topics it may sign for
    /// (`ios.key_path` unrestricted, then `ios.keys`); each delivery is signed by the one
    /// `APNsSigningKey.select` picks. Empty with certificate auth.
    public internal(set) var signingKeys: [APNsSigningKey] = []
    /// Whether APNs' refusals of a provider token name the key that signed it (`(key id K)`): with
    /// several keys, or one restricted to an environment or topics. One unrestricted key (gorush's
    /// configuration) keeps APNs' reason as it is, as gorush reports it.
    public var namesKeys: Bool {
        signingKeys.count > 1 || signingKeys.contains { $0.environment != nil || !$0.topics.isEmpty }
    }
    /// The provider-token signing key (`ios.key_path`, a P-256 PKCS#8 `.p8`); nil with a certificate.
    public var key: P256.Signing.PrivateKey? {
        if case .token(let key, _, _) = credentials { return key }
        return nil
    }
    /// `ios.key_id`: the 10-character Key ID, sent as the JWT `kid` ("" with a certificate).
    public var keyID: String {
        if case .token(_, let keyID, _) = credentials { return keyID }
        return ""
    }
    /// `ios.team_id`: the Team ID, sent as the JWT `iss` ("" with a certificate).
    public var teamID: String {
        if case .token(_, _, let teamID) = credentials { return teamID }
        return ""
    }
    /// The client certificate (certificate-based trust); nil with a `.p8` key.
    public var certificate: APNsCertificate? {
        if case .certificate(let c) = credentials { return c }
        return nil
    }
    /// `ios.production`: the default environment when a notification says neither `production` nor `development`.
    public var production: Bool
    /// `ios.topic`: the bundle id used when a notification has no `topic`.
    public var topic: String?
    /// `ios.endpoint`: base URL override (e.g. `https://localhost:8443`) used for both environments.
    public var endpoint: String?
    /// Per-environment overrides (take precedence over `endpoint`; mainly for tests and mocks).
    public var productionEndpoint: String?
    public var sandboxEndpoint: String?
    /// `ios.channels_endpoint`: base URL of the channel-management API for both environments.
    public private(set) var channelsEndpoint: String?
    /// `ios.max_retry`: retries after the first attempt (used by the dispatcher).
    public var maxRetry: Int
    /// Long-lived HTTP/2 connections per environment (the floor, kept while idle).
    public var connectionsPerEnvironment: Int
    /// `ios.max_connections`: the ceiling per environment while deliveries wait for a stream.
    public var maxConnectionsPerEnvironment: Int = APNsConfiguration.defaultMaxConnections
    public static let defaultMaxConnections = 32

    public init(
        key: P256.Signing.PrivateKey, keyID: String, teamID: String, production: Bool = false,
        topic: String? = nil, endpoint: String? = nil, maxRetry: Int = 3, connectionsPerEnvironment: Int = 2
    ) throws(APNsConfigurationError) {
        // One unrestricted key (`APNsSigningKey` trims the ids as `credentials` has them).
        try self.init(
            signingKeys: [APNsSigningKey(key: key, keyID: keyID, teamID: teamID)], production: production, topic: topic, endpoint: endpoint,
            maxRetry: maxRetry, connectionsPerEnvironment: connectionsPerEnvironment)
    }

    /// Token auth with several keys (`ios.keys`, after the unrestricted `ios.key_path` one when there
    /// is one): `credentials` is the first key's, which also signs broadcast channel management.
    public init(
        signingKeys: [APNsSigningKey], production: Bool = false, topic: String? = nil, endpoint: String? = nil, maxRetry: Int = 3,
        connectionsPerEnvironment: Int = 2
    ) throws(APNsConfigurationError) {
        guard let first = signingKeys.first else { throw APNsConfigurationError(key: "ios.keys", "no key given") }
        self.credentials = .token(key: first.key, keyID: first.keyID, teamID: first.teamID)
        self.signingKeys = signingKeys
        self.production = production
        self.topic = topic.flatMap { $0.isEmpty ? nil : $0 }
        self.endpoint = endpoint.flatMap { $0.isEmpty ? nil : $0 }
        self.maxRetry = maxRetry
        self.connectionsPerEnvironment = connectionsPerEnvironment
        try validate()
    }

    /// The index in `signingKeys` of the key that signs a push to `topic` (of `bundleID`) in
    /// `production`; nil when none may (or with certificate auth).
    public func signingKeyIndex(topic: String, bundleID: String, production: Bool) -> Int? {
        APNsSigningKey.select(signingKeys, topic: topic, bundleID: bundleID, production: production)
    }

    /// Certificate-based trust. `topic` defaults to the certificate's bundle id (its subject UID):
    /// the topic APNs itself assumes when a request to a single-topic certificate has no `apns-topic`.
    /// An expired or not yet valid certificate is refused (`key` names where it came from).
    public init(
        certificate: APNsCertificate, production: Bool = false, topic: String? = nil, endpoint: String? = nil, maxRetry: Int = 3,
        connectionsPerEnvironment: Int = 2, now: Date = Date(), key: String = "ios.key_path"
    ) throws(APNsConfigurationError) {
        try certificate.checkValidity(at: now, key: key)
        self.credentials = .certificate(certificate)
        self.production = production
        self.topic = topic.flatMap { $0.isEmpty ? nil : $0 } ?? certificate.bundleID
        self.endpoint = endpoint.flatMap { $0.isEmpty ? nil : $0 }
        self.maxRetry = maxRetry
        self.connectionsPerEnvironment = connectionsPerEnvironment
        try validate()
    }

    /// Loads the key from `ios.key_path` (PEM PKCS#8 `.p8`). Errors name the key and the problem in one line.
    public init(
        keyPath: String, keyID: String, teamID: String, production: Bool = false,
        topic: String? = nil, endpoint: String? = nil, maxRetry: Int = 3, connectionsPerEnvironment: Int = 2
    ) throws(APNsConfigurationError) {
        if keyPath.isEmpty { throw APNsConfigurationError(key: "ios.key_path", "missing (path of the APNs .p8 auth key)") }
        let key: P256.Signing.PrivateKey
        do {
            key = try KeyLoading.p256PrivateKey(path: keyPath)
        } catch let failure as KeyLoading.Failure {
            switch failure {
            case .unreadable(let path, let why):
                throw APNsConfigurationError(key: "ios.key_path", "cannot read \(path): \(why.replacingOccurrences(of: "\n", with: " "))")
            default:
                throw APNsConfigurationError(key: "ios.key_path", "\(keyPath) is not a P-256 PKCS#8 private key (an APNs .p8 auth key)")
            }
        } catch {
            throw APNsConfigurationError(key: "ios.key_path", "\(keyPath): \(error)")
        }
        try self.init(
            key: key, keyID: keyID, teamID: teamID, production: production, topic: topic, endpoint: endpoint,
            maxRetry: maxRetry, connectionsPerEnvironment: connectionsPerEnvironment)
    }

    /// Same as `init(keyPath:...)` with the key's PEM text.
    public init(
        keyPEM: String, keyID: String, teamID: String, production: Bool = false,
        topic: String? = nil, endpoint: String? = nil, maxRetry: Int = 3, connectionsPerEnvironment: Int = 2
    ) throws(APNsConfigurationError) {
        let key: P256.Signing.PrivateKey
        do { key = try KeyLoading.p256PrivateKey(pem: keyPEM) } catch {
            throw APNsConfigurationError(key: "ios.key_path", "not a P-256 PKCS#8 private key (an APNs .p8 auth key)")
        }
        try self.init(
            key: key, keyID: keyID, teamID: teamID, production: production, topic: topic, endpoint: endpoint,
            maxRetry: maxRetry, connectionsPerEnvironment: connectionsPerEnvironment)
    }

    public func validate() throws(APNsConfigurationError) {
        if case .token = credentials {
            for k in signingKeys {
                let keyIDKey = k.source == "ios.key_path" ? "ios.key_id" : "\(k.source).key_id"
                let teamIDKey = k.source == "ios.key_path" ? "ios.team_id" : "\(k.source).team_id"
                if k.keyID.isEmpty { throw APNsConfigurationError(key: keyIDKey, "missing (the Key ID of the .p8 auth key)") }
                if k.teamID.isEmpty { throw APNsConfigurationError(key: teamIDKey, "missing (the Apple developer Team ID)") }
            }
        }
        if maxRetry < 0 { throw APNsConfigurationError(key: "ios.max_retry", "must be 0 or more, got \(maxRetry)") }
        if connectionsPerEnvironment < 1 {
            throw APNsConfigurationError(key: "ios.connections", "must be 1 or more, got \(connectionsPerEnvironment)")
        }
        for url in [endpoint, productionEndpoint, sandboxEndpoint] {
            if let url, HTTP2Target(url: url) == nil {
                throw APNsConfigurationError(key: "ios.endpoint", "\"\(url)\" is not an http(s) base URL such as https://localhost:8443")
            }
        }
    }

    /// Sets `ios.channels_endpoint` ("" = Apple's hosts); `key` names it in the error.
    public mutating func setChannelsEndpoint(_ url: String, key: String = "ios.channels_endpoint") throws(APNsConfigurationError) {
        guard !url.isEmpty else {
            channelsEndpoint = nil
            return
        }
        guard HTTP2Target(url: url) != nil else {
            throw APNsConfigurationError(key: key, "\"\(url)\" is not an http(s) base URL such as https://localhost:2195")
        }
        channelsEndpoint = url
    }

    /// Base URL of the channel-management API for an environment: `channels_endpoint`, else Apple's.
    public func channelsBaseURL(production: Bool) -> String {
        channelsEndpoint ?? (production ? Self.channelsProductionURL : Self.channelsSandboxURL)
    }

    /// Base URL for an environment: the per-environment override, else `endpoint`, else Apple's.
    public func baseURL(production: Bool) -> String {
        if production { return productionEndpoint ?? endpoint ?? Self.productionURL }
        return sandboxEndpoint ?? endpoint ?? Self.sandboxURL
    }
}
