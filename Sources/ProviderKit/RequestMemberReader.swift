import Foundation
import PushgateCore

/// A provider's request member refused: the full path of the field (`notifications[0].xiaomi.channel_id`
/// or `xiaomi.channel_id`), what is wrong, and the limit when one was passed.
public struct MemberFieldProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var problem: String
    public var limit: String?

    public init(field: String, problem: String, limit: String? = nil) {
        self.field = field
        self.problem = problem
        self.limit = limit
    }

    public var description: String { "\(field): \(problem)" }

    /// The gateway's 400 for it.
    public var ingestProblem: IngestProblem { IngestProblem(message: "invalid \(field)", detail: description) }
}

/// Reads a provider's own request member (`"xiaomi": {…}`) strictly: an object of known keys only,
/// each of the type and within the bounds the vendor allows, every refusal naming the field. Lengths
/// are counted in UTF-16 code units (what the vendors' Java servers count; a CJK character is 1,
/// an emoji 2), so a text accepted here is never over the vendor's limit.
public struct RequestMemberReader: Sendable {
    public let path: String
    public let object: JSONObject

    /// `value` must be an object whose keys are all in `known`.
    public init(_ value: JSONValue, path: String, known: Set<String>) throws(MemberFieldProblem) {
        guard case .object(let o) = value else { throw MemberFieldProblem(field: path, problem: "must be an object") }
        for key in o.keys where !known.contains(key) {
            throw MemberFieldProblem(
                field: "\(path).\(key.logSafe(max: 64))", problem: "unknown member (known: \(known.sorted().joined(separator: ", ")))")
        }
        self.path = path
        self.object = o
    }

    public func field(_ key: String) -> String { "\(path).\(key)" }

    /// Present and not null.
    func value(_ key: String) -> JSONValue? {
        guard let v = object[key] else { return nil }
        if case .null = v { return nil }
        return v
    }

    /// A string of 1...`maxLength` UTF-16 units without control characters.
    public func string(_ key: String, maxLength: Int, allowEmpty: Bool = false) throws(MemberFieldProblem) -> String? {
        guard let v = value(key) else { return nil }
        guard case .string(let s) = v else { throw MemberFieldProblem(field: field(key), problem: "must be a string") }
        if s.isEmpty && !allowEmpty { throw MemberFieldProblem(field: field(key), problem: "must not be empty") }
        if s.utf16.count > maxLength {
            throw MemberFieldProblem(
                field: field(key), problem: "is \(s.utf16.count) characters, at most \(maxLength) allowed", limit: "\(maxLength) characters")
        }
        if s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw MemberFieldProblem(field: field(key), problem: "must not contain control characters")
        }
        return s
    }

    /// One of `allowed` (strings).
    public func oneOf(_ key: String, _ allowed: [String]) throws(MemberFieldProblem) -> String? {
        guard let s = try string(key, maxLength: 64) else { return nil }
        guard allowed.contains(s) else {
            throw MemberFieldProblem(field: field(key), problem: "must be one of \(allowed.joined(separator: ", ")), got \(s.logSafe(max: 64))")
        }
        return s
    }

    /// An integer (JSON number without a fraction) in `range`.
    public func int(_ key: String, in range: ClosedRange<Int64>) throws(MemberFieldProblem) -> Int64? {
        guard let v = value(key) else { return nil }
        guard let i = v.intValue else { throw MemberFieldProblem(field: field(key), problem: "must be an integer") }
        guard range.contains(i) else {
            throw MemberFieldProblem(
                field: field(key), problem: "must be in [\(range.lowerBound), \(range.upperBound)]",
                limit: "\(range.lowerBound)...\(range.upperBound)")
        }
        return i
    }

    /// An integer of `allowed`.
    public func int(_ key: String, oneOf allowed: [Int64]) throws(MemberFieldProblem) -> Int64? {
        guard let v = value(key) else { return nil }
        guard let i = v.intValue, allowed.contains(i) else {
            throw MemberFieldProblem(field: field(key), problem: "must be one of \(allowed.map(String.init).joined(separator: ", "))")
        }
        return i
    }

    public func bool(_ key: String) throws(MemberFieldProblem) -> Bool? {
        guard let v = value(key) else { return nil }
        guard case .bool(let b) = v else { throw MemberFieldProblem(field: field(key), problem: "must be a boolean") }
        return b
    }

    /// An absolute `http` or `https` URL of at most `maxLength` characters.
    public func url(_ key: String, maxLength: Int, httpsOnly: Bool = false) throws(MemberFieldProblem) -> String? {
        guard let s = try string(key, maxLength: maxLength) else { return nil }
        guard let c = URLComponents(string: s), let scheme = c.scheme?.lowercased(), c.host?.isEmpty == false,
            httpsOnly ? scheme == "https" : (scheme == "http" || scheme == "https")
        else { throw MemberFieldProblem(field: field(key), problem: httpsOnly ? "must be an https URL" : "must be an http(s) URL") }
        return s
    }
}

extension String {
    /// Length as the vendors' Java servers count it (UTF-16 code units).
    public var vendorLength: Int { utf16.count }
}
