import Foundation
import HummingbirdTesting
import MockProviders
import NIOConcurrencyHelpers
import OppoMock
import PushDispatch
import PushgateCore
import TestSupport
import VivoMock
import XCTest
import XiaomiMock

@testable import GatewayCore
@testable import HTTPIngest

/// End to end through the China vendors: HTTP client -> Pushgate -> TLS -> the strict mock Xiaomi /
/// OPPO of the shared mock stack (which check the AppSecret header and OPPO's signed auth token).
final class GatewayChinaVendorsTests: XCTestCase {
    /// A clock the test moves (the providers' daily quota hold reads it).
    final class Clock: Sendable {
        let box: NIOLockedValueBox<Date>
        init(_ d: Date) { box = NIOLockedValueBox(d) }
        var now: @Sendable () -> Date { { [box] in box.withLockedValue { $0 } } }
        /// The same clock as the gateway takes it (`GatewayBuilder.build(clock:)`).
        var seconds: @Sendable () -> Double { { [box] in box.withLockedValue { $0 }.timeIntervalSince1970 } }
        func set(_ d: Date) { box.withLockedValue { $0 = d } }
    }

    /// 2026-05-14T10:00:00Z: 18:00 in China; the vendors' day resets at 2026-05-14T16:00:00Z.
    static let afternoon = Date(timeIntervalSince1970: 1_778_752_800)
    static let reset = Date(timeIntervalSince1970: 1_778_774_400)

    func xiaomiYAML(_ m: MockXiaomi, channel: String = "mock_private") -> String {
        """
        xiaomi:
          enabled: true
          app_secret: "\(m.options.appSecret)"
          package_name: "\(m.options.packageName)"
          endpoint: "\(m.baseURL)"
          channel_id: "\(channel)"
          max_retry: 0
        """
    }

    func oppoYAML(_ m: MockOppo, category: String = "IM") -> String {
        """
        oppo:
          enabled: true
          app_key: "\(m.options.appKey)"
          master_secret: "\(m.options.masterSecret)"
          endpoint: "\(m.baseURL)"
          category: "\(category)"
          max_retry: 0
        """
    }

    /// `pushgate_provider_responses_total{…provider="<p>"…class="<c>"…}`'s value (0 when absent).
    static func responses(_ metrics: String, provider: String, class c: String) -> Int {
        for line in metrics.split(separator: "\n") where line.hasPrefix("pushgate_provider_responses_total{") {
            guard line.contains("provider=\"\(provider)\""), line.contains("class=\"\(c)\""), line.contains("app=\"default\"") else { continue }
            return line.split(separator: " ").last.flatMap { Int($0) } ?? 0
        }
        return 0
    }

    static func provider<P>(_ gateway: Gateway, _ platform: Platform, type: P.Type) throws -> P {
        try XCTUnwrap(gateway.dispatcher.app(AppID.defaultApp)?.slots[platform]?.provider as? P)
    }

    // MARK: Xiaomi

