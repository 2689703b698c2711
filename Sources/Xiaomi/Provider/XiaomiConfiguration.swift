import Foundation
import ProviderKit

/// The `xiaomi` section as the provider uses it: the app's AppSecret (`Authorization: key=…`), its
/// package name (`restricted_package_name`), the region's host, and the classification default.
public struct XiaomiConfiguration: Sendable, CustomStringConvertible {
    /// Xiaomi's hosts by region (dev.mi.com pId=1696; the hyphenated hosts, docs/china-vendors.md).
    public static let regions: [(name: String, host: String)] = [
        ("china", "https://api.xmpush.xiaomi.com"),
        ("russia", "https://ru-api.xmpush.global.xiaomi.com"),
        ("india", "https://idmb-api.xmpush.global.xiaomi.com"),
        ("europe", "https://fr-api.xmpush.global.xiaomi.com"),
        ("singapore", "https://sgp-api.xmpush.global.xiaomi.com"),
    ]
    public static let sendPath = "/v3/message/regid"
    /// Longest package name taken (Android's own limit is far above any real one).
    public static let maxPackageNameLength = 255
    /// Longest `channel_id` taken (an id created in Xiaomi's console; Xiaomi states no limit).
    public static let maxChannelIDLength = 128

    /// `xiaomi.app_secret`. Never logged, never in an error.
    public var appSecret: String
    /// `xiaomi.package_name`: `restricted_package_name` of every send.
    public var packageName: String
    /// The base URL sends go to: the region's host, or `xiaomi.endpoint` (tests, proxies).
    public var endpoint: String
    /// `xiaomi.channel_id`: the channel (`extra.channel_id`) of a push that names none; empty: none,
    /// and such a push is refused at ingest.
    public var defaultChannelID: String

    public init(appSecret: String, packageName: String, region: String = "china", endpoint: String = "", defaultChannelID: String = "")
        throws(ConfigError)
    {
        guard !appSecret.isEmpty else { throw ConfigError(key: "xiaomi.app_secret", problem: "is required when xiaomi.enabled is true") }
        guard appSecret.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigError(key: "xiaomi.app_secret", problem: "must be visible ASCII (it goes in the Authorization header)")
        }
        guard Self.isPackageName(packageName) else {
            throw ConfigError(key: "xiaomi.package_name", problem: "must be the app's Android package name (com.example.app)")
        }
        let host = Self.regions.first { $0.name == region }?.host
        guard let host else {
            throw ConfigError(key: "xiaomi.region", problem: "must be one of \(Self.regions.map(\.name).joined(separator: ", "))")
        }
        let base = endpoint.isEmpty ? host : endpoint
        guard let c = URLComponents(string: base), let scheme = c.scheme, scheme == "https" || scheme == "http", c.host?.isEmpty == false,
            c.query == nil, c.user == nil
        else { throw ConfigError(key: "xiaomi.endpoint", problem: "must be an http(s) URL") }
        guard defaultChannelID.utf16.count <= Self.maxChannelIDLength,
            !defaultChannelID.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else {
            throw ConfigError(key: "xiaomi.channel_id", problem: "must be at most \(Self.maxChannelIDLength) characters without control characters")
        }
        self.appSecret = appSecret
        self.packageName = packageName
        self.endpoint = base.hasSuffix("/") ? String(base.dropLast()) : base
        self.defaultChannelID = defaultChannelID
    }

    /// `com.example.app`: two or more dot-separated segments of letters, digits and `_`, each
    /// starting with a letter.
    public static func isPackageName(_ s: String) -> Bool {
        guard (3...maxPackageNameLength).contains(s.utf8.count) else { return false }
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return false }
        return parts.allSatisfy { p in
            guard let first = p.utf8.first, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first | 0x20) else { return false }
            return p.utf8.allSatisfy { b in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
                    || b == UInt8(ascii: "_")
            }
        }
    }

    public var sendURL: String { endpoint + Self.sendPath }

    public var description: String {
        "XiaomiConfiguration(appSecret: [REDACTED], packageName: \(packageName), endpoint: \(endpoint), channelID: \(defaultChannelID))"
    }
}
