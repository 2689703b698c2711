import Foundation
import HTTP2Pool
import Huawei
import Logging
import ProviderKit
import Signing
import _CryptoExtras

/// A HarmonyOS Push Kit service-account key: the JSON file the API Console of HUAWEI Developers
/// issues (`project_id`, `key_id`, `private_key` as a PKCS#8 RSA PEM, `sub_account`, `token_uri`,
/// ...). Parsed once at start; `description` never shows the private key.
public struct HarmonyServiceAccount: Sendable, CustomStringConvertible {
    /// The JWT audience Huawei's service-account JWTs name when the key file has no `token_uri`.
    public static let defaultTokenURI = "https://oauth-login.cloud.huawei.com/oauth2/v3/token"
    /// A key file longer than this is not a service-account key.
    public static let maxFileBytes = 64 * 1024

    public var projectID: String
    /// `key_id`: the JWT header's `kid`.
    public var keyID: String
    /// `sub_account`: the JWT's `iss`.
    public var subAccount: String
    /// `token_uri`: the JWT's `aud`.
    public var tokenURI: String
    public var privateKey: _RSA.Signing.PrivateKey

    public init(projectID: String, keyID: String, subAccount: String, tokenURI: String, privateKey: _RSA.Signing.PrivateKey) {
        self.projectID = projectID
        self.keyID = keyID
        self.subAccount = subAccount
        self.tokenURI = tokenURI
        self.privateKey = privateKey
    }

    /// Parses the key file's JSON. Errors name the field, never its value.
    public init(json: [UInt8]) throws(HuaweiConfigurationError) {
        guard json.count <= Self.maxFileBytes else {
            throw HuaweiConfigurationError("the service account file is over \(Self.maxFileBytes) bytes: not a Push Kit service-account key")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any] else {
            throw HuaweiConfigurationError("the service account file is not a JSON object")
        }
        func field(_ name: String) throws(HuaweiConfigurationError) -> String {
            guard let s = object[name] as? String, !s.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw HuaweiConfigurationError("the service account file has no \(name)")
            }
            guard !s.utf8.contains(where: { $0 < 0x20 && $0 != 0x0A && $0 != 0x0D }) else {
                throw HuaweiConfigurationError("the service account file's \(name) contains control characters")
            }
            return s
        }
        let projectID = try field("project_id").trimmingCharacters(in: .whitespaces)
        guard projectID.utf8.count <= HuaweiConfiguration.maxAppIDLength, projectID.utf8.allSatisfy(HuaweiConfiguration.isAppIDByte) else {
            throw HuaweiConfigurationError(
                "the service account file's project_id must be at most \(HuaweiConfiguration.maxAppIDLength) letters, digits, '-', '_' or '.'")
        }
        let keyID = try field("key_id")
        let subAccount = try field("sub_account")
        guard keyID.utf8.count <= 256, subAccount.utf8.count <= 256, !keyID.contains("\n"), !subAccount.contains("\n") else {
            throw HuaweiConfigurationError("the service account file's key_id or sub_account is not one line of at most 256 bytes")
        }
        let pem = try field("private_key")
        let key: _RSA.Signing.PrivateKey
        do { key = try _RSA.Signing.PrivateKey(pemRepresentation: pem) } catch {
            throw HuaweiConfigurationError("the service account file's private_key is not an RSA private key in PEM")
        }
        guard key.keySizeInBits >= 2048 else {
            throw HuaweiConfigurationError("the service account file's private_key is shorter than 2048 bits")
        }
        let tokenURI = (object["token_uri"] as? String).flatMap { $0.isEmpty ? nil : $0 } ?? Self.defaultTokenURI
        self.init(projectID: projectID, keyID: keyID, subAccount: subAccount, tokenURI: tokenURI, privateKey: key)
    }

    /// Reads and parses the key file at `path`.
    public init(path: String) throws(HuaweiConfigurationError) {
        let data: Data
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            if let size = attributes[.size] as? NSNumber, size.intValue > Self.maxFileBytes {
                throw HuaweiConfigurationError("the service account file is over \(Self.maxFileBytes) bytes")
            }
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch let e as HuaweiConfigurationError {
            throw e
        } catch {
            throw HuaweiConfigurationError("cannot read the service account file \(oneLine(path)): \(oneLine(error.localizedDescription))")
        }
        try self.init(json: Array(data))
    }

    /// Without the private key.
    public var description: String {
        "HarmonyServiceAccount(projectID: \(projectID), keyID: [REDACTED], subAccount: \(subAccount), tokenURI: \(tokenURI), privateKey: [REDACTED])"
    }
}

