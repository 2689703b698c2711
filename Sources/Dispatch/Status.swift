import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// The state of one delivery, as `GET /api/push/{notif_id}` reports it.
public struct DeliveryStatusRecord: Sendable, Equatable {
    public enum State: String, Sendable {
        case queued, retrying, delivered, failed
        /// Not sent: another notification with the same `dedup_key` went to this token (not a failure).
        case duplicate
        /// Not sent: a later push with the same `collapse_id` replaced it in its window (not a failure).
        case coalesced
        /// Not sent: cancelled (`DELETE /api/push/{notif_id}`) before it was sent.
        case cancelled
        /// Not sent: due outside its `deliver_between` window with `"quiet": "drop"`.
        case quietHours = "quiet_hours"
        /// Waiting for its time (`send_at`, `delay_seconds`, `deliver_between`, the end of a
        /// coalescing window): a queued delivery whose `nextTry` is ahead (`scheduled(now:)`).
        case scheduled

        /// Over: delivered, failed, duplicate, coalesced, cancelled or quiet_hours.
        public var isFinal: Bool { self != .queued && self != .retrying && self != .scheduled }

        /// The states told in a status answer only when some delivery is in them (gorush's four always).
        public var isExtension: Bool {
            switch self {
            case .queued, .retrying, .delivered, .failed: return false
            case .duplicate, .coalesced, .cancelled, .quietHours, .scheduled: return true
            }
        }
    }
    public var platform: Platform
    /// The token (or Web Push endpoint), unmasked; the route masks it per `log.hide_token`.
    public var token: String
    public var state: State
    /// Attempts made so far.
    public var attempts: Int
    /// Retrying: when the next attempt is due; queued: when it may be sent (its `send_at`).
    public var nextTry: Date?
    /// Retrying: the last error; failed: the reason.
    public var error: String?
    /// Delivered: the provider's id (`apns-id`, FCM message `name`).
    public var providerID: String?
    /// Delivered: what the provider's answer told beyond the acceptance (WNS's `X-WNS-Status`).
    public var providerDetail: String?
    /// Delivered or failed: when.
    public var finishedAt: Date?
    /// The app the notification was accepted for (the status route shows an app key only its own).
    public var app: String = AppID.defaultApp
    /// Set when the notification was sent as its `fallback` (its own rendering over the limit).
    public var fallback: FallbackInfo?
    /// The notification's `analytics_label`.
    public var analyticsLabel: String?

    public init(
        platform: Platform, token: String, state: State, attempts: Int, nextTry: Date? = nil, error: String? = nil, providerID: String? = nil,
        finishedAt: Date? = nil
    ) {
        self.platform = platform
        self.token = token
        self.state = state
        self.attempts = attempts
        self.nextTry = nextTry
        self.error = error
        self.providerID = providerID
        self.finishedAt = finishedAt
    }

    /// The record of a delivery in `state` (the one mapping used by every engine).
    public init(
        platform: Platform, token: String, state: DeliveryState, attempts: Int, finishedAt: Date?, app: String = AppID.defaultApp,
        fallback: FallbackInfo? = nil, notBefore: Date? = nil, analyticsLabel: String? = nil
    ) {
        switch state {
        case .queued:
            self.init(platform: platform, token: token, state: .queued, attempts: 0, nextTry: notBefore)
        case .retrying(let next, let error):
            self.init(platform: platform, token: token, state: .retrying, attempts: attempts, nextTry: next, error: error)
        case .delivered(let id, let detail):
            self.init(platform: platform, token: token, state: .delivered, attempts: attempts, providerID: id, finishedAt: finishedAt)
            self.providerDetail = detail
        case .failed(let reason):
            self.init(platform: platform, token: token, state: .failed, attempts: attempts, error: reason, finishedAt: finishedAt)
        case .skipped(let why):
            self.init(platform: platform, token: token, state: State(why), attempts: attempts, finishedAt: finishedAt)
        }
        self.app = app
        self.fallback = fallback
        self.analyticsLabel = analyticsLabel
    }

    /// As seen at `now`: a queued delivery whose time is ahead is `scheduled`.
    public func scheduled(now: Date) -> DeliveryStatusRecord {
        guard state == .queued, let t = nextTry, t > now else { return self }
        var r = self
        r.state = .scheduled
        return r
    }
}

extension DeliveryStatusRecord.State {
    public init(_ why: SkipReason) {
        switch why {
        case .duplicate: self = .duplicate
        case .coalesced: self = .coalesced
        case .cancelled: self = .cancelled
        case .quietHours: self = .quietHours
        }
    }
}

