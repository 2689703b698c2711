import Foundation

/// An arbitrary JSON value that keeps integers apart from doubles and object key order as received,
/// so `data` and pass-through objects reach providers exactly as the client meant them.
public enum JSONValue: Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d == d.rounded() && abs(d) < 9e15: return Int64(d)
        default: return nil
        }
    }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }

    public subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// Compact JSON text.
    public var jsonString: String {
        var w = JSONWriter()
        w.write(self)
        return w.string
    }

    /// gorush's FCM `data` stringification: strings as they are, everything else JSON-encoded.
    public var fcmDataString: String {
        if case .string(let s) = self { return s }
        return jsonString
    }
}

/// An ordered JSON object (insertion order preserved, last write wins on duplicate keys).
public struct JSONObject: Sendable, Equatable, Hashable, Sequence {
    public private(set) var entries: [(key: String, value: JSONValue)]

    public init() { entries = [] }
    /// From pairs; a repeated key keeps its first place and its last value. Linear time.
    public init(_ pairs: [(String, JSONValue)]) {
        entries = []
        entries.reserveCapacity(pairs.count)
        var seen: [String: Int] = [:]
        for (k, v) in pairs {
            if let at = seen[k] {
                entries[at].value = v
            } else {
                seen[k] = entries.count
                entries.append((k, v))
            }
        }
    }

    /// From entries whose keys are known to be distinct (the parser's and the decoder's).
    init(uniqueEntries: [(key: String, value: JSONValue)]) { entries = uniqueEntries }

    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }
    public var keys: [String] { entries.map(\.key) }

    public subscript(key: String) -> JSONValue? {
        get { entries.first(where: { $0.key == key })?.value }
        set {
            if let i = entries.firstIndex(where: { $0.key == key }) {
                if let v = newValue { entries[i].value = v } else { entries.remove(at: i) }
            } else if let v = newValue {
                entries.append((key, v))
            }
        }
    }

    public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> { entries.makeIterator() }

    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        a.entries.count == b.entries.count && zip(a.entries, b.entries).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }
    public func hash(into h: inout Hasher) {
        for e in entries {
            h.combine(e.key)
            h.combine(e.value)
        }
    }
}

extension JSONValue: Codable {
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
            return
        }
        if let b = try? c.decode(Bool.self) {
            self = .bool(b)
            return
        }
        if let i = try? c.decode(Int64.self) {
            self = .int(i)
            return
        }
        if let d = try? c.decode(Double.self) {
            self = .double(d)
            return
        }
        if let s = try? c.decode(String.self) {
            self = .string(s)
            return
        }
        if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
            return
        }
        if let o = try? c.decode(JSONObject.self) {
            self = .object(o)
            return
        }
        throw DecodingError.dataCorruptedError(in: c, debugDescription: "unsupported JSON value")
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }
}

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { return nil }
}

extension JSONObject: Codable {
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: AnyKey.self)
        // Foundation does not promise key order from allKeys; sort for determinism. Keys are distinct.
        var entries: [(key: String, value: JSONValue)] = []
        for key in c.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
            entries.append((key.stringValue, try c.decode(JSONValue.self, forKey: key)))
        }
        self.init(uniqueEntries: entries)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: AnyKey.self)
        for (k, v) in entries { try c.encode(v, forKey: AnyKey(stringValue: k)) }
    }
}

/// A small, fast JSON text writer with exact control over the bytes (payload sizes are checked on them).
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []

    public init(reservingCapacity n: Int = 256) { bytes.reserveCapacity(n) }

    public var string: String { String(decoding: bytes, as: UTF8.self) }

    public mutating func raw(_ s: StaticString) {
        s.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    public mutating func raw(_ s: String) { bytes.append(contentsOf: s.utf8) }

    public mutating func string(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(b)
            case UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(b)
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0x08: raw("\\b")
            case 0x0C: raw("\\f")
            case 0..<0x20:
                raw("\\u00")
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(hex[Int(b >> 4)])
                bytes.append(hex[Int(b & 0xF)])
            default: bytes.append(b)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func int<I: BinaryInteger>(_ i: I) { raw(String(i)) }

    public mutating func double(_ d: Double) {
        if d.isFinite, d == d.rounded(), abs(d) < 1e15 { raw(String(Int64(d))) } else if d.isFinite { raw("\(d)") } else { raw("null") }
    }

    public mutating func write(_ v: JSONValue) {
        switch v {
        case .null: raw("null")
        case .bool(let b): raw(b ? "true" : "false")
        case .int(let i): int(i)
        case .double(let d): double(d)
        case .string(let s): string(s)
        case .array(let a):
            bytes.append(UInt8(ascii: "["))
            for (i, e) in a.enumerated() {
                if i > 0 { bytes.append(UInt8(ascii: ",")) }
                write(e)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let o):
            write(o)
        }
    }

    public mutating func write(_ o: JSONObject) {
        bytes.append(UInt8(ascii: "{"))
        for (i, e) in o.entries.enumerated() {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            string(e.key)
            bytes.append(UInt8(ascii: ":"))
            write(e.value)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// Writes an array of strings: `["a","b"]`.
    public mutating func strings<S: Sequence<String>>(_ list: S) {
        bytes.append(UInt8(ascii: "["))
        var first = true
        for s in list {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            string(s)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// Writes `"key":` preceded by a comma unless `first`.
    public mutating func key(_ k: String, first: inout Bool) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        string(k)
        bytes.append(UInt8(ascii: ":"))
    }
}
