import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL

/// Pool of long-lived multiplexed HTTP/2 connections to one origin.
///
/// - Connections are opened lazily (the first request opens one; concurrent load opens up to
///   `connectionsPerTarget`, each on the next event loop of the group) and kept open.
/// - A request goes to the least-busy ready connection that has a free stream under the server's
///   current SETTINGS_MAX_CONCURRENT_STREAMS; otherwise it waits in a FIFO pending queue and is
///   started as soon as a stream frees up (or a connection becomes ready / the server raises its limit).
/// - GOAWAY: the connection stops taking streams and is dropped once its streams finish; requests on
///   streams above the GOAWAY last-stream-id (and streams refused with REFUSED_STREAM) were not processed
///   and are transparently re-queued (at the front of the queue, up to 3 times; then they fail
///   with a retryable `.goaway` / `.streamReset("REFUSED_STREAM")`).
/// - A connection that closes fails its in-flight requests with `.connectionClosed` (retryable).
/// - Connect failures are retried with exponential backoff (`reconnectBackoffInitial` ...`Max`) while
///   requests are waiting; when a connect attempt fails and no other connection is alive, the
///   waiting requests fail with `.connectFailed` / `.tls` instead of waiting for their timeout.
/// - Returned futures belong to the connection's event loop (or, for queued requests, to an event
///   loop of the group). Requests are written on the connection's event loop without any task hop
///   when `execute` is called from that loop.
public final class HTTP2ConnectionPool: Sendable {
    let core: HTTP2PoolCore

