import Foundation
import HTTP2Pool
import ProviderKit
import _CryptoExtras

/// A configuration problem that stops startup. `description` is one line naming the problem.
public struct FCMConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A Google service account (the JSON file downloaded from the Firebase console).
public struct ServiceAccount: Sendable {
    public var projectID: String
    public var privateKeyID: String
    public var clientEmail: String
    /// OAuth2 token endpoint used for the JWT bearer grant (normally `https://oauth2.googleapis.com/token`).
    public var tokenURI: String
    public var privateKey: _RSA.Signing.PrivateKey

    public init(projectID: String, privateKeyID: String, clientEmail: String, tokenURI: String, privateKey: _RSA.Signing.PrivateKey) {
        self.projectID = projectID
        self.privateKeyID = privateKeyID
        self.clientEmail = clientEmail
        self.tokenURI = tokenURI
        self.privateKey = privateKey
    }

    /// Parses service-account JSON text. `source` names where it came from, for the error message
    /// (e.g. `android.key_path /etc/pushgate/sa.json`).
    public init(json: String, source: String = "android.credential") throws(FCMConfigurationError) {
        try self.init(jsonBytes: Array(json.utf8), source: source)
    }

    public init(jsonBytes: [UInt8], source: String = "android.credential") throws(FCMConfigurationError) {
        func fail(_ why: String) -> FCMConfigurationError {
            FCMConfigurationError("FCM service account (\(source)): \(why)")
        }
        let trimmed = jsonBytes.drop(while: { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 })
        if trimmed.isEmpty { throw fail("empty, expected the service-account JSON") }
        let object: [String: Any]
        do {
            guard let o = try JSONSerialization.jsonObject(with: Data(jsonBytes)) as? [String: Any] else {
                throw fail("not a JSON object")
            }
            object = o
        } catch let e as FCMConfigurationError {
            throw e
        } catch {
            throw fail("not valid JSON")
        }
        if let type = object["type"] as? String, type != "service_account" {
            throw fail("\"type\" is \"\(oneLine(type))\", expected \"service_account\"")
        }
        func field(_ name: String) throws(FCMConfigurationError) -> String {
            guard let raw = object[name] else { throw fail("missing \"\(name)\"") }
            guard let s = raw as? String else { throw fail("\"\(name)\" must be a string") }
            let v = s.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !v.isEmpty else { throw fail("\"\(name)\" is empty") }
            return v
        }
        let projectID = try field("project_id")
        let privateKeyID = try field("private_key_id")
        let clientEmail = try field("client_email")
        let tokenURI = try field("token_uri")
        let pem = try field("private_key")
        guard let url = URL(string: tokenURI), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http", url.host != nil else {
            throw fail("\"token_uri\" is not an http(s) URL: \(oneLine(tokenURI))")
        }
        guard pem.contains("-----BEGIN PRIVATE KEY-----") else {
            if pem.contains("-----BEGIN RSA PRIVATE KEY-----") {
                throw fail("\"private_key\" is a PKCS#1 RSA key, expected an RSA PKCS#8 PEM (-----BEGIN PRIVATE KEY-----)")
            }
            throw fail("\"private_key\" is not an RSA PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----)")
        }
        let key: _RSA.Signing.PrivateKey
        do {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw fail("\"private_key\" is not an RSA PKCS#8 private key (\(oneLine("\(error)")))")
        }
        self.init(projectID: projectID, privateKeyID: privateKeyID, clientEmail: clientEmail, tokenURI: tokenURI, privateKey: key)
    }

    /// Reads and parses a service-account JSON file.
    public init(path: String, source: String? = nil) throws(FCMConfigurationError) {
        let src = source ?? path
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let why = FileManager.default.fileExists(atPath: path) ? "cannot read the file" : "file does not exist"
            throw FCMConfigurationError("FCM service account (\(src)): \(why)")
        }
        try self.init(jsonBytes: Array(data), source: src)
    }
}

/// The `android` section: where the service account comes from, the FCM endpoint, `max_retry`.
public struct FCMConfiguration: Sendable {
    public static let defaultEndpoint = "https://fcm.googleapis.com"
    public static let credentialsEnvironmentVariable = "GOOGLE_APPLICATION_CREDENTIALS"

    public var serviceAccount: ServiceAccount
    /// Base URL of the FCM API (scheme, host, optional port, optional path prefix).
    public var endpoint: String
    /// gorush `android.max_retry` (used by the dispatcher, not by the provider).
    public var maxRetry: Int

    public init(serviceAccount: ServiceAccount, endpoint: String = FCMConfiguration.defaultEndpoint, maxRetry: Int = 0) throws(FCMConfigurationError)
    {
        self.serviceAccount = serviceAccount
        self.endpoint = endpoint.isEmpty ? Self.defaultEndpoint : endpoint
        self.maxRetry = maxRetry
        _ = try Self.parseEndpoint(self.endpoint)
    }

    /// gorush's resolution: `android.credential` (the JSON text), else `android.key_path` (a file),
    /// else the file named by `GOOGLE_APPLICATION_CREDENTIALS`. Throws a one-line error otherwise.
    public init(
        keyPath: String?,
        credential: String?,
        endpoint: String? = nil,
        maxRetry: Int = 0,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(FCMConfigurationError) {
        let account: ServiceAccount
        if let credential, !credential.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            account = try ServiceAccount(json: credential, source: "android.credential")
        } else if let keyPath, !keyPath.isEmpty {
            account = try ServiceAccount(path: keyPath, source: "android.key_path \(keyPath)")
        } else if let env = environment[Self.credentialsEnvironmentVariable], !env.isEmpty {
            account = try ServiceAccount(path: env, source: "\(Self.credentialsEnvironmentVariable) \(env)")
        } else {
            throw FCMConfigurationError(
                "FCM: missing credentials: set android.key_path, android.credential or \(Self.credentialsEnvironmentVariable)")
        }
        try self.init(serviceAccount: account, endpoint: endpoint ?? Self.defaultEndpoint, maxRetry: maxRetry)
    }

    /// The pool target and the path prefix (no trailing slash) of the endpoint.
    static func parseEndpoint(_ endpoint: String) throws(FCMConfigurationError) -> (HTTP2Target, String) {
        guard let target = HTTP2Target(url: endpoint) else {
            throw FCMConfigurationError("FCM: android.endpoint is not an http(s) URL: \(oneLine(endpoint))")
        }
        return (target, HTTP2Target.pathPrefix(of: endpoint))
    }

    /// `POST` path of `messages:send` for this project.
    public var sendPath: String {
        let prefix = (try? Self.parseEndpoint(endpoint).1) ?? ""
        return "\(prefix)/v1/projects/\(serviceAccount.projectID)/messages:send"
    }
}
