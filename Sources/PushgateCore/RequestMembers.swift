/// A notification member a provider module reads (`thread-id`, `huawei_data`, `wns`): declared by
/// its module (`ProviderModule.requestMembers`), decoded by the one request decoder from the one
/// parse of the body, and kept in `PushNotification.fields` under its name. The core names none.
public struct RequestMember: Sendable, Equatable {
    /// The member's JSON name (lower-case ASCII; a body's key matches it after Go's case folding).
    public var name: String
    /// The value's JSON type in the OpenAPI description (`string`, `integer`, `object`, …).
    public var type: String
    /// One line: what it is and what it does.
    public var doc: String
    /// Reads and checks the member from its notification (`reader` holds every member of it) and
    /// gives the value to keep (nil: nothing kept). Errors name the field.
    public var decode: @Sendable (_ reader: RequestMemberReader) throws(RequestMemberProblem) -> JSONValue?

    public init(
        _ name: String, type: String, doc: String,
        decode: @escaping @Sendable (_ reader: RequestMemberReader) throws(RequestMemberProblem) -> JSONValue?
    ) {
        self.name = name
        self.type = type
        self.doc = doc
        self.decode = decode
    }

    /// Two declarations are the same when they say the same (the decoding is not compared).
    public static func == (a: Self, b: Self) -> Bool { a.name == b.name && a.type == b.type && a.doc == b.doc }

    /// A string member held to `kind`'s length limit.
    public static func string(_ name: String, _ kind: RequestStringKind, doc: String) -> RequestMember {
        RequestMember(name, type: "string", doc: doc) { r throws(RequestMemberProblem) in try r.string(name, kind).map(JSONValue.string) }
    }

    /// An array of strings, each held to `kind`'s length limit.
    public static func strings(_ name: String, _ kind: RequestStringKind, doc: String) -> RequestMember {
        RequestMember(name, type: "array", doc: doc) { r throws(RequestMemberProblem) in
            try r.strings(name, kind).map { .array($0.map(JSONValue.string)) }
        }
    }

    public static func bool(_ name: String, doc: String) -> RequestMember {
        RequestMember(name, type: "boolean", doc: doc) { r throws(RequestMemberProblem) in try r.bool(name).map(JSONValue.bool) }
    }

    /// An integer within `range` (checked before any conversion).
    public static func int(_ name: String, in range: ClosedRange<Int64>, doc: String) -> RequestMember {
        RequestMember(name, type: "integer", doc: doc) { r throws(RequestMemberProblem) in try r.int(name, in: range).map(JSONValue.int) }
    }

    public static func double(_ name: String, doc: String) -> RequestMember {
        RequestMember(name, type: "number", doc: doc) { r throws(RequestMemberProblem) in try r.double(name).map(JSONValue.double) }
    }

    /// An object kept as it came (its strings held to the request's limits by the parser).
    public static func object(_ name: String, doc: String) -> RequestMember {
        RequestMember(name, type: "object", doc: doc) { r throws(RequestMemberProblem) in try r.object(name).map(JSONValue.object) }
    }
}

/// A refused member: the field's path (`notifications[0].alert.title`), the problem, and the
/// configuration key of the limit crossed, if one was.
public struct RequestMemberProblem: Error, Sendable, Equatable {
    public var field: String
    public var problem: String
    /// A configuration key when a limit was crossed (then the answer says "over a limit").
    public var limit: String?

    public init(field: String, problem: String, limit: String? = nil) {
        self.field = field
        self.problem = problem
        self.limit = limit
    }
}

/// Which string limit applies to a member.
public enum RequestStringKind: Sendable {
    /// `core.max_token_bytes`: tokens, URLs.
    case token
    /// `core.max_field_bytes`: ids and other short strings.
    case field
    /// `core.max_message_bytes`: texts and payloads.
    case message

    func limit(_ l: RequestLimits) -> (Int, String) {
        switch self {
        case .token: return (l.maxTokenBytes, "core.max_token_bytes")
        case .field: return (l.maxFieldBytes, "core.max_field_bytes")
        case .message: return (l.maxMessageBytes, "core.max_message_bytes")
        }
    }
}

/// Typed reads of one JSON object's members (a notification, or an object inside one); `null`
/// reads as absent, as gorush's decoding does. Members are matched by name case-insensitively, as
/// Go's `encoding/json` does.
public struct RequestMemberReader: Sendable {
    let members: FoldedMembers
    /// The object's path in the body (`notifications[0]`).
    public let path: String
    public let limits: RequestLimits

    public init(object: JSONObject, path: String, limits: RequestLimits) {
        members = FoldedMembers(object)
        self.path = path
        self.limits = limits
    }

    /// The member's value, nil when missing or null.
    public func present(_ key: String) -> JSONValue? {
        guard let v = members[key], v != .null else { return nil }
        return v
    }

    /// `path.key`.
    public func field(_ key: String) -> String { path + "." + key }

    /// A reader of the object member `key` (at `path.key`).
    public func reader(of object: JSONObject, at key: String) -> RequestMemberReader {
        RequestMemberReader(object: object, path: field(key), limits: limits)
    }

    public func string(_ key: String, _ kind: RequestStringKind) throws(RequestMemberProblem) -> String? {
        guard let v = present(key) else { return nil }
        guard case .string(let s) = v else { throw RequestMemberProblem(field: field(key), problem: "expected a string") }
        try check(s, key: field(key), kind)
        return s
    }