    public init(
        target: HTTP2Target,
        configuration: HTTP2PoolConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.http2pool")
    ) {
        self.core = HTTP2PoolCore(target: target, configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    init(core: HTTP2PoolCore) {
        self.core = core
    }

    public var target: HTTP2Target { self.core.target }

    public func execute(_ request: HTTP2Request) -> EventLoopFuture<HTTP2Response> {
        self.core.execute(request)
    }

    public func execute(_ request: HTTP2Request) async throws -> HTTP2Response {
        try await self.core.execute(request).get()
    }

    /// Closes all connections; pending and in-flight requests fail with `.shutdown`.
    public func shutdown() async {
        await self.core.shutdown()
    }

    /// Total connections ever established (TLS + HTTP/2 preface completed).
    public var connectionsOpened: Int { self.core.stats.connectionsOpened }
    /// Connections currently usable or draining (established and not yet closed).
    public var activeConnections: Int { self.core.stats.activeConnections }
    /// Requests waiting for a stream.
    public var pendingRequests: Int { self.core.stats.pending }
    /// Connections and their stream usage, for logs and debugging.
    public var statusDescription: String { self.core.debugState }
}

/// One pool per origin, created lazily, sharing one TLS context.
///
/// Bounded for callers that reach origins chosen by others (Web Push endpoints): at most `maxPools`
/// pools (creating one more closes the least recently used, idle ones first), and with
/// `poolIdleTimeout` a pool unused for that long with nothing in flight is closed and forgotten. A
/// request still holding a closed pool fails with `.shutdown`.
public final class HTTP2PoolGroup: Sendable {
    struct Entry {
        let pool: HTTP2ConnectionPool
        var lastUsed: NIODeadline
    }

    struct State {
        var pools: [HTTP2Target: Entry] = [:]
        var shutdown = false
        var sweepTask: RepeatedTask? = nil
        var evicted = 0
    }

    private let configuration: HTTP2PoolConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let sslContext: SharedSSLContext
    public let maxPools: Int
    public let poolIdleTimeout: TimeAmount?
    private let state = NIOLockedValueBox(State())

    public init(
        configuration: HTTP2PoolConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger = Logger(label: "pushgate.http2pool"),
        maxPools: Int = .max,
        poolIdleTimeout: TimeAmount? = nil
    ) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.sslContext = SharedSSLContext(configuration: configuration)
        self.maxPools = max(1, maxPools)
        self.poolIdleTimeout = poolIdleTimeout
    }

    /// Pools currently held.
    public var count: Int { self.state.withLockedValue { $0.pools.count } }
    /// Pools closed by the bound or the idle timeout so far.
    public var evictedCount: Int { self.state.withLockedValue { $0.evicted } }

    public func pool(for target: HTTP2Target) -> HTTP2ConnectionPool {
        let now = NIODeadline.now()
        let (pool, created, isShutdown, evict, armSweep) = self.state.withLockedValue {
            state -> (HTTP2ConnectionPool, Bool, Bool, HTTP2ConnectionPool?, Bool) in
            if state.pools[target] != nil {
                state.pools[target]!.lastUsed = now
                return (state.pools[target]!.pool, false, state.shutdown, nil, false)
            }
            var evict: HTTP2ConnectionPool? = nil
            if state.pools.count >= self.maxPools {
                // Least recently used, preferring one with nothing in flight (O(n), only when full).
                var victim: (HTTP2Target, NIODeadline, Bool)? = nil
                for (t, e) in state.pools {
                    let idle = e.pool.core.isIdle
                    if let v = victim, (v.2 && !idle) || (v.2 == idle && v.1 <= e.lastUsed) { continue }
                    victim = (t, e.lastUsed, idle)
                }
                if let v = victim {
                    evict = state.pools.removeValue(forKey: v.0)?.pool
                    state.evicted += 1
                }
            }
            var logger = self.logger
            logger[metadataKey: "origin"] = "\(target.origin)"
            let p = HTTP2ConnectionPool(
                core: HTTP2PoolCore(
                    target: target,
                    configuration: self.configuration,
                    eventLoopGroup: self.eventLoopGroup,
                    logger: logger,
                    sslContext: self.sslContext
                )
            )
            state.pools[target] = Entry(pool: p, lastUsed: now)
            let armSweep = self.poolIdleTimeout != nil && state.sweepTask == nil && !state.shutdown
            return (p, true, state.shutdown, evict, armSweep)
        }
        if created && isShutdown {
            // Group already shut down: hand out a pool that fails everything with `.shutdown`.
            pool.core.markShutdown()
        }
        if let evict {
            self.logger.debug("closing HTTP/2 pool (pool limit)", metadata: ["origin": "\(evict.target.origin)"])
            Task { await evict.shutdown() }
        }
        if armSweep, let idle = self.poolIdleTimeout { self.armSweep(idle) }
        return pool
    }

    private func armSweep(_ idle: TimeAmount) {
        let tick = TimeAmount.nanoseconds(max(idle.nanoseconds / 2, 10_000_000))
        let task = self.eventLoopGroup.next().scheduleRepeatedTask(initialDelay: tick, delay: tick) { [weak self] task in
            guard let self else { return task.cancel() }
            self.sweep(idle)
        }
        let cancel = self.state.withLockedValue { s -> Bool in
            if s.shutdown || s.sweepTask != nil { return true }
            s.sweepTask = task
            return false
        }
        if cancel { task.cancel() }
    }

    /// Closes pools unused for `idle` with nothing in flight. Returns how many were closed.
    @discardableResult
    func sweep(_ idle: TimeAmount) -> Int {
        let cutoff = NIODeadline.now() - idle
        let closed = self.state.withLockedValue { s -> [HTTP2ConnectionPool] in
            var closed: [HTTP2ConnectionPool] = []
            for (t, e) in s.pools where e.lastUsed <= cutoff && e.pool.core.isIdle {
                s.pools.removeValue(forKey: t)
                closed.append(e.pool)
            }
            s.evicted += closed.count
            return closed
        }
        for p in closed {
            self.logger.debug("closing idle HTTP/2 pool", metadata: ["origin": "\(p.target.origin)"])
            Task { await p.shutdown() }
        }
        return closed.count
    }

    /// Closes idle pools now (tests; the timer does it every `poolIdleTimeout / 2`).
    @discardableResult
    public func closeIdlePools(unusedFor idle: TimeAmount) -> Int { self.sweep(idle) }

    public func shutdown() async {
        let (pools, task) = self.state.withLockedValue { state -> ([HTTP2ConnectionPool], RepeatedTask?) in
            state.shutdown = true
            let task = state.sweepTask
            state.sweepTask = nil
            return (state.pools.values.map(\.pool), task)
        }
        task?.cancel()
        for p in pools {
            await p.shutdown()
        }
    }
}

// MARK: - Core

struct HTTP2PoolStats {
    var connectionsOpened: Int
    var activeConnections: Int
    var pending: Int
}

final class HTTP2PoolCore: Sendable {
    static let maxRequeues = 3

