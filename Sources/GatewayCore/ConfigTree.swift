import Foundation

/// A section of the configuration file kept as written, for a way in that reads its own section
/// (`RawConfig.adapterSections`): nested mappings whose keys are data (Matrix app ids contain dots)
/// cannot be flattened to `section.key`.
public indirect enum ConfigTree: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case list([ConfigTree])
    case map([String: ConfigTree])

    /// From a value of the parsed YAML (or of the embedding API's tree).
    public init(_ any: Any) {
        switch any {
        case let b as Bool: self = .bool(b)
        case let i as Int: self = .int(i)
        case let d as Double: self = .double(d)
        case let s as String: self = .string(s)
        case let l as [Any]: self = .list(l.map(ConfigTree.init))
        case let m as [String: Any]: self = .map(m.mapValues(ConfigTree.init))
        default: self = .null
        }
    }

    public subscript(key: String) -> ConfigTree? {
        if case .map(let m) = self { return m[key] }
        return nil
    }
}

/// Another program's configuration format read as Pushgate's: `pushgate serve --config` of a file
/// in that format works as it is. The way in that owns the format translates the file's tree.
public protocol ConfigDialect {
    /// The tree in Pushgate's shape and one warning per setting not acted on; nil when `tree` is
    /// not in this format. Throws `ConfigError` naming the key it cannot take.
    static func translate(_ tree: [String: Any]) throws -> (tree: [String: Any], warnings: [String])?
}
