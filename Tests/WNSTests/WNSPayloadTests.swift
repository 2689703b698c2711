import PushgateCore
import XCTest

@testable import WNS

final class WNSPayloadTests: XCTestCase {
    func decode(_ members: [(String, JSONValue)]) throws(WNSFieldProblem) -> WNSOptions {
        try WNSOptions(decoding: .object(JSONObject(members)))
    }

    func problem(_ members: [(String, JSONValue)], file: StaticString = #filePath, line: UInt = #line) -> WNSFieldProblem? {
        do {
            let o = try decode(members)
            XCTFail("accepted: \(o)", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    func testEveryMemberDecodesAndRendersItsHeaders() throws {
        let tile = "<tile><visual><binding template=\"TileSmall\"><text>Hi</text></binding></visual></tile>"
        let o = try decode([
            ("type", .string("tile")), ("xml", .string(tile)), ("ttl", .int(600)), ("cache_policy", .string("no-cache")),
            ("tag", .string("scores")), ("request_for_status", .bool(true)),
        ])
        XCTAssertEqual(o.type, .tile)
        XCTAssertEqual(o.ttl, 600)
        let p = try PreparedWNS.render(o, title: nil, message: nil, timeToLive: nil)
        XCTAssertEqual(p.body, Array(tile.utf8))
        XCTAssertEqual(
            p.headers.map { "\($0.0): \($0.1)" },
            [
                "x-wns-type: wns/tile", "content-type: text/xml", "x-wns-ttl: 600", "x-wns-cache-policy: no-cache", "x-wns-tag: scores",
                "x-wns-requestforstatus: true",
            ])
        // The stored form reads back the same.
        XCTAssertEqual(try WNSOptions(decoding: o.jsonValue), o)

        let raw = try decode([("type", .string("raw")), ("raw", .string("{\"k\":1}"))])
        let r = try PreparedWNS.render(raw, title: "ignored", message: "ignored", timeToLive: 30)
        XCTAssertEqual(r.headers.map { "\($0.0): \($0.1)" }, ["x-wns-type: wns/raw", "content-type: application/octet-stream", "x-wns-ttl: 30"])
        XCTAssertEqual(String(decoding: r.body, as: UTF8.self), "{\"k\":1}")

        let badge = try decode([("type", .string("badge")), ("xml", .string("<badge value=\"3\"/>"))])
        XCTAssertEqual(try PreparedWNS.render(badge, title: nil, message: nil, timeToLive: nil).headers[0].1, "wns/badge")
    }

    func testToastFromTitleAndMessageIsEscaped() throws {
        let p = try PreparedWNS.render(nil, title: "a < b & \"c\"", message: "</text><script>", timeToLive: nil)
        let xml = String(decoding: p.body, as: UTF8.self)
        XCTAssertEqual(
            xml,
            "<toast><visual><binding template=\"ToastGeneric\"><text>a &lt; b &amp; &quot;c&quot;</text><text>&lt;/text&gt;&lt;script&gt;</text></binding></visual></toast>"
        )
        XCTAssertNil(WNSXML.problem(xml, expectedRoot: "toast"), "the built toast is well-formed")
        XCTAssertEqual(p.headers.map(\.1), ["wns/toast", "text/xml"])
        // gorush's time_to_live is the TTL when the wns object gives none.
        XCTAssertEqual(try PreparedWNS.render(nil, title: "t", message: nil, timeToLive: 90).headers.last?.1, "90")
    }

    func testToastNeedsTextAndCharactersXMLCanCarry() {
        XCTAssertThrowsError(try PreparedWNS.render(nil, title: nil, message: "", timeToLive: nil)) { e in
            XCTAssertEqual((e as? WNSFieldProblem)?.field, "message")
        }
        XCTAssertThrowsError(try PreparedWNS.render(nil, title: "bell \u{7}", message: "m", timeToLive: nil)) { e in
            XCTAssertEqual((e as? WNSFieldProblem)?.field, "title")
        }
        // The 5,000-byte limit applies to the built toast's exact bytes: "&" is 5 bytes once escaped.
        let amps = String(repeating: "&", count: 990)
        XCTAssertThrowsError(try PreparedWNS.render(nil, title: nil, message: amps, timeToLive: nil)) { e in
            XCTAssertEqual((e as? WNSFieldProblem)?.field, "message")
            XCTAssertTrue((e as? WNSFieldProblem)?.problem.contains("5000") ?? false)
        }
        XCTAssertNoThrow(try PreparedWNS.render(nil, title: nil, message: String(repeating: "a", count: 4000), timeToLive: nil))
    }

    func testPayloadLimitIsOnTheExactBytes() throws {
        // 5,000 bytes exactly is accepted, 5,001 refused; "é" counts two bytes.
        let exact = "<toast>" + String(repeating: "é", count: 2492) + "a" + "</toast>"
        XCTAssertEqual(exact.utf8.count, 5000)
        XCTAssertEqual(try PreparedWNS.render(try decode([("xml", .string(exact))]), title: nil, message: nil, timeToLive: nil).body.count, 5000)
        let over = "<toast>" + String(repeating: "é", count: 2492) + "ab" + "</toast>"
        XCTAssertEqual(problem([("xml", .string(over))])?.field, "wns.xml")
        let raw5000 = String(repeating: "x", count: 5000)
        XCTAssertNoThrow(try decode([("type", .string("raw")), ("raw", .string(raw5000))]))
        XCTAssertEqual(problem([("type", .string("raw")), ("raw", .string(raw5000 + "é"))])?.field, "wns.raw")
    }

    /// The hostile cases of every new field: each a refusal naming the field.
    func testHostileInputNamesTheField() {
        let megabyte = "<toast>" + String(repeating: "a", count: 1 << 20) + "</toast>"
        XCTAssertEqual(
            problem([("xml", .string(megabyte))]),
            WNSFieldProblem(field: "wns.xml", problem: "is \(megabyte.utf8.count) bytes, over the limit of 5000"))
        let nested = String(repeating: "<a>", count: 10_000) + String(repeating: "</a>", count: 10_000)
        XCTAssertEqual(problem([("xml", .string(nested))])?.field, "wns.xml")
        // Nesting within the byte limit is refused by the depth bound.
        let deep = "<toast>" + String(repeating: "<a>", count: 40) + String(repeating: "</a>", count: 40) + "</toast>"
        XCTAssertTrue(problem([("xml", .string(deep))])?.problem.contains("nested deeper than 32") ?? false)
        for member in ["type", "xml", "raw", "cache_policy", "tag"] {
            XCTAssertEqual(problem([("type", .string("raw")), ("raw", .string("r")), (member, .string("a\u{0}b"))])?.field, "wns.\(member)", member)
        }
        XCTAssertEqual(problem([("ttl", .double(1e19))])?.field, "wns.ttl")
        XCTAssertEqual(problem([("ttl", .int(-1))])?.field, "wns.ttl")
        XCTAssertEqual(problem([("ttl", .int(Int64.max))])?.field, "wns.ttl")
        XCTAssertEqual(problem([("ttl", .string("60"))])?.field, "wns.ttl")
        XCTAssertEqual(problem([("request_for_status", .string("yes"))])?.field, "wns.request_for_status")
        XCTAssertEqual(problem([("type", .string("tost"))])?.field, "wns.type")
        XCTAssertEqual(problem([("type", .int(1))])?.field, "wns.type")
        XCTAssertEqual(problem([("bogus", .bool(true))])?.field, "wns.bogus")
        XCTAssertEqual(problem([("cache_policy", .string("sometimes"))])?.field, "wns.cache_policy")
        XCTAssertEqual(problem([("type", .string("tile")), ("xml", .string("<tile/>")), ("tag", .string("seventeen-chars-x"))])?.field, "wns.tag")
        XCTAssertEqual(problem([("type", .string("tile")), ("xml", .string("<tile/>")), ("tag", .string("a b"))])?.field, "wns.tag")
        XCTAssertThrowsError(try WNSOptions(decoding: .array([]))) { e in XCTAssertEqual((e as? WNSFieldProblem)?.field, "wns") }
    }

    func testMembersMustFitTheType() {
        XCTAssertEqual(problem([("type", .string("raw"))])?.field, "wns.raw")
        XCTAssertEqual(problem([("type", .string("raw")), ("raw", .string("r")), ("xml", .string("<toast/>"))])?.field, "wns.xml")
        XCTAssertEqual(problem([("type", .string("tile"))])?.field, "wns.xml")
        XCTAssertEqual(problem([("raw", .string("r"))])?.field, "wns.raw")
        XCTAssertEqual(problem([("cache_policy", .string("cache"))])?.field, "wns.cache_policy")
        XCTAssertEqual(problem([("tag", .string("t"))])?.field, "wns.tag")
        XCTAssertTrue(problem([("type", .string("tile")), ("xml", .string("<toast/>"))])?.problem.contains("not <tile>") ?? false)
    }

    func testWellFormedness() {
        let good = [
            "<toast/>", "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<toast launch='a&amp;b'><!-- c --><visual><![CDATA[<x>]]></visual></toast>\n",
            "<toast a=\"&#60;&#x3C;\">&lt;&gt;&amp;&apos;&quot;</toast>", "<toast><?pi data?></toast>",
        ]
        for xml in good { XCTAssertNil(WNSXML.problem(xml), xml) }
        let bad = [
            "", "text", "<toast>", "<toast></tile>", "<toast/><toast/>", "<toast a=1/>", "<toast a=\"1\" a=\"2\"/>", "<toast>&nbsp;</toast>",
            "<toast>a & b</toast>", "<toast>a < b</toast>", "<toast a=\"<\"/>", "<!DOCTYPE toast [<!ENTITY x \"y\">]><toast>&x;</toast>",
            "<toast><!-- a -- b --></toast>", "<toast>]]></toast>", "<toast>&#0;</toast>", "<toast>\u{1}</toast>", "<toast><![CDATA[x</toast>",
            "<toast a=\"1\"b=\"2\"/>", "<toast/><?xml version=\"1.0\"?>", "</toast>", "<toast>&#xFFFFFFFFFF;</toast>",
        ]
        for xml in bad { XCTAssertNotNil(WNSXML.problem(xml), xml) }
    }
}
