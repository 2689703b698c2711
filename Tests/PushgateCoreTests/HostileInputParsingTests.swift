import Foundation
import XCTest

@testable import PushgateCore

/// The request decoder against hostile bodies: every number range-checked, every limit enforced
/// with an error naming the field and the configuration key.
final class JSONParserTests: XCTestCase {
    func parse(_ s: String, _ limits: JSONLimits = JSONLimits()) throws(JSONParseError) -> JSONValue {
        try JSONParser.parse(Array(s.utf8), limits: limits)
    }

    func failure(_ s: String, _ limits: JSONLimits = JSONLimits(), file: StaticString = #filePath, line: UInt = #line) -> JSONParseError? {
        do {
            let v = try parse(s, limits)
            XCTFail("expected an error, got \(v)", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    func testValuesAndNumbers() throws {
        XCTAssertEqual(
            try parse(#"{"a":[1,-2,1.5,1e19,true,false,null,"x"]}"#),
            .object(JSONObject([("a", .array([.int(1), .int(-2), .double(1.5), .double(1e19), .bool(true), .bool(false), .null, .string("x")]))])))
        // Integers past Int64 stay numbers (as doubles); typed fields range-check them later.
        XCTAssertEqual(try parse("9223372036854775808"), .double(9_223_372_036_854_775_808))
        XCTAssertEqual(try parse("-9223372036854775808"), .int(Int64.min))
        XCTAssertEqual(failure("1e400")?.kind, .numberOutOfRange)
        XCTAssertEqual(failure("-1e400")?.kind, .numberOutOfRange)
        for bad in ["01", "1.", ".5", "+1", "1e", "-", "NaN", "Infinity", "0x10", "1_000"] {
            XCTAssertEqual(failure(bad)?.kind, .syntax, bad)
        }
    }

    func testStringsAndUTF8() throws {
        XCTAssertEqual(try parse(#""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00""#), .string("a\"\\/\u{8}\u{c}\n\r\té😀"))
        XCTAssertEqual(try parse("\"é😀\""), .string("é😀"))
        // Unpaired surrogates, raw control characters, NUL, invalid UTF-8 (overlong, surrogate, truncated).
        for bad in [#""\ud83d""#, #""\ude00x""#, "\"a\u{01}\"", #""\u0000""#, "\"\u{0}\""] {
            XCTAssertEqual(failure(bad)?.kind, .syntax, bad)
        }
        for bytes: [UInt8] in [
            [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xE2, 0x82, 0x22], [0x22, 0xFF, 0x22],
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],
        ] {
            XCTAssertThrowsError(try JSONParser.parse(bytes), "\(bytes)")
        }
        // A UTF-8 byte-order mark is skipped.
        XCTAssertEqual(try JSONParser.parse([0xEF, 0xBB, 0xBF] + Array("[1]".utf8)), .array([.int(1)]))
    }

    func testObjectsKeepOrderAndLastDuplicateWins() throws {
        guard case .object(let o) = try parse(#"{"b":1,"a":2,"b":3}"#) else { return XCTFail() }
        XCTAssertEqual(o.keys, ["b", "a"])
        XCTAssertEqual(o["b"], .int(3))
        // Large objects de-duplicate through a hash table: same rule.
        let many = (0..<100).map { #""k\#($0)":\#($0)"# }.joined(separator: ",")
        guard case .object(let big) = try parse("{\(many),\"k5\":-1}") else { return XCTFail() }
        XCTAssertEqual(big.count, 100)
        XCTAssertEqual(big["k5"], .int(-1))
        XCTAssertEqual(big.keys.first, "k0")
    }

    func testLimitsNameThePlace() {
        let limits = JSONLimits(maxDepth: 4, maxObjectKeys: 3, maxValues: 50, maxStringBytes: 8)
        let deep = failure(#"{"a":{"b":[[{"c":1}]]}}"#, limits)
        XCTAssertEqual(deep?.kind, .depth)
        XCTAssertEqual(deep?.path, "a.b[0][0]")
        let keys = failure(#"{"n":[{"a":1,"b":2,"c":3,"d":4}]}"#, limits)
        XCTAssertEqual(keys?.kind, .objectKeys)
        XCTAssertEqual(keys?.path, "n[0]", "the object that has too many keys")
        XCTAssertEqual(failure(#"{"s":"123456789"}"#, limits)?.kind, .stringBytes)
        XCTAssertEqual(failure("[" + Array(repeating: "0", count: 60).joined(separator: ",") + "]", limits)?.kind, .values)
        // Escapes count after unescaping: 8 bytes fit.
        XCTAssertNoThrow(try parse(#"{"s":"\u0041\u0042CDEFGH"}"#, limits))
    }

    func testTruncatedAndTrailing() {
        for bad in ["", " ", "{", "[1,", #"{"a""#, #"{"a":}"#, "[1]x", "[1] [2]", #"{"a":1,}"#, "[1,]", "tru", "nul"] {
            XCTAssertEqual(failure(bad)?.kind, .syntax, bad)
        }
    }

    func testWriterRoundTrip() throws {
        let text = #"{"z":[1,2.5,-0.001,"é\n\u0001",{"k":null}],"a":true,"big":1e300}"#
        let v = try parse(text)
        var w = JSONWriter()
        w.write(v)
        XCTAssertEqual(try JSONParser.parse(w.bytes), v)
    }
}

final class RequestLimitTests: XCTestCase {
    func assertRejected(
        _ body: String, limits: RequestLimits = RequestLimits.registered, message: String, detail: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        do {
            _ = try RequestParser.parseChecked(Array(body.utf8), limits: limits)
            XCTFail("expected a 400 for \(body.prefix(200))", file: file, line: line)
        } catch {
            XCTAssertEqual(error.status, 400, file: file, line: line)
            XCTAssertEqual(error.message, message, file: file, line: line)
            XCTAssertTrue(error.detail?.contains(detail) == true, "detail \(error.detail ?? "nil") lacks \(detail)", file: file, line: line)
        }
    }

    let gorush = RequestError.missingNotifications

    func testNumbersOutOfRangeNameTheField() {
        // The issue's crash: android.ttl 1e19 reached Int64(Double) in FCMMessage.
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"message":"m","android":{"ttl":1e19}}]}"#,
            message: gorush, detail: "notifications[0].android.ttl: out of range")
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"android":{"ttl":-1}}]}"#, message: gorush, detail: "notifications[0].android.ttl")
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"android":{"ttl":"1e19s"}}]}"#, message: gorush, detail: "notifications[0].android.ttl")
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"android":{"ttl":{}}}]}"#, message: gorush, detail: "notifications[0].android.ttl")
        for (field, value) in [
            ("badge", "1e19"), ("badge", "9223372036854775808"), ("badge", "1.5"), ("expiration", "-1"),
            ("expiration", "1e19"), ("time_to_live", "-5"), ("time_to_live", "1e300"), ("retry", "1e18"),
            ("stale-date", "-1"), ("timestamp", "1e40"), ("relevance-score", "\"x\""),
        ] {
            assertRejected(
                #"{"notifications":[{"platform":1,"tokens":["x"],"\#(field)":\#(value)}]}"#, message: gorush,
                detail: "notifications[0].\(field)")
        }
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["x"],"alert":{"summary-arg-count":-3}}]}"#, message: gorush,
            detail: "notifications[0].alert.summary-arg-count")
        assertRejected(#"{"notifications":[{"platform":1e30,"tokens":["x"]}]}"#, message: gorush, detail: "notifications[0].platform")
        assertRejected(#"{"notifications":[{"platform":1,"tokens":["x"],"badge":1e999}]}"#, message: gorush, detail: "notifications[0].badge")
    }

    func testAcceptedNumbers() throws {
        let r = try RequestParser.parse(
            Array(
                #"{"notifications":[{"platform":2,"tokens":["x"],"badge":3.0,"expiration":1700000000,"android":{"ttl":"3600s"},"time_to_live":60}]}"#
                    .utf8), limits: RequestLimits.registered)
        XCTAssertEqual(r.notifications[0].badge, 3)
        XCTAssertEqual(r.notifications[0].expiration, 1_700_000_000)
        XCTAssertEqual(r.notifications[0].timeToLive, 60)
    }

    func testTokenAndDeliveryLimits() {
        var limits = RequestLimits.registered
        limits.maxTokens[.android] = 3
        limits.maxDeliveries = 5
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["a","b","c","d"]}]}"#, limits: limits,
            message: RequestParser.overLimit,
            detail: "notifications[0].tokens: 4 tokens and subscriptions, over the limit of 3 for android (android.max_tokens)")
        // Early failures count too: a disabled platform's tokens are deliveries of the request.
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["a","b","c"]},{"platform":3,"tokens":["d","e","f"]}]}"#, limits: limits,
            message: RequestParser.overLimit, detail: "6 deliveries in one request, over the limit of 5 (core.max_deliveries_per_request)")
        // Defaults: gorush's 500 for Android.
        let tokens = (0..<501).map { "\"t\($0)\"" }.joined(separator: ",")
        assertRejected(
            #"{"notifications":[{"platform":"android","tokens":[\#(tokens)]}]}"#, message: RequestParser.overLimit, detail: "android.max_tokens")
    }

    func testStringLimits() {
        var limits = RequestLimits.registered
        limits.maxTokenBytes = 64
        limits.maxFieldBytes = 70
        limits.maxMessageBytes = 100
        let long = String(repeating: "a", count: 65)
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["\#(long)"]}]}"#, limits: limits,
            message: RequestParser.overLimit, detail: "notifications[0].tokens[0]: 65 bytes, over the limit of 64 (core.max_token_bytes)")
        let field = String(repeating: "b", count: 71)
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["t"],"topic":"\#(field)"}]}"#, limits: limits,
            message: RequestParser.overLimit, detail: "notifications[0].topic: 71 bytes, over the limit of 70 (core.max_field_bytes)")
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["t"],"notif_id":"\#(field)"}]}"#, limits: limits,
            message: RequestParser.overLimit, detail: "core.max_field_bytes")
        let message = String(repeating: "m", count: 101)
        assertRejected(
            #"{"notifications":[{"platform":1,"tokens":["t"],"message":"\#(message)"}]}"#, limits: limits,
            message: RequestParser.overLimit, detail: "core.max_message_bytes")
        assertRejected(
            #"{"notifications":[{"platform":4,"subscriptions":[{"endpoint":"https://x/\#(long)","keys":{"p256dh":"a","auth":"b"}}]}]}"#,
            limits: limits,
            message: RequestParser.overLimit, detail: "notifications[0].subscriptions[0].endpoint")
    }

    func testShapeLimits() {
        let keys = (0..<1001).map { #""k\#($0)":1"# }.joined(separator: ",")
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"data":{\#(keys)}}]}"#,
            message: RequestParser.overLimit, detail: "notifications[0].data: more than 1000 keys in one object (core.max_object_keys)")
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"data":{"a":\#(deep)}}]}"#,
            message: RequestParser.overLimit, detail: "(core.max_json_depth)")
        // Nesting far past the limit stops at the limit: no deep recursion.
        let veryDeep = String(repeating: "[", count: 100_000)
        assertRejected(
            #"{"notifications":[{"platform":2,"tokens":["x"],"data":{"a":\#(veryDeep)"#,
            message: RequestParser.overLimit, detail: "(core.max_json_depth)")
    }

    func testNULAndInvalidUTF8AreRefusedAtIngest() {
        assertRejected(#"{"notifications":[{"platform":1,"tokens":["ab\u0000cd"]}]}"#, message: gorush, detail: "notifications[0].tokens[0]: NUL")
        var bytes = Array(#"{"notifications":[{"platform":1,"tokens":["ab"#.utf8)
        bytes += [0xC3, 0x28]
        bytes += Array(#""]}]}"#.utf8)
        XCTAssertThrowsError(try RequestParser.parse(bytes, limits: RequestLimits.registered)) { error in
            XCTAssertTrue((error as? RequestError)?.detail?.contains("UTF-8") == true, "\(error)")
        }
    }

    func testLogSafeEscapesControlCharactersAndCuts() {
        XCTAssertEqual("a\nb\r\u{1b}[31mc\u{2028}".logSafe(), "a\\u{a}b\\u{d}\\u{1b}[31mc\\u{2028}")
        XCTAssertEqual(String(repeating: "x", count: 600).logSafe(max: 10), "xxxxxxxxxx…")
        XCTAssertEqual("é ok".logSafe(), "é ok")
    }

    func testUTF8PrefixEndsOnAScalarBoundary() {
        XCTAssertEqual("aé😀b".prefix(utf8Bytes: 2), "a")  // é is 2 bytes: not split
        XCTAssertEqual("aé😀b".prefix(utf8Bytes: 3), "aé")
        XCTAssertEqual("aé😀b".prefix(utf8Bytes: 6), "aé")  // 😀 is 4 bytes
        XCTAssertEqual("aé😀b".prefix(utf8Bytes: 7), "aé😀")
        XCTAssertEqual("short".prefix(utf8Bytes: 100), "short")
        XCTAssertEqual("abc".prefix(utf8Bytes: 0), "")
    }

    func testEmptyNotifIDIsNoID() throws {
        let r = try RequestParser.parse(
            Array(#"{"notifications":[{"platform":1,"tokens":["t"],"notif_id":""}]}"#.utf8), limits: RequestLimits.registered)
        XCTAssertNil(r.notifications[0].notifID)
    }

    func testWebPushRelativeExpirationIsADeadlineFromAcceptance() {
        let accepted = Date(timeIntervalSince1970: 1_800_000_000)
        var n = PushNotification(platform: .webpush)
        n.expiration = 3600
        XCTAssertEqual(n.retryDeadline(acceptedAt: accepted, rules: n.registeredRules), accepted.addingTimeInterval(3600))
        n.expiration = 1_800_000_600
        XCTAssertEqual(n.retryDeadline(acceptedAt: accepted, rules: n.registeredRules), Date(timeIntervalSince1970: 1_800_000_600))
        var up = PushNotification(platform: .unifiedpush)
        up.expiration = 60
        XCTAssertEqual(up.retryDeadline(acceptedAt: accepted, rules: up.registeredRules), accepted.addingTimeInterval(60))
        var ios = PushNotification(platform: .ios)
        ios.expiration = 3600  // APNs: a UNIX time (long past)
        XCTAssertEqual(ios.retryDeadline(acceptedAt: accepted, rules: ios.registeredRules), Date(timeIntervalSince1970: 3600))
    }
}
