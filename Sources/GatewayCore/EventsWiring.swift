import AsyncHTTPClient
import Foundation
import Logging
import ProviderKit
import PushDispatch
import QueueStore

/// The delivery event stream a configuration asks for (`events.*`): its store beside the queue
/// engine's (the same SQLite file or PostgreSQL database; memory: a bounded buffer) and the webhook.
public struct EventsWiring: Sendable {
    public var stream: EventStream
    public var webhook: EventWebhook?

    /// Nil when `events.enabled` is false and no `events.webhook_url` is set.
    public static func make(raw: RawConfig, settings: GatewaySettings, clients: OutboundHTTPClients?, logger: Logger) throws -> EventsWiring? {
        let section = raw.section("events")
        let url = section[EventsConfig.webhookURL].trimmingCharacters(in: .whitespaces)
        guard section[EventsConfig.enabled] || !url.isEmpty else { return nil }
        if !url.isEmpty {
            // Untrusted configuration: an http(s) URL with a host, nothing else (no file:, no unix sockets).
            guard let c = URLComponents(string: url), let scheme = c.scheme?.lowercased(), ["http", "https"].contains(scheme),
                let host = c.host, !host.isEmpty
            else {
                throw ConfigError(key: "events.webhook_url", problem: "\"\(url.prefix(256))\" is not an http(s) URL with a host")
            }
        }
        var types: Set<PushEventType>?
        let named = section[EventsConfig.types]
        if !named.isEmpty {
            var set = Set<PushEventType>()
            for n in named {
                guard let t = PushEventType(rawValue: n) else {
                    throw ConfigError(
                        key: "events.types",
                        problem: "\"\(n.prefix(64))\" is not an event type (\(PushEventType.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                set.insert(t)
            }
            types = set
        }
        let maxStored = section[EventsConfig.maxStored]
        let store: any EventStore
        switch settings.queueEngine {
        case "sqlite":
            let path = raw.section("queue")[QueueConfig.sqlitePath]
            do {
                store = try BlockingStartup.run(what: "opening the events of \(path)") {
                    try await SQLiteEventStore.open(path: path, maxStored: maxStored)
                }
            } catch {
                throw ConfigError(key: "events", problem: "cannot open the event store in \(path): \(error)")
            }
        case "postgres":
            let pg = raw.section("queue")[QueueConfig.postgresURL]
            do {
                store = try BlockingStartup.run(what: "opening the PostgreSQL event store") {
                    try await PostgresEventStore.open(url: pg, maxStored: maxStored)
                }
            } catch {
                throw ConfigError(key: "events", problem: "cannot open the PostgreSQL event store: \(String(reflecting: error))")
            }
        default:
            store = MemoryEventStore(maxStored: maxStored)
        }
        let stream = EventStream(
            store: store, hideToken: settings.hideToken, platformRules: ProviderRegistry.platformRules, types: types, countsDrops: !url.isEmpty,
            maxClients: section[EventsConfig.sseMaxClients], clientBuffer: section[EventsConfig.sseClientBuffer],
            logger: Logger(label: "pushgate.events"))
        var webhook: EventWebhook?
        if !url.isEmpty, let clients {
            webhook = EventWebhook(
                url: url, secret: section[EventsConfig.secret], client: clients.client(for: url), stream: stream,
                batchMax: section[EventsConfig.batchMax], batchMilliseconds: section[EventsConfig.batchMs],
                timeoutSeconds: section[EventsConfig.timeout], retryMax: Double(section[EventsConfig.retryMaxMs]) / 1000)
        }
        logger.info(
            "delivery events: \(settings.queueEngine) store, at most \(maxStored) kept\(webhook == nil ? "" : ", webhook \(webhook?.safeURL ?? "")")")
        return EventsWiring(stream: stream, webhook: webhook)
    }
}
