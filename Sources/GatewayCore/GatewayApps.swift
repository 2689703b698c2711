import Foundation
import Logging
import NIOConcurrencyHelpers
import ProviderKit
import PushDispatch
import PushgateCore

/// What a reload replaces: the configuration as loaded, the keys, each app's rate limiter and the
/// fingerprint of its provider sections (an app whose sections did not change keeps its providers).
struct GatewayRuntime: Sendable {
    var raw: RawConfig
    var auth: IngestAuth
    var limiters: [String: RateLimiter] = [:]
    var fingerprints: [String: String] = [:]

    init(raw: RawConfig, auth: IngestAuth, environment: [String: String], now: Double, previous: GatewayRuntime? = nil) {
        self.raw = raw
        self.auth = auth
        var rates: [String: Int] = [AppID.defaultApp: raw.section("core")[CoreConfig.appRateLimit]]
        fingerprints[AppID.defaultApp] = Self.defaultAppFingerprint(raw)
        for app in raw.apps {
            rates[app.id] = app.rateLimit
            fingerprints[app.id] = app.fingerprint
        }
        for (id, rate) in rates where rate > 0 {
            // A limiter whose rate did not change keeps its bucket (a reload is no free burst).
            if let old = previous?.limiters[id], old.rate == rate { limiters[id] = old } else { limiters[id] = RateLimiter(rate: rate, now: now) }
        }
    }

    /// The top-level provider sections' values (the default app's providers).
    static func defaultAppFingerprint(_ raw: RawConfig) -> String {
        let prefixes = ProviderRegistry.sections.map { $0.name + "." }
        return raw.values.keys.filter { k in prefixes.contains { k.hasPrefix($0) } }.sorted().map { "\($0)=\(raw.values[$0].map { "\($0)" } ?? "")" }
            .joined(separator: "\n")
    }
}

/// `apps[].rate_limit`: a token bucket of `rate` deliveries per second holding one second of burst.
/// A request larger than one second's worth passes when the bucket is full and leaves it in debt, so a
/// big request is slowed, never refused for ever.
final class RateLimiter: Sendable {
    let rate: Int
    private let bucket: NIOLockedValueBox<(tokens: Double, last: Double)>

    init(rate: Int, now: Double) {
        self.rate = max(1, rate)
        bucket = NIOLockedValueBox((Double(max(1, rate)), now))
    }

    /// Gives back what `take(n)` took for a request that was then not queued (503, 500).
    func refund(_ n: Int) {
        let r = Double(rate)
        bucket.withLockedValue { b in b.tokens = min(r, b.tokens + Double(max(0, n))) }
    }

    /// Takes `n` deliveries' worth; nil when they may go, else the seconds to wait (1...3600).
    func take(_ n: Int, now: Double) -> Int? {
        let r = Double(rate)
        return bucket.withLockedValue { b in
            let elapsed = now - b.last
            if elapsed.isFinite, elapsed > 0 { b.tokens = min(r, b.tokens + elapsed * r) }
            b.last = max(b.last, now)
            let need = Double(max(0, n))
            if b.tokens >= min(need, r) {
                b.tokens -= need
                return nil
            }
            let wait = (min(need, r) - b.tokens) / r
            guard wait.isFinite else { return 3600 }
            return Int(min(3600, max(1, wait.rounded(.up))))
        }
    }
}

/// What a reload did.
public struct ReloadSummary: Sendable, Equatable {
    public var added: [String] = []
    public var removed: [String] = []
    /// Apps whose provider sections changed (rebuilt).
    public var changed: [String] = []
    /// Settings that changed but need a restart (listening address, queue …).
    public var needsRestart: [String] = []

    var line: String {
        func list(_ l: [String]) -> String { l.isEmpty ? "none" : l.joined(separator: ", ") }
        var s = "configuration reloaded: apps added \(list(added)), removed \(list(removed)), rebuilt \(list(changed))"
        if !needsRestart.isEmpty { s += "; changed but applied only at restart: \(needsRestart.joined(separator: ", "))" }
        return s
    }
}

public struct ReloadError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

extension Gateway {
    /// Keys a reload applies; any other key outside the provider sections needs a restart.
    static let reloadableKeys: Set<String> = [
        "core.api_keys", "core.admin_keys", "core.app_max_pending", "core.app_rate_limit",
    ]

