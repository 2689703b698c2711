import AsyncHTTPClient
import Foundation
import HonorMock
import MockProviders
import NIOConcurrencyHelpers
import NIOPosix
import ProviderKit
import PushgateCore
import XCTest

@testable import Honor

final class HonorClock: Sendable {
    let t: NIOLockedValueBox<Double>
    init(_ start: Double) { t = NIOLockedValueBox(start) }
    func set(_ s: Double) { t.withLockedValue { $0 = s } }
    var now: @Sendable () -> Date { { Date(timeIntervalSince1970: self.t.withLockedValue { $0 }) } }
}

final class HonorMessageTests: XCTestCase {
    func testConfiguration() throws {
        let c = try HonorConfiguration(appID: "104000001", clientID: "cid", clientSecret: "a/b+c&d", quotaCodes: " 80300013, 7 ")
        XCTAssertEqual(c.sendURL, "https://push-api.cloud.honor.com/api/v1/104000001/sendMessage")
        XCTAssertEqual(c.tokenURL, "https://iam.developer.honor.com/auth/token")
        XCTAssertEqual(c.tokenForm, "grant_type=client_credentials&client_id=cid&client_secret=a%2Fb%2Bc%26d")
        XCTAssertEqual(c.quotaCodes, [80_300_013, 7])
        XCTAssertFalse(c.description.contains("a/b+c&d"))
        for (appID, secret, importance, codes, key) in [
            ("1e19", "s", "", "", "honor.app_id"), ("", "s", "", "", "honor.app_id"), ("1", "", "", "", "honor.client_secret"),
            ("1", "s\u{0}", "", "", "honor.client_secret"), ("1", "s", "HIGH", "", "honor.importance"), ("1", "s", "", "1e19", "honor.quota_codes"),
            ("1", "s", "", "99999999999999999999", "honor.quota_codes"), ("1", "s", "", "200", "honor.quota_codes"),
            ("1", "s", "", "1,,2", "honor.quota_codes"),
        ] {
            XCTAssertThrowsError(
                try HonorConfiguration(appID: appID, clientID: "c", clientSecret: secret, defaultImportance: importance, quotaCodes: codes)
            ) {
                XCTAssertEqual(($0 as? ConfigError)?.key, key)
            }
        }
    }

    func options(_ json: String) throws -> HonorOptions { try HonorOptions(try JSONParser.parse(Array(json.utf8)), path: "honor") }

