import Foundation
import GatewayCore
import PushgateCore

/// The `matrix:` section: the Matrix Push Gateway API (Sygnal's) on a listener of its own.
///
/// ```yaml
/// matrix:
///   enabled: true
///   address: 127.0.0.1       # Sygnal's http.bind_addresses: one address or a list (a listener each)
///   port: 5000               # Sygnal's http.port
///   sync_timeout: 5          # seconds /notify waits for each device's first attempt
///   apps:                    # keyed by the pusher's app_id (exact, or a glob with * and ?)
///     im.vector.app.ios: { platform: ios, app: chat, topic: im.vector.app }
///     im.vector.app.android: { platform: android }
///     org.example.web: { platform: webpush, allowed_endpoints: ["*.mozilla.com"] }
/// ```
public struct MatrixSettings: Sendable, Equatable {
    public var enabled = false
    /// The addresses listened on, each with `port` (Sygnal's `http.bind_addresses`); never empty.
    public var addresses = ["127.0.0.1"]
    public var port = 5000
    /// How long `/notify` waits for the deliveries' first attempts before answering (they go on).
    public var syncTimeout = 5.0
    /// Devices one `/notify` may name (Synapse sends one).
    public var maxDevices = 100
    /// Largest body read (Sygnal's `MAX_REQUEST_SIZE`, 512 KiB).
    public var maxBodyBytes = 512 * 1024
    public var apps: [MatrixApp] = []

    public init() {}

    /// The first address (the only one, usually).
    public var address: String {
        get { addresses.first ?? "127.0.0.1" }
        set { addresses = [newValue] }
    }

    /// Addresses one listener may have at most.
    public static let maxAddresses = 16

    public static let syncTimeoutRange = 0.0...60.0

    /// The `matrix:` section's keys, for docs/configuration.md (`init(tree:)` parses them).
    public static let reference = ConfigReference.AdapterSection(
        ConfigSection(
            "matrix",
            keys: [
                ConfigKey(
                    "enabled", .bool(false),
                    doc: "(new) serve the Matrix Push Gateway API (`/_matrix/push/v1/notify`) on its own listener (docs/matrix.md)"),
                ConfigKey(
                    "address", .string("127.0.0.1"),
                    doc:
                        "(new) listen address of the Matrix listener, or a list of them (Sygnal's `http.bind_addresses`: a listener on each, all on `port`; the environment takes them comma-separated)"
                ),
                ConfigKey("port", .int(5000), range: 0...65535, doc: "(new) port of the Matrix listener (Sygnal's)"),
                ConfigKey(
                    "sync_timeout", .int(5),
                    doc: "(new) seconds (0 to 60, fractions allowed) `/notify` waits for the deliveries' first attempts before answering; they go on"),
                ConfigKey("max_devices", .int(100), range: maxDevicesRange, doc: "(new) devices one `/notify` may name (Synapse sends one)"),
                ConfigKey(
                    "max_body_bytes", .int(512 * 1024), range: maxBodyRange, doc: "(new) largest body read (Sygnal's `MAX_REQUEST_SIZE`, 512 KiB)"),
                ConfigKey(
                    "apps", .list([]),
                    doc:
                        "(new) a mapping of Matrix `app_id`s (exact or glob) to `{platform: ios|android|webpush, …}` with Sygnal's pushkin options (docs/matrix.md)"
                ),
            ]),
        about: "The Matrix Push Gateway API (Sygnal's), read by MatrixIngest; a `sygnal.yaml` is read as a dialect of this section (docs/matrix.md).",
        environmentKeys: ["enabled", "address", "port", "sync_timeout", "max_devices", "max_body_bytes"])
    public static let maxDevicesRange = 1...1000
    public static let maxBodyRange = 1024...(8 << 20)

    /// From `raw.adapterTrees["matrix"]` (absent: off), then `PUSHGATE_MATRIX_<KEY>` (or
    /// `GORUSH_…`, as every key) for the scalar keys: `ENABLED`, `ADDRESS`, `PORT`, `SYNC_TIMEOUT`,
    /// `MAX_DEVICES`, `MAX_BODY_BYTES`. Throws `ConfigError` naming the key.
    public init(raw: RawConfig, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.init()
        var map: [String: ConfigTree] = [:]
        switch raw.adapterTrees["matrix"] {
        case .map(let m)?: map = m
        case nil, .null?: break
        case let other?: try self.init(tree: other)  // not a mapping: refused, naming `matrix`
        }
        for key in ["enabled", "address", "port", "sync_timeout", "max_devices", "max_body_bytes"] {
            let suffix = "MATRIX_" + key.uppercased()
            guard let v = environment["PUSHGATE_" + suffix] ?? environment["GORUSH_" + suffix] else { continue }
            map[key] = Self.environmentValue(v, key: key)
        }
        if map.isEmpty { return }
        try self.init(tree: .map(map))
    }

