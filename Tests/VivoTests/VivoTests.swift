import AsyncHTTPClient
import Foundation
import MockProviders
import NIOConcurrencyHelpers
import NIOPosix
import ProviderKit
import PushgateCore
import TestSupport
import VivoMock
import XCTest

@testable import Vivo

final class VivoClock: Sendable {
    let t: NIOLockedValueBox<Double>
    init(_ start: Double) { t = NIOLockedValueBox(start) }
    func set(_ s: Double) { t.withLockedValue { $0 = s } }
    var now: @Sendable () -> Date { { Date(timeIntervalSince1970: self.t.withLockedValue { $0 }) } }
}

final class VivoMessageTests: XCTestCase {
    func testSignatureRecipe() throws {
        // MD5 of "10004" + "key" + "1700000000000" + "secret", lowercase hex (computed independently with md5sum).
        XCTAssertEqual(
            VivoConfiguration.sign(appID: 10004, appKey: "key", timestamp: "1700000000000", appSecret: "secret"), "c8c535379302fced2a2076f8473068db")
        let c = try VivoConfiguration(appID: "10004", appKey: "key", appSecret: "secret")
        XCTAssertEqual(
            c.authBody(at: Date(timeIntervalSince1970: 1_700_000_000)),
            #"{"appId":10004,"appKey":"key","timestamp":1700000000000,"sign":"c8c535379302fced2a2076f8473068db"}"#)
        XCTAssertThrowsError(try VivoConfiguration(appID: "1e19", appKey: "k", appSecret: "s"))
        XCTAssertThrowsError(try VivoConfiguration(appID: "99999999999999999999", appKey: "k", appSecret: "s"))
        XCTAssertThrowsError(try VivoConfiguration(appID: "1", appKey: "k", appSecret: "s", defaultCategory: "SPAM"))
    }

    func options(_ json: String) throws -> VivoOptions { try VivoOptions(try JSONParser.parse(Array(json.utf8)), path: "vivo") }

    func testClassificationMustMatchTheCategory() throws {
        XCTAssertEqual(try options(#"{"category":"IM","classification":1}"#).classification, 1)
        XCTAssertThrowsError(try options(#"{"category":"MARKETING","classification":1}"#)) { e in
            XCTAssertEqual((e as? RequestMemberProblem)?.field, "vivo.classification")
        }
        XCTAssertThrowsError(try options(#"{"classification":0}"#)) { e in XCTAssertEqual((e as? RequestMemberProblem)?.field, "vivo.category") }
        XCTAssertThrowsError(try options(#"{"skip_type":2}"#)) { e in XCTAssertEqual((e as? RequestMemberProblem)?.field, "vivo.skip_content") }
        XCTAssertThrowsError(try options(#"{"skip_type":2,"skip_content":"javascript:x"}"#))
        XCTAssertThrowsError(try options(#"{"colour":1}"#)) { e in XCTAssertEqual((e as? RequestMemberProblem)?.field, "vivo.colour") }
    }

    func testMappingAndLimits() throws {
        let c = try VivoConfiguration(appID: "10004", appKey: "key", appSecret: "secret", defaultCategory: "ORDER")
        var n = PushNotification(platform: .vivo, tokens: ["abc"])
        n.title = "订单"
        n.message = "已发货"
        n.data = JSONObject([("order", .int(7)), ("s", .string("x"))])
        n.timeToLive = 10
        let p = try VivoMessageMapper.prepare(n, options: nil, configuration: c)
        let body = String(decoding: p.body(regID: "abc", requestID: "r-1"), as: UTF8.self)
        XCTAssertEqual(
            body,
            #"{"appId":10004,"notifyType":4,"title":"订单","content":"已发货","skipType":1,"classification":1,"category":"ORDER","timeToLive":60,"clientCustomMap":{"order":"7","s":"x"},"regId":"abc","requestId":"r-1"}"#
        )
        n.title = String(repeating: "标", count: 41)
        XCTAssertEqual(VivoMessageMapper.checkMessage(n, options: nil)?.field, "title")
        n.title = "T"
        n.message = String(repeating: "m", count: 101)
        XCTAssertEqual(VivoMessageMapper.checkMessage(n, options: nil)?.field, "message")
        n.message = "M"
        XCTAssertEqual(VivoMessageMapper.check(n, options: nil, defaultCategory: "")?.field, "vivo.category")
        n.title = nil
        n.message = nil
        XCTAssertEqual(VivoMessageMapper.checkMessage(n, options: nil)?.field, "message")
    }
}

final class VivoProviderTests: XCTestCase {
    var mock: MockVivo!
    var client: HTTPClient!
    let clock = VivoClock(1_778_752_800)  // 2026-05-14T10:00:00Z, 18:00 in China

    override func setUp() async throws {
        let pki = try TestPKI.generate()
        var o = MockVivo.Options(appID: 10004, appKey: "app-key", appSecret: "app/secret", tls: try pki.serverTLSConfiguration())
        o.now = { [clock] in clock.now() }
        mock = MockVivo(options: o, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await mock.start()
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: try pki.clientTLSConfiguration()))
    }

    override func tearDown() async throws {
        try await client.shutdown()
        try await mock.stop()
    }

    func provider(secret: String = "app/secret") throws -> VivoProvider {
        let c = try VivoConfiguration(appID: "10004", appKey: "app-key", appSecret: secret, endpoint: mock.baseURL, defaultCategory: "IM")
        return VivoProvider(configuration: c, httpClient: client, now: clock.now)
    }

    static func send(_ p: VivoProvider, to regid: String, id: String) async throws -> SendOutcome {
        var n = PushNotification(platform: .vivo, tokens: [regid])
        n.title = "T"
        n.message = "M"
        let prepared = try p.prepare(n, options: nil)
        return await p.send(prepared, to: .token(regid), context: DeliveryContext(messageID: id))
    }

    func send(_ p: VivoProvider, to regid: String = "regid1", id: String = "m-1") async throws -> SendOutcome {
        var n = PushNotification(platform: .vivo, tokens: [regid])
        n.title = "T"
        n.message = "M"
        let prepared = try p.prepare(n, options: nil)
        return await p.send(prepared, to: .token(regid), context: DeliveryContext(messageID: id))
    }

    func testOneSignedTokenForConcurrentSendsAndANewOneWhenRefused() async throws {
        let p = try provider()
        try await withThrowingTaskGroup(of: SendOutcome.self) { g in
            for i in 0..<30 { g.addTask { try await Self.send(p, to: "regid\(i)", id: "m-\(i)") } }
            for try await o in g { XCTAssertTrue(o.isDelivered, "\(o)") }
        }
        XCTAssertEqual(mock.authRequestCount, 1, "one auth call however many sends wait")
        XCTAssertEqual(mock.rejections, [])
        mock.script(regid: "regidX", [.invalidAuthToken])
        let refused = try await send(p, to: "regidX")
        XCTAssertEqual(refused.className, "credentials")
        let again = try await send(p, to: "regidX")
        XCTAssertTrue(again.isDelivered, "\(again)")
        XCTAssertEqual(mock.authRequestCount, 2)
        // A wrong secret: the mock refuses the signature; permanent.
        let bad = try provider(secret: "wrong")
        let o = try await send(bad)
        XCTAssertEqual(o.className, "permanent", "\(o)")
        XCTAssertEqual(mock.rejections.last, "invalid sign")
    }

    func testDeadTokenAndDailyLimitHeldUntilMidnightInChina() async throws {
        let p = try provider()
        mock.script(regid: "regid-dead", [.invalidUser])
        let dead = try await send(p, to: "regid-dead")
        XCTAssertEqual(dead.className, "token_dead", "\(dead)")
        mock.script(regid: "regid-q", [.dailyLimit])
        let q = try await send(p, to: "regid-q")
        XCTAssertEqual(q.className, "quota_exceeded", "\(q)")
        XCTAssertTrue(q.reason?.contains("2026-05-14T16:00:00Z") == true, "\(q)")
        let sent = mock.sendRequestCount
        let held = try await send(p, to: "regid-other")
        XCTAssertEqual(held.className, "quota_exceeded")
        XCTAssertEqual(mock.sendRequestCount, sent)
        clock.set(1_778_774_400)
        let next = try await send(p, to: "regid-other")
        XCTAssertTrue(next.isDelivered, "\(next)")
    }

    // MARK: Batches

    func prepared(_ p: VivoProvider, testMode: Bool = false) throws -> VivoPreparedMessage {
        var n = PushNotification(platform: .vivo, tokens: ["x"])
        n.title = "T"
        n.message = "M"
        n.data = JSONObject([("k", .string("v"))])
        return try p.prepare(n, options: testMode ? try VivoOptions(try JSONParser.parse(Array(#"{"test_mode":true}"#.utf8)), path: "vivo") : nil)
    }

    func items(_ regids: [String]) -> [VivoBatchItem] { regids.map { VivoBatchItem(regid: $0, requestID: "d-\($0)") } }

    func testABatchSavesTheMessageOnceAndPushesToTheListEachRegIdItsOwnResult() async throws {
        let p = try provider()
        mock.script(regid: "vdead", [.invalidUser])
        let regids = (0..<20).map { "vb\($0)" } + ["vdead"]
        let outcomes = await p.sender.send(try prepared(p).fields, items(regids))
        for (r, o) in zip(regids, outcomes) { XCTAssertEqual(o.className, r == "vdead" ? "token_dead" : "delivered", "\(r): \(o)") }
        XCTAssertEqual(mock.rejections, [], "the mock checked the token, the saved message and the list")
        XCTAssertEqual(mock.saveListRequestCount, 1)
        XCTAssertEqual(mock.pushToListRequestCount, 1)
        XCTAssertEqual(mock.batches, [regids])
        let m = try XCTUnwrap(mock.messages.first { $0.regid == "vb3" }).message
        XCTAssertEqual(m["clientCustomMap"] as? [String: String], ["k": "v"])
        XCTAssertNil(m["regId"], "the saved message names no regId")
        // One item is a /message/send, with the delivery's requestId.
        let one = await p.sender.send(try prepared(p).fields, items(["vsolo"]))
        XCTAssertTrue(one[0].isDelivered)
        XCTAssertEqual(mock.messages.last?.message["requestId"] as? String, "d-vsolo")
        XCTAssertEqual(mock.pushToListRequestCount, 1)
        // A test-mode message goes to the list in test mode too.
        let test = await p.sender.send(try prepared(p, testMode: true).fields, items(["vt1", "vt2"]))
        XCTAssertEqual(test.map(\.className), ["delivered", "delivered"])
        XCTAssertEqual(mock.rejections, [])
    }

    func testConcurrentSendsOfOneMessageShareSaveListPayloadAndPushToList() async throws {
        let pki = try TestPKI.generate()
        var o = MockVivo.Options(appID: 10004, appKey: "app-key", appSecret: "app/secret", tls: try pki.serverTLSConfiguration())
        o.now = { [clock] in clock.now() }
        let hold = MockResponseHold()
        o.hold = hold
        let held = MockVivo(options: o, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await held.start()
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: try pki.clientTLSConfiguration()))
        let c = try VivoConfiguration(appID: "10004", appKey: "app-key", appSecret: "app/secret", endpoint: held.baseURL, defaultCategory: "IM")
        let p = VivoProvider(configuration: c, httpClient: client, maxWaiting: 64, now: clock.now)
        held.script(regid: "vc7", [.invalidUser])
        let regids = (0..<30).map { "vc\($0)" }
        let outcomes = try await withThrowingTaskGroup(of: (String, SendOutcome).self) { g in
            for r in regids { g.addTask { (r, try await Self.send(p, to: r, id: "m-\(r)")) } }
            try await waitUntil("29 sends waiting") { await p.batches.waiting == 29 }
            hold.release()
            var out: [String: SendOutcome] = [:]
            for try await (r, o) in g { out[r] = o }
            return out
        }
        for r in regids {
            XCTAssertEqual(outcomes[r]?.className, r == "vc7" ? "token_dead" : "delivered", "\(r): \(String(describing: outcomes[r]))")
        }
        XCTAssertEqual(held.rejections, [])
        XCTAssertEqual(held.sendRequestCount, 3, "one /message/send, then saveListPayload and pushToList for the 29 that waited")
        XCTAssertEqual(held.batches.map(\.count), [29])
        await p.shutdown()
        try await client.shutdown()
        try await held.stop()
    }

    func testWholeListRefusalsApplyToEveryRegIdAndTheBatchLimitSendsEachAlone() async throws {
        let p = try provider()
        let fields = try prepared(p).fields
        let regids = ["vw1", "vw2", "vw3"]
        mock.script(regid: "vw2", [.invalidAuthToken])
        let refused = await p.sender.send(fields, items(regids))
        XCTAssertEqual(refused.map(\.className), ["credentials", "credentials", "credentials"])
        let again = await p.sender.send(fields, items(regids))
        XCTAssertEqual(again.map(\.className), ["delivered", "delivered", "delivered"])
        XCTAssertEqual(mock.authRequestCount, 2)
        // 10252: the day's batch bodies are spent: each goes alone, now and until the reset.
        mock.scriptSaveList([.listPayloadLimit])
        let alone = await p.sender.send(fields, items(regids))
        XCTAssertEqual(alone.map(\.className), ["delivered", "delivered", "delivered"])
        let saves = mock.saveListRequestCount
        let later = await p.sender.send(fields, items(regids))
        XCTAssertEqual(later.map(\.className), ["delivered", "delivered", "delivered"])
        XCTAssertEqual(mock.saveListRequestCount, saves, "no saveListPayload until vivo's day resets")
        // The daily total on the list: every regId quota_exceeded, the app held.
        let q = try provider()
        mock.script(regid: "vw3", [.dailyLimit])
        let quota = await q.sender.send(fields, items(regids))
        XCTAssertEqual(quota.map(\.className), ["quota_exceeded", "quota_exceeded", "quota_exceeded"])
        let sent = mock.sendRequestCount
        _ = await q.sender.send(fields, items(regids))
        XCTAssertEqual(mock.sendRequestCount, sent)
    }

    func testTheMockRefusesListsVivoWouldRefuse() async throws {
        let p = try provider()
        let token = try await p.tokens.token()
        func post(_ path: String, _ json: String, token: String) async throws -> String {
            let a = try await BoundedPOST.send(
                client, url: mock.baseURL + path, contentType: "application/json", headers: [("authToken", token)], body: Array(json.utf8),
                maxBytes: 1 << 20, timeout: .seconds(10))
            return String(decoding: a.body, as: UTF8.self)
        }
        let payload = #"{"appId":10004,"notifyType":4,"title":"T","content":"C","skipType":1,"classification":1,"category":"IM","requestId":"s1"}"#
        let saved = try await post(VivoConfiguration.saveListPayloadPath, payload, token: token)
        let taskID = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(saved.utf8)) as? [String: Any])["taskId"] as? String ?? ""
        XCTAssertFalse(taskID.isEmpty, saved)
        let saveCases: [(String, String)] = [
            (payload.replacingOccurrences(of: #""requestId":"s1""#, with: #""requestId":"s1","regId":"abc""#), "unknown field regId"),
            (payload.replacingOccurrences(of: #","requestId":"s1""#, with: ""), "requestId"),
            (payload.replacingOccurrences(of: #""category":"IM""#, with: #""category":"MARKETING""#), "do not match"),
            (payload.replacingOccurrences(of: "10004", with: "10005"), "appId mismatch"),
        ]
        for (json, expected) in saveCases {
            let answer = try await post(VivoConfiguration.saveListPayloadPath, json, token: token)
            XCTAssertTrue(answer.contains(expected), "\(expected): \(answer)")
        }
        func list(_ regids: [String], task: String = taskID, extra: String = "") -> String {
            #"{"appId":10004,"regIds":["# + regids.map { "\"\($0)\"" }.joined(separator: ",") + #"],"taskId":""# + task + #"","requestId":"r1""#
                + extra + "}"
        }
        let listCases: [(String, String, String)] = [
            (list(["a1", "a2"]), "nope", "authToken invalid"),
            (list(["a1"]), token, "regIds: 2 to 1000"),
            (list((0...1000).map { "a\($0)" }), token, "regIds: 2 to 1000"),
            (list(["a1", "a2"], task: "unknown"), token, "taskId"),
            (list(["a1", "a2"], extra: #","skipType":1"#), token, "unknown field skipType"),
            (list(["a1", "a2"], extra: #","pushMode":3"#), token, "pushMode"),
        ]
        for (json, t, expected) in listCases {
            let answer = try await post(VivoConfiguration.pushToListPath, json, token: t)
            XCTAssertTrue(answer.contains(expected), "\(expected): \(answer)")
        }
        XCTAssertEqual(mock.pushToListRequestCount, 0, "nothing refused counts as a list")
        let mixed = try await post(VivoConfiguration.pushToListPath, list(["a1", "bad regid"]), token: token)
        XCTAssertTrue(mixed.contains(#""result":0"#) && mixed.contains(#""status":1"#) && mixed.contains("bad regid"), mixed)
    }

    func testHostileListAnswersGiveEachRegIdAClassifiedOutcome() async throws {
        let regids = ["vh1", "vh2", "vh3"]
        let cases: [(answer: String, classes: [String])] = [
            (
                #"{"result":0,"taskId":"t","invalidUsers":[{"status":2,"userid":"vh2"},{"status":4,"userid":"vh3"},{"status":1,"userid":"vzz"}]}"#,
                ["delivered", "token_dead", "permanent"]
            ),
            (#"{"result":0,"invalidUsers":{"status":3,"userid":"vh1"}}"#, ["token_dead", "delivered", "delivered"]),
            (
                #"{"result":0,"invalidUsers":[7,"x",{"status":"2","userid":"vh1"},{"userid":42},{"status":2}]}"#,
                ["permanent", "delivered", "delivered"]
            ),
            (#"{"result":0,"invalidUsers":"vh1"}"#, ["delivered", "delivered", "delivered"]),
            (#"{"result":"0"}"#, ["permanent", "permanent", "permanent"]),
            (#"{"result":10500,"desc":"busy"}"#, ["transient", "transient", "transient"]),
            ("[]", ["permanent", "permanent", "permanent"]),
            ("", ["permanent", "permanent", "permanent"]),
        ]
        for (answer, classes) in cases {
            let p = try provider()
            mock.scriptListAnswer(answer)
            let outcomes = await p.sender.send(try prepared(p).fields, items(regids))
            XCTAssertEqual(outcomes.map(\.className), classes, answer)
        }
        // 10302 for the whole list without saying which: each alone.
        let p = try provider()
        mock.script(regid: "vh2", [.ok, .invalidUser])
        mock.scriptListAnswer(#"{"result":10302,"desc":"regId不合法"}"#)
        let before = mock.sendRequestCount
        let alone = await p.sender.send(try prepared(p).fields, items(regids))
        XCTAssertEqual(alone.map(\.className), ["delivered", "token_dead", "delivered"])
        XCTAssertEqual(mock.sendRequestCount - before, 5, "saveListPayload, pushToList, then one send per regId")
        XCTAssertEqual(
            VivoResponseClassifier.classify(status: 200, body: Array(#"{"result":-9223372036854775808}"#.utf8), retryAfter: nil),
            .outcome(.permanent(reason: "HTTP 200", status: 200)))
        for b in ["{", "null", #"{"result":1e400}"#, #"{"result":-9223372036854775808}"#, String(repeating: "{\"a\":", count: 50_000)] {
            XCTAssertEqual(VivoResponseClassifier.classifyList(status: 200, body: Array(b.utf8), regids: regids, retryAfter: nil)?.count, 3, b)
        }
    }
}
