import AsyncHTTPClient
import Foundation
import MockProviders
import NIOPosix
import NIOSSL
import ProviderKit
import PushgateCore
import XCTest
import XiaomiMock

@testable import Xiaomi

/// The provider against the mock Xiaomi over TLS on loopback.
final class XiaomiProviderTests: XCTestCase {
    var mock: MockXiaomi!
    var client: HTTPClient!
    let clock = TestClock(1_778_770_000)  // 2026-05-14T14:46:40Z, 22:46:40 in Beijing

    override func setUp() async throws {
        let pki = try TestPKI.generate()
        mock = MockXiaomi(
            options: .init(appSecret: "s3cr3t/+=", packageName: "com.example.app", channels: ["im", "news"], tls: try pki.serverTLSConfiguration()),
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await mock.start()
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: try pki.clientTLSConfiguration()))
    }

    override func tearDown() async throws {
        try await client.shutdown()
        try await mock.stop()
    }

    func provider(secret: String = "s3cr3t/+=", channel: String = "im", package: String = "com.example.app") throws -> XiaomiProvider {
        let c = try XiaomiConfiguration(appSecret: secret, packageName: package, endpoint: mock.baseURL, defaultChannelID: channel)
        return XiaomiProvider(configuration: c, httpClient: client, now: clock.now)
    }

    func notification(_ data: JSONObject? = nil) -> PushNotification {
        var n = PushNotification(platform: .xiaomi, tokens: ["regid-A"])
        n.title = "标题"
        n.message = "正文 & more"
        n.data = data
        return n
    }

    func send(_ p: XiaomiProvider, _ n: PushNotification, to token: String = "regid-A", options: XiaomiOptions? = nil) async throws -> SendOutcome {
        let prepared = try p.prepare(n, options: options)
        XCTAssertNil(p.validate(target: .token(token), of: prepared))
        return await p.send(prepared, to: .token(token), context: DeliveryContext(messageID: "m1"))
    }

    func testNotificationWithDataDeliveredAndVerified() async throws {
        let p = try provider()
        let outcome = try await send(p, notification(JSONObject([("order", .int(7))])))
        guard case .delivered(let id, _) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertTrue(id?.hasPrefix("scm") == true)
        XCTAssertEqual(mock.rejections, [])
        let m = try XCTUnwrap(mock.messages.first)
        XCTAssertEqual(m.regid, "regid-A")
        XCTAssertEqual(m.form["title"], "标题")
        XCTAssertEqual(m.form["description"], "正文 & more")
        XCTAssertEqual(m.form["payload"], #"{"order":7}"#)
        XCTAssertEqual(m.form["extra.channel_id"], "im")
        XCTAssertEqual(m.form["pass_through"], "0")
    }

    func testTheMockRefusesWhatXiaomiRefuses() async throws {
        // A wrong AppSecret: Xiaomi's 21301, a permanent failure naming the AppSecret.
        let wrong = try await send(try provider(secret: "other"), notification())
        XCTAssertEqual(wrong.className, "permanent")
        XCTAssertTrue(wrong.reason?.contains("AppSecret") == true, "\(wrong)")
        // A package the app is not: 22022.
        let pkg = try await send(try provider(package: "com.other.app"), notification())
        XCTAssertTrue(pkg.reason?.hasPrefix("22022") == true, "\(pkg)")
        // A channel the console does not have: 27001.
        let channel = try await send(try provider(channel: "unknown"), notification())
        XCTAssertTrue(channel.reason?.hasPrefix("27001") == true, "\(channel)")
        XCTAssertEqual(mock.rejections.count, 3)
        XCTAssertEqual(mock.messages.count, 0)
    }

    func testBadRegidIsDeadAndOthersClassified() async throws {
        let p = try provider()
        mock.script(regid: "regid-A", [.badRegid, .tooFrequent, .busy(retryAfter: 5)])
        let dead = try await send(p, notification())
        XCTAssertEqual(dead.className, "token_dead")
        let limited = try await send(p, notification())
        XCTAssertEqual(limited.className, "transient")
        let busy = try await send(p, notification())
        XCTAssertEqual(busy, .transient(reason: "10002: 系统繁忙", status: 503, retryAfter: 5))
    }

    func testQuotaHoldsSendsUntilXiaomisDayResets() async throws {
        let p = try provider()
        mock.script(regid: "regid-A", [.quotaExceeded])
        let first = try await send(p, notification())
        guard case .quotaExceeded(let reason, _) = first else { return XCTFail("\(first)") }
        XCTAssertTrue(reason.hasPrefix("DailyQuotaExceeded"), reason)
        XCTAssertTrue(reason.contains("2026-05-14T16:00:00Z"), reason)
        XCTAssertEqual(mock.requestCount, 1)
        // Held: no request reaches Xiaomi, for any token of the app.
        for token in ["regid-A", "regid-B"] {
            let held = try await send(p, notification(), to: token)
            XCTAssertEqual(held.className, "quota_exceeded")
            XCTAssertTrue(held.reason?.hasPrefix("DailyQuotaExceeded") == true)
        }
        XCTAssertEqual(mock.requestCount, 1)
        clock.set(1_778_774_399)
        _ = try await send(p, notification())
        XCTAssertEqual(mock.requestCount, 1, "still the same day in Beijing")
        // Midnight in Beijing: sends go again.
        clock.set(1_778_774_400)
        let next = try await send(p, notification())
        XCTAssertTrue(next.isDelivered, "\(next)")
        XCTAssertEqual(mock.requestCount, 2)
        let holds = await p.quota.holdsStarted
        XCTAssertEqual(holds, 1)
    }

    func testTooManyTodayIsAQuotaToo() async throws {
        let p = try provider()
        mock.setDefaultReply(.tooManyToday)
        let first = try await send(p, notification())
        XCTAssertTrue(first.reason?.contains("10034") == true, "\(first)")
        _ = try await send(p, notification())
        XCTAssertEqual(mock.requestCount, 1)
    }

    func testMemberOptionsReachXiaomi() async throws {
        let p = try provider(channel: "")
        let o = try XiaomiOptions(
            try JSONParser.parse(Array(#"{"channel_id":"news","notify_effect":3,"web_uri":"https://example.com/a?b=c&d"}"#.utf8)), path: "xiaomi")
        let outcome = try await send(p, notification(), options: o)
        XCTAssertTrue(outcome.isDelivered, "\(outcome)")
        let m = try XCTUnwrap(mock.messages.first)
        XCTAssertEqual(m.form["extra.channel_id"], "news")
        XCTAssertEqual(m.form["extra.web_uri"], "https://example.com/a?b=c&d")
        // Without it and without the app's default: refused before any request.
        XCTAssertEqual(p.checkIngest(notification(), options: nil)?.detail.hasPrefix("xiaomi.channel_id"), true)
        XCTAssertThrowsError(try p.prepare(notification(), options: nil))
        XCTAssertEqual(mock.requestCount, 1)
    }

    func testHostileTokensNeverSent() async throws {
        let p = try provider()
        let prepared = try p.prepare(notification(), options: nil)
        for bad in ["a,b", "a&title=x", ""] {
            XCTAssertNotNil(p.validate(target: .token(bad), of: prepared))
            let o = await p.send(prepared, to: .token(bad), context: DeliveryContext(messageID: "m"))
            XCTAssertEqual(o.className, "permanent")
        }
        XCTAssertEqual(mock.requestCount, 0)
    }
}
