import NIOCore
import XCTest

@testable import HTTP2Pool

/// Plain unit tests of the pool's state machine: no event loop, no clock, no network.
final class HTTP2PoolStateMachineTests: XCTestCase {
    struct Request: HTTP2PoolQueueable, Equatable {
        var name: String
        var deadline: NIODeadline
        var requeues = 0
    }

    typealias Machine = HTTP2PoolStateMachine<String, Request>

    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func makeMachine(connections: Int = 2, maxPending: Int = 100, loops: Int = 2) -> Machine {
        Machine(
            configuration: .init(
                connectionsPerTarget: connections,
                maxPendingRequests: maxPending,
                reconnectBackoffInitial: .milliseconds(100),
                reconnectBackoffMax: .seconds(10)
            ),
            eventLoopCount: loops
        )
    }

    func request(_ name: String, timeout: TimeAmount = .seconds(30)) -> Request {
        Request(name: name, deadline: self.t0 + timeout)
    }

    /// Sends a request; returns the decision's parts.
    @discardableResult
    func execute(
        _ m: inout Machine, _ r: Request, now: NIODeadline? = nil, loop: Int? = nil
    ) -> (started: String?, action: Machine.Action?, error: HTTP2PoolError?) {
        switch m.executeRequest(connectAddresses: nil, now: now ?? self.t0, preferredEventLoop: loop, makeRequest: { r }) {
        case .start(let c, let a): return (c, a, nil)
        case .queued(let a): return (nil, a, nil)
        case .fail(let e): return (nil, nil, e)
        }
    }

    func names(_ starts: [(String, Request)]) -> [String] { starts.map { "\($0.0):\($0.1.name)" } }

    // MARK: tests

    func testFirstRequestQueuesAndOpensOneConnection() {
        var m = makeMachine()
        let r = execute(&m, request("a"))
        XCTAssertNil(r.started)
        XCTAssertEqual(r.action?.connect.map(\.id), [0])
        XCTAssertEqual(r.action?.schedulePendingTimer, self.t0 + .seconds(30))
        XCTAssertEqual(m.pending.count, 1)
        // A second request while connecting: the second connection slot opens, no second timer.
        let r2 = execute(&m, request("b"))
        XCTAssertEqual(r2.action?.connect.count, 1, "the second slot opens for waiting requests")
        XCTAssertNil(r2.action?.schedulePendingTimer)
        let r3 = execute(&m, request("c"))
        XCTAssertEqual(r3.action?.connect.count, 0, "connectionsPerTarget = 2")
    }

