import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// `/readyz` (readiness) next to `/healthz` (liveness): open like it, 200 while the gateway takes
/// work, 503 with `Retry-After` naming why once it does not (here: a graceful shutdown started).
final class ReadinessTests: XCTestCase {
    func testReadyzIsOpenAndFollowsDraining() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let keys = ["PUSHGATE_CORE_API_KEYS": "chat-key-0123456789abcdef", "PUSHGATE_CORE_ADMIN_KEYS": "admin-key-0123456789abcdef"]
        try await env.withGateway(environment: keys) { client, gateway in
            func call(_ uri: String, _ method: HTTPRequest.Method = .get) async throws -> (Int, String, HTTPFields) {
                try await client.execute(uri: uri, method: method) { r in (Int(r.status.code), String(buffer: r.body), r.headers) }
            }
            let ready = try await call("/readyz")
            XCTAssertEqual(ready.0, 200, "open without a key, ready: \(ready.1)")
            XCTAssertEqual(ready.1, #"{"status":"ready"}"#)
            let head = try await call("/readyz", .head)
            XCTAssertEqual(head.0, 200)
            XCTAssertNil(gateway.notReadyReason)

            gateway.draining.withLockedValue { $0 = true }
            let draining = try await call("/readyz")
            XCTAssertEqual(draining.0, 503)
            XCTAssertEqual(draining.2[.retryAfter], "1")
            XCTAssertTrue(draining.1.contains(#""code":503"#), draining.1)
            XCTAssertTrue(draining.1.contains("shutting down"), draining.1)
            let drainingHead = try await call("/readyz", .head)
            XCTAssertEqual(drainingHead.0, 503)
            // Liveness does not change with readiness.
            let health = try await call("/healthz")
            XCTAssertEqual(health.0, 200)
        }
    }

    /// `queue.store_timeout` is a duration between 100ms and 10m; any other value is an error naming the key.
    func testStoreTimeoutIsRangeChecked() throws {
        for bad in ["0s", "50ms", "11m", "soon", "-1s"] {
            let raw = try RawConfig(yaml: "queue:\n  engine: memory\n  store_timeout: \"\(bad)\"\n", environment: [:])
            XCTAssertThrowsError(try QueueWiring.make(raw: raw, settings: try GatewaySettings(raw), logger: Logger(label: "test")), bad) { e in
                XCTAssertTrue("\(e)".contains("queue.store_timeout"), "\(e)")
            }
        }
        let raw = try RawConfig(yaml: "queue:\n  engine: memory\n  store_timeout: \"2s\"\n", environment: [:])
        XCTAssertNoThrow(try QueueWiring.make(raw: raw, settings: try GatewaySettings(raw), logger: Logger(label: "test")))
    }
}
