import Foundation
import PushgateCore

/// One entry of `apps:`: an app with its own keys, provider sections and share of the gateway.
///
/// ```yaml
/// apps:
///   - id: chat
///     api_keys: ["sha256:…"]
///     ios:     { key_path: chat.p8, key_id: ABC123DEFG, team_id: DEF123GHIJ, topic: com.example.chat, production: true }
///     android: { key_path: chat-sa.json }
///     webpush: { vapid_private_key: …, vapid_subject: mailto:ops@example.com }
///     max_pending: 50000
///     rate_limit: 2000
/// ```
/// Its provider sections take the same keys as the top-level ones, with their defaults; a section
/// present is enabled unless it says `enabled: false`, a section absent is off. Nothing is inherited
/// from the top-level (default app's) sections: each app names its own credentials.
public struct AppConfig: Sendable {
    public var id: String
    /// Keys of this app (plain or `sha256:`); an admin key (`core.admin_keys`) may act for any app.
    public var apiKeys: [String]
    /// Deliveries of this app accepted and not finished before it is answered 503; 0 = no own limit.
    public var maxPending: Int
    /// Deliveries per second accepted for this app (token bucket, one second of burst); 0 = no limit.
    public var rateLimit: Int
    /// The app's provider sections, `section.key` over the module defaults.
    public var values: [String: ConfigValue]
    public var sources: [String: String]

    public static let maxPendingRange = 0...100_000_000
    public static let rateLimitRange = 0...10_000_000

    /// The keys of an `apps:` entry besides its provider sections (`parseApp` reads them), for docs/configuration.md.
    public static let documentedKeys: [ConfigKey] = [
        ConfigKey("id", .string(""), doc: "(new) required: 1-64 characters of A-Z a-z 0-9 . _ - (not `default`, the top-level app); unique"),
        ConfigKey(
            "api_keys", .list([]), secrecy: .secret, doc: "(new) this app's ingest keys (plain or `sha256:<hex>`); an admin key may act for any app"),
        ConfigKey(
            "max_pending", .int(0), range: maxPendingRange,
            doc: "(new) deliveries of this app accepted and not finished before it is answered 503 (0: no own limit)"),
        ConfigKey(
            "rate_limit", .int(0), range: rateLimitRange,
            doc: "(new) deliveries per second accepted for this app (token bucket, one second of burst; 0: none)"),
    ]

    /// `apps[<id>]`, the prefix of this app's keys in messages.
    public var path: String { "apps[\(id)]" }

    /// The sections its provider modules build from (no process environment: only its own credentials).
    public func providerConfig() -> ProviderConfig {
        var out: [String: SectionValues] = [:]
        for s in ProviderRegistry.sections {
            out[s.name] = RawConfig.section(s.name, of: values, sources: sources, named: "\(path).\(s.name)")
        }
        return ProviderConfig(sections: out, environment: [:])
    }

    /// What a reload compares: an app whose fingerprint did not change keeps its providers (pools,
    /// tokens) as they are.
    public var fingerprint: String {
        values.keys.sorted().map { "\($0)=\(values[$0].map { "\($0)" } ?? "")" }.joined(separator: "\n")
    }

    /// Parses the `apps:` value of the file. Throws `ConfigError` naming the key; unknown keys are warnings.
    static func parse(_ raw: Any, warnings: inout [String]) throws -> [AppConfig] {
        if raw is NSNull { return [] }
        guard let list = raw as? [Any] else { throw ConfigError(key: "apps", problem: "expected a list of apps (- id: …)") }
        var apps: [AppConfig] = []
        var seen: Set<String> = []
        for (i, item) in list.enumerated() {
            guard let dict = item as? [String: Any] else { throw ConfigError(key: "apps[\(i)]", problem: "expected a mapping with an id") }
            guard let id = dict["id"] as? String, AppID.isValid(id) else {
                throw ConfigError(key: "apps[\(i)].id", problem: "required: 1-64 characters of A-Z a-z 0-9 . _ -")
            }
            guard id != AppID.defaultApp else {
                throw ConfigError(
                    key: "apps[\(i)].id", problem: "\"\(AppID.defaultApp)\" is the app of the top-level sections and core.api_keys; choose another id"
                )
            }
            guard seen.insert(id).inserted else { throw ConfigError(key: "apps[\(i)].id", problem: "\(id) is listed twice") }
            apps.append(try parseApp(id: id, dict, warnings: &warnings))
        }
        return apps
    }

