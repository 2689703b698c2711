import Foundation
import ProviderKit
import PushgateCore
import XCTest

@testable import WNS

final class WNSChannelTests: XCTestCase {
    func reason(_ uri: String) -> String? {
        if case .failure(let f) = WNSChannel.parse(uri) { return f.reason }
        return nil
    }

    func testChannelURIShape() throws {
        let ok = try WNSChannel.parse("https://DB5P.notify.windows.com/?token=AwYAAAD%2bABC").get()
        XCTAssertEqual(ok.host, "db5p.notify.windows.com")
        XCTAssertEqual(ok.pathAndQuery, "/?token=AwYAAAD%2bABC")
        XCTAssertEqual(try WNSChannel.parse("https://notify.windows.com?token=x").get().pathAndQuery, "/?token=x")
        XCTAssertEqual(try WNSChannel.parse("HTTPS://a.b.notify.windows.com/w/x").get().host, "a.b.notify.windows.com")

        let refused: [(String, String)] = [
            ("http://db5p.notify.windows.com/?token=x", "not an https URL"),
            ("ftp://db5p.notify.windows.com/", "not an https URL"),
            ("https://db5p.notify.windows.com:8443/?token=x", "has a port"),
            ("https://db5p.notify.windows.com:443/?token=x", "has a port"),
            ("https://user:pw@db5p.notify.windows.com/?token=x", "has userinfo"),
            ("https://db5p.notify.windows.com@evil.example/", "has userinfo"),
            ("https://evil.example/?token=x", "host evil.example is not on notify.windows.com"),
            ("https://notify.windows.com.evil.example/", "is not on notify.windows.com"),
            ("https://evilnotify.windows.com/", "is not on notify.windows.com"),
            ("https://db5p.notify.windows.com./", "is not a DNS name"),
            ("https://[::1]/", "has an IP address for its host"),
            ("https://127.0.0.1/", "is not on notify.windows.com"),
            ("https://db5p.notify.windows.com/?t=x#frag", "has a fragment"),
            ("https://db5p.notify.windows.com/ x", "contains a space"),
            ("https://db5p.notify.windows.com/\u{0}", "contains a space, a control"),
            ("https://db5p.notify.windows.com/é", "non-ASCII"),
            ("https:///x", "is not a DNS name"),
            ("", "empty"),
            ("https://a.notify.windows.com/" + String(repeating: "x", count: 3000), "longer than 2048 bytes"),
        ]
        for (uri, why) in refused {
            let r = reason(uri)
            XCTAssertTrue(r?.hasPrefix("channel URI refused: ") ?? false, uri)
            XCTAssertTrue(r?.contains(why) ?? false, "\(uri): \(r ?? "accepted")")
        }
    }

    func testAddressGuard() async throws {
        let lookups = Counter()
        let guardian = WNSAddressGuard(
            staticAnswers: try WNSAddressGuard.parseStaticAnswers([
                "loop.notify.windows.com=127.0.0.1", "ok.notify.windows.com=20.1.2.3", "meta.notify.windows.com=169.254.169.254",
                "mixed.notify.windows.com=20.1.2.3", "mixed.notify.windows.com=10.0.0.1", "six.notify.windows.com=::1",
            ])
        ) { host in
            lookups.add()
            if host == "dns.notify.windows.com" { return [[20, 9, 9, 9]] }
            throw HostResolver.Failure(description: "NXDOMAIN")
        }
        let loop = await guardian.check("loop.notify.windows.com")
        XCTAssertEqual(loop, .refused("channel URI refused: loop.notify.windows.com resolves to 127.0.0.1, a loopback address"))
        let ok = await guardian.check("ok.notify.windows.com")
        XCTAssertEqual(ok, .allowed)
        let meta = await guardian.check("meta.notify.windows.com")
        XCTAssertEqual(meta, .refused("channel URI refused: meta.notify.windows.com resolves to 169.254.169.254, a link-local address"))
        let mixed = await guardian.check("mixed.notify.windows.com")
        XCTAssertEqual(mixed, .refused("channel URI refused: mixed.notify.windows.com resolves to 10.0.0.1, a private address"))
        let six = await guardian.check("six.notify.windows.com")
        XCTAssertEqual(six, .refused("channel URI refused: six.notify.windows.com resolves to ::1, a loopback address"))
        let dns = await guardian.check("dns.notify.windows.com")
        XCTAssertEqual(dns, .allowed)
        let again = await guardian.check("dns.notify.windows.com")
        XCTAssertEqual(again, .allowed)
        XCTAssertEqual(lookups.value, 1, "a checked answer is cached")
        let nx = await guardian.check("nx.notify.windows.com")
        guard case .unresolved = nx else { return XCTFail("\(nx)") }
        XCTAssertThrowsError(try WNSAddressGuard.parseStaticAnswers(["nohost"]))
        XCTAssertThrowsError(try WNSAddressGuard.parseStaticAnswers(["a.notify.windows.com=not-an-ip"]))
    }