    struct Entry {
        enum State { case connecting, ready, draining }
        let id: Int
        let eventLoop: any EventLoop
        var handler: HTTP2ClientConnectionHandler?
        var channel: (any Channel)?
        var state: State
        var inFlight: Int
        var maxStreams: Int
    }

    struct State {
        var entries: [Entry] = []
        var pending = CircularBuffer<PendingRequest>(initialCapacity: 64)
        var isShutdown = false
        var nextConnectionID = 0
        var nextEventLoop = 0
        var consecutiveFailures = 0
        var backoffUntil: NIODeadline? = nil
        var backoffTimerArmed = false
        var pendingTimerArmed = false
        var connectionsOpened = 0
        /// The `connectAddresses` of the latest request that had some: where new connections go.
        var connectAddresses: [SocketAddress]? = nil

        /// Connections counting towards `connectionsPerTarget`.
        var liveCount: Int {
            var n = 0
            for e in self.entries where e.state != .draining { n += 1 }
            return n
        }
    }

    /// Things to do once the lock is released.
    struct Actions {
        var start: [(HTTP2ClientConnectionHandler, PendingRequest)] = []
        var fail: [(EventLoopPromise<HTTP2Response>, HTTP2PoolError)] = []
        var connect: [(id: Int, eventLoop: any EventLoop, addresses: [SocketAddress]?)] = []
        var armBackoffTimer: NIODeadline? = nil
        var armPendingTimer: NIODeadline? = nil
        var isEmpty: Bool {
            self.start.isEmpty && self.fail.isEmpty && self.connect.isEmpty && self.armBackoffTimer == nil
                && self.armPendingTimer == nil
        }
    }

    let target: HTTP2Target
    let configuration: HTTP2PoolConfiguration
    let eventLoopGroup: any EventLoopGroup
    let eventLoops: [any EventLoop]
    let logger: Logger
    /// Made at the first connect, not when the pool is built: a context parses the system trust store
    /// (~0.8 MB each), and most pools (APNs sandbox next to production, idle providers) never connect.
    /// Pools of one `HTTP2PoolGroup` share one context.
    private let sslContextBox: SharedSSLContext
    private let state = NIOLockedValueBox(State())

    init(target: HTTP2Target, configuration: HTTP2PoolConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger,
         sslContext: SharedSSLContext? = nil) {
        var configuration = configuration
        configuration.connectionsPerTarget = max(1, configuration.connectionsPerTarget)
        configuration.maxPendingRequests = max(0, configuration.maxPendingRequests)
        configuration.maxResponseBodyBytes = max(0, configuration.maxResponseBodyBytes)
        configuration.maxResponseHeaderFields = max(0, configuration.maxResponseHeaderFields)
        self.target = target
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.eventLoops = Array(eventLoopGroup.makeIterator())
        self.logger = logger
        self.sslContextBox = sslContext ?? SharedSSLContext(configuration: configuration)
    }

    /// The TLS context for this pool's target, made once on first use; nil for plain-text targets.
    private var sslContext: Result<NIOSSLContext, HTTP2PoolError>? {
        guard self.target.isTLS else { return nil }
        return self.sslContextBox.context
    }

