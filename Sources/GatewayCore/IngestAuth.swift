import Crypto
import Foundation
import ProviderKit
import PushgateCore

/// Ingest authentication: `core.api_keys` (may push and read delivery status) and `core.admin_keys`
/// (everything, including `/api/config`, `/api/stat/*`, `/sys/stats`). A key is written plain or as
/// `sha256:<hex of SHA-256(key)>`; either way only its SHA-256 is kept, and a presented key is hashed
/// and compared with every configured digest in constant time. With no key configured every route
/// is open, as in gorush.
public struct IngestAuth: Sendable {
    public enum Role: Sendable, Equatable {
        /// A key of an app (today the default app, `core.api_keys`).
        case app(String)
        case admin
    }

    struct Key: Sendable {
        var digest: [UInt8]
        var role: Role
    }

    let keys: [Key]
    /// `core.metrics_admin_only`: `/metrics` needs an admin key (else it stays open for scrapers).
    public let metricsAdminOnly: Bool

    public var enabled: Bool { !keys.isEmpty }

    /// - Parameter appKeys: the keys of each further app (`apps[].api_keys`).
    public init(
        apiKeys: [String], adminKeys: [String], metricsAdminOnly: Bool = false, appKeys: [(app: String, keys: [String])] = []
    ) throws {
        var keys: [Key] = []
        for k in apiKeys { keys.append(Key(digest: try Self.digest(of: k, key: "core.api_keys"), role: .app(AppID.defaultApp))) }
        for (app, list) in appKeys {
            for k in list { keys.append(Key(digest: try Self.digest(of: k, key: "apps[\(app)].api_keys"), role: .app(app))) }
        }
        for k in adminKeys { keys.append(Key(digest: try Self.digest(of: k, key: "core.admin_keys"), role: .admin)) }
        // One key, one app: the same key under two apps (or an app and admin) would make the answer depend on order.
        var owner: [[UInt8]: Role] = [:]
        for k in keys {
            if let other = owner[k.digest], other != k.role {
                throw ConfigError(
                    key: Self.describe(k.role), problem: "a key is also configured for \(Self.describe(other)); each key belongs to one app")
            }
            owner[k.digest] = k.role
        }
        self.keys = keys
        self.metricsAdminOnly = metricsAdminOnly
    }

    /// `sha256:<64 hex>` as given, else the SHA-256 of the plain key. Never echoes the key in errors.
    static func digest(of spec: String, key: String) throws -> [UInt8] {
        let trimmed = spec.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased().hasPrefix("sha256:") {
            let hex = Array(trimmed.utf8.dropFirst(7))
            guard hex.count == 64, let bytes = Hex.decode(hex) else {
                throw ConfigError(key: key, problem: "a sha256: entry must be 64 hex digits (SHA-256 of the key)")
            }
            return bytes
        }
        guard trimmed.utf8.count >= 16 else {
            throw ConfigError(key: key, problem: "a key must be at least 16 characters (or sha256:<hex>)")
        }
        return Array(SHA256.hash(data: Array(trimmed.utf8)))
    }

    /// The key in an `Authorization: Bearer <key>` or an `X-API-Key: <key>` value (HTTP headers, gRPC metadata).
    public static func presentedKey(authorization: String?, apiKey: String?) -> String? {
        if let authorization {
            let parts = authorization.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" { return String(parts[1]).trimmingCharacters(in: .whitespaces) }
        }
        if let apiKey { return apiKey.trimmingCharacters(in: .whitespaces) }
        return nil
    }

    /// The role of a key already taken from its header (`presentedKey(authorization:apiKey:)`).
    public func identify(presented: String?) -> Role? {
        guard let presented, !presented.isEmpty, presented.utf8.count <= 4096 else { return nil }
        let digest = Array(SHA256.hash(data: Array(presented.utf8)))
        var found: Role?
        for key in keys {
            // Every configured key is compared, each byte of each: no early exit to time.
            var diff: UInt8 = 0
            for (a, b) in zip(key.digest, digest) { diff |= a ^ b }
            if diff == 0, found == nil { found = key.role }
        }
        return found
    }

    static func describe(_ role: Role) -> String {
        switch role {
        case .admin: return "core.admin_keys"
        case .app(let id) where id == AppID.defaultApp: return "core.api_keys"
        case .app(let id): return "apps[\(id)].api_keys"
        }
    }

    /// A short, non-reversible name for a key, safe for logs: the first 8 hex digits of SHA-256(SHA-256(key)).
    public static func fingerprint(_ key: String) -> String {
        let once = Array(SHA256.hash(data: Array(key.utf8)))
        return Hex.encode(SHA256.hash(data: once).prefix(4))
    }
}
