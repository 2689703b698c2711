import ArgumentParser
import Foundation
import GatewayCore
import Logging
import PushgateCore

/// `pushgate send`: one push from the command line (gorush's `-ios` / `-android` mode) for every
/// provider, built from the same config file as `serve`; prints the provider's answer.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send one push from the command line using the gateway's config, and print the provider's answer.",
        discussion: """
            Examples:
              pushgate send -c config/pushgate.yml --platform ios --token <hex> --title Hi --message Hello --topic com.example.app
              pushgate send --platform android --token <fcm token> --message Hello --data '{"chatId":"42"}'
              pushgate send --platform webpush --subscription '{"endpoint":"https://...","keys":{"p256dh":"...","auth":"..."}}' --message Hi
              pushgate send --platform unifiedpush --endpoint https://ntfy.example/upXYZ --message Hi
            Exit status: 0 delivered, 1 refused by the provider (its reason is printed) or a config error.
            """
    )

    @Option(name: .shortAndLong, help: "YAML config file (the gateway's; default: gorush's search, then config/pushgate.yml).") var config: String?
    @Option(help: ArgumentHelp("\(ProviderRegistry.numberedNames) (the number or the name).")) var platform: String
    @Option(help: "Device token (repeatable; APNs hex token, FCM registration token).") var token: [String] = []
    @Option(help: "Message (alert body).") var message: String?
    @Option(help: "Title.") var title: String?
    @Option(help: "APNs topic (bundle id); defaults to ios.topic. FCM: topic name for a topic send.") var topic: String?
    @Option(help: "Custom data, a JSON object.") var data: String?
    @Option(help: "APNs push type (alert, background, voip, ...).") var pushType: String?
    @Option(help: "normal or high.") var priority: String?
    @Option(help: "APNs sound / FCM sound.") var sound: String?
    @Option(help: "Badge number.") var badge: Int?
    @Option(help: "apns-collapse-id / Web Push Topic.") var collapseID: String?
    @Flag(help: "Set content-available (background wake-up).") var contentAvailable = false
    @Flag(help: "Set mutable-content.") var mutableContent = false
    @Flag(help: "APNs production environment for this push.") var production = false
    @Flag(help: "APNs development (sandbox) environment for this push.") var development = false
    @Option(help: "Web Push subscription JSON (repeatable): {\"endpoint\":...,\"keys\":{\"p256dh\":...,\"auth\":...}}.") var subscription: [String] =
        []
    @Option(help: "UnifiedPush endpoint URL (repeatable; legacy unencrypted POST).") var endpoint: [String] = []
    @Option(help: "APNs broadcast channel id (repeatable; a Live Activity update to every subscriber, push type liveactivity).")
    var channel: [String] = []
    @Option(help: "A whole gorush notification object (JSON); the other fields override it.") var notification: String?
    @Option(name: .customLong("set"), help: "Config override key=value (repeatable), e.g. --set ios.production=true.") var overrides: [String] = []
    @Option(help: "Send with this app's provider sections (apps[].id in the config; default: the top-level sections).") var app: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .warning
            return h
        }
        var raw = loadConfig(config)
        if let app {
            do { raw = try raw.forApp(app) } catch { fail("\(error)") }
        }
        for o in overrides {
            do { try raw.set(assignment: o) } catch { fail("\(error)") }
        }

        let n = try buildNotification()
        if await !Self.deliver(n, raw: raw, json: json) { throw ExitCode(1) }
    }

    /// Sends `n` once per target with the provider `raw` configures, prints each result (stdout:
    /// delivered, stderr: refused with the provider's reason) and says whether all were delivered.
    static func deliver(_ n: PushNotification, raw: RawConfig, json: Bool, tool: String = "pushgate send") async -> Bool {
        let provider: SendProvider
        do {
            provider = try SendProvider.make(platform: n.platform, raw: raw)
        } catch {
            fail("\(error)")
        }
        let results = await provider.send(n)
        await provider.shutdown()

        var failed = false
        var jsonItems: [String] = []
        for r in results {
            var w = JSONWriter()
            var first = true
            w.raw("{")
            w.key("target", first: &first)
            w.string(r.target)
            switch r.outcome {
            case .delivered(let id, let detail):
                let label = provider.deliveredIDLabel
                print("delivered \(r.target.isEmpty ? "" : "to \(r.target) ")— \(label): \(id ?? "-")\(detail.map { " (\($0))" } ?? "")")
                w.key("delivered", first: &first)
                w.raw("true")
                w.key("provider_id", first: &first)
                if let id { w.string(id) } else { w.raw("null") }
                if let detail {
                    w.key("provider_detail", first: &first)
                    w.string(detail)
                }
            default:
                failed = true
                let status = r.outcome.status.map { "HTTP \($0) " } ?? ""
                FileHandle.standardError.write(
                    Data(
                        "\(tool): \(r.target.isEmpty ? "" : "\(r.target): ")\(status)\(r.outcome.reason ?? "failed") (\(r.outcome.className))\n"
                            .utf8))
                w.key("delivered", first: &first)
                w.raw("false")
                w.key("status", first: &first)
                if let s = r.outcome.status { w.int(s) } else { w.raw("null") }
                w.key("reason", first: &first)
                w.string(r.outcome.reason ?? "")
                w.key("class", first: &first)
                w.string(r.outcome.className)
            }
            w.raw("}")
            jsonItems.append(w.string)
        }
        if json { print("[" + jsonItems.joined(separator: ",") + "]") }
        fflush(nil)
        return !failed
    }

    func buildNotification() throws -> PushNotification {
        var object: [String: Any] = [:]
        if let notification {
            guard let o = (try? JSONSerialization.jsonObject(with: Data(notification.utf8))) as? [String: Any] else {
                throw ValidationError("--notification is not a JSON object")
            }
            object = o
        }
        object["platform"] = Platform(name: platform.lowercased())?.rawValue ?? Int(platform) ?? platform
        if !token.isEmpty || !endpoint.isEmpty { object["tokens"] = token + endpoint }
        if let message { object["message"] = message }
        if let title { object["title"] = title }
        if let topic { object["topic"] = topic }
        if let pushType { object["push_type"] = pushType }
        if let priority { object["priority"] = priority }
        if let sound { object["sound"] = sound }
        if let badge { object["badge"] = badge }
        if let collapseID { object["collapse_id"] = collapseID }
        if !channel.isEmpty { object["channels"] = channel }
        if contentAvailable { object["content_available"] = true }
        if mutableContent { object["mutable_content"] = true }
        if production { object["production"] = true }
        if development { object["development"] = true }
        if let data {
            guard let d = (try? JSONSerialization.jsonObject(with: Data(data.utf8))) as? [String: Any] else {
                throw ValidationError("--data is not a JSON object")
            }
            object["data"] = d
        }
        if !subscription.isEmpty {
            object["subscriptions"] = try subscription.map { s -> Any in
                guard let o = (try? JSONSerialization.jsonObject(with: Data(s.utf8))) as? [String: Any] else {
                    throw ValidationError("--subscription is not a JSON object: \(s)")
                }
                return o
            }
        }
        return try Self.parseOne(object)
    }

    /// One gorush notification object checked as `POST /api/push` checks it.
    static func parseOne(_ object: [String: Any]) throws -> PushNotification {
        let body = try JSONSerialization.data(withJSONObject: ["notifications": [object]])
        let request: PushRequest
        var limits = ProviderRegistry.requestLimits
        limits.maxNotifications = 1
        do {
            request = try RequestParser.parse(Array(body), limits: limits)
        } catch {
            throw ValidationError("\(error.message)\(error.detail.map { ": \($0)" } ?? "")")
        }
        // A notification without a known platform is skipped by the parser (as gorush does).
        guard let n = request.notifications.first else {
            throw ValidationError(request.skipped.first?.reason ?? "unknown platform \(object["platform"].map { "\($0)" } ?? "(none)")")
        }
        if let problem = IngestValidation.validate(request: request, limits: limits) {
            throw ValidationError("\(problem.message)\(problem.detail.map { ": \($0)" } ?? "")")
        }
        if n.targets(ProviderRegistry.platformRules[n.platform]).isEmpty {
            throw ValidationError("give a target: --token, --topic (FCM), --channel (APNs broadcast), --subscription or --endpoint")
        }
        return n
    }
}