    /// An environment string as the YAML value it stands for.
    static func environmentValue(_ v: String, key: String) -> ConfigTree {
        switch key {
        case "address":
            let list = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            return list.count > 1 ? .list(list.map(ConfigTree.string)) : .string(v)
        case "enabled":
            return ["true", "1", "yes", "on"].contains(v.lowercased())
                ? .bool(true) : (["false", "0", "no", "off"].contains(v.lowercased()) ? .bool(false) : .string(v))
        case "sync_timeout": return Int(v).map(ConfigTree.int) ?? Double(v).map(ConfigTree.double) ?? .string(v)
        default: return Int(v).map(ConfigTree.int) ?? .string(v)
        }
    }

    public init(tree: ConfigTree) throws {
        self.init()
        guard case .map(let m) = tree else {
            if tree == .null { return }
            throw ConfigError(key: "matrix", problem: "expected a mapping (enabled, address, port, sync_timeout, apps)")
        }
        for (key, value) in m {
            let name = "matrix.\(key)"
            switch key {
            case "enabled": enabled = try Self.bool(value, name)
            case "address": addresses = try Self.addresses(value, name)
            case "port": port = try Self.int(value, name, range: 0...65535)
            case "sync_timeout":
                let v: Double
                switch value {
                case .int(let i): v = Double(i)
                case .double(let d): v = d
                default: throw ConfigError(key: name, problem: "expected a number of seconds")
                }
                guard Self.syncTimeoutRange.contains(v) else { throw ConfigError(key: name, problem: "\(v) is out of range (0...60)") }
                syncTimeout = v
            case "max_devices": maxDevices = try Self.int(value, name, range: Self.maxDevicesRange)
            case "max_body_bytes": maxBodyBytes = try Self.int(value, name, range: Self.maxBodyRange)
            case "apps":
                guard case .map(let list) = value else {
                    if value == .null { continue }
                    throw ConfigError(key: name, problem: "expected a mapping of Matrix app ids (app_id: {platform: ios})")
                }
                apps = try list.keys.sorted().map { id in try MatrixApp(pattern: id, tree: list[id] ?? .null) }
            default:
                throw ConfigError(
                    key: name, problem: "unknown key (matrix takes enabled, address, port, sync_timeout, max_devices, max_body_bytes, apps)")
            }
        }
    }

    /// The section as `GET /api/config` shows it: the effective values (environment overrides
    /// included). It holds no credentials (those are the Pushgate apps', shown redacted there);
    /// `fcm_options` is passed to FCM as written, so its URLs lose their userinfo and query and any
    /// member named like a credential (`authorization`, `*api_key*`, `*private_key*`, `*secret*`, `*token*`,
    /// `*password*`, `*credential*`) reads `[REDACTED]`.
    public var shown: [String: Any] {
        var apps: [String: Any] = [:]
        for a in self.apps {
            var e: [String: Any] = ["platform": a.platform.name, "app": a.app ?? AppID.defaultApp]
            switch a.platform {
            case .ios:
                e["convert_device_token_to_hex"] = a.convertTokenToHex
                e["send_badge_counts"] = a.sendBadgeCounts
                if let t = a.topic { e["topic"] = t }
                if let t = a.pushType { e["push_type"] = t }
            case .android:
                e["send_badge_counts"] = a.sendBadgeCounts
                if let o = a.fcmOptions { e["fcm_options"] = Self.redacted(.object(o)) }
            default:
                e["ttl"] = a.ttl
                if let l = a.allowedEndpoints { e["allowed_endpoints"] = l }
            }
            apps[a.pattern] = e
        }
        return [
            "enabled": enabled, "address": addresses.count == 1 ? addresses[0] as Any : addresses as Any, "port": port,
            "sync_timeout": syncTimeout, "max_devices": maxDevices, "max_body_bytes": maxBodyBytes, "apps": apps,
        ]
    }

