import Crypto
import Foundation
import Harmony
import Huawei
import HuaweiMock
import MockKit
import NIOConcurrencyHelpers
import Signing
import _CryptoExtras

/// A throwaway HarmonyOS Push Kit service-account key, in the JSON shape the API Console of HUAWEI
/// Developers issues (`project_id`, `key_id`, `private_key`, `sub_account`, `token_uri`, ...).
public struct TestHarmonyServiceAccount: Sendable {
    public let projectID: String
    public let keyID: String
    public let subAccount: String
    /// The JWT audience the mock expects (the key file's `token_uri`).
    public let tokenURI: String
    public let privateKey: _RSA.Signing.PrivateKey

    public var publicKey: _RSA.Signing.PublicKey { privateKey.publicKey }
    /// `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo), what a JWT library verifies with.
    public var publicKeyPEM: String { publicKey.pemRepresentation }

    public init(projectID: String, keyID: String, subAccount: String, tokenURI: String, privateKey: _RSA.Signing.PrivateKey) {
        self.projectID = projectID
        self.keyID = keyID
        self.subAccount = subAccount
        self.tokenURI = tokenURI
        self.privateKey = privateKey
    }

    public static func generate(
        projectID: String = "101234567", tokenURI: String = "https://oauth-login.cloud.huawei.com/oauth2/v3/token"
    ) throws -> TestHarmonyServiceAccount {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let keyID = SHA256.hash(data: key.publicKey.derRepresentation).prefix(16).map { String(format: "%02x", $0) }.joined()
        let sub = String(UInt64.random(in: 100_000_000_000...999_999_999_999))
        return TestHarmonyServiceAccount(projectID: projectID, keyID: keyID, subAccount: sub, tokenURI: tokenURI, privateKey: key)
    }

