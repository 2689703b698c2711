import PushgateCore

/// A WNS notification type (`X-WNS-Type`) and the content type WNS requires with it.
public enum WNSType: String, Sendable, Equatable, CaseIterable {
    case toast, tile, badge, raw

    /// `wns/toast` ...
    public var header: String { "wns/" + rawValue }
    /// `text/xml` for toast, tile and badge; `application/octet-stream` for raw.
    public var contentType: String { self == .raw ? "application/octet-stream" : "text/xml" }
    public var isXML: Bool { self != .raw }
}

/// `X-WNS-Cache-Policy`.
public enum WNSCachePolicy: String, Sendable, Equatable, CaseIterable {
    case cache
    case noCache = "no-cache"
}

/// A refused `wns` member (or a field it is built from): `field` is the path below the
/// notification (`wns.ttl`, `message`), `problem` says why.
public struct WNSFieldProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var problem: String

    public init(field: String, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}

/// The notification's own `wns` object, decoded and validated:
/// `{"type":"tile","xml":"<tile>…</tile>","ttl":600,"cache_policy":"no-cache","tag":"scores","request_for_status":true}`.
public struct WNSOptions: Sendable, Equatable {
    public var type: WNSType = .toast
    /// The XML payload (toast, tile, badge); a toast without one is built from `title` and `message`.
    public var xml: String?
    /// The raw payload (type raw): sent as its UTF-8 bytes.
    public var raw: String?
    /// `X-WNS-TTL`, seconds.
    public var ttl: Int?
    public var cachePolicy: WNSCachePolicy?
    /// `X-WNS-Tag` (tile only).
    public var tag: String?
    /// `X-WNS-RequestForStatus`.
    public var requestForStatus: Bool?

    public init() {}

    /// The members of the object, in the order the docs list them.
    public static let memberNames = ["type", "xml", "raw", "ttl", "cache_policy", "tag", "request_for_status"]
    /// WNS refuses a payload over this many bytes (413).
    public static let maxPayloadBytes = 5000
    /// The longest `X-WNS-TTL` accepted: 30 days, the lifetime of a channel URI (a longer TTL
    /// cannot apply). WNS's documentation gives no upper bound of its own.
    public static let maxTTL = 2_592_000
    /// `X-WNS-Tag`: "an alphanumeric string of no more than 16 characters".
    public static let maxTagLength = 16

    /// Decodes and validates the `wns` member. `path` names it in problems (`wns`; the request
    /// decoder gives the full `notifications[0].wns`). Every problem names the member at fault.
    public init(decoding value: JSONValue, path: String = "wns") throws(WNSFieldProblem) {
        guard case .object(let object) = value else {
            throw WNSFieldProblem(field: path, problem: "must be an object (\(Self.memberNames.joined(separator: ", ")))")
        }
        for key in object.keys where !Self.memberNames.contains(key) {
            throw WNSFieldProblem(
                field: path + "." + key.logSafe(max: 64), problem: "unknown member (known: \(Self.memberNames.joined(separator: ", ")))")
        }
        func field(_ name: String) -> String { path + "." + name }
        func string(_ name: String, maxBytes: Int) throws(WNSFieldProblem) -> String? {
            guard let v = object[name], v != .null else { return nil }
            guard case .string(let s) = v else { throw WNSFieldProblem(field: field(name), problem: "must be a string") }
            if s.utf8.count > maxBytes {
                throw WNSFieldProblem(field: field(name), problem: "is \(s.utf8.count) bytes, over the limit of \(maxBytes)")
            }
            if s.utf8.contains(0) { throw WNSFieldProblem(field: field(name), problem: "contains a NUL character (\\u0000)") }
            return s
        }
        var out = WNSOptions()
        if let t = try string("type", maxBytes: 16) {
            guard let type = WNSType(rawValue: t) else {
                throw WNSFieldProblem(field: field("type"), problem: "must be toast, tile, badge or raw")
            }
            out.type = type
        }
        out.xml = try string("xml", maxBytes: Self.maxPayloadBytes)
        out.raw = try string("raw", maxBytes: Self.maxPayloadBytes)
        if let v = object["ttl"], v != .null {
            let range = 0...Self.maxTTL
            guard case .int(let n) = v, n >= Int64(range.lowerBound), n <= Int64(range.upperBound) else {
                throw WNSFieldProblem(field: field("ttl"), problem: "must be an integer from 0 to \(Self.maxTTL) (seconds)")
            }
            out.ttl = Int(n)
        }
        if let p = try string("cache_policy", maxBytes: 16) {
            guard let policy = WNSCachePolicy(rawValue: p) else {
                throw WNSFieldProblem(field: field("cache_policy"), problem: "must be cache or no-cache")
            }
            out.cachePolicy = policy
        }
        if let tag = try string("tag", maxBytes: 64) {
            guard (1...Self.maxTagLength).contains(tag.utf8.count), tag.utf8.allSatisfy(Self.isTagByte) else {
                throw WNSFieldProblem(
                    field: field("tag"), problem: "must be 1 to \(Self.maxTagLength) ASCII letters, digits, '-', '_' or '.'")
            }
            out.tag = tag
        }
        if let v = object["request_for_status"], v != .null {
            guard case .bool(let b) = v else { throw WNSFieldProblem(field: field("request_for_status"), problem: "must be true or false") }
            out.requestForStatus = b
        }
        try out.checkConsistency(path: path)
        self = out
    }

