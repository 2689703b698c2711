import Foundation
import GatewayCore

/// A secret string (a private key, a password, an app secret, a database URL): kept out of
/// `description`, `debugDescription`, `dump` and logs.
public struct Secret: Sendable, Equatable, ExpressibleByStringLiteral, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The secret itself.
    public var value: String
    public init(_ value: String) { self.value = value }
    public init(stringLiteral value: String) { self.value = value }
    public var description: String { value.isEmpty ? "\"\"" : "[REDACTED]" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// The configuration of an embedded gateway, as a value: no YAML file. It becomes the same
/// configuration tree the YAML file gives (`RawConfig(tree:)`), so the same defaults, checks and
/// one-line errors naming the key (`config error: ios.key_id: …`) apply.
///
/// ```swift
/// var config = PushgateConfiguration()
/// config.apns = .init(auth: .token(key: .file("AuthKey_ABC123DEFG.p8"), keyID: "ABC123DEFG", teamID: "DEF123GHIJ"),
///                     topic: "com.example.app", production: true)
/// config.queue = .sqlite(path: "data/pushgate.sqlite")
/// ```
public struct PushgateConfiguration: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// A key or credential: a file, its contents (PEM, JSON), or raw bytes (a `.p12`).
    public enum Credential: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
        case file(String)
        case contents(Secret)
        case bytes([UInt8])

        public var description: String {
            switch self {
            case .file(let path): return "file(\(path))"
            case .contents: return "contents([REDACTED])"
            case .bytes(let b): return "bytes([REDACTED], \(b.count) bytes)"
            }
        }
        public var debugDescription: String { description }
        public var customMirror: Mirror { Mirror(self, children: [:]) }
    }

    /// Where deliveries wait (`queue.engine`).
    public enum Queue: Sendable, Equatable {
        /// In memory: lost on exit (`shutdown()` waits up to `shutdownTimeout` for it to drain).
        case memory
        /// A SQLite file (created with its directory's permissions): survives restarts.
        case sqlite(path: String, synchronousFull: Bool = false)
        /// PostgreSQL shared by several gateways (`postgres://user:password@host/db`).
        case postgres(url: Secret)
    }

    /// APNs (`ios:`).
    public struct APNs: Sendable, Equatable {
        public enum Auth: Sendable, Equatable {
            /// Token auth with a `.p8` key.
            case token(key: Credential, keyID: String, teamID: String)
            /// Certificate auth: a `.p12` (file or bytes) or a `.pem` holding certificate and key.
            case certificate(Credential, password: Secret = "")
        }
        public var auth: Auth
        /// Default `apns-topic` (the bundle id) when a notification has none.
        public var topic: String
        /// Production (`api.push.apple.com`) or sandbox by default; a notification may ask otherwise.
        public var production: Bool
        /// Replaces Apple's host (a mock, a relay): `https://127.0.0.1:8443`.
        public var endpoint: String?
        /// `ios.max_retry`, `ios.max_concurrent_pushes`, `ios.connections` (nil: the defaults).
        public var maxRetry: Int?
        public var maxConcurrentPushes: Int?
        public var connections: Int?

        public init(
            auth: Auth, topic: String = "", production: Bool = false, endpoint: String? = nil, maxRetry: Int? = nil,
            maxConcurrentPushes: Int? = nil, connections: Int? = nil
        ) {
            self.auth = auth
            self.topic = topic
            self.production = production
            self.endpoint = endpoint
            self.maxRetry = maxRetry
            self.maxConcurrentPushes = maxConcurrentPushes
            self.connections = connections
        }
    }

    /// FCM HTTP v1 (`android:`).
    public struct FCM: Sendable, Equatable {
        /// The service account JSON: a file or its contents.
        public var serviceAccount: Credential
        /// Replaces `https://fcm.googleapis.com` (a mock).
        public var endpoint: String?
        public var maxRetry: Int?
        public var maxConcurrentPushes: Int?

        public init(serviceAccount: Credential, endpoint: String? = nil, maxRetry: Int? = nil, maxConcurrentPushes: Int? = nil) {
            self.serviceAccount = serviceAccount
            self.endpoint = endpoint
            self.maxRetry = maxRetry
            self.maxConcurrentPushes = maxConcurrentPushes
        }
    }

    /// Web Push with VAPID (`webpush:`).
    public struct WebPush: Sendable, Equatable {
        /// The VAPID private key (base64url, 32 bytes, or PEM).
        public var vapidPrivateKey: Secret
        /// `mailto:` or `https:` contact.
        public var vapidSubject: String
        /// Endpoints on private addresses (tests, a self-hosted push service).
        public var allowPrivateEndpoints: Bool
        public var maxRetry: Int?

        public init(vapidPrivateKey: Secret, vapidSubject: String, allowPrivateEndpoints: Bool = false, maxRetry: Int? = nil) {
            self.vapidPrivateKey = vapidPrivateKey
            self.vapidSubject = vapidSubject
            self.allowPrivateEndpoints = allowPrivateEndpoints
            self.maxRetry = maxRetry
        }
    }

    /// Huawei HMS Push Kit (`huawei:`).
    public struct Huawei: Sendable, Equatable {
        public var appID: String
        public var appSecret: Secret
        /// Replace the HMS hosts (a mock).
        public var endpoint: String?
        public var tokenURL: String?
        public var maxRetry: Int?

        public init(appID: String, appSecret: Secret, endpoint: String? = nil, tokenURL: String? = nil, maxRetry: Int? = nil) {
            self.appID = appID
            self.appSecret = appSecret
            self.endpoint = endpoint
            self.tokenURL = tokenURL
            self.maxRetry = maxRetry
        }
    }

    /// Failed deliveries POSTed to a URL (`core.feedback_hook_url`), as gorush's log entries.
    public struct FeedbackHook: Sendable, Equatable {
        public var url: String
        /// Extra headers (e.g. an authorization).
        public var headers: [String: Secret]
        /// Seconds.
        public var timeout: Int?

        public init(url: String, headers: [String: Secret] = [:], timeout: Int? = nil) {
            self.url = url
            self.headers = headers
            self.timeout = timeout
        }
    }

    /// A further app with its own providers (`apps[]`); notifications name it with `app:`.
    public struct App: Sendable, Equatable {
        public var id: String
        public var apns: APNs?
        public var fcm: FCM?
        public var webPush: WebPush?
        public var unifiedPush: Bool
        public var huawei: Huawei?
        /// Deliveries of this app pending at once (0: no own limit).
        public var maxPending: Int
        /// Deliveries per second this app may submit (`apps[].rate_limit`; 0: no limit): over it
        /// `submit` throws `PushgateError.rateLimited`.
        public var rateLimit: Int
        /// Keys that act for this app when a caller passes one to `submit(_:app:idempotencyKey:apiKey:)`
        /// (`apps[].api_keys`: plain, at least 16 characters, or `sha256:<hex>`).
        public var apiKeys: [Secret]

        public init(
            id: String, apns: APNs? = nil, fcm: FCM? = nil, webPush: WebPush? = nil, unifiedPush: Bool = false, huawei: Huawei? = nil,
            maxPending: Int = 0, rateLimit: Int = 0, apiKeys: [Secret] = []
        ) {
            self.rateLimit = rateLimit
            self.apiKeys = apiKeys
            self.id = id
            self.apns = apns
            self.fcm = fcm
            self.webPush = webPush
            self.unifiedPush = unifiedPush
            self.huawei = huawei
            self.maxPending = maxPending
        }
    }

    /// The default app's providers (nil: off).
    public var apns: APNs?
    public var fcm: FCM?
    public var webPush: WebPush?
    /// UnifiedPush (needs no credentials).
    public var unifiedPush = false
    public var huawei: Huawei?
    /// Further apps.
    public var apps: [App] = []

    public var queue: Queue = .memory
    /// Deliveries pending at once before `submit` throws `PushgateError.queueFull` (`queue.max_pending`).
    public var maxPending: Int?
    /// How long delivery status records are kept (`queue.status_retention`, e.g. "24h").
    public var statusRetention: String?
    public var feedback: FeedbackHook?
    /// First retry delay and its cap, in milliseconds (`core.retry_backoff_ms`, `core.retry_backoff_max_ms`).
    public var retryBackoffMilliseconds: Int?
    public var retryBackoffMaxMilliseconds: Int?
    /// Seconds `shutdown()` waits for the memory queue to drain (`core.shutdown_timeout`).
    public var shutdownTimeout: Int?
    /// Seconds `send` waits for the outcomes by default (`core.sync_timeout`).
    public var sendTimeout: Int?
    /// Tokens masked in logs and status records (`log.hide_token`); outcomes always carry your tokens.
    public var hideToken = true
    /// Further trusted roots for provider connections, as PEM text (a mock's or a proxy's test CA).
    public var trustRootsPEM: [String] = []
    /// A PEM file of further trusted roots (`core.ca_file`).
    public var caFile: String?
    /// Any other configuration key by its YAML name (`"core.max_notification": "500"`), converted as an
    /// environment value is; an unknown key is an error.
    public var settings: [String: String] = [:]
    /// Environment consulted for `PUSHGATE_*` / `GORUSH_*` overrides and the outbound proxy
    /// (`HTTPS_PROXY`, `NO_PROXY`). Empty by default: the host process's environment is not read.
    public var environment: [String: String] = [:]

    public init() {}

    public var description: String {
        var parts: [String] = []
        switch queue {
        case .memory: parts.append("queue: memory")
        case .sqlite(let path, _): parts.append("queue: sqlite \(path)")
        case .postgres: parts.append("queue: postgres [REDACTED]")
        }
        func providers(_ apns: APNs?, _ fcm: FCM?, _ webPush: WebPush?, _ unifiedPush: Bool, _ huawei: Huawei?) -> String {
            var p: [String] = []
            if let apns {
                switch apns.auth {
                case .token(let key, let keyID, let teamID): p.append("apns token \(key) key id \(keyID) team \(teamID) topic \(apns.topic)")
                case .certificate(let c, _): p.append("apns certificate \(c) topic \(apns.topic)")
                }
                if let e = apns.endpoint { p.append("apns endpoint \(e)") }
            }
            if let fcm { p.append("fcm \(fcm.serviceAccount)") }
            if let webPush { p.append("webpush \(webPush.vapidSubject)") }
            if unifiedPush { p.append("unifiedpush") }
            if let huawei { p.append("huawei app \(huawei.appID)") }
            return p.isEmpty ? "none" : p.joined(separator: ", ")
        }
        parts.append("providers: \(providers(apns, fcm, webPush, unifiedPush, huawei))")
        for a in apps { parts.append("app \(a.id): \(providers(a.apns, a.fcm, a.webPush, a.unifiedPush, a.huawei))") }
        if let feedback { parts.append("feedback: \(feedback.url.split(separator: "?").first.map(String.init) ?? "")") }
        if !trustRootsPEM.isEmpty { parts.append("trust roots: \(trustRootsPEM.count)") }
        if !settings.isEmpty { parts.append("settings: \(settings.keys.sorted().joined(separator: ", "))") }
        return "PushgateConfiguration(\(parts.joined(separator: "; ")))"
    }

    public var debugDescription: String { description }
    /// No children: `dump` and debuggers show `description` (secrets hidden).
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