    private static func parseApp(id: String, _ dict: [String: Any], warnings: inout [String]) throws -> AppConfig {
        let path = "apps[\(id)]"
        var app = AppConfig(id: id, apiKeys: [], maxPending: 0, rateLimit: 0, values: [:], sources: [:])
        let sections = Dictionary(ProviderRegistry.sections.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        // Every provider section: its defaults, off unless present.
        for s in ProviderRegistry.sections {
            for key in s.keys {
                app.values["\(s.name).\(key.name)"] = key.defaultValue
                app.sources["\(s.name).\(key.name)"] = "default"
            }
            app.values["\(s.name).enabled"] = .bool(dict[s.name] != nil)
        }
        for (key, raw) in dict.sorted(by: { $0.key < $1.key }) {
            switch key {
            case "id":
                continue
            case "api_keys":
                guard case .list(let l) = try RawConfig.coerce(raw, like: .list([]), key: "\(path).api_keys") else { continue }
                app.apiKeys = l
            case "max_pending", "rate_limit":
                guard case .int(let n) = try RawConfig.coerce(raw, like: .int(0), key: "\(path).\(key)") else { continue }
                let range = key == "max_pending" ? maxPendingRange : rateLimitRange
                guard range.contains(n) else {
                    throw ConfigError(key: "\(path).\(key)", problem: "\(n) is out of range (\(range.lowerBound)...\(range.upperBound))")
                }
                if key == "max_pending" { app.maxPending = n } else { app.rateLimit = n }
            default:
                guard let section = sections[key] else {
                    warnings.append("unknown config key \(path).\(key) ignored")
                    continue
                }
                if raw is NSNull { continue }
                guard let body = raw as? [String: Any] else {
                    throw ConfigError(key: "\(path).\(key)", problem: "expected a mapping of \(key) keys")
                }
                var flat: [(String, Any)] = []
                RawConfig.flatten(body, prefix: section.name, into: &flat)
                for (k, v) in flat.sorted(by: { $0.0 < $1.0 }) {
                    guard let def = RawConfig.defaults[k] else {
                        warnings.append("unknown config key \(path).\(k) ignored")
                        continue
                    }
                    let value = try RawConfig.coerce(v, like: def, key: "\(path).\(k)")
                    if case .int(let n) = value, let range = RawConfig.intRanges[k], !range.contains(n) {
                        throw ConfigError(key: "\(path).\(k)", problem: "\(n) is out of range (\(range.lowerBound)...\(range.upperBound))")
                    }
                    app.values[k] = value
                    app.sources[k] = "file"
                }
            }
        }
        return app
    }

    /// The app as `/api/config` shows it: secrets and key identifiers redacted like the top level's.
    func redacted() -> [String: Any] {
        var out: [String: Any] = ["id": id, "max_pending": maxPending, "rate_limit": rateLimit]
        out["api_keys"] = apiKeys.map { _ in "[REDACTED]" }
        for (key, value) in values where sources[key] == "file" || key.hasSuffix(".enabled") {
            var v: Any = value.yaml
            if RawConfig.secretKeys.contains(key) || RawConfig.redactedIdentifiers.contains(key) {
                switch value {
                case .string(let s) where !s.isEmpty: v = "[REDACTED]"
                case .list(let l) where !l.isEmpty: v = l.map { _ in "[REDACTED]" }
                default: break
                }
            } else if case .string(let s) = value, s.contains("://") {
                v = RawConfig.redactURL(s)
            }
            RawConfig.insert(&out, path: key.split(separator: ".").map(String.init), value: v)
        }
        return out
    }
}

extension RawConfig {
    /// The configuration with `app`'s provider sections in place of the top-level ones (what
    /// `pushgate send --app` sends with). Throws when no such app is configured.
    public func forApp(_ id: String) throws -> RawConfig {
        if id == AppID.defaultApp { return self }
        guard let app = apps.first(where: { $0.id == id }) else {
            let known = ([AppID.defaultApp] + apps.map(\.id)).joined(separator: ", ")
            throw ConfigError(key: "--app", problem: "no app \(id) in the configuration (apps: \(known))")
        }
        var out = self
        let prefixes = ProviderRegistry.sections.map { $0.name + "." }
        for k in values.keys where prefixes.contains(where: { k.hasPrefix($0) }) {
            if let v = app.values[k] { out.set(k, v) }
        }
        return out
    }

    /// Sets `key` (a provider key, `ios.endpoint`) in every app's sections where it is still the
    /// default: the mocks point every app at themselves.
    public mutating func setInApps(_ key: String, _ value: ConfigValue) {
        for i in apps.indices where apps[i].sources[key] == "default" {
            apps[i].values[key] = value
            apps[i].sources[key] = "override"
        }
    }
}
