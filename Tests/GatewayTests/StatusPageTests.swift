import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// The status page: `/ui` and its files are open and carry a strict CSP; their data route
/// `/api/stat/live` needs an admin key; `core.ui: false` serves neither. The live figures follow
/// the deliveries (per provider, by answer class, dead tokens, pools, oldest pending).
final class StatusPageTests: XCTestCase {
    static let admin = "admin-key-0123456789abcdef"
    static let appKey = "chat-key-0123456789abcdef"

    func testPageIsOpenWithCSPAndLiveStatsNeedAnAdminKey() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (admin, appKey) = (Self.admin, Self.appKey)
        let keys = ["PUSHGATE_CORE_API_KEYS": appKey, "PUSHGATE_CORE_ADMIN_KEYS": admin]
        try await env.withGateway(environment: keys) { client, _ in
            func call(_ uri: String, key: String? = nil) async throws -> (Int, String, HTTPFields) {
                var h = HTTPFields()
                if let key { h[.authorization] = "Bearer \(key)" }
                return try await client.execute(uri: uri, method: .get, headers: h) { r in (Int(r.status.code), String(buffer: r.body), r.headers) }
            }
            for (path, type) in [("/ui", "text/html"), ("/ui/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")] {
                let r = try await call(path)
                XCTAssertEqual(r.0, 200, path)
                XCTAssertTrue(r.2[.contentType]?.hasPrefix(type) == true, "\(path): \(r.2[.contentType] ?? "")")
                let csp = try XCTUnwrap(r.2[.contentSecurityPolicy], path)
                XCTAssertTrue(csp.contains("default-src 'self'") && csp.contains("script-src 'self'"), csp)
                XCTAssertFalse(csp.contains("unsafe-inline"), csp)
                XCTAssertEqual(r.2[.cacheControl], "no-store")
            }
            let page = try await call("/ui")
            // No inline script (the CSP would block it), and the routes the script reads.
            XCTAssertFalse(page.1.contains("<script>"), "inline script in the page")
            XCTAssertTrue(page.1.contains(#"data-stat-app="/api/stat/app""#), page.1)
            XCTAssertTrue(page.1.contains(#"data-live="/api/stat/live""#), page.1)
            // The script never writes markup from data.
            let js = try await call("/ui/app.js")
            XCTAssertFalse(js.1.contains("innerHTML") || js.1.contains("outerHTML") || js.1.contains("insertAdjacentHTML"))

            let none = try await call("/api/stat/live")
            XCTAssertEqual(none.0, 401)
            let app = try await call("/api/stat/live", key: appKey)
            XCTAssertEqual(app.0, 403)
            let live = try await call("/api/stat/live", key: admin)
            XCTAssertEqual(live.0, 200, live.1)
            let json = jsonObject(live.1)
            XCTAssertEqual(json["bucket_seconds"] as? Int, 5)
            XCTAssertNotNil(json["queue"] as? [String: Any])
        }
    }

    func testUIOffServesNeither() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway(environment: ["PUSHGATE_CORE_UI": "false"]) { client, _ in
            for path in ["/ui", "/ui/app.js", "/api/stat/live"] {
                let status = try await client.execute(uri: path, method: .get) { Int($0.status.code) }
                XCTAssertEqual(status, 404, path)
            }
        }
    }

    func testLiveStatsFollowDeliveries() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let ok = String(repeating: "a1", count: 32)
        let dead = String(repeating: "d4", count: 32)
        env.apns.script(dead, [.unregistered])
        try await env.withGateway(environment: ["GORUSH_CORE_SYNC": "true"]) { client, gateway in
            let r = try await client.push(
                #"{"notifications":[{"notif_id":"<img src=x>","tokens":["\#(ok)","\#(dead)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200, r.body)
            let body = try await client.execute(uri: "/api/stat/live", method: .get) { String(buffer: $0.body) }
            let json = jsonObject(body)
            XCTAssertEqual(json["providers"] as? [String], ["ios", "android", "webpush", "unifiedpush"], body)
            let ios = try XCTUnwrap((json["series"] as? [String: Any])?["ios"] as? [String: [Int]], body)
            XCTAssertEqual(ios["delivered"]?.count, 120)
            XCTAssertEqual(ios["delivered"]?.reduce(0, +), 1)
            XCTAssertEqual(ios["failed"]?.reduce(0, +), 1)
            let answers = try XCTUnwrap((json["answers"] as? [String: Any])?["ios"] as? [String: [String: Int]], body)
            XCTAssertEqual(answers["window"]?["delivered"], 1)
            XCTAssertEqual(answers["window"]?["token_dead"], 1)
            XCTAssertEqual(answers["total"]?["token_dead"], 1)
            let deadTokens = try XCTUnwrap(json["dead_tokens"] as? [String: Any], body)
            XCTAssertEqual(deadTokens["total"] as? Int, 1)
            let recent = try XCTUnwrap(deadTokens["recent"] as? [[String: Any]])
            XCTAssertEqual(recent.first?["token"] as? String, TokenMask.mask(dead), "masked as in the failure logs")
            XCTAssertEqual(recent.first?["reason"] as? String, "Unregistered")
            let queue = try XCTUnwrap(json["queue"] as? [String: Any], body)
            XCTAssertEqual(queue["tracked"] as? Int, 0, "both deliveries ended")
            XCTAssertTrue(queue["oldest_pending_seconds"] is NSNull, body)
            // The APNs pool to the mock is listed with its connection.
            let pools = try XCTUnwrap(json["pools"] as? [[String: Any]], body)
            XCTAssertTrue(pools.contains { ($0["origin"] as? String) == env.apns.baseURL && ($0["active_connections"] as? Int ?? 0) >= 1 }, body)
            // Production and sandbox both reach the mock: each pool says which it is, and whose.
            let mine = pools.filter { ($0["origin"] as? String) == env.apns.baseURL }
            XCTAssertEqual(Set(mine.compactMap { $0["environment"] as? String }), ["production", "sandbox"], body)
            XCTAssertEqual(Set(mine.compactMap { $0["label"] as? String }).count, mine.count, "labels distinct: \(body)")
            for p in mine {
                XCTAssertEqual(p["provider"] as? String, "apns")
                XCTAssertEqual(p["app"] as? String, "default")
                let label = p["label"] as? String ?? ""
                XCTAssertTrue(label.hasPrefix("apns \(p["environment"] as? String ?? "?"), app default"), label)
                if let key = p["key_id"] as? String, !key.isEmpty { XCTAssertTrue(label.hasSuffix("key \(key)"), label) }
            }

            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            for name in ["pushgate_queue_oldest_pending_seconds 0", "pushgate_dead_tokens_total 1", "pushgate_http2_connections_active"] {
                XCTAssertTrue(metrics.contains(name), name)
            }
            XCTAssertEqual(gateway.dispatcher.activity.snapshot.deadTokensTotal, 1)
        }
    }

    /// A delivery waiting to retry keeps the oldest pending age growing until it ends.
    func testOldestPendingAge() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let slow = String(repeating: "c3", count: 32)
        env.apns.script(slow, [.serviceUnavailable(retryAfter: 2), .ok])
        try await env.withGateway { client, gateway in
            let r = try await client.push(#"{"notifications":[{"tokens":["\#(slow)"],"platform":1,"message":"hi"}]}"#)
            XCTAssertEqual(r.status, 200)
            try await waitUntil("an attempt answered 503") { env.apns.requests(for: slow).count == 1 }
            try await Task.sleep(for: .milliseconds(1100))
            let since = try XCTUnwrap(gateway.dispatcher.activity.snapshot.oldestPendingSince)
            XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(since), 1)
            try await waitUntil("delivered on the retry") { gateway.dispatcher.stats.snapshot.counts(.ios).pushSuccess == 1 }
            XCTAssertNil(gateway.dispatcher.activity.snapshot.oldestPendingSince)
        }
    }
}
