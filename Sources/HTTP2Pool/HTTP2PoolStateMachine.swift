import NIOCore
import PushgateCore

/// What the state machine needs to know about a queued request.
protocol HTTP2PoolQueueable {
    /// When the request times out (queue time included).
    var deadline: NIODeadline { get }
    /// How many times the pool re-queued it after the server refused it unprocessed.
    var requeues: Int { get set }
}

/// The HTTP/2 pool's core as a pure state machine: the connections of one origin, their stream
/// usage, the queue of requests waiting for a stream, scaling the connections with the load,
/// reconnect backoff and shutdown.
///
/// Connections: the first request opens one; overlapping requests open the rest of the floor
/// (`connectionsPerTarget`). Beyond it, more open only while requests wait and every live connection
/// has all of its streams taken (the server's SETTINGS_MAX_CONCURRENT_STREAMS, followed as it
/// changes), up to `maxConnections`: as many at once as the waiting requests need at the streams a
/// settled connection allows, and none while a connection is still connecting or has not finished a
/// stream yet (APNs allows one stream until it saw a valid token, then raises its limit: scaling on
/// that first figure would open dozens of connections for nothing). Connections beyond the floor
/// that had no stream for `idleTimeout` are closed, newest first, down to the floor (an idle timer
/// event, so no clock is read on the hot path).
///
/// Each event (a request arrived, a connection was established / failed / closed, a stream finished,
/// GOAWAY, a timer fired, shutdown) mutates the state and returns the `Action` to carry out. The
/// state machine never reads a clock, draws a random number, logs or does I/O: the caller passes
/// `now` and the jitter draw, holds its lock only while calling in, and executes the actions
/// after releasing it. (Shape after async-http-client's `HTTPConnectionPool.StateMachine`.)
///
/// Generic over the connection handle and the request so that tests drive it with plain values.
struct HTTP2PoolStateMachine<Connection, Request: HTTP2PoolQueueable> {
    struct Configuration {
        /// The floor: connections opened as soon as requests overlap, and kept while idle.
        var connectionsPerTarget: Int
        var maxPendingRequests: Int
        var reconnectBackoffInitial: TimeAmount
        var reconnectBackoffMax: TimeAmount
        /// Transparent re-queues of one request refused unprocessed (GOAWAY / REFUSED_STREAM).
        var maxRequeues: Int = 3
        /// The ceiling of live (not draining) connections; nil: `connectionsPerTarget` (no scaling).
        var maxConnections: Int? = nil
        /// Connections beyond the floor with no stream for this long are closed (nil: never).
        var idleTimeout: TimeAmount? = nil
    }

    enum ConnectionState: Equatable { case connecting, ready, draining }

    struct Entry {
        let id: Int
        /// Index of the event loop the connection lives on (round robin over the group).
        let eventLoopIndex: Int
        var connection: Connection?
        var channel: (any Channel)?
        var state: ConnectionState
        var inFlight: Int
        var maxStreams: Int
        /// A stream of it finished: its `maxStreams` is the server's settled figure (APNs raises its
        /// initial limit once it saw a valid token).
        var settled = false
        /// A stream started on it since the last idle timer event.
        var used = false
        /// The idle timer event that first saw it without a stream (nil: busy since).
        var idleSince: NIODeadline? = nil
    }

    /// A connection to open.
    struct Connect {
        var id: Int
        var eventLoopIndex: Int
        var addresses: [SocketAddress]?
    }

    /// Something worth a log line, logged by the caller outside the lock.
    enum LogEvent: Equatable {
        case connectFailed(HTTP2PoolError, retryIn: TimeAmount)
    }

    /// What to do once the lock is released.
    struct Action {
        /// Start these requests on these connections (a stream slot is reserved for each).
        var start: [(Connection, Request)] = []
        var fail: [(Request, HTTP2PoolError)] = []
        var connect: [Connect] = []
        /// Close these connections (established after shutdown, or unknown to the pool).
        var close: [Connection] = []
        var closeChannels: [any Channel] = []
        /// Idle connections beyond the floor: the pool gave them no stream and gives them none
        /// again; each closes (it has no stream in flight).
        var retire: [Connection] = []
        var scheduleBackoffTimer: NIODeadline? = nil
        var schedulePendingTimer: NIODeadline? = nil
        /// Call `idleTimerFired` after this long.
        var scheduleIdleTimer: TimeAmount? = nil
        var log: [LogEvent] = []

