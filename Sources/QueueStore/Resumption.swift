import NIOConcurrencyHelpers

/// A continuation resumed once, by whichever comes first: the writer's answer or the request's
/// deadline (`startDeadline`); the later one is ignored.
final class Resumption<T: Sendable>: @unchecked Sendable {
    // @unchecked: every field is behind `lock`.
    private let lock = NIOLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var onResumed: (@Sendable () -> Void)?

    init(_ c: CheckedContinuation<T, any Error>) { continuation = c }

    var isResumed: Bool { lock.withLock { continuation == nil } }

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
    func resume(returning value: T) -> Bool { finish(.success(value)) }

    @discardableResult
    func resume(throwing error: any Error) -> Bool { finish(.failure(error)) }

    private func finish(_ result: Result<T, any Error>) -> Bool {
        let (c, after): (CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?) = lock.withLock {
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
