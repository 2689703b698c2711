import Crypto
import Foundation
import Signing
import XCTest

@testable import MockProviders
@testable import WebPush

func b64u(_ s: String) -> [UInt8] {
    guard let d = Base64URL.decode(s.filter { !$0.isWhitespace }) else { fatalError("bad base64url in test vector: \(s)") }
    return Array(d)
}

/// RFC 8291 section 5 / Appendix A (inputs and intermediate values, whitespace removed).
enum RFC8291 {
    static let plaintext = "When I grow up, I want to be a watermelon"
    static let asPublic = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let uaPublic = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let authSecret = "BTBZMqHH6r4Tts7J_aSIgg"
    static let ecdhSecret = "kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"
    static let ikm = "S4lYMb_L0FxCeq0WhDx813KgSYqU26kOyzWUdsXYyrg"
    static let cek = "oIhVW04MRdy2XN9CiKLxTg"
    static let body =
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml"
        + "mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT"
        + "pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
}

final class WebPushCryptoTests: XCTestCase {
    func testRFC8291AppendixAByteForByte() throws {
        let asKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: b64u(RFC8291.asPrivate))
        XCTAssertEqual(Array(asKey.publicKey.x963Representation), b64u(RFC8291.asPublic))
        let receiver = try WebPushReceiverKeys(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret)
        let body = try WebPushCrypto.encrypt(Array(RFC8291.plaintext.utf8), for: receiver, senderKey: asKey, salt: b64u(RFC8291.salt))
        XCTAssertEqual(Base64URL.encode(body), RFC8291.body)
        XCTAssertEqual(body, b64u(RFC8291.body))
    }

    func testRFC8291IntermediateValues() throws {
        let asKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: b64u(RFC8291.asPrivate))
        let ua = try P256.KeyAgreement.PublicKey(x963Representation: b64u(RFC8291.uaPublic))
        let shared = try asKey.sharedSecretFromKeyAgreement(with: ua)
        XCTAssertEqual(shared.withUnsafeBytes { [UInt8]($0) }, b64u(RFC8291.ecdhSecret))
        let keys = shared.withUnsafeBytes {
            WebPushCrypto.deriveKeys(
                ecdhSecret: $0, authSecret: b64u(RFC8291.authSecret), uaPublic: b64u(RFC8291.uaPublic),
                asPublic: b64u(RFC8291.asPublic), salt: b64u(RFC8291.salt))
        }
        XCTAssertEqual(keys.ikm, b64u(RFC8291.ikm))
        XCTAssertEqual(keys.contentEncryptionKey, b64u(RFC8291.cek))
        XCTAssertEqual(keys.nonce.count, 12)
        // The body's header carries salt, rs = 4096, idlen = 65 and as_public.
        let body = b64u(RFC8291.body)
        XCTAssertEqual(Array(body[16..<21]), [0, 0, 0x10, 0, 65])
    }

    func testDecryptsRFCBodyWithBothDecryptors() throws {
        let ua = try P256.KeyAgreement.PrivateKey(rawRepresentation: b64u(RFC8291.uaPrivate))
        let plain = try WebPushCrypto.decrypt(b64u(RFC8291.body), receiverPrivateKey: ua, authSecret: b64u(RFC8291.authSecret))
        XCTAssertEqual(String(decoding: plain, as: UTF8.self), RFC8291.plaintext)
        let mockPlain = try MockWebPush.decrypt(b64u(RFC8291.body), privateKey: ua, authSecret: b64u(RFC8291.authSecret))
        XCTAssertEqual(String(decoding: mockPlain, as: UTF8.self), RFC8291.plaintext)
    }

    func testFreshKeyAndSaltPerMessageAndRoundTrip() throws {
        let sub = TestWebPushSubscriber(id: "x")
        let receiver = try WebPushReceiverKeys(sub.keys)
        let message = Array("{\"title\":\"hi\",\"message\":\"über\"}".utf8)
        let a = try WebPushCrypto.encrypt(message, for: receiver)
        let b = try WebPushCrypto.encrypt(message, for: receiver)
        XCTAssertNotEqual(Array(a[0..<16]), Array(b[0..<16]), "salt must be fresh per message")
        XCTAssertNotEqual(Array(a[21..<86]), Array(b[21..<86]), "sender key must be fresh per message")
        XCTAssertEqual(a.count, 86 + message.count + 1 + 16)
        XCTAssertEqual(try WebPushCrypto.decrypt(a, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret), message)
        XCTAssertEqual(try MockWebPush.decrypt(b, privateKey: sub.privateKey, authSecret: sub.authSecret), message)
    }

    func testMaximumPlaintextFillsExactly4096Bytes() throws {
        let sub = TestWebPushSubscriber(id: "x")
        let receiver = try WebPushReceiverKeys(sub.keys)
        let body = try WebPushCrypto.encrypt([UInt8](repeating: 0x61, count: 3993), for: receiver)
        XCTAssertEqual(body.count, 4096)
        XCTAssertEqual(try WebPushCrypto.decrypt(body, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret).count, 3993)
        XCTAssertThrowsError(try WebPushCrypto.encrypt([UInt8](repeating: 0x61, count: 3994), for: receiver)) { error in
            XCTAssertEqual(error as? WebPushCryptoError, .plaintextTooLarge(size: 3994, limit: 3993))
        }
        let empty = try WebPushCrypto.encrypt([], for: receiver)
        XCTAssertEqual(try WebPushCrypto.decrypt(empty, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret), [])
    }

    func testTamperedBodyWrongKeyAndWrongAuthFail() throws {
        let sub = TestWebPushSubscriber(id: "x")
        let body = try WebPushCrypto.encrypt(Array("secret".utf8), for: try WebPushReceiverKeys(sub.keys))
        var tampered = body
        tampered[tampered.count - 1] ^= 0x40
        XCTAssertThrowsError(try WebPushCrypto.decrypt(tampered, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret))
        XCTAssertThrowsError(try WebPushCrypto.decrypt(body, receiverPrivateKey: .init(), authSecret: sub.authSecret))
        XCTAssertThrowsError(try WebPushCrypto.decrypt(body, receiverPrivateKey: sub.privateKey, authSecret: [UInt8](repeating: 1, count: 16)))
        XCTAssertThrowsError(try WebPushCrypto.decrypt(Array(body.prefix(40)), receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret))
    }

    func testMultiRecordBodyDecrypts() throws {
        // Build a 2-record RFC 8188 body by hand (rs = 40): record 0 ends with 0x01, record 1 with 0x02.
        let sub = TestWebPushSubscriber(id: "x")
        let asKey = P256.KeyAgreement.PrivateKey()
        let salt = [UInt8](repeating: 7, count: 16)
        let shared = try asKey.sharedSecretFromKeyAgreement(with: sub.privateKey.publicKey)
        let asPub = Array(asKey.publicKey.x963Representation)
        let keys = shared.withUnsafeBytes {
            WebPushCrypto.deriveKeys(
                ecdhSecret: $0, authSecret: sub.authSecret, uaPublic: Array(sub.privateKey.publicKey.x963Representation), asPublic: asPub, salt: salt)
        }
        let rs = 40
        let part1 = Array("0123456789abcdefghijklm".utf8)  // 23 + 1 delimiter = 24 = rs - 16
        let part2 = Array("tail".utf8)
        var body = salt + [0, 0, 0, UInt8(rs), 65] + asPub
        for (i, (part, delim)) in [(part1, UInt8(1)), (part2, UInt8(2))].enumerated() {
            var nonce = keys.nonce
            nonce[11] ^= UInt8(i)
            let sealed = try AES.GCM.seal(part + [delim], using: SymmetricKey(data: keys.contentEncryptionKey), nonce: AES.GCM.Nonce(data: nonce))
            body += Array(sealed.ciphertext) + Array(sealed.tag)
        }
        XCTAssertEqual(try WebPushCrypto.decrypt(body, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret), part1 + part2)
        XCTAssertEqual(try MockWebPush.decrypt(body, privateKey: sub.privateKey, authSecret: sub.authSecret), part1 + part2)
    }

    func testReceiverKeyParsing() {
        XCTAssertThrowsError(try WebPushReceiverKeys(p256dh: "AAAA", auth: RFC8291.authSecret))
        XCTAssertThrowsError(try WebPushReceiverKeys(p256dh: RFC8291.uaPublic, auth: "AAAA"))
        XCTAssertThrowsError(try WebPushReceiverKeys(p256dh: "!!", auth: RFC8291.authSecret))
        // A 65-byte string starting with 0x04 that is not on the curve.
        XCTAssertThrowsError(try WebPushReceiverKeys(p256dh: Base64URL.encode([4] + [UInt8](repeating: 1, count: 64)), auth: RFC8291.authSecret))
        XCTAssertNoThrow(try WebPushReceiverKeys(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret))
    }

    func testReceiverKeyCacheReturnsTheSameKeysAndStaysBounded() throws {
        let cache = ReceiverKeyCache(capacity: 4)
        let a = try cache.keys(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret)
        let b = try cache.keys(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret)
        XCTAssertEqual(a.publicKeyBytes, b64u(RFC8291.uaPublic))
        XCTAssertEqual(b.authSecret, b64u(RFC8291.authSecret))
        XCTAssertThrowsError(try cache.keys(p256dh: "AAAA", auth: RFC8291.authSecret))
        XCTAssertEqual(cache.count, 1, "invalid keys are not cached")
        for i in 0..<10 {
            let ua = P256.KeyAgreement.PrivateKey()
            let auth = Base64URL.encode([UInt8](repeating: UInt8(i), count: 16))
            _ = try cache.keys(p256dh: Base64URL.encode(ua.publicKey.x963Representation), auth: auth)
            XCTAssertLessThanOrEqual(cache.count, 4)
        }
        // Through the public entry point: same answers as parsing.
        let sub = TestWebPushSubscriber(id: "c")
        XCTAssertEqual(try WebPushReceiverKeys.cached(sub.keys).publicKeyBytes, try WebPushReceiverKeys(sub.keys).publicKeyBytes)
    }

    func testEphemeralKeysAndSaltsDifferPerMessage() throws {
        let sub = TestWebPushSubscriber(id: "e")
        let receiver = try WebPushReceiverKeys(sub.keys)
        let one = try WebPushCrypto.encrypt(Array("x".utf8), for: receiver)
        let two = try WebPushCrypto.encrypt(Array("x".utf8), for: receiver)
        XCTAssertNotEqual(Array(one[0..<16]), Array(two[0..<16]), "fresh salt")
        XCTAssertNotEqual(Array(one[21..<86]), Array(two[21..<86]), "fresh sender key")
        for body in [one, two] {
            XCTAssertEqual(try WebPushCrypto.decrypt(body, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret), Array("x".utf8))
        }
    }
}
