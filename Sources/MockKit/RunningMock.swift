import Foundation
import ProviderKit

/// A running mock described by its values, for a provider mock that needs nothing else of
/// `RunningProviderMock`: its YAML snippet is made from the same keys that point a test gateway at
/// it (its overrides, then its defaults), so the two cannot disagree.
public struct RunningMock<Mock: Sendable>: RunningProviderMock {
    public let mock: Mock
    public let name: String
    public let baseURL: String
    public let configOverrides: [(key: String, value: ConfigValue)]
    public let configDefaults: [(key: String, value: ConfigValue)]
    public let bannerLine: String
    public let records: [MockRecords]
    /// A comment after a key's line in the snippet, by key (`oppo.master_secret`).
    private let comments: [String: String]
    private let stopMock: @Sendable () async throws -> Void

    public init(
        mock: Mock, name: String, baseURL: String, overrides: [(key: String, value: ConfigValue)],
        defaults: [(key: String, value: ConfigValue)] = [], comments: [String: String] = [:], banner: String,
        records: [MockRecords] = [], stop: @escaping @Sendable () async throws -> Void
    ) {
        self.mock = mock
        self.name = name
        self.baseURL = baseURL
        self.configOverrides = overrides
        self.configDefaults = defaults
        self.comments = comments
        self.bannerLine = banner
        self.records = records
        self.stopMock = stop
    }

    public var configSnippet: String { MockConfigYAML.render(configOverrides + configDefaults, comments: comments) }

    public func stop() async throws { try await stopMock() }
}

/// Dotted configuration keys (`section.key`, `section.sub.key`) as YAML maps, in the order given
/// (a section's keys together where its first key is), each section followed by a blank line.
public enum MockConfigYAML {
    public static func render(_ values: [(key: String, value: ConfigValue)], comments: [String: String] = [:]) -> String {
        var root = Node()
        for (key, value) in values { root.insert(key.split(separator: ".").map(String.init), key: key, value: value) }
        var out = ""
        for name in root.order {
            guard let section = root.children[name] else { continue }
            section.write(name: name, indent: "", comments: comments, to: &out)
            out += "\n"
        }
        return out
    }

    /// A YAML scalar: strings double-quoted with JSON's escapes (valid YAML), lists in flow style.
    public static func scalar(_ v: ConfigValue) -> String {
        switch v {
        case .string(let s): return quoted(s)
        case .int(let i): return String(i)
        case .bool(let b): return b ? "true" : "false"
        case .list(let l): return "[" + l.map(quoted).joined(separator: ", ") + "]"
        }
    }

    /// A JSON string is a YAML double-quoted scalar with the same escapes.
    static func quoted(_ s: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        guard let data = try? encoder.encode(s) else { return "\"\"" }
        return String(decoding: data, as: UTF8.self)
    }

    private struct Node {
        var order: [String] = []
        var children: [String: Node] = [:]
        var value: (key: String, value: ConfigValue)?

        mutating func insert(_ path: [String], key: String, value: ConfigValue) {
            guard let first = path.first else {
                self.value = (key, value)
                return
            }
            if children[first] == nil { order.append(first) }
            children[first, default: Node()].insert(Array(path.dropFirst()), key: key, value: value)
        }

        func write(name: String, indent: String, comments: [String: String], to out: inout String) {
            if let (key, v) = value {
                out += "\(indent)\(name): \(MockConfigYAML.scalar(v))"
                if let c = comments[key] { out += "   # \(c)" }
                out += "\n"
                return
            }
            out += "\(indent)\(name):\n"
            for child in order {
                children[child]?.write(name: child, indent: indent + "  ", comments: comments, to: &out)
            }
        }
    }
}
