import Foundation
import GorushRPCConfig
import HTTP2Pool
@_exported import ProviderKit
@_exported import Providers
import PushgateCore
import QueueStore
import Yams

/// Raw configuration: YAML file + defaults + environment overrides, flattened to `section.key`.
///
/// Precedence: `PUSHGATE_<SECTION>_<KEY>` > `GORUSH_<SECTION>_<KEY>` > file > built-in default.
/// Keys are gorush's wherever gorush has them; unknown keys in the file produce one warning each.
public struct RawConfig: Sendable {
    public private(set) var values: [String: ConfigValue]
    public private(set) var warnings: [String] = []
    /// Where each value came from (for `/api/config` and error messages).
    public private(set) var sources: [String: String] = [:]
    /// `apps:`: further apps, each with its own keys and provider sections (`AppConfig`).
    public internal(set) var apps: [AppConfig] = []
    /// The sections a way in reads itself (`adapterSections`), as written.
    public private(set) var adapterTrees: [String: ConfigTree] = [:]
    /// Sections kept whole for the way in that owns them (no defaults or environment overrides here):
    /// the Matrix Push Gateway API's (`Sources/MatrixIngest`).
    public static let adapterSections: Set<String> = ["matrix"]

    public typealias ConfigValue = ProviderKit.ConfigValue

    /// Every key Pushgate knows, with its default: the gateway's own sections (`core`, `api`, `log`,
    /// `queue`, `stat`, `mock`, below) and every provider module's sections (`ProviderRegistry`). gorush
    /// keys Pushgate accepts but does not act on are listed in `ignoredGorushPrefixes` (no warning for them).
    public static let defaults: [String: ConfigValue] = {
        var d: [String: ConfigValue] = [:]
        for section in sections {
            for key in section.keys { d["\(section.name).\(key.name)"] = key.defaultValue }
        }
        return d
    }()

    /// The gateway's own sections, then every provider module's.
    public static let sections: [ConfigSection] =
        [
            CoreConfig.section, APIConfig.section, LogConfig.section, QueueConfig.section, StatConfig.section, MockConfig.section,
            GRPCConfig.section, TracingConfig.section, EventsConfig.section,
        ] + ProviderRegistry.sections

    /// The accepted range of every integer key: a value outside is a one-line error at start, never a
    /// trap later (timer amounts and dates overflow on huge numbers).
    public static let intRanges: [String: ClosedRange<Int>] = {
        var r: [String: ClosedRange<Int>] = [:]
        for section in sections {
            for key in section.keys { if let range = key.range { r["\(section.name).\(key.name)"] = range } }
        }
        return r
    }()

    /// gorush keys (and sections) Pushgate accepts in a gorush config but does not act on: each group
    /// present in the file or the environment gets one warning at start naming its keys and why.
    public static let notActedOn: [(prefix: String, why: String)] =
        [
            ("core.auto_tls.", "Let's Encrypt auto TLS is not supported; serve TLS with core.ssl and a certificate (e.g. from certbot)"),
            ("queue.nsq.", "NSQ is not a Pushgate queue engine"), ("queue.nats.", "NATS is not a Pushgate queue engine"),
            ("queue.redis.", "Redis is not a Pushgate queue engine"),
            ("stat.redis.", "stat backends are not used: counters live in memory and deliveries' status in the queue engine"),
            ("stat.boltdb.", "stat backends are not used"), ("stat.buntdb.", "stat backends are not used"),
            ("stat.leveldb.", "stat backends are not used"), ("stat.badgerdb.", "stat backends are not used"),
        ] + ProviderRegistry.sections.flatMap { section in section.ignoredKeys.map { ("\(section.name).\($0)", "not used by Pushgate") } }

    /// Known keys whose value Pushgate does not act on: a warning when set (file or environment) to
    /// something that would matter in gorush.
    static let inertKeys: [(key: String, warning: @Sendable (ConfigValue) -> String?)] = [
        ("core.enabled", { $0 == .bool(false) ? "core.enabled: false is not acted on: the HTTP server always runs (it is Pushgate's ingest)" : nil }),
        (
            "core.worker_num",
            { $0 == .int(0) ? nil : "core.worker_num is not acted on: concurrency is <platform>.max_concurrent_pushes per provider" }
        ),
        ("core.mode", { $0 == .string("release") ? nil : "core.mode is not acted on (Gin's debug/release mode; Pushgate has none)" }),
        (
            "stat.engine",
            {
                $0 == .string("memory")
                    ? nil
                    : "stat.engine \($0.yaml) is not supported: /api/stat/app counts in memory (since start); delivery status is kept by the queue engine"
            }
        ),
    ]