    /// The key file's JSON.
    public var json: String {
        let object: [String: String] = [
            "project_id": projectID,
            "key_id": keyID,
            "private_key": privateKey.pkcs8PEMRepresentation + "\n",
            "sub_account": subAccount,
            "auth_uri": "https://oauth-login.cloud.huawei.com/oauth2/v3/authorize",
            "token_uri": tokenURI,
            "auth_provider_cert_uri": "https://oauth-login.cloud.huawei.com/oauth2/v3/certs",
            "client_cert_uri": "https://oauth-login.cloud.huawei.com/oauth2/v3/x509?client_id=",
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}

/// HarmonyOS Push Kit v3 (`POST /v3/{projectId}/messages:send`) on the HMS mock's server, with
/// HMS's answers and scripts (`MockHMS.Options.harmony` adds it): the bearer must be a PS256 JWT of
/// the service account, the path its project, the `push-type` header one v3 documents, the body
/// v3's shape for that type.
public final class MockHarmonyV3: MockHMSRoute {
    public let account: TestHarmonyServiceAccount

    struct State {
        var v3Requests = 0
        var v3Rejections: [String] = []
        var v3Messages: [MockHMS.RecordedV3Message] = []
    }

    let state = NIOLockedValueBox(State())

    public init(account: TestHarmonyServiceAccount) { self.account = account }

    public func reset() { state.withLockedValue { $0 = State() } }

    public func handle(_ request: MockRequest, path: String, mock: MockHMS) -> MockResponse? {
        guard path.hasPrefix("/v3/") && path.hasSuffix("/messages:send") else { return nil }
        return handleV3Send(request, path: path, mock: mock)
    }
}

extension MockHMS {
    /// One message accepted by the v3 endpoint's checks (whatever was answered).
    public struct RecordedV3Message: Sendable {
        /// The `push-type` header.
        public var pushType: Int
        public var token: String
        /// `payload`, re-serialised with sorted keys.
        public var payloadJSON: String
        /// `pushOptions`, re-serialised with sorted keys ("{}" when absent).
        public var pushOptionsJSON: String
        public var body: [UInt8]
        /// The bearer JWT as received.
        public var jwt: String
        public var reply: Reply
        public var receivedAt: Date = Date()

        public var payload: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(payloadJSON.utf8))) as? [String: Any] ?? [:] }
        public var pushOptions: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(pushOptionsJSON.utf8))) as? [String: Any] ?? [:]
        }
    }

    /// The push types Push Kit v3 documents: alert, card, voice (extension), background, live view, VoIP call.
    public static let v3PushTypes: Set<Int> = [0, 1, 2, 6, 7, 10]

    var harmonyRoute: MockHarmonyV3? { options.routes.lazy.compactMap { $0 as? MockHarmonyV3 }.first }
    public var v3RequestCount: Int { harmonyRoute?.state.withLockedValue { $0.v3Requests } ?? 0 }
    public var v3Rejections: [String] { harmonyRoute?.state.withLockedValue { $0.v3Rejections } ?? [] }
    public var v3Messages: [RecordedV3Message] { harmonyRoute?.state.withLockedValue { $0.v3Messages } ?? [] }

    /// Why the bearer is not a JWT of `account` valid now (nil: fine): PS256 over the account's key,
    /// `kid` its `key_id`, `iss` its `sub_account`, `aud` its `token_uri`, at most an hour of validity.
    public static func jwtProblem(_ bearer: String, account: TestHarmonyServiceAccount, now: Date = Date()) -> (expired: Bool, why: String)? {
        let jwt: DecodedJWT
        do { jwt = try DecodedJWT(bearer) } catch { return (false, "not a JWT: \(error)") }
        guard jwt.header["typ"] as? String == "JWT" else { return (false, "header typ must be JWT") }
        guard jwt.header["kid"] as? String == account.keyID else { return (false, "header kid is not the key's key_id") }
        do { try jwt.verify(ps256: account.publicKey) } catch { return (false, "\(error)") }
        guard jwt.claims["iss"] as? String == account.subAccount else { return (false, "iss is not the key's sub_account") }
        guard jwt.claims["aud"] as? String == account.tokenURI else { return (false, "aud is not the key's token_uri") }
        guard let iat = (jwt.claims["iat"] as? NSNumber)?.int64Value, let exp = (jwt.claims["exp"] as? NSNumber)?.int64Value else {
            return (false, "iat and exp must be numbers")
        }
        let t = Int64(now.timeIntervalSince1970)
        guard exp > iat, exp - iat <= 3600 else { return (false, "exp - iat must be 1 to 3600 seconds") }
        guard iat <= t + 60 else { return (false, "iat is in the future") }
        guard exp > t else { return (true, "JWT expired") }
        return nil
    }

    /// Why `payload` is not one Push Kit takes with this push type (nil: fine).
    public static func v3PayloadProblem(_ payload: [String: Any], pushType: Int) -> String? {
        switch pushType {
        case 0, 2:
            guard let n = payload["notification"] as? [String: Any] else { return "payload.notification is required for push-type \(pushType)" }
            for key in ["title", "body"] {
                guard let v = n[key] as? String, !v.isEmpty else { return "payload.notification.\(key) must be a non-empty string" }
            }
            for key in ["image", "category"] where n[key] != nil && !(n[key] is String) { return "payload.notification.\(key) must be a string" }
            guard let click = n["clickAction"] as? [String: Any], let type = (click["actionType"] as? NSNumber)?.intValue, (0...3).contains(type)
            else { return "payload.notification.clickAction.actionType is required (0 to 3)" }
            if let d = click["data"], !(d is [String: Any]) { return "payload.notification.clickAction.data must be an object" }
            if let badge = n["badge"] {
                guard let b = badge as? [String: Any], let set = (b["setNum"] as? NSNumber)?.intValue ?? (b["addNum"] as? NSNumber)?.intValue,
                    (0...99).contains(set)
                else { return "badge setNum/addNum ranges from 0 to 99" }
            }
        case 6, 10:
            if payload["notification"] != nil { return "payload.notification is not allowed for push-type \(pushType)" }
            guard let extra = payload["extraData"] as? String, !extra.isEmpty else {
                return "payload.extraData must be a non-empty string for push-type \(pushType)"
            }
        default:
            if payload.isEmpty { return "payload must not be empty for push-type \(pushType)" }
        }
        return nil
    }
}

