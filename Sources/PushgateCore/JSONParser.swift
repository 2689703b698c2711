/// Limits a JSON document must stay within while it is parsed. Each one bounds work or memory
/// per request; crossing one stops the parse at once with a `JSONParseError` naming the place.
public struct JSONLimits: Sendable, Equatable {
    /// Deepest nesting of arrays and objects (the top-level value is depth 1).
    public var maxDepth: Int
    /// Most keys in one object.
    public var maxObjectKeys: Int
    /// Most values (of any kind, nested ones included) in the whole document.
    public var maxValues: Int
    /// Longest string (key or value), in UTF-8 bytes after unescaping.
    public var maxStringBytes: Int

    public init(maxDepth: Int = 32, maxObjectKeys: Int = 1000, maxValues: Int = 500_000, maxStringBytes: Int = 1 << 20) {
        self.maxDepth = maxDepth
        self.maxObjectKeys = maxObjectKeys
        self.maxValues = maxValues
        self.maxStringBytes = maxStringBytes
    }
}

/// Why a document was refused, and where: `path` is like `notifications[0].data.key`.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Not JSON (or not UTF-8), at `offset`.
        case syntax
        /// A number JSON allows but no value can hold (`1e400`).
        case numberOutOfRange
        /// A limit of `JSONLimits` was crossed.
        case depth, objectKeys, values, stringBytes
    }
    public var kind: Kind
    public var path: String
    public var offset: Int
    public var message: String

    public var description: String { "\(path): \(message)" }
}

/// A strict RFC 8259 parser from UTF-8 bytes to `JSONValue`.
///
/// Written here rather than using Foundation's `JSONDecoder` because a gateway needs what that one
/// does not offer: limits enforced while parsing (depth, keys, values, string size) so a hostile body
/// stops early; time linear in the input whatever its shape (no `try?` cascades per value, keys
/// de-duplicated with a hash table); object keys kept in the order received; integers kept apart
/// from doubles without a lossy round trip; NUL characters refused (a store column cannot hold them);
/// and the path of the offending field in every error. Iterative over nesting is not needed: depth is
/// capped before recursion can grow.
public struct JSONParser {
    private let bytes: [UInt8]
    private let limits: JSONLimits
    private var i = 0
    private var values = 0
    private var path: [PathComponent] = []

    enum PathComponent {
        case key(String)
        case index(Int)
    }

    /// Parses one JSON document (a leading UTF-8 byte-order mark is skipped).
    public static func parse(_ bytes: [UInt8], limits: JSONLimits = JSONLimits()) throws(JSONParseError) -> JSONValue {
        var p = JSONParser(bytes: bytes, limits: limits)
        if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { p.i = 3 }
        p.skipWhitespace()
        let v = try p.value(depth: 1)
        p.skipWhitespace()
        if p.i != bytes.count { throw p.fail(.syntax, "unexpected data after the JSON value") }
        return v
    }

    private init(bytes: [UInt8], limits: JSONLimits) {
        self.bytes = bytes
        self.limits = limits
    }

    /// `notifications[0].data`, or `body` at the top.
    var currentPath: String {
        var out = ""
        for c in path {
            switch c {
            case .key(let k): out += out.isEmpty ? k : "." + k
            case .index(let n): out += "[\(n)]"
            }
        }
        return out.isEmpty ? "body" : out
    }

    private func fail(_ kind: JSONParseError.Kind, _ message: String) -> JSONParseError {
        JSONParseError(kind: kind, path: currentPath, offset: i, message: message)
    }

    private mutating func skipWhitespace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x0A, 0x0D, 0x09: i += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        values += 1
        if values > limits.maxValues {
            throw fail(.values, "more than \(limits.maxValues) values in the document")
        }
        guard i < bytes.count else { throw fail(.syntax, "body is not valid JSON (unexpected end)") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return .object(try object(depth: depth))
        case UInt8(ascii: "["): return .array(try array(depth: depth))
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail(.syntax, "body is not valid JSON (unexpected character at byte \(i))")
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { throw fail(.syntax, "body is not valid JSON (unexpected end)") }
        let ok = word.withUTF8Buffer { w in
            for k in 0..<n where bytes[i + k] != w[k] { return false }
            return true
        }
        guard ok else { throw fail(.syntax, "body is not valid JSON (bad literal at byte \(i))") }
        i += n
    }