    func testXiaomiDeliversNotificationsAndDataWithTheAppSecretTheMockChecks() async throws {
        let env = try await TestEnvironment.start()
        let mi = try XCTUnwrap(env.stack.mock(RunningMockXiaomi.self)).mock
        try await env.withGateway(xiaomiYAML(mi), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"xiaomi","tokens":["regid-n1"],"title":"Hi","message":"Hello"},"#
                    + #"{"platform":9,"tokens":["regid-d1"],"title":"Chat","message":"New message","data":{"chat":"42"},"#
                    + #""xiaomi":{"channel_id":"mock_public","notify_effect":3,"web_uri":"https://example.com/c/42","notify_id":7}}]}"#)
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(mi.rejections, [], "the mock took the AppSecret and every field")
            let n = try XCTUnwrap(mi.messages.first { $0.regid == "regid-n1" })
            XCTAssertEqual(n.form["title"], "Hi")
            XCTAssertEqual(n.form["description"], "Hello")
            XCTAssertEqual(n.form["extra.channel_id"], "mock_private", "the app's default channel")
            XCTAssertNil(n.form["payload"])
            let d = try XCTUnwrap(mi.messages.first { $0.regid == "regid-d1" })
            XCTAssertEqual(d.form["payload"], #"{"chat":"42"}"#)
            XCTAssertEqual(d.form["extra.channel_id"], "mock_public", "the request's channel")
            XCTAssertEqual(d.form["extra.web_uri"], "https://example.com/c/42")
            XCTAssertEqual(d.form["notify_id"], "7")
            // Xiaomi delivers no pass-through messages: a data-only push is refused naming message.
            let data = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-x"],"data":{"sync":1}}]}"#)
            XCTAssertEqual(data.status, 400, data.body)
            XCTAssertTrue(data.body.contains("notifications[0].message"), data.body)
        }
        // A wrong AppSecret is refused by the mock (what the mock verifies is the header).
        try await env.withGateway(
            xiaomiYAML(mi).replacingOccurrences(of: mi.options.appSecret, with: "not-the-secret"), environment: ["PUSHGATE_CORE_SYNC": "true"]
        ) { client, _ in
            let r = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-w"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(r.body.contains("21301"), r.body)
            XCTAssertEqual(mi.rejections.last, "authentication failed")
        }
        await env.stop()
    }

    func testXiaomiDeadRegidReachesTheFeedbackHook() async throws {
        let env = try await TestEnvironment.start()
        let mi = try XCTUnwrap(env.stack.mock(RunningMockXiaomi.self)).mock
        mi.script(regid: "regid-dead", [.badRegid])
        try await env.withGateway(xiaomiYAML(mi), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"xiaomi","tokens":["regid-dead","regid-ok"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let logs = try XCTUnwrap(jsonObject(r.body)["logs"] as? [[String: Any]])
            XCTAssertEqual(logs.count, 1, r.body)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "feedback posts: \(env.feedbackCount)")
            let post = String(decoding: env.feedbackPosts.withLockedValue { $0.first?.body ?? [] }, as: UTF8.self)
            XCTAssertTrue(post.contains("xiaomi"), post)
            XCTAssertEqual(mi.messages.filter { $0.regid == "regid-dead" }.count, 1, "a dead token is not retried")
        }
        await env.stop()
    }

    func testXiaomiQuotaHoldsTheAppUntilTheResetAndIsCounted() async throws {
        let env = try await TestEnvironment.start()
        let mi = try XCTUnwrap(env.stack.mock(RunningMockXiaomi.self)).mock
        mi.script(regid: "regid-q1", [.quotaExceeded])
        let clock = Clock(Self.afternoon)
        try await env.withGateway(xiaomiYAML(mi), environment: ["PUSHGATE_CORE_SYNC": "true"], clock: clock.seconds) { client, _ in
            let before = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let r = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-q1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(r.body.contains("DailyQuotaExceeded") && r.body.contains("200001"), r.body)
            XCTAssertTrue(r.body.contains("2026-05-14T16:00:00Z"), "held until midnight in China: \(r.body)")
            // Held: nothing reaches Xiaomi until its day resets.
            let sent = mi.requestCount
            let held = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-q2"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(held.body.contains("DailyQuotaExceeded"), held.body)
            XCTAssertEqual(mi.requestCount, sent, "a held send makes no request")
            let after = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertEqual(
                Self.responses(after, provider: "xiaomi", class: "quota_exceeded")
                    - Self.responses(before, provider: "xiaomi", class: "quota_exceeded"),
                2, after)
            // One second before the reset: still held; at the reset: sent.
            clock.set(Self.reset.addingTimeInterval(-1))
            let still = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-q3"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(still.body.contains("DailyQuotaExceeded"), still.body)
            clock.set(Self.reset)
            let next = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-q4"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(next.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(mi.requestCount, sent + 1)
        }
        await env.stop()
    }