        var isEmpty: Bool {
            self.start.isEmpty && self.fail.isEmpty && self.connect.isEmpty && self.close.isEmpty
                && self.closeChannels.isEmpty && self.retire.isEmpty && self.scheduleBackoffTimer == nil
                && self.schedulePendingTimer == nil && self.scheduleIdleTimer == nil && self.log.isEmpty
        }
    }

    /// The answer to a new request.
    enum ExecuteDecision {
        /// Start it at once on this connection (slot reserved); then run the action.
        case start(Connection, Action)
        /// Queued (made by the `makeRequest` closure); run the action.
        case queued(Action)
        case fail(HTTP2PoolError)
    }

    let configuration: Configuration
    let eventLoopCount: Int

    private(set) var entries: [Entry] = []
    private(set) var pending = CircularBuffer<Request>(initialCapacity: 64)
    private(set) var isShutdown = false
    private(set) var connectionsOpened = 0
    private(set) var consecutiveFailures = 0
    private var nextConnectionID = 0
    private var nextEventLoop = 0
    private var backoffUntil: NIODeadline? = nil
    private var backoffTimerArmed = false
    private var pendingTimerArmed = false
    private var idleTimerArmed = false
    /// The `connectAddresses` of the latest request that had some: where new connections go.
    private var connectAddresses: [SocketAddress]? = nil

    init(configuration: Configuration, eventLoopCount: Int) {
        var configuration = configuration
        configuration.connectionsPerTarget = max(1, configuration.connectionsPerTarget)
        configuration.maxConnections = max(configuration.connectionsPerTarget, configuration.maxConnections ?? 0)
        configuration.maxPendingRequests = max(0, configuration.maxPendingRequests)
        if let idle = configuration.idleTimeout, idle <= .zero { configuration.idleTimeout = .milliseconds(1) }
        self.configuration = configuration
        self.eventLoopCount = max(1, eventLoopCount)
    }

    // MARK: queries

    /// The ceiling of live connections (at least the floor).
    var maxConnections: Int { self.configuration.maxConnections ?? self.configuration.connectionsPerTarget }

    /// Connections counting towards `connectionsPerTarget` and `maxConnections` (not draining).
    var liveCount: Int {
        var n = 0
        for e in self.entries where e.state != .draining { n += 1 }
        return n
    }

    /// Nothing in flight and nothing waiting.
    var isIdle: Bool {
        self.pending.isEmpty && !self.entries.contains { $0.inFlight > 0 || $0.state == .connecting }
    }

    /// Established connections (ready or draining).
    var activeConnections: Int {
        var n = 0
        for e in self.entries where e.state != .connecting { n += 1 }
        return n
    }

    var debugDescription: String {
        self.entries.map { "#\($0.id) \($0.state) inFlight=\($0.inFlight)/\($0.maxStreams)" }.joined(separator: ", ")
            + " pending=\(self.pending.count)"
    }

    // MARK: events

    /// A request arrived. `makeRequest` is called only when the request has to wait in the queue.
    /// - Parameter preferredEventLoop: the event loop the caller runs on, when it is one of the pool's
    ///   (index into its loops): a ready connection of that loop with a free stream is taken first, so
    ///   the request starts and its answer completes without a hop to another thread.
    mutating func executeRequest(
        connectAddresses: [SocketAddress]?,
        now: NIODeadline,
        preferredEventLoop: Int? = nil,
        makeRequest: () -> Request
    ) -> ExecuteDecision {
        if self.isShutdown { return .fail(.shutdown) }
        if let connectAddresses { self.connectAddresses = connectAddresses }
        var action = Action()
        if let index = preferredEventLoop.flatMap({ self.leastBusy(onEventLoop: $0) }) ?? self.leastBusy() {
            let loadBefore = self.entries[index].inFlight
            self.entries[index].inFlight += 1
            self.entries[index].used = true
            // Spread concurrent load: open the remaining connections once one is busy.
            if loadBefore > 0 { self.maybeConnect(&action, eager: true, now: now) }
            return .start(self.entries[index].connection!, action)
        }
        if self.pending.count >= self.configuration.maxPendingRequests { return .fail(.tooManyPending) }
        self.pending.append(makeRequest())
        self.maybeConnect(&action, eager: false, now: now)
        self.armPendingTimerIfNeeded(&action)
        return .queued(action)
    }

