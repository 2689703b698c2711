import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import MatrixIngest
import MockProviders
import NIOCore
import NIOPosix
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore

/// The Matrix listener as `pushgate serve` runs it (`MatrixServer.services`): a listener on every
/// `matrix.address`, its section in `/api/config` with secrets redacted, and a reload that applies
/// `matrix.apps` (and their options) at once and says which changes need a restart.
final class MatrixListenerTests: XCTestCase {
    /// A port free on 127.0.0.1 now (the listeners bind it on two addresses).
    static func freePort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress?.port ?? 0
        try await channel.close()
        return port
    }

    static func request(_ url: String, _ body: String? = nil) async throws -> (status: Int, body: String) {
        var r = HTTPClientRequest(url: url)
        if let body {
            r.method = .POST
            r.headers.add(name: "content-type", value: "application/json")
            r.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(r, timeout: .seconds(30))
        return (Int(response.status.code), String(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    static func call(_ client: some TestClientProtocol, _ uri: String, _ method: HTTPRequest.Method = .get) async throws -> (
        status: Int, body: String
    ) {
        try await client.execute(uri: uri, method: method) { (Int($0.status.code), String(buffer: $0.body)) }
    }

    static func notify(app: String, pushkey: String, event: String) -> String {
        #"{"notification":{"event_id":"\#(event)","room_id":"!r:x","type":"m.room.message","sender":"@a:x","content":{"msgtype":"m.text","body":"hi"},"counts":{"unread":3},"devices":[{"app_id":"\#(app)","pushkey":"\#(pushkey)"}]}}"#
    }

    func testEveryAddressConfigShownAndReloadApplied() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let port = try await Self.freePort()
        let path = env.directory + "/matrix.yml"
        @Sendable func write(_ matrix: String) throws { try (env.yaml() + "\n" + matrix).write(toFile: path, atomically: true, encoding: .utf8) }
        try write(
            """
            matrix:
              enabled: true
              address: [127.0.0.1, 127.0.0.2]
              port: \(port)
              sync_timeout: 5
              apps:
                com.example.ios: { platform: ios }
                com.example.android:
                  platform: android
                  fcm_options:
                    webpush:
                      headers: { Authorization: "Bearer s3cret-fcm-header" }
                      fcm_options: { link: "https://user:pw@example.com/open?sig=s3cret-query" }
            """)
        let environment = ["PUSHGATE_QUEUE_ENGINE": "memory"]
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let gateway = try GatewayBuilder.build(
            raw: try RawConfig.load(path: path, environment: environment), logger: logger,
            reloadSource: { try RawConfig.load(path: path, environment: environment) })
        let services = try MatrixServer.services(gateway: gateway)
        XCTAssertEqual(services.count, 2, "one listener per address")
        let app = try gateway.makeApplication(extraServices: services)
        let ios1 = Data([0xA1, 0x01]).base64EncodedString()
        let ios2 = Data([0xA1, 0x02]).base64EncodedString()
        try await app.test(.live) { client in
            // Both addresses answer, and push.
            for (i, host) in ["127.0.0.1", "127.0.0.2"].enumerated() {
                let base = "http://\(host):\(port)"
                try await waitUntil("the listener on \(host)") { ((try? await Self.request(base + "/health"))?.status ?? 0) == 200 }
                let pushkey = Data([0xB0, UInt8(i)]).base64EncodedString()
                let r = try await Self.request(
                    base + MatrixServer.notifyPath, Self.notify(app: "com.example.ios", pushkey: pushkey, event: "$on\(i)"))
                XCTAssertEqual(r.status, 200, r.body)
                XCTAssertEqual(r.body, #"{"rejected":[]}"#)
                let sent = await eventually { !env.apns.requests(for: "b00\(i)").isEmpty }
                XCTAssertTrue(sent, "pushed through \(host)")
            }

            // /api/config shows the section, effective values, secrets redacted.
            let config = try await Self.call(client, "/api/config")
            XCTAssertEqual(config.status, 200)
            for shown in [
                "matrix:", "127.0.0.2", "com.example.android", "send_badge_counts: true", "port: \(port)", "[REDACTED]", "example.com/open",
            ] {
                XCTAssertTrue(config.body.contains(shown), "\(shown) in \(config.body)")
            }
            for secret in ["s3cret-fcm-header", "s3cret-query", "user:pw"] {
                XCTAssertFalse(config.body.contains(secret), "\(secret) in /api/config")
            }

            let base = "http://127.0.0.1:\(port)"
            let unknown = try await Self.request(
                base + MatrixServer.notifyPath, Self.notify(app: "org.new.android", pushkey: "fcm-new", event: "$n0"))
            XCTAssertEqual(unknown.body, #"{"rejected":["fcm-new"]}"#, "not mapped yet")

            // Reload: a new app id and badge counts off apply at once; the port waits for a restart.
            try write(
                """
                matrix:
                  enabled: true
                  address: [127.0.0.1, 127.0.0.2]
                  port: \(port + 1)
                  apps:
                    com.example.ios: { platform: ios, send_badge_counts: false }
                    org.new.android: { platform: android }
                """)
            let reloaded = try await Self.call(client, "/api/reload", .post)
            XCTAssertEqual(reloaded.status, 200, reloaded.body)
            XCTAssertTrue(reloaded.body.contains("matrix.port"), "needs a restart: \(reloaded.body)")
            XCTAssertFalse(reloaded.body.contains("matrix.address"), reloaded.body)
            let mapped = try await Self.request(base + MatrixServer.notifyPath, Self.notify(app: "org.new.android", pushkey: "fcm-new", event: "$n1"))
            XCTAssertEqual(mapped.body, #"{"rejected":[]}"#)
            let fcmSent = await eventually { env.fcm.messages.contains { $0.target == "fcm-new" } }
            XCTAssertTrue(fcmSent, "the app mapped by the reload pushes")
            let noBadge = try await Self.request(base + MatrixServer.notifyPath, Self.notify(app: "com.example.ios", pushkey: ios1, event: "$b1"))
            XCTAssertEqual(noBadge.status, 200, noBadge.body)
            try await waitUntil("the push without badge") { !env.apns.requests(for: "a101").isEmpty }
            let request = try XCTUnwrap(env.apns.requests(for: "a101").first)
            let aps = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])?["aps"] as? [String: Any])
            XCTAssertNil(aps["badge"], "send_badge_counts: false, applied by the reload")
            XCTAssertNotNil(aps["alert"])
            let shown = try await Self.call(client, "/api/config")
            XCTAssertTrue(shown.body.contains("org.new.android"), shown.body)

            // A bad section refuses the reload, naming the key: the running one stays.
            try write("matrix:\n  enabled: true\n  apps:\n    x: { platform: ios, app: nope }\n")
            let refused = try await Self.call(client, "/api/reload", .post)
            XCTAssertEqual(refused.status, 409, refused.body)
            XCTAssertTrue(refused.body.contains("matrix.apps[x].app"), refused.body)
            let still = try await Self.request(base + MatrixServer.notifyPath, Self.notify(app: "com.example.ios", pushkey: ios2, event: "$b2"))
            XCTAssertEqual(still.body, #"{"rejected":[]}"#, "the running matrix.apps kept")
        }
    }
}