    static func isTagByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "-")
            || c == UInt8(ascii: "_") || c == UInt8(ascii: ".")
    }

    /// The rules between members: which payload each type takes, which headers apply to it, and
    /// the XML well-formed with the type's root element.
    func checkConsistency(path: String) throws(WNSFieldProblem) {
        func field(_ name: String) -> String { path + "." + name }
        switch type {
        case .raw:
            if xml != nil { throw WNSFieldProblem(field: field("xml"), problem: "a raw notification takes raw, not xml") }
            guard let raw, !raw.isEmpty else {
                throw WNSFieldProblem(field: field("raw"), problem: "a raw notification needs a non-empty raw payload")
            }
        case .toast, .tile, .badge:
            if raw != nil { throw WNSFieldProblem(field: field("raw"), problem: "only a raw notification takes raw (type is \(type.rawValue))") }
            if type != .toast && xml == nil {
                throw WNSFieldProblem(field: field("xml"), problem: "a \(type.rawValue) notification needs its xml")
            }
            if let xml {
                if let why = WNSXML.problem(xml, expectedRoot: type.rawValue) {
                    throw WNSFieldProblem(field: field("xml"), problem: "is not well-formed XML: \(why)")
                }
            }
        }
        if cachePolicy != nil && type == .toast {
            throw WNSFieldProblem(field: field("cache_policy"), problem: "applies to tile, badge and raw notifications only")
        }
        if tag != nil && type != .tile {
            throw WNSFieldProblem(field: field("tag"), problem: "applies to tile notifications only")
        }
    }

    /// The stored form (what the request decoder keeps; `init(decoding:)` reads it back).
    public var jsonValue: JSONValue {
        var o: [(String, JSONValue)] = [("type", .string(type.rawValue))]
        if let xml { o.append(("xml", .string(xml))) }
        if let raw { o.append(("raw", .string(raw))) }
        if let ttl { o.append(("ttl", .int(Int64(ttl)))) }
        if let cachePolicy { o.append(("cache_policy", .string(cachePolicy.rawValue))) }
        if let tag { o.append(("tag", .string(tag))) }
        if let requestForStatus { o.append(("request_for_status", .bool(requestForStatus))) }
        return .object(JSONObject(o))
    }
}

/// One notification rendered for WNS: the exact body and the `X-WNS-*` headers, made once and sent
/// to every channel of the notification.
public struct PreparedWNS: PreparedPush, Sendable, Equatable {
    public var type: WNSType
    public var body: [UInt8]
    /// `X-WNS-Type`, `Content-Type` and the optional `X-WNS-*` headers, in that order.
    public var headers: [(String, String)]

    public var payloadBytes: Int? { body.count }

    public static func == (a: PreparedWNS, b: PreparedWNS) -> Bool {
        a.type == b.type && a.body == b.body && a.headers.elementsEqual(b.headers, by: { $0 == $1 })
    }

    /// Renders a notification: its `wns` object's payload, else a toast of `title` and `message`.
    /// `timeToLive` (gorush's `time_to_live`) is the TTL when the object gives none. Every problem
    /// names the field at fault; the 5,000-byte limit applies to the exact bytes sent.
    public static func render(_ options: WNSOptions?, title: String?, message: String?, timeToLive: Int64?) throws(WNSFieldProblem)
        -> PreparedWNS
    {
        let o = options ?? WNSOptions()
        let body: [UInt8]
        switch o.type {
        case .raw:
            body = Array((o.raw ?? "").utf8)
        case .toast, .tile, .badge:
            if let xml = o.xml {
                body = Array(xml.utf8)
            } else {
                for (name, value) in [("title", title), ("message", message)] {
                    if let value, let bad = WNSXML.firstNonXMLChar(value) {
                        throw WNSFieldProblem(
                            field: name, problem: "contains U+\(String(bad.value, radix: 16, uppercase: true)), which XML (a WNS toast) cannot carry")
                    }
                }
                guard !(title ?? "").isEmpty || !(message ?? "").isEmpty else {
                    throw WNSFieldProblem(field: "message", problem: "a WNS toast needs a title, a message or a wns object with its own xml")
                }
                body = Array(WNSXML.toast(title: title, message: message).utf8)
                if body.count > WNSOptions.maxPayloadBytes {
                    throw WNSFieldProblem(
                        field: "message",
                        problem: "the toast made of title and message is \(body.count) bytes, over WNS's limit of \(WNSOptions.maxPayloadBytes)")
                }
            }
        }
        if body.count > WNSOptions.maxPayloadBytes {
            throw WNSFieldProblem(
                field: o.type == .raw ? "wns.raw" : "wns.xml", problem: "is \(body.count) bytes, over WNS's limit of \(WNSOptions.maxPayloadBytes)")
        }
        var headers: [(String, String)] = [("x-wns-type", o.type.header), ("content-type", o.type.contentType)]
        var ttl = o.ttl
        if ttl == nil, let t = timeToLive, t >= 0 { ttl = Int(min(t, Int64(WNSOptions.maxTTL))) }
        if let ttl { headers.append(("x-wns-ttl", String(ttl))) }
        if let p = o.cachePolicy { headers.append(("x-wns-cache-policy", p.rawValue)) }
        if let tag = o.tag { headers.append(("x-wns-tag", tag)) }
        if let r = o.requestForStatus { headers.append(("x-wns-requestforstatus", r ? "true" : "false")) }
        return PreparedWNS(type: o.type, body: body, headers: headers)
    }
}
