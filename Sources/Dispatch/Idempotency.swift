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
/// keys are kept; over that, the oldest are forgotten.
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
    }
    private let state = NIOLockedValueBox(State())
    public let maxEntries: Int

    public init(maxEntries: Int = 1_000_000) { self.maxEntries = max(1, maxEntries) }

    public var count: Int { state.withLockedValue { $0.entries.count } }

    public func claim(app: String, key: String, bodyHash: String, now: Date, ttl: TimeInterval, abandonAfter: TimeInterval) async throws
        -> IdempotencyClaim
    {
        state.withLockedValue { s in
            if now.timeIntervalSince(s.lastPrune) > 10 || s.entries.count >= maxEntries { prune(&s, now: now) }
            let k = Key(app: app, key: key)
            if let e = s.entries[k], e.expires > now {
                if e.bodyHash != bodyHash { return .mismatch }
                if let a = e.answer { return .replay(a) }
                if now.timeIntervalSince(e.claimedAt) < abandonAfter { return .inProgress }
            }
            if s.entries[k] == nil { s.order.append(k) }
            s.entries[k] = Entry(bodyHash: bodyHash, answer: nil, claimedAt: now, expires: now.addingTimeInterval(ttl))
            return .claimed
        }
    }

    public func finish(app: String, key: String, answer: IdempotentAnswer) async throws {
        state.withLockedValue { s in s.entries[Key(app: app, key: key)]?.answer = answer }
    }

    public func release(app: String, key: String) async {
        state.withLockedValue { s in
            let k = Key(app: app, key: key)
            if s.entries[k]?.answer == nil { s.entries[k] = nil }
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
            if e.expires <= now || s.entries.count >= maxEntries {
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
