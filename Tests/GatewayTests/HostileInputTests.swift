import Foundation
import HTTPTypes
import HummingbirdTesting
import MockProviders
import NIOCore
import PushgateCore
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

#if canImport(Glibc)
    import Glibc
#endif

/// A plain TCP client on 127.0.0.1 for the slow-client tests (what a hostile client does at the byte level).
final class RawConnection {
    let fd: Int32

    /// - Parameter source: the local address to connect from (127.0.0.2: another client than 127.0.0.1).
    init(port: Int, from source: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                close(fd)
                throw POSIXError(.EADDRNOTAVAIL)
            }
        }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
        var tv = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    @discardableResult
    func send(_ s: String) -> Bool { send(bytes: Array(s.utf8)) }

    /// Whether all of `bytes` were written.
    @discardableResult
    func send(bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// What the server sent within `seconds` (until it stops sending or closes).
    func receive(within seconds: Double) -> String {
        let deadline = Date().addingTimeInterval(seconds)
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            let n = recv(fd, &buf, buf.count, 0)
            if n > 0 {
                out += buf[0..<n]
                continue
            }
            if n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) { break }
            if !out.isEmpty { break }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Closes both directions now (the server sees the connection end), keeping the descriptor until deinit.
    func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Whether the server closed the connection (read returns 0 or a reset) within `seconds`.
    func closedByServer(within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var buf = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            let n = recv(fd, &buf, buf.count, 0)
            if n == 0 { return true }
            if n < 0, errno != EAGAIN, errno != EWOULDBLOCK { return true }
        }
        return false
    }
}

