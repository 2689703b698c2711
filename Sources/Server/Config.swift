import Foundation
@_exported import ProviderKit
import PushgateCore
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

    public typealias ConfigValue = ProviderKit.ConfigValue

    /// Every key Pushgate knows, with its default: the gateway's own sections (`core`, `api`, `log`,
    /// `queue`, `stat`, `mock`) and every provider module's sections (`ProviderRegistry`). gorush keys
    /// Pushgate accepts but does not act on are listed in `ignoredGorushPrefixes` (no warning for them).
    public static let defaults: [String: ConfigValue] = {
        var d = coreDefaults
        for section in ProviderRegistry.sections {
            for key in section.keys { d["\(section.name).\(key.name)"] = key.defaultValue }
        }
        return d
    }()

    /// The keys of the gateway's own sections.
    static let coreDefaults: [String: ConfigValue] = [
        "core.enabled": .bool(true),
        "core.address": .string(""),
        "core.port": .int(8088),
        "core.worker_num": .int(0),
        "core.queue_num": .int(0),
        "core.max_notification": .int(100),
        "core.max_body_bytes": .int(5 * 1024 * 1024),
        "core.sync": .bool(false),
        "core.sync_timeout": .int(60),
        "core.feedback_hook_url": .string(""),
        "core.feedback_timeout": .int(10),
        "core.feedback_header": .list([]),
        "core.shutdown_timeout": .int(30),
        "core.mode": .string("release"),
        "core.ca_file": .string(""),
        "core.retry_backoff_ms": .int(1000),
        "core.retry_backoff_max_ms": .int(60000),
        "core.max_deliveries_per_request": .int(50_000),
        "core.max_token_bytes": .int(4096),
        "core.max_field_bytes": .int(1024),
        "core.max_message_bytes": .int(256 * 1024),
        "core.max_object_keys": .int(1000),
        "core.max_json_depth": .int(32),
        "core.max_log_message_bytes": .int(1024),
        "core.max_sync_answer_bytes": .int(1 << 20),
        "core.read_timeout": .int(30),
        "core.idle_timeout": .int(60),
        "core.max_connections": .int(4096),
        "api.push_uri": .string("/api/push"),
        "api.stat_go_uri": .string("/api/stat/go"),
        "api.stat_app_uri": .string("/api/stat/app"),
        "api.config_uri": .string("/api/config"),
        "api.sys_stat_uri": .string("/sys/stats"),
        "api.metric_uri": .string("/metrics"),
        "api.health_uri": .string("/healthz"),
        "log.format": .string("string"),
        "log.access_level": .string("info"),
        "log.error_level": .string("error"),
        "log.hide_token": .bool(true),
        "log.hide_messages": .bool(false),
        "queue.engine": .string("sqlite"),
        "queue.max_pending": .int(200_000),
        "queue.sqlite.path": .string("data/pushgate.sqlite"),
        "queue.sqlite.synchronous": .string("normal"),
        "queue.postgres.url": .string(""),
        "queue.lease_timeout": .string("60s"),
        "queue.status_retention": .string("24h"),
        "queue.status_max_records": .int(1_000_000),
        "stat.engine": .string("memory"),
        "mock.enabled": .bool(false),
        "mock.apns_port": .int(0),
        "mock.fcm_port": .int(0),
        "mock.webpush_port": .int(0),
    ]

    /// The accepted range of every integer key: a value outside is a one-line error at start, never a
    /// trap later (timer amounts and dates overflow on huge numbers).
    public static let intRanges: [String: ClosedRange<Int>] = {
        var r: [String: ClosedRange<Int>] = [
            "core.port": 0...65535,
            "core.worker_num": 0...1_000_000,
            "core.queue_num": 0...100_000_000,
            "core.max_notification": 0...1_000_000,
            "core.max_body_bytes": 1...(1 << 30),
            "core.sync_timeout": 1...86_400,
            "core.feedback_timeout": 1...3600,
            "core.shutdown_timeout": 0...86_400,
            "core.retry_backoff_ms": 1...86_400_000,
            "core.retry_backoff_max_ms": 1...86_400_000,
            "core.max_deliveries_per_request": 1...10_000_000,
            "core.max_token_bytes": 64...(1 << 20),
            "core.max_field_bytes": 64...(1 << 20),
            "core.max_message_bytes": 64...(1 << 30),
            "core.max_object_keys": 1...1_000_000,
            "core.max_json_depth": 2...256,
            "core.max_log_message_bytes": 0...(1 << 20),
            "core.max_sync_answer_bytes": 1024...(1 << 30),
            "core.read_timeout": 1...3600,
            "core.idle_timeout": 1...86_400,
            "core.max_connections": 1...1_000_000,
            "queue.max_pending": 1...100_000_000,
            "queue.status_max_records": 0...1_000_000_000,
            "mock.apns_port": 0...65535,
            "mock.fcm_port": 0...65535,
            "mock.webpush_port": 0...65535,
        ]
        for section in ProviderRegistry.sections {
            for key in section.keys { if let range = key.range { r["\(section.name).\(key.name)"] = range } }
        }
        return r
    }()

    /// gorush keys (and sections) accepted for drop-in use, not acted upon.
    public static let ignoredGorushPrefixes: [String] = [
        "core.ssl", "core.cert_path", "core.key_path", "core.cert_base64", "core.key_base64", "core.http_proxy",
        "core.pid.", "core.auto_tls.", "grpc.", "log.access_log", "log.error_log",
        "queue.nsq.", "queue.nats.", "queue.redis.", "stat.redis.", "stat.boltdb.", "stat.buntdb.",
        "stat.leveldb.", "stat.badgerdb.",
    ] + ProviderRegistry.sections.flatMap { section in section.ignoredKeys.map { "\(section.name).\($0)" } }

    /// Keys whose values are secrets: shown as `[REDACTED]`.
    public static let secretKeys: Set<String> = Set(["queue.postgres.url", "core.key_base64", "core.feedback_header"])
        .union(providerKeys(.secret))

    static func providerKeys(_ secrecy: ConfigSecrecy) -> [String] {
        ProviderRegistry.sections.flatMap { section in section.keys.filter { $0.secrecy == secrecy }.map { "\(section.name).\($0.name)" } }
    }

    public init(yaml: String?, environment: [String: String]) throws {
        values = Self.defaults
        for k in values.keys { sources[k] = "default" }
        if let yaml, !yaml.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            let root: Any?
            do { root = try Yams.load(yaml: yaml) } catch {
                throw ConfigError(key: "file", problem: "not valid YAML: \(String(describing: error).split(separator: "\n").first ?? "")")
            }
            if let root {
                guard let dict = root as? [String: Any] else { throw ConfigError(key: "file", problem: "top level must be a mapping of sections") }
                var flat: [(String, Any)] = []
                Self.flatten(dict, prefix: "", into: &flat)
                for (key, raw) in flat.sorted(by: { $0.0 < $1.0 }) {
                    guard let def = Self.defaults[key] else {
                        if !Self.ignoredGorushPrefixes.contains(where: { key == $0 || key.hasPrefix($0) }) {
                            warnings.append("unknown config key \(key) ignored")
                        }
                        continue
                    }
                    values[key] = try Self.coerce(raw, like: def, key: key)
                    sources[key] = "file"
                }
            }
        }
        for (key, def) in Self.defaults {
            let suffix = key.replacingOccurrences(of: ".", with: "_").uppercased()
            for prefix in ["GORUSH_", "PUSHGATE_"] {   // later wins
                if let v = environment[prefix + suffix] {
                    values[key] = try Self.coerce(v, like: def, key: key)
                    sources[key] = "env \(prefix + suffix)"
                }
            }
        }
        for (key, value) in values { try Self.checkRange(key, value) }
    }

    static func checkRange(_ key: String, _ value: ConfigValue) throws {
        guard case .int(let i) = value, let range = intRanges[key], !range.contains(i) else { return }
        throw ConfigError(key: key, problem: "\(i) is out of range (\(range.lowerBound)...\(range.upperBound))")
    }

    public static func load(path: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> RawConfig {
        var text: String?
        if let path {
            do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
                throw ConfigError(key: "--config", problem: "cannot read \(path): \(error.localizedDescription)")
            }
        }
        return try RawConfig(yaml: text, environment: environment)
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
            if let a = raw as? [Any] { return .list(a.map { "\($0)" }) }
            if let s = raw as? String {
                let parts = s.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                return .list(parts)
            }
            throw ConfigError(key: key, problem: "expected a list")
        }
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
        let prefix = name + "."
        var v: [String: ConfigValue] = [:], src: [String: String] = [:]
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
    public static let redactedIdentifiers: Set<String> = Set(["core.key_path", "core.cert_path"]).union(providerKeys(.identifier))

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

    /// The effective configuration as YAML, secrets shown as `[REDACTED]`.
    public func redactedYAML() -> String {
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
        return (try? Yams.dump(object: root, sortKeys: true)) ?? ""
    }

    static func insert(_ dict: inout [String: Any], path: [String], value: Any) {
        guard let first = path.first else { return }
        if path.count == 1 { dict[first] = value; return }
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

/// The typed view the server uses, validated.
public struct GatewaySettings: Sendable {
    public var address: String
    public var port: Int
    public var maxNotification: Int
    public var maxBodyBytes: Int
    public var sync: Bool
    public var syncTimeout: Int
    public var feedbackURL: String
    public var feedbackHeaders: [String]
    public var feedbackTimeout: Int
    public var shutdownTimeout: Int
    public var caFile: String
    public var hideToken: Bool
    public var queueEngine: String
    public var maxPending: Int
    public var routes: Routes
    public var retryBackoff: Double
    public var retryBackoffMax: Double
    /// What a `/api/push` body is held to (`core.max_*`, `<platform>.max_tokens`).
    public var limits: RequestLimits
    /// `core.max_log_message_bytes`: the message repeated in sync answers and feedback posts is cut here.
    public var maxLogMessageBytes: Int
    /// `core.max_sync_answer_bytes`: a sync answer lists failures up to about this size.
    public var maxSyncAnswerBytes: Int
    /// `core.read_timeout`: seconds a client has to send a whole request once it started.
    public var readTimeout: Int
    /// `core.idle_timeout`: seconds a connection may sit with no request before it is closed.
    public var idleTimeout: Int
    /// `core.max_connections`: open client connections; more are closed at once.
    public var maxConnections: Int

    public struct Routes: Sendable {
        public var push, statGo, statApp, config, sysStats, metrics, health: String
    }

    public init(_ raw: RawConfig) throws {
        address = raw.string("core.address")
        port = raw.int("core.port")
        guard (0...65535).contains(port) else { throw ConfigError(key: "core.port", problem: "\(port) is not a valid port (0-65535)") }
        maxNotification = raw.int("core.max_notification")
        maxBodyBytes = raw.int("core.max_body_bytes")
        guard maxBodyBytes > 0 else { throw ConfigError(key: "core.max_body_bytes", problem: "must be positive") }
        sync = raw.bool("core.sync")
        syncTimeout = max(1, raw.int("core.sync_timeout"))
        feedbackURL = raw.string("core.feedback_hook_url")
        if !feedbackURL.isEmpty, !(feedbackURL.hasPrefix("http://") || feedbackURL.hasPrefix("https://")) {
            throw ConfigError(key: "core.feedback_hook_url", problem: "\"\(feedbackURL)\" is not an http(s) URL")
        }
        feedbackHeaders = raw.list("core.feedback_header")
        for h in feedbackHeaders where !h.contains(":") {
            throw ConfigError(key: "core.feedback_header", problem: "\"\(h)\" is not of the form \"Key: value\"")
        }
        feedbackTimeout = max(1, raw.int("core.feedback_timeout"))
        shutdownTimeout = max(0, raw.int("core.shutdown_timeout"))
        caFile = raw.string("core.ca_file")
        if !caFile.isEmpty, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ConfigError(key: "core.ca_file", problem: "cannot read \(caFile)")
        }
        hideToken = raw.bool("log.hide_token")
        queueEngine = raw.string("queue.engine").lowercased()
        if queueEngine == "local" { queueEngine = "memory" }
        if queueEngine == "postgresql" { queueEngine = "postgres" }
        guard ["memory", "sqlite", "postgres"].contains(queueEngine) else {
            throw ConfigError(key: "queue.engine", problem: "\"\(queueEngine)\" is not supported (memory, sqlite, postgres)")
        }
        maxPending = raw.int("queue.max_pending")
        let queueNum = raw.int("core.queue_num")
        if queueNum > 0, raw.sources["queue.max_pending"] == "default" { maxPending = queueNum }
        guard maxPending > 0 else { throw ConfigError(key: "queue.max_pending", problem: "must be positive") }
        retryBackoff = Double(raw.int("core.retry_backoff_ms")) / 1000
        retryBackoffMax = Double(raw.int("core.retry_backoff_max_ms")) / 1000
        guard retryBackoff > 0, retryBackoffMax >= retryBackoff else {
            throw ConfigError(key: "core.retry_backoff_ms", problem: "must be positive and at most core.retry_backoff_max_ms")
        }
        var limits = RequestLimits()
        limits.maxNotifications = maxNotification
        limits.maxDeliveries = raw.int("core.max_deliveries_per_request")
        limits.maxTokenBytes = raw.int("core.max_token_bytes")
        limits.maxFieldBytes = raw.int("core.max_field_bytes")
        limits.maxMessageBytes = raw.int("core.max_message_bytes")
        limits.maxObjectKeys = raw.int("core.max_object_keys")
        limits.maxDepth = raw.int("core.max_json_depth")
        for p in ProviderRegistry.platforms { limits.maxTokens[p] = raw.section(p.name)[ProviderSettings.maxTokens(limits.maxTokens(for: p))] }
        self.limits = limits
        maxLogMessageBytes = raw.int("core.max_log_message_bytes")
        maxSyncAnswerBytes = raw.int("core.max_sync_answer_bytes")
        readTimeout = raw.int("core.read_timeout")
        idleTimeout = raw.int("core.idle_timeout")
        maxConnections = raw.int("core.max_connections")
        routes = Routes(
            push: raw.string("api.push_uri"), statGo: raw.string("api.stat_go_uri"), statApp: raw.string("api.stat_app_uri"),
            config: raw.string("api.config_uri"), sysStats: raw.string("api.sys_stat_uri"), metrics: raw.string("api.metric_uri"),
            health: raw.string("api.health_uri"))
    }
}

/// The `core` keys every outbound connection uses (providers, OAuth, feedback): read by the gateway
/// and by `pushgate send`.
public struct OutboundSettings: Sendable {
    public static let caFileKey = Setting<String>("ca_file", "")
    public static let feedbackTimeoutKey = Setting<Int>("feedback_timeout", 10, range: 1...3600)

    /// `core.ca_file`: extra trusted roots (PEM).
    public var caFile: String
    /// `core.feedback_timeout`: seconds.
    public var feedbackTimeout: Int

    public init(_ raw: RawConfig) {
        let core = raw.section("core")
        caFile = core[Self.caFileKey]
        feedbackTimeout = core[Self.feedbackTimeoutKey]
    }
}
