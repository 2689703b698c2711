import Crypto
import Foundation
import ProviderKit

/// The `oppo` section as the provider uses it: the app's AppKey and MasterSecret (the auth
/// signature), the China or international host, and the classification defaults.
public struct OppoConfiguration: Sendable, CustomStringConvertible {
    /// OPPO's hosts (OPPO's API doc copy; meetleev/go-multipush agrees).
    public static let regions: [(name: String, host: String)] = [
        ("china", "https://api.push.oppomobile.com"),
        ("international", "https://api-intl.push.oppomobile.com"),
    ]
    public static let authPath = "/server/v1/auth"
    public static let unicastPath = "/server/v1/message/notification/unicast"
    public static let unicastBatchPath = "/server/v1/message/notification/unicast_batch"
    /// An `auth_token` lives 24 hours (OPPO's API doc copy).
    public static let tokenLifetime: TimeInterval = 86_400

    public var appKey: String
    /// `oppo.master_secret`. Never logged, never in an error.
    public var masterSecret: String
    public var endpoint: String
    /// `oppo.category`: the category of a push that names none; empty: such a push is refused.
    public var defaultCategory: String
    /// `oppo.notify_level` (0: none).
    public var defaultNotifyLevel: Int64
    /// `oppo.channel_id`: the notification channel of a push that names none (may be empty).
    public var defaultChannelID: String

    public init(
        appKey: String, masterSecret: String, region: String = "china", endpoint: String = "", defaultCategory: String = "",
        defaultNotifyLevel: Int = 0, defaultChannelID: String = ""
    ) throws(ConfigError) {
        guard !appKey.isEmpty, appKey.utf8.count <= 128, appKey.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "oppo.app_key", problem: "is required: the app's AppKey (visible ASCII, at most 128)")
        }
        guard !masterSecret.isEmpty, masterSecret.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "oppo.master_secret", problem: "is required: the app's MasterSecret (visible ASCII)")
        }
        guard let host = Self.regions.first(where: { $0.name == region })?.host else {
            throw ConfigError(key: "oppo.region", problem: "must be china or international")
        }
        let base = endpoint.isEmpty ? host : endpoint
        guard let c = URLComponents(string: base), let scheme = c.scheme, scheme == "https" || scheme == "http", c.host?.isEmpty == false,
            c.query == nil, c.user == nil
        else { throw ConfigError(key: "oppo.endpoint", problem: "must be an http(s) URL") }
        guard defaultCategory.isEmpty || OppoOptions.categories.contains(defaultCategory) else {
            throw ConfigError(key: "oppo.category", problem: "must be one of \(OppoOptions.categories.joined(separator: ", "))")
        }
        guard defaultNotifyLevel == 0 || OppoOptions.notifyLevels.contains(Int64(defaultNotifyLevel)) else {
            throw ConfigError(key: "oppo.notify_level", problem: "must be 0 (none), 1, 2 or 16")
        }
        guard defaultNotifyLevel == 0 || !defaultCategory.isEmpty else {
            throw ConfigError(key: "oppo.notify_level", problem: "needs oppo.category (OPPO takes notify_level only with a category)")
        }
        guard defaultChannelID.utf16.count <= OppoOptions.maxChannelIDLength,
            !defaultChannelID.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { throw ConfigError(key: "oppo.channel_id", problem: "must be at most \(OppoOptions.maxChannelIDLength) characters") }
        self.appKey = appKey
        self.masterSecret = masterSecret
        self.endpoint = base.hasSuffix("/") ? String(base.dropLast()) : base
        self.defaultCategory = defaultCategory
        self.defaultNotifyLevel = Int64(defaultNotifyLevel)
        self.defaultChannelID = defaultChannelID
    }

    /// `sign` of the auth request: lowercase hex SHA-256 of app_key + timestamp + master_secret.
    public static func sign(appKey: String, timestamp: String, masterSecret: String) -> String {
        SHA256.hash(data: Array((appKey + timestamp + masterSecret).utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The auth request's form at `date`: `app_key`, the 13-digit millisecond `timestamp`, `sign`.
    public func authForm(at date: Date) -> String {
        let ms = String(Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
        return "app_key=" + OAuthTokenCache.formEncode(appKey) + "&timestamp=" + ms + "&sign="
            + Self.sign(appKey: appKey, timestamp: ms, masterSecret: masterSecret)
    }

    public var description: String {
        "OppoConfiguration(appKey: \(appKey), masterSecret: [REDACTED], endpoint: \(endpoint), category: \(defaultCategory))"
    }
}