    /// Reads the configuration again (SIGHUP, `POST /api/reload`): apps and keys added, removed or
    /// rotated; an app whose provider sections changed gets new providers (the old ones are closed once
    /// their sends are over). Queued and in-flight deliveries go on. A bad new file changes nothing:
    /// the error names the key, and the running configuration stays.
    @discardableResult
    public func reload() async throws -> ReloadSummary {
        guard let source = reloadSource, let context = buildContext else {
            throw ReloadError(description: "this gateway was started without a configuration source to reload")
        }
        let busy = reloading.withLockedValue { r in
            defer { r = true }
            return r
        }
        guard !busy else { throw ReloadError(description: "a reload is already under way") }
        defer { reloading.withLockedValue { $0 = false } }

        let raw: RawConfig
        let settings: GatewaySettings
        do {
            raw = try source()
            settings = try GatewaySettings(raw)
        } catch {
            logger.error("reload refused, the running configuration is kept: \(error)")
            throw ReloadError(description: "\(error)")
        }
        let previous = runtime.withLockedValue { $0 }
        let next = GatewayRuntime(raw: raw, auth: settings.auth, environment: environment, now: clock(), previous: previous)

        var summary = ReloadSummary()
        var apps: [AppProviders] = []
        var built: [AppProviders] = []
        do {
            let wanted: [(id: String, maxPending: Int, config: () -> ProviderConfig)] =
                [(AppID.defaultApp, raw.section("core")[CoreConfig.appMaxPending], { raw.providerConfig(environment: self.environment) })]
                + raw.apps.map { app in (app.id, app.maxPending, { app.providerConfig() }) }
            for w in wanted {
                if let current = dispatcher.app(w.id), previous.fingerprints[w.id] == next.fingerprints[w.id] {
                    current.maxPending = w.maxPending
                    apps.append(current)
                    continue
                }
                let b = try ProviderSet.buildApp(w.config(), context: context, app: w.id == AppID.defaultApp ? nil : w.id)
                for warning in b.warnings { logger.warning("\(warning)") }
                let a = AppProviders(id: w.id, slots: b.providers, unavailable: b.unavailable, maxPending: w.maxPending, shutdown: b.close)
                built.append(a)
                apps.append(a)
                if dispatcher.app(w.id) == nil { summary.added.append(w.id) } else { summary.changed.append(w.id) }
            }
        } catch {
            for a in built { await a.shutdown() }
            logger.error("reload refused, the running configuration is kept: \(error)")
            throw ReloadError(description: "\(error)")
        }
        let kept = Set(apps.map(\.id))
        // The ways in's own sections, checked against the new apps before anything is replaced.
        var adapterSteps: [AdapterReload] = []
        do {
            for s in adapterSections.all { adapterSteps.append(try s.reload(raw, kept)) }
        } catch {
            for a in built { await a.shutdown() }
            logger.error("reload refused, the running configuration is kept: \(error)")
            throw ReloadError(description: "\(error)")
        }
        summary.removed = dispatcher.appIDs.filter { !kept.contains($0) }
        let providerPrefixes = ProviderRegistry.sections.map { $0.name + "." }
        summary.needsRestart = Set(raw.values.keys).union(previous.raw.values.keys).filter { k in
            !Self.reloadableKeys.contains(k) && !providerPrefixes.contains { k.hasPrefix($0) } && raw.values[k] != previous.raw.values[k]
        }.sorted()

        for w in raw.warnings { logger.warning("\(w)") }
        let retired = dispatcher.setApps(apps)
        runtime.withLockedValue { $0 = next }
        for step in adapterSteps {
            step.apply()
            summary.needsRestart += step.needsRestart
        }
        let timeout = Double(self.settings.shutdownTimeout)
        if !retired.isEmpty {
            Task {
                for r in retired { await r.retire(timeout: timeout) }
            }
        }
        logger.notice("\(summary.line)")
        return summary
    }

    /// Deliveries in `request`, for the app's rate limit.
    static func deliveryCount(_ request: PushRequest) -> Int {
        request.notifications.reduce(0) { $0 + max(1, $1.targets(ProviderRegistry.platformRules[$1.platform]).count) }
    }
}
