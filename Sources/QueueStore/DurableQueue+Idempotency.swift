import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// `IdempotencyStore`: Idempotency-Key claims, answers and releases, written with the writer's group commits.
extension DurableQueue {
    public func claim(app: String, key: String, bodyHash: String, now: Date, ttl: TimeInterval, abandonAfter: TimeInterval) async throws
        -> IdempotencyClaim
    {
        let t = now.timeIntervalSince1970
        let op = IdempotencyOp.claim(app: app, key: key, bodyHash: bodyHash, now: t, expires: t + ttl, abandonBefore: t - abandonAfter)
        guard let claim = try await idempotency(op) else { throw QueueStoreError("the store answered no idempotency claim") }
        return claim
    }

    public func finish(app: String, key: String, answer: IdempotentAnswer) async throws {
        _ = try await idempotency(.finish(app: app, key: key, answer: answer))
    }

    public func release(app: String, key: String) async {
        do {
            _ = try await idempotency(.release(app: app, key: key))
        } catch {
            logger.warning("could not release an Idempotency-Key (it is held until core.idempotency_ttl): \(error)")
        }
    }

    /// Hands an idempotency operation to the writer's next group commit.
    func idempotency(_ op: IdempotencyOp) async throws -> IdempotencyClaim? {
        try await handToWriter { s, r in
            s.work.batch.idempotency.append(op)
            s.work.idempotencyWaiters.append(r)
        } unqueue: { s, r in
            guard let i = s.work.idempotencyWaiters.firstIndex(where: { $0 === r }) else { return }
            s.work.idempotencyWaiters.remove(at: i)
            s.work.batch.idempotency.remove(at: i)
        }
    }
}
