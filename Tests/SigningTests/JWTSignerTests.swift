import Crypto
import Foundation
import XCTest
import _CryptoExtras

@testable import Signing

final class JWTSignerTests: XCTestCase {
    func testES256RoundTripAndExactHeader() throws {
        let key = P256.Signing.PrivateKey()
        let jwt = try JWTSigner(key: .es256(key)).sign(
            header: [("kid", .string("ABC123DEFG"))], claims: [("iss", .string("TEAM")), ("iat", .int(1_700_000_000))])
        let parts = jwt.split(separator: ".")
        XCTAssertEqual(parts.count, 3)
        XCTAssertEqual(String(decoding: Base64URL.decode(String(parts[0]))!, as: UTF8.self), #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        XCTAssertEqual(String(decoding: Base64URL.decode(String(parts[1]))!, as: UTF8.self), #"{"iss":"TEAM","iat":1700000000}"#)
        XCTAssertEqual(Base64URL.decode(String(parts[2]))?.count, 64, "ES256 signatures are raw r||s")
        let decoded = try DecodedJWT(jwt)
        XCTAssertNoThrow(try decoded.verify(es256: key.publicKey))
        XCTAssertThrowsError(try decoded.verify(es256: P256.Signing.PrivateKey().publicKey))
    }

    func testRS256RoundTrip() throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let jwt = try JWTSigner(key: .rs256(key)).sign(header: [("typ", .string("JWT"))], claims: [("aud", .string("https://x/token"))])
        let decoded = try DecodedJWT(jwt)
        XCTAssertEqual(decoded.algorithm, "RS256")
        XCTAssertNoThrow(try decoded.verify(rs256: key.publicKey))
        XCTAssertThrowsError(try decoded.verify(es256: P256.Signing.PrivateKey().publicKey))
    }

    func testBase64URL() {
        XCTAssertEqual(Base64URL.encode([0xfb, 0xff, 0xfe]), "-__-")
        XCTAssertEqual(Base64URL.decode("-__-"), Data([0xfb, 0xff, 0xfe]))
        XCTAssertEqual(Base64URL.decode("YQ"), Data("a".utf8))
        XCTAssertNil(Base64URL.decode("a"))
    }

    /// The table-driven codec against Foundation's base64 on every length and on the edge cases.
    func testBase64URLMatchesFoundation() {
        for n in 0..<70 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let standard = Data(bytes).base64EncodedString()
            let url = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            XCTAssertEqual(Base64URL.encode(bytes), url)
            XCTAssertEqual(Base64URL.encode(Data(bytes)), url)
            XCTAssertEqual(Base64URL.decodeBytes(url), bytes)
            XCTAssertEqual(Base64URL.decodeBytes(standard), bytes, "standard base64 with padding is accepted")
            XCTAssertEqual(Base64URL.decodeBytes(" \n\(url)\t "), bytes, "surrounding whitespace is ignored")
        }
        XCTAssertEqual(Base64URL.decodeBytes(""), [])
        XCTAssertEqual(Base64URL.decodeBytes("YQ==="), [0x61], "any number of trailing = is ignored")
        XCTAssertEqual(Base64URL.decodeBytes("\u{A0}YQ\u{2028}"), [0x61], "Unicode whitespace at the ends (slow path)")
        XCTAssertNil(Base64URL.decodeBytes("Y Q"))
        XCTAssertNil(Base64URL.decodeBytes("YQé"))
        XCTAssertNil(Base64URL.decodeBytes("abcde"))
        XCTAssertNil(Base64URL.decodeBytes("ab!d"))
        // Odd inputs get exactly the previous (Foundation) answers.
        for odd in ["YQ=x", "QR", "QUJ", "YR==", "QUJD=", "=", "==YQ", "Y\nQ", "\u{A0}", "YQ\u{A0}=="] {
            XCTAssertEqual(Base64URL.decodeBytes(odd), Base64URL.slowDecode(odd), odd)
        }
    }

    func testControlCharactersAreEscapedInJWTJSON() {
        XCTAssertEqual(JWTSigner.jsonString("a\u{1}b\u{1f}\"\n"), #""a\u0001b\u001f\"\n""#)
    }

    func testKeyLoadingErrorsNameTheProblem() {
        XCTAssertThrowsError(try KeyLoading.p256PrivateKey(pem: "not a key")) { e in
            XCTAssertTrue("\(e)".contains("P-256"))
        }
        XCTAssertThrowsError(try KeyLoading.p256PrivateKey(path: "/nonexistent/key.p8")) { e in
            XCTAssertTrue("\(e)".contains("/nonexistent/key.p8"))
        }
    }
}