    func testXiaomiWithoutChannelOrAppDefaultIsA400NamingTheField() async throws {
        let env = try await TestEnvironment.start()
        let mi = try XCTUnwrap(env.stack.mock(RunningMockXiaomi.self)).mock
        try await env.withGateway(xiaomiYAML(mi, channel: "")) { client, _ in
            let r = try await client.push(#"{"notifications":[{"platform":"xiaomi","tokens":["regid-1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(r.status, 400, r.body)
            XCTAssertEqual(jsonObject(r.body)["message"] as? String, "invalid xiaomi.channel_id", r.body)
            XCTAssertTrue((jsonObject(r.body)["detail"] as? String)?.hasPrefix("notifications[0].xiaomi.channel_id:") == true, r.body)
            let ok = try await client.push(
                #"{"notifications":[{"platform":"xiaomi","tokens":["regid-1"],"title":"Hi","message":"Hello","xiaomi":{"channel_id":"mock_private"}}]}"#
            )
            XCTAssertEqual(ok.status, 200, ok.body)
        }
        await env.stop()
    }

    // MARK: OPPO

    func testOppoDeliversNotificationsAndDataWithASignedAuthToken() async throws {
        let env = try await TestEnvironment.start()
        let oppo = try XCTUnwrap(env.stack.mock(RunningMockOppo.self)).mock
        try await env.withGateway(oppoYAML(oppo), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"oppo","tokens":["CN_n1"],"title":"Hi","message":"Hello"},"#
                    + #"{"platform":10,"tokens":["CN_d1","CN_d2"],"title":"Order","message":"Shipped","data":{"order":"7"},"#
                    + #""oppo":{"category":"ORDER","notify_level":2,"click_action_type":0}}]}"#)
            XCTAssertEqual(r.body, #"{"counts":3,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(oppo.rejections, [], "the mock verified the signature, the token and every field")
            XCTAssertEqual(oppo.authRequestCount, 1, "one auth_token for every send")
            let n = try XCTUnwrap(oppo.messages.first { $0.regid == "CN_n1" })
            XCTAssertEqual(n.notification["category"] as? String, "IM", "the app's default category")
            let d = try XCTUnwrap(oppo.messages.first { $0.regid == "CN_d1" })
            XCTAssertEqual(d.notification["category"] as? String, "ORDER")
            XCTAssertEqual((d.notification["notify_level"] as? NSNumber)?.intValue, 2)
            XCTAssertEqual(d.notification["action_parameters"] as? String, #"{"order":"7"}"#)
            // A token OPPO no longer knows: one new token, the send again.
            oppo.revokeAuthTokens()
            let again = try await client.push(#"{"notifications":[{"platform":"oppo","tokens":["CN_r1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(again.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(oppo.authRequestCount, 2)
        }
        await env.stop()
    }

    func testOppoDeadRegidReachesTheFeedbackHook() async throws {
        let env = try await TestEnvironment.start()
        let oppo = try XCTUnwrap(env.stack.mock(RunningMockOppo.self)).mock
        oppo.script(regid: "CN_dead", [.invalidRegid])
        try await env.withGateway(oppoYAML(oppo), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let r = try await client.push(#"{"notifications":[{"platform":"oppo","tokens":["CN_dead"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(r.body.contains("10000"), r.body)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "feedback posts: \(env.feedbackCount)")
            XCTAssertEqual(oppo.messages.filter { $0.regid == "CN_dead" }.count, 1)
        }
        await env.stop()
    }

    func testOppoQuotaHoldsTheAppUntilTheResetAndIsCounted() async throws {
        let env = try await TestEnvironment.start()
        let oppo = try XCTUnwrap(env.stack.mock(RunningMockOppo.self)).mock
        oppo.script(regid: "CN_q1", [.dailyLimit])
        let clock = Clock(Self.afternoon)
        try await env.withGateway(oppoYAML(oppo), environment: ["PUSHGATE_CORE_SYNC": "true"], clock: clock.seconds) { client, _ in
            let before = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let r = try await client.push(#"{"notifications":[{"platform":"oppo","tokens":["CN_q1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(r.body.contains("DailyQuotaExceeded") && r.body.contains("33"), r.body)
            let sent = oppo.sendRequestCount
            let held = try await client.push(#"{"notifications":[{"platform":"oppo","tokens":["CN_q2"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(held.body.contains("DailyQuotaExceeded"), held.body)
            XCTAssertEqual(oppo.sendRequestCount, sent, "a held send makes no request")
            let after = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertEqual(
                Self.responses(after, provider: "oppo", class: "quota_exceeded") - Self.responses(before, provider: "oppo", class: "quota_exceeded"),
                2,
                after)
            clock.set(Self.reset)
            let next = try await client.push(#"{"notifications":[{"platform":"oppo","tokens":["CN_q3"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(next.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(oppo.sendRequestCount, sent + 1)
        }
        await env.stop()
    }

    func testOppoWithoutCategoryOrAppDefaultIsA400NamingTheField() async throws {
        let env = try await TestEnvironment.start()
        let oppo = try XCTUnwrap(env.stack.mock(RunningMockOppo.self)).mock
        try await env.withGateway(oppoYAML(oppo, category: "")) { client, _ in
            let r = try await client.push(#"{"notifications":[{"platform":"oppo","tokens":["CN_1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(r.status, 400, r.body)
            XCTAssertEqual(jsonObject(r.body)["message"] as? String, "invalid oppo.category", r.body)
            XCTAssertTrue((jsonObject(r.body)["detail"] as? String)?.hasPrefix("notifications[0].oppo.category:") == true, r.body)
        }
        await env.stop()
    }

    // MARK: hostile input

    /// Every field of the `xiaomi` and `oppo` members, and the texts the vendors limit: a NUL, a
    /// megabyte string, a wrong type, an out-of-range number, each a 400 naming the field.
    func testHostileVendorFieldsAre400sNamingTheField() async throws {
        let env = try await TestEnvironment.start()
        let mi = try XCTUnwrap(env.stack.mock(RunningMockXiaomi.self)).mock
        let oppo = try XCTUnwrap(env.stack.mock(RunningMockOppo.self)).mock
        let mega = String(repeating: "a", count: 1 << 20)
        var cases: [(platform: String, member: String, field: String)] = []
        let xiaomiStrings = ["channel_id", "intent_uri", "web_uri", "sound_uri", "callback", "callback_param"]
        let xiaomiInts = ["notify_type", "notify_id", "notify_effect"]
        let xiaomiBools = ["notify_foreground", "only_send_once"]
        for f in xiaomiStrings {
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":"a\u0000b"}"#, "xiaomi.\(f)"))
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":"\#(mega)"}"#, "xiaomi.\(f)"))
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":42}"#, "xiaomi.\(f)"))
        }
        for f in xiaomiInts {
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":1e19}"#, "xiaomi.\(f)"))
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":-99999999999999999999}"#, "xiaomi.\(f)"))
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":"1"}"#, "xiaomi.\(f)"))
            cases.append(("xiaomi", #""xiaomi":{"\#(f)":1.5}"#, "xiaomi.\(f)"))
        }
        for f in xiaomiBools { cases.append(("xiaomi", #""xiaomi":{"\#(f)":"yes"}"#, "xiaomi.\(f)")) }
        cases.append(("xiaomi", #""xiaomi":"chat""#, "xiaomi"))
        cases.append(("xiaomi", #""xiaomi":{"channel":"x"}"#, "xiaomi.channel"))
        let oppoStrings = ["category", "channel_id", "click_action_activity", "click_action_url"]
        let oppoInts = ["notify_level", "click_action_type", "style"]
        for f in oppoStrings {
            cases.append(("oppo", #""oppo":{"\#(f)":"a\u0000b"}"#, "oppo.\(f)"))
            cases.append(("oppo", #""oppo":{"\#(f)":"\#(mega)"}"#, "oppo.\(f)"))
            cases.append(("oppo", #""oppo":{"\#(f)":[1]}"#, "oppo.\(f)"))
        }
        for f in oppoInts {
            cases.append(("oppo", #""oppo":{"category":"IM","\#(f)":1e19}"#, "oppo.\(f)"))
            cases.append(("oppo", #""oppo":{"category":"IM","\#(f)":-1}"#, "oppo.\(f)"))
            cases.append(("oppo", #""oppo":{"category":"IM","\#(f)":"2"}"#, "oppo.\(f)"))
        }
        cases.append(("oppo", #""oppo":{"category":"SPAM"}"#, "oppo.category"))
        cases.append(("oppo", #""oppo":{"notify_level":2}"#, "oppo.category"))
        cases.append(("oppo", #""oppo":{"categry":"IM"}"#, "oppo.categry"))
        // The texts as the vendors limit them.
        for p in ["xiaomi", "oppo"] {
            cases.append((p, #""title":"\#(String(repeating: "标", count: 51))""#, "title"))
            cases.append((p, #""message":"\#(mega)""#, "message"))
            cases.append((p, #""data":{"k":"\#(String(repeating: "x", count: 5000))"}"#, "data"))
        }
        let all = cases
        try await env.withGateway(xiaomiYAML(mi) + "\n" + oppoYAML(oppo)) { client, _ in
            for c in all {
                var fields = [#""platform":"\#(c.platform)""#, #""tokens":["CN_hostile"]"#]
                if !c.member.hasPrefix(#""title""#) { fields.append(#""title":"Hi""#) }
                if !c.member.hasPrefix(#""message""#) { fields.append(#""message":"Hello""#) }
                fields.append(c.member)
                try await client.pushExpectingRefusal(
                    #"{"notifications":[{"# + fields.joined(separator: ",") + "}]}", naming: c.field, shown: String(c.member.prefix(80)))
            }
        }
        XCTAssertEqual(mi.requestCount, 0, "nothing refused reached Xiaomi")
        XCTAssertEqual(oppo.sendRequestCount, 0, "nothing refused reached OPPO")
        await env.stop()
    }

    // MARK: vivo

    func vivoYAML(_ m: MockVivo, category: String = "IM") -> String {
        """
        vivo:
          enabled: true
          app_id: "\(m.options.appID)"
          app_key: "\(m.options.appKey)"
          app_secret: "\(m.options.appSecret)"
          endpoint: "\(m.baseURL)"
          category: "\(category)"
          max_retry: 0
        """
    }

    func testVivoDeliversDeadTokenToFeedbackHoldsOnQuotaAndCountsIt() async throws {
        let env = try await TestEnvironment.start()
        let vivo = try XCTUnwrap(env.stack.mock(RunningMockVivo.self)).mock
        vivo.script(regid: "vdead", [.invalidUser])
        vivo.script(regid: "vq1", [.dailyLimit])
        let clock = Clock(Self.afternoon)
        try await env.withGateway(vivoYAML(vivo), environment: ["PUSHGATE_CORE_SYNC": "true"], clock: clock.seconds) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"vivo","tokens":["vn1"],"title":"Hi","message":"Hello"},"#
                    + #"{"platform":11,"tokens":["vd1"],"title":"Promo","message":"Sale","data":{"id":7},"vivo":{"category":"MARKETING","classification":0,"skip_type":2,"skip_content":"https://example.com/p"}}]}"#
            )
            XCTAssertEqual(r.body, #"{"counts":2,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(vivo.rejections, [], "the mock verified the MD5 signature, the token and every field")
            XCTAssertEqual(vivo.authRequestCount, 1)
            let n = try XCTUnwrap(vivo.messages.first { $0.regid == "vn1" })
            XCTAssertEqual(n.message["category"] as? String, "IM")
            XCTAssertEqual((n.message["classification"] as? NSNumber)?.intValue, 1)
            let d = try XCTUnwrap(vivo.messages.first { $0.regid == "vd1" })
            XCTAssertEqual(d.message["clientCustomMap"] as? [String: String], ["id": "7"])
            XCTAssertEqual((d.message["classification"] as? NSNumber)?.intValue, 0)
            // A dead regId reaches the feedback hook.
            let dead = try await client.push(#"{"notifications":[{"platform":"vivo","tokens":["vdead"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(dead.body.contains("10302"), dead.body)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "feedback posts: \(env.feedbackCount)")
            // The daily limit: held until midnight in China, counted as quota_exceeded.
            let before = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let q = try await client.push(#"{"notifications":[{"platform":"vivo","tokens":["vq1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(q.body.contains("DailyQuotaExceeded") && q.body.contains("10070"), q.body)
            let sent = vivo.sendRequestCount
            let held = try await client.push(#"{"notifications":[{"platform":"vivo","tokens":["vq2"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(held.body.contains("DailyQuotaExceeded"), held.body)
            XCTAssertEqual(vivo.sendRequestCount, sent)
            let after = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertEqual(
                Self.responses(after, provider: "vivo", class: "quota_exceeded") - Self.responses(before, provider: "vivo", class: "quota_exceeded"),
                2, after)
            clock.set(Self.reset)
            let next = try await client.push(#"{"notifications":[{"platform":"vivo","tokens":["vq3"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(next.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
        }
        await env.stop()
    }

    // MARK: Batches

    /// One request, 50 OPPO and 50 vivo tokens: the first send of each goes alone while the others
    /// wait (the mocks hold their answers until every other send is waiting), then the 49 go in one
    /// `unicast_batch` / one `saveListPayload` + `pushToList`; the one dead token of each batch,
    /// and only it, reaches the feedback hook.
    func testManyTokensOfOneNotificationShareBatchRequestsAndOnlyTheDeadTokenIsFedBack() async throws {
        let oppoHold = MockResponseHold()
        let vivoHold = MockResponseHold()
        let env = try await TestEnvironment.start(holds: ["oppo": oppoHold, "vivo": vivoHold])
        let oppo = try XCTUnwrap(env.stack.mock(RunningMockOppo.self)).mock
        let vivo = try XCTUnwrap(env.stack.mock(RunningMockVivo.self)).mock
        let oppoTokens = (0..<50).map { "CN_t\($0)" }
        let vivoTokens = (0..<50).map { "vt\($0)" }
        oppo.script(regid: "CN_t17", [.invalidRegid])
        vivo.script(regid: "vt17", [.invalidUser])
        func list(_ tokens: [String]) -> String { tokens.map { "\"\($0)\"" }.joined(separator: ",") }
        let request =
            #"{"notifications":[{"platform":"oppo","tokens":["# + list(oppoTokens) + #"],"title":"Hi","message":"Hello"},"#
            + #"{"platform":"vivo","tokens":["# + list(vivoTokens) + #"],"title":"Hi","message":"Hello"}]}"#
        // Tokens unmasked in the feedback posts: which token was fed back is the point.
        let yaml =
            oppoYAML(oppo) + "\n  max_concurrent_pushes: 64\n" + vivoYAML(vivo) + "\n  max_concurrent_pushes: 64\nlog:\n  hide_token: false\n"
        try await env.withGateway(yaml) { client, gateway in
            let r = try await client.push(request)
            XCTAssertEqual(r.status, 200, r.body)
            let op = try Self.provider(gateway, .oppo, type: OppoProvider.self)
            let vp = try Self.provider(gateway, .vivo, type: VivoProvider.self)
            try await waitUntil("49 OPPO sends waiting") { await op.batches.waiting == 49 }
            try await waitUntil("49 vivo sends waiting") { await vp.batches.waiting == 49 }
            oppoHold.release()
            vivoHold.release()
            try await waitUntil("every token answered") { oppo.messages.count == 50 && vivo.messages.count == 50 }
            XCTAssertEqual(Set(oppo.messages.map(\.regid)), Set(oppoTokens))
            XCTAssertEqual(Set(vivo.messages.map(\.regid)), Set(vivoTokens))
            XCTAssertEqual(oppo.rejections, [])
            XCTAssertEqual(vivo.rejections, [])
            XCTAssertEqual(oppo.sendRequestCount, 2, "one unicast, one unicast_batch for 50 tokens")
            XCTAssertEqual(oppo.batches.map(\.count), [49])
            XCTAssertEqual(vivo.sendRequestCount, 3, "one send, one saveListPayload and one pushToList for 50 tokens")
            XCTAssertEqual(vivo.batches.map(\.count), [49])
            // The dispatcher's concurrency bounds the waiting sends: none ever went alone for want of room.
            let (oppoMost, oppoOver, vivoMost, vivoOver) = (
                await op.batches.mostWaiting, await op.batches.overflowed, await vp.batches.mostWaiting, await vp.batches.overflowed
            )
            XCTAssertLessThanOrEqual(oppoMost, 64)
            XCTAssertLessThanOrEqual(vivoMost, 64)
            XCTAssertEqual(oppoOver + vivoOver, 0)
            try await waitUntil("both dead tokens fed back") { env.feedbackCount == 2 }
            let posts = env.feedbackPosts.withLockedValue { $0.map { String(decoding: $0.body, as: UTF8.self) } }
            XCTAssertEqual(posts.filter { $0.contains("CN_t17") }.count, 1, "\(posts)")
            XCTAssertEqual(posts.filter { $0.contains("\"vt17\"") }.count, 1, "\(posts)")
            for t in oppoTokens + vivoTokens where t != "CN_t17" && t != "vt17" {
                XCTAssertFalse(posts.contains { $0.contains("\"\(t)\"") }, "\(t) is not dead")
            }
            try await waitUntil("the answers counted") {
                let m = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
                return Self.responses(m, provider: "oppo", class: "delivered") == 49 && Self.responses(m, provider: "vivo", class: "delivered") == 49
                    && Self.responses(m, provider: "oppo", class: "token_dead") == 1 && Self.responses(m, provider: "vivo", class: "token_dead") == 1
            }
        }
        await env.stop()
    }

    func testVivoWithoutCategoryOrAppDefaultAndHostileFieldsAre400s() async throws {
        let env = try await TestEnvironment.start()
        let vivo = try XCTUnwrap(env.stack.mock(RunningMockVivo.self)).mock
        let mega = String(repeating: "a", count: 1 << 20)
        var cases: [(member: String, field: String)] = [
            ("", "vivo.category"),
            (#","vivo":{"category":"a\u0000b"}"#, "vivo.category"),
            (#","vivo":{"category":"\#(mega)"}"#, "vivo.category"),
            (#","vivo":{"category":1}"#, "vivo.category"),
            (#","vivo":{"category":"SPAM"}"#, "vivo.category"),
            (#","vivo":{"category":"IM","classification":0}"#, "vivo.classification"),
            (#","vivo":{"category":"IM","skip_content":"\#(mega)"}"#, "vivo.skip_content"),
            (#","vivo":{"category":"IM","skip_content":"a\u0000b"}"#, "vivo.skip_content"),
            (#","vivo":{"category":"IM","test_mode":"yes"}"#, "vivo.test_mode"),
            (#","vivo":{"category":"IM","extra":1}"#, "vivo.extra"),
            (#","vivo":[1]"#, "vivo"),
        ]
        for f in ["classification", "notify_type", "skip_type"] {
            cases.append((#","vivo":{"category":"IM","\#(f)":1e19}"#, "vivo.\(f)"))
            cases.append((#","vivo":{"category":"IM","\#(f)":-5}"#, "vivo.\(f)"))
            cases.append((#","vivo":{"category":"IM","\#(f)":"1"}"#, "vivo.\(f)"))
        }
        let all = cases
        try await env.withGateway(vivoYAML(vivo, category: "")) { client, _ in
            for c in all {
                try await client.pushExpectingRefusal(
                    #"{"notifications":[{"platform":"vivo","tokens":["v1"],"title":"Hi","message":"Hello""# + c.member + "}]}",
                    naming: c.field, shown: String(c.member.prefix(80)))
            }
            for (member, field) in [
                (#""title":"\#(String(repeating: "标", count: 41))","message":"M""#, "title"), (#""title":"T","message":"\#(mega)""#, "message"),
                (#""title":"T","message":"M","data":{"k":"\#(String(repeating: "x", count: 1100))"}"#, "data"),
            ] {
                let r = try await client.push(#"{"notifications":[{"platform":"vivo","tokens":["v1"],"vivo":{"category":"IM"},"# + member + "}]}")
                XCTAssertEqual(r.status, 400, r.body)
                XCTAssertTrue(r.body.contains(field), r.body)
            }
        }
        XCTAssertEqual(vivo.sendRequestCount, 0)
        await env.stop()
    }
}
