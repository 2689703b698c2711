import Crypto
import Foundation
import Signing

/// An APNs environment a token key may be restricted to.
public enum APNsEnvironment: String, Sendable, CaseIterable {
    case sandbox, production

    public init(production: Bool) { self = production ? .production : .sandbox }
    public var isProduction: Bool { self == .production }
}

/// One provider-token signing key (`.p8`) and what Apple lets it sign for.
///
/// Apple's keys come in three kinds (developer.apple.com, "Establishing a token-based connection to
/// APNs"): the original keys (every topic, both environments), team-scoped keys (every topic of the
/// team, restricted to Sandbox or Production) and topic-specific keys (a set of topics, one
/// environment). `environment` nil is the first kind; `topics` empty means every topic.
public struct APNsSigningKey: Sendable {
    public var key: P256.Signing.PrivateKey
    /// The 10-character Key ID, the JWT `kid`.
    public var keyID: String
    /// The Team ID, the JWT `iss`.
    public var teamID: String
    /// The one environment the key may be used in (nil: both).
    public var environment: APNsEnvironment?
    /// The bundle ids (or full `apns-topic`s) the key may sign for (empty: every topic of the team).
    public var topics: [String]
    /// Where it was configured (`ios.keys[1]`), for errors.
    public var source: String

    public init(
        key: P256.Signing.PrivateKey, keyID: String, teamID: String, environment: APNsEnvironment? = nil, topics: [String] = [],
        source: String = "ios.key_path"
    ) {
        self.key = key
        self.keyID = keyID.trimmingCharacters(in: .whitespacesAndNewlines)
        self.teamID = teamID.trimmingCharacters(in: .whitespacesAndNewlines)
        self.environment = environment
        self.topics = topics
        self.source = source
    }

    /// Whether the key may sign a push to `topic` (the `apns-topic`) of app `bundleID` in `production`.
    /// A topic-specific key names bundle ids: it covers the push-type topics of the app too
    /// (`<bundle>.voip`, `<bundle>.push-type.liveactivity`), or it may name an exact `apns-topic`.
    public func covers(topic: String, bundleID: String, production: Bool) -> Bool {
        if let environment, environment.isProduction != production { return false }
        return topics.isEmpty || topics.contains(bundleID) || topics.contains(topic)
    }

    /// Topic-specific keys before team-scoped keys before unrestricted ones; restricted to an
    /// environment before both.
    var specificity: Int { (topics.isEmpty ? 0 : 2) + (environment == nil ? 0 : 1) }

    /// How it is named in logs and errors: its Key ID and scope, never the key.
    public var label: String {
        var s = "key id \(keyID)"
        if let environment { s += ", \(environment.rawValue) only" }
        if !topics.isEmpty { s += ", topics \(topics.joined(separator: ","))" }
        return s
    }

    /// The key that signs a push to `topic` (of `bundleID`) in `production`: the most specific one
    /// that covers it, the first listed among equals; nil when none does.
    public static func select(_ keys: [APNsSigningKey], topic: String, bundleID: String, production: Bool) -> Int? {
        var best: Int?
        for (i, k) in keys.enumerated() where k.covers(topic: topic, bundleID: bundleID, production: production) {
            if let b = best, keys[b].specificity >= k.specificity { continue }
            best = i
        }
        return best
    }

    /// The members an `ios.keys` entry may have.
    static let members: Set<String> = ["key_id", "team_id", "key_path", "key_base64", "environment", "topics"]

    /// The entries of `ios.keys` (each a JSON object, as the configuration keeps a list of mappings):
    /// `key_id`, `team_id`, `key_path` or `key_base64` (a `.p8`), optional `environment`
    /// (`sandbox` / `production`) and `topics`. `path` is the setting's name (`ios.keys`,
    /// `apps[chat].ios.keys`); errors name the entry and member, never the key.
    public static func parse(
        _ items: [String], path: String, defaultTeamID: String, read: (String, String) throws(APNsConfigurationError) -> [UInt8]
    ) throws(APNsConfigurationError) -> [APNsSigningKey] {
        var out: [APNsSigningKey] = []
        for (i, item) in items.enumerated() {
            let at = "\(path)[\(i)]"
            guard let data = item.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw APNsConfigurationError(key: at, "expected a mapping with key_id, team_id, key_path (or key_base64), environment, topics")
            }
            for name in object.keys.sorted() where !members.contains(name) {
                throw APNsConfigurationError(
                    key: "\(at).\(name)", "unknown member (expected key_id, team_id, key_path, key_base64, environment, topics)")
            }
            func string(_ name: String) throws(APNsConfigurationError) -> String {
                switch object[name] {
                case nil, is NSNull: return ""
                case let s as String: return s.trimmingCharacters(in: .whitespacesAndNewlines)
                case let n as Int: return String(n)
                default: throw APNsConfigurationError(key: "\(at).\(name)", "expected a string")
                }
            }
            let keyID = try string("key_id")
            if keyID.isEmpty { throw APNsConfigurationError(key: "\(at).key_id", "missing (the Key ID of the .p8 auth key)") }
            var teamID = try string("team_id")
            if teamID.isEmpty { teamID = defaultTeamID }
            if teamID.isEmpty { throw APNsConfigurationError(key: "\(at).team_id", "missing (the Apple developer Team ID; or set ios.team_id)") }
            var environment: APNsEnvironment?
            let env = try string("environment").lowercased()
            switch env {
            case "": environment = nil
            case "sandbox", "development": environment = .sandbox
            case "production": environment = .production
            default: throw APNsConfigurationError(key: "\(at).environment", "must be sandbox or production, got \"\(env)\"")
            }
            var topics: [String] = []
            switch object["topics"] {
            case nil, is NSNull: break
            case let list as [Any]:
                for (j, t) in list.enumerated() {
                    guard let s = t as? String, !s.trimmingCharacters(in: .whitespaces).isEmpty, !s.contains(where: { $0 == "\r" || $0 == "\n" })
                    else {
                        throw APNsConfigurationError(key: "\(at).topics[\(j)]", "expected a bundle id such as com.example.app")
                    }
                    topics.append(s.trimmingCharacters(in: .whitespaces))
                }
            case let s as String:
                topics = s.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            default: throw APNsConfigurationError(key: "\(at).topics", "expected a list of bundle ids")
            }
            let keyPath = try string("key_path")
            let keyBase64 = try string("key_base64")
            let bytes: [UInt8]
            let sourceKey: String
            if !keyPath.isEmpty {
                sourceKey = "\(at).key_path"
                bytes = try read(keyPath, sourceKey)
            } else if !keyBase64.isEmpty {
                sourceKey = "\(at).key_base64"
                guard let d = Data(base64Encoded: keyBase64, options: .ignoreUnknownCharacters), !d.isEmpty else {
                    throw APNsConfigurationError(key: sourceKey, "not base64 of a .p8 file")
                }
                bytes = Array(d)
            } else {
                throw APNsConfigurationError(key: "\(at).key_path", "missing (path of the .p8 auth key, or key_base64)")
            }
            guard let pem = String(bytes: bytes, encoding: .utf8), let key = try? KeyLoading.p256PrivateKey(pem: pem) else {
                throw APNsConfigurationError(key: sourceKey, "not a P-256 PKCS#8 private key (an APNs .p8 auth key)")
            }
            if let other = out.first(where: { $0.keyID == keyID }) {
                throw APNsConfigurationError(key: "\(at).key_id", "\(keyID) is listed twice (also \(other.source))")
            }
            out.append(APNsSigningKey(key: key, keyID: keyID, teamID: teamID, environment: environment, topics: topics, source: at))
        }
        return out
    }
}
