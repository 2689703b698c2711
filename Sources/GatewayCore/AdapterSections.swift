import NIOConcurrencyHelpers

/// What a way in that reads a section of its own (`RawConfig.adapterSections`: `matrix`) tells the
/// gateway: how the section shows in `GET /api/config`, and what a reload does with it.
public struct AdapterSection: Sendable {
    /// The section's name (`matrix`).
    public var name: String
    /// The section as `/api/config` shows it (effective values, secrets already `[REDACTED]`),
    /// from the configuration given (the running one).
    public var show: @Sendable (RawConfig) -> Any?
    /// Checks the section of a configuration being reloaded against the apps it will have
    /// (`apps`: their ids, the default app's included). Throws a `ConfigError` naming the key to
    /// refuse the reload (nothing changes); otherwise returns what to apply once the reload is
    /// committed, and the keys that changed but take effect only at a restart.
    public var reload: @Sendable (_ raw: RawConfig, _ apps: Set<String>) throws -> AdapterReload

    public init(
        name: String, show: @escaping @Sendable (RawConfig) -> Any?,
        reload: @escaping @Sendable (_ raw: RawConfig, _ apps: Set<String>) throws -> AdapterReload
    ) {
        self.name = name
        self.show = show
        self.reload = reload
    }
}

/// A way in's part of a reload: applied after the gateway's own (the new apps in place).
public struct AdapterReload: Sendable {
    public var apply: @Sendable () -> Void
    /// Keys of the section that changed but need a restart (`matrix.port`): in the reload's log line.
    public var needsRestart: [String]

    public init(apply: @escaping @Sendable () -> Void, needsRestart: [String] = []) {
        self.apply = apply
        self.needsRestart = needsRestart
    }
}

/// The registered sections (one per name: a later registration replaces the earlier).
final class AdapterSections: Sendable {
    private let list = NIOLockedValueBox<[AdapterSection]>([])

    func add(_ s: AdapterSection) {
        list.withLockedValue { l in
            l.removeAll { $0.name == s.name }
            l.append(s)
        }
    }

    var all: [AdapterSection] { list.withLockedValue { $0 } }
}

extension Gateway {
    /// Registers a way in's own section: shown by `/api/config` and re-read by `reload()`.
    public func register(_ section: AdapterSection) { adapterSections.add(section) }

    /// `GET /api/config`: the running configuration as YAML, secrets `[REDACTED]`, with the ways
    /// in's own sections as they show them.
    public func configYAML() -> String {
        let raw = self.raw
        var extra: [String: Any] = [:]
        for s in adapterSections.all { if let v = s.show(raw) { extra[s.name] = v } }
        return raw.redactedYAML(extra: extra)
    }
}
