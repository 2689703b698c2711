import Foundation
import GatewayCore
import PushgateCore

/// Sygnal's `sygnal.yaml` read as Pushgate's configuration: `pushgate serve --config sygnal.yaml`.
///
/// Recognised by its `apps` being a mapping keyed by Matrix app id (Pushgate's is a list) or by
/// its `http` section. Each Sygnal app becomes a Pushgate app (its credentials) and a `matrix.apps`
/// entry (how its pushes are made); `http.bind_addresses`/`port` become `matrix.address`/`port`,
/// `proxy` becomes `core.http_proxy`. What cannot be honoured is a one-line error naming the key;
/// what does not matter to Pushgate (Python logging, connection counts) is one warning each.
public enum SygnalConfig: ConfigDialect {
    public static func translate(_ tree: [String: Any]) throws -> (tree: [String: Any], warnings: [String])? {
        let appsIsMapping = tree["apps"] is [String: Any]
        let http = tree["http"] as? [String: Any]
        guard appsIsMapping || http != nil else { return nil }
        var warnings = ["read as Sygnal's sygnal.yaml: the Matrix Push Gateway API on http.port, Pushgate's own API on core.port"]
        var out: [String: Any] = [:]
        var core: [String: Any] = [:]
        var matrix: [String: Any] = ["enabled": true]
        for (key, value) in tree {
            switch key {
            case "http":
                guard let h = value as? [String: Any] else { throw ConfigError(key: "http", problem: "expected a mapping (bind_addresses, port)") }
                for (k, v) in h {
                    switch k {
                    case "port":
                        guard let p = v as? Int else { throw ConfigError(key: "http.port", problem: "expected a port number") }
                        matrix["port"] = p
                    case "bind_addresses":
                        let list = (v as? [Any])?.compactMap { $0 as? String } ?? (v as? String).map { [$0] } ?? []
                        guard !list.isEmpty else { throw ConfigError(key: "http.bind_addresses", problem: "expected a list of addresses") }
                        // A Matrix listener on each address; Pushgate's own API on one of them ("::"
                        // when listed: it takes IPv4 too, else the first).
                        matrix["address"] = list.count == 1 ? list[0] : list
                        core["address"] = list.contains("::") ? "::" : list[0]
                    default:
                        warnings.append("http.\(k) is not a Sygnal key; ignored")
                    }
                }
            case "proxy":
                if let p = value as? String, !p.isEmpty { core["http_proxy"] = p }
            case "log":
                warnings.append("log.* (Python logging) accepted but not acted on: Pushgate logs to stderr (its own log section)")
            case "database":
                warnings.append("database is not used (Sygnal no longer reads it either)")
            case "metrics":
                try metrics(value, warnings: &warnings)
            case "apps":
                guard let apps = value as? [String: Any] else {
                    if value is NSNull { continue }
                    throw ConfigError(key: "apps", problem: "expected a mapping of Matrix app ids")
                }
                var matrixApps: [String: Any] = [:]
                var pushgateApps: [[String: Any]] = []
                var used: Set<String> = [AppID.defaultApp]
                for name in apps.keys.sorted() {
                    guard let cfg = apps[name] as? [String: Any] else {
                        throw ConfigError(key: "apps.\(name)", problem: "expected a mapping with a type")
                    }
                    let id = appID(for: name, used: &used)
                    let (entry, app) = try translateApp(name: name, cfg, pushgateID: id, warnings: &warnings)
                    matrixApps[name] = entry
                    pushgateApps.append(app)
                }
                matrix["apps"] = matrixApps
                out["apps"] = pushgateApps
            default:
                warnings.append("unknown Sygnal key \(key) ignored")
            }
        }
        if !core.isEmpty { out["core"] = core }
        out["matrix"] = matrix
        return (out, warnings)
    }

    static func metrics(_ value: Any, warnings: inout [String]) throws {
        guard let m = value as? [String: Any] else { return }
        func enabled(_ section: String) -> Bool { ((m[section] as? [String: Any])?["enabled"] as? Bool) == true }
        if enabled("prometheus") {
            warnings.append(
                "metrics.prometheus: served at /metrics on core.port (Sygnal's names beside Pushgate's), not on metrics.prometheus.port")
        }
        if enabled("opentracing") {
            throw ConfigError(key: "metrics.opentracing.enabled", problem: "OpenTracing is not supported by Pushgate; set it to false")
        }
        if enabled("sentry") {
            throw ConfigError(key: "metrics.sentry.enabled", problem: "Sentry is not supported by Pushgate; set it to false")
        }
    }

    /// A Pushgate app id for a Matrix app name: the characters app ids allow, 64 at most, unique.
    static func appID(for name: String, used: inout Set<String>) -> String {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
        var base = String(String(name.map { allowed.contains($0) ? $0 : "_" }).prefix(56))
        if base.isEmpty { base = "matrix" }
        var id = base
        var n = 2
        while used.contains(id) {
            id = "\(base)-\(n)"
            n += 1
        }
        used.insert(id)
        return id
    }

