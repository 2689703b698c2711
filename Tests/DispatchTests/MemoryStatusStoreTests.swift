import Foundation
import PushgateCore
import XCTest

@testable import PushDispatch

/// The memory engine's status records are stored compactly (`StatusSlot`): every record reads back
/// exactly as it was made, whatever its token, provider id, error and state.
final class MemoryStatusStoreTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_000_000)
    /// The outcome an update event carries (the store reads the job's state, not the outcome).
    let busy = SendOutcome.transient(reason: "Busy", status: 503, retryAfter: nil)

    func job(_ id: UInt64, notif: String = "n-1", platform: Platform = .ios, token: String, state: DeliveryState, attempts: Int = 1)
        -> DeliveryJob
    {
        var n = PushNotification(platform: platform, tokens: [token])
        n.analyticsLabel = "campaign-7"
        let a = AcceptedNotification(
            notifID: notif, notification: n, prepared: nil, app: "chat", fallback: FallbackInfo(payloadBytes: 5000, limit: 4096, fallbackBytes: 300))
        var j = DeliveryJob(id: id, messageID: "m-\(id)", target: .token(token), accepted: a, maxAttempts: 5, now: t0)
        j.state = state
        j.attempts = attempts
        return j
    }

    /// What the store answers equals the full record the lifecycle's mapping makes.
    func testEveryRecordReadsBackAsMade() async throws {
        let now = Date(timeIntervalSince1970: 1_000_050.25)
        let store = MemoryStatusStore(now: { now })
        let hex = String(repeating: "0123456789abcdef", count: 4)
        let uuid = "6F9619FF-8B86-D011-B42D-00C04FC964FF"
        let cases: [(String, Platform, DeliveryState)] = [
            (hex, .ios, .delivered(providerID: uuid)),
            (hex.uppercased(), .ios, .delivered(providerID: uuid.lowercased())),
            (String(hex.dropLast()), .ios, .delivered(providerID: "6f9619ff-8B86-d011-b42d-00c04fc964ff")),
            (
                "fcm:APA91b" + String(repeating: "x", count: 140), .android,
                .delivered(providerID: "projects/p/messages/0:1500415314455276%31bd1c9631bd1c96")
            ),
            (hex, .ios, .delivered(providerID: "12345678-1234-1234-1234-123456789012")),
            (hex, .ios, .delivered(providerID: "6F9619FF-8B86-D011-B42D-00C04FC964F")),
            (hex, .ios, .delivered(providerID: "6F9619FF+8B86-D011-B42D-00C04FC964FF")),
            (hex, .ios, .failed(reason: "Unregistered")),
            (hex + "00", .ios, .retrying(nextTry: Date(timeIntervalSince1970: 1_000_123.5), lastError: "TooManyRequests")),
            ("https://push.example/ép", .webpush, .skipped(.coalesced)),
            (hex, .ios, .skipped(.duplicate)),
            (hex, .ios, .skipped(.cancelled)),
            (hex, .ios, .skipped(.quietHours)),
            ("", .huawei, .delivered(providerID: nil)),
        ]
        var expected: [DeliveryStatusRecord] = []
        for (i, c) in cases.enumerated() {
            let j = job(UInt64(10 + i), platform: c.1, token: c.0, state: c.2, attempts: i + 1)
            store.record(.retrying(j, outcome: busy))
            var r = DeliveryStatusRecord(
                platform: c.1, token: c.0, state: c.2, attempts: i + 1, finishedAt: c.2.isFinal ? now : nil, app: "chat",
                fallback: FallbackInfo(payloadBytes: 5000, limit: 4096, fallbackBytes: 300), notBefore: t0, analyticsLabel: "campaign-7")
            if case .retrying = c.2 { r.finishedAt = nil }
            expected.append(r)
        }
        let queued = job(40, token: hex, state: .queued, attempts: 0)
        store.record(.accepted(queued))
        expected.append(
            DeliveryStatusRecord(
                platform: .ios, token: hex, state: .queued, attempts: 0, finishedAt: nil, app: "chat",
                fallback: FallbackInfo(payloadBytes: 5000, limit: 4096, fallbackBytes: 300), notBefore: t0, analyticsLabel: "campaign-7"))
        let got = try await store.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(got, expected)
        XCTAssertEqual(store.recordCount, cases.count + 1)
    }

    /// Out-of-order events land in job id order; an acceptance after the outcome keeps the outcome;
    /// a notification whose deliveries are not all over outlives the retention.
    func testOrderAndRetention() async throws {
        let clock = LockedDate(Date(timeIntervalSince1970: 1_000_000))
        let store = MemoryStatusStore(retention: 60, maxRecords: 1000, now: { clock.value })
        let tok = String(repeating: "ab", count: 32)
        store.record(.retrying(job(9, token: tok, state: .delivered(providerID: "x")), outcome: busy))
        store.record(.accepted(job(5, token: tok, state: .queued, attempts: 0)))
        store.record(.accepted(job(7, token: tok, state: .queued, attempts: 0)))
        store.record(.accepted(job(9, token: tok, state: .queued, attempts: 0)))
        store.record(.accepted(job(1, notif: "n-2", token: tok, state: .queued, attempts: 0)))
        store.record(.retrying(job(1, notif: "n-2", token: tok, state: .failed(reason: "BadDeviceToken")), outcome: busy))
        var got = try await store.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(got?.map(\.state), [.queued, .queued, .delivered])
        store.record(.retrying(job(5, token: tok, state: .delivered(providerID: "y")), outcome: busy))
        store.record(.retrying(job(7, token: tok, state: .failed(reason: "Unregistered")), outcome: busy))
        got = try await store.deliveryStatus(notifID: "n-1")
        XCTAssertEqual(got?.map(\.state), [.delivered, .failed, .delivered])
        XCTAssertEqual(got?.map(\.providerID), ["y", nil, "x"])

        // n-3 keeps one delivery open: past the retention it stays, the finished ones go.
        store.record(.accepted(job(20, notif: "n-3", token: tok, state: .queued, attempts: 0)))
        clock.value = clock.value.addingTimeInterval(61)
        store.prune()
        let n1 = try await store.deliveryStatus(notifID: "n-1")
        let n2 = try await store.deliveryStatus(notifID: "n-2")
        let n3 = try await store.deliveryStatus(notifID: "n-3")
        XCTAssertNil(n1)
        XCTAssertNil(n2)
        XCTAssertEqual(n3?.map(\.state), [.queued])
        XCTAssertEqual(store.recordCount, 1)
    }

    /// Over `maxRecords` the oldest notifications go first.
    func testMaxRecords() async throws {
        let store = MemoryStatusStore(retention: 86_400, maxRecords: 3, now: { Date(timeIntervalSince1970: 1_000_000) })
        let tok = String(repeating: "cd", count: 32)
        for i in 0..<5 { store.record(.accepted(job(UInt64(i), notif: "n-\(i)", token: tok, state: .queued, attempts: 0))) }
        XCTAssertLessThanOrEqual(store.recordCount, 3)
        let oldest = try await store.deliveryStatus(notifID: "n-0")
        let newest = try await store.deliveryStatus(notifID: "n-4")
        XCTAssertNil(oldest)
        XCTAssertEqual(newest?.count, 1)
    }
}

/// A clock the test moves.
final class LockedDate: @unchecked Sendable {
    private let lock = NSLock()
    private var v: Date
    init(_ v: Date) { self.v = v }
    var value: Date {
        get { lock.withLock { v } }
        set { lock.withLock { v = newValue } }
    }
}
