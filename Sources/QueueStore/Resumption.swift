import NIOConcurrencyHelpers

/// A continuation resumed once, by whichever comes first: the writer's answer or the request's
/// deadline (`startDeadline`); the later one is ignored. While the transaction holding its write
/// commits (`hold`), a deadline does not answer it (`resumeUnlessHeld`): the writer does, with the
/// commit's outcome.
final class Resumption<T: Sendable>: @unchecked Sendable {
    // @unchecked: every field is behind `lock`.
    private let lock = NIOLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var onResumed: (@Sendable () -> Void)?
    private var held = false

    init(_ c: CheckedContinuation<T, any Error>) { continuation = c }

    var isResumed: Bool { lock.withLock { continuation == nil } }

    /// Whether its transaction is committing (`CommitGate.enter`).
    var isHeld: Bool { lock.withLock { held } }

    /// Runs `body` once resumed (at once if it already is).
    func onResume(_ body: @escaping @Sendable () -> Void) {
        let now: Bool = lock.withLock {
            if continuation == nil { return true }
            onResumed = body
            return false
        }
        if now { body() }
    }

    @discardableResult
    func resume(returning value: T) -> Bool { finish(.success(value), unlessHeld: false) }

    @discardableResult
    func resume(throwing error: any Error) -> Bool { finish(.failure(error), unlessHeld: false) }

    /// A deadline's answer: not given while the transaction holding this write commits.
    @discardableResult
    func resumeUnlessHeld(throwing error: any Error) -> Bool { finish(.failure(error), unlessHeld: true) }

    private func finish(_ result: Result<T, any Error>, unlessHeld: Bool) -> Bool {
        let (c, after): (CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?) = lock.withLock {
            if unlessHeld, held { return (nil, nil) }
            defer {
                continuation = nil
                onResumed = nil
            }
            return (continuation, onResumed)
        }
        guard let c else { return false }
        c.resume(with: result)
        after?()
        return true
    }
}

/// A waiter whose write is in a transaction: the transaction commits only if none of them was
/// answered yet, and none is answered by its deadline while it commits.
protocol CommitHold: AnyObject, Sendable {
    var isResumed: Bool { get }
    /// Marks it as committing; false when it was answered already.
    func hold() -> Bool
    func release()
}

extension Resumption: CommitHold {
    func hold() -> Bool {
        lock.withLock {
            guard continuation != nil else { return false }
            held = true
            return true
        }
    }

    func release() { lock.withLock { held = false } }
}

/// Decides, right before a transaction's COMMIT, whether it may commit: only while every request
/// whose write is in it (and the transaction's own deadline) still waits for it. A request answered
/// 503 at its deadline therefore never has its write committed later, when a store that hung (a
/// database server gone or stopped answering) comes back: the transaction rolls back instead, and
/// the client's retry is the only copy sent. Once past the check, the waiters wait for the COMMIT's
/// answer (`commitBounded` bounds that wait too).
final class CommitGate: Sendable {
    private let holds: [any CommitHold]

    init(_ holds: [any CommitHold]) { self.holds = holds }

    /// A gate nobody waits behind: always open.
    static let open = CommitGate([])

    /// False once one of them was answered: the work is wasted, the transaction will roll back.
    var wanted: Bool { holds.allSatisfy { !$0.isResumed } }

    /// Holds every one of them, or none (and false) when one was answered already.
    func enter() -> Bool {
        for (i, h) in holds.enumerated() where !h.hold() {
            for done in holds[..<i] { done.release() }
            return false
        }
        return true
    }

    /// The COMMIT failed: their deadlines apply again.
    func release() {
        for h in holds { h.release() }
    }
}
