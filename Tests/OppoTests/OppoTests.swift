import AsyncHTTPClient
import Foundation
import MockProviders
import NIOConcurrencyHelpers
import NIOPosix
import OppoMock
import ProviderKit
import PushgateCore
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
}