    /// Nothing in flight and nothing waiting (an idle pool may be closed by its group).
    var isIdle: Bool {
        self.state.withLockedValue { s in
            s.pending.isEmpty && !s.entries.contains { $0.inFlight > 0 || $0.state == .connecting }
        }
    }

    var stats: HTTP2PoolStats {
        self.state.withLockedValue { s in
            var active = 0
            for e in s.entries where e.state != .connecting { active += 1 }
            return HTTP2PoolStats(connectionsOpened: s.connectionsOpened, activeConnections: active, pending: s.pending.count)
        }
    }

    var debugState: String {
        self.state.withLockedValue { s in
            s.entries.map { "#\($0.id) \($0.state) inFlight=\($0.inFlight)/\($0.maxStreams)" }.joined(separator: ", ")
                + " pending=\(s.pending.count)"
        }
    }

    func markShutdown() {
        self.state.withLockedValue { $0.isShutdown = true }
    }

    // MARK: execute

    private enum ExecuteDecision {
        case start(HTTP2ClientConnectionHandler, Actions)
        case queued(EventLoopFuture<HTTP2Response>, Actions)
        case fail(HTTP2PoolError)
    }

    func execute(_ request: HTTP2Request) -> EventLoopFuture<HTTP2Response> {
        let deadline = NIODeadline.now() + self.configuration.requestTimeout
        let decision = self.state.withLockedValue { s -> ExecuteDecision in
            if s.isShutdown { return .fail(.shutdown) }
            if let addresses = request.connectAddresses { s.connectAddresses = addresses }
            var actions = Actions()
            if let index = Self.leastBusy(s) {
                let loadBefore = s.entries[index].inFlight
                s.entries[index].inFlight += 1
                // Spread concurrent load: open the remaining connections once one is busy.
                if loadBefore > 0 { self.maybeConnect(&s, &actions, eager: true) }
                return .start(s.entries[index].handler!, actions)
            }
            if s.pending.count >= self.configuration.maxPendingRequests { return .fail(.tooManyPending) }
            let promise = self.eventLoopGroup.any().makePromise(of: HTTP2Response.self)
            s.pending.append(PendingRequest(request: request, promise: promise, deadline: deadline, requeues: 0))
            self.maybeConnect(&s, &actions, eager: false)
            self.armPendingTimerIfNeeded(&s, &actions)
            return .queued(promise.futureResult, actions)
        }
        switch decision {
        case .start(let handler, let actions):
            let promise = handler.eventLoop.makePromise(of: HTTP2Response.self)
            handler.startRequestOnLoop(PendingRequest(request: request, promise: promise, deadline: deadline, requeues: 0))
            if !actions.isEmpty { self.run(actions) }
            return promise.futureResult
        case .queued(let future, let actions):
            self.run(actions)
            return future
        case .fail(let error):
            return self.eventLoopGroup.any().makeFailedFuture(error)
        }
    }

    private static func leastBusy(_ s: State) -> Int? {
        var best: Int? = nil
        var bestLoad = Int.max
        for i in s.entries.indices {
            let e = s.entries[i]
            if e.state == .ready && e.inFlight < e.maxStreams && e.inFlight < bestLoad {
                best = i
                bestLoad = e.inFlight
            }
        }
        return best
    }

    /// Assign pending requests to ready connections with free streams (least busy first).
    private func pump(_ s: inout State, _ actions: inout Actions) {
        while !s.pending.isEmpty, let index = Self.leastBusy(s) {
            s.entries[index].inFlight += 1
            actions.start.append((s.entries[index].handler!, s.pending.removeFirst()))
        }
    }