    static func redacted(_ v: JSONValue, key: String = "") -> Any {
        let k = key.lowercased()
        if ["authorization", "secret", "password", "token", "credential", "api_key", "apikey", "private_key"].contains(where: { k.contains($0) }) {
            if case .object = v { return "[REDACTED]" }
            if case .array = v { return "[REDACTED]" }
            if v != .null { return "[REDACTED]" }
        }
        switch v {
        case .null: return NSNull()
        case .bool(let b): return b
        case .int(let i): return i
        case .double(let d): return d
        case .string(let s): return s.contains("://") ? RawConfig.redactURL(s) : s
        case .array(let l): return l.map { redacted($0) }
        case .object(let o):
            var out: [String: Any] = [:]
            for (name, value) in o { out[name] = redacted(value, key: name) }
            return out
        }
    }

    /// The app of a pusher's `app_id`: the exact key, else the one glob that matches (none, or more
    /// than one: nil, and the pushkey is rejected as Sygnal does).
    public func app(for appID: String) -> MatrixApp? {
        if let exact = apps.first(where: { $0.pattern == appID }) { return exact }
        let matching = apps.filter { $0.isGlob && Glob.matches($0.pattern, appID) }
        return matching.count == 1 ? matching[0] : nil
    }

    /// One address or a list of them: duplicates dropped, and `0.0.0.0` beside `::` (the IPv6
    /// wildcard takes IPv4 too: a second listener on the IPv4 wildcard and the same port would fail).
    static func addresses(_ v: ConfigTree, _ key: String) throws -> [String] {
        var list: [String]
        switch v {
        case .list(let l): list = try l.map { try string($0, key) }
        default: list = [try string(v, key)]
        }
        guard !list.isEmpty else { throw ConfigError(key: key, problem: "expected an address or a list of addresses") }
        guard list.count <= maxAddresses else { throw ConfigError(key: key, problem: "at most \(maxAddresses) addresses") }
        for a in list where a.isEmpty || a.utf8.count > 253 {
            throw ConfigError(key: key, problem: "\"\(a.logSafe(max: 64))\" is not an address")
        }
        var seen: Set<String> = []
        list = list.filter { seen.insert($0).inserted }
        if list.contains("::") { list.removeAll { $0 == "0.0.0.0" } }
        return list
    }

    static func bool(_ v: ConfigTree, _ key: String) throws -> Bool {
        guard case .bool(let b) = v else { throw ConfigError(key: key, problem: "expected true or false") }
        return b
    }

    static func string(_ v: ConfigTree, _ key: String) throws -> String {
        switch v {
        case .string(let s): return s
        case .int(let i): return String(i)
        default: throw ConfigError(key: key, problem: "expected a string")
        }
    }

    static func int(_ v: ConfigTree, _ key: String, range: ClosedRange<Int>) throws -> Int {
        guard case .int(let i) = v else { throw ConfigError(key: key, problem: "expected an integer") }
        guard range.contains(i) else { throw ConfigError(key: key, problem: "\(i) is out of range (\(range.lowerBound)...\(range.upperBound))") }
        return i
    }
}

/// One `matrix.apps` entry: the pushers of a Matrix `app_id` and how Sygnal's pushkin for it would send.
public struct MatrixApp: Sendable, Equatable {
    /// The `app_id` (or a glob of them, `*` and `?`, as Sygnal's app names).
    public var pattern: String
    /// `ios` (Sygnal's `apns`), `android` (`gcm`) or `webpush`.
    public var platform: Platform
    /// The Pushgate app whose providers send (nil: the default app, the top-level sections).
    public var app: String?
    /// APNs: the pushkey is base64 of the token bytes, sent as hex (Sygnal's
    /// `convert_device_token_to_hex`, default true).
    public var convertTokenToHex = true
    /// APNs: `apns-topic` (nil: the provider's `ios.topic`).
    public var topic: String?
    /// APNs: `apns-push-type` (Sygnal's `push_type`; nil: Pushgate's choice from the payload).
    public var pushType: String?
    /// FCM: Sygnal's `fcm_options` (its `android`, `apns`, `webpush` and `fcm_options` objects).
    public var fcmOptions: JSONObject?
    /// Web Push: hosts (globs) endpoints may be on (Sygnal's `allowed_endpoints`); others are not
    /// sent to, and not rejected either.
    public var allowedEndpoints: [String]?
    /// Web Push: `TTL` in seconds (Sygnal's `ttl`, default 15 minutes).
    public var ttl = 15 * 60
    /// APNs and FCM: send the unread and missed-call counts (Sygnal 0.17's `send_badge_counts`,
    /// default true). Off, APNs gets no `badge` (nor `unread_count` / `missed_calls` in the
    /// `event_id_only` format) and FCM no `unread` / `missed_calls`; a badge-only notification then
    /// sends nothing. Counts are wrong for encrypted rooms, where the homeserver cannot read mentions.
    public var sendBadgeCounts = true

