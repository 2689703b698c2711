import Foundation
import Signing
import XCTest

@testable import FCM

/// Thread-safe test helper.
final class Locked<T>: @unchecked Sendable {
    private var value: T
    private let lock = NSLock()
    init(_ value: T) { self.value = value }
    func withLock<R>(_ body: (inout T) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
    var get: T { withLock { $0 } }
}

final class FCMTokenProviderTests: XCTestCase {
    struct FakeTokenEndpoint: Sendable {
        let requests = Locked<[String]>([])
        let counter = Locked(0)
        let status = Locked(200)
        let expiresIn = Locked(3600)
        let delayNanos: UInt64

        init(delayNanos: UInt64 = 50_000_000) { self.delayNanos = delayNanos }

        var transport: FCMTokenProvider.Transport {
            { url, body in
                self.requests.withLock { $0.append(String(decoding: body, as: UTF8.self)) }
                let n = self.counter.withLock {
                    $0 += 1
                    return $0
                }
                try await Task.sleep(nanoseconds: self.delayNanos)
                let status = self.status.get
                if status != 200 {
                    return (status, Array(#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#.utf8))
                }
                return (200, Array(#"{"access_token":"at-\#(n)","expires_in":\#(self.expiresIn.get),"token_type":"Bearer"}"#.utf8))
            }
        }
    }

    func testAssertionHeaderClaimsAndSignature() throws {
        let account = try Fixtures.serviceAccount(tokenURI: "https://oauth2.example.test/token")
        let provider = FCMTokenProvider(serviceAccount: account, transport: FakeTokenEndpoint().transport)
        let issued = Date(timeIntervalSince1970: 1_700_000_000)
        let jwt = try provider.makeAssertion(issuedAt: issued)
        let decoded = try DecodedJWT(jwt)
        XCTAssertEqual(decoded.header["alg"] as? String, "RS256")
        XCTAssertEqual(decoded.header["typ"] as? String, "JWT")
        XCTAssertEqual(decoded.header["kid"] as? String, Fixtures.account.privateKeyID)
        XCTAssertEqual(decoded.claims["iss"] as? String, Fixtures.account.clientEmail)
        XCTAssertEqual(decoded.claims["scope"] as? String, "https://www.googleapis.com/auth/firebase.messaging")
        XCTAssertEqual(decoded.claims["aud"] as? String, "https://oauth2.example.test/token")
        XCTAssertEqual((decoded.claims["iat"] as? NSNumber)?.int64Value, 1_700_000_000)
        XCTAssertEqual((decoded.claims["exp"] as? NSNumber)?.int64Value, 1_700_003_600)
        XCTAssertNoThrow(try decoded.verify(rs256: Fixtures.account.publicKey))
        XCTAssertThrowsError(try decoded.verify(rs256: Fixtures.otherAccount.publicKey))
    }

    func testFormBody() {
        XCTAssertEqual(
            FCMTokenProvider.formBody(assertion: "a.b-_.c"),
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b-_.c")
    }

    func testConcurrentCallersShareOneRequest() async throws {
        let endpoint = FakeTokenEndpoint()
        let provider = FCMTokenProvider(serviceAccount: try Fixtures.serviceAccount(), transport: endpoint.transport)
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<100 { group.addTask { try await provider.accessToken() } }
            var out: [String] = []
            for try await t in group { out.append(t) }
            return out
        }
        XCTAssertEqual(tokens.count, 100)
        XCTAssertEqual(Set(tokens), ["at-1"])
        XCTAssertEqual(endpoint.counter.get, 1)
        let requests = await provider.tokenRequests
        XCTAssertEqual(requests, 1)
        // Cached afterwards.
        let again = try await provider.accessToken()
        XCTAssertEqual(again, "at-1")
        XCTAssertEqual(endpoint.counter.get, 1)
    }

    func testRefreshesShortlyBeforeExpiry() async throws {
        let endpoint = FakeTokenEndpoint(delayNanos: 0)
        let clock = Locked(Date(timeIntervalSince1970: 1_700_000_000))
        let provider = FCMTokenProvider(serviceAccount: try Fixtures.serviceAccount(), transport: endpoint.transport, now: { clock.get })
        let first = try await provider.accessToken()
        XCTAssertEqual(first, "at-1")
        clock.withLock { $0.addTimeInterval(3600 - 301) }
        let stillFirst = try await provider.accessToken()
        XCTAssertEqual(stillFirst, "at-1")
        clock.withLock { $0.addTimeInterval(2) }  // within 5 minutes of expiry
        let second = try await provider.accessToken()
        XCTAssertEqual(second, "at-2")
        XCTAssertEqual(endpoint.counter.get, 2)
    }

    func testInvalidateOnlyDropsThatToken() async throws {
        let endpoint = FakeTokenEndpoint(delayNanos: 0)
        let provider = FCMTokenProvider(serviceAccount: try Fixtures.serviceAccount(), transport: endpoint.transport)
        let first = try await provider.accessToken()
        await provider.invalidate("some-older-token")
        let same = try await provider.accessToken()
        XCTAssertEqual(same, first)
        await provider.invalidate(first)
        let fresh = try await provider.accessToken()
        XCTAssertEqual(fresh, "at-2")
        XCTAssertEqual(endpoint.counter.get, 2)
    }

    func testFailureIsNotCachedAndIsClassified() async throws {
        let endpoint = FakeTokenEndpoint(delayNanos: 0)
        endpoint.status.withLock { $0 = 400 }
        let provider = FCMTokenProvider(serviceAccount: try Fixtures.serviceAccount(), transport: endpoint.transport)
        do {
            _ = try await provider.accessToken()
            XCTFail("expected an error")
        } catch let error as FCMAuthError {
            XCTAssertEqual(error.status, 400)
            XCTAssertTrue(error.isPermanent)
            XCTAssertTrue(error.description.contains("invalid_grant: Invalid JWT Signature."), error.description)
        }
        endpoint.status.withLock { $0 = 200 }
        let token = try await provider.accessToken()
        XCTAssertEqual(token, "at-2")
    }
}
