import Foundation
import PushgateCore

/// Strict reads of a provider's own request object (`"xiaomi": {…}`, `"oppo": {…}`): known keys
/// only, texts counted as the vendors' Java servers count them (UTF-16 code units: a CJK character
/// is 1, an emoji 2, so a text taken here is never over the vendor's limit), enumerations and URLs;
/// every refusal names the field by its full path.
extension RequestMemberReader {
    /// A reader of the object member `key` whose keys are all in `known` (compared case-insensitively,
    /// as the members themselves are matched); nil when absent or null.
    public func vendorObject(_ key: String, known: Set<String>) throws(RequestMemberProblem) -> RequestMemberReader? {
        guard let v = present(key) else { return nil }
        return try Self.vendorObject(v, at: field(key), known: known, limits: limits)
    }

    /// A reader of `value` (at `path`), an object whose keys are all in `known`.
    public static func vendorObject(_ value: JSONValue, at path: String, known: Set<String>, limits: RequestLimits = RequestLimits())
        throws(RequestMemberProblem) -> RequestMemberReader
    {
        guard case .object(let o) = value else { throw RequestMemberProblem(field: path, problem: "expected an object") }
        for k in o.keys where !known.contains(k.lowercased()) {
            throw RequestMemberProblem(
                field: path + "." + k.logSafe(max: 64), problem: "unknown member (known: \(known.sorted().joined(separator: ", ")))")
        }
        return RequestMemberReader(object: o, path: path, limits: limits)
    }

    /// A string of 1...`maxLength` UTF-16 code units (0 with `allowEmpty`) without control characters.
    public func text(_ key: String, maxLength: Int, allowEmpty: Bool = false) throws(RequestMemberProblem) -> String? {
        guard let v = present(key) else { return nil }
        guard case .string(let s) = v else { throw RequestMemberProblem(field: field(key), problem: "expected a string") }
        if s.isEmpty && !allowEmpty { throw RequestMemberProblem(field: field(key), problem: "must not be empty") }
        // Bounded before counting: a megabyte string is refused on its byte count alone.
        if s.utf8.count > 4 * maxLength || s.utf16.count > maxLength {
            throw RequestMemberProblem(field: field(key), problem: "longer than \(maxLength) characters", limit: "\(maxLength) characters")
        }
        if s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw RequestMemberProblem(field: field(key), problem: "must not contain control characters")
        }
        return s
    }

    /// One of `allowed` (strings).
    public func oneOf(_ key: String, _ allowed: [String]) throws(RequestMemberProblem) -> String? {
        guard let s = try text(key, maxLength: 64) else { return nil }
        guard allowed.contains(s) else {
            throw RequestMemberProblem(field: field(key), problem: "must be one of \(allowed.joined(separator: ", "))")
        }
        return s
    }

    /// An integer of `allowed` (range-checked before any conversion).
    public func int(_ key: String, oneOf allowed: [Int64]) throws(RequestMemberProblem) -> Int64? {
        guard let lo = allowed.min(), let hi = allowed.max(), let i = try int(key, in: lo...hi) else { return nil }
        guard allowed.contains(i) else {
            throw RequestMemberProblem(field: field(key), problem: "must be one of \(allowed.map(String.init).joined(separator: ", "))")
        }
        return i
    }

    /// An absolute `http` or `https` URL of at most `maxLength` characters.
    public func url(_ key: String, maxLength: Int, httpsOnly: Bool = false) throws(RequestMemberProblem) -> String? {
        guard let s = try text(key, maxLength: maxLength) else { return nil }
        guard let c = URLComponents(string: s), let scheme = c.scheme?.lowercased(), c.host?.isEmpty == false,
            httpsOnly ? scheme == "https" : (scheme == "http" || scheme == "https")
        else { throw RequestMemberProblem(field: field(key), problem: httpsOnly ? "must be an https URL" : "must be an http(s) URL") }
        return s
    }
}

extension RequestMemberProblem: CustomStringConvertible {
    public var description: String { "\(field): \(problem)" }

    /// The gateway's 400 for a problem found by a provider's app-aware check (`PushProvider.checkIngest`),
    /// whose `field` is relative to the notification (`xiaomi.channel_id`).
    public var ingestProblem: IngestProblem { IngestProblem(message: "invalid \(field)", detail: description) }
}

extension String {
    /// Length as the vendors' Java servers count it (UTF-16 code units).
    public var vendorLength: Int { utf16.count }
}
