import Foundation
import HTTP2Pool
import ProviderKit

/// A configuration problem that stops startup. `description` is one line naming the problem; it
/// never contains `huawei.appsecret`.
public struct HuaweiConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The `huawei` section: the app's OAuth 2.0 client credentials, the HMS push endpoint and the
/// token endpoint (overridable for tests and proxies), `max_retry`.
public struct HuaweiConfiguration: Sendable, CustomStringConvertible {
    public static let defaultEndpoint = "https://push-api.cloud.huawei.com"
    public static let defaultTokenURL = "https://oauth-login.cloud.huawei.com/oauth2/v3/token"
    /// Longest `appid` accepted (HMS app ids are decimal numbers of about ten digits).
    public static let maxAppIDLength = 128

    /// `huawei.appid`: the OAuth `client_id` and the path segment of `messages:send`.
    public var appID: String
    /// `huawei.appsecret`: the OAuth `client_secret`. Never logged, never in an error.
    public var appSecret: String
    /// Base URL of the push API (scheme, host, optional port, optional path prefix).
    public var endpoint: String
    /// The OAuth 2.0 token endpoint (client-credentials grant).
    public var tokenURL: String
    /// gorush `huawei.max_retry` (used by the dispatcher, not by the provider).
    public var maxRetry: Int

    public init(
        appID: String, appSecret: String, endpoint: String = HuaweiConfiguration.defaultEndpoint,
        tokenURL: String = HuaweiConfiguration.defaultTokenURL, maxRetry: Int = 0
    ) throws(HuaweiConfigurationError) {
        let id = appID.trimmingCharacters(in: .whitespacesAndNewlines)
        // gorush's checkHuaweiConf messages.
        guard !appSecret.isEmpty else { throw HuaweiConfigurationError("missing huawei app secret (huawei.appsecret)") }
        guard !id.isEmpty else { throw HuaweiConfigurationError("missing huawei app id (huawei.appid)") }
        // The id goes into the request path: only characters that need no escaping.
        guard id.utf8.count <= Self.maxAppIDLength,
            id.utf8.allSatisfy(Self.isAppIDByte)
        else {
            throw HuaweiConfigurationError(
                "huawei.appid must be at most \(Self.maxAppIDLength) letters, digits, '-', '_' or '.' (HMS app ids are numbers)")
        }
        guard !appSecret.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            throw HuaweiConfigurationError("huawei.appsecret contains control characters")
        }
        self.appID = id
        self.appSecret = appSecret
        self.endpoint = endpoint.isEmpty ? Self.defaultEndpoint : endpoint
        self.tokenURL = tokenURL.isEmpty ? Self.defaultTokenURL : tokenURL
        self.maxRetry = maxRetry
        _ = try Self.parseEndpoint(self.endpoint, key: "huawei.endpoint")
        _ = try Self.parseEndpoint(self.tokenURL, key: "huawei.token_url")
    }

    public static func isAppIDByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): return true
        case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."): return true
        default: return false
        }
    }

    /// The pool target and the path prefix (no trailing slash) of a URL.
    public static func parseEndpoint(_ endpoint: String, key: String = "huawei.endpoint") throws(HuaweiConfigurationError) -> (HTTP2Target, String) {
        guard let target = HTTP2Target(url: endpoint) else {
            throw HuaweiConfigurationError("\(key) is not an http(s) URL: \(oneLine(endpoint))")
        }
        return (target, HTTP2Target.pathPrefix(of: endpoint))
    }

    /// `POST` path of `messages:send` for this app: `{prefix}/v1/{appid}/messages:send`.
    public var sendPath: String {
        let prefix = (try? Self.parseEndpoint(endpoint).1) ?? ""
        return "\(prefix)/v1/\(appID)/messages:send"
    }

    /// Without the secret.
    public var description: String {
        "HuaweiConfiguration(appID: \(appID), appSecret: [REDACTED], endpoint: \(endpoint), tokenURL: \(tokenURL), maxRetry: \(maxRetry))"
    }
}
