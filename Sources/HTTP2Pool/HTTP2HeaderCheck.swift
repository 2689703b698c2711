import NIOHPACK

/// The header-field rules of RFC 9113 §8.2-8.3 for the requests the pool sends and the responses it
/// reads, checked in one pass over each field's bytes.
///
/// swift-nio-http2 checks the same rules when its header block validation is on (the default), but it
/// walks each name and value several times (generic `contains(where:)` per rule, the connection-specific
/// names compared one by one): about 6 % of the gateway's CPU per delivery in a profile against a Go
/// HTTP/2 server. The pool turns that validation off (`HTTP2ConnectionPool.makeHTTP2Handler`) and makes
/// these checks instead: a request that breaks them is not sent, a response that breaks them fails its
/// stream as a protocol error, as before.
enum HTTP2HeaderCheck {
    /// A field name: one or more lowercase `tchar` (RFC 9110 §5.6.2; RFC 9113 §8.2.1 forbids uppercase).
    static func isValidName(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            guard !bytes.isEmpty else { return false }
            for b in bytes where !isLowercaseTChar(b) { return false }
            return true
        }
    }

    /// A field value (RFC 9113 §8.2.1): no NUL, CR or LF, and no space or tab at either end. Other
    /// control bytes and obs-text pass, as in swift-nio-http2's and Go's checks.
    static func isValidValue(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { bytes in
            guard let first = bytes.first, let last = bytes.last else { return true }
            if first == 0x20 || first == 0x09 || last == 0x20 || last == 0x09 { return false }
            for b in bytes where b == 0 || b == 0x0A || b == 0x0D { return false }
            return true
        }
    }

    /// A request's `:method` (a token) and `:path` (non-empty, "/" first or "*"; no space or control
    /// byte): what the pool sends besides the checked fields.
    static func isValidRequestLine(method: String, path: String) -> Bool {
        var method = method
        var path = path
        let methodOK = method.withUTF8 { bytes in
            guard !bytes.isEmpty else { return false }
            for b in bytes where !isTChar(b) { return false }
            return true
        }
        guard methodOK else { return false }
        return path.withUTF8 { bytes in
            guard let first = bytes.first, first == UInt8(ascii: "/") || (bytes.count == 1 && first == UInt8(ascii: "*")) else {
                return false
            }
            for b in bytes where b <= 0x20 || b == 0x7F { return false }
            return true
        }
    }

    /// Connection-specific fields, which HTTP/2 forbids (RFC 9113 §8.2.2): a response carrying one is
    /// malformed; the pool drops them from a request.
    static func isConnectionSpecific(_ name: String) -> Bool {
        switch name {
        case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade": return true
        default: return false
        }
    }

    /// The final or informational response head: `:status` and the regular fields (at most
    /// `maxFields` kept), or why the block is malformed (RFC 9113 §8.3.2, §8.2).
    static func responseHead(_ block: HPACKHeaders, maxFields: Int) -> Result<(status: Int, fields: [(String, String)]), Malformed> {
        var status: Int? = nil
        var fields: [(String, String)] = []
        fields.reserveCapacity(min(block.count, maxFields))
        var regularSeen = false
        for (name, value, _) in block {
            if name.utf8.first == UInt8(ascii: ":") {
                guard name == ":status", status == nil, !regularSeen else { return .failure(.pseudoHeader(name)) }
                guard let code = parseStatus(value) else { return .failure(.status(value)) }
                status = code
                continue
            }
            regularSeen = true
            guard isValidName(name), !isConnectionSpecific(name), name != "te" || value == "trailers" else {
                return .failure(.name(name))
            }
            guard isValidValue(value) else { return .failure(.value(name)) }
            if fields.count < maxFields { fields.append((name, value)) }
        }
        guard let status else { return .failure(.status("")) }
        return .success((status, fields))
    }

    /// Trailers: regular fields only (RFC 9113 §8.1), appended to `fields` up to `maxFields`.
    static func trailers(_ block: HPACKHeaders, into fields: inout [(String, String)], maxFields: Int) -> Malformed? {
        for (name, value, _) in block {
            if name.utf8.first == UInt8(ascii: ":") { return .pseudoHeader(name) }
            guard isValidName(name), !isConnectionSpecific(name) else { return .name(name) }
            guard isValidValue(value) else { return .value(name) }
            if fields.count < maxFields { fields.append((name, value)) }
        }
        return nil
    }

    /// What made a header block malformed (the value itself is never kept: it may be anything).
    enum Malformed: Error, Equatable, CustomStringConvertible {
        case pseudoHeader(String)
        case status(String)
        case name(String)
        case value(String)

        var description: String {
            switch self {
            case .pseudoHeader(let n): return "unexpected or repeated pseudo-header \(Self.printable(n))"
            case .status(let v): return v.isEmpty ? "no :status" : "bad :status \(Self.printable(v))"
            case .name(let n): return "bad header name \(Self.printable(n))"
            case .value(let n): return "bad value of header \(Self.printable(n))"
            }
        }

        /// At most 40 bytes, printable ASCII only (a peer's bytes go into logs and errors).
        static func printable(_ s: String) -> String {
            String(String.UnicodeScalarView(s.unicodeScalars.prefix(40).map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? $0 : "?" }))
        }
    }

    /// Three ASCII digits, 100-599.
    static func parseStatus(_ value: String) -> Int? {
        var value = value
        return value.withUTF8 { b -> Int? in
            guard b.count == 3 else { return nil }
            var n = 0
            for d in b {
                guard d >= UInt8(ascii: "0") && d <= UInt8(ascii: "9") else { return nil }
                n = n * 10 + Int(d - UInt8(ascii: "0"))
            }
            return (100...599).contains(n) ? n : nil
        }
    }

    @inline(__always) static func isTChar(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default: return false
        }
    }

    @inline(__always) static func isLowercaseTChar(_ b: UInt8) -> Bool {
        !(b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z")) && isTChar(b)
    }
}
