import NIOConcurrencyHelpers

/// Counts deliveries in flight for one provider; `enter()` waits while `limit` are in flight.
/// One waiter at a time (the provider's feed loop), so a single continuation slot is enough.
final class InFlightGate: Sendable {
    private struct State {
        var inFlight = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(limit: Int) { self.limit = max(1, limit) }

    /// Takes a slot, waiting for `leave()` when all `limit` are taken.
    func enter() async {
        let entered = state.withLockedValue { s -> Bool in
            if s.inFlight < limit {
                s.inFlight += 1
                return true
            }
            return false
        }
        if entered { return }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLockedValue { s -> Bool in
                if s.inFlight < limit {
                    s.inFlight += 1
                    return true
                }
                precondition(s.waiter == nil, "InFlightGate has one waiter at a time")
                s.waiter = c
                return false
            }
            if now { c.resume() }
        }
    }

    /// Gives a slot back; a waiting `enter()` takes it over.
    func leave() {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w  // the slot passes to the waiter: inFlight unchanged
            }
            s.inFlight -= 1
            return nil
        }
        waiter?.resume()
    }

    var inFlight: Int { state.withLockedValue { $0.inFlight } }
}
