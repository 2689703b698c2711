import AsyncHTTPClient
import Foundation
import MockProviders
import NIOConcurrencyHelpers
import NIOPosix
import OppoMock
import ProviderKit
import PushgateCore
import TestSupport
import XCTest

@testable import Oppo

final class OppoClock: Sendable {
    let t: NIOLockedValueBox<Double>
    init(_ start: Double) { t = NIOLockedValueBox(start) }
    func set(_ s: Double) { t.withLockedValue { $0 = s } }
    func advance(_ s: Double) { t.withLockedValue { $0 += s } }
    var now: @Sendable () -> Date { { Date(timeIntervalSince1970: self.t.withLockedValue { $0 }) } }
}

final class OppoMessageTests: XCTestCase {
    func n(title: String? = "T", message: String? = "M", data: JSONObject? = nil) -> PushNotification {
        var n = PushNotification(platform: .oppo, tokens: ["CN_abc"])
        n.title = title
        n.message = message
        n.data = data
        return n
    }

    func options(_ json: String) throws -> OppoOptions { try OppoOptions(try JSONParser.parse(Array(json.utf8)), path: "oppo") }

    func testSignatureRecipe() throws {
        // SHA-256 of "key" + "1700000000000" + "secret", lowercase hex (computed independently with sha256sum).
        XCTAssertEqual(
            OppoConfiguration.sign(appKey: "key", timestamp: "1700000000000", masterSecret: "secret"),
            "ee412f504f93d283888979ab4f37e98beb471243575d468a4048c57285abad84")
        let c = try OppoConfiguration(appKey: "k&y", masterSecret: "s")
        XCTAssertEqual(
            c.authForm(at: Date(timeIntervalSince1970: 1_700_000_000.1239)),
            "app_key=k%26y&timestamp=1700000000123&sign=" + OppoConfiguration.sign(appKey: "k&y", timestamp: "1700000000123", masterSecret: "s"))
    }