    private mutating func object(depth: Int) throws(JSONParseError) -> JSONObject {
        guard depth <= limits.maxDepth else { throw fail(.depth, "nested deeper than \(limits.maxDepth) levels") }
        i += 1
        var entries: [(key: String, value: JSONValue)] = []
        // Key -> index in entries, made once the object is large enough for a scan to matter.
        var index: [String: Int]?
        skipWhitespace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
            i += 1
            return JSONObject(uniqueEntries: entries)
        }
        while true {
            skipWhitespace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail(.syntax, "body is not valid JSON (expected a key at byte \(i))") }
            let key = try string()
            skipWhitespace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail(.syntax, "body is not valid JSON (expected ':' at byte \(i))") }
            i += 1
            skipWhitespace()
            path.append(.key(key))
            let v = try value(depth: depth + 1)
            path.removeLast()
            // Duplicate keys: the last value wins, in the place of the first (as JSONObject's setter).
            var existing: Int?
            if let index {
                existing = index[key]
            } else if entries.count < 16 {
                existing = entries.firstIndex { $0.key == key }
            } else {
                var made = [String: Int](minimumCapacity: entries.count * 2)
                for (n, e) in entries.enumerated() { made[e.key] = n }
                existing = made[key]
                index = made
            }
            if let existing {
                entries[existing].value = v
            } else {
                if entries.count >= limits.maxObjectKeys {
                    throw fail(.objectKeys, "more than \(limits.maxObjectKeys) keys in one object")
                }
                index?[key] = entries.count
                entries.append((key, v))
            }
            skipWhitespace()
            guard i < bytes.count else { throw fail(.syntax, "body is not valid JSON (unexpected end)") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
                continue
            }
            if bytes[i] == UInt8(ascii: "}") {
                i += 1
                return JSONObject(uniqueEntries: entries)
            }
            throw fail(.syntax, "body is not valid JSON (expected ',' or '}' at byte \(i))")
        }
    }

    private mutating func array(depth: Int) throws(JSONParseError) -> [JSONValue] {
        guard depth <= limits.maxDepth else { throw fail(.depth, "nested deeper than \(limits.maxDepth) levels") }
        i += 1
        var out: [JSONValue] = []
        skipWhitespace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
            i += 1
            return out
        }
        while true {
            skipWhitespace()
            path.append(.index(out.count))
            out.append(try value(depth: depth + 1))
            path.removeLast()
            skipWhitespace()
            guard i < bytes.count else { throw fail(.syntax, "body is not valid JSON (unexpected end)") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
                continue
            }
            if bytes[i] == UInt8(ascii: "]") {
                i += 1
                return out
            }
            throw fail(.syntax, "body is not valid JSON (expected ',' or ']' at byte \(i))")
        }
    }

    private mutating func number() throws(JSONParseError) -> JSONValue {
        let start = i
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count, isDigit(bytes[i]) else { throw fail(.syntax, "body is not valid JSON (bad number at byte \(start))") }
        if bytes[i] == UInt8(ascii: "0") {
            i += 1
        } else {
            while i < bytes.count, isDigit(bytes[i]) { i += 1 }
        }
        var integral = true
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            integral = false
            i += 1
            guard i < bytes.count, isDigit(bytes[i]) else { throw fail(.syntax, "body is not valid JSON (bad number at byte \(start))") }
            while i < bytes.count, isDigit(bytes[i]) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            integral = false
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count, isDigit(bytes[i]) else { throw fail(.syntax, "body is not valid JSON (bad number at byte \(start))") }
            while i < bytes.count, isDigit(bytes[i]) { i += 1 }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        if integral, let n = Int64(text) { return .int(n) }
        guard let d = Double(text), d.isFinite else {
            throw fail(.numberOutOfRange, "the number \(text.prefix(40)) is out of range")
        }
        return .double(d)
    }

    private func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    private mutating func string() throws(JSONParseError) -> String {
        let start = i
        i += 1
        // Fast path: no escapes. UTF-8 is validated by counting continuation bytes.
        var out: [UInt8] = []
        var segment = i
        while true {
            guard i < bytes.count else { throw fail(.syntax, "body is not valid JSON (unterminated string at byte \(start))") }
            let b = bytes[i]
            if b == UInt8(ascii: "\"") { break }
            if b < 0x20 { throw fail(.syntax, "body is not valid JSON (control character in a string at byte \(i))") }
            if b == UInt8(ascii: "\\") {
                out.append(contentsOf: bytes[segment..<i])
                try escape(into: &out)
                segment = i
                continue
            }
            if b < 0x80 {
                i += 1
                continue
            }
            try utf8Sequence()
        }
        out.append(contentsOf: bytes[segment..<i])
        i += 1
        if out.count > limits.maxStringBytes {
            throw fail(.stringBytes, "a string of \(out.count) bytes, over the limit of \(limits.maxStringBytes)")
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Checks one multi-byte UTF-8 sequence at `i` (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
    private mutating func utf8Sequence() throws(JSONParseError) {
        let b0 = bytes[i]
        let n: Int
        var lo: UInt8 = 0x80
        var hi: UInt8 = 0xBF
        switch b0 {
        case 0xC2...0xDF: n = 2
        case 0xE0:
            n = 3
            lo = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: n = 3
        case 0xED:
            n = 3
            hi = 0x9F
        case 0xF0:
            n = 4
            lo = 0x90
        case 0xF1...0xF3: n = 4
        case 0xF4:
            n = 4
            hi = 0x8F
        default: throw fail(.syntax, "body is not valid UTF-8 (byte \(i))")
        }
        guard i + n <= bytes.count else { throw fail(.syntax, "body is not valid UTF-8 (byte \(i))") }
        let b1 = bytes[i + 1]
        guard b1 >= lo, b1 <= hi else { throw fail(.syntax, "body is not valid UTF-8 (byte \(i + 1))") }
        for k in 2..<max(n, 2) where bytes[i + k] & 0xC0 != 0x80 {
            throw fail(.syntax, "body is not valid UTF-8 (byte \(i + k))")
        }
        i += n
    }

    private mutating func escape(into out: inout [UInt8]) throws(JSONParseError) {
        i += 1
        guard i < bytes.count else { throw fail(.syntax, "body is not valid JSON (unterminated string)") }
        let c = bytes[i]
        i += 1
        switch c {
        case UInt8(ascii: "\""): out.append(c)
        case UInt8(ascii: "\\"): out.append(c)
        case UInt8(ascii: "/"): out.append(c)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if scalar >= 0xD800, scalar <= 0xDBFF {
                guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                    throw fail(.syntax, "body is not valid JSON (unpaired surrogate escape at byte \(i))")
                }
                i += 2
                let low = try hex4()
                guard low >= 0xDC00, low <= 0xDFFF else { throw fail(.syntax, "body is not valid JSON (unpaired surrogate escape at byte \(i))") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if scalar >= 0xDC00, scalar <= 0xDFFF {
                throw fail(.syntax, "body is not valid JSON (unpaired surrogate escape at byte \(i))")
            }
            if scalar == 0 { throw fail(.syntax, "NUL characters (\\u0000) are not allowed") }
            guard let u = Unicode.Scalar(scalar) else { throw fail(.syntax, "body is not valid JSON (bad \\u escape)") }
            out.append(contentsOf: u.utf8)
        default:
            throw fail(.syntax, "body is not valid JSON (bad escape at byte \(i - 1))")
        }
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail(.syntax, "body is not valid JSON (bad \\u escape)") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[i]
            let d: UInt32
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(b - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(b - UInt8(ascii: "A") + 10)
            default: throw fail(.syntax, "body is not valid JSON (bad \\u escape at byte \(i))")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }
}