extension PushgateConfiguration {
    /// The tree the YAML file would give (`RawConfig(tree:)`).
    func tree() -> [String: Any] {
        var core: [String: Any] = ["address": "127.0.0.1"]
        var queueSection: [String: Any] = [:]
        switch queue {
        case .memory: queueSection["engine"] = "memory"
        case .sqlite(let path, let full):
            queueSection["engine"] = "sqlite"
            queueSection["sqlite"] = ["path": path, "synchronous": full ? "full" : "normal"]
        case .postgres(let url):
            queueSection["engine"] = "postgres"
            queueSection["postgres"] = ["url": url.value]
        }
        if let maxPending { queueSection["max_pending"] = maxPending }
        if let statusRetention { queueSection["status_retention"] = statusRetention }
        if let feedback {
            core["feedback_hook_url"] = feedback.url
            core["feedback_header"] = feedback.headers.keys.sorted().map { "\($0): \(feedback.headers[$0]!.value)" }
            if let t = feedback.timeout { core["feedback_timeout"] = t }
        }
        if let v = retryBackoffMilliseconds { core["retry_backoff_ms"] = v }
        if let v = retryBackoffMaxMilliseconds { core["retry_backoff_max_ms"] = v }
        if let v = shutdownTimeout { core["shutdown_timeout"] = v }
        if let v = sendTimeout { core["sync_timeout"] = v }
        if let caFile { core["ca_file"] = caFile }
        var root: [String: Any] = ["core": core, "queue": queueSection, "log": ["hide_token": hideToken]]
        for (name, section) in Self.providerSections(apns: apns, fcm: fcm, webPush: webPush, unifiedPush: unifiedPush, huawei: huawei) {
            root[name] = section
        }
        // The default app's providers that are not configured are off (FCM's `enabled` defaults to true).
        for p in ProviderRegistry.platforms where root[p.name] == nil { root[p.name] = ["enabled": false] }
        if !apps.isEmpty {
            root["apps"] = apps.map { app -> [String: Any] in
                var a: [String: Any] = ["id": app.id, "max_pending": app.maxPending, "rate_limit": app.rateLimit]
                if !app.apiKeys.isEmpty { a["api_keys"] = app.apiKeys.map(\.value) }
                for (name, section) in Self.providerSections(
                    apns: app.apns, fcm: app.fcm, webPush: app.webPush, unifiedPush: app.unifiedPush, huawei: app.huawei)
                {
                    a[name] = section
                }
                return a
            }
        }
        // Further keys by their dotted name, into their section.
        for (key, value) in settings {
            let path = key.split(separator: ".").map(String.init)
            RawConfig.insert(&root, path: path, value: value)
        }
        return root
    }

