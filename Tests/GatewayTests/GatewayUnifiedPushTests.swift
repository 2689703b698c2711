import Foundation
import HummingbirdTesting
import MockProviders
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// UnifiedPush AND_3 at the gateway: a message over 4096 bytes encrypted is refused at ingest
/// (400 naming the field and the limit) and nothing reaches the push server; one that fits is sent
/// with `Urgency`.
final class GatewayUnifiedPushTests: XCTestCase {
    func testAnOversizedEncryptedMessageIsRefusedAtIngest() async throws {
        let env = try await TestEnvironment.start()
        let (sub, _) = env.webpush.makeSubscription(id: "up-1")
        let subJSON = #"{"endpoint":"\#(sub.endpoint)","keys":{"p256dh":"\#(sub.keys!.p256dh)","auth":"\#(sub.keys!.auth)"}}"#
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC": "true"]) { client, _ in
            let over = String(repeating: "a", count: 3994)
            let r = try await client.push(#"{"notifications":[{"platform":5,"subscriptions":[\#(subJSON)],"payload":"\#(over)"}]}"#)
            XCTAssertEqual(r.status, 400, r.body)
            XCTAssertTrue(r.body.contains("payload"), r.body)
            XCTAssertTrue(r.body.contains("4096-byte limit"), r.body)
            XCTAssertEqual(env.webpush.requestCount, 0)

            let fits = String(repeating: "a", count: 3993)
            let ok = try await client.push(#"{"notifications":[{"platform":5,"subscriptions":[\#(subJSON)],"payload":"\#(fits)"}]}"#)
            XCTAssertEqual(ok.status, 200, ok.body)
            XCTAssertEqual((jsonObject(ok.body)["logs"] as? [Any])?.count, 0, ok.body)
            let push = try XCTUnwrap(env.webpush.pushes(id: "up-1").first)
            XCTAssertEqual(push.body.count, 4096)
            XCTAssertEqual(push.urgency, "normal")
        }
        await env.stop()
    }
}
