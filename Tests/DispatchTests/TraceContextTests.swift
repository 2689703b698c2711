import Foundation
import PushgateCore
import XCTest

@testable import PushDispatch

/// The W3C Trace Context a client sends is checked before any instrument sees it; without a
/// bootstrapped tracer nothing is injected (tracing off stores no context).
final class TraceContextTests: XCTestCase {
    let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    func testTraceParentSyntax() {
        XCTAssertTrue(TraceContext.isValid(traceParent: valid))
        XCTAssertTrue(TraceContext.isValid(traceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"))
        for bad in [
            "", "garbage", valid.uppercased(), valid + "-extra", String(valid.dropLast()),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero span id
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff is invalid
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\u{E9}",
        ] {
            XCTAssertFalse(TraceContext.isValid(traceParent: bad), bad)
        }
    }

    func testTraceStateSyntax() {
        XCTAssertTrue(TraceContext.isValid(traceState: "vendor=abc"))
        XCTAssertTrue(TraceContext.isValid(traceState: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE, tenant@sys=x"))
        for bad in [
            "", "novalue", "=v", "k=", "K=upper", "k=a=b", String(repeating: "a=b,", count: 33) + "a=b",
            "k=" + String(repeating: "v", count: 600), "k=v\u{0}", "k=\u{E9}",
        ] {
            XCTAssertFalse(TraceContext.isValid(traceState: bad), bad)
        }
    }

    func testWithoutATracerNothingIsInjected() {
        // No tracer bootstrapped in this process: a span's context has no traceparent to keep.
        XCTAssertNil(TraceContext.traceParent(of: TraceContext.context(traceParent: valid)))
        XCTAssertNil(TraceContext.traceParent(of: .topLevel))
    }

    /// The context given to `submit` goes with every accepted notification into the queue (the
    /// memory engine keeps the object; the SQL stores' column is checked in QueueStoreTests).
    func testSubmitKeepsTheTraceParentWithTheQueuedJobs() async throws {
        let queue = MemoryQueue(capacity: 10)
        let provider = TraceTestProvider()
        let dispatcher = Dispatcher(providers: [ProviderSlot(provider: provider, concurrency: 1)], queue: queue, stats: Stats())
        var n = PushNotification(platform: .ios, tokens: ["t1", "t2"])
        n.message = "hi"
        _ = try await dispatcher.submit(PushRequest(notifications: [n]), sync: false, traceParent: valid)
        var n2 = PushNotification(platform: .ios, tokens: ["t3"])
        n2.message = "untraced"
        _ = try await dispatcher.submit(PushRequest(notifications: [n2]), sync: false)
        var seen: [String: String?] = [:]
        for _ in 0..<3 {
            guard let job = await queue.next(platform: .ios) else { return XCTFail("queue ended") }
            seen[job.target.reportedToken] = job.accepted.traceParent
        }
        XCTAssertEqual(seen["t1"], .some(valid))
        XCTAssertEqual(seen["t2"], .some(valid))
        XCTAssertEqual(seen["t3"], .some(nil))
        queue.shutdown()
    }
}

/// A provider that renders anything and is never asked to send here (the jobs are taken from the queue by the test).
private struct TraceTestProvider: PushProvider {
    struct Prepared: PreparedPush { var payloadBytes: Int? { 2 } }
    var platform: Platform { .ios }
    func prepare(_ n: PushNotification) throws -> any PreparedPush { Prepared() }
    func send(_ p: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome { .delivered(providerID: nil) }
    func shutdown() async {}
}
