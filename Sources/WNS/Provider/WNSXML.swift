/// XML for WNS payloads: text escaped into a toast, and a client's own XML checked for
/// well-formedness before it is accepted.
///
/// Why a checker of our own and not `XMLParser`: on Linux, FoundationXML links the system's libxml2,
/// and building Pushgate must need no C library or system package. WNS payloads are at most
/// 5,000 bytes, so a small checker over the UTF-8 bytes is enough: it runs in one pass, keeps at
/// most `maxDepth` open element names, refuses a DOCTYPE (no entity declarations, so no entity
/// expansion), and knows only XML's five predefined entities and character references.
public enum WNSXML {
    /// The deepest element nesting accepted (toast, tile and badge schemas nest a handful of levels).
    public static let maxDepth = 32
    /// The most attributes one element may carry.
    public static let maxAttributes = 64

    /// `s` escaped for element text and attribute values (`&`, `<`, `>`, `"`, `'`).
    public static func escape(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for ch in s.unicodeScalars {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    /// Whether `v` is a character XML 1.0 documents may contain (`Char`: tab, LF, CR, U+0020 and above,
    /// without the surrogates, U+FFFE and U+FFFF).
    public static func isXMLChar(_ v: UInt32) -> Bool {
        switch v {
        case 0x9, 0xA, 0xD: return true
        case 0x20...0xD7FF, 0xE000...0xFFFD, 0x10000...0x10FFFF: return true
        default: return false
        }
    }

    /// The first character of `s` XML cannot carry, if any (for refusing a title or message).
    public static func firstNonXMLChar(_ s: String) -> Unicode.Scalar? {
        s.unicodeScalars.first { !isXMLChar($0.value) }
    }

    /// The standard toast (`ToastGeneric`, one text line per non-empty field), every text escaped.
    public static func toast(title: String?, message: String?) -> String {
        var texts = ""
        for t in [title, message] {
            if let t, !t.isEmpty { texts += "<text>" + escape(t) + "</text>" }
        }
        return "<toast><visual><binding template=\"ToastGeneric\">" + texts + "</binding></visual></toast>"
    }

    /// Why `text` is not a well-formed XML document (nil when it is). The root element must be
    /// `expectedRoot` when given (`toast`, `tile`, `badge`).
    public static func problem(_ text: String, expectedRoot: String? = nil) -> String? {
        var checker = Checker(bytes: Array(text.utf8))
        return checker.run(expectedRoot: expectedRoot)
    }

    struct Checker {
        let b: [UInt8]
        var i = 0
        var open: [ArraySlice<UInt8>] = []

        init(bytes: [UInt8]) { self.b = bytes }

        struct Failure: Error {
            var message: String
        }

        func fail(_ message: String) -> Failure { Failure(message: "\(message) at byte \(i)") }

        mutating func run(expectedRoot: String?) -> String? {
            do {
                try checkCharacters()
                // An XML declaration is only allowed as the very first thing.
                if starts("<?xml") && b.count > i + 5 && isSpace(b[i + 5]) { try skipPI() }
                try misc()
                guard i < b.count, b[i] == UInt8(ascii: "<") else { throw fail("no root element") }
                let root = try element()
                if let expectedRoot, String(decoding: root, as: UTF8.self) != expectedRoot {
                    return "the root element is <\(String(decoding: root.prefix(64), as: UTF8.self))>, not <\(expectedRoot)>"
                }
                try misc()
                if i < b.count { throw fail("content after the root element") }
                return nil
            } catch let f as Failure {
                return f.message
            } catch {
                return "\(error)"
            }
        }

        /// Every character is one XML may contain (the bytes are valid UTF-8: they came from a Swift string).
        func checkCharacters() throws {
            var k = 0
            for scalar in String(decoding: b, as: UTF8.self).unicodeScalars {
                if !WNSXML.isXMLChar(scalar.value) {
                    let hex = String(scalar.value, radix: 16, uppercase: true)
                    throw Failure(
                        message: "character U+\(String(repeating: "0", count: max(0, 4 - hex.count)) + hex) is not allowed in XML (character \(k))")
                }
                k += 1
            }
        }

        func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D }
        func isNameStart(_ c: UInt8) -> Bool {
            (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "_") || c == UInt8(ascii: ":") || c >= 0x80
        }
        func isNameChar(_ c: UInt8) -> Bool {
            isNameStart(c) || (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: "-") || c == UInt8(ascii: ".")
        }
        func starts(_ s: String) -> Bool {
            let u = Array(s.utf8)
            guard i + u.count <= b.count else { return false }
            for (k, c) in u.enumerated() where b[i + k] != c { return false }
            return true
        }
        mutating func skipSpace() { while i < b.count, isSpace(b[i]) { i += 1 } }

        /// Comments, processing instructions and white space (before and after the root element).
        mutating func misc() throws {
            while true {
                skipSpace()
                if starts("<!--") {
                    try comment()
                } else if starts("<?") {
                    try skipPI()
                } else if starts("<!DOCTYPE") || starts("<!doctype") {
                    throw fail("a DOCTYPE is not allowed")
                } else {
                    return
                }
            }
        }

        mutating func comment() throws {
            i += 4
            while i + 1 < b.count {
                if b[i] == UInt8(ascii: "-") && b[i + 1] == UInt8(ascii: "-") {
                    guard i + 2 < b.count, b[i + 2] == UInt8(ascii: ">") else { throw fail("\"--\" inside a comment") }
                    i += 3
                    return
                }
                i += 1
            }
            throw fail("unterminated comment")
        }

        mutating func skipPI() throws {
            i += 2
            let target = try name()
            if target.count == 3, String(decoding: target, as: UTF8.self).lowercased() == "xml", i > 5 {
                throw fail("an XML declaration is only allowed at the start")
            }
            while i + 1 < b.count {
                if b[i] == UInt8(ascii: "?") && b[i + 1] == UInt8(ascii: ">") {
                    i += 2
                    return
                }
                i += 1
            }
            throw fail("unterminated processing instruction")
        }

        mutating func name() throws -> ArraySlice<UInt8> {
            let start = i
            guard i < b.count, isNameStart(b[i]) else { throw fail("a name expected") }
            i += 1
            while i < b.count, isNameChar(b[i]) { i += 1 }
            return b[start..<i]
        }

        /// `&...;` at `i`: a predefined entity or a character reference to an XML character.
        mutating func reference() throws {
            let start = i
            i += 1
            guard let semi = b[i..<min(b.count, i + 12)].firstIndex(of: UInt8(ascii: ";")) else {
                i = start
                throw fail("\"&\" that does not start a reference (write &amp;)")
            }
            let body = String(decoding: b[i..<semi], as: UTF8.self)
            switch body {
            case "lt", "gt", "amp", "apos", "quot":
                break
            default:
                var value: UInt32?
                if body.hasPrefix("#x"), body.count > 2, body.count <= 8 {
                    value = UInt32(body.dropFirst(2), radix: 16)
                } else if body.hasPrefix("#"), body.count > 1, body.count <= 9, body.dropFirst().allSatisfy(\.isASCII) {
                    value = UInt32(body.dropFirst(), radix: 10)
                }
                guard let value else {
                    i = start
                    throw fail("unknown entity &\(body.prefix(16));")
                }
                guard WNSXML.isXMLChar(value) else {
                    i = start
                    throw fail("character reference &\(body); is not an XML character")
                }
            }
            i = semi + 1
        }

        /// One element (its start at `i`), iteratively: depth is bounded by `maxDepth`.
        mutating func element() throws -> ArraySlice<UInt8> {
            var root: ArraySlice<UInt8>?
            repeat {
                // At "<".
                if starts("</") {
                    i += 2
                    let n = try name()
                    skipSpace()
                    guard i < b.count, b[i] == UInt8(ascii: ">") else { throw fail("\">\" expected") }
                    i += 1
                    guard let last = open.popLast(), last == n else {
                        throw fail("end tag </\(String(decoding: n.prefix(64), as: UTF8.self))> does not match")
                    }
                } else if starts("<!--") {
                    try comment()
                } else if starts("<![CDATA[") {
                    i += 9
                    var closed = false
                    while i + 2 < b.count {
                        if b[i] == UInt8(ascii: "]") && b[i + 1] == UInt8(ascii: "]") && b[i + 2] == UInt8(ascii: ">") {
                            i += 3
                            closed = true
                            break
                        }
                        i += 1
                    }
                    if !closed { throw fail("unterminated CDATA section") }
                } else if starts("<?") {
                    try skipPI()
                } else if starts("<!") {
                    throw fail("a declaration is not allowed inside an element")
                } else {
                    i += 1
                    let n = try name()
                    if root == nil { root = n }
                    var attributes: [ArraySlice<UInt8>] = []
                    var selfClosing = false
                    while true {
                        let hadSpace = i < b.count && isSpace(b[i])
                        skipSpace()
                        guard i < b.count else { throw fail("unterminated start tag") }
                        if b[i] == UInt8(ascii: ">") {
                            i += 1
                            break
                        }
                        if b[i] == UInt8(ascii: "/") {
                            guard i + 1 < b.count, b[i + 1] == UInt8(ascii: ">") else { throw fail("\">\" expected after \"/\"") }
                            i += 2
                            selfClosing = true
                            break
                        }
                        guard hadSpace else { throw fail("white space expected before an attribute") }
                        let a = try name()
                        guard !attributes.contains(a) else {
                            throw fail("attribute \(String(decoding: a.prefix(64), as: UTF8.self)) repeated")
                        }
                        guard attributes.count < WNSXML.maxAttributes else { throw fail("more than \(WNSXML.maxAttributes) attributes") }
                        attributes.append(a)
                        skipSpace()
                        guard i < b.count, b[i] == UInt8(ascii: "=") else { throw fail("\"=\" expected") }
                        i += 1
                        skipSpace()
                        guard i < b.count, b[i] == UInt8(ascii: "\"") || b[i] == UInt8(ascii: "'") else {
                            throw fail("a quoted attribute value expected")
                        }
                        let quote = b[i]
                        i += 1
                        while true {
                            guard i < b.count else { throw fail("unterminated attribute value") }
                            let c = b[i]
                            if c == quote {
                                i += 1
                                break
                            }
                            if c == UInt8(ascii: "<") { throw fail("\"<\" in an attribute value") }
                            if c == UInt8(ascii: "&") { try reference() } else { i += 1 }
                        }
                    }
                    if !selfClosing {
                        guard open.count < WNSXML.maxDepth else { throw fail("elements nested deeper than \(WNSXML.maxDepth)") }
                        open.append(n)
                    }
                }
                // Character data up to the next "<" (only inside an element).
                if open.isEmpty { break }
                while i < b.count, b[i] != UInt8(ascii: "<") {
                    if b[i] == UInt8(ascii: "&") {
                        try reference()
                    } else if b[i] == UInt8(ascii: "]") && i + 2 < b.count && b[i + 1] == UInt8(ascii: "]") && b[i + 2] == UInt8(ascii: ">") {
                        throw fail("\"]]>\" in text")
                    } else {
                        i += 1
                    }
                }
                if i >= b.count { throw fail("unclosed element <\(String(decoding: (open.last ?? []).prefix(64), as: UTF8.self))>") }
            } while !open.isEmpty
            guard let root else { throw fail("no root element") }
            return root
        }
    }
}