    /// The bootstrap connected (TCP up; TLS / HTTP/2 preface still to come).
    mutating func channelConnected(connectionID: Int, channel: any Channel) -> Action {
        var action = Action()
        if self.isShutdown {
            action.closeChannels.append(channel)
            return action
        }
        if let i = self.index(of: connectionID) { self.entries[i].channel = channel }
        return action
    }

    /// First SETTINGS received: the connection takes streams.
    mutating func connectionEstablished(connectionID: Int, connection: Connection, maxStreams: Int) -> Action {
        var action = Action()
        guard !self.isShutdown, let i = self.index(of: connectionID) else {
            action.close.append(connection)
            return action
        }
        self.entries[i].connection = connection
        self.entries[i].state = .ready
        self.entries[i].maxStreams = maxStreams
        self.connectionsOpened += 1
        self.consecutiveFailures = 0
        self.backoffUntil = nil
        self.pump(&action)
        self.maybeConnect(&action, eager: false, now: nil)
        return action
    }

    /// The server changed SETTINGS_MAX_CONCURRENT_STREAMS: a raise starts waiting requests, a cut
    /// (streams in flight above it finish; none start) may open another connection for them.
    mutating func maxStreamsChanged(connectionID: Int, maxStreams: Int) -> Action {
        var action = Action()
        guard let i = self.index(of: connectionID) else { return action }
        self.entries[i].maxStreams = maxStreams
        self.pump(&action)
        self.maybeConnect(&action, eager: false, now: nil)
        return action
    }

    /// A stream of this connection finished (hot path: no clock).
    mutating func streamFinished(connectionID: Int) -> Action {
        var settledNow = false
        // Few entries: a linear scan is cheapest.
        for i in self.entries.indices where self.entries[i].id == connectionID {
            self.entries[i].inFlight -= 1
            if !self.entries[i].settled {
                self.entries[i].settled = true
                settledNow = true
            }
            break
        }
        var action = Action()
        if !self.pending.isEmpty {
            self.pump(&action)
            // The connection's limit is known now: the waiting requests may need more connections.
            if settledNow { self.maybeConnect(&action, eager: false, now: nil) }
        }
        return action
    }

    /// GOAWAY received (or the connection retires itself: idle, stream IDs exhausted): no new
    /// streams on it; `released` streams it gave back (refused above last-stream-id). A replacement
    /// may be opened.
    mutating func connectionDraining(connectionID: Int, released: Int, now: NIODeadline) -> Action {
        var action = Action()
        guard let i = self.index(of: connectionID) else { return action }
        self.entries[i].state = .draining
        self.entries[i].inFlight -= released
        self.maybeConnect(&action, eager: false, now: now)
        return action
    }

    /// The server refused a request without processing it (GOAWAY above last-stream-id,
    /// REFUSED_STREAM), or it lost a race with a closing connection before being sent: back to
    /// the front of the queue, at most `maxRequeues` times, then failed with `error`.
    mutating func requeue(_ request: Request, error: HTTP2PoolError, now: NIODeadline) -> Action {
        var request = request
        request.requeues += 1
        var action = Action()
        if self.isShutdown {
            action.fail.append((request, .shutdown))
            return action
        }
        if request.requeues > self.configuration.maxRequeues {
            action.fail.append((request, error))
            return action
        }
        self.pending.prepend(request)
        self.pump(&action)
        self.maybeConnect(&action, eager: false, now: now)
        self.armPendingTimerIfNeeded(&action)
        return action
    }

