import PushgateCore
import XCTest

@testable import WNS

/// Seeded random inputs for the request fields' code (the same properties a fuzz target would hold):
/// nothing traps, and whatever is accepted renders within WNS's limits and well-formed.
final class WNSRandomInputTests: XCTestCase {
    /// SplitMix64: reproducible without Foundation's generators.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let pieces = [
        "<", ">", "/", "</", "/>", "<toast>", "</toast>", "<tile>", "</tile>", "<badge value=\"1\"/>", "<text>", "</text>", "&", "&amp;", "&#x41;",
        "&#0;", "&lt", "\"", "'", "=", " a=\"b\"", "<!--", "-->", "<![CDATA[", "]]>", "<?xml version=\"1.0\"?>", "<?pi x?>", "<!DOCTYPE x>",
        "é", "\u{0}", "\u{1}", "\u{FFFE}", "x", " ", "\n", "<a:b c:d='e'>", "</a:b>",
    ]

    func testXMLCheckerOnRandomDocuments() {
        var rng = Seeded(state: 51)
        var accepted = 0
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...24, using: &rng)
            let content = (0..<n).map { _ in Self.pieces.randomElement(using: &rng)! }.joined()
            let doc = Bool.random(using: &rng) ? "<toast>" + content + "</toast>" : content
            if WNSXML.problem(doc) == nil {
                accepted += 1
                // What is accepted has no character XML refuses and balanced elements.
                XCTAssertNil(WNSXML.firstNonXMLChar(doc), doc)
            }
            // Escaped text is always well-formed inside an element (when it has only XML characters).
            if WNSXML.firstNonXMLChar(doc) == nil {
                XCTAssertNil(WNSXML.problem("<toast>" + WNSXML.escape(doc) + "</toast>"), doc)
                XCTAssertNil(WNSXML.problem(WNSXML.toast(title: doc, message: doc)), doc)
            }
        }
        XCTAssertGreaterThan(accepted, 100, "the generator reaches well-formed documents too")
    }

    func testDecoderOnRandomObjects() {
        var rng = Seeded(state: 7)
        let names = WNSOptions.memberNames + ["", "x", "TYPE"]
        func value() -> JSONValue {
            switch Int.random(in: 0...7, using: &rng) {
            case 0: return .null
            case 1: return .bool(Bool.random(using: &rng))
            case 2: return .int(Int64.random(in: Int64.min...Int64.max, using: &rng))
            case 3: return .int(Int64.random(in: -5...3_000_000, using: &rng))
            case 4: return .double([1e19, -0.0, .nan, .infinity, 600.5].randomElement(using: &rng)!)
            case 5: return .string(["toast", "tile", "badge", "raw", "cache", "no-cache", "tag1", ""].randomElement(using: &rng)!)
            case 6: return .string((0..<Int.random(in: 0...12, using: &rng)).map { _ in Self.pieces.randomElement(using: &rng)! }.joined())
            default: return .array([])
            }
        }
        var accepted = 0
        for _ in 0..<20_000 {
            let members = (0..<Int.random(in: 0...5, using: &rng)).map { _ in (names.randomElement(using: &rng)!, value()) }
            guard let o = try? WNSOptions(decoding: .object(JSONObject(members))) else { continue }
            accepted += 1
            XCTAssertEqual(try? WNSOptions(decoding: o.jsonValue), o, "the stored form reads back")
            guard let p = try? PreparedWNS.render(o, title: "t", message: nil, timeToLive: nil) else {
                XCTFail("accepted but not rendered: \(o)")
                continue
            }
            XCTAssertLessThanOrEqual(p.body.count, WNSOptions.maxPayloadBytes)
            if o.type.isXML { XCTAssertNil(WNSXML.problem(String(decoding: p.body, as: UTF8.self)), "\(o)") }
            for (_, v) in p.headers { XCTAssertTrue(v.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }, "header value \(v)") }
        }
        XCTAssertGreaterThan(accepted, 50)
    }

    func testChannelParserOnRandomURIs() {
        var rng = Seeded(state: 3)
        let parts = [
            "https://", "http://", "a.", "notify.windows.com", ".notify.windows.com", ":", "443", "@", "/", "?", "#", "[", "]", "%2e", "é", " ", "x",
        ]
        for _ in 0..<20_000 {
            let uri = (0..<Int.random(in: 0...8, using: &rng)).map { _ in parts.randomElement(using: &rng)! }.joined()
            if case .success(let c) = WNSChannel.parse(uri) {
                XCTAssertTrue(c.host == WNSChannel.domain || c.host.hasSuffix("." + WNSChannel.domain), uri)
                XCTAssertFalse(uri.contains("@") || uri.contains("#"), uri)
                XCTAssertTrue(uri.lowercased().hasPrefix("https://"), uri)
                XCTAssertFalse(uri.dropFirst(8).prefix { $0 != "/" && $0 != "?" }.contains(":"), uri)
            }
        }
    }
}
