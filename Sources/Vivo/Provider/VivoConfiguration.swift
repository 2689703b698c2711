import Crypto
import Foundation
import ProviderKit
import PushgateCore

/// The `vivo` section as the provider uses it: the app's AppID, AppKey and AppSecret (the auth
/// signature) and the classification default (docs/china-vendors.md, "vivo").
public struct VivoConfiguration: Sendable, CustomStringConvertible {
    /// vivo's one host (vivo's server SDK constants; meetleev/go-multipush and modood/pushapi agree).
    public static let host = "https://api-push.vivo.com.cn"
    public static let authPath = "/message/auth"
    public static let sendPath = "/message/send"
    public static let saveListPayloadPath = "/message/saveListPayload"
    public static let pushToListPath = "/message/pushToList"
    /// An `authToken` lives 24 hours, but vivo advises fetching a new one every hour or two: it is
    /// taken as living 2 hours and refreshed 1 hour before that (an hour after it was issued).
    public static let tokenLifetime: TimeInterval = 7_200
    public static let refreshMargin: TimeInterval = 3_600
    /// vivo allows 10 auth calls a second: never two closer than this.
    public static let minimumAuthInterval: TimeInterval = 0.1

    /// `vivo.app_id`: vivo's numeric AppID (`appId` of the auth request and of every send).
    public var appID: Int64
    public var appKey: String
    /// `vivo.app_secret`. Never logged, never in an error.
    public var appSecret: String
    public var endpoint: String
    /// `vivo.category`: the category of a push that names none; empty: such a push is refused.
    public var defaultCategory: String

    public init(appID: String, appKey: String, appSecret: String, endpoint: String = "", defaultCategory: String = "") throws(ConfigError) {
        guard (1...18).contains(appID.utf8.count), appID.utf8.allSatisfy({ (48...57).contains($0) }), let id = Int64(appID), id > 0 else {
            throw ConfigError(key: "vivo.app_id", problem: "is required: the app's numeric AppID")
        }
        guard !appKey.isEmpty, appKey.utf8.count <= 128, appKey.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "vivo.app_key", problem: "is required: the app's AppKey (visible ASCII, at most 128)")
        }
        guard !appSecret.isEmpty, appSecret.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "vivo.app_secret", problem: "is required: the app's AppSecret (visible ASCII)")
        }
        let base = endpoint.isEmpty ? Self.host : endpoint
        guard let c = URLComponents(string: base), let scheme = c.scheme, scheme == "https" || scheme == "http", c.host?.isEmpty == false,
            c.query == nil, c.user == nil
        else { throw ConfigError(key: "vivo.endpoint", problem: "must be an http(s) URL") }
        guard defaultCategory.isEmpty || VivoOptions.categories[defaultCategory] != nil else {
            throw ConfigError(key: "vivo.category", problem: "must be one of \(VivoOptions.categoryNames.joined(separator: ", "))")
        }
        self.appID = id
        self.appKey = appKey
        self.appSecret = appSecret
        self.endpoint = base.hasSuffix("/") ? String(base.dropLast()) : base
        self.defaultCategory = defaultCategory
    }

    /// `sign` of the auth request: lowercase hex MD5 of appId + appKey + timestamp + appSecret.
    public static func sign(appID: Int64, appKey: String, timestamp: String, appSecret: String) -> String {
        Insecure.MD5.hash(data: Array((String(appID) + appKey + timestamp + appSecret).utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The auth request's JSON at `date`: `appId`, `appKey`, the millisecond `timestamp`, `sign`.
    public func authBody(at date: Date) -> String {
        let ms = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        let sign = Self.sign(appID: appID, appKey: appKey, timestamp: String(ms), appSecret: appSecret)
        return JSONValue.object(JSONObject([("appId", .int(appID)), ("appKey", .string(appKey)), ("timestamp", .int(ms)), ("sign", .string(sign))]))
            .jsonString
    }

    public var description: String {
        "VivoConfiguration(appID: \(appID), appKey: \(appKey), appSecret: [REDACTED], endpoint: \(endpoint), category: \(defaultCategory))"
    }
}
