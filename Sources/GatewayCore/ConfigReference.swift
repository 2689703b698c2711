import ProviderKit
import PushgateCore

/// docs/configuration.md, generated from the typed configuration: every section of `RawConfig.sections`
/// (the gateway's own and every provider module's), `apps[]` and the sections a way in reads itself
/// (`matrix:`), each key with its default, range, secrecy, environment override and description.
/// `pushgate config-reference > docs/configuration.md` writes it; a test fails when the committed file differs.
public enum ConfigReference {
    /// A section a way in parses itself (not in `RawConfig.sections`): its keys and what it is.
    public struct AdapterSection: Sendable {
        public var section: ConfigSection
        public var about: String
        /// Keys the environment overrides (`PUSHGATE_<SECTION>_<KEY>`).
        public var environmentKeys: Set<String>
        public init(_ section: ConfigSection, about: String, environmentKeys: Set<String>) {
            self.section = section
            self.about = about
            self.environmentKeys = environmentKeys
        }
    }

    /// What each of the gateway's own sections is for (provider sections: their module's platform).
    static let about: [String: String] = [
        "core": "the HTTP ingest, its limits, TLS, feedback and retries.",
        "api": "the paths of gorush's routes.",
        "log": "logging.",
        "queue": "the delivery queue engine (docs/durability.md).",
        "stat": "gorush's statistics backend (memory only).",
        "mock": "the built-in mock providers (`serve --mock`).",
        "grpc": "gorush's gRPC ingest (docs/grpc.md).",
        "events": "the delivery event stream: signed webhook and `GET /api/events` (docs/delivery-controls.md).",
        "ios": "Apple Push Notification service (platform `1`).",
        "android": "Firebase Cloud Messaging HTTP v1 (platform `2`).",
        "huawei": "Huawei HMS Push Kit (platform `3`, docs/huawei.md).",
        "webpush": "Web Push (platform `4`); its VAPID keys serve UnifiedPush too, and `max_concurrent_pushes` counts both.",
        "unifiedpush": "UnifiedPush (platform `5`), sent by the Web Push engine.",
        "harmony": "HarmonyOS Push Kit v3 (platform `6`, docs/harmonyos.md).",
    ]

    /// The environment variable overriding `section.key`: dots become underscores, upper-cased
    /// (as `RawConfig.init(tree:environment:)` reads them; `GORUSH_` works too, `PUSHGATE_` wins).
    public static func environmentName(_ section: String, _ key: String) -> String {
        "PUSHGATE_" + "\(section).\(key)".replacingOccurrences(of: ".", with: "_").uppercased()
    }

    static func yaml(_ v: ConfigValue) -> String {
        switch v {
        case .string(let s): return "\"\(s)\""
        case .int(let i): return "\(i)"
        case .bool(let b): return "\(b)"
        case .list(let l): return "[" + l.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
        }
    }

    /// The keys every provider section has (`ProviderSettings`) that gorush 1.22 has too; the others
    /// (and whole sections gorush lacks) are Pushgate's own.
    static let sharedKeysInGorush: Set<String> = [
        "ios.enabled", "android.enabled", "huawei.enabled", "ios.max_retry", "android.max_retry", "huawei.max_retry",
        "ios.max_concurrent_pushes",
    ]
    static let sharedKeys: Set<String> = ["enabled", "max_tokens", "max_retry", "max_concurrent_pushes", "coalesce_seconds"]
    static let sectionsNotInGorush: Set<String> = ["webpush", "unifiedpush", "harmony", "mock", "matrix", "events"]