    private func maybeConnect(_ s: inout State, _ actions: inout Actions, eager: Bool) {
        guard !s.isShutdown, eager || !s.pending.isEmpty else { return }
        guard s.liveCount < self.configuration.connectionsPerTarget else { return }
        if let until = s.backoffUntil, until > .now() {
            if eager { return }
            if !s.backoffTimerArmed {
                s.backoffTimerArmed = true
                actions.armBackoffTimer = until
            }
            return
        }
        let id = s.nextConnectionID
        s.nextConnectionID += 1
        let el = self.eventLoops[s.nextEventLoop % self.eventLoops.count]
        s.nextEventLoop &+= 1
        s.entries.append(Entry(id: id, eventLoop: el, handler: nil, channel: nil, state: .connecting, inFlight: 0, maxStreams: 0))
        actions.connect.append((id, el, s.connectAddresses))
    }

    private func armPendingTimerIfNeeded(_ s: inout State, _ actions: inout Actions) {
        if !s.pendingTimerArmed, let first = s.pending.first {
            s.pendingTimerArmed = true
            actions.armPendingTimer = first.deadline
        }
    }

    private func run(_ actions: Actions) {
        for (promise, error) in actions.fail {
            promise.fail(error)
        }
        for (handler, request) in actions.start {
            handler.startRequestOnLoop(request)
        }
        for c in actions.connect {
            self.connect(id: c.id, eventLoop: c.eventLoop, addresses: c.addresses)
        }
        if let at = actions.armBackoffTimer {
            self.eventLoops[0].scheduleTask(deadline: at) { self.backoffTimerFired() }
        }
        if let at = actions.armPendingTimer {
            self.eventLoops[0].scheduleTask(deadline: at) { self.pendingTimerFired() }
        }
    }

    private func backoffTimerFired() {
        let actions = self.state.withLockedValue { s -> Actions in
            s.backoffTimerArmed = false
            var actions = Actions()
            self.maybeConnect(&s, &actions, eager: false)
            return actions
        }
        self.run(actions)
    }

    private func pendingTimerFired() {
        let actions = self.state.withLockedValue { s -> Actions in
            s.pendingTimerArmed = false
            var actions = Actions()
            let now = NIODeadline.now()
            // The queue is ordered by deadline: FIFO with one timeout, and re-queued requests
            // (older deadlines) go to the front.
            while let first = s.pending.first, first.deadline <= now {
                actions.fail.append((s.pending.removeFirst().promise, .timeout))
            }
            if let first = s.pending.first {
                s.pendingTimerArmed = true
                // Small slack to expire requests in batches.
                actions.armPendingTimer = max(first.deadline, now) + .milliseconds(1)
            }
            return actions
        }
        self.run(actions)
    }

    // MARK: connection lifecycle (called by handlers on their event loop)