    func testHostileMemberValuesNameTheField() {
        let cases: [(String, String)] = [
            (#"{"category":"im"}"#, "oppo.category"),
            (#"{"category":5}"#, "oppo.category"),
            (#"{"notify_level":2}"#, "oppo.category"),
            (#"{"category":"IM","notify_level":3}"#, "oppo.notify_level"),
            (#"{"click_action_type":2}"#, "oppo.click_action_url"),
            (#"{"click_action_type":1}"#, "oppo.click_action_activity"),
            (#"{"click_action_type":3}"#, "oppo.click_action_type"),
            (#"{"channel_id":"\#(String(repeating: "c", count: 51))"}"#, "oppo.channel_id"),
            (#"{"style":3}"#, "oppo.style"),
            (#"{"other":1}"#, "oppo.other"),
        ]
        for (json, field) in cases {
            do {
                _ = try options(json)
                XCTFail(json)
            } catch let p as RequestMemberProblem {
                XCTAssertEqual(p.field, field, json)
            } catch { XCTFail("\(error)") }
        }
    }

    func testLimitsAndClassification() throws {
        let im = try options(#"{"category":"IM","notify_level":16}"#)
        XCTAssertNil(OppoMessageMapper.check(n(), options: im, defaultCategory: ""))
        XCTAssertEqual(OppoMessageMapper.check(n(), options: nil, defaultCategory: "")?.field, "oppo.category")
        XCTAssertNil(OppoMessageMapper.check(n(), options: nil, defaultCategory: "NEWS"))
        XCTAssertEqual(
            OppoMessageMapper.check(n(title: nil, message: nil, data: JSONObject([("a", .int(1))])), options: im, defaultCategory: "")?.field,
            "message")
        XCTAssertEqual(OppoMessageMapper.check(n(title: String(repeating: "t", count: 51)), options: im, defaultCategory: "")?.field, "title")
        XCTAssertEqual(OppoMessageMapper.check(n(message: String(repeating: "m", count: 51)), options: im, defaultCategory: "")?.field, "message")
        XCTAssertNil(
            OppoMessageMapper.check(
                n(message: String(repeating: "m", count: 128)), options: try options(#"{"category":"IM","style":2}"#), defaultCategory: ""))
        XCTAssertEqual(
            OppoMessageMapper.check(n(data: JSONObject([("k", .string(String(repeating: "x", count: 4000)))])), options: im, defaultCategory: "")?
                .field, "data")
    }
}

/// The provider against the mock OPPO over TLS on loopback.
final class OppoProviderTests: XCTestCase {
    var mock: MockOppo!
    var client: HTTPClient!
    let clock = OppoClock(1_778_770_000)

    override func setUp() async throws {
        let pki = try TestPKI.generate()
        var o = MockOppo.Options(appKey: "app-key-1", masterSecret: "master/secret", tls: try pki.serverTLSConfiguration())
        let clock = self.clock
        o.now = { clock.now() }
        mock = MockOppo(options: o, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await mock.start()
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: try pki.clientTLSConfiguration()))
    }

    override func tearDown() async throws {
        try await client.shutdown()
        try await mock.stop()
    }

    func provider(secret: String = "master/secret", category: String = "IM", now: (@Sendable () -> Date)? = nil) throws -> OppoProvider {
        let c = try OppoConfiguration(
            appKey: "app-key-1", masterSecret: secret, endpoint: mock.baseURL, defaultCategory: category, defaultNotifyLevel: category.isEmpty ? 0 : 2
        )
        return OppoProvider(configuration: c, httpClient: client, now: now ?? clock.now)
    }

    func send(_ p: OppoProvider, to regid: String = "CN_regid1", data: JSONObject? = nil) async throws -> SendOutcome {
        var n = PushNotification(platform: .oppo, tokens: [regid])
        n.title = "订单"
        n.message = "已发货"
        n.data = data
        let prepared = try p.prepare(n, options: nil)
        return await p.send(prepared, to: .token(regid), context: DeliveryContext(messageID: "m"))
    }

    func testSignedAuthTokenSharedAndMessageVerified() async throws {
        let p = try provider()
        for _ in 0..<3 {
            let o = try await send(p, data: JSONObject([("order", .int(1))]))
            XCTAssertTrue(o.isDelivered, "\(o)")
        }
        XCTAssertEqual(mock.authRequestCount, 1, "one token for every send")
        XCTAssertEqual(mock.rejections, [])
        let n = try XCTUnwrap(mock.messages.first).notification
        XCTAssertEqual(n["category"] as? String, "IM")
        XCTAssertEqual((n["notify_level"] as? NSNumber)?.intValue, 2)
        XCTAssertEqual(n["action_parameters"] as? String, #"{"order":1}"#)
        // Refreshed before its 24 hours end.
        clock.advance(23 * 3600 + 1)
        _ = try await send(p)
        XCTAssertEqual(mock.authRequestCount, 2)
    }

    func testRefusedTokenRefetchedOnce() async throws {
        let p = try provider()
        _ = try await send(p)
        mock.script(regid: "CN_regid1", [.invalidAuthToken])
        let refused = try await send(p)
        XCTAssertEqual(refused.className, "credentials", "the dispatcher retries once with a new token")
        let again = try await send(p)
        XCTAssertTrue(again.isDelivered)
        XCTAssertEqual(mock.authRequestCount, 2)
    }

    func testWrongSecretAndSkewedClockRefused() async throws {
        let wrong = try await send(try provider(secret: "nope"))
        XCTAssertEqual(wrong.className, "permanent")
        XCTAssertTrue(wrong.reason?.contains("code 16") == true, "\(wrong)")
        let late = clock.now().addingTimeInterval(601)
        let skewed = try await send(try provider(now: { late }))
        XCTAssertEqual(skewed.className, "transient")
        XCTAssertTrue(skewed.reason?.contains("code 19") == true, "\(skewed)")
        XCTAssertEqual(mock.sendRequestCount, 0)
    }

    func testAnswersClassifiedAndQuotaHeld() async throws {
        let p = try provider()
        mock.script(regid: "CN_regid1", [.invalidRegid, .flowControl, .dailyLimit])
        let dead = try await send(p)
        XCTAssertEqual(dead.className, "token_dead")
        let flow = try await send(p)
        XCTAssertEqual(flow.className, "transient")
        let quota = try await send(p)
        XCTAssertEqual(quota.className, "quota_exceeded")
        XCTAssertTrue(quota.reason?.hasPrefix("DailyQuotaExceeded") == true, "\(quota)")
        let sent = mock.sendRequestCount
        let held = try await send(p, to: "CN_other")
        XCTAssertTrue(held.reason?.hasPrefix("DailyQuotaExceeded") == true)
        XCTAssertEqual(mock.sendRequestCount, sent)
        clock.set(1_778_774_400)  // midnight in Beijing
        let next = try await send(p)
        XCTAssertTrue(next.isDelivered, "\(next)")
    }

    func testNoClassificationRefusedBeforeAnyRequest() async throws {
        let p = try provider(category: "")
        var n = PushNotification(platform: .oppo, tokens: ["CN_x"])
        n.title = "a"
        n.message = "b"
        XCTAssertEqual(p.checkIngest(n, options: nil)?.detail.hasPrefix("oppo.category"), true)
        XCTAssertThrowsError(try p.prepare(n, options: nil))
        XCTAssertEqual(mock.authRequestCount, 0)
    }

    // MARK: Batches

    func items(_ p: OppoProvider, _ regids: [String]) throws -> [OppoBatchItem] {
        var n = PushNotification(platform: .oppo, tokens: regids)
        n.title = "订单"
        n.message = "已发货"
        let prepared = try p.prepare(n, options: nil)
        return regids.map { OppoBatchItem(regid: $0, message: prepared.message(for: $0)) }
    }

    static func send(_ p: OppoProvider, _ regid: String) async throws -> SendOutcome {
        var n = PushNotification(platform: .oppo, tokens: [regid])
        n.title = "T"
        n.message = "M"
        return await p.send(try p.prepare(n, options: nil), to: .token(regid), context: DeliveryContext(messageID: regid))
    }

    func testABatchIsOneUnicastBatchWithEachRegidsOwnResult() async throws {
        let p = try provider()
        mock.script(regid: "CN_dead", [.invalidRegid])
        let regids = (0..<20).map { "CN_b\($0)" } + ["CN_dead", "CN_b0"]
        let outcomes = await p.sender.send(try items(p, regids))
        XCTAssertEqual(outcomes.count, regids.count)
        for (r, o) in zip(regids, outcomes) { XCTAssertEqual(o.className, r == "CN_dead" ? "token_dead" : "delivered", "\(r): \(o)") }
        XCTAssertEqual(mock.rejections, [], "the mock checked the token and every message")
        XCTAssertEqual(mock.batches, [regids])
        XCTAssertEqual(mock.sendRequestCount, 1)
        let ids = outcomes.compactMap { o -> String? in if case .delivered(let id, _) = o { return id } else { return nil } }
        XCTAssertEqual(Set(ids).count, 21, "each regid its own messageId")
        // One item is a unicast.
        let one = await p.sender.send(try items(p, ["CN_solo"]))
        XCTAssertTrue(one[0].isDelivered)
        XCTAssertEqual(mock.batchRequestCount, 1)
        XCTAssertEqual(mock.sendRequestCount, 2)
    }

    func testConcurrentSendsWhileOneIsInFlightShareOneUnicastBatch() async throws {
        let pki = try TestPKI.generate()
        var o = MockOppo.Options(appKey: "app-key-1", masterSecret: "master/secret", tls: try pki.serverTLSConfiguration())
        let clock = self.clock
        o.now = { clock.now() }
        let hold = MockResponseHold()
        o.hold = hold
        let held = MockOppo(options: o, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await held.start()
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: try pki.clientTLSConfiguration()))
        let c = try OppoConfiguration(appKey: "app-key-1", masterSecret: "master/secret", endpoint: held.baseURL, defaultCategory: "IM")
        let p = OppoProvider(configuration: c, httpClient: client, maxWaiting: 64, now: clock.now)
        held.script(regid: "CN_c7", [.invalidRegid])
        let regids = (0..<30).map { "CN_c\($0)" }
        let outcomes = try await withThrowingTaskGroup(of: (String, SendOutcome).self) { g in
            for r in regids { g.addTask { (r, try await Self.send(p, r)) } }
            // The first send waits for its auth token (held by the mock); the others wait for it.
            try await waitUntil("29 sends waiting") { await p.batches.waiting == 29 }
            hold.release()
            var out: [String: SendOutcome] = [:]
            for try await (r, o) in g { out[r] = o }
            return out
        }
        for r in regids {
            XCTAssertEqual(outcomes[r]?.className, r == "CN_c7" ? "token_dead" : "delivered", "\(r): \(String(describing: outcomes[r]))")
        }
        XCTAssertEqual(held.rejections, [])
        XCTAssertEqual(held.sendRequestCount, 2, "one unicast, then one unicast_batch of the 29 that waited")
        XCTAssertEqual(held.batches.map(\.count), [29])
        XCTAssertEqual(held.authRequestCount, 1)
        let most = await p.batches.mostWaiting
        XCTAssertLessThanOrEqual(most, 29, "never more waiting than the callers")
        await p.shutdown()
        try await client.shutdown()
        try await held.stop()
    }

    func testAWholeBatchRefusalAppliesToEveryRegidAsTheSinglePathDoes() async throws {
        let p = try provider()
        let regids = ["CN_w1", "CN_w2", "CN_w3"]
        // The auth token refused: every regid credentials (one retry each, with a new token).
        _ = await p.sender.send(try items(p, ["CN_w0"]))
        mock.revokeAuthTokens()
        let refused = await p.sender.send(try items(p, regids))
        XCTAssertEqual(refused.map(\.className), ["credentials", "credentials", "credentials"])
        let again = await p.sender.send(try items(p, regids))
        XCTAssertEqual(again.map(\.className), ["delivered", "delivered", "delivered"])
        XCTAssertEqual(mock.authRequestCount, 2, "one new token for the whole batch")
        // Flow control: every regid transient.
        mock.script(regid: "CN_w2", [.flowControl])
        let flow = await p.sender.send(try items(p, regids))
        XCTAssertEqual(flow.map(\.className), ["transient", "transient", "transient"])
        // The daily limit: every regid quota_exceeded, and the app held without a request.
        mock.script(regid: "CN_w3", [.dailyLimit])
        let quota = await p.sender.send(try items(p, regids))
        XCTAssertEqual(quota.map(\.className), ["quota_exceeded", "quota_exceeded", "quota_exceeded"])
        let sent = mock.sendRequestCount
        let held = await p.sender.send(try items(p, regids))
        XCTAssertEqual(held.map(\.className), ["quota_exceeded", "quota_exceeded", "quota_exceeded"])
        XCTAssertEqual(mock.sendRequestCount, sent)
    }

    func testHostileBatchAnswersGiveEachRegidAClassifiedOutcome() async throws {
        let p = try provider()
        let regids = ["CN_h1", "CN_h2", "CN_h3"]
        let cases: [(answer: String, classes: [String])] = [
            // Shorter than the batch: the regid without a result is retried.
            (#"{"code":0,"data":[{"messageId":"m1","registrationId":"CN_h1"}]}"#, ["delivered", "transient", "transient"]),
            // Longer, with results for regids not asked and a regid twice.
            (
                #"{"code":0,"data":[{"messageId":"x","registrationId":"CN_zz"},{"messageId":"m3","registrationId":"CN_h3"},"#
                    + #"{"messageId":"m2","registrationId":"CN_h2","errorCode":10000,"errorMessage":"bad"},{"messageId":"m1","registrationId":"CN_h1"},"#
                    + #"{"messageId":"m1b","registrationId":"CN_h1"}]}"#,
                ["delivered", "token_dead", "delivered"]
            ),
            // No regids named, one result each: by position.
            (#"{"code":0,"data":[{"messageId":"a"},{"errorCode":33},{"errorCode":-2}]}"#, ["delivered", "quota_exceeded", "transient"]),
            // Wrong types.
            (#"{"code":0,"data":"nope"}"#, ["transient", "transient", "transient"]),
            (
                #"{"code":0,"data":[7,"x",{"registrationId":5},{"registrationId":"CN_h1","errorCode":"boom"},{"registrationId":"CN_h2","errorCode":1e300}]}"#,
                ["permanent", "permanent", "transient"]
            ),
            (#"{"code":"0","data":[]}"#, ["permanent", "permanent", "permanent"]),
            (#"[1,2,3]"#, ["permanent", "permanent", "permanent"]),
            ("not json", ["permanent", "permanent", "permanent"]),
            (#"{"code":-1,"message":"unavailable"}"#, ["transient", "transient", "transient"]),
        ]
        for (answer, classes) in cases {
            // A fresh app each time: a quota answer holds the app.
            let p = try provider()
            mock.scriptBatchAnswer(answer)
            let outcomes = await p.sender.send(try items(p, regids))
            XCTAssertEqual(outcomes.map(\.className), classes, answer)
        }
        // Refused naming a bad regid without saying which: each goes alone and gets its own answer.
        mock.script(regid: "CN_h2", [.ok, .invalidRegid])
        mock.scriptBatchAnswer(#"{"code":10000,"message":"Invalid RegistrationId"}"#)
        let before = mock.sendRequestCount
        let alone = await p.sender.send(try items(p, regids))
        XCTAssertEqual(alone.map(\.className), ["delivered", "token_dead", "delivered"])
        XCTAssertEqual(mock.sendRequestCount - before, 4, "the batch, then one unicast per regid")
    }

    func testTheMockRefusesBatchesOPPOWouldRefuse() async throws {
        let p = try provider()
        let token = try await p.tokens.token()
        func post(_ messages: String, token: String) async throws -> String {
            let form = "auth_token=" + OAuthTokenCache.formEncode(token) + "&messages=" + OAuthTokenCache.formEncode(messages)
            let a = try await BoundedPOST.send(
                client, url: mock.baseURL + OppoConfiguration.unicastBatchPath, contentType: "application/x-www-form-urlencoded",
                body: Array(form.utf8), maxBytes: 1 << 20, timeout: .seconds(10))
            return String(decoding: a.body, as: UTF8.self)
        }
        let good = #"{"target_type":2,"target_value":"CN_m1","notification":{"title":"T","content":"C","category":"IM"}}"#
        let cases: [(String, String, String)] = [
            ("[" + good + "]", "not-a-token", #""code":11"#),
            ("{}", token, "messages must be a JSON array"),
            ("[]", token, "messages: 1 to 1000"),
            ("[" + Array(repeating: good, count: 1001).joined(separator: ",") + "]", token, "messages: 1 to 1000"),
            ("[" + good + #",{"target_type":5,"target_value":"a","notification":{}}]"#, token, "messages[1].target_type"),
            (
                "[" + good + #",{"target_type":2,"target_value":"CN_m2","notification":{"title":"T","content":"C","category":"SPAM"}}]"#, token,
                "invalid category"
            ),
            (
                "[" + good + #",{"target_type":2,"target_value":"CN_m2","notification":{"title":"T","content":"C"},"extra":1}]"#, token,
                "unknown field"
            ),
        ]
        for (messages, t, expected) in cases {
            let answer = try await post(messages, token: t)
            XCTAssertTrue(answer.contains(expected), "\(expected): \(answer)")
        }
        XCTAssertEqual(mock.batchRequestCount, 0, "nothing refused counts as a batch")
        // A malformed regid is that message's error, not the request's.
        let mixed = try await post(
            "[" + good + #",{"target_type":2,"target_value":"CN bad","notification":{"title":"T","content":"C"}}]"#, token: token)
        XCTAssertTrue(mixed.contains(#""code":0"#) && mixed.contains(#""errorCode":10000"#), mixed)
    }

    func testBatchClassifierNeverTrapsOnHostileBodies() {
        let regids = ["CN_a", "CN_b"]
        let bodies = [
            "", "{", "null", "{}", #"{"code":null}"#, #"{"code":1e400}"#, #"{"code":-9223372036854775809}"#, #"{"code":0,"data":null}"#,
            #"{"code":0,"data":[null,null,null]}"#, #"{"code":0,"data":[{"errorCode":-1e30,"registrationId":"CN_a"}]}"#,
            #"{"code":0,"data":[{"errorCode":9223372036854775807,"registrationId":"CN_b"}]}"#,
            String(repeating: "[", count: 100_000),
        ]
        for b in bodies {
            for status in [200, 400, 429, 503] {
                let answers = OppoResponseClassifier.classifyBatch(status: status, body: Array(b.utf8), regids: regids, retryAfter: "7")
                XCTAssertEqual(answers?.count, 2, b)
            }
        }
        // The smallest Int64 as a code: no overflow taking its size (the single answer's parse too).
        let smallest = Array(#"{"code":-9223372036854775808}"#.utf8)
        XCTAssertEqual(
            OppoResponseClassifier.classify(status: 200, body: smallest, retryAfter: nil), .outcome(.permanent(reason: "HTTP 200", status: 200)))
        XCTAssertEqual(OppoResponseClassifier.classifyBatch(status: 200, body: smallest, regids: regids, retryAfter: nil)?.count, 2)
        let big = Array(repeating: UInt8(ascii: " "), count: OppoResponseClassifier.maxBatchBodyBytes + 1)
        XCTAssertEqual(OppoResponseClassifier.classifyBatch(status: 200, body: big, regids: regids, retryAfter: nil)?.count, 2)
    }
}