    /// Keys whose values are secrets: shown as `[REDACTED]`.
    public static let secretKeys: Set<String> = Set(keys(.secret)).union(gorushRedactedKeys)

    /// Every key gorush 1.22 hides in `/api/config` (`ConfYaml.SanitizedCopy`): hidden here too, whatever
    /// section declares it and whether or not it is marked secret there.
    public static let gorushRedactedKeys: Set<String> = [
        "core.cert_base64", "core.key_base64", "core.http_proxy", "core.cert_path", "core.key_path", "core.feedback_header",
        "android.key_path", "android.credential", "huawei.appsecret", "ios.key_path", "ios.key_base64", "ios.password",
        "ios.key_id", "ios.team_id", "queue.redis.username", "queue.redis.password", "stat.redis.username", "stat.redis.password",
    ]

    static func keys(_ secrecy: ConfigSecrecy) -> [String] {
        sections.flatMap { section in section.keys.filter { $0.secrecy == secrecy }.map { "\(section.name).\($0.name)" } }
    }

    /// `dialects`: other formats the file may be in (Sygnal's `sygnal.yaml`), tried in order.
    public init(yaml: String?, environment: [String: String], dialects: [any ConfigDialect.Type] = []) throws {
        var tree: [String: Any]?
        if let yaml, !yaml.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            let root: Any?
            do { root = try Yams.load(yaml: yaml) } catch {
                throw ConfigError(key: "file", problem: "not valid YAML: \(String(describing: error).split(separator: "\n").first ?? "")")
            }
            if let root {
                guard let dict = root as? [String: Any] else { throw ConfigError(key: "file", problem: "top level must be a mapping of sections") }
                tree = dict
            }
        }
        var dialectWarnings: [String] = []
        if let dict = tree, let translated = try dialects.lazy.compactMap({ try $0.translate(dict) }).first {
            tree = translated.tree
            dialectWarnings = translated.warnings
        }
        try self.init(tree: tree, environment: environment)
        warnings = dialectWarnings + warnings
    }

    /// The configuration from a tree shaped like the parsed YAML file (sections as `[String: Any]`,
    /// values as `String`, `Int`, `Bool`, `Double`, `[Any]`, `apps` as a list of mappings): the same
    /// checks, defaults, environment overrides and one-line errors as `init(yaml:environment:)`.
    /// Used by the embedding API's configuration value (`PushgateKit`).
    public init(tree: [String: Any]?, environment: [String: String]) throws {
        var notActedOnKeys: [String: [String]] = [:]
        var autoTLSRequested = false
        values = Self.defaults
        for k in values.keys { sources[k] = "default" }
        if var dict = tree {
            if let appsRaw = dict.removeValue(forKey: "apps") { apps = try AppConfig.parse(appsRaw, warnings: &warnings) }
            for name in Self.adapterSections { if let v = dict.removeValue(forKey: name) { adapterTrees[name] = ConfigTree(v) } }
            var flat: [(String, Any)] = []
            Self.flatten(dict, prefix: "", into: &flat)
            for (key, raw) in flat.sorted(by: { $0.0 < $1.0 }) {
                guard let def = Self.defaults[key] else {
                    if key == "core.auto_tls.enabled", case .bool(true) = try Self.coerce(raw, like: .bool(false), key: key) {
                        autoTLSRequested = true
                    }
                    if let group = Self.notActedOn.first(where: { key == $0.prefix || key.hasPrefix($0.prefix) }) {
                        notActedOnKeys[group.prefix, default: []].append(key)
                    } else {
                        warnings.append("unknown config key \(key) ignored")
                    }
                    continue
                }
                values[key] = try Self.coerce(raw, like: def, key: key)
                sources[key] = "file"
            }
        }
        for (key, def) in Self.defaults {
            let suffix = key.replacingOccurrences(of: ".", with: "_").uppercased()
            for prefix in ["GORUSH_", "PUSHGATE_"] {  // later wins
                if let v = environment[prefix + suffix] {
                    values[key] = try Self.coerce(v, like: def, key: key)
                    sources[key] = "env \(prefix + suffix)"
                }
            }
        }
        for (key, value) in values { try Self.checkRange(key, value) }
        for group in Self.notActedOn {
            guard let keys = notActedOnKeys[group.prefix] else { continue }
            let name = group.prefix.hasSuffix(".") ? group.prefix + "*" : group.prefix
            warnings.append("\(name) accepted but not acted on (\(keys.joined(separator: ", "))): \(group.why)")
        }
        for inert in Self.inertKeys where sources[inert.key] != "default" {
            if let value = values[inert.key], let w = inert.warning(value) { warnings.append(w) }
        }
        if autoTLSRequested {
            throw ConfigError(
                key: "core.auto_tls.enabled",
                problem: "Let's Encrypt auto TLS is not supported: set core.ssl: true with core.cert_path and core.key_path")
        }
    }

    static func checkRange(_ key: String, _ value: ConfigValue) throws {
        guard case .int(let i) = value, let range = intRanges[key], !range.contains(i) else { return }
        throw ConfigError(key: key, problem: "\(i) is out of range (\(range.lowerBound)...\(range.upperBound))")
    }

    public static func load(
        path: String?, environment: [String: String] = ProcessInfo.processInfo.environment, dialects: [any ConfigDialect.Type] = []
    ) throws -> RawConfig {
        var text: String?
        if let path {
            do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
                throw ConfigError(key: "--config", problem: "cannot read \(path): \(error.localizedDescription)")
            }
        }
        return try RawConfig(yaml: text, environment: environment, dialects: dialects)
    }

    static func flatten(_ dict: [String: Any], prefix: String, into out: inout [(String, Any)]) {
        for (k, v) in dict {
            let key = prefix.isEmpty ? k : prefix + "." + k
            if let sub = v as? [String: Any] {
                flatten(sub, prefix: key, into: &out)
            } else {
                out.append((key, v))
            }
        }
    }

    static func coerce(_ raw: Any, like def: ConfigValue, key: String) throws -> ConfigValue {
        switch def {
        case .string:
            if raw is NSNull { return .string("") }
            if let s = raw as? String { return .string(s) }
            if let i = raw as? Int { return .string(String(i)) }
            if let b = raw as? Bool { return .string(b ? "true" : "false") }
            if let d = raw as? Double { return .string(String(d)) }
            throw ConfigError(key: key, problem: "expected a string")
        case .int:
            if let i = raw as? Int { return .int(i) }
            if let s = raw as? String {
                let t = s.trimmingCharacters(in: .whitespaces)
                if t.isEmpty { return def }
                if let i = Int(t) { return .int(i) }
            }
            throw ConfigError(key: key, problem: "expected an integer, got \"\(raw)\"")
        case .bool:
            if let b = raw as? Bool { return .bool(b) }
            if let s = raw as? String {
                switch s.lowercased().trimmingCharacters(in: .whitespaces) {
                case "true", "1", "yes", "on": return .bool(true)
                case "false", "0", "no", "off", "": return .bool(false)
                default: break
                }
            }
            if let i = raw as? Int { return .bool(i != 0) }
            throw ConfigError(key: key, problem: "expected true or false, got \"\(raw)\"")
        case .list:
            if raw is NSNull { return .list([]) }
            if let a = raw as? [Any] { return .list(a.map(listItem)) }
            if let s = raw as? String {
                // A list of mappings (`ios.keys`) from the environment: a JSON array.
                if s.trimmingCharacters(in: .whitespaces).hasPrefix("[") {
                    guard let a = try? JSONSerialization.jsonObject(with: Data(s.utf8)) as? [Any] else {
                        throw ConfigError(key: key, problem: "expected a list (a value starting with [ is read as a JSON array)")
                    }
                    return .list(a.map(listItem))
                }
                let parts = s.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                return .list(parts)
            }
            throw ConfigError(key: key, problem: "expected a list")
        }
    }

    /// One item of a list value: a mapping (an entry of `ios.keys`) is kept as its JSON text, for
    /// the setting's owner to read; anything else as its text.
    static func listItem(_ item: Any) -> String {
        if item is [String: Any], JSONSerialization.isValidJSONObject(item),
            let data = try? JSONSerialization.data(withJSONObject: item, options: [.sortedKeys])
        {
            return String(decoding: data, as: UTF8.self)
        }
        return "\(item)"
    }

    public func string(_ key: String) -> String {
        if case .string(let s)? = values[key] { return s }
        return ""
    }

    public func int(_ key: String) -> Int {
        if case .int(let i)? = values[key] { return i }
        return 0
    }

    public func bool(_ key: String) -> Bool {
        if case .bool(let b)? = values[key] { return b }
        return false
    }

    public func list(_ key: String) -> [String] {
        if case .list(let l)? = values[key] { return l }
        return []
    }

    /// The values of one section, for typed reading (`raw.section("core")[setting]`).
    public func section(_ name: String) -> SectionValues {
        Self.section(name, of: values, sources: sources, named: name)
    }

    /// The keys under `section.` of flat `values` (and their sources), as section `name`.
    static func section(_ section: String, of values: [String: ConfigValue], sources: [String: String], named name: String) -> SectionValues {
        let prefix = section + "."
        var v: [String: ConfigValue] = [:]
        var src: [String: String] = [:]
        for (key, value) in values where key.hasPrefix(prefix) {
            let k = String(key.dropFirst(prefix.count))
            v[k] = value
            src[k] = sources[key]
        }
        return SectionValues(name: name, values: v, sources: src)
    }

    /// Every provider module's sections, for `ProviderModule.build`.
    public func providerConfig(environment: [String: String] = ProcessInfo.processInfo.environment) -> ProviderConfig {
        var out: [String: SectionValues] = [:]
        for s in ProviderRegistry.sections { out[s.name] = section(s.name) }
        return ProviderConfig(sections: out, environment: environment)
    }

    /// Sets one typed key of a section (an override, like `--set`).
    public mutating func set<V>(_ section: String, _ setting: Setting<V>, _ value: V) {
        set("\(section).\(setting.name)", value.configValue)
    }

    /// Applies a `key=value` override (`--set`), converted like an environment value.
    public mutating func set(assignment: String) throws {
        let kv = assignment.split(separator: "=", maxSplits: 1).map(String.init)
        guard kv.count == 2, let def = Self.defaults[kv[0]] else {
            throw ConfigError(key: "--set \(assignment)", problem: "expected a known key=value")
        }
        let value = try Self.coerce(kv[1], like: def, key: kv[0])
        try Self.checkRange(kv[0], value)
        set(kv[0], value)
    }

    public mutating func set(_ key: String, _ value: ConfigValue) {
        values[key] = value
        sources[key] = "override"
    }

    /// Where credentials live and which key they are: hidden like secrets in `/api/config`.
    public static let redactedIdentifiers: Set<String> = Set(["core.key_path", "core.cert_path"]).union(keys(.identifier))

    /// A URL with its userinfo and query (where hook and database secrets live) replaced by `[REDACTED]`.
    public static func redactURL(_ s: String) -> String {
        guard let schemeEnd = s.range(of: "://") else { return s }
        var rest = s[schemeEnd.upperBound...]
        var out = String(s[..<schemeEnd.upperBound])
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            out += "[REDACTED]@" + authority[authority.index(after: at)...]
        } else {
            out += authority
        }
        rest = rest[authorityEnd...]
        if let q = rest.firstIndex(of: "?") {
            out += rest[..<q] + "?[REDACTED]"
        } else if let f = rest.firstIndex(of: "#") {
            out += rest[..<f]
        } else {
            out += rest
        }
        return out
    }

    /// The effective configuration as YAML, secrets shown as `[REDACTED]`; `extra`: further
    /// sections, already redacted (the ways in's own, `Gateway.configYAML`).
    public func redactedYAML(extra: [String: Any] = [:]) -> String {
        var root: [String: Any] = [:]
        for (key, value) in values {
            var v: Any = value.yaml
            if case .string(let s) = value, !s.isEmpty, Self.redactedIdentifiers.contains(key) {
                v = "[REDACTED]"
            } else if case .string(let s) = value, s.contains("://") {
                v = Self.redactURL(s)
            } else if case .list(let l) = value, l.contains(where: { $0.contains("://") }) {
                v = l.map { $0.contains("://") ? Self.redactURL($0) : $0 }
            }
            if Self.secretKeys.contains(key) {
                switch value {
                case .string(let s) where !s.isEmpty: v = "[REDACTED]"
                case .list(let l) where !l.isEmpty: v = l.map { _ in "[REDACTED]" }
                default: break
                }
            }
            Self.insert(&root, path: key.split(separator: ".").map(String.init), value: v)
        }
        if !apps.isEmpty { root["apps"] = apps.map { $0.redacted() } }
        for (name, section) in extra { root[name] = section }
        return (try? Yams.dump(object: root, sortKeys: true)) ?? ""
    }

    /// Puts `value` at `path` in a nested configuration tree (sections as dictionaries).
    package static func insert(_ dict: inout [String: Any], path: [String], value: Any) {
        guard let first = path.first else { return }
        if path.count == 1 {
            dict[first] = value
            return
        }
        var sub = dict[first] as? [String: Any] ?? [:]
        insert(&sub, path: Array(path.dropFirst()), value: value)
        dict[first] = sub
    }
}

extension ConfigValue {
    var yaml: Any {
        switch self {
        case .string(let s): return s
        case .int(let i): return i
        case .bool(let b): return b
        case .list(let l): return l
        }
    }
}