    private func connect(id: Int, eventLoop: any EventLoop, addresses: [SocketAddress]?) {
        let handler = HTTP2ClientConnectionHandler(
            id: id,
            eventLoop: eventLoop,
            core: self,
            target: self.target,
            logger: self.logger
        )
        let sslContext = self.sslContext
        let serverHostname: String? = Self.isIPAddress(self.target.host) ? nil : self.target.host
        let settings: HTTP2Settings = [
            HTTP2Setting(parameter: .enablePush, value: 0),
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 1 << 16),
        ]
        if case .failure(let error) = sslContext {
            eventLoop.execute { handler.connectFailed(error) }
            return
        }
        var bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(self.configuration.connectTimeout)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if case .success(let context) = sslContext {
                        try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverHostname))
                    }
                    try sync.addHandler(NIOHTTP2Handler(mode: .client, initialSettings: settings))
                    try sync.addHandler(handler)
                }
            }
        if let addresses {
            // Connect to the caller's (checked) addresses only: NIO's Happy Eyeballs over a resolver
            // that answers with them, so the host name still drives SNI and the certificate check.
            bootstrap = bootstrap.resolver(FixedAddressResolver(addresses: addresses, eventLoop: eventLoop))
        }
        bootstrap.connect(host: self.target.host, port: self.target.port).whenComplete { result in
            switch result {
            case .success(let channel):
                let close = self.state.withLockedValue { s -> Bool in
                    if s.isShutdown { return true }
                    if let i = s.entries.firstIndex(where: { $0.id == id }) {
                        s.entries[i].channel = channel
                    }
                    return false
                }
                if close { handler.shutdown() }
            case .failure(let error):
                handler.connectFailed(error)
            }
        }
    }

    private static func isIPAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }

    /// First SETTINGS received. Returns requests to start.
    func connectionReady(_ handler: HTTP2ClientConnectionHandler, maxStreams: Int)
        -> [(HTTP2ClientConnectionHandler, PendingRequest)]
    {
        let actions = self.state.withLockedValue { s -> Actions? in
            guard !s.isShutdown, let i = s.entries.firstIndex(where: { $0.id == handler.id }) else { return nil }
            s.entries[i].handler = handler
            s.entries[i].state = .ready
            s.entries[i].maxStreams = maxStreams
            s.connectionsOpened += 1
            s.consecutiveFailures = 0
            s.backoffUntil = nil
            var actions = Actions()
            self.pump(&s, &actions)
            return actions
        }
        guard var actions else {
            handler.shutdown()
            return []
        }
        self.logger.debug(
            "HTTP/2 connection ready",
            metadata: ["connection": "\(handler.id)", "maxConcurrentStreams": "\(maxStreams)"]
        )
        let start = actions.start
        actions.start = []
        self.run(actions)
        return start
    }

    func maxStreamsChanged(connectionID: Int, maxStreams: Int) -> [(HTTP2ClientConnectionHandler, PendingRequest)] {
        self.state.withLockedValue { s in
            guard let i = s.entries.firstIndex(where: { $0.id == connectionID }) else { return [] }
            s.entries[i].maxStreams = maxStreams
            var actions = Actions()
            self.pump(&s, &actions)
            return actions.start
        }
    }

    /// A stream of this connection finished (hot path). Returns requests to start.
    func streamReleased(connectionID: Int) -> [(HTTP2ClientConnectionHandler, PendingRequest)] {
        self.state.withLockedValue { s in
            // Few entries: linear scan is cheapest.
            for i in s.entries.indices where s.entries[i].id == connectionID {
                s.entries[i].inFlight -= 1
                break
            }
            if s.pending.isEmpty { return [] }
            var actions = Actions()
            self.pump(&s, &actions)
            return actions.start
        }
    }

    /// GOAWAY received (or the connection retires itself): take no new streams, maybe open a replacement.
    func connectionDraining(connectionID: Int, released: Int) {
        let actions = self.state.withLockedValue { s -> Actions in
            var actions = Actions()
            guard let i = s.entries.firstIndex(where: { $0.id == connectionID }) else { return actions }
            s.entries[i].state = .draining
            s.entries[i].inFlight -= released
            self.maybeConnect(&s, &actions, eager: false)
            return actions
        }
        self.run(actions)
    }

    /// Put a request that was not sent (or refused by the server unprocessed) back at the front of the queue.
    func requeue(_ request: PendingRequest, error: HTTP2PoolError) {
        var request = request
        request.requeues += 1
        let actions = self.state.withLockedValue { s -> Actions in
            var actions = Actions()
            if s.isShutdown {
                actions.fail.append((request.promise, .shutdown))
                return actions
            }
            if request.requeues > Self.maxRequeues {
                actions.fail.append((request.promise, error))
                return actions
            }
            s.pending.prepend(request)
            self.pump(&s, &actions)
            self.maybeConnect(&s, &actions, eager: false)
            self.armPendingTimerIfNeeded(&s, &actions)
            return actions
        }
        self.run(actions)
    }

    func connectionClosed(connectionID: Int, wasReady: Bool, error: HTTP2PoolError) {
        let actions = self.state.withLockedValue { s -> Actions in
            var actions = Actions()
            guard let i = s.entries.firstIndex(where: { $0.id == connectionID }) else { return actions }
            s.entries.remove(at: i)
            if s.isShutdown { return actions }
            if !wasReady {
                s.consecutiveFailures += 1
                let exp = min(s.consecutiveFailures - 1, 30)
                let initial = max(self.configuration.reconnectBackoffInitial.nanoseconds, 1_000_000)
                let capped = min(
                    initial.multipliedReportingOverflow(by: Int64(1) << exp).overflow
                        ? Int64.max : initial << exp,
                    self.configuration.reconnectBackoffMax.nanoseconds
                )
                // Jitter: 80%..100% of the delay.
                let delay = capped - Int64.random(in: 0...(capped / 5))
                s.backoffUntil = .now() + .nanoseconds(delay)
                let othersAlive = s.entries.contains { $0.state != .draining }
                if !othersAlive {
                    // Nothing else can serve the waiting requests soon: fail them with the connect error.
                    while let p = s.pending.popFirst() {
                        actions.fail.append((p.promise, error))
                    }
                }
                self.logger.debug(
                    "HTTP/2 connect failed",
                    metadata: ["error": "\(error)", "retryIn": "\(delay / 1_000_000)ms"]
                )
            }
            self.pump(&s, &actions)
            self.maybeConnect(&s, &actions, eager: false)
            return actions
        }
        self.run(actions)
    }

    // MARK: shutdown

    func shutdown() async {
        let (pending, entries) = self.state.withLockedValue { s in
            s.isShutdown = true
            let pending = Array(s.pending)
            s.pending.removeAll()
            return (pending, s.entries)
        }
        for p in pending {
            p.promise.fail(HTTP2PoolError.shutdown)
        }
        var closeFutures: [EventLoopFuture<Void>] = []
        for e in entries {
            if let h = e.handler {
                e.eventLoop.execute { h.shutdown() }
            } else if let ch = e.channel {
                ch.close(promise: nil)
            }
            if let ch = e.channel { closeFutures.append(ch.closeFuture) }
        }
        for f in closeFutures {
            try? await f.get()
        }
    }
}