final class HostileInputTests: XCTestCase {
    func testIssueCurlsAnswer400AndTheGatewayStaysUp() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let r = try await client.push(#"{"notifications":[{"platform":2,"tokens":["x"],"message":"m","android":{"ttl":1e19}}]}"#)
            XCTAssertEqual(r.status, 400, r.body)
            XCTAssertTrue((jsonObject(r.body)["detail"] as? String)?.contains("notifications[0].android.ttl") == true, r.body)
            // 150,000 keys: refused at the 1,001st, naming the limit.
            let keys = (0..<150_000).map { #""k\#($0)":\#($0)"# }.joined(separator: ",")
            let big = try await client.push(#"{"notifications":[{"platform":2,"tokens":["x"],"message":"m","data":{\#(keys)}}]}"#)
            XCTAssertEqual(big.status, 400)
            XCTAssertTrue((jsonObject(big.body)["detail"] as? String)?.contains("core.max_object_keys") == true, big.body)
            // A valid FCM ttl still goes through as FCM's duration string.
            let ok = try await client.push(#"{"notifications":[{"platform":2,"tokens":["tok-1"],"message":"m","android":{"ttl":3600}}],"sync":true}"#)
            XCTAssertEqual(ok.status, 200, ok.body)
            XCTAssertEqual((jsonObject(ok.body)["logs"] as? [Any])?.count, 0, ok.body)
            XCTAssertEqual((env.fcm.messages.last?.message["android"] as? [String: Any])?["ttl"] as? String, "3600s")
            let health = try await client.execute(uri: "/healthz", method: .get) { Int($0.status.code) }
            XCTAssertEqual(health, 200)
        }
    }

    /// Thousands of failures in one sync request: the message is not repeated whole per token and
    /// the answer stops at core.max_sync_answer_bytes, saying how many entries it left out.
    func testSyncAnswerIsBounded() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let limits = ["PUSHGATE_CORE_MAX_SYNC_ANSWER_BYTES": "65536", "PUSHGATE_CORE_MAX_LOG_MESSAGE_BYTES": "100"]
        try await env.withGateway(environment: limits) { client, _ in
            let message = String(repeating: "é", count: 25_000)  // 50 KB: too large for APNs
            let tokens = (0..<3000).map { "\"\(String(format: "%064x", $0))\"" }.joined(separator: ",")
            let r = try await client.push(#"{"notifications":[{"platform":1,"tokens":[\#(tokens)],"message":"\#(message)"}],"sync":true}"#)
            XCTAssertEqual(r.status, 200)
            XCTAssertLessThan(r.body.utf8.count, 80_000, "the answer is capped")
            let json = jsonObject(r.body)
            let logs = try XCTUnwrap(json["logs"] as? [[String: Any]])
            let omitted = try XCTUnwrap(json["logs_omitted"] as? Int, r.body.prefix(300).description)
            XCTAssertEqual(logs.count + omitted, 3000, "every failure is listed or counted")
            XCTAssertGreaterThan(logs.count, 50)
            let first = try XCTUnwrap(logs.first?["message"] as? String)
            XCTAssertTrue(first.hasSuffix("… (50000 bytes)"), first)
            XCTAssertLessThanOrEqual(first.utf8.count, 100 + 20)
            XCTAssertTrue((logs.first?["error"] as? String)?.hasPrefix("PayloadTooLarge") == true)
            XCTAssertEqual(json["counts"] as? Int, 3000)
        }
    }

    /// core.sync_timeout: a sync request answers 200 with what is known and how many are still under way.
    func testSyncTimeoutAnswersWithWhatIsKnown() async throws {
        // APNs holds its answer until after the sync answer came: it can only have come at the timeout.
        let hold = MockResponseHold()
        let env = try await TestEnvironment.start(apnsHold: hold)
        defer { Task { await env.stop() } }
        try await env.withGateway(environment: ["PUSHGATE_CORE_SYNC_TIMEOUT": "1"]) { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":1,"tokens":["\#(String(repeating: "ab", count: 32))"],"message":"m","topic":"com.example.app"},{"platform":1,"tokens":[],"message":"m"}],"sync":true}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let json = jsonObject(r.body)
            XCTAssertEqual(json["pending"] as? Int, 1, r.body)
            XCTAssertEqual((json["logs"] as? [[String: Any]])?.count, 1, "the failure known at once is listed")
            // The delivery goes on after the answer.
            hold.release()
            let delivered = await eventually(timeout: 10) { env.apns.requestCount == 1 }
            XCTAssertTrue(delivered)
        }
    }

    /// A request started but trickled is closed at core.read_timeout; connections that send nothing
    /// are closed at core.idle_timeout; neither delays a normal request.
    func testSlowAndIdleClientsAreClosedAndDoNotDelayOthers() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway(environment: ["PUSHGATE_CORE_READ_TIMEOUT": "1", "PUSHGATE_CORE_IDLE_TIMEOUT": "2"]) { client, _ in
            let port = try XCTUnwrap(client.port)
            var idle: [RawConnection] = []
            for _ in 0..<200 { idle.append(try RawConnection(port: port)) }
            idle[0].send("POST /api/pu")  // a partial request line
            let slow = try RawConnection(port: port)
            XCTAssertTrue(slow.send("POST /api/push HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"notif"))
            // A normal request is served meanwhile.
            let r = try await client.push(
                #"{"notifications":[{"platform":1,"tokens":["\#(String(repeating: "cd", count: 32))"],"message":"m","topic":"com.example.app"}],"sync":true}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            // The trickling client keeps sending, a byte at a time, and is still closed by the read timeout.
            var closedSlow = false
            for _ in 0..<30 where !closedSlow {
                slow.send("a")
                closedSlow = slow.closedByServer(within: 0.1)
            }
            XCTAssertTrue(closedSlow, "a trickled body is cut at core.read_timeout")
            XCTAssertTrue(idle[0].closedByServer(within: 4), "a partial request line is closed by the idle timeout")
            XCTAssertTrue(idle[199].closedByServer(within: 4), "a silent connection is closed by the idle timeout")
        }
    }

    /// `Expect: 100-continue` gets the go-ahead (curl waits a second for it before sending a body over
    /// 1 MB); a declared length over core.max_body_bytes gets the 413 without it.
    func testExpectContinueAndEarly413() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway { client, _ in
            let port = try XCTUnwrap(client.port)
            let body =
                #"{"notifications":[{"platform":1,"tokens":["\#(String(repeating: "ef", count: 32))"],"message":"m","topic":"com.example.app"}]}"#
            let c = try RawConnection(port: port)
            c.send("POST /api/push HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n")
            let interim = c.receive(within: 2)
            XCTAssertTrue(interim.hasPrefix("HTTP/1.1 100 Continue"), interim)
            c.send(body)
            let answer = c.receive(within: 5)
            XCTAssertTrue(answer.hasPrefix("HTTP/1.1 200"), answer)
            let big = try RawConnection(port: port)
            big.send("POST /api/push HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000000000000\r\n\r\n")
            let refused = big.receive(within: 2)
            XCTAssertTrue(refused.hasPrefix("HTTP/1.1 413"), refused)
            XCTAssertTrue(refused.contains("core.max_body_bytes"), refused)
        }
    }

    /// Ids a client chose are given back exactly (header percent-encoded), found again through a
    /// percent-encoded path; an empty id is generated; unknown routes answer JSON.
    func testNotifIDsRoundTripAndUnknownRoutesAnswerJSON() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try await env.withGateway(environment: ["PUSHGATE_QUEUE_ENGINE": "memory"]) { client, _ in
            let token = String(repeating: "ab", count: 32)
            let r = try await client.push(
                #"{"notifications":[{"platform":1,"tokens":["\#(token)"],"topic":"com.example.app","message":"m","notif_id":"order 42/é,\r\nX-Evil: 1"},{"platform":1,"tokens":["\#(token)"],"topic":"com.example.app","notif_id":""}],"sync":true}"#
            )
            XCTAssertEqual(r.status, 200, r.body)
            let requestID = try XCTUnwrap(r.headers[Gateway.requestIDHeader])
            XCTAssertEqual(r.headers[Gateway.notifIDsHeader], "order%2042/%C3%A9%2C%0D%0AX-Evil:%201,\(requestID)-1")
            XCTAssertNil(r.headers[HTTPField.Name("X-Evil")!])
            let status = try await client.execute(uri: "/api/push/order%2042%2F%C3%A9%2C%0D%0AX-Evil%3A%201", method: .get) {
                ($0.status.code, String(buffer: $0.body))
            }
            XCTAssertEqual(status.0, 200, status.1)
            let generated = try await client.execute(uri: "/api/push/\(requestID)-1", method: .get) { $0.status.code }
            XCTAssertEqual(generated, 200)
            let unknown = try await client.execute(uri: "/api/nothing", method: .put) { ($0.status.code, String(buffer: $0.body), $0.headers) }
            XCTAssertEqual(unknown.0, 404)
            XCTAssertEqual(jsonObject(unknown.1)["code"] as? Int, 404, unknown.1)
            XCTAssertNotNil(unknown.2[HTTPField.Name("X-Pushgate-Version")!])
        }
    }

    /// Web Push `expiration` below 1e9 counts in seconds from acceptance: a 503 is retried (it used to
    /// be compared as a 1970 UNIX time and reported failed at once).
    func testWebPushRelativeExpirationIsRetried() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let (sub, _) = env.webpush.makeSubscription(id: "rel-1")
        env.webpush.script(id: "rel-1", replies: [.serverError(status: 503, retryAfter: nil), .created])
        try await env.withGateway { client, _ in
            let r = try await client.push(
                #"{"notifications":[{"platform":"webpush","subscriptions":[{"endpoint":"\#(sub.endpoint)","keys":{"p256dh":"\#(sub.keys!.p256dh)","auth":"\#(sub.keys!.auth)"}}],"message":"hi","expiration":3600}],"sync":true}"#
            )
            XCTAssertEqual(r.status, 200)
            XCTAssertEqual((jsonObject(r.body)["logs"] as? [Any])?.count, 0, r.body)
            let pushes = env.webpush.pushes(id: "rel-1")
            XCTAssertEqual(pushes.count, 2, "retried after the 503")
            XCTAssertLessThanOrEqual(pushes.last?.ttl ?? 0, 3600)
        }
    }

    func testConfigEndpointRedactsURLCredentialsAndKeyIdentities() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let hook = env.feedbackServer.baseURL.replacingOccurrences(of: "https://", with: "https://hookuser:hookpass@") + "/feedback?token=s3cr3t-q"
        try await env.withGateway(environment: ["PUSHGATE_CORE_FEEDBACK_HOOK_URL": hook]) { client, _ in
            let yaml = try await client.execute(uri: "/api/config", method: .get) { String(buffer: $0.body) }
            XCTAssertFalse(yaml.contains("hookpass"), yaml)
            XCTAssertFalse(yaml.contains("hookuser"), yaml)
            XCTAssertFalse(yaml.contains("s3cr3t-q"), yaml)
            XCTAssertTrue(yaml.contains("[REDACTED]@127.0.0.1"), yaml)
            XCTAssertFalse(yaml.contains(env.directory + "/mock-apns.p8"), "key paths are hidden")
            XCTAssertFalse(yaml.contains(env.apnsKey.keyID), "key ids are hidden")
        }
    }
}

