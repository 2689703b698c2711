import Foundation
import PushgateCore

/// The WNS `PushProvider`: one notification rendered once, sent to each of its channel URIs (its
/// `tokens`).
public final class WNSProvider: PushProvider {
    public let platform: Platform
    public let sender: WNSSender

    /// `platform` is the one the provider module declares for WNS.
    public init(platform: Platform, sender: WNSSender) {
        self.platform = platform
        self.sender = sender
    }

    /// The notification's own `wns` object (nil: a toast of its title and message).
    public static func options(of n: PushNotification) throws(WNSFieldProblem) -> WNSOptions? {
        guard let object = n.wns else { return nil }
        return try WNSOptions(decoding: .object(object))
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        do {
            return try sender.prepare(notification, options: Self.options(of: notification))
        } catch {
            throw PushFailure("\(error.field): \(error.problem)")
        }
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        switch target {
        case .token(let uri): return sender.validate(channel: uri)
        case .topic: return PushFailure("WNS has no topic sends")
        case .channel: return PushFailure("WNS has no broadcast channels")
        case .subscription: return PushFailure("WNS takes channel URIs in tokens, not Web Push subscriptions")
        }
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? PreparedWNS else { return .permanent(reason: "internal: not a WNS rendering", status: nil) }
        guard case .token(let uri) = target else {
            return .permanent(reason: validate(target: target, of: prepared)?.reason ?? "not a channel URI", status: nil)
        }
        return await sender.send(p, to: uri, messageID: context.messageID)
    }

    public func shutdown() async { await sender.shutdown() }

    /// Failing from a 403 until a send is accepted again (`WNSSender.health`).
    public var health: ProviderHealth { sender.health }

    /// Channel hosts resolved at ingest per request at most; the hosts past them are checked at send time only.
    public static let maxIngestHosts = 32
    /// Channel hosts resolved at once at ingest.
    public static let ingestLookups = 4

    /// WNS resolves channel hosts at ingest (`checkIngestAsync`).
    public var checksIngestAsync: Bool { true }

    /// The address half of the channel guard at ingest: a channel URI whose host resolves to a
    /// loopback, private or other non-public address is a 400 naming `tokens[k]`. Each distinct host
    /// of the request is checked once (`WNSAddressGuard`'s cache answers again for a minute), at most
    /// `maxIngestHosts` of them, `ingestLookups` at a time. A host DNS cannot answer now is accepted:
    /// the send-time guard checks every channel again before any connection.
    public func checkIngestAsync(_ notifications: [PushNotification]) async -> [Int: IngestProblem] {
        var hosts: [String] = []
        var seen: Set<String> = []
        var channelHosts: [[String?]] = []
        for n in notifications {
            var row: [String?] = []
            for token in n.tokens {
                guard case .success(let c) = WNSChannel.parse(token) else {
                    row.append(nil)
                    continue
                }
                row.append(c.host)
                if seen.count < Self.maxIngestHosts, seen.insert(c.host).inserted { hosts.append(c.host) }
            }
            channelHosts.append(row)
        }
        guard !hosts.isEmpty else { return [:] }
        let verdicts = await sender.addressGuard.check(hosts, concurrency: Self.ingestLookups)
        var problems: [Int: IngestProblem] = [:]
        for (i, row) in channelHosts.enumerated() {
            for (k, host) in row.enumerated() {
                guard let host, case .refused(let why)? = verdicts[host] else { continue }
                problems[i] = IngestProblem(message: "Invalid WNS channel URI.", detail: "tokens[\(k)]: \(why)")
                break
            }
        }
        return problems
    }

    /// The ingest check of a WNS notification: every token a channel URI of the right shape (a 400
    /// naming `tokens[k]`), and its payload renders (a 400 naming the field).
    public static func checkIngest(_ n: PushNotification, options: WNSOptions?) -> (detail: String, message: String)? {
        for (k, token) in n.tokens.enumerated() {
            if case .failure(let f) = WNSChannel.parse(token) { return ("tokens[\(k)]: \(f.reason)", "Invalid WNS channel URI.") }
        }
        do {
            _ = try PreparedWNS.render(options, title: n.title, message: n.message, timeToLive: n.timeToLive)
        } catch {
            return ("\(error.field): \(error.problem)", "Invalid WNS notification.")
        }
        return nil
    }
}
