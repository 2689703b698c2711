import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// The types of the delivery event stream (`events.*`, `GET /api/events`, the webhook): each delivery
/// has one `accepted` and, once over, exactly one terminal event (`sent`, `fallback_sent`, `failed`,
/// `token_dead`, `coalesced`, `duplicate`, `cancelled` or `quiet_hours`); `retrying` and `scheduled` in between.
public enum PushEventType: String, Sendable, CaseIterable {
    case accepted
    case sent
    /// Sent as the notification's `fallback` (its own rendering was over the provider's limit).
    case fallbackSent = "fallback_sent"
    case retrying
    case failed
    /// The provider said the token is gone (the condition the feedback hook and dead-token counter use).
    case tokenDead = "token_dead"
    /// Replaced by a later push of the same `collapse_id` in its coalescing window.
    case coalesced
    /// Not sent: another notification with the same `dedup_key` went to this token inside the TTL.
    case duplicate
    /// Held for its send time (`send_at`, `delay_seconds`, quiet hours): after `accepted`, with `next_try`.
    case scheduled
    /// Cancelled before it was sent (`DELETE /api/push/{notif_id}`).
    case cancelled
    /// Not sent: due outside its `deliver_between` window with `"quiet": "drop"`.
    case quietHours = "quiet_hours"
}

/// One event of the stream before the store gave it its id.
public struct PushEvent: Sendable, Equatable {
    public var type: PushEventType
    public var time: Date
    public var app: String
    public var notifID: String
    /// The delivery's index within its notification (request order of its targets).
    public var delivery: Int
    public var platform: String
    /// Masked per `log.hide_token`.
    public var token: String
    public var providerMessageID: String?
    /// Sent: what the provider's answer told beyond the acceptance (`SendOutcome.delivered`'s detail).
    public var providerDetail: String?
    /// Attempts made so far (0 before the first).
    public var attempt: Int
    public var reason: String?
    /// The error class of a failure or retry: `token_dead`, `permanent`, `transient`, `credentials`,
    /// `rejected` (refused before sending), `not_served` (platform not enabled), `unpreparable`.
    public var errorClass: String?
    /// When a retrying delivery is tried next.
    public var nextTry: Date?
    /// The notification's analytics label; nil until notifications carry one.
    public var analyticsLabel: String?

    public init(
        type: PushEventType, time: Date, app: String, notifID: String, delivery: Int, platform: String, token: String,
        providerMessageID: String? = nil, attempt: Int, reason: String? = nil, errorClass: String? = nil, nextTry: Date? = nil,
        analyticsLabel: String? = nil
    ) {
        self.type = type
        self.time = time
        self.app = app
        self.notifID = notifID
        self.delivery = delivery
        self.platform = platform
        self.token = token
        self.providerMessageID = providerMessageID
        self.attempt = attempt
        self.reason = reason
        self.errorClass = errorClass
        self.nextTry = nextTry
        self.analyticsLabel = analyticsLabel
    }

    /// The event's members as a JSON object without `id` (the store keeps this; `StoredEvent.json`
    /// puts the id in front).
    public var body: String {
        var w = JSONWriter(reservingCapacity: 256)
        var first = true
        w.raw("{")
        w.key("type", first: &first)
        w.string(type.rawValue)
        w.key("time", first: &first)
        w.string(RFC3339.milliseconds(time))
        w.key("app", first: &first)
        w.string(app)
        w.key("notif_id", first: &first)
        w.string(notifID)
        w.key("delivery", first: &first)
        w.int(delivery)
        w.key("platform", first: &first)
        w.string(platform)
        w.key("token", first: &first)
        w.string(token)
        if let providerMessageID {
            w.key("provider_message_id", first: &first)
            w.string(providerMessageID)
        }
        if let providerDetail {
            w.key("provider_detail", first: &first)
            w.string(providerDetail)
        }
        w.key("attempt", first: &first)
        w.int(attempt)
        if let reason {
            w.key("reason", first: &first)
            w.string(reason)
        }
        if let errorClass {
            w.key("class", first: &first)
            w.string(errorClass)
        }
        if let nextTry {
            w.key("next_try", first: &first)
            w.string(RFC3339.milliseconds(nextTry))
        }
        if let analyticsLabel {
            w.key("analytics_label", first: &first)
            w.string(analyticsLabel)
        }
        w.raw("}")
        return w.string
    }
}

/// An event as stored: its id is `seq` (increasing in store order), written as a decimal string.
public struct StoredEvent: Sendable, Equatable {
    public var seq: Int64
    public var app: String
    /// `PushEvent.body`.
    public var body: String

    public init(seq: Int64, app: String, body: String) {
        self.seq = seq
        self.app = app
        self.body = body
    }

