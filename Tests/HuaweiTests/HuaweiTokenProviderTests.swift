import Foundation
import NIOConcurrencyHelpers
import XCTest

@testable import Huawei

final class HuaweiTokenProviderTests: XCTestCase {
    /// A scripted token endpoint: records bodies, answers `answer(n)` for the n-th request.
    final class Endpoint: Sendable {
        let bodies = NIOLockedValueBox<[String]>([])
        let answer: @Sendable (Int) -> (Int, String)
        init(_ answer: @escaping @Sendable (Int) -> (Int, String)) { self.answer = answer }
        var transport: HuaweiTokenProvider.Transport {
            { _, body in
                let n = self.bodies.withLockedValue {
                    $0.append(String(decoding: body, as: UTF8.self))
                    return $0.count
                }
                let (status, text) = self.answer(n)
                return (status, Array(text.utf8))
            }
        }
        var count: Int { bodies.withLockedValue { $0.count } }
    }

    final class Clock: Sendable {
        let t = NIOLockedValueBox(Date(timeIntervalSince1970: 1_700_000_000))
        func advance(_ s: TimeInterval) { t.withLockedValue { $0 = $0.addingTimeInterval(s) } }
        var now: @Sendable () -> Date { { self.t.withLockedValue { $0 } } }
    }

    func testClientCredentialsFormCachedAndRefreshedBeforeExpiry() async throws {
        let endpoint = Endpoint { n in (200, #"{"access_token":"tok-\#(n)","expires_in":3600,"token_type":"Bearer"}"#) }
        let clock = Clock()
        let p = HuaweiTokenProvider(
            appID: "104", appSecret: "a b&c=d/é", tokenURL: "https://x/oauth2/v3/token", transport: endpoint.transport, now: clock.now)
        let first = try await p.accessToken()
        XCTAssertEqual(first, "tok-1")
        XCTAssertEqual(endpoint.bodies.withLockedValue { $0 }, ["grant_type=client_credentials&client_id=104&client_secret=a%20b%26c%3Dd%2F%C3%A9"])
        // Concurrent callers share the cached token.
        let all = try await withThrowingTaskGroup(of: String.self) { g in
            for _ in 0..<20 { g.addTask { try await p.accessToken() } }
            return try await g.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(Set(all), ["tok-1"])
        XCTAssertEqual(endpoint.count, 1)
        clock.advance(3600 - 301)
        let stillFirst = try await p.accessToken()
        XCTAssertEqual(stillFirst, "tok-1")
        clock.advance(2)  // inside the 300 s refresh margin
        let second = try await p.accessToken()
        XCTAssertEqual(second, "tok-2")
        await p.invalidate("tok-1")  // not the cached one: kept
        let kept = try await p.accessToken()
        XCTAssertEqual(kept, "tok-2")
        await p.invalidate("tok-2")
        let third = try await p.accessToken()
        XCTAssertEqual(third, "tok-3")
    }

    func testHostileLifetimesAreBounded() async throws {
        for expires in ["1e308", "-5", "0", "\"NaN\"", "\"99999999999999999999999\"", "null", "[]"] {
            let endpoint = Endpoint { n in (200, #"{"access_token":"t\#(n)","expires_in":\#(expires)}"#) }
            let clock = Clock()
            let p = HuaweiTokenProvider(appID: "1", appSecret: "s", tokenURL: "https://x", transport: endpoint.transport, now: clock.now)
            _ = try await p.accessToken()
            clock.advance(86_400 + 1)  // past the longest lifetime taken
            let again = try await p.accessToken()
            XCTAssertEqual(again, "t2", "expires_in \(expires)")
        }
    }

    func testRefusalsAreErrorsWithoutTheSecret() async throws {
        let secret = "very-secret-value"
        let cases: [(Int, String, Bool)] = [
            (401, #"{"error":1102,"sub_error":20004,"error_description":"invalid client_secret very-secret-value"}"#, true),
            (503, "", false),
            (200, #"{"expires_in":3600}"#, false),
            (200, #"{"access_token":"bad\r\ntoken"}"#, false),
        ]
        for (status, body, permanent) in cases {
            let endpoint = Endpoint { _ in (status, body) }
            let p = HuaweiTokenProvider(appID: "1", appSecret: secret, tokenURL: "https://x", transport: endpoint.transport)
            do {
                _ = try await p.accessToken()
                XCTFail("\(status) \(body): a token")
            } catch let e as HuaweiAuthError {
                XCTAssertFalse(e.description.contains(secret), e.description)
                XCTAssertEqual(e.isPermanent, permanent, e.description)
            }
        }
    }
}