    /// The connection is gone. `wasReady` false: the connect (TCP, TLS, preface) failed with
    /// `error`; the next attempt waits for the backoff (`random` in [0, 1] draws its jitter), and when
    /// no other connection is alive the waiting requests fail with `error` at once.
    mutating func connectionClosed(
        connectionID: Int,
        wasReady: Bool,
        error: HTTP2PoolError,
        now: NIODeadline,
        random: Double
    ) -> Action {
        var action = Action()
        guard let i = self.index(of: connectionID) else { return action }
        self.entries.remove(at: i)
        if self.isShutdown { return action }
        if !wasReady {
            self.consecutiveFailures += 1
            let delay = Self.reconnectDelay(
                failures: self.consecutiveFailures,
                initial: self.configuration.reconnectBackoffInitial,
                maximum: self.configuration.reconnectBackoffMax,
                random: random
            )
            self.backoffUntil = now + delay
            if !self.entries.contains(where: { $0.state != .draining }) {
                // Nothing else can serve the waiting requests soon: fail them with the connect error.
                while let p = self.pending.popFirst() {
                    action.fail.append((p, error))
                }
            }
            action.log.append(.connectFailed(error, retryIn: delay))
        }
        self.pump(&action)
        self.maybeConnect(&action, eager: false, now: now)
        return action
    }

    /// The idle timer fired: connections beyond the floor that had no stream since an earlier
    /// event at least `idleTimeout` ago are retired, newest first, down to the floor.
    mutating func idleTimerFired(now: NIODeadline) -> Action {
        self.idleTimerArmed = false
        var action = Action()
        guard !self.isShutdown, let timeout = self.configuration.idleTimeout else { return action }
        var live = self.liveCount
        for i in self.entries.indices.reversed() where self.entries[i].state == .ready {
            if self.entries[i].inFlight == 0 && !self.entries[i].used {
                if self.entries[i].idleSince == nil { self.entries[i].idleSince = now }
            } else {
                self.entries[i].idleSince = nil
            }
            self.entries[i].used = false
            if let since = self.entries[i].idleSince, since + timeout <= now, live > self.configuration.connectionsPerTarget,
                self.pending.isEmpty, let connection = self.entries[i].connection
            {
                self.entries[i].state = .draining
                live -= 1
                action.retire.append(connection)
            }
        }
        self.armIdleTimerIfNeeded(&action)
        return action
    }

    /// The reconnect backoff timer fired.
    mutating func backoffTimerFired(now: NIODeadline) -> Action {
        self.backoffTimerArmed = false
        var action = Action()
        self.maybeConnect(&action, eager: false, now: now)
        return action
    }

    /// The queue timer fired: fail the requests whose deadline passed.
    mutating func pendingTimerFired(now: NIODeadline) -> Action {
        self.pendingTimerArmed = false
        var action = Action()
        // Ordered by deadline: FIFO with one timeout, re-queued requests (older deadlines) in front.
        while let first = self.pending.first, first.deadline <= now {
            action.fail.append((self.pending.removeFirst(), .timeout))
        }
        if let first = self.pending.first {
            self.pendingTimerArmed = true
            // Small slack to expire requests in batches.
            action.schedulePendingTimer = max(first.deadline, now) + .milliseconds(1)
        }
        return action
    }

    /// Shut down: fail everything waiting; the caller closes `entries` (connections / channels).
    mutating func shutdown() -> (fail: [Request], entries: [Entry]) {
        self.isShutdown = true
        let failed = Array(self.pending)
        self.pending.removeAll()
        return (failed, self.entries)
    }

    /// Shut down before anything was opened (a pool handed out by a shut-down group).
    mutating func markShutdown() {
        self.isShutdown = true
    }

    // MARK: internals

    private func index(of connectionID: Int) -> Int? {
        self.entries.firstIndex { $0.id == connectionID }
    }

    private func leastBusy(onEventLoop loop: Int? = nil) -> Int? {
        var best: Int? = nil
        var bestLoad = Int.max
        for i in self.entries.indices {
            let e = self.entries[i]
            if let loop, e.eventLoopIndex != loop { continue }
            if e.state == .ready && e.inFlight < e.maxStreams && e.inFlight < bestLoad {
                best = i
                bestLoad = e.inFlight
            }
        }
        return best
    }

    /// Assign waiting requests to ready connections with free streams (least busy first).
    private mutating func pump(_ action: inout Action) {
        while !self.pending.isEmpty, let index = self.leastBusy() {
            self.entries[index].inFlight += 1
            self.entries[index].used = true
            action.start.append((self.entries[index].connection!, self.pending.removeFirst()))
        }
    }