    func testEstablishedConnectionStartsWaitingRequestsUpToMaxStreams() {
        var m = makeMachine(connections: 1)
        for n in ["a", "b", "c"] { execute(&m, request(n)) }
        let a = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 2)
        XCTAssertEqual(names(a.start), ["C0:a", "C0:b"])
        XCTAssertEqual(m.pending.count, 1)
        XCTAssertEqual(m.connectionsOpened, 1)
        // A stream finishes: the next waiting request takes the slot.
        XCTAssertEqual(names(m.streamFinished(connectionID: 0).start), ["C0:c"])
        // Nothing waiting: the fast path starts directly on the ready connection.
        _ = m.streamFinished(connectionID: 0)
        XCTAssertEqual(execute(&m, request("d")).started, "C0")
    }

    func testMaxStreamsRaisedStartsMore() {
        var m = makeMachine(connections: 1)
        for n in ["a", "b", "c"] { execute(&m, request(n)) }
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1)
        XCTAssertEqual(names(m.maxStreamsChanged(connectionID: 0, maxStreams: 3).start), ["C0:b", "C0:c"])
    }

    func testLeastBusyConnectionWinsAndBusyConnectionOpensTheNext() {
        var m = makeMachine(connections: 2)
        execute(&m, request("a"))
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 10)
        // C0 already has one stream: the next request starts on it and opens the second connection.
        let r = execute(&m, request("b"))
        XCTAssertEqual(r.started, "C0")
        XCTAssertEqual(r.action?.connect.map(\.id), [1])
        XCTAssertEqual(r.action?.connect.map(\.eventLoopIndex), [1], "round robin over the event loops")
        _ = m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 10)
        XCTAssertEqual(execute(&m, request("c")).started, "C1")
    }

    /// A caller on one of the pool's event loops gets a connection of that loop while it has a free
    /// stream (no thread hop), even when another connection is less busy; then the least busy.
    func testConnectionOnTheCallersEventLoopIsPreferred() {
        var m = makeMachine(connections: 2)
        execute(&m, request("a"))
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 3)  // loop 0
        execute(&m, request("b"))  // opens connection 1 on loop 1
        _ = m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 3)
        // C0 holds a and b, C1 nothing: a caller on loop 0 still gets C0, one on loop 1 gets C1.
        XCTAssertEqual(execute(&m, request("c"), loop: 0).started, "C0")
        XCTAssertEqual(execute(&m, request("d"), loop: 1).started, "C1")
        // C0 is full (3 streams): a loop-0 caller falls back to the least busy, C1.
        XCTAssertEqual(execute(&m, request("e"), loop: 0).started, "C1")
        // No loop (the global executor): the least busy connection, as before.
        XCTAssertEqual(execute(&m, request("f")).started, "C1")
        XCTAssertNil(execute(&m, request("g"), loop: 1).started, "every stream taken: queued")
    }

    func testGoAwayDrainsRequeuesRefusedStreamsInOrderAndOpensAReplacement() {
        var m = makeMachine(connections: 1)
        for n in ["a", "b", "c"] { execute(&m, request(n)) }
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 10)
        // GOAWAY with last-stream-id covering "a": "b" and "c" were not processed.
        let drain = m.connectionDraining(connectionID: 0, released: 2, now: self.t0)
        XCTAssertTrue(drain.connect.isEmpty, "nothing waiting yet")
        // The handler re-queues them in reverse order to keep the original order at the front;
        // the first re-queue opens a replacement connection.
        let requeued = m.requeue(request("c"), error: .goaway("NO_ERROR"), now: self.t0)
        XCTAssertEqual(requeued.connect.map(\.id), [1])
        _ = m.requeue(request("b"), error: .goaway("NO_ERROR"), now: self.t0)
        XCTAssertEqual(m.pending.map(\.name), ["b", "c"])
        XCTAssertEqual(m.pending.map(\.requeues), [1, 1])
        // The drained connection takes no new stream; the replacement takes the queue.
        let ready = m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 10)
        XCTAssertEqual(names(ready.start), ["C1:b", "C1:c"])
    }

    func testRequeueIsBoundedThenFailsWithTheRefusal() {
        var m = makeMachine(connections: 1)
        var r = request("a")
        r.requeues = 3
        let a = m.requeue(r, error: .streamReset("REFUSED_STREAM"), now: self.t0)
        XCTAssertEqual(a.fail.map { $0.0.name }, ["a"])
        XCTAssertEqual(a.fail.first?.1.code, .streamRefused)
        XCTAssertTrue(m.pending.isEmpty)
    }

    func testConnectFailureFailsWaitingRequestsAndBacksOff() {
        var m = makeMachine(connections: 1)
        execute(&m, request("a"))
        execute(&m, request("b"))
        let error = HTTP2PoolError.connectFailed("refused")
        let closed = m.connectionClosed(connectionID: 0, wasReady: false, error: error, now: self.t0, random: 0)
        XCTAssertEqual(closed.fail.map { $0.0.name }, ["a", "b"], "nothing else alive: fail fast")
        XCTAssertEqual(closed.fail.map { $0.1 }, [error, error])
        XCTAssertEqual(closed.log, [.connectFailed(error, retryIn: .milliseconds(100))])
        XCTAssertTrue(closed.connect.isEmpty)
        // During the backoff a new request waits for the timer instead of connecting.
        let r = execute(&m, request("c"), now: self.t0 + .milliseconds(10))
        XCTAssertTrue(r.action?.connect.isEmpty ?? false)
        XCTAssertEqual(r.action?.scheduleBackoffTimer, self.t0 + .milliseconds(100))
        // The timer fires after the backoff: connect.
        XCTAssertEqual(m.backoffTimerFired(now: self.t0 + .milliseconds(100)).connect.map(\.id), [1])
        // A second consecutive failure doubles the delay (jitter draw 1 takes 20% off).
        let again = m.connectionClosed(connectionID: 1, wasReady: false, error: error, now: self.t0, random: 1)
        XCTAssertEqual(again.log, [.connectFailed(error, retryIn: .milliseconds(160))])
        // Success resets the backoff.
        XCTAssertEqual(m.consecutiveFailures, 2)
    }

    func testReconnectDelayIsCappedAndFloored() {
        XCTAssertEqual(Machine.reconnectDelay(failures: 1, initial: .nanoseconds(1), maximum: .seconds(10), random: 0), .milliseconds(1))
        XCTAssertEqual(Machine.reconnectDelay(failures: 50, initial: .milliseconds(100), maximum: .seconds(10), random: 0), .seconds(10))
        XCTAssertEqual(Machine.reconnectDelay(failures: 50, initial: .milliseconds(100), maximum: .seconds(10), random: 1), .seconds(8))
        XCTAssertEqual(Machine.reconnectDelay(failures: 3, initial: .milliseconds(100), maximum: .seconds(10), random: .nan), .milliseconds(400))
    }

    func testClosedReadyConnectionKeepsQueueAndReconnectsWithoutBackoff() {
        var m = makeMachine(connections: 1)
        execute(&m, request("a"))
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1)
        execute(&m, request("b"))
        let closed = m.connectionClosed(connectionID: 0, wasReady: true, error: .connectionClosed, now: self.t0, random: 0)
        XCTAssertTrue(closed.fail.isEmpty, "in-flight streams are failed by the connection itself")
        XCTAssertTrue(closed.log.isEmpty)
        XCTAssertEqual(closed.connect.map(\.id), [1])
        XCTAssertEqual(m.pending.map(\.name), ["b"])
    }

    func testPendingTimerFailsExpiredRequestsOnly() {
        var m = makeMachine(connections: 1)
        execute(&m, request("short", timeout: .seconds(1)))
        execute(&m, request("long", timeout: .seconds(5)))
        let fired = m.pendingTimerFired(now: self.t0 + .seconds(2))
        XCTAssertEqual(fired.fail.map { $0.0.name }, ["short"])
        XCTAssertEqual(fired.fail.map { $0.1 }, [.timeout])
        XCTAssertEqual(fired.schedulePendingTimer, self.t0 + .seconds(5) + .milliseconds(1))
        XCTAssertEqual(m.pending.map(\.name), ["long"])
    }

    func testTooManyPending() {
        var m = makeMachine(connections: 1, maxPending: 2)
        execute(&m, request("a"))
        execute(&m, request("b"))
        XCTAssertEqual(execute(&m, request("c")).error, .tooManyPending)
    }

    func testShutdownFailsWaitingAndRefusesEverythingAfter() {
        var m = makeMachine(connections: 1)
        execute(&m, request("a"))
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1)
        execute(&m, request("b"))
        let (failed, entries) = m.shutdown()
        XCTAssertEqual(failed.map(\.name), ["b"])
        XCTAssertEqual(entries.compactMap(\.connection), ["C0"])
        XCTAssertEqual(execute(&m, request("c")).error, .shutdown)
        XCTAssertEqual(m.requeue(request("d"), error: .goaway("NO_ERROR"), now: self.t0).fail.map { $0.1 }, [.shutdown])
        // A connection finishing its handshake after shutdown is closed.
        XCTAssertEqual(m.connectionEstablished(connectionID: 7, connection: "late", maxStreams: 1).close, ["late"])
        XCTAssertTrue(m.connectionClosed(connectionID: 0, wasReady: true, error: .shutdown, now: self.t0, random: 0).isEmpty)
    }

    func testIdleAndStats() {
        var m = makeMachine(connections: 1)
        XCTAssertTrue(m.isIdle)
        execute(&m, request("a"))
        XCTAssertFalse(m.isIdle)
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1)
        XCTAssertFalse(m.isIdle, "a stream in flight")
        _ = m.streamFinished(connectionID: 0)
        XCTAssertTrue(m.isIdle)
        XCTAssertEqual(m.activeConnections, 1)
        XCTAssertEqual(m.debugDescription, "#0 ready inFlight=0/1 pending=0")
    }

    func testErrorKindsAreTyped() {
        XCTAssertEqual(HTTP2PoolError.streamReset("REFUSED_STREAM").code, .streamRefused)
        XCTAssertEqual(HTTP2PoolError.streamReset("CANCEL").code, .streamReset)
        XCTAssertTrue(HTTP2PoolError.streamReset("REFUSED_STREAM").isRetryable)
        XCTAssertFalse(HTTP2PoolError.streamReset("CANCEL").isRetryable)
        XCTAssertEqual(HTTP2PoolError.streamReset("REFUSED_STREAM").description, "HTTP/2 stream reset by peer: REFUSED_STREAM")
        XCTAssertEqual(HTTP2PoolError.alpnNotNegotiated("x").description, "TLS error: x")
        XCTAssertTrue(HTTP2PoolError.goaway("NO_ERROR").wasNotProcessed)
        XCTAssertFalse(HTTP2PoolError.connectionClosed.wasNotProcessed)
        XCTAssertFalse(HTTP2PoolError.timeout.wasNotProcessed)
    }
}