    /// `key` is built only when the check fails (a 10,000-token array makes no path strings).
    public func check(_ s: String, key: @autoclosure () -> String, _ kind: RequestStringKind) throws(RequestMemberProblem) {
        let n = s.utf8.count
        let (max, name) = kind.limit(limits)
        if n > max {
            throw RequestMemberProblem(field: key(), problem: "\(n) bytes, over the limit of \(max)", limit: name)
        }
    }

    public func strings(_ key: String, _ kind: RequestStringKind) throws(RequestMemberProblem) -> [String]? {
        guard let v = present(key) else { return nil }
        guard case .array(let list) = v else { throw RequestMemberProblem(field: field(key), problem: "expected an array of strings") }
        var out: [String] = []
        out.reserveCapacity(list.count)
        for (i, e) in list.enumerated() {
            guard case .string(let s) = e else { throw RequestMemberProblem(field: "\(field(key))[\(i)]", problem: "expected a string") }
            try check(s, key: "\(field(key))[\(i)]", kind)
            out.append(s)
        }
        return out
    }

    public func bool(_ key: String) throws(RequestMemberProblem) -> Bool? {
        guard let v = present(key) else { return nil }
        guard case .bool(let b) = v else { throw RequestMemberProblem(field: field(key), problem: "expected a boolean") }
        return b
    }

    public func object(_ key: String) throws(RequestMemberProblem) -> JSONObject? {
        guard let v = present(key) else { return nil }
        guard case .object(let o) = v else { throw RequestMemberProblem(field: field(key), problem: "expected an object") }
        return o
    }

    /// An integer within `range`; an integral number written as a double (`3600.0`) is accepted.
    public func int(_ key: String, in range: ClosedRange<Int64>) throws(RequestMemberProblem) -> Int64? {
        guard let v = present(key) else { return nil }
        let i: Int64
        switch v {
        case .int(let x): i = x
        case .double(let d) where d == d.rounded() && d >= Double(range.lowerBound) && d <= Double(range.upperBound):
            i = Int64(d)
        case .double:
            throw RequestMemberProblem(field: field(key), problem: "expected an integer between \(range.lowerBound) and \(range.upperBound)")
        default:
            throw RequestMemberProblem(field: field(key), problem: "expected an integer")
        }
        guard range.contains(i) else {
            throw RequestMemberProblem(field: field(key), problem: "out of range: must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return i
    }

    public func double(_ key: String) throws(RequestMemberProblem) -> Double? {
        guard let v = present(key) else { return nil }
        switch v {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: throw RequestMemberProblem(field: field(key), problem: "expected a number")
        }
    }
}

/// The provider-owned members of a notification, by name, in name order (so that two notifications
/// with the same members compare equal however they were built). Stored flat beside the shared
/// members, under the names they have in a request.
public struct NotificationFields: Sendable, Equatable, Hashable, Sequence {
    public private(set) var entries: [(key: String, value: JSONValue)] = []

    public init() {}

    public var isEmpty: Bool { entries.isEmpty }
    public var count: Int { entries.count }

    public subscript(key: String) -> JSONValue? {
        get {
            for e in entries where e.key == key { return e.value }
            return nil
        }
        set {
            if let i = entries.firstIndex(where: { $0.key == key }) {
                if let v = newValue { entries[i].value = v } else { entries.remove(at: i) }
            } else if let v = newValue {
                let at = entries.firstIndex { $0.key > key } ?? entries.count
                entries.insert((key, v), at: at)
            }
        }
    }

    public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> { entries.makeIterator() }

    public static func == (a: Self, b: Self) -> Bool {
        a.entries.count == b.entries.count && zip(a.entries, b.entries).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    public func hash(into h: inout Hasher) {
        for e in entries {
            h.combine(e.key)
            h.combine(e.value)
        }
    }

    // Typed reads for the provider modules' accessors.
    public func string(_ key: String) -> String? { self[key]?.stringValue }
    public func bool(_ key: String) -> Bool? { self[key]?.boolValue }
    public func object(_ key: String) -> JSONObject? { self[key]?.objectValue }
    public func int(_ key: String) -> Int? { self[key]?.intValue.flatMap { Int(exactly: $0) } }
    public func int64(_ key: String) -> Int64? { self[key]?.intValue }
    public func double(_ key: String) -> Double? {
        switch self[key] {
        case .int(let i)?: return Double(i)
        case .double(let d)?: return d
        default: return nil
        }
    }
    public func strings(_ key: String) -> [String]? {
        guard case .array(let list)? = self[key] else { return nil }
        return list.compactMap(\.stringValue)
    }

    // Typed writes (nil removes the member).
    public mutating func set(_ key: String, _ v: String?) { self[key] = v.map(JSONValue.string) }
    public mutating func set(_ key: String, _ v: Bool?) { self[key] = v.map(JSONValue.bool) }
    public mutating func set(_ key: String, _ v: JSONObject?) { self[key] = v.map(JSONValue.object) }
    public mutating func set(_ key: String, _ v: Int?) { self[key] = v.map { JSONValue.int(Int64($0)) } }
    public mutating func set(_ key: String, _ v: Int64?) { self[key] = v.map(JSONValue.int) }
    public mutating func set(_ key: String, _ v: Double?) { self[key] = v.map(JSONValue.double) }
    public mutating func set(_ key: String, _ v: [String]?) { self[key] = v.map { .array($0.map(JSONValue.string)) } }
}
