import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// `POST /api/push` with an `Idempotency-Key` header (the IETF httpapi draft
/// "The Idempotency-Key HTTP Header Field"): the first request with a key is processed and its answer
/// kept for the TTL; the same key with the same body gets that answer again without sending
/// anything; with another body, 422; while the first is still being processed, 409.
public enum IdempotencyClaim: Sendable, Equatable {
    /// This request holds the key now: process it, then `finish` (or `release` on an error).
    case claimed
    /// The key's first request was answered: this answer again.
    case replay(IdempotentAnswer)
    /// The key was used with another body.
    case mismatch
    /// The key's first request is still being processed.
    case inProgress
}

/// A kept answer.
public struct IdempotentAnswer: Sendable, Equatable {
    /// The statuses a kept answer may have (HTTP's; `HTTPResponse.Status(code:)` traps outside 0...999).
    public static let statusRange = 100...599

    public var status: Int
    public var body: [UInt8]
    /// `X-Pushgate-Request-Id` of the first answer.
    public var requestID: String
    /// `X-Pushgate-Notif-Ids` of the first answer ("" when it had none).
    public var notifIDs: String

    public init(status: Int, body: [UInt8], requestID: String, notifIDs: String) {
        self.status = status
        self.body = body
        self.requestID = requestID
        self.notifIDs = notifIDs
    }
}

/// Where idempotency keys are kept: in the queue engine, so they hold across restarts and across
/// gateways that share PostgreSQL.
public protocol IdempotencyStore: Sendable {
    /// Claims `key` of `app` for a request whose body hashes to `bodyHash`, unless a live record has
    /// it. A claim without an answer older than `abandonAfter` seconds (its gateway stopped before
    /// answering) is taken over: at-least-once, as for every delivery.
    func claim(app: String, key: String, bodyHash: String, now: Date, ttl: TimeInterval, abandonAfter: TimeInterval) async throws
        -> IdempotencyClaim
    /// Keeps the answer of a claimed key until its TTL runs out.
    func finish(app: String, key: String, answer: IdempotentAnswer) async throws
    /// Gives a claimed key up (the request was not taken: 4xx, 503): the next request with it is processed.
    func release(app: String, key: String) async
}

/// The memory engine's idempotency keys (lost on restart, like its queue). At most `maxEntries`
/// keys and `maxBytes` of kept answers; over either, the oldest keys are forgotten first.
public final class MemoryIdempotencyStore: IdempotencyStore {
    private struct Entry {
        var bodyHash: String
        var answer: IdempotentAnswer?
        var claimedAt: Date
        var expires: Date
    }
    private struct Key: Hashable {
        var app: String
        var key: String
    }
    private struct State {
        var entries: [Key: Entry] = [:]
        var order: [Key] = []
        var head = 0
        var lastPrune = Date.distantPast
        /// Bytes of the kept answers.
        var bytes = 0
        /// The latest time a claim was made at (the store keeps no clock of its own).
        var clock = Date.distantPast
    }
    private let state = NIOLockedValueBox(State())
    public let maxEntries: Int
    public let maxBytes: Int

    public init(maxEntries: Int = 1_000_000, maxBytes: Int = 64 << 20) {
        self.maxEntries = max(1, maxEntries)
        self.maxBytes = max(1, maxBytes)
    }

    private static func size(_ e: Entry) -> Int { e.answer.map { $0.body.count + $0.requestID.utf8.count + $0.notifIDs.utf8.count } ?? 0 }

    public var count: Int { state.withLockedValue { $0.entries.count } }

    public func claim(app: String, key: String, bodyHash: String, now: Date, ttl: TimeInterval, abandonAfter: TimeInterval) async throws
        -> IdempotencyClaim
    {
        state.withLockedValue { s in
            s.clock = max(s.clock, now)
            if now.timeIntervalSince(s.lastPrune) > 10 || s.entries.count >= maxEntries { prune(&s, now: now) }
            let k = Key(app: app, key: key)
            if let e = s.entries[k], e.expires > now {
                if e.bodyHash != bodyHash { return .mismatch }
                if let a = e.answer { return .replay(a) }
                if now.timeIntervalSince(e.claimedAt) < abandonAfter { return .inProgress }
            }
            if let old = s.entries[k] { s.bytes -= Self.size(old) } else { s.order.append(k) }
            s.entries[k] = Entry(bodyHash: bodyHash, answer: nil, claimedAt: now, expires: now.addingTimeInterval(ttl))
            return .claimed
        }
    }

    public func finish(app: String, key: String, answer: IdempotentAnswer) async throws {
        state.withLockedValue { s in
            let k = Key(app: app, key: key)
            guard var e = s.entries[k] else { return }
            s.bytes -= Self.size(e)
            e.answer = answer
            s.bytes += Self.size(e)
            s.entries[k] = e
            if s.bytes > maxBytes { prune(&s, now: s.clock) }
        }
    }

    public func release(app: String, key: String) async {
        state.withLockedValue { s in
            let k = Key(app: app, key: key)
            if let e = s.entries[k], e.answer == nil { s.entries[k] = nil }
        }
    }

    private func prune(_ s: inout State, now: Date) {
        s.lastPrune = now
        // Keys in claim order (TTLs are equal, so that is expiry order): drop the expired, then the
        // oldest while over the cap.
        while s.head < s.order.count {
            let k = s.order[s.head]
            guard let e = s.entries[k] else {
                s.head += 1
                continue
            }
            if e.expires <= now || s.entries.count >= maxEntries || s.bytes > maxBytes {
                s.bytes -= Self.size(e)
                s.entries[k] = nil
                s.head += 1
                continue
            }
            break
        }
        if s.head > 4096, s.head * 2 > s.order.count {
            s.order.removeFirst(s.head)
            s.head = 0
        }
    }
}