    /// A table cell: pipes escaped; links written from the repository's root (`](docs/x.md)`) made
    /// relative to docs/.
    static func cell(_ s: String) -> String {
        s.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "](docs/", with: "](")
    }

    static func row(_ path: String, _ key: ConfigKey, env: String?, section: String? = nil) -> String {
        let range = key.range.map { "\($0.lowerBound)...\($0.upperBound)" } ?? ""
        let secrecy: String
        switch key.secrecy {
        case .plain: secrecy = ""
        case .secret: secrecy = "secret"
        case .identifier: secrecy = "identifier"
        }
        var doc = key.doc
        var gorush = "yes"
        if doc.hasPrefix("(new)") {
            gorush = "new"
            doc = String(doc.dropFirst(5)).trimmingCharacters(in: .whitespaces)
        }
        if let section {
            if sectionsNotInGorush.contains(section) { gorush = "new" }
            if sharedKeys.contains(key.name), Platform(name: section) != nil { gorush = sharedKeysInGorush.contains(path) ? "yes" : "new" }
        }
        let envCell = env.map { "`\($0)`" } ?? ""
        return "| `\(path)` | `\(cell(yaml(key.defaultValue)))` | \(range) | \(secrecy) | \(envCell) | \(gorush) | \(cell(doc)) |"
    }

    static let header = [
        "| key | default | range | secrecy | environment | in gorush | meaning |",
        "|---|---|---|---|---|---|---|",
    ]

    /// The whole page.
    public static func markdown(adapters: [AdapterSection]) -> String {
        var out: [String] = [
            "<!-- Generated by `swift run pushgate config-reference > docs/configuration.md`: edit the settings' `doc:` in the code, not this file. -->",
            "# Configuration reference",
            "",
            "YAML (`-c PATH` / `--config PATH`; without it gorush's search: `/etc/gorush/config.yml`,",
            "`$HOME/.gorush/config.yml`, `./config.yml`, then `config/pushgate.yml`, else built-in defaults; the",
            "file used is logged). A gorush `config.yml` starts Pushgate unchanged: each key Pushgate does not",
            "know, and each gorush key it accepts but does not act on, is one warning at start. Every key can be",
            "overridden from the environment as `PUSHGATE_<SECTION>_<KEY>` or, for drop-in use, `GORUSH_<SECTION>_<KEY>`",
            "(`PUSHGATE_` wins), e.g. `PUSHGATE_CORE_PORT=9000`. A bad configuration stops startup with one",
            "line naming the key, e.g. `pushgate: config error: ios.key_path: certs/x.p8 is not a P-256 PKCS#8",
            "private key (an APNs .p8 auth key)`. An integer outside its range is such an error.",
            "",
            "Columns: *secrecy* `secret` and `identifier` values read `[REDACTED]` in `GET /api/config`;",
            "*in gorush* `yes` when gorush 1.22 has the key under the same name, `new` when only Pushgate has it.",
            "The sample file is `config/pushgate.yml`; `config/mock.yml` points every provider at the built-in mocks.",
            "",
        ]
        for section in RawConfig.sections {
            out.append("## `\(section.name):`")
            out.append("")
            if let about = about[section.name] {
                out.append(about.prefix(1).uppercased() + about.dropFirst())
            } else {
                out.append("Provider section.")
            }
            out.append("")
            out += header
            for key in section.keys {
                out.append(row("\(section.name).\(key.name)", key, env: environmentName(section.name, key.name), section: section.name))
            }
            if !section.ignoredKeys.isEmpty {
                out.append("")
                out.append(
                    "Accepted from gorush and not used: " + section.ignoredKeys.map { "`\(section.name).\($0)`" }.joined(separator: ", ") + ".")
            }
            out.append("")
        }
        out.append("## `apps[]`")
        out.append("")
        out.append(
            "Further apps, each with its own keys and provider sections (docs/multi-app.md). Each entry takes these keys, "
                + "and any provider section above (`ios:`, `android:`, …) with that section's keys and defaults: a section "
                + "present is enabled unless it says `enabled: false`, a section absent is off, nothing is inherited from the "
                + "top-level sections. No environment overrides.")
        out.append("")
        out += header
        for key in AppConfig.documentedKeys { out.append(row("apps[].\(key.name)", key, env: nil)) }
        out.append("")
        for adapter in adapters {
            out.append("## `\(adapter.section.name):`")
            out.append("")
            out.append(adapter.about)
            out.append("")
            out += header
            for key in adapter.section.keys {
                let env = adapter.environmentKeys.contains(key.name) ? environmentName(adapter.section.name, key.name) : nil
                out.append(row("\(adapter.section.name).\(key.name)", key, env: env, section: adapter.section.name))
            }
            out.append("")
        }
        out.append("## gorush keys accepted and not acted on")
        out.append("")
        out.append("Each group present in the file or the environment is one warning at start:")
        out.append("")
        for group in RawConfig.notActedOn {
            out.append("- `\(group.prefix.hasSuffix(".") ? group.prefix + "*" : group.prefix)`: \(group.why)")
        }
        out.append("")
        return out.joined(separator: "\n")
    }
}