extension MockHarmonyV3 {
    func handleV3Send(_ request: MockRequest, path: String, mock: MockHMS) -> MockResponse {
        func refuse(_ response: MockResponse, _ why: String) -> MockResponse {
            state.withLockedValue {
                $0.v3Requests += 1
                $0.v3Rejections.append(why)
            }
            return response
        }
        func bad(_ message: String, code: String = "80100003") -> MockResponse {
            refuse(MockHMS.hmsAnswer(400, code: code, msg: "Illegal payload, \(message)"), message)
        }
        guard request.method == "POST" else { return refuse(MockResponse(status: 405), "method \(request.method)") }
        let auth = request.header("authorization") ?? ""
        let bearer = auth.hasPrefix("Bearer ") ? String(auth.dropFirst(7)) : ""
        guard !bearer.isEmpty else { return refuse(MockHMS.hmsAnswer(401, code: "80200001", msg: "Oauth authentication error"), "missing bearer") }
        if let problem = MockHMS.jwtProblem(bearer, account: account) {
            return refuse(
                MockHMS.hmsAnswer(
                    401, code: problem.expired ? "80200003" : "80200001", msg: problem.expired ? "Oauth Token expired." : "Oauth authentication error"
                ),
                "JWT: \(problem.why)")
        }
        let projectID = path.dropFirst("/v3/".count).dropLast("/messages:send".count)
        guard projectID == account.projectID else {
            return refuse(MockHMS.hmsAnswer(401, code: "80200001", msg: "Oauth authentication error"), "project id \(projectID) in the path")
        }
        guard let header = request.header("push-type"), let pushType = Int(header), MockHMS.v3PushTypes.contains(pushType) else {
            return bad("push-type header missing or not one of \(MockHMS.v3PushTypes.sorted())", code: "80100001")
        }
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/json") else {
            return bad("content-type must be application/json")
        }
        if request.body.count > MockHMS.maxMessageBytes {
            return refuse(
                MockHMS.hmsAnswer(200, code: "80300008", msg: "The message body size exceeds the default value"),
                "message of \(request.body.count) bytes")
        }
        guard let top = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            return bad("the body is not a JSON object")
        }
        for key in top.keys where !["payload", "target", "pushOptions"].contains(key) { return bad("unknown field \(key)") }
        guard let payload = top["payload"] as? [String: Any] else { return bad("payload is required") }
        guard let target = top["target"] as? [String: Any], let list = target["token"] as? [Any], let tokens = list as? [String],
            (1...1000).contains(tokens.count)
        else {
            return refuse(
                MockHMS.hmsAnswer(200, code: "80300010", msg: "The number of tokens in the message body exceeds the default value"),
                "target.token must be an array of 1 to 1000 strings")
        }
        if tokens.contains(where: { !MockHMS.isTokenFormat($0) }) {
            return refuse(MockHMS.hmsAnswer(200, code: "80300007", msg: "All the tokens are invalid"), "malformed token")
        }
        let rawOptions = top["pushOptions"] ?? [String: Any]()
        guard let pushOptions = rawOptions as? [String: Any] else { return bad("pushOptions must be an object") }
        if let ttl = pushOptions["ttl"], !((ttl as? NSNumber).map { $0.doubleValue >= 0 && $0.doubleValue == $0.doubleValue.rounded() } ?? false) {
            return bad("pushOptions.ttl must be a whole number of seconds")
        }
        if let t = pushOptions["testMessage"], !(t is Bool) { return bad("pushOptions.testMessage must be a boolean") }
        if let problem = MockHMS.v3PayloadProblem(payload, pushType: pushType) { return bad(problem) }

        let hooked = mock.options.hook?(tokens[0], request.body)
        let record = mock.options.recordRequests
        func sorted(_ o: [String: Any]) -> String {
            String(decoding: (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8), as: UTF8.self)
        }
        let payloadJSON = record ? sorted(payload) : ""
        let optionsJSON = record ? sorted(pushOptions) : ""
        let r = mock.nextReply(for: tokens[0], hooked: hooked)
        state.withLockedValue { s in
            s.v3Requests += 1
            if record {
                s.v3Messages.append(
                    MockHMS.RecordedV3Message(
                        pushType: pushType, token: tokens[0], payloadJSON: payloadJSON, pushOptionsJSON: optionsJSON, body: request.body, jwt: bearer,
                        reply: r))
            }
        }
        return mock.response(for: r, targets: tokens)
    }
}

extension MockHMS.Options {
    /// The HarmonyOS service account whose JWTs `/v3/{projectId}/messages:send` takes (nil: no v3
    /// route; it answers 404).
    public var harmony: TestHarmonyServiceAccount? {
        get { routes.lazy.compactMap { $0 as? MockHarmonyV3 }.first?.account }
        set {
            routes.removeAll { $0 is MockHarmonyV3 }
            if let account = newValue { routes.append(MockHarmonyV3(account: account)) }
        }
    }
}