    var isGlob: Bool { pattern.contains("*") || pattern.contains("?") }

    public init(pattern: String, platform: Platform, app: String? = nil) {
        self.pattern = pattern
        self.platform = platform
        self.app = app
    }

    init(pattern: String, tree: ConfigTree) throws {
        let path = "matrix.apps[\(pattern)]"
        guard case .map(let m) = tree else { throw ConfigError(key: path, problem: "expected a mapping with a platform") }
        guard let p = m["platform"] else { throw ConfigError(key: "\(path).platform", problem: "required: ios, android or webpush") }
        let name = try MatrixSettings.string(p, "\(path).platform")
        switch name.lowercased() {
        case "ios", "apns": platform = .ios
        case "android", "fcm", "gcm": platform = .android
        case "webpush": platform = .webpush
        default: throw ConfigError(key: "\(path).platform", problem: "\(name.logSafe(max: 32)) is not ios, android or webpush")
        }
        self.pattern = pattern
        for (key, value) in m {
            let k = "\(path).\(key)"
            switch key {
            case "platform": continue
            case "app":
                let id = try MatrixSettings.string(value, k)
                guard AppID.isValid(id) else { throw ConfigError(key: k, problem: "not an app id (1-64 characters of A-Z a-z 0-9 . _ -)") }
                app = id == AppID.defaultApp ? nil : id
            case "convert_device_token_to_hex" where platform == .ios: convertTokenToHex = try MatrixSettings.bool(value, k)
            case "topic" where platform == .ios: topic = try MatrixSettings.string(value, k)
            case "push_type" where platform == .ios:
                let t = try MatrixSettings.string(value, k)
                guard ["alert", "background", "voip", "complication", "fileprovider", "mdm"].contains(t) else {
                    throw ConfigError(key: k, problem: "\(t.logSafe(max: 32)) is not one of alert, background, voip, complication, fileprovider, mdm")
                }
                pushType = t
            case "fcm_options" where platform == .android:
                guard case .map(let o) = value else { throw ConfigError(key: k, problem: "expected a mapping (android, apns, webpush, fcm_options)") }
                for name in o.keys where !["android", "apns", "webpush", "fcm_options"].contains(name) {
                    throw ConfigError(
                        key: "\(k).\(name)", problem: "Pushgate passes android, apns, webpush and fcm_options to FCM; this one is not taken")
                }
                fcmOptions = JSONObject(o.keys.sorted().compactMap { name in o[name].map { (name, Self.json($0)) } })
            case "allowed_endpoints" where platform == .webpush:
                guard case .list(let l) = value else { throw ConfigError(key: k, problem: "expected a list of host globs") }
                allowedEndpoints = try l.map { try MatrixSettings.string($0, k) }
            case "ttl" where platform == .webpush: ttl = try MatrixSettings.int(value, k, range: 0...2_419_200)
            case "send_badge_counts" where platform == .ios || platform == .android: sendBadgeCounts = try MatrixSettings.bool(value, k)
            default:
                throw ConfigError(key: k, problem: "unknown key for platform \(platform.name)")
            }
        }
    }

    static func json(_ t: ConfigTree) -> JSONValue {
        switch t {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .int(let i): return .int(Int64(i))
        case .double(let d): return .double(d)
        case .string(let s): return .string(s)
        case .list(let l): return .array(l.map(json))
        case .map(let m): return .object(JSONObject(m.keys.sorted().compactMap { k in m[k].map { (k, json($0)) } }))
        }
    }
}

/// Sygnal's app-name globs (`*`: any run of characters, `?`: one), matched against the whole id,
/// case-sensitive. Iterative with one backtrack point: linear-ish, never recursive.
enum Glob {
    static func matches(_ pattern: String, _ text: String) -> Bool {
        let p = Array(pattern.unicodeScalars)
        let t = Array(text.unicodeScalars)
        var i = 0
        var j = 0
        var star = -1
        var mark = 0
        while j < t.count {
            if i < p.count, p[i] == "?" || p[i] == t[j] {
                i += 1
                j += 1
            } else if i < p.count, p[i] == "*" {
                star = i
                mark = j
                i += 1
            } else if star >= 0 {
                i = star + 1
                mark += 1
                j = mark
            } else {
                return false
            }
        }
        while i < p.count, p[i] == "*" { i += 1 }
        return i == p.count
    }
}
