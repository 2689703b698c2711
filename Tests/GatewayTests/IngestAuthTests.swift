import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// Keys on every route once any key is configured.
final class IngestAuthTests: XCTestCase {
    static let appKey = "chat-key-0123456789abcdef"
    static let adminKey = "admin-key-0123456789abcdef"
    /// The same app key written as its SHA-256.
    static let hashedKey = "second-app-key-0123456789"

    func testKeysOnEveryRouteAdminRoutesAndOpenHealth() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let hashed = SHA256.hash(data: Array(Self.hashedKey.utf8)).map { String(format: "%02x", $0) }.joined()
        let environment = [
            "PUSHGATE_CORE_API_KEYS": "\(Self.appKey),sha256:\(hashed)", "PUSHGATE_CORE_ADMIN_KEYS": Self.adminKey,
        ]
        let token = String(repeating: "ab", count: 32)
        let body = ByteBuffer(string: #"{"notifications":[{"tokens":["\#(token)"],"platform":1,"message":"hi"}]}"#)
        try await env.withGateway(environment: environment) { client, _ in
            func call(_ uri: String, _ method: HTTPRequest.Method = .get, _ headers: HTTPFields = [:], body: ByteBuffer? = nil) async throws
                -> (Int, String, HTTPFields)
            {
                try await client.execute(uri: uri, method: method, headers: headers, body: body) { r in
                    (Int(r.status.code), String(buffer: r.body), r.headers)
                }
            }
            let bearer: (String) -> HTTPFields = { [.authorization: "Bearer \($0)", .contentType: "application/json"] }
            // No key, a wrong key: 401 JSON with WWW-Authenticate, nothing sent.
            let none = try await call("/api/push", .post, [.contentType: "application/json"], body: body)
            XCTAssertEqual(none.0, 401)
            XCTAssertTrue(none.1.contains(#""code":401"#), none.1)
            XCTAssertEqual(none.2[.wwwAuthenticate], "Bearer realm=\"pushgate\"")
            let wrong = try await call("/api/push", .post, bearer("not-the-key-0123456789"), body: body)
            XCTAssertEqual(wrong.0, 401)
            XCTAssertFalse(wrong.1.contains("not-the-key"), "the presented key is never echoed")
            XCTAssertEqual(env.apns.requestCount, 0)
            // Open routes.
            let status1 = try await call("/healthz").0
            XCTAssertEqual(status1, 200)
            let status2 = try await call("/healthz", .head).0
            XCTAssertEqual(status2, 200)
            let status3 = try await call("/version").0
            XCTAssertEqual(status3, 200)
            let status4 = try await call("/metrics").0
            XCTAssertEqual(status4, 200, "open for scrapers unless core.metrics_admin_only")
            // The app key (Bearer), the sha256: key (X-API-Key): pushes go out.
            let status5 = try await call("/api/push", .post, bearer(Self.appKey), body: body).0
            XCTAssertEqual(status5, 200)
            var apiKey: HTTPFields = [.contentType: "application/json"]
            apiKey[HTTPField.Name("X-API-Key")!] = Self.hashedKey
            let viaHeader = try await call("/api/push", .post, apiKey, body: body)
            XCTAssertEqual(viaHeader.0, 200, viaHeader.1)
            let delivered = await eventually { env.apns.requestCount == 2 }
            XCTAssertTrue(delivered)
            // The status of a notification: any valid key; unknown routes: still 401 without one.
            let id = try XCTUnwrap(viaHeader.2[HTTPField.Name("X-Pushgate-Notif-Ids")!]).split(separator: ",").first.map(String.init) ?? ""
            let status6 = try await call("/api/push/\(id)", .get, bearer(Self.appKey)).0
            XCTAssertEqual(status6, 200)
            let status7 = try await call("/api/push/\(id)").0
            XCTAssertEqual(status7, 401)
            let status8 = try await call("/no/such/route").0
            XCTAssertEqual(status8, 401)
            // Admin routes: 403 for an app key, 200 for the admin key; no key material in /api/config.
            for route in ["/api/config", "/api/stat/app", "/api/stat/go", "/sys/stats"] {
                let status9 = try await call(route, .get, bearer(Self.appKey)).0
                XCTAssertEqual(status9, 403, route)
                let status10 = try await call(route, .get, bearer(Self.adminKey)).0
                XCTAssertEqual(status10, 200, route)
            }
            let config = try await call("/api/config", .get, bearer(Self.adminKey)).1
            for secret in [Self.appKey, Self.adminKey, hashed] { XCTAssertFalse(config.contains(secret), "\(config)") }
        }
        try await env.withGateway(environment: environment.merging(["PUSHGATE_CORE_METRICS_ADMIN_ONLY": "true"]) { $1 }) { client, _ in
            let open = try await client.execute(uri: "/metrics", method: .get) { Int($0.status.code) }
            XCTAssertEqual(open, 401)
            let admin = try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(Self.adminKey)"]) {
                Int($0.status.code)
            }
            XCTAssertEqual(admin, 200)
        }
    }

    /// Every spelling of a path the router might fold onto an admin route (`//`, a trailing `/`,
    /// `.` and `..` segments, `%2F`, another case, a query string): an app's key never gets past
    /// 401/403/404 and never runs the handler (a reload answered 403, not 200 or 409); the admin key
    /// gets the canonical route.
    func testAdminRoutesRefuseAppKeysUnderEverySpelling() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let environment = [
            "PUSHGATE_CORE_API_KEYS": Self.appKey, "PUSHGATE_CORE_ADMIN_KEYS": Self.adminKey, "PUSHGATE_CORE_METRICS_ADMIN_ONLY": "true",
        ]
        try await env.withGateway(environment: environment) { client, _ in
            func status(_ uri: String, _ method: HTTPRequest.Method, key: String?) async throws -> (Int, String) {
                var headers: HTTPFields = [:]
                if let key { headers[.authorization] = "Bearer \(key)" }
                return try await client.execute(uri: uri, method: method, headers: headers) { (Int($0.status.code), String(buffer: $0.body)) }
            }
            func spellings(_ route: String) -> [String] {
                let segments = route.split(separator: "/").map(String.init)
                let tail = segments.dropFirst().joined(separator: "/")
                var out = [
                    route, route + "/", route + "//", "/" + route, "//" + route.dropFirst(), route + "?x=1", route + "/?x=1", route + "/.",
                    "/." + route, route.uppercased(), "/" + segments[0] + "/../" + route.dropFirst(),
                    "/" + segments[0].replacingOccurrences(of: "a", with: "%61") + (tail.isEmpty ? "" : "/" + tail),
                ]
                if !tail.isEmpty {
                    out += [
                        "/" + segments[0] + "//" + tail, "/" + segments[0] + "/./" + tail, "/" + segments[0] + "%2F" + tail,
                        "/" + segments[0] + "%2f" + tail,
                    ]
                }
                return out
            }
            let routes: [(String, HTTPRequest.Method)] = [
                ("/api/config", .get), ("/api/stat/app", .get), ("/api/stat/go", .get), ("/sys/stats", .get), ("/metrics", .get),
                ("/api/reload", .post),
            ]
            for (route, method) in routes {
                for uri in spellings(route) {
                    let app = try await status(uri, method, key: Self.appKey)
                    XCTAssertTrue([401, 403, 404].contains(app.0), "\(method) \(uri) with an app key: \(app.0) \(app.1)")
                    XCTAssertTrue(app.1.contains(#""code":\#(app.0)"#), "\(method) \(uri): a JSON error, \(app.1)")
                    let none = try await status(uri, method, key: nil)
                    XCTAssertEqual(none.0, 401, "\(method) \(uri) without a key")
                }
                if method == .get {
                    let admin = try await status(route, method, key: Self.adminKey)
                    XCTAssertEqual(admin.0, 200, "\(route) with the admin key")
                    let folded = try await status(route + "/", method, key: Self.adminKey)
                    XCTAssertEqual(folded.0, 200, "\(route)/ is the same route for the admin key")
                } else {
                    // No configuration file behind this gateway: the reload itself is refused, after the key was admitted.
                    let admin = try await status(route, method, key: Self.adminKey)
                    XCTAssertFalse([401, 403, 404].contains(admin.0), "\(route) with the admin key: \(admin.0) \(admin.1)")
                }
            }
            // The app key still reaches its own routes under the router's folded spellings.
            let health = try await status("/healthz/", .get, key: nil)
            XCTAssertEqual(health.0, 200)
            let push = try await status("//api/push/no-such-id", .get, key: Self.appKey)
            XCTAssertEqual(push.0, 404)
        }
    }

    func testBadKeysAreOneLineErrorsWithoutTheKey() throws {
        XCTAssertThrowsError(try GatewaySettings(try RawConfig(yaml: "core:\n  api_keys: [\"sha256:abc\"]\n", environment: [:]))) {
            XCTAssertTrue("\($0)".hasPrefix("config error: core.api_keys: a sha256: entry must be 64 hex digits"), "\($0)")
        }
        XCTAssertThrowsError(try GatewaySettings(try RawConfig(yaml: "core:\n  admin_keys: [\"short\"]\n", environment: [:]))) {
            XCTAssertTrue("\($0)".hasPrefix("config error: core.admin_keys: a key must be at least 16 characters"), "\($0)")
            XCTAssertFalse("\($0)".contains("short\""))
        }
        let auth = try IngestAuth(apiKeys: [Self.appKey], adminKeys: [])
        XCTAssertEqual(auth.identify([.authorization: "Bearer \(Self.appKey)"]), .app("default"))
        XCTAssertNil(auth.identify([.authorization: "Basic \(Self.appKey)"]))
        XCTAssertNil(auth.identify([.authorization: "Bearer \(String(repeating: "x", count: 5000))"]))
        XCTAssertEqual(IngestAuth.fingerprint(Self.appKey).count, 8)
    }
}