/// Answers delivery status queries.
public protocol DeliveryStatusSource: Sendable {
    /// The deliveries of `notifID`, in enqueue order; nil when unknown (never seen or pruned).
    func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]?
}

/// In-memory delivery status (memory engine), fed by the delivery event stream.
/// Records are kept `retention` seconds after the notification's last change, and at most
/// `maxRecords` deliveries (oldest notifications dropped first).
///
/// Stored compactly, since up to `maxRecords` (a million by default) are held: what is the
/// notification's (app, fallback, analytics label) once per notification, each delivery as a
/// `StatusSlot` (a 64-hex-digit token and a UUID provider id as bytes, one time and one detail
/// string for what its state has) in arrays ordered by job id, not a dictionary of full records.
/// `docs/benchmarks.md` has the bytes per record this costs.
public final class MemoryStatusStore: DeliveryEventSink, DeliveryStatusSource {
    private struct Notif {
        /// Job ids, ascending; `slots[i]` is `jobIDs[i]`'s delivery.
        var jobIDs: [UInt64] = []
        var slots: [StatusSlot] = []
        var updated: Date
        var app: String
        var fallback: FallbackInfo?
        var analyticsLabel: String?
    }
    private struct State {
        var notifs: [String: Notif] = [:]
        /// notif ids by first sight (pruning order); may hold ids already removed.
        var fifo: [String] = []
        var fifoHead = 0
        var records = 0
        var lastPrune = Date.distantPast
    }

    private let state = NIOLockedValueBox(State())
    public let retention: TimeInterval
    public let maxRecords: Int
    private let now: @Sendable () -> Date

    public init(retention: TimeInterval = 86_400, maxRecords: Int = 1_000_000, now: @escaping @Sendable () -> Date = { Date() }) {
        self.retention = retention
        self.maxRecords = max(1, maxRecords)
        self.now = now
    }

    public var recordCount: Int { state.withLockedValue { $0.records } }

    public func record(_ event: borrowing DeliveryEvent) {
        switch event {
        case .accepted(let job): accepted(job)
        case .retrying(let job, _), .finished(let job, _, _, _): update(job)
        case .submitted, .attempted: break
        }
    }

    /// A job's record as accepted. Its later events may come first: the job is visible to the
    /// workers once enqueued, before the submitting task publishes its acceptance, and a fast
    /// provider answer then finishes it before it is accepted here. An accepted event never
    /// overwrites such a record (a token would show queued for ever).
    private func accepted(_ job: DeliveryJob) { put(job, overwrite: false) }

    private func update(_ job: DeliveryJob) { put(job, overwrite: true) }

    private func put(_ job: DeliveryJob, overwrite: Bool) {
        let t = now()
        let outcome = StatusSlot.Outcome(job, at: t)
        let id = job.accepted.notifID
        state.withLockedValue { s in
            // In place, one hash lookup (no copy of the notification's arrays: O(tokens²) otherwise);
            // a notification seen for the first time has no job yet.
            let (added, isNew) = Self.put(
                job, outcome, overwrite: overwrite, at: t,
                into: &s.notifs[
                    id,
                    default: Notif(
                        updated: t, app: job.accepted.app, fallback: job.accepted.fallback,
                        analyticsLabel: job.accepted.notification.analyticsLabel)
                ])
            if isNew { s.fifo.append(id) }
            s.records += added
            if s.records > maxRecords || t.timeIntervalSince(s.lastPrune) > 10 { prune(&s, now: t) }
        }
    }

    /// Records `outcome` for `job` in `n` and sets its last change to `t`; returns the records added
    /// (0 or 1) and whether `n` had no job before (a notification seen for the first time). The token
    /// is read only for a new record: an update keeps the one stored.
    private static func put(
        _ job: DeliveryJob, _ outcome: StatusSlot.Outcome, overwrite: Bool, at t: Date, into n: inout Notif
    ) -> (added: Int, isNew: Bool) {
        let isNew = n.jobIDs.isEmpty
        n.updated = t
        if let last = n.jobIDs.last, last >= job.id {
            let at = lowerBound(n.jobIDs, job.id)
            if at < n.jobIDs.count, n.jobIDs[at] == job.id {
                if overwrite { n.slots[at].set(outcome) }
                return (0, isNew)
            }
            // A record made by an event that came before an earlier job's acceptance.
            n.jobIDs.insert(job.id, at: at)
            n.slots.insert(StatusSlot(job, outcome), at: at)
        } else {
            // The usual case: the next job of the notification, in request order.
            n.jobIDs.append(job.id)
            n.slots.append(StatusSlot(job, outcome))
        }
        return (1, isNew)
    }