    static func translateApp(
        name: String, _ cfg: [String: Any], pushgateID: String, warnings: inout [String]
    ) throws -> (matrix: [String: Any], app: [String: Any]) {
        let path = "apps.\(name)"
        func string(_ key: String) throws -> String? {
            guard let v = cfg[key] else { return nil }
            if v is NSNull { return nil }
            guard let s = v as? String else { throw ConfigError(key: "\(path).\(key)", problem: "expected a string") }
            return s
        }
        func require(_ key: String) throws -> String {
            guard let s = try string(key), !s.isEmpty else { throw ConfigError(key: "\(path).\(key)", problem: "required") }
            return s
        }
        let ignored: Set<String> = ["inflight_request_limit", "max_connections"]
        var entry: [String: Any] = ["app": pushgateID]
        var app: [String: Any] = ["id": pushgateID]
        // `type` is a built-in pushkin's short name or a class path (`sygnal.apnspushkin.ApnsPushkin`).
        let builtIn = [
            "sygnal.apnspushkin.ApnsPushkin": "apns", "sygnal.gcmpushkin.GcmPushkin": "gcm", "sygnal.webpushpushkin.WebpushPushkin": "webpush",
        ]
        let written = try string("type") ?? ""
        let type = builtIn[written] ?? written
        var known: Set<String> = ["type"]
        switch type {
        case "apns":
            known.formUnion([
                "platform", "certfile", "keyfile", "key_id", "team_id", "topic", "push_type", "convert_device_token_to_hex", "send_badge_counts",
            ])
            entry["platform"] = "ios"
            var ios: [String: Any] = [:]
            switch try string("platform") {
            case nil, "", "production", "prod": ios["production"] = true
            case "sandbox": ios["production"] = false
            case let other?: throw ConfigError(key: "\(path).platform", problem: "\(other) is not production or sandbox")
            }
            if let cert = try string("certfile"), !cert.isEmpty {
                ios["key_path"] = cert
            } else if let key = try string("keyfile"), !key.isEmpty {
                ios["key_path"] = key
                ios["key_id"] = try require("key_id")
                ios["team_id"] = try require("team_id")
                ios["topic"] = try require("topic")
            } else {
                throw ConfigError(
                    key: "\(path).keyfile", problem: "an APNs key (keyfile, key_id, team_id, topic) or certificate (certfile) is required")
            }
            if let t = try string("topic"), !t.isEmpty { ios["topic"] = t }
            if let t = try string("push_type"), !t.isEmpty { entry["push_type"] = t }
            if let c = cfg["convert_device_token_to_hex"] {
                guard let b = c as? Bool else { throw ConfigError(key: "\(path).convert_device_token_to_hex", problem: "expected true or false") }
                entry["convert_device_token_to_hex"] = b
            }
            app["ios"] = ios
        case "gcm":
            known.formUnion(["api_key", "api_version", "project_id", "service_account_file", "fcm_options", "send_badge_counts"])
            entry["platform"] = "android"
            let version = try string("api_version") ?? "legacy"
            guard version == "v1" else {
                throw ConfigError(
                    key: "\(path).api_version",
                    problem: "the legacy FCM API (api_key) was shut down by Google; use api_version: v1 with service_account_file and project_id")
            }
            app["android"] = ["key_path": try require("service_account_file")]
            if try string("project_id") != nil {
                warnings.append("\(path).project_id: Pushgate sends to the project of service_account_file (its project_id)")
            }
            if let o = cfg["fcm_options"] {
                guard o is [String: Any] else { throw ConfigError(key: "\(path).fcm_options", problem: "expected a mapping") }
                entry["fcm_options"] = o
            }
        case "webpush":
            known.formUnion(["vapid_private_key", "vapid_contact_email", "allowed_endpoints", "ttl"])
            entry["platform"] = "webpush"
            let file = try require("vapid_private_key")
            let pem: String
            do { pem = try String(contentsOfFile: file, encoding: .utf8) } catch {
                throw ConfigError(key: "\(path).vapid_private_key", problem: "cannot read \(file): \(error.localizedDescription)")
            }
            let email = try require("vapid_contact_email")
            app["webpush"] = ["vapid_private_key": pem, "vapid_subject": email.hasPrefix("mailto:") ? email : "mailto:\(email)"]
            if let a = cfg["allowed_endpoints"] { entry["allowed_endpoints"] = a }
            if let t = cfg["ttl"] { entry["ttl"] = t }
        default:
            throw ConfigError(key: "\(path).type", problem: "\(type.isEmpty ? "missing" : type): Pushgate serves apns, gcm and webpush")
        }
        // Sygnal 0.17's `send_badge_counts` (apns and gcm; default true).
        if type == "apns" || type == "gcm", let v = cfg["send_badge_counts"] {
            guard let b = v as? Bool else { throw ConfigError(key: "\(path).send_badge_counts", problem: "expected true or false") }
            entry["send_badge_counts"] = b
        }
        for key in cfg.keys.sorted() where !known.contains(key) {
            warnings.append(
                ignored.contains(key)
                    ? "\(path).\(key) not acted on (Pushgate's limits are per provider)" : "\(path).\(key) is not understood; ignored")
        }
        return (entry, app)
    }
}
