@_exported import APNs
@_exported import FCM
@_exported import Harmony
@_exported import Honor
@_exported import Huawei
@_exported import Oppo
import ProviderKit
import PushgateCore
@_exported import Vivo
@_exported import WNS
@_exported import WebPush
@_exported import Xiaomi

/// Every provider the gateway knows, in order: the server (sections, request members and rules,
/// `/metrics`, the status page, the configuration reference), `pushgate send`, `pushgate bench` and
/// the fuzz targets iterate this list. Adding a provider: its folder (its `ProviderModule`, which
/// declares its `Platform` and request members), one line here with its `@_exported import`, its
/// targets in Package.swift, and its mock's line in `MockProviders/MockRegistry.swift`
/// (docs/architecture.md); `ProviderContributionTests` names what is missing. This is the only file
/// outside the provider folders that imports a provider module.
public enum ProviderRegistry {
    public static let modules: [any ProviderModule] = {
        let modules: [any ProviderModule] = [
            APNsModule(),
            FCMModule(),
            HuaweiModule(),
            WebPushModule(),
            HarmonyModule(),
            WNSModule(),
            HonorModule(),
            XiaomiModule(),
            OppoModule(),
            VivoModule(),
        ]
        // Declares every module's platforms (their static lets), so that numbers and names read
        // from requests and stores are known before anything else asks.
        _ = modules.flatMap(\.platforms)
        return modules
    }()

    /// Every provider configuration section, in registry order. A platform's section also gets the
    /// keys the dispatcher reads for every provider (`coalesce_seconds`).
    public static let sections: [ConfigSection] = modules.flatMap(\.sections).map { section in
        guard Platform(name: section.name) != nil, !section.keys.contains(where: { $0.name == ProviderSettings.coalesceSeconds.name }) else {
            return section
        }
        var s = section
        s.keys.append(ProviderSettings.coalesceSeconds.key)
        return s
    }

    /// Every platform a module serves (or answers as unsupported).
    public static let platforms: [Platform] = modules.flatMap(\.platforms)

    /// The module serving `platform`.
    public static func module(for platform: Platform) -> (any ProviderModule)? {
        modules.first { $0.platforms.contains(platform) }
    }

    /// Every platform's request rules, from its module: what the parser and the ingest checks hold
    /// notifications to.
    public static let platformRules: [Platform: PlatformRules] = Dictionary(
        uniqueKeysWithValues: modules.flatMap { m in m.platforms.map { ($0, m.requestRules(for: $0)) } })

    /// The request limits' defaults with every platform's rules.
    public static var requestLimits: RequestLimits { RequestLimits(platforms: platformRules, members: requestMembers) }

    /// Every module's notification members, in registry order.
    public static let requestMembers: [RequestMember] = modules.flatMap(\.requestMembers)

    /// Every platform's `/metrics` counters, in registry order.
    public static let counters: [(platform: Platform, counters: PlatformCounters)] = modules.flatMap { m in
        m.platforms.map { ($0, m.counters(for: $0)) }
    }

    /// How each platform is shown, in registry order.
    public static let presentations: [(platform: Platform, presentation: PlatformPresentation)] = modules.flatMap { m in
        m.platforms.map { ($0, m.presentation(for: $0)) }
    }

    /// "1 ios, 2 android, …, or 6 harmony": the platforms' numbers and names, for help texts.
    public static var numberedNames: String { alternatives(platforms.map { "\($0.rawValue) \($0.name)" }) }

    /// "a, b or c" (help texts and messages that list platforms).
    public static func alternatives(_ items: [String]) -> String {
        guard items.count > 1 else { return items.joined() }
        return items.dropLast().joined(separator: ", ") + " or " + (items.last ?? "")
    }

    /// The command-line helpers of every module.
    public static var tools: [ProviderTool] { modules.flatMap(\.tools) }
}
