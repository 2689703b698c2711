import PushgateCore

/// A configuration problem: one line naming the key and what is wrong.
public struct ConfigError: Error, CustomStringConvertible, Equatable {
    public var key: String
    public var problem: String
    public init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }
    public var description: String { "config error: \(key): \(problem)" }
}

/// One configuration value, as read from YAML, the environment or `--set`.
public enum ConfigValue: Sendable, Equatable {
    case string(String)
    case int(Int)
    case bool(Bool)
    case list([String])
}

/// The Swift types a setting can have.
public protocol ConfigValueType: Sendable {
    init?(configValue: ConfigValue)
    var configValue: ConfigValue { get }
}

extension Int: ConfigValueType {
    public init?(configValue: ConfigValue) {
        guard case .int(let i) = configValue else { return nil }
        self = i
    }
    public var configValue: ConfigValue { .int(self) }
}

extension String: ConfigValueType {
    public init?(configValue: ConfigValue) {
        guard case .string(let s) = configValue else { return nil }
        self = s
    }
    public var configValue: ConfigValue { .string(self) }
}

extension Bool: ConfigValueType {
    public init?(configValue: ConfigValue) {
        guard case .bool(let b) = configValue else { return nil }
        self = b
    }
    public var configValue: ConfigValue { .bool(self) }
}

extension Array: ConfigValueType where Element == String {
    public init?(configValue: ConfigValue) {
        guard case .list(let l) = configValue else { return nil }
        self = l
    }
    public var configValue: ConfigValue { .list(self) }
}

/// How `GET /api/config` shows a key's value.
public enum ConfigSecrecy: Sendable, Equatable {
    case plain
    /// Credentials: `[REDACTED]` when set.
    case secret
    /// Where credentials live and which key they are (key paths, key ids): `[REDACTED]` when set.
    case identifier
}

/// One key of a section, untyped: its name inside the section, default, integer range, secrecy.
public struct ConfigKey: Sendable {
    public var name: String
    public var defaultValue: ConfigValue
    /// The accepted integers: a value outside is a one-line error at start, never a trap later.
    public var range: ClosedRange<Int>?
    public var secrecy: ConfigSecrecy
    /// One line for the configuration reference (`pushgate config-reference` writes docs/configuration.md).
    public var doc: String

    public init(
        _ name: String, _ defaultValue: ConfigValue, range: ClosedRange<Int>? = nil, secrecy: ConfigSecrecy = .plain, doc: String = ""
    ) {
        self.name = name
        self.defaultValue = defaultValue
        self.range = range
        self.secrecy = secrecy
        self.doc = doc
    }
}

/// A typed key: read with `section[setting]`.
public struct Setting<Value: ConfigValueType>: Sendable {
    public let key: ConfigKey
    public let defaultValue: Value
    public var name: String { key.name }

    public init(_ name: String, _ defaultValue: Value, secrecy: ConfigSecrecy = .plain, doc: String = "") {
        self.defaultValue = defaultValue
        key = ConfigKey(name, defaultValue.configValue, secrecy: secrecy, doc: doc)
    }
}

extension Setting where Value == Int {
    public init(_ name: String, _ defaultValue: Int, range: ClosedRange<Int>, doc: String = "") {
        self.defaultValue = defaultValue
        key = ConfigKey(name, .int(defaultValue), range: range, doc: doc)
    }
}

/// A configuration section (`ios:`, `webpush:` ...): its keys, and the gorush keys it accepts without
/// acting on them (no unknown-key warning).
public struct ConfigSection: Sendable {
    public var name: String
    public var keys: [ConfigKey]
    public var ignoredKeys: [String]
    /// What the section is for, one line (docs/configuration.md's heading).
    public var about: String?
    /// gorush 1.22 has the section (its keys not marked `(new)` are gorush's); false: Pushgate's own.
    public var inGorush: Bool

    public init(_ name: String, keys: [ConfigKey], ignoredKeys: [String] = [], about: String? = nil, inGorush: Bool = true) {
        self.name = name
        self.keys = keys
        self.ignoredKeys = ignoredKeys
        self.about = about
        self.inGorush = inGorush
    }
}

/// The keys every provider section has (gorush's names).
public enum ProviderSettings {
    public static let enabled = Setting<Bool>("enabled", false, doc: "send to this provider")
    public static func maxTokens(_ d: Int) -> Setting<Int> {
        Setting("max_tokens", d, range: 1...1_000_000, doc: "tokens + subscriptions of one notification")
    }
    public static func maxRetry(_ d: Int) -> Setting<Int> {
        Setting("max_retry", d, range: 0...100, doc: "retries after the first attempt; a request's `retry` can lower it")
    }
    public static func maxConcurrentPushes(_ d: Int) -> Setting<Int> {
        Setting(
            "max_concurrent_pushes", d, range: 1...100_000,
            doc:
                "deliveries in flight; a provider's rate is at most this divided by its round trip (2048 at 100 ms: 20,480/s; [docs/http2-pool.md](docs/http2-pool.md))"
        )
    }
    /// `<platform>.max_connections`: the ceiling of the provider's HTTP/2 connections (per origin).
    /// More open while deliveries wait and every open one has all the streams its server allows in
    /// use; those beyond the floor close after a minute without a stream.
    public static func maxConnections(_ d: Int, per: String = "", floor: String = "the first 2") -> Setting<Int> {
        Setting(
            "max_connections", d, range: 1...1000,
            doc:
                "(new) HTTP/2 connections at most\(per): another opens while deliveries wait and every open one has all the streams its server allows (SETTINGS_MAX_CONCURRENT_STREAMS) in use; those beyond \(floor) close after 60 s without a stream ([docs/http2-pool.md](docs/http2-pool.md))"
        )
    }
    /// `<platform>.coalesce_seconds`: the default coalescing window of background pushes that carry
    /// a `collapse_id` (0: none). Every provider section has it (added by the registry).
    public static let coalesceSeconds = Setting<Int>(
        "coalesce_seconds", 0, range: 0...86_400,
        doc: "coalescing window of background / data-only pushes with a `collapse_id` (0: off); see docs/delivery-controls.md")
}

/// The values of one section, after file, environment and overrides.
public struct SectionValues: Sendable {
    public let name: String
    public let values: [String: ConfigValue]
    /// Where each value came from: "default", "file", "env ...", "override".
    public let sources: [String: String]

    public init(name: String, values: [String: ConfigValue], sources: [String: String] = [:]) {
        self.name = name
        self.values = values
        self.sources = sources
    }

    public subscript<V>(_ setting: Setting<V>) -> V {
        values[setting.name].flatMap { V(configValue: $0) } ?? setting.defaultValue
    }

    /// `section.key`, for error messages.
    public func path<V>(_ setting: Setting<V>) -> String { "\(name).\(setting.name)" }

    public func isDefault<V>(_ setting: Setting<V>) -> Bool { (sources[setting.name] ?? "default") == "default" }
}

/// The sections a provider module reads, by name.
public struct ProviderConfig: Sendable {
    public let sections: [String: SectionValues]
    /// The process environment (e.g. `GOOGLE_APPLICATION_CREDENTIALS`).
    public let environment: [String: String]

    public init(sections: [String: SectionValues], environment: [String: String]) {
        self.sections = sections
        self.environment = environment
    }

    public subscript(_ section: String) -> SectionValues {
        sections[section] ?? SectionValues(name: section, values: [:])
    }
}