    func testClassifier() {
        func c(_ status: Int, _ headers: [(String, String)] = []) -> SendOutcome {
            WNSResponseClassifier.classify(WNSAnswer(status: status, headers: headers))
        }
        XCTAssertEqual(
            c(200, [("X-WNS-Msg-ID", "1A2B3C"), ("X-WNS-Status", "received")]), .delivered(providerID: "1A2B3C", detail: "X-WNS-Status: received"))
        XCTAssertEqual(
            c(200, [("X-WNS-Status", "Dropped"), ("X-WNS-DeviceConnectionStatus", "disconnected")]),
            .delivered(providerID: nil, detail: "X-WNS-Status: dropped, X-WNS-DeviceConnectionStatus: disconnected"))
        XCTAssertEqual(c(200), .delivered(providerID: nil, detail: nil))
        // Undocumented values are not kept.
        XCTAssertEqual(c(200, [("X-WNS-Status", "<script>"), ("X-WNS-DeviceConnectionStatus", "x\ny")]), .delivered(providerID: nil))
        XCTAssertEqual(c(404).className, "token_dead")
        XCTAssertEqual(c(410).className, "token_dead")
        XCTAssertEqual(c(410, [("X-WNS-Error-Description", "Domain Blocked")]).className, "permanent")
        XCTAssertEqual(c(406, [("Retry-After", "7")]), .transient(reason: "Throttled", status: 406, retryAfter: 7))
        XCTAssertEqual(c(406, [("X-WNS-CONTINUE-AFTER", "9")]), .transient(reason: "Throttled", status: 406, retryAfter: 9))
        XCTAssertEqual(c(503, [("Retry-After", "3")]), .transient(reason: "ServiceUnavailable", status: 503, retryAfter: 3))
        XCTAssertEqual(c(500).className, "transient")
        XCTAssertEqual(c(429), .quotaExceeded(reason: "MonthlyQuotaExceeded", status: 429))
        XCTAssertEqual(c(413), .permanent(reason: "PayloadTooLarge", status: 413))
        XCTAssertEqual(c(400, [("X-WNS-Error-Description", "Invalid X-WNS-Type")]), .permanent(reason: "BadRequest: Invalid X-WNS-Type", status: 400))
        XCTAssertEqual(c(405).className, "permanent")
        XCTAssertEqual(c(401).className, "credentials")
        XCTAssertEqual(c(403).className, "credentials", "a token for another app: a configuration error, retried once with a new token")
        // Hostile answers: a forged log line, a huge id, a huge Retry-After.
        let forged = c(400, [("X-WNS-Error-Description", "a\nlevel=error fake")])
        XCTAssertFalse(forged.reason?.contains("\n") ?? true)
        XCTAssertEqual(c(200, [("X-WNS-Msg-ID", "id with spaces")]), .delivered(providerID: nil))
        _ = c(406, [("Retry-After", "99999999999999999999999")])
    }

    /// The address guard at ingest: each distinct host once, the refused channel named by its token.
    func testIngestCheckResolvesEachHostOnce() async throws {
        let lookups = Counter()
        let guardian = WNSAddressGuard(staticAnswers: try WNSAddressGuard.parseStaticAnswers(["loop.notify.windows.com=127.0.0.1"])) { host in
            lookups.add()
            if host == "down.notify.windows.com" { throw HostResolver.Failure(description: "SERVFAIL") }
            return [[20, 9, 9, 9]]
        }
        let verdicts = await guardian.check(
            ["a.notify.windows.com", "b.notify.windows.com", "loop.notify.windows.com", "down.notify.windows.com"], concurrency: 2)
        XCTAssertEqual(verdicts["a.notify.windows.com"], .allowed)
        XCTAssertEqual(
            verdicts["loop.notify.windows.com"], .refused("channel URI refused: loop.notify.windows.com resolves to 127.0.0.1, a loopback address"))
        guard case .unresolved? = verdicts["down.notify.windows.com"] else { return XCTFail("\(verdicts)") }
        XCTAssertEqual(lookups.value, 3)
        let again = await guardian.check(["a.notify.windows.com", "b.notify.windows.com"], concurrency: 2)
        XCTAssertEqual(again.count, 2)
        XCTAssertEqual(lookups.value, 3, "answers are cached per host")
    }

}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() {
        lock.lock()
        n += 1
        lock.unlock()
    }
    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return n
    }
}
