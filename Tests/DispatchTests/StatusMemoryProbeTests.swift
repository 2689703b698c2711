import Foundation
import PushgateCore
import XCTest

@testable import PushDispatch

/// Memory probe (skipped unless PUSHGATE_BENCH=1): resident bytes per status record of the memory
/// engine, 1,000,000 APNs deliveries (100 per notification, delivered, a UUID `apns-id` each), next
/// to the same records kept as full `DeliveryStatusRecord`s in a dictionary per notification.
/// Figures go to docs/benchmarks.md; nothing here is asserted on them.
final class StatusMemoryProbeTests: XCTestCase {
    static let count = 1_000_000

    func testBytesPerStatusRecord() throws {
        guard ProcessInfo.processInfo.environment["PUSHGATE_BENCH"] == "1" else { throw XCTSkip("set PUSHGATE_BENCH=1") }
        let jobs = Self.jobs()
        let (full, fullKept) = Self.measure {
            var notifs: [String: [UInt64: DeliveryStatusRecord]] = [:]
            for j in jobs {
                notifs[j.accepted.notifID, default: [:]][j.id] = DeliveryStatusRecord(
                    platform: j.platform, token: j.target.reportedToken, state: j.state, attempts: j.attempts, finishedAt: Date(),
                    app: j.accepted.app, fallback: j.accepted.fallback, notBefore: j.notBefore,
                    analyticsLabel: j.accepted.notification.analyticsLabel)
            }
            return notifs
        }
        let (compact, store) = Self.measure {
            let s = MemoryStatusStore(maxRecords: Self.count)
            for j in jobs { s.record(.accepted(j)) }
            return s
        }
        XCTAssertEqual(store.recordCount, Self.count)
        XCTAssertEqual(fullKept.values.reduce(0) { $0 + $1.count }, Self.count)
        print(
            String(
                format: "status records: %d; full records in a dictionary %.0f bytes each, MemoryStatusStore %.0f bytes each",
                Self.count, full, compact))
    }

    /// Resident bytes per record that `body`'s result holds (the result is kept alive until measured).
    static func measure<T>(_ body: () -> T) -> (Double, T) {
        let before = rss()
        let kept = body()
        return (Double(rss() - before) / Double(count), kept)
    }

    static func rss() -> Int {
        guard let s = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let pages = s.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    static func jobs() -> [DeliveryJob] {
        var out: [DeliveryJob] = []
        out.reserveCapacity(count)
        let now = Date()
        var n = PushNotification(platform: .ios, tokens: [])
        n.message = "hello"
        for i in 0..<(count / 100) {
            let a = AcceptedNotification(notifID: "bench-\(i)-\(UUID().uuidString)", notification: n, prepared: nil)
            for k in 0..<100 {
                let id = UInt64(i * 100 + k)
                let token = String(format: "%016llx%016llx%016llx%016llx", id, id &* 31, id &* 131, id &* 1031)
                var j = DeliveryJob(id: id, messageID: "", target: .token(token), accepted: a, maxAttempts: 3, now: now)
                j.attempts = 1
                j.state = .delivered(providerID: UUID().uuidString)
                out.append(j)
            }
        }
        return out
    }
}