final class ConfigRangeTests: XCTestCase {
    func testIntegersOutOfRangeAreOneLineErrors() {
        for (key, value) in [
            ("core.feedback_timeout", "1000000000000"), ("core.sync_timeout", "-1"), ("ios.max_retry", "1000000"),
            ("core.max_json_depth", "100000"), ("core.port", "70000"), ("queue.max_pending", "0"),
            ("queue.max_held", "99"),
        ] {
            let env = ["PUSHGATE_" + key.replacingOccurrences(of: ".", with: "_").uppercased(): value]
            XCTAssertThrowsError(try RawConfig(yaml: nil, environment: env), key) { error in
                XCTAssertTrue("\(error)".hasPrefix("config error: \(key): \(value) is out of range"), "\(error)")
            }
        }
        XCTAssertThrowsError(try RawConfig(yaml: "core:\n  retry_backoff_ms: 99999999999\n", environment: [:]))
        var raw = try? RawConfig(yaml: nil, environment: [:])
        XCTAssertThrowsError(try raw?.set(assignment: "core.read_timeout=0"))
    }

    func testDurationsMustBeFiniteAndBounded() throws {
        for bad in ["inf", "nan", "1e300s", "99999999d", "-5s"] {
            let raw = try RawConfig(yaml: "queue:\n  lease_timeout: \"\(bad)\"\n", environment: [:])
            XCTAssertThrowsError(try QueueWiring.duration(raw, QueueConfig.leaseTimeout), bad)
        }
        let raw = try RawConfig(yaml: "queue:\n  lease_timeout: \"90s\"\n", environment: [:])
        XCTAssertEqual(try QueueWiring.duration(raw, QueueConfig.leaseTimeout), 90)
    }

    func testRedactURL() {
        XCTAssertEqual(RawConfig.redactURL("https://u:p@hooks.example/x?secret=1#f"), "https://[REDACTED]@hooks.example/x?[REDACTED]")
        XCTAssertEqual(RawConfig.redactURL("postgres://pg:pw@db:5432/q?sslmode=require"), "postgres://[REDACTED]@db:5432/q?[REDACTED]")
        XCTAssertEqual(RawConfig.redactURL("https://fcm.googleapis.com"), "https://fcm.googleapis.com")
    }
}