/// One provider built from the config by the gateway's own `ProviderSet` and its registry module.
struct SendProvider {
    struct Result {
        var target: String
        var outcome: SendOutcome
    }

    let provider: any PushProvider
    let deliveredIDLabel: String
    let hooks: [@Sendable () async -> Void]

    static func make(platform: Platform, raw: RawConfig) throws -> SendProvider {
        guard let module = ProviderRegistry.module(for: platform) else {
            throw ConfigError(key: platform.name, problem: "no provider module serves platform \(platform.name)")
        }
        if let unsupported = module as? UnsupportedProviderModule { throw unsupported.sendError }
        var raw = raw
        // Only the platform asked for, whatever the file enables.
        for p in ProviderRegistry.platforms { raw.set(p.name, ProviderSettings.enabled, p == platform) }
        for o in module.sendOverrides(for: platform, config: raw.providerConfig()) { raw.set(o.key, o.value) }
        let set = try ProviderSet.make(raw: raw, logger: Logger(label: "pushgate.send"))
        guard let slot = set.slots.first(where: { $0.provider.platform == platform }) else {
            throw ConfigError(key: "\(platform.name).enabled", problem: "no provider could be built")
        }
        return SendProvider(
            provider: slot.provider, deliveredIDLabel: module.deliveredIDLabel(for: platform),
            hooks: set.hooks + [{ await set.httpClients.shutdown() }])
    }

    /// One attempt per target: retries are the gateway's (`RetryPolicy`), never repeated here.
    func send(_ n: PushNotification) async -> [Result] {
        let rules = ProviderRegistry.platformRules[n.platform]
        let prepared: any PreparedPush
        do {
            prepared = try provider.prepare(n)
        } catch {
            let reason = (error as? PushFailure)?.reason ?? "\(error)"
            return n.targets(rules).map { Result(target: $0.reportedToken, outcome: .permanent(reason: reason, status: nil)) }
        }
        var out: [Result] = []
        for target in n.targets(rules) {
            if let failure = provider.validate(target: target, of: prepared) {
                out.append(Result(target: target.reportedToken, outcome: .permanent(reason: failure.reason, status: nil)))
                continue
            }
            let context = DeliveryContext(messageID: n.apnsID ?? UUID().uuidString.lowercased())
            let outcome = await provider.send(prepared, to: target, context: context)
            out.append(Result(target: target.reportedToken, outcome: outcome))
        }
        return out
    }

    func shutdown() async {
        for hook in hooks { await hook() }
    }
}
