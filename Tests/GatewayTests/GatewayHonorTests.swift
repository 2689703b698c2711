import Foundation
import HonorMock
import HummingbirdTesting
import MockProviders
import PushDispatch
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// End to end through Honor Push: HTTP client -> Pushgate -> TLS -> the strict mock Honor of the
/// shared mock stack (which checks the OAuth form, the bearer, the timestamp and every field).
final class GatewayHonorTests: XCTestCase {
    typealias Vendors = GatewayChinaVendorsTests

    func honorYAML(_ m: MockHonor, importance: String = "NORMAL") -> String {
        """
        honor:
          enabled: true
          app_id: "\(m.options.appID)"
          client_id: "\(m.options.clientID)"
          client_secret: "\(m.options.clientSecret)"
          endpoint: "\(m.baseURL)"
          token_url: "\(m.tokenURL)"
          importance: "\(importance)"
          quota_codes: "\(m.options.quotaCode)"
          max_retry: 0
        """
    }

    func testHonorDeliversNotificationsAndDataDeadTokenToFeedbackHoldsOnQuotaAndCountsIt() async throws {
        let env = try await TestEnvironment.start()
        let honor = try XCTUnwrap(env.stack.mock(RunningMockHonor.self)).mock
        honor.script(token: "hdead", [.expiredToken])
        honor.script(token: "hq1", [.dailyLimit])
        let clock = Vendors.Clock(Vendors.afternoon)
        // The gateway's clock reaches the provider's quota hold (ProviderBuildContext.now).
        try await env.withGateway(honorYAML(honor), environment: ["PUSHGATE_CORE_SYNC": "true"], clock: clock.seconds) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"honor","tokens":["hn1"],"title":"Hi","message":"Hello","data":{"id":7}},"#
                    + #"{"platform":8,"tokens":["hd1"],"data":{"sync":true}},"#
                    + #"{"platform":"honor","tokens":["hl1"],"title":"Promo","message":"Sale","honor":{"importance":"LOW","click_type":2,"url":"https://example.com/p","test_mode":true}}]}"#
            )
            XCTAssertEqual(r.body, #"{"counts":3,"logs":[],"success":"ok"}"#)
            XCTAssertEqual(honor.rejections, [], "the mock verified the OAuth form, the bearer and every field")
            XCTAssertEqual(honor.tokenRequestCount, 1, "one access token for every send")
            let n = try XCTUnwrap(honor.messages.first { $0.token == "hn1" })
            let notification = try XCTUnwrap((n.message["android"] as? [String: Any])?["notification"] as? [String: Any])
            XCTAssertEqual(notification["importance"] as? String, "NORMAL", "the app's default")
            XCTAssertEqual(notification["title"] as? String, "Hi")
            XCTAssertEqual(((notification["clickAction"] as? [String: Any])?["type"] as? NSNumber)?.intValue, 3)
            XCTAssertEqual(n.message["data"] as? String, #"{"id":7}"#)
            let d = try XCTUnwrap(honor.messages.first { $0.token == "hd1" })
            XCTAssertEqual(d.message["data"] as? String, #"{"sync":true}"#)
            XCTAssertNil(d.message["android"], "a data message has no notification")
            let l = try XCTUnwrap(honor.messages.first { $0.token == "hl1" })
            let android = try XCTUnwrap(l.message["android"] as? [String: Any])
            XCTAssertEqual((android["notification"] as? [String: Any])?["importance"] as? String, "LOW", "the request's own")
            XCTAssertEqual((android["targetUserType"] as? NSNumber)?.intValue, 1)
            // A token in expireTokens reaches the feedback hook.
            let dead = try await client.push(#"{"notifications":[{"platform":"honor","tokens":["hdead"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(dead.body.contains("expireTokens"), dead.body)
            let fed = await eventually { env.feedbackCount == 1 }
            XCTAssertTrue(fed, "feedback posts: \(env.feedbackCount)")
            let post = String(decoding: env.feedbackPosts.withLockedValue { $0.first?.body ?? [] }, as: UTF8.self)
            XCTAssertTrue(post.contains("honor") && post.contains("expireTokens"), post)
            // The daily quota: held until midnight in China, counted as quota_exceeded.
            let before = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let q = try await client.push(#"{"notifications":[{"platform":"honor","tokens":["hq1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(q.body.contains("DailyQuotaExceeded") && q.body.contains("\(honor.options.quotaCode)"), q.body)
            let sent = honor.sendRequestCount
            let held = try await client.push(#"{"notifications":[{"platform":"honor","tokens":["hq2"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(held.body.contains("DailyQuotaExceeded") && held.body.contains("2026-05-14T16:00:00Z"), held.body)
            XCTAssertEqual(honor.sendRequestCount, sent, "nothing sent while held")
            let after = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            XCTAssertEqual(
                Vendors.responses(after, provider: "honor", class: "quota_exceeded")
                    - Vendors.responses(before, provider: "honor", class: "quota_exceeded"),
                2, after)
            clock.set(Vendors.reset)
            let next = try await client.push(#"{"notifications":[{"platform":"honor","tokens":["hq3"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(next.body, #"{"counts":1,"logs":[],"success":"ok"}"#)
        }
        await env.stop()
    }

    func testHonorRefusedAccessTokenIsFetchedAgainOnce() async throws {
        let env = try await TestEnvironment.start()
        let honor = try XCTUnwrap(env.stack.mock(RunningMockHonor.self)).mock
        honor.script(token: "hr1", [.invalidAccessToken])
        honor.script(token: "hr2", [.invalidAccessToken, .invalidAccessToken])
        try await env.withGateway(honorYAML(honor), environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let once = try await client.push(#"{"notifications":[{"platform":"honor","tokens":["hr1"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertEqual(once.body, #"{"counts":1,"logs":[],"success":"ok"}"#, "refused once: a new token, delivered")
            XCTAssertEqual(honor.tokenRequestCount, 2)
            let twice = try await client.push(#"{"notifications":[{"platform":"honor","tokens":["hr2"],"title":"Hi","message":"Hello"}]}"#)
            XCTAssertTrue(twice.body.contains("401"), "refused again: failed with the answer: \(twice.body)")
            XCTAssertEqual(honor.messages.filter { $0.token == "hr2" }.count, 2, "one retry with fresh credentials, no more")
        }
        await env.stop()
    }

    func testHonorWithoutImportanceOrAppDefaultAndHostileFieldsAre400s() async throws {
        let env = try await TestEnvironment.start()
        let honor = try XCTUnwrap(env.stack.mock(RunningMockHonor.self)).mock
        let mega = String(repeating: "a", count: 1 << 20)
        var cases: [(member: String, field: String)] = [
            ("", "honor.importance"),
            (#","honor":{"importance":"a\u0000b"}"#, "honor.importance"),
            (#","honor":{"importance":"\#(mega)"}"#, "honor.importance"),
            (#","honor":{"importance":1}"#, "honor.importance"),
            (#","honor":{"importance":"HIGH"}"#, "honor.importance"),
            (#","honor":{"importance":"LOW","extra":1}"#, "honor.extra"),
            (#","honor":[1]"#, "honor"),
            (#","honor":"LOW""#, "honor"),
            (#","honor":{"importance":"LOW","test_mode":"yes"}"#, "honor.test_mode"),
            (#","honor":{"importance":"LOW","click_type":2}"#, "honor.url"),
            (#","honor":{"importance":"LOW","click_type":2,"url":"javascript:x"}"#, "honor.url"),
        ]
        for f in ["intent", "url", "action", "tag", "group", "bi_tag"] {
            cases.append((#","honor":{"importance":"LOW","\#(f)":"\#(mega)"}"#, "honor.\(f)"))
            cases.append((#","honor":{"importance":"LOW","\#(f)":"a\u0000b"}"#, "honor.\(f)"))
            cases.append((#","honor":{"importance":"LOW","\#(f)":7}"#, "honor.\(f)"))
        }
        for f in ["click_type", "notify_id"] {
            cases.append((#","honor":{"importance":"LOW","\#(f)":1e19}"#, "honor.\(f)"))
            cases.append((#","honor":{"importance":"LOW","\#(f)":-5}"#, "honor.\(f)"))
            cases.append((#","honor":{"importance":"LOW","\#(f)":"1"}"#, "honor.\(f)"))
        }
        let all = cases
        try await env.withGateway(honorYAML(honor, importance: "")) { client, _ in
            for c in all {
                try await client.pushExpectingRefusal(
                    #"{"notifications":[{"platform":"honor","tokens":["h1"],"title":"Hi","message":"Hello""# + c.member + "}]}",
                    naming: c.field, shown: String(c.member.prefix(80)))
            }
            for (member, field) in [
                (#""title":"T","message":"\#(mega)""#, "message"), (#""title":"\#(mega)","message":"M""#, "title"),
                (#""title":" ","message":"M""#, "title"), (#""data":{"k":"\#(String(repeating: "x", count: 4100))"}"#, "data"),
                (#""title":"T","message":"M","image":"http://example.com/i.png""#, "image"),
            ] {
                let r = try await client.push(
                    #"{"notifications":[{"platform":"honor","tokens":["h1"],"honor":{"importance":"LOW"},"# + member + "}]}")
                XCTAssertEqual(r.status, 400, r.body.prefix(300).description)
                XCTAssertTrue(r.body.contains(field), r.body.prefix(300).description)
            }
        }
        XCTAssertEqual(honor.sendRequestCount, 0)
        await env.stop()
    }
}
