import Foundation
import ProviderKit
import PushgateCore

/// The `honor` section as the provider uses it: the app's App ID (in the send path), its OAuth 2.0
/// client (Client ID, Client Secret), the importance default and the answer codes taken as the
/// daily quota (docs/china-vendors.md, "Honor").
public struct HonorConfiguration: Sendable, CustomStringConvertible {
    /// Honor's send host (Honor's guide, copied at my.oschina.net; meetleev/go-multipush, cossim/hipush).
    public static let host = "https://push-api.cloud.honor.com"
    /// Honor's token endpoint: `POST /auth/token` on Honor's IAM host (meetleev/go-multipush and
    /// three other clients; Honor's guide copy names `/auth/realms/developer/protocol/openid-connect/token`
    /// on the same host: `honor.token_url` takes either).
    public static let tokenURL = "https://iam.developer.honor.com/auth/token"
    public static let grantType = "client_credentials"
    /// `expires_in` is taken within these bounds; a token is fetched anew 5 minutes before it expires.
    public static let lifetimeBounds: ClosedRange<Double> = 60...86_400
    public static let refreshMargin: TimeInterval = 300

    /// `honor.app_id`: the App ID Honor's developer console shows for the app (digits), in the send path.
    public var appID: String
    public var clientID: String
    /// `honor.client_secret`. Never logged, never in an error.
    public var clientSecret: String
    public var endpoint: String
    public var tokenURL: String
    /// `honor.importance`: the classification of a notification that names none; empty: such a push is refused.
    public var defaultImportance: String
    /// `honor.quota_codes`: answer codes that mean the app's daily quota is spent (Honor publishes no
    /// code table; empty: no answer is taken as one).
    public var quotaCodes: Set<Int64>

    public init(
        appID: String, clientID: String, clientSecret: String, endpoint: String = "", tokenURL: String = "", defaultImportance: String = "",
        quotaCodes: String = ""
    ) throws(ConfigError) {
        guard (1...20).contains(appID.utf8.count), appID.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw ConfigError(key: "honor.app_id", problem: "is required: the app's App ID (digits)")
        }
        guard !clientID.isEmpty, clientID.utf8.count <= 128, clientID.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "honor.client_id", problem: "is required: the app's Client ID (visible ASCII, at most 128)")
        }
        guard !clientSecret.isEmpty, clientSecret.utf8.count <= 1024, clientSecret.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "honor.client_secret", problem: "is required: the app's Client Secret (visible ASCII)")
        }
        let base = endpoint.isEmpty ? Self.host : endpoint
        guard Self.isHTTPURL(base) else { throw ConfigError(key: "honor.endpoint", problem: "must be an http(s) URL") }
        let token = tokenURL.isEmpty ? Self.tokenURL : tokenURL
        guard Self.isHTTPURL(token) else { throw ConfigError(key: "honor.token_url", problem: "must be an http(s) URL") }
        guard defaultImportance.isEmpty || HonorOptions.importances.contains(defaultImportance) else {
            throw ConfigError(key: "honor.importance", problem: "must be one of \(HonorOptions.importances.joined(separator: ", ")) or empty")
        }
        var codes: Set<Int64> = []
        let list = quotaCodes.trimmingCharacters(in: .whitespaces)
        if !list.isEmpty {
            for part in list.split(separator: ",", omittingEmptySubsequences: false) {
                let t = part.trimmingCharacters(in: .whitespaces)
                guard list.utf8.count <= 256, (1...12).contains(t.utf8.count), t.utf8.allSatisfy({ (48...57).contains($0) }), let c = Int64(t),
                    c != HonorResponseClassifier.success
                else { throw ConfigError(key: "honor.quota_codes", problem: "must be answer codes separated by commas (digits, not 200)") }
                codes.insert(c)
            }
        }
        self.appID = appID
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.endpoint = base.hasSuffix("/") ? String(base.dropLast()) : base
        self.tokenURL = token
        self.defaultImportance = defaultImportance
        self.quotaCodes = codes
    }

    static func isHTTPURL(_ s: String) -> Bool {
        guard let c = URLComponents(string: s), let scheme = c.scheme, scheme == "https" || scheme == "http", c.host?.isEmpty == false,
            c.query == nil, c.user == nil
        else { return false }
        return true
    }

    /// `/api/v1/<appId>/sendMessage` under the endpoint.
    public var sendURL: String { endpoint + "/api/v1/" + appID + "/sendMessage" }

    /// The token request's form: `grant_type=client_credentials`, `client_id`, `client_secret`.
    public var tokenForm: String {
        "grant_type=" + Self.grantType + "&client_id=" + OAuthTokenCache.formEncode(clientID) + "&client_secret="
            + OAuthTokenCache.formEncode(clientSecret)
    }

    public var description: String {
        "HonorConfiguration(appID: \(appID), clientID: \(clientID), clientSecret: [REDACTED], endpoint: \(endpoint), tokenURL: \(tokenURL), importance: \(defaultImportance))"
    }
}
