import APNs
import Crypto
import Foundation
import Signing
import XCTest

/// A settable clock for timing rules without sleeping.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Double
    init(_ start: Double = 1_700_000_000) { value = start }
    var now: Double {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
    func advance(minutes: Double) {
        lock.lock()
        defer { lock.unlock() }
        value += minutes * 60
    }
    func set(_ seconds: Double) {
        lock.lock()
        defer { lock.unlock() }
        value = seconds
    }
    var function: APNsTokenManager.Clock { { [self] in self.now } }
}

final class APNsTokenManagerTests: XCTestCase {
    let key = P256.Signing.PrivateKey()

    func manager(_ clock: TestClock, random: @escaping APNsTokenManager.Random = { Double.random(in: $0) }) -> APNsTokenManager {
        APNsTokenManager(key: key, keyID: "KEYID12345", teamID: "TEAMID6789", clock: clock.function, random: random)
    }

    func testTokenFormatAndSignature() throws {
        let clock = TestClock()
        let tokens = manager(clock)
        let t = try tokens.token()
        XCTAssertEqual(t.authorization, "bearer " + t.jwt)
        let jwt = try DecodedJWT(t.jwt)
        XCTAssertEqual(jwt.header["alg"] as? String, "ES256")
        XCTAssertEqual(jwt.header["kid"] as? String, "KEYID12345")
        XCTAssertEqual(jwt.claims["iss"] as? String, "TEAMID6789")
        XCTAssertEqual((jwt.claims["iat"] as? NSNumber)?.int64Value, 1_700_000_000)
        // iat is a JSON number, not a string.
        let claims = String(decoding: try XCTUnwrap(Base64URL.decode(String(t.jwt.split(separator: ".")[1]))), as: UTF8.self)
        XCTAssertEqual(claims, #"{"iss":"TEAMID6789","iat":1700000000}"#)
        XCTAssertNoThrow(try jwt.verify(es256: key.publicKey))
        XCTAssertThrowsError(try jwt.verify(es256: P256.Signing.PrivateKey().publicKey))
    }

    func testOneTokenIsSharedAndCached() throws {
        let clock = TestClock()
        let tokens = manager(clock)
        let first = try tokens.token()
        clock.advance(minutes: 10)
        XCTAssertEqual(try tokens.token(), first)
        XCTAssertEqual(tokens.mintedCount, 1)
    }

    func testReMintedWithinRandomised40To50Minutes() throws {
        for _ in 0..<20 {
            let clock = TestClock()
            let tokens = manager(clock)
            let first = try tokens.token()
            clock.advance(minutes: 39.99)
            XCTAssertEqual(try tokens.token(), first, "a token is kept for at least 40 minutes")
            clock.advance(minutes: 10.02)
            let second = try tokens.token()
            XCTAssertNotEqual(second, first, "a token is replaced after at most 50 minutes")
            XCTAssertEqual(second.issuedAt, first.issuedAt + 3000)  // 50.01 minutes, whole seconds
        }
    }

    func testLifetimeIsDrawnFromTheRange() throws {
        let clock = TestClock()
        // The injected random picks the middle of the range: 45 minutes.
        let tokens = manager(clock, random: { ($0.lowerBound + $0.upperBound) / 2 })
        let first = try tokens.token()
        clock.advance(minutes: 44.9)
        XCTAssertEqual(try tokens.token(), first)
        clock.advance(minutes: 0.2)
        XCTAssertNotEqual(try tokens.token(), first)
        XCTAssertEqual(tokens.mintedCount, 2)
    }

    func testExpiredProviderTokenReMintsOnlyTheCurrentToken() throws {
        let clock = TestClock()
        let tokens = manager(clock)
        let a = try tokens.token()
        clock.advance(minutes: 1)
        XCTAssertTrue(tokens.invalidate(a.jwt))
        let b = try tokens.token()
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(b.issuedAt, a.issuedAt + 60)
        // Other in-flight requests that failed with the old token do not cause another re-mint.
        XCTAssertTrue(tokens.invalidate(a.jwt))
        XCTAssertTrue(tokens.invalidate(a.authorization))
        XCTAssertEqual(try tokens.token(), b)
        XCTAssertEqual(tokens.mintedCount, 2)
    }

    func testForcedReMintsAtMostEvery20Minutes() throws {
        let clock = TestClock()
        let tokens = manager(clock)
        let a = try tokens.token()
        XCTAssertTrue(tokens.invalidate(a.jwt))
        let b = try tokens.token()
        XCTAssertNotEqual(a, b)
        // APNs says the brand-new token is expired too (clock skew): no re-mint storm.
        clock.advance(minutes: 5)
        XCTAssertFalse(tokens.invalidate(b.jwt))
        XCTAssertEqual(try tokens.token(), b)
        clock.advance(minutes: 14.9)
        XCTAssertFalse(tokens.invalidate(b.jwt))
        XCTAssertEqual(try tokens.token(), b)
        clock.advance(minutes: 0.2)
        XCTAssertTrue(tokens.invalidate(b.jwt))
        XCTAssertNotEqual(try tokens.token(), b)
        XCTAssertEqual(tokens.mintedCount, 3)
    }

    func testConcurrentCallersShareOneToken() async throws {
        let clock = TestClock()
        let tokens = manager(clock)
        let values = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<200 { group.addTask { try tokens.authorization() } }
            var out = Set<String>()
            for try await v in group { out.insert(v) }
            return out
        }
        XCTAssertEqual(values.count, 1)
        XCTAssertEqual(tokens.mintedCount, 1)
    }
}