/// The `harmony` section: the service account, the Push Kit endpoint (overridable for tests and
/// proxies), the project id (the key file's unless set), `max_retry`.
public struct HarmonyConfiguration: Sendable, CustomStringConvertible {
    public static let defaultEndpoint = "https://push-api.cloud.huawei.com"

    public var serviceAccount: HarmonyServiceAccount
    /// The path segment of `/v3/{projectId}/messages:send`.
    public var projectID: String
    public var endpoint: String
    public var maxRetry: Int

    public init(
        serviceAccount: HarmonyServiceAccount, projectID: String = "", endpoint: String = HarmonyConfiguration.defaultEndpoint,
        maxRetry: Int = 0
    ) throws(HuaweiConfigurationError) {
        let id = projectID.trimmingCharacters(in: .whitespaces)
        if !id.isEmpty {
            guard id.utf8.count <= HuaweiConfiguration.maxAppIDLength, id.utf8.allSatisfy(HuaweiConfiguration.isAppIDByte) else {
                throw HuaweiConfigurationError(
                    "harmony.project_id must be at most \(HuaweiConfiguration.maxAppIDLength) letters, digits, '-', '_' or '.'")
            }
        }
        self.serviceAccount = serviceAccount
        self.projectID = id.isEmpty ? serviceAccount.projectID : id
        self.endpoint = endpoint.isEmpty ? Self.defaultEndpoint : endpoint
        self.maxRetry = maxRetry
        _ = try HuaweiConfiguration.parseEndpoint(self.endpoint, key: "harmony.endpoint")
    }

    /// `POST` path of Push Kit v3's `messages:send`: `{prefix}/v3/{projectId}/messages:send`.
    public var sendPath: String {
        let prefix = (try? HuaweiConfiguration.parseEndpoint(endpoint, key: "harmony.endpoint").1) ?? ""
        return "\(prefix)/v3/\(projectID)/messages:send"
    }

    public var description: String {
        "HarmonyConfiguration(projectID: \(projectID), endpoint: \(endpoint), serviceAccount: \(serviceAccount), maxRetry: \(maxRetry))"
    }
}

/// The service-account JWT Push Kit v3 takes as its bearer token: header
/// `{"alg":"PS256","kid":<key_id>,"typ":"JWT"}`, claims `{"iss":<sub_account>,"aud":<token_uri>,
/// "iat":..,"exp":..}`, signed with SHA256withRSA/PSS. One token is shared by every send until
/// `refreshMargin` before it expires (Huawei advises one hour of validity and reusing the JWT within
/// it); a token Push Kit refused is dropped (`invalidate`).
public final class HarmonyJWTSource: @unchecked Sendable {  // state behind `lock`
    /// Huawei's advised validity.
    public static let lifetime: Int64 = 3600

    let account: HarmonyServiceAccount
    let signer: JWTSigner
    let refreshMargin: Int64
    let now: @Sendable () -> Date
    private let lock = NSLock()
    private var cached: (token: String, expires: Int64)?
    private var signed = 0

    public init(account: HarmonyServiceAccount, refreshMargin: Int64 = 300, now: @escaping @Sendable () -> Date = { Date() }) {
        self.account = account
        self.signer = JWTSigner(key: .ps256(account.privateKey))
        self.refreshMargin = refreshMargin
        self.now = now
    }

    /// The shared JWT, signed anew when there is none or it is within `refreshMargin` of its expiry.
    public func token() throws -> String {
        let t = Int64(now().timeIntervalSince1970.rounded(.down))
        return try lock.withLock {
            if let c = cached, t < c.expires - refreshMargin { return c.token }
            let jwt = try signer.sign(
                header: [("kid", .string(account.keyID)), ("typ", .string("JWT"))],
                claims: [
                    ("iss", .string(account.subAccount)), ("aud", .string(account.tokenURI)), ("iat", .int(t)),
                    ("exp", .int(t + Self.lifetime)),
                ])
            cached = (jwt, t + Self.lifetime)
            signed += 1
            return jwt
        }
    }

    /// Drops `token` if it is the shared one: the next send signs a new one.
    public func invalidate(_ token: String) {
        lock.withLock { if cached?.token == token { cached = nil } }
    }

    /// JWTs signed so far.
    public var signedCount: Int { lock.withLock { signed } }
}

extension HarmonyJWTSource: BearerTokenSource {
    /// The shared JWT; one that cannot be signed fails the send for good (the key was checked at start).
    public func bearer(name: String, logger: Logger) async -> Result<String, BearerUnavailable> {
        do { return .success(try token()) } catch {
            return .failure(BearerUnavailable(.permanent(reason: "HarmonyOS service-account JWT could not be signed", status: nil)))
        }
    }
}