    func testOptionsAreStrict() throws {
        XCTAssertEqual(try options(#"{"importance":"LOW","click_type":1,"intent":"intent://x"}"#).importance, "LOW")
        for (json, field) in [
            (#"{"importance":"HIGH"}"#, "honor.importance"), (#"{"importance":1}"#, "honor.importance"),
            (#"{"click_type":2}"#, "honor.url"), (#"{"click_type":1}"#, "honor.intent"), (#"{"url":"https://e.com"}"#, "honor.click_type"),
            (#"{"click_type":2,"url":"http://e.com"}"#, "honor.url"), (#"{"click_type":4}"#, "honor.click_type"),
            (#"{"click_type":1e19}"#, "honor.click_type"), (#"{"notify_id":-1}"#, "honor.notify_id"), (#"{"notify_id":1e19}"#, "honor.notify_id"),
            (#"{"tag":"a\u0007b"}"#, "honor.tag"), (#"{"test_mode":"yes"}"#, "honor.test_mode"), (#"{"colour":1}"#, "honor.colour"),
        ] {
            XCTAssertThrowsError(try options(json), json) { XCTAssertEqual(($0 as? RequestMemberProblem)?.field, field, json) }
        }
    }

    func testMappingAndLimits() throws {
        let c = try HonorConfiguration(appID: "104", clientID: "c", clientSecret: "s", defaultImportance: "NORMAL")
        var n = PushNotification(platform: .honor, tokens: ["t1"])
        n.title = "订单"
        n.message = "已发货"
        n.data = JSONObject([("order", .int(7))])
        n.timeToLive = 99_999_999
        let p = try HonorMessageMapper.prepare(n, options: try options(#"{"click_type":2,"url":"https://e.com/o","tag":"o"}"#), configuration: c)
        XCTAssertEqual(
            String(decoding: p.body(token: "t1"), as: UTF8.self),
            #"{"data":"{\"order\":7}","android":{"ttl":"1296000s","notification":{"title":"订单","body":"已发货","clickAction":{"type":2,"url":"https://e.com/o"},"importance":"NORMAL","tag":"o"}},"token":["t1"]}"#
        )
        // A data message: no notification, no importance needed.
        var d = PushNotification(platform: .honor, tokens: ["t1"])
        d.data = JSONObject([("k", .string("v"))])
        let dp = try HonorMessageMapper.prepare(d, options: nil, configuration: try HonorConfiguration(appID: "1", clientID: "c", clientSecret: "s"))
        XCTAssertEqual(String(decoding: dp.body(token: "t1"), as: UTF8.self), #"{"data":"{\"k\":\"v\"}","token":["t1"]}"#)
        XCTAssertFalse(dp.isNotification)
        // Classification: neither the request nor the app.
        XCTAssertEqual(HonorMessageMapper.check(n, options: nil, defaultImportance: "")?.field, "honor.importance")
        XCTAssertNil(HonorMessageMapper.check(n, options: try options(#"{"importance":"LOW"}"#), defaultImportance: ""))
        n.title = " "
        XCTAssertEqual(HonorMessageMapper.checkMessage(n, options: nil)?.field, "title")
        n.title = "T"
        n.message = String(repeating: "m", count: 1 << 20)
        XCTAssertEqual(HonorMessageMapper.checkMessage(n, options: nil)?.field, "message")
        n.message = "M"
        n.data = JSONObject([("k", .string(String(repeating: "x", count: 4000)))])
        XCTAssertEqual(HonorMessageMapper.checkMessage(n, options: nil)?.field, "data")
        n.data = nil
        n.image = "http://e.com/i.png"
        XCTAssertEqual(HonorMessageMapper.checkMessage(n, options: nil)?.field, "image")
        n.image = nil
        n.title = nil
        n.message = nil
        XCTAssertEqual(HonorMessageMapper.checkMessage(n, options: nil)?.field, "message")
    }

    func testAnswersClassified() {
        func classify(_ status: Int, _ body: String, retryAfter: String? = nil) -> HonorAnswer {
            HonorResponseClassifier.classify(status: status, body: Array(body.utf8), retryAfter: retryAfter, token: "t1", quotaCodes: [80_300_013])
        }
        XCTAssertEqual(
            classify(200, #"{"code":200,"message":"success","data":{"sendResult":true,"requestId":"r1","failTokens":[],"expireTokens":[]}}"#),
            .outcome(.delivered(providerID: "r1")))
        guard case .outcome(.tokenDead) = classify(200, #"{"code":200,"data":{"sendResult":false,"expireTokens":["t1"]}}"#) else {
            return XCTFail("expireTokens")
        }
        guard case .outcome(.permanent) = classify(200, #"{"code":200,"data":{"sendResult":false,"failTokens":["t1"]}}"#) else {
            return XCTFail("failTokens")
        }
        guard case .outcome(.tokenDead) = classify(200, #"{"code":"80300007","message":"all tokens invalid"}"#) else { return XCTFail("80300007") }
        guard case .outcome(.credentials) = classify(401, #"{"code":401,"message":"token invalid"}"#) else { return XCTFail("401") }
        guard case .outcome(.credentials) = classify(401, "") else { return XCTFail("bare 401") }
        guard case .outcome(.transient(_, _, let ra)) = classify(503, #"{"code":503}"#, retryAfter: "7") else { return XCTFail("503") }
        XCTAssertEqual(ra, 7)
        guard case .outcome(.transient) = classify(429, "not json") else { return XCTFail("429") }
        XCTAssertEqual(classify(200, #"{"code":80300013,"message":"quota"}"#), .dailyQuota(reason: "80300013: quota"))
        guard case .outcome(.permanent) = classify(200, #"{"code":1e300}"#) else { return XCTFail("huge code") }
        guard case .outcome(.permanent) = classify(400, #"{"code":80100003}"#) else { return XCTFail("bad message") }
        guard case .outcome(.permanent) = classify(200, #"{"code":[1],"data":"x"}"#) else { return XCTFail("wrong types") }
    }
}

final class HonorProviderTests: XCTestCase {
    var mock: MockHonor!
    var client: HTTPClient!
    let clock = HonorClock(1_778_752_800)  // 2026-05-14T10:00:00Z, 18:00 in China

    override func setUp() async throws {
        let pki = try TestPKI.generate()
        mock = MockHonor(
            options: MockHonor.Options(appID: "104000001", clientID: "client-1", clientSecret: "se/cret", tls: try pki.serverTLSConfiguration()),
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await mock.start()
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: try pki.clientTLSConfiguration()))
    }

    override func tearDown() async throws {
        try await client.shutdown()
        try await mock.stop()
    }

    func provider(secret: String = "se/cret") throws -> HonorProvider {
        let c = try HonorConfiguration(
            appID: "104000001", clientID: "client-1", clientSecret: secret, endpoint: mock.baseURL, tokenURL: mock.tokenURL,
            defaultImportance: "NORMAL",
            quotaCodes: "80300013")
        return HonorProvider(configuration: c, httpClient: client, now: clock.now)
    }

    static func send(_ p: HonorProvider, to token: String, id: String) async throws -> SendOutcome {
        var n = PushNotification(platform: .honor, tokens: [token])
        n.title = "T"
        n.message = "M"
        let prepared = try p.prepare(n, options: nil)
        return await p.send(prepared, to: .token(token), context: DeliveryContext(messageID: id))
    }

    func testOneTokenForConcurrentSendsAndANewOneWhenRefused() async throws {
        let p = try provider()
        try await withThrowingTaskGroup(of: SendOutcome.self) { g in
            for i in 0..<30 { g.addTask { try await Self.send(p, to: "token\(i)", id: "m-\(i)") } }
            for try await o in g { XCTAssertTrue(o.isDelivered, "\(o)") }
        }
        XCTAssertEqual(mock.tokenRequestCount, 1, "one token request however many sends wait")
        XCTAssertEqual(mock.rejections, [])
        mock.script(token: "tokenX", [.invalidAccessToken])
        let refused = try await Self.send(p, to: "tokenX", id: "x")
        XCTAssertEqual(refused.className, "credentials")
        let again = try await Self.send(p, to: "tokenX", id: "x")
        XCTAssertTrue(again.isDelivered, "\(again)")
        XCTAssertEqual(mock.tokenRequestCount, 2)
        // Refreshed 5 minutes before the hour is out, not before.
        clock.set(1_778_752_800 + 3_000)
        _ = try await Self.send(p, to: "tokenY", id: "y")
        XCTAssertEqual(mock.tokenRequestCount, 2)
        clock.set(1_778_752_800 + 3_400)
        _ = try await Self.send(p, to: "tokenY", id: "y")
        XCTAssertEqual(mock.tokenRequestCount, 3)
        // A wrong secret: the token endpoint refuses it; a credentials failure (one retry with fresh credentials).
        let bad = try provider(secret: "wrong")
        let o = try await Self.send(bad, to: "token1", id: "z")
        XCTAssertEqual(o.className, "credentials", "\(o)")
        XCTAssertFalse(o.reason?.contains("wrong") ?? true, "the secret stays out of the reason: \(o)")
        XCTAssertEqual(mock.rejections.last, "invalid client_secret")
    }

    func testDeadTokenFlowControlAndDailyQuotaHeldUntilMidnightInChina() async throws {
        let p = try provider()
        mock.script(token: "dead", [.expiredToken])
        let dead = try await Self.send(p, to: "dead", id: "d")
        XCTAssertEqual(dead.className, "token_dead", "\(dead)")
        mock.script(token: "busy", [.flowControl])
        let busy = try await Self.send(p, to: "busy", id: "b")
        guard case .transient(_, 503, let ra) = busy else { return XCTFail("\(busy)") }
        XCTAssertEqual(ra, 1)
        mock.script(token: "q", [.dailyLimit])
        let q = try await Self.send(p, to: "q", id: "q")
        XCTAssertEqual(q.className, "quota_exceeded", "\(q)")
        XCTAssertTrue(q.reason?.contains("2026-05-14T16:00:00Z") == true, "\(q)")
        let sent = mock.sendRequestCount
        let held = try await Self.send(p, to: "other", id: "o")
        XCTAssertEqual(held.className, "quota_exceeded")
        XCTAssertEqual(mock.sendRequestCount, sent)
        clock.set(1_778_774_400)
        let next = try await Self.send(p, to: "other", id: "o")
        XCTAssertTrue(next.isDelivered, "\(next)")
    }
}