    public var id: String { String(seq) }

    /// `{"id":"<seq>",…}`: the body with the id as its first member.
    public var json: String {
        guard body.hasPrefix("{") else { return #"{"id":"\#(seq)"}"# }
        let rest = body.dropFirst()
        return rest.hasPrefix("}") ? #"{"id":"\#(seq)"}"# : #"{"id":"\#(seq)","# + rest
    }
}

/// Turns the delivery event stream into `PushEvent`s. One exhaustive `switch` over `DeliveryEvent`:
/// a new case does not compile until it is mapped here.
public final class PushEventMapper: Sendable {
    let hideToken: Bool
    /// Each platform's rules: the order of a notification's targets (`PushNotification.targets`).
    let platformRules: [Platform: PlatformRules]
    /// The class of the last attempt of a delivery, kept from `.attempted` to the `.finished` that follows it.
    private let lastClass = NIOLockedValueBox<[UInt64: String]>([:])

    public init(hideToken: Bool, platformRules: [Platform: PlatformRules] = [:]) {
        self.hideToken = hideToken
        self.platformRules = platformRules
    }

    public func events(_ event: DeliveryEvent, now: Date) -> [PushEvent] {
        switch event {
        case .submitted:
            return []
        case .accepted(let job):
            guard job.isScheduled, !job.state.isFinal else { return [make(.accepted, job, now)] }
            // Held for its send time (`send_at`, `delay_seconds`, quiet hours).
            var s = make(.scheduled, job, now)
            s.nextTry = job.notBefore
            return [make(.accepted, job, now), s]
        case .attempted(let job, let outcome, _, _):
            lastClass.withLockedValue { $0[job.id] = outcome.className }
            return []
        case .retrying(let job, let outcome):
            lastClass.withLockedValue { _ = $0.removeValue(forKey: job.id) }
            var e = make(.retrying, job, now)
            e.reason = job.lastError ?? outcome.reason
            e.errorClass = outcome.className
            e.nextTry = job.notBefore
            return [e]
        case .finished(let job, let final, let phase, _):
            let attemptClass = lastClass.withLockedValue { $0.removeValue(forKey: job.id) }
            switch final {
            case .delivered(let providerID, let detail):
                var e = make(job.accepted.fallback == nil ? .sent : .fallbackSent, job, now)
                e.providerMessageID = providerID
                e.providerDetail = detail
                return [e]
            case .failed(let reason, let tokenDead):
                var e = make(tokenDead ? .tokenDead : .failed, job, now)
                e.reason = reason
                switch phase {
                case .beforeSending: e.errorClass = "rejected"
                case .notServed: e.errorClass = "not_served"
                case .skipped, .afterSending: e.errorClass = tokenDead ? "token_dead" : attemptClass ?? "unpreparable"
                }
                return [e]
            case .skipped(let why):
                switch why {
                case .coalesced: return [make(.coalesced, job, now)]
                case .duplicate: return [make(.duplicate, job, now)]
                case .cancelled: return [make(.cancelled, job, now)]
                case .quietHours: return [make(.quietHours, job, now)]
                }
            }
        }
    }

    /// Target positions of the last notifications whose jobs came without one (read back from a
    /// store): their deliveries come one after another, so a few maps spare a scan per event.
    private let indexMaps = NIOLockedValueBox<[(notification: AcceptedNotification, index: [PushTarget: Int])]>([])

    /// The job's index among its notification's targets.
    func deliveryIndex(_ job: DeliveryJob) -> Int {
        if job.deliveryIndex >= 0 { return job.deliveryIndex }
        let targets = job.accepted.notification.targets(platformRules[job.platform])
        if targets.count <= 16 { return targets.firstIndex(of: job.target) ?? 0 }
        return indexMaps.withLockedValue { maps -> Int in
            if let m = maps.first(where: { $0.notification === job.accepted }) { return m.index[job.target] ?? 0 }
            var index: [PushTarget: Int] = [:]
            index.reserveCapacity(targets.count)
            for (i, t) in targets.enumerated() where index[t] == nil { index[t] = i }
            maps.append((job.accepted, index))
            if maps.count > 8 { maps.removeFirst() }
            return index[job.target] ?? 0
        }
    }

    private func make(_ type: PushEventType, _ job: DeliveryJob, _ now: Date) -> PushEvent {
        let index = deliveryIndex(job)
        return PushEvent(
            type: type, time: now, app: job.accepted.app, notifID: job.accepted.notifID, delivery: index, platform: job.platform.name,
            token: TokenMask.apply(job.target.reportedToken, hide: hideToken), attempt: job.attempts,
            analyticsLabel: job.accepted.notification.analyticsLabel)
    }
}