/// One lazily made client TLS context (ALPN from `offeredALPN`, always including "h2").
final class SharedSSLContext: Sendable {
    private let tls: TLSConfiguration
    private let box = NIOLockedValueBox<Result<NIOSSLContext, HTTP2PoolError>?>(nil)

    init(configuration: HTTP2PoolConfiguration) {
        var tls = configuration.tlsConfiguration
        tls.applicationProtocols = configuration.offeredALPN.contains("h2") ? configuration.offeredALPN : ["h2"]
        self.tls = tls
    }

    var context: Result<NIOSSLContext, HTTP2PoolError> {
        self.box.withLockedValue { cached in
            if let cached { return cached }
            let made: Result<NIOSSLContext, HTTP2PoolError>
            do {
                made = .success(try NIOSSLContext(configuration: self.tls))
            } catch {
                made = .failure(.tls("invalid TLS configuration: \(error)"))
            }
            cached = made
            return made
        }
    }
}

/// A NIO `Resolver` that answers with fixed addresses and never does DNS: `ClientBootstrap`'s Happy
/// Eyeballs then connects to exactly these (IPv6 and IPv4 raced as usual).
public struct FixedAddressResolver: Resolver, Sendable {
    public let addresses: [SocketAddress]
    public let eventLoop: any EventLoop

    public init(addresses: [SocketAddress], eventLoop: any EventLoop) {
        self.addresses = addresses
        self.eventLoop = eventLoop
    }

    public func initiateAQuery(host: String, port: Int) -> EventLoopFuture<[SocketAddress]> {
        self.eventLoop.makeSucceededFuture(self.addresses.filter { $0.protocol == .inet })
    }

    public func initiateAAAAQuery(host: String, port: Int) -> EventLoopFuture<[SocketAddress]> {
        self.eventLoop.makeSucceededFuture(self.addresses.filter { $0.protocol == .inet6 })
    }

    public func cancelQueries() {}
}