    /// The first index of `ids` (ascending) not below `id`.
    private static func lowerBound(_ ids: [UInt64], _ id: UInt64) -> Int {
        var lo = 0
        var hi = ids.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if ids[mid] < id { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    public func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]? {
        state.withLockedValue { s in
            guard let n = s.notifs[notifID] else { return nil }
            return n.slots.map { $0.record(app: n.app, fallback: n.fallback, analyticsLabel: n.analyticsLabel) }
        }
    }

    /// Drops notifications idle for longer than `retention` whose deliveries are all over, and the
    /// oldest ones while over `maxRecords`.
    public func prune() { state.withLockedValue { prune(&$0, now: now()) } }

    private func prune(_ s: inout State, now t: Date) {
        s.lastPrune = t
        let cutoff = t.addingTimeInterval(-retention)
        var kept: [String] = []
        var i = s.fifoHead
        // Walk from the oldest; stop at the first notification still fresh (FIFO ~ age order).
        while i < s.fifo.count {
            let id = s.fifo[i]
            guard let n = s.notifs[id] else {
                i += 1
                continue
            }
            let over = s.records > maxRecords
            let expired = n.updated < cutoff && n.slots.allSatisfy(\.isFinal)
            if over || expired {
                s.records -= n.slots.count
                s.notifs[id] = nil
                i += 1
                continue
            }
            if n.updated < cutoff {
                kept.append(id)
                i += 1
                continue
            }  // still pending: keep, look further
            break
        }
        if !kept.isEmpty {
            // Re-queue the pending old ones at the tail.
            s.fifo.append(contentsOf: kept)
        }
        s.fifoHead = i
        if s.fifoHead > 4096, s.fifoHead * 2 > s.fifo.count {
            s.fifo.removeFirst(s.fifoHead)
            s.fifoHead = 0
        }
    }
}

/// One delivery's status as the memory engine keeps it (`MemoryStatusStore`): ~70 bytes and, for an
/// APNs delivery, no allocation of its own (a `DeliveryStatusRecord` with its strings was ~750 bytes).
struct StatusSlot {
    /// A token: 64 lowercase hex digits (an APNs token) as its 32 bytes; anything else as given.
    enum Token {
        case hex32(UInt64, UInt64, UInt64, UInt64)
        case text(String)
    }
    /// The provider's id (delivered) or the error (retrying, failed): a UUID in its canonical
    /// spelling (upper or lower case, as given) as its 16 bytes; anything else as given.
    enum Detail {
        case none
        /// The 128 bits of a canonical UUID (8-4-4-4-12 hex digits), and whether its letters were lower case.
        case uuid(UInt64, UInt64, lowercase: Bool)
        case text(String)
    }

    var token: Token
    var detail: Detail
    /// `nextTry` (queued, retrying) or `finishedAt` (over), seconds since 1970; NaN for none.
    var time: Double
    var attempts: Int32
    var platform: Platform
    var state: DeliveryStatusRecord.State

    var isFinal: Bool { state.isFinal }

    /// What an event changes: everything but the token and the platform.
    struct Outcome {
        var detail: Detail
        var time: Double
        var attempts: Int32
        var state: DeliveryStatusRecord.State

        /// `job`'s state as its record tells it (`DeliveryStatusRecord`'s mapping), `t` its end if over.
        init(_ job: borrowing DeliveryJob, at t: Date) {
            attempts = Int32(clamping: job.attempts)
            switch job.state {
            case .queued:
                state = .queued
                attempts = 0
                detail = .none
                time = job.notBefore.timeIntervalSince1970
            case .retrying(let next, let error):
                state = .retrying
                detail = StatusSlot.detail(error)
                time = next.timeIntervalSince1970
            case .delivered(let id, let providerDetail):
                state = .delivered
                detail = StatusSlot.detail(DeliveryState.storedProviderText(providerID: id, detail: providerDetail))
                time = t.timeIntervalSince1970
            case .failed(let reason):
                state = .failed
                detail = StatusSlot.detail(reason)
                time = t.timeIntervalSince1970
            case .skipped(let why):
                state = DeliveryStatusRecord.State(why)
                detail = .none
                time = t.timeIntervalSince1970
            }
        }
    }

    init(_ job: borrowing DeliveryJob, _ outcome: Outcome) {
        token = Self.token(job.target.reportedToken)
        platform = job.platform
        detail = outcome.detail
        time = outcome.time
        attempts = outcome.attempts
        state = outcome.state
    }

    mutating func set(_ outcome: Outcome) {
        detail = outcome.detail
        time = outcome.time
        attempts = outcome.attempts
        state = outcome.state
    }

