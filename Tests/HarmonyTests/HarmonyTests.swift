import Foundation
import Huawei
import MockProviders
import PushgateCore
import Signing
import XCTest

@testable import Harmony

/// HarmonyOS Push Kit v3 pieces without a network: the service-account key file, the JWT and its
/// reuse, the push type and payload a notification maps to.
final class HarmonyTests: XCTestCase {
    func testServiceAccountFileParsesAndNeverShowsTheKey() throws {
        let account = try TestHarmonyServiceAccount.generate(projectID: "101999")
        let parsed = try HarmonyServiceAccount(json: Array(account.json.utf8))
        XCTAssertEqual(parsed.projectID, "101999")
        XCTAssertEqual(parsed.keyID, account.keyID)
        XCTAssertEqual(parsed.subAccount, account.subAccount)
        XCTAssertEqual(parsed.tokenURI, account.tokenURI)
        XCTAssertFalse(parsed.description.contains("PRIVATE"))
        XCTAssertFalse(parsed.description.contains(account.keyID))

        var object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(account.json.utf8)) as? [String: String])
        for field in ["project_id", "key_id", "sub_account", "private_key"] {
            var o = object
            o.removeValue(forKey: field)
            let data = try JSONSerialization.data(withJSONObject: o)
            XCTAssertThrowsError(try HarmonyServiceAccount(json: Array(data))) { e in
                XCTAssertTrue("\(e)".contains(field), "\(e)")
            }
        }
        object["private_key"] = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
        XCTAssertThrowsError(try HarmonyServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: object)))) { e in
            XCTAssertTrue("\(e)".contains("private_key"), "\(e)")
            XCTAssertFalse("\(e)".contains("not a key"), "\(e)")
        }
        object["project_id"] = "../x"
        XCTAssertThrowsError(try HarmonyServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: object))))
        XCTAssertThrowsError(try HarmonyServiceAccount(json: Array("[1]".utf8)))
        XCTAssertThrowsError(try HarmonyServiceAccount(json: [UInt8](repeating: 0x20, count: HarmonyServiceAccount.maxFileBytes + 1)))
    }

    func testJWTIsPS256ReusedUntilNearExpiryAndReplacedWhenRefused() throws {
        let account = try TestHarmonyServiceAccount.generate()
        let parsed = try HarmonyServiceAccount(json: Array(account.json.utf8))
        let clock = TestClock(1_800_000_000)
        let source = HarmonyJWTSource(account: parsed, refreshMargin: 300, now: { clock.now })
        let first = try source.token()
        let jwt = try DecodedJWT(first)
        XCTAssertEqual(jwt.header["alg"] as? String, "PS256")
        XCTAssertEqual(jwt.header["typ"] as? String, "JWT")
        XCTAssertEqual(jwt.header["kid"] as? String, account.keyID)
        XCTAssertNoThrow(try jwt.verify(ps256: account.publicKey))
        XCTAssertThrowsError(try jwt.verify(rs256: account.publicKey), "not PKCS#1 v1.5")
        XCTAssertEqual(jwt.claims["iss"] as? String, account.subAccount)
        XCTAssertEqual(jwt.claims["aud"] as? String, account.tokenURI)
        XCTAssertEqual(jwt.claims["iat"] as? Int, 1_800_000_000)
        XCTAssertEqual(jwt.claims["exp"] as? Int, 1_800_003_600)
        XCTAssertNil(MockHMS.jwtProblem(first, account: account, now: Date(timeIntervalSince1970: 1_800_000_010)))
        XCTAssertEqual(MockHMS.jwtProblem(first, account: account, now: Date(timeIntervalSince1970: 1_800_003_601))?.expired, true)

        clock.now = Date(timeIntervalSince1970: 1_800_003_299)
        XCTAssertEqual(try source.token(), first, "reused within the hour, outside the margin")
        clock.now = Date(timeIntervalSince1970: 1_800_003_300)
        let second = try source.token()
        XCTAssertNotEqual(second, first, "re-signed within the margin")
        XCTAssertEqual(source.signedCount, 2)
        source.invalidate(first)
        XCTAssertEqual(try source.token(), second, "an old token's refusal keeps the current one")
        source.invalidate(second)
        XCTAssertNotEqual(try source.token(), second)
        XCTAssertEqual(source.signedCount, 3)
    }

    func testPushTypesAndPayloads() throws {
        func n(_ edit: (inout PushNotification) -> Void) -> PushNotification {
            var x = PushNotification(platform: .harmony, tokens: ["tok"])
            edit(&x)
            return x
        }
        XCTAssertEqual(HarmonyMessageMapper.pushType(n { $0.message = "m" }), .alert)
        XCTAssertEqual(HarmonyMessageMapper.pushType(n { $0.data = JSONObject([("k", .int(1))]) }), .background)
        for (name, type) in [("alert", 0), ("card", 1), ("widget", 1), ("voice", 2), ("background", 6), ("liveview", 7), ("voip", 10), ("10", 10)] {
            XCTAssertEqual(HarmonyPushType(name: name)?.rawValue, type, name)
        }
        XCTAssertNil(HarmonyPushType(name: "3"))
        XCTAssertNil(HarmonyPushType(name: "bogus"))

        let alert = try HarmonyMessageMapper.prepare(
            n {
                $0.title = "T"
                $0.message = "M"
                $0.development = true
            })
        XCTAssertEqual(alert.pushType, .alert)
        let body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(alert.body(token: "tok\"q"))) as? [String: Any])
        XCTAssertEqual((body["target"] as? [String: Any])?["token"] as? [String], ["tok\"q"])
        XCTAssertEqual((body["pushOptions"] as? [String: Any])?["testMessage"] as? Bool, true)
        XCTAssertNil(MockHMS.v3PayloadProblem(try XCTUnwrap(body["payload"] as? [String: Any]), pushType: 0))

        let bg = try HarmonyMessageMapper.prepare(n { $0.data = JSONObject([("k", .string("v"))]) })
        let bgBody = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(bg.body(token: "tok"))) as? [String: Any])
        XCTAssertEqual((bgBody["payload"] as? [String: Any])?["extraData"] as? String, #"{"k":"v"}"#)

        XCTAssertTrue(
            HarmonyMessageMapper.problem(
                n {
                    $0.dryRun = true
                    $0.message = "m"
                    $0.title = "t"
                })?.hasPrefix("dry_run") == true)
        XCTAssertTrue(HarmonyMessageMapper.problem(n { $0.pushType = "liveview" })?.hasPrefix("harmony_payload") == true)
        XCTAssertThrowsError(
            try HarmonyMessageMapper.prepare(
                n {
                    $0.title = "t"
                    $0.message = String(repeating: "x", count: 4096)
                })
        ) { e in
            XCTAssertTrue("\(e)".contains("4096"), "\(e)")
        }
    }
}

/// A settable clock for the JWT source.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Date
    init(_ seconds: TimeInterval) { value = Date(timeIntervalSince1970: seconds) }
    var now: Date {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}