    static func providerSections(apns: APNs?, fcm: FCM?, webPush: WebPush?, unifiedPush: Bool, huawei: Huawei?) -> [String: [String: Any]] {
        var out: [String: [String: Any]] = [:]
        if let apns {
            var s: [String: Any] = ["enabled": true, "topic": apns.topic, "production": apns.production]
            func key(_ c: Credential, type: String?) {
                switch c {
                case .file(let path): s["key_path"] = path
                case .contents(let text):
                    s["key_base64"] = Data(text.value.utf8).base64EncodedString()
                    if let type { s["key_type"] = type }
                case .bytes(let b):
                    s["key_base64"] = Data(b).base64EncodedString()
                    if let type { s["key_type"] = type }
                }
            }
            switch apns.auth {
            case .token(let k, let keyID, let teamID):
                key(k, type: "p8")
                s["key_id"] = keyID
                s["team_id"] = teamID
            case .certificate(let c, let password):
                if case .bytes = c { key(c, type: "p12") } else { key(c, type: "pem") }
                s["password"] = password.value
            }
            if let e = apns.endpoint { s["endpoint"] = e }
            if let v = apns.maxRetry { s["max_retry"] = v }
            if let v = apns.maxConcurrentPushes { s["max_concurrent_pushes"] = v }
            if let v = apns.connections { s["connections"] = v }
            out["ios"] = s
        }
        if let fcm {
            var s: [String: Any] = ["enabled": true]
            switch fcm.serviceAccount {
            case .file(let path): s["key_path"] = path
            case .contents(let text): s["credential"] = text.value
            case .bytes(let b): s["credential"] = String(decoding: b, as: UTF8.self)
            }
            if let e = fcm.endpoint { s["endpoint"] = e }
            if let v = fcm.maxRetry { s["max_retry"] = v }
            if let v = fcm.maxConcurrentPushes { s["max_concurrent_pushes"] = v }
            out["android"] = s
        }
        if let webPush {
            var s: [String: Any] = [
                "enabled": true, "vapid_private_key": webPush.vapidPrivateKey.value, "vapid_subject": webPush.vapidSubject,
                "allow_private_endpoints": webPush.allowPrivateEndpoints,
            ]
            if let v = webPush.maxRetry { s["max_retry"] = v }
            out["webpush"] = s
        }
        if unifiedPush { out["unifiedpush"] = ["enabled": true] }
        if let huawei {
            var s: [String: Any] = ["enabled": true, "appid": huawei.appID, "appsecret": huawei.appSecret.value]
            if let e = huawei.endpoint { s["endpoint"] = e }
            if let t = huawei.tokenURL { s["token_url"] = t }
            if let v = huawei.maxRetry { s["max_retry"] = v }
            out["huawei"] = s
        }
        return out
    }
}