    /// Opens the connections the load needs (see the type's description). `now` nil (a hot-path
    /// event, no clock read): during a reconnect backoff the backoff timer opens them.
    private mutating func maybeConnect(_ action: inout Action, eager: Bool, now: NIODeadline?) {
        guard !self.isShutdown, eager || !self.pending.isEmpty else { return }
        let wanted = self.connectionsWanted(eager: eager)
        guard wanted > 0 else { return }
        if let until = self.backoffUntil, now.map({ until > $0 }) ?? true {
            if eager { return }
            if !self.backoffTimerArmed {
                self.backoffTimerArmed = true
                action.scheduleBackoffTimer = until
            }
            return
        }
        for _ in 0..<wanted {
            let id = self.nextConnectionID
            self.nextConnectionID += 1
            let loop = self.nextEventLoop % self.eventLoopCount
            self.nextEventLoop &+= 1
            self.entries.append(
                Entry(id: id, eventLoopIndex: loop, connection: nil, channel: nil, state: .connecting, inFlight: 0, maxStreams: 0)
            )
            action.connect.append(Connect(id: id, eventLoopIndex: loop, addresses: self.connectAddresses))
        }
        self.armIdleTimerIfNeeded(&action)
    }

    /// How many connections to open now: one while below the floor; beyond it, while requests
    /// wait and every live connection is established, settled and has all its streams taken, as
    /// many as the waiting requests need at the smallest settled limit, up to the ceiling.
    private func connectionsWanted(eager: Bool) -> Int {
        var live = 0
        var unsettled = false
        var free = 0
        var perConnection = Int.max
        for e in self.entries where e.state != .draining {
            live += 1
            switch e.state {
            case .connecting:
                unsettled = true
            case .ready:
                free += max(0, e.maxStreams - e.inFlight)
                if e.settled {
                    perConnection = min(perConnection, e.maxStreams)
                } else if e.inFlight > 0 {
                    unsettled = true
                }
            case .draining:
                break
            }
        }
        if live < self.configuration.connectionsPerTarget { return 1 }
        if eager || unsettled || live >= self.maxConnections { return 0 }
        let waiting = self.pending.count - free
        guard waiting > 0 else { return 0 }
        let streams = perConnection == .max ? 1 : max(1, perConnection)
        return min(self.maxConnections - live, (waiting + streams - 1) / streams)
    }

    /// Arms the idle timer while connections beyond the floor are live (ticks of half the timeout:
    /// an idle connection closes between one and one and a half `idleTimeout` after its last stream).
    private mutating func armIdleTimerIfNeeded(_ action: inout Action) {
        guard let timeout = self.configuration.idleTimeout, !self.idleTimerArmed, !self.isShutdown,
            self.liveCount > self.configuration.connectionsPerTarget
        else { return }
        self.idleTimerArmed = true
        action.scheduleIdleTimer = .nanoseconds(max(timeout.nanoseconds / 2, 1_000_000))
    }

    private mutating func armPendingTimerIfNeeded(_ action: inout Action) {
        if !self.pendingTimerArmed, let first = self.pending.first {
            self.pendingTimerArmed = true
            action.schedulePendingTimer = first.deadline
        }
    }

    /// Delay before the next connect after `failures` consecutive failures: exponential from
    /// `initial` (at least 1 ms), capped at `maximum`, 80%..100% of that (jitter).
    ///
    /// The same formula as `PushgateCore.Backoff.delay` (jitter 0.2); HTTP2Pool does not depend on
    /// PushgateCore yet.
    static func reconnectDelay(failures: Int, initial: TimeAmount, maximum: TimeAmount, random: Double) -> TimeAmount {
        // The one backoff function (PushgateCore), in nanoseconds, at least 1 ms.
        let nanos = Backoff.delay(
            attempt: failures, base: Double(max(initial.nanoseconds, 1_000_000)),
            maximum: Double(max(maximum.nanoseconds, 0)), jitter: 0.2, random: random)
        return .nanoseconds(Int64(min(nanos, 1e15)))
    }
}

extension HTTP2PoolStateMachine: Sendable where Connection: Sendable, Request: Sendable {}
extension HTTP2PoolStateMachine.Entry: Sendable where Connection: Sendable {}
extension HTTP2PoolStateMachine.Configuration: Sendable {}
extension HTTP2PoolStateMachine.Connect: Sendable {}
extension HTTP2PoolStateMachine.LogEvent: Sendable {}
