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

    func makeMachine(
        connections: Int = 2, maxConnections: Int? = nil, idleTimeout: TimeAmount? = nil, maxPending: Int = 100, loops: Int = 2
    ) -> Machine {
        Machine(
            configuration: .init(
                connectionsPerTarget: connections,
                maxPendingRequests: maxPending,
                reconnectBackoffInitial: .milliseconds(100),
                reconnectBackoffMax: .seconds(10),
                maxConnections: maxConnections,
                idleTimeout: idleTimeout
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

    // MARK: scaling

    /// Sends `n` requests named `prefix0`... and returns the connections they started on (nil: queued).
    @discardableResult
    func load(_ m: inout Machine, _ prefix: String, _ n: Int) -> [String?] {
        (0..<n).map { execute(&m, request("\(prefix)\($0)")).started }
    }

    /// Connects opened by the requests' actions, in order.
    func connects(_ m: inout Machine, _ prefix: String, _ n: Int) -> [Int] {
        (0..<n).flatMap { execute(&m, request("\(prefix)\($0)")).action?.connect.map(\.id) ?? [] }
    }

    /// Under load the pool opens the floor at once, then (every stream of the settled connections
    /// taken and requests waiting) as many connections as the waiting requests need, none more
    /// while those connect, and never past the ceiling.
    func testOpensConnectionsUnderLoadUpToTheCeiling() {
        var m = makeMachine(connections: 2, maxConnections: 5)
        XCTAssertEqual(connects(&m, "a", 2), [0, 1], "the floor opens for overlapping requests")
        XCTAssertEqual(connects(&m, "b", 8), [], "while the floor connects, no more")
        XCTAssertEqual(m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 10).start.count, 10)
        XCTAssertTrue(m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 10).connect.isEmpty)
        XCTAssertEqual(load(&m, "c", 10).compactMap { $0 }, Array(repeating: "C1", count: 10), "C1 takes its 10 streams")
        // Both full. Nothing settled yet (no stream finished): no figure to scale on, requests wait.
        XCTAssertEqual(connects(&m, "d", 5), [])
        // One stream of each finishes: both settle at 10 streams; the next two waiting take the slots.
        XCTAssertEqual(names(m.streamFinished(connectionID: 0).start), ["C0:d0"])
        let settled = m.streamFinished(connectionID: 1)
        XCTAssertEqual(names(settled.start), ["C1:d1"])
        // Three wait (d2...d4): one more connection of 10 streams serves them.
        XCTAssertEqual(settled.connect.map(\.id), [2])
        XCTAssertEqual(settled.connect.map(\.eventLoopIndex), [0], "round robin over the event loops")
        XCTAssertEqual(m.liveCount, 3)
        // 25 more wait while #2 connects: nothing opens until it reports its limit.
        XCTAssertEqual(connects(&m, "e", 25), [])
        XCTAssertEqual(m.pending.count, 28)
        // #2 takes 10; 18 still wait and #2 has not finished a stream yet: it is not settled.
        XCTAssertEqual(m.connectionEstablished(connectionID: 2, connection: "C2", maxStreams: 10).start.count, 10)
        XCTAssertTrue(execute(&m, request("f0")).action?.connect.isEmpty ?? false)
        // It settles: the 18 still waiting need two connections, and the ceiling (5) allows two.
        let more = m.streamFinished(connectionID: 2)
        XCTAssertEqual(names(more.start), ["C2:e7"])
        XCTAssertEqual(more.connect.map(\.id), [3, 4])
        XCTAssertEqual(m.liveCount, 5)
        _ = m.connectionEstablished(connectionID: 3, connection: "C3", maxStreams: 10)
        _ = m.connectionEstablished(connectionID: 4, connection: "C4", maxStreams: 10)
        XCTAssertEqual(m.pending.count, 0)
        // At the ceiling: requests wait, nothing opens.
        XCTAssertEqual(connects(&m, "g", 30), [])
        _ = m.streamFinished(connectionID: 3)
        XCTAssertTrue(m.streamFinished(connectionID: 4).connect.isEmpty)
        XCTAssertEqual(m.liveCount, 5)
        XCTAssertEqual(m.pending.count, 26)
    }

    /// APNs allows one stream until it saw a valid token, then raises the limit: the first figure
    /// must not open connections; the raise starts the waiting requests on the same connection.
    func testALowInitialLimitOpensNothingBeforeTheRaise() {
        var m = makeMachine(connections: 1, maxConnections: 10)
        load(&m, "a", 50)
        let ready = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1)
        XCTAssertEqual(names(ready.start), ["C0:a0"])
        XCTAssertTrue(ready.connect.isEmpty, "the connection has not finished a stream: its limit is not settled")
        XCTAssertEqual(connects(&m, "b", 10), [])
        // The token was accepted: the server raises its limit before it answers.
        XCTAssertEqual(m.maxStreamsChanged(connectionID: 0, maxStreams: 1000).start.count, 59)
        XCTAssertTrue(m.streamFinished(connectionID: 0).connect.isEmpty)
        XCTAssertEqual(m.liveCount, 1)
        XCTAssertEqual(m.pending.count, 0)
    }

    /// A server that lowers SETTINGS_MAX_CONCURRENT_STREAMS below the streams in flight: none start
    /// on it until it is under the new limit, and the waiting requests get another connection.
    func testAServerLoweringItsLimitGetsAnotherConnection() {
        var m = makeMachine(connections: 1, maxConnections: 3)
        load(&m, "a", 1)
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 10)
        _ = m.streamFinished(connectionID: 0)
        XCTAssertEqual(load(&m, "b", 10).compactMap { $0 }.count, 10)
        let lowered = m.maxStreamsChanged(connectionID: 0, maxStreams: 4)
        XCTAssertTrue(lowered.start.isEmpty)
        XCTAssertTrue(lowered.connect.isEmpty, "nothing waits yet")
        // Two requests wait: at the new limit of 4 streams one more connection serves them.
        XCTAssertEqual(execute(&m, request("c0")).action?.connect.map(\.id), [1])
        XCTAssertNil(execute(&m, request("c1")).started)
        // Streams finishing on C0 above its new limit start nothing there.
        XCTAssertTrue(m.streamFinished(connectionID: 0).start.isEmpty)
        XCTAssertEqual(m.entries.first?.inFlight, 9)
        XCTAssertEqual(names(m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 4).start), ["C1:c0", "C1:c1"])
        for _ in 0..<5 { _ = m.streamFinished(connectionID: 0) }
        XCTAssertEqual(m.entries.first?.inFlight, 4)
        XCTAssertEqual(execute(&m, request("d0"), loop: 0).started, "C1", "C0 is at its new limit")
    }

    /// GOAWAY while the pool scales: the draining connection's refused requests wait, it stops
    /// counting towards the ceiling, and the replacements come from the same scaling rule.
    func testGoAwayWhileScaling() {
        var m = makeMachine(connections: 1, maxConnections: 3)
        load(&m, "a", 1)
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 5)
        _ = m.streamFinished(connectionID: 0)
        load(&m, "b", 5)
        // Full and settled: a waiting request opens #1.
        XCTAssertEqual(execute(&m, request("c0")).action?.connect.map(\.id), [1])
        // GOAWAY on C0 while #1 connects: streams b3, b4 were not processed.
        let drain = m.connectionDraining(connectionID: 0, released: 2, now: self.t0)
        XCTAssertTrue(drain.connect.isEmpty, "#1 is live (connecting) and meets the floor")
        XCTAssertTrue(m.requeue(request("b4"), error: .goaway("NO_ERROR"), now: self.t0).connect.isEmpty)
        XCTAssertTrue(m.requeue(request("b3"), error: .goaway("NO_ERROR"), now: self.t0).connect.isEmpty)
        XCTAssertEqual(m.pending.map(\.name), ["b3", "b4", "c0"])
        XCTAssertEqual(m.liveCount, 1, "the draining connection does not count")
        // #1 comes up at 2 streams: the re-queued requests first, in order.
        XCTAssertEqual(names(m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 2).start), ["C1:b3", "C1:b4"])
        // #1 settles and takes c0: its limit (2) is settled.
        XCTAssertEqual(names(m.streamFinished(connectionID: 1).start), ["C1:c0"])
        // C1 full, C0 draining: a waiting request opens #2 (the ceiling counts live connections only).
        XCTAssertEqual(connects(&m, "d", 4), [2])
        XCTAssertEqual(m.entries.count, 3)
        XCTAssertEqual(m.liveCount, 2)
        // C0's remaining streams finish and it closes: the queue stays for #2.
        XCTAssertTrue(m.connectionClosed(connectionID: 0, wasReady: true, error: .connectionClosed, now: self.t0, random: 0).connect.isEmpty)
        XCTAssertEqual(m.connectionEstablished(connectionID: 2, connection: "C2", maxStreams: 2).start.count, 2)
        // #2 settles with one request still waiting: the last connection the ceiling allows.
        let last = m.streamFinished(connectionID: 2)
        XCTAssertEqual(last.start.count, 1)
        XCTAssertEqual(last.connect.map(\.id), [3])
        XCTAssertEqual(m.liveCount, 3)
        XCTAssertEqual(connects(&m, "e", 10), [], "at the ceiling")
    }

    /// Connections beyond the floor with no stream for the idle timeout close, newest first, down
    /// to the floor; one that got a stream meanwhile stays. Time comes from the timer events.
    func testIdleConnectionsBeyondTheFloorClose() {
        var m = makeMachine(connections: 1, maxConnections: 3, idleTimeout: .seconds(10))
        load(&m, "a", 1)
        XCTAssertNil(m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1).scheduleIdleTimer, "at the floor: no idle timer")
        _ = m.streamFinished(connectionID: 0)
        XCTAssertEqual(execute(&m, request("b0")).started, "C0")
        let second = execute(&m, request("b1")).action
        XCTAssertEqual(second?.connect.map(\.id), [1])
        XCTAssertEqual(second?.scheduleIdleTimer, .seconds(5), "beyond the floor: ticks of half the timeout")
        XCTAssertNil(execute(&m, request("b2")).action?.scheduleIdleTimer, "armed once")
        XCTAssertEqual(names(m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 1).start), ["C1:b1"])
        XCTAssertEqual(names(m.streamFinished(connectionID: 1).start), ["C1:b2"])
        XCTAssertEqual(execute(&m, request("b3")).action?.connect.map(\.id), [2])
        XCTAssertEqual(names(m.connectionEstablished(connectionID: 2, connection: "C2", maxStreams: 1).start), ["C2:b3"])
        for id in 0...2 { _ = m.streamFinished(connectionID: id) }
        XCTAssertTrue(m.isIdle)
        XCTAssertEqual(m.liveCount, 3)
        // First tick: each had a stream since the last one: not idle yet.
        let t1 = m.idleTimerFired(now: self.t0)
        XCTAssertTrue(t1.retire.isEmpty)
        XCTAssertEqual(t1.scheduleIdleTimer, .seconds(5))
        // Second tick: idle from now on; C1 (loop 1) gets a stream after it.
        XCTAssertTrue(m.idleTimerFired(now: self.t0 + .seconds(5)).retire.isEmpty)
        XCTAssertEqual(execute(&m, request("c"), loop: 1).started, "C1")
        _ = m.streamFinished(connectionID: 1)
        XCTAssertTrue(m.idleTimerFired(now: self.t0 + .seconds(14)).retire.isEmpty, "not yet 10 s")
        // 10 s after: C2 and C0 idle for the timeout, C1 used since: C2 then C0 go, down to the floor.
        let t3 = m.idleTimerFired(now: self.t0 + .seconds(15))
        XCTAssertEqual(t3.retire, ["C2", "C0"])
        XCTAssertNil(t3.scheduleIdleTimer, "at the floor: the timer stops")
        XCTAssertEqual(m.liveCount, 1)
        XCTAssertEqual(m.entries.filter { $0.state == .draining }.map(\.id), [0, 2], "no stream starts on a retired connection")
        XCTAssertEqual(execute(&m, request("d")).started, "C1")
        // Idle forever at the floor: it stays.
        XCTAssertTrue(m.idleTimerFired(now: self.t0 + .seconds(3600)).retire.isEmpty)
    }

    func testNoIdleCloseWithoutTimeout() {
        var m = makeMachine(connections: 1, maxConnections: 2)
        load(&m, "a", 1)
        _ = m.connectionEstablished(connectionID: 0, connection: "C0", maxStreams: 1)
        _ = m.streamFinished(connectionID: 0)
        XCTAssertEqual(execute(&m, request("b0")).started, "C0")
        let opened = execute(&m, request("b1")).action
        XCTAssertEqual(opened?.connect.map(\.id), [1])
        XCTAssertNil(opened?.scheduleIdleTimer, "no idle timeout: connections beyond the floor stay")
        _ = m.connectionEstablished(connectionID: 1, connection: "C1", maxStreams: 1)
        _ = m.streamFinished(connectionID: 0)
        _ = m.streamFinished(connectionID: 1)
        XCTAssertTrue(m.idleTimerFired(now: self.t0 + .seconds(3600)).retire.isEmpty)
        XCTAssertEqual(m.liveCount, 2)
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