    func record(app: String, fallback: FallbackInfo?, analyticsLabel: String?) -> DeliveryStatusRecord {
        let when = time.isNaN ? nil : Date(timeIntervalSince1970: time)
        var text: String?
        switch detail {
        case .none: text = nil
        case .uuid(let hi, let lo, let lower): text = Self.uuidString(hi, lo, lowercase: lower)
        case .text(let s): text = s
        }
        var r = DeliveryStatusRecord(platform: platform, token: tokenString, state: state, attempts: Int(attempts))
        switch state {
        case .delivered:
            (r.providerID, r.providerDetail) = DeliveryState.splitStoredProviderText(text)
            r.finishedAt = when
        case .queued, .retrying, .scheduled:
            r.error = text
            r.nextTry = when
        case .failed, .duplicate, .coalesced, .cancelled, .quietHours:
            r.error = text
            r.finishedAt = when
        }
        r.app = app
        r.fallback = fallback
        r.analyticsLabel = analyticsLabel
        return r
    }

    var tokenString: String {
        switch token {
        case .text(let s): return s
        case .hex32(let a, let b, let c, let d):
            return String(unsafeUninitializedCapacity: 64) { out in
                var i = 0
                for w in [a, b, c, d] {
                    for shift in stride(from: 60, through: 0, by: -4) {
                        out[i] = Self.digits[Int((w >> UInt64(shift)) & 0xf)]
                        i += 1
                    }
                }
                return 64
            }
        }
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)
    private static let upperDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// A hex digit's value, and whether it is an upper-case letter; nil when not a hex digit.
    private static func hexValue(_ c: UInt8) -> (UInt8, upper: Bool)? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return (c - UInt8(ascii: "0"), false)
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return (c - UInt8(ascii: "a") + 10, false)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return (c - UInt8(ascii: "A") + 10, true)
        default: return nil
        }
    }

    static func token(_ s: String) -> Token {
        var s = s
        guard s.utf8.count == 64 else { return .text(s) }
        // A native string's bytes in place (`makeContiguousUTF8` copies only a bridged one).
        s.makeContiguousUTF8()
        let words = s.utf8.withContiguousStorageIfAvailable { u -> (UInt64, UInt64, UInt64, UInt64)? in
            var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            for i in 0..<64 {
                guard let (v, upper) = hexValue(u[i]), !upper else { return nil }
                switch i >> 4 {
                case 0: w.0 = w.0 << 4 | UInt64(v)
                case 1: w.1 = w.1 << 4 | UInt64(v)
                case 2: w.2 = w.2 << 4 | UInt64(v)
                default: w.3 = w.3 << 4 | UInt64(v)
                }
            }
            return w
        }
        guard let words = words ?? nil else { return .text(s) }
        return .hex32(words.0, words.1, words.2, words.3)
    }

    /// Parsed by hand, not with Foundation's `UUID(uuidString:)` (sscanf: a few percent of the
    /// gateway's CPU when it ran for every delivered APNs push).
    static func detail(_ s: String?) -> Detail {
        guard var s else { return .none }
        guard s.utf8.count == 36 else { return .text(s) }
        s.makeContiguousUTF8()
        let parsed = s.utf8.withContiguousStorageIfAvailable { u -> Detail? in
            var hi: UInt64 = 0
            var lo: UInt64 = 0
            var n = 0
            var sawUpper = false
            var sawLower = false
            for i in 0..<36 {
                let c = u[i]
                if i == 8 || i == 13 || i == 18 || i == 23 {
                    guard c == UInt8(ascii: "-") else { return nil }
                    continue
                }
                guard let (v, upper) = hexValue(c) else { return nil }
                if v > 9 {
                    if upper { sawUpper = true } else { sawLower = true }
                }
                if n < 16 { hi = hi << 4 | UInt64(v) } else { lo = lo << 4 | UInt64(v) }
                n += 1
            }
            if sawUpper && sawLower { return nil }
            return .uuid(hi, lo, lowercase: sawLower)
        }
        return (parsed ?? nil) ?? .text(s)
    }

    static func uuidString(_ hi: UInt64, _ lo: UInt64, lowercase: Bool) -> String {
        let table = lowercase ? digits : upperDigits
        return String(unsafeUninitializedCapacity: 36) { out in
            var i = 0
            var n = 0
            for w in [hi, lo] {
                for shift in stride(from: 60, through: 0, by: -4) {
                    if n == 8 || n == 12 || n == 16 || n == 20 {
                        out[i] = UInt8(ascii: "-")
                        i += 1
                    }
                    out[i] = table[Int((w >> UInt64(shift)) & 0xf)]
                    i += 1
                    n += 1
                }
            }
            return 36
        }
    }
}
