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

    /// The provider-token signing key (`ios.key_path`, a P-256 PKCS#8 `.p8`).
    public var key: P256.Signing.PrivateKey
    /// `ios.key_id`: the 10-character Key ID, sent as the JWT `kid`.
    public var keyID: String
    /// `ios.team_id`: the Team ID, sent as the JWT `iss`.
    public var teamID: String
    /// `ios.production`: the default environment when a notification says neither `production` nor `development`.
    public var production: Bool
    /// `ios.topic`: the bundle id used when a notification has no `topic`.
    public var topic: String?
    /// `ios.endpoint`: base URL override (e.g. `https://localhost:8443`) used for both environments.
    public var endpoint: String?
    /// Per-environment overrides (take precedence over `endpoint`; mainly for tests and mocks).
    public var productionEndpoint: String?
    public var sandboxEndpoint: String?
    /// `ios.max_retry`: retries after the first attempt (used by the dispatcher).
    public var maxRetry: Int
    /// Long-lived HTTP/2 connections per environment.
    public var connectionsPerEnvironment: Int

    public init(
        key: P256.Signing.PrivateKey, keyID: String, teamID: String, production: Bool = false,
        topic: String? = nil, endpoint: String? = nil, maxRetry: Int = 3, connectionsPerEnvironment: Int = 2
    ) throws(APNsConfigurationError) {
        self.key = key
        self.keyID = keyID.trimmingCharacters(in: .whitespacesAndNewlines)
        self.teamID = teamID.trimmingCharacters(in: .whitespacesAndNewlines)
        self.production = production
        self.topic = topic.flatMap { $0.isEmpty ? nil : $0 }
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
        if keyID.isEmpty { throw APNsConfigurationError(key: "ios.key_id", "missing (the Key ID of the .p8 auth key)") }
        if teamID.isEmpty { throw APNsConfigurationError(key: "ios.team_id", "missing (the Apple developer Team ID)") }
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

    /// Base URL for an environment: the per-environment override, else `endpoint`, else Apple's.
    public func baseURL(production: Bool) -> String {
        if production { return productionEndpoint ?? endpoint ?? Self.productionURL }
        return sandboxEndpoint ?? endpoint ?? Self.sandboxURL
    }
}
