import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL

/// Pool of long-lived multiplexed HTTP/2 connections to one origin.
///
/// - Connections are opened lazily (the first request opens one; concurrent load opens up to
///   `connectionsPerTarget`, each on the next event loop of the group) and kept open. When requests
///   wait and every connection has all the streams its server allows in use, more open, up to
///   `maxConnectionsPerTarget`; those beyond `connectionsPerTarget` close after `idleTimeout` without
///   a stream.
/// - A request goes to the least-busy ready connection that has a free stream under the server's
///   current SETTINGS_MAX_CONCURRENT_STREAMS; otherwise it waits in a FIFO pending queue and is
///   started as soon as a stream frees up (or a connection becomes ready / the server raises its limit).
/// - GOAWAY: the connection stops taking streams and is dropped once its streams finish; requests on
///   streams above the GOAWAY last-stream-id (and streams refused with REFUSED_STREAM) were not processed
///   and are transparently re-queued (at the front of the queue, up to 3 times; then they fail
///   with code `.goaway` / `.streamRefused`). This is the pool's only retry.
/// - A connection that closes fails its in-flight requests with `.connectionClosed` (the server may
///   have processed them, so they are not re-sent).
/// - Every other failure is returned, typed (`HTTP2PoolError.code`), as one attempt for the caller's
///   retry policy to classify.
/// - The bookkeeping is the pure `HTTP2PoolStateMachine`; `HTTP2PoolCore` feeds it events and runs
///   the actions it returns outside the lock.
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
        HTTP2PoolDirectory.add(self)
    }

    init(core: HTTP2PoolCore) {
        self.core = core
        HTTP2PoolDirectory.add(self)
    }

    deinit { HTTP2PoolDirectory.remove(ObjectIdentifier(self)) }

    public var target: HTTP2Target { self.core.target }
    /// What the pool is for (`HTTP2PoolConfiguration.label`).
    public var label: HTTP2PoolLabel { self.core.configuration.label }

    public func execute(_ request: HTTP2Request) -> EventLoopFuture<HTTP2Response> {
        self.core.execute(request)
    }

    public func execute(_ request: HTTP2Request) async throws -> HTTP2Response {
        try await self.core.execute(request).get()
    }

    /// Closes all connections; pending and in-flight requests fail with `.shutdown`.
    public func shutdown() async {
        HTTP2PoolDirectory.remove(self)
        await self.core.shutdown()
    }

    /// Total connections ever established (TLS + HTTP/2 preface completed).
    public var connectionsOpened: Int { self.core.stats.connectionsOpened }
    /// Connections currently usable or draining (established and not yet closed).
    public var activeConnections: Int { self.core.stats.activeConnections }
    /// Requests waiting for a stream.
    public var pendingRequests: Int { self.core.stats.pending }
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

extension PendingRequest: HTTP2PoolQueueable {}

/// The I/O shell around `HTTP2PoolStateMachine`: holds the lock only while the state machine
/// mutates, reads the clock and draws jitter before calling in, and carries out the returned
/// actions (start streams, fail promises, connect, arm timers, log) after releasing it.
final class HTTP2PoolCore: Sendable {
    typealias StateMachine = HTTP2PoolStateMachine<HTTP2ClientConnectionHandler, PendingRequest>
    typealias Action = StateMachine.Action

    let target: HTTP2Target
    let configuration: HTTP2PoolConfiguration
    let eventLoopGroup: any EventLoopGroup
    let eventLoops: [any EventLoop]
    let logger: Logger
    /// Made at the first connect, not when the pool is built: a context parses the system trust store
    /// (~0.8 MB each), and most pools (APNs sandbox next to production, idle providers) never connect.
    /// Pools of one `HTTP2PoolGroup` share one context.
    private let sslContextBox: SharedSSLContext
    private let state: NIOLockedValueBox<StateMachine>
    /// Opens connection `id` instead of the TCP/TLS bootstrap (tests: the handler on an `EmbeddedChannel`).
    typealias Connector = @Sendable (_ core: HTTP2PoolCore, _ id: Int, _ eventLoop: any EventLoop, _ addresses: [SocketAddress]?) -> Void
    private let connector: Connector?

    init(
        target: HTTP2Target, configuration: HTTP2PoolConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger,
        sslContext: SharedSSLContext? = nil, connector: Connector? = nil
    ) {
        var configuration = configuration
        configuration.connectionsPerTarget = max(1, configuration.connectionsPerTarget)
        configuration.maxConnectionsPerTarget = max(configuration.connectionsPerTarget, configuration.maxConnectionsPerTarget)
        configuration.maxPendingRequests = max(0, configuration.maxPendingRequests)
        configuration.maxResponseBodyBytes = max(0, configuration.maxResponseBodyBytes)
        configuration.maxResponseHeaderFields = max(0, configuration.maxResponseHeaderFields)
        self.target = target
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.eventLoops = Array(eventLoopGroup.makeIterator())
        self.logger = logger
        self.sslContextBox = sslContext ?? SharedSSLContext(configuration: configuration)
        self.connector = connector
        self.state = NIOLockedValueBox(
            StateMachine(
                configuration: .init(
                    connectionsPerTarget: configuration.connectionsPerTarget,
                    maxPendingRequests: configuration.maxPendingRequests,
                    reconnectBackoffInitial: configuration.reconnectBackoffInitial,
                    reconnectBackoffMax: configuration.reconnectBackoffMax,
                    maxConnections: configuration.maxConnectionsPerTarget,
                    idleTimeout: configuration.idleTimeout
                ),
                eventLoopCount: self.eventLoops.count
            )
        )
    }

    /// The TLS context for this pool's target, made once on first use; nil for plain-text targets.
    private var sslContext: Result<NIOSSLContext, HTTP2PoolError>? {
        guard self.target.isTLS else { return nil }
        return self.sslContextBox.context
    }

    /// Nothing in flight and nothing waiting (an idle pool may be closed by its group).
    var isIdle: Bool { self.state.withLockedValue { $0.isIdle } }

    var stats: HTTP2PoolStats {
        self.state.withLockedValue { s in
            HTTP2PoolStats(connectionsOpened: s.connectionsOpened, activeConnections: s.activeConnections, pending: s.pending.count)
        }
    }

    func markShutdown() {
        self.state.withLockedValue { $0.markShutdown() }
    }

    // MARK: execute

    func execute(_ request: HTTP2Request) -> EventLoopFuture<HTTP2Response> {
        let now = NIODeadline.now()
        let deadline = now + self.configuration.requestTimeout
        var queuedFuture: EventLoopFuture<HTTP2Response>? = nil
        let current = self.currentEventLoopIndex()
        let decision = self.state.withLockedValue { s in
            s.executeRequest(connectAddresses: request.connectAddresses, now: now, preferredEventLoop: current) {
                let promise = self.eventLoopGroup.any().makePromise(of: HTTP2Response.self)
                queuedFuture = promise.futureResult
                return PendingRequest(request: request, promise: promise, deadline: deadline, requeues: 0)
            }
        }
        switch decision {
        case .start(let handler, let action):
            let promise = handler.eventLoop.makePromise(of: HTTP2Response.self)
            handler.startRequestOnLoop(PendingRequest(request: request, promise: promise, deadline: deadline, requeues: 0))
            if !action.isEmpty { self.run(action) }
            return promise.futureResult
        case .queued(let action):
            self.run(action)
            return queuedFuture!
        case .fail(let error):
            return self.eventLoopGroup.any().makeFailedFuture(error)
        }
    }

    /// The index among the pool's loops of the event loop this thread runs, if any (a delivery the
    /// dispatcher runs on an event loop: see Dispatcher's `eventLoops`).
    private func currentEventLoopIndex() -> Int? {
        for i in self.eventLoops.indices where self.eventLoops[i].inEventLoop { return i }
        return nil
    }

    /// Carries out an action (never under the lock).
    private func run(_ action: Action) {
        for event in action.log {
            switch event {
            case .connectFailed(let error, let retryIn):
                self.logger.debug(
                    "HTTP/2 connect failed",
                    metadata: ["error": "\(error)", "retryIn": "\(retryIn.nanoseconds / 1_000_000)ms"]
                )
            }
        }
        for (request, error) in action.fail {
            request.promise.fail(error)
        }
        for (handler, request) in action.start {
            handler.startRequestOnLoop(request)
        }
        for handler in action.close {
            handler.eventLoop.execute { handler.shutdown() }
        }
        for handler in action.retire {
            self.logger.debug("closing idle HTTP/2 connection", metadata: ["connection": "\(handler.id)"])
            handler.eventLoop.execute { handler.retire() }
        }
        for channel in action.closeChannels {
            channel.close(promise: nil)
        }
        for c in action.connect {
            let eventLoop = self.eventLoops[c.eventLoopIndex]
            if let connector = self.connector {
                connector(self, c.id, eventLoop, c.addresses)
            } else {
                self.connect(id: c.id, eventLoop: eventLoop, addresses: c.addresses)
            }
        }
        if let at = action.scheduleBackoffTimer {
            self.eventLoops[0].scheduleTask(deadline: at) { self.backoffTimerFired() }
        }
        if let at = action.schedulePendingTimer {
            self.eventLoops[0].scheduleTask(deadline: at) { self.pendingTimerFired() }
        }
        if let delay = action.scheduleIdleTimer {
            self.eventLoops[0].scheduleTask(in: delay) { self.idleTimerFired() }
        }
    }

    /// Runs everything but `start`, which it returns (the calling handler starts its own requests
    /// without an event-loop hop).
    private func runReturningStarts(_ action: Action) -> [(HTTP2ClientConnectionHandler, PendingRequest)] {
        var rest = action
        rest.start = []
        if !rest.isEmpty { self.run(rest) }
        return action.start
    }

    private func backoffTimerFired() {
        let now = NIODeadline.now()
        self.run(self.state.withLockedValue { $0.backoffTimerFired(now: now) })
    }

    private func idleTimerFired() {
        let now = NIODeadline.now()
        self.run(self.state.withLockedValue { $0.idleTimerFired(now: now) })
    }

    private func pendingTimerFired() {
        let now = NIODeadline.now()
        self.run(self.state.withLockedValue { $0.pendingTimerFired(now: now) })
    }

    // MARK: connection lifecycle (called by handlers on their event loop)

    /// Makes the handler of a new connection (its `id` is the state machine's).
    func makeHandler(id: Int, eventLoop: any EventLoop) -> HTTP2ClientConnectionHandler {
        HTTP2ClientConnectionHandler(id: id, eventLoop: eventLoop, core: self, target: self.target, logger: self.logger)
    }

    /// Resets a provider may send in `resetWindow` before the connection is given up.
    static let maximumResets = 2_000
    static let resetWindow = TimeAmount.milliseconds(10)

    /// The HTTP/2 handler of a connection to a provider. swift-nio-http2's defaults guard a server
    /// against a client's rapid resets (CVE-2023-44487): more than 200 RST_STREAM in 30 s and it
    /// closes the connection (GOAWAY ENHANCE_YOUR_CALM). A server may reset every stream it answers
    /// before reading the request body (nginx's `return 200`: the complete response, then RST_STREAM
    /// NO_ERROR), which at any real rate tore the connection down every 200 requests, failed the
    /// requests in flight on it and made a new TLS connection. A client keeps the guard against a
    /// flood, at a rate no server answers requests: `maximumResets` in `resetWindow` (200,000/s).
    ///
    /// Header blocks are checked by the connection handler (`HTTP2HeaderCheck`, the same RFC 9113
    /// rules in one pass), so swift-nio-http2's own header block validation is off.
    static func makeHTTP2Handler(_ settings: HTTP2Settings) -> NIOHTTP2Handler {
        var connection = NIOHTTP2Handler.ConnectionConfiguration()
        connection.initialSettings = settings
        connection.headerBlockValidation = .disabled
        var stream = NIOHTTP2Handler.StreamConfiguration()
        stream.streamResetFrameRateLimit.maximumCount = maximumResets
        stream.streamResetFrameRateLimit.windowLength = resetWindow
        return NIOHTTP2Handler(mode: .client, connectionConfiguration: connection, streamConfiguration: stream)
    }

    private func connect(id: Int, eventLoop: any EventLoop, addresses: [SocketAddress]?) {
        let handler = self.makeHandler(id: id, eventLoop: eventLoop)
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
        if let proxy = self.configuration.proxy.proxy(forHost: self.target.host, port: self.target.port, scheme: self.target.scheme) {
            self.connectThroughProxy(
                proxy, id: id, handler: handler, eventLoop: eventLoop, addresses: addresses, serverHostname: serverHostname,
                settings: settings)
            return
        }
        // TCP_NODELAY at the TCP level: `socketOption(.tcp_nodelay)` is SOL_SOCKET option 1, SO_DEBUG,
        // which needs CAP_NET_ADMIN and failed every connect of a non-root process (EACCES).
        var bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(self.configuration.connectTimeout)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    if case .success(let context) = sslContext {
                        try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverHostname))
                    }
                    try sync.addHandler(Self.makeHTTP2Handler(settings))
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
                self.run(self.state.withLockedValue { $0.channelConnected(connectionID: id, channel: channel) })
            case .failure(let error):
                handler.connectFailed(error)
            }
        }
    }

    /// TCP to the proxy, `CONNECT` to the target (the first checked address when given, else the
    /// host name), then TLS (SNI and the certificate check still on the host name) and HTTP/2 once the
    /// tunnel is up. The handler's connect timeout covers all of it. A failure names the proxy.
    private func connectThroughProxy(
        _ proxy: ProxyEndpoint, id: Int, handler: HTTP2ClientConnectionHandler, eventLoop: any EventLoop,
        addresses: [SocketAddress]?, serverHostname: String?, settings: HTTP2Settings
    ) {
        let sslContext = self.sslContext
        let tunnelHost = addresses?.first?.ipAddress ?? self.target.host
        let targetPort = self.target.port
        let deadline = NIODeadline.now() + self.configuration.connectTimeout
        ClientBootstrap(group: eventLoop)
            .connectTimeout(self.configuration.connectTimeout)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let tunnel = try ProxyTunnel.addHandlers(
                        to: channel, proxy: proxy, targetHost: tunnelHost, targetPort: targetPort, deadline: deadline)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    tunnel.whenComplete { result in
                        switch result {
                        case .success:
                            do {
                                // TLS first: the HTTP/2 handler writes its preface as soon as it is added.
                                let sync = channel.pipeline.syncOperations
                                let http2 = Self.makeHTTP2Handler(settings)
                                if case .success(let context) = sslContext {
                                    let tls = try NIOSSLClientHandler(context: context, serverHostname: serverHostname)
                                    try sync.addHandler(tls, position: .first)
                                    try sync.addHandler(http2, position: .after(tls))
                                } else {
                                    try sync.addHandler(http2, position: .first)
                                }
                            } catch {
                                handler.proxyFailed(HTTP2PoolError.connectFailed("proxy \(proxy): \(error)"))
                                channel.close(promise: nil)
                            }
                        case .failure(let error):
                            handler.proxyFailed(HTTP2PoolError.connectFailed("\(error)"))
                        }
                    }
                }
            }
            .connect(host: proxy.host, port: proxy.port).whenComplete { result in
                switch result {
                case .success(let channel):
                    self.run(self.state.withLockedValue { $0.channelConnected(connectionID: id, channel: channel) })
                case .failure(let error):
                    handler.connectFailed(HTTP2PoolError.connectFailed("proxy \(proxy): cannot connect: \(error)"))
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
        let action = self.state.withLockedValue {
            $0.connectionEstablished(connectionID: handler.id, connection: handler, maxStreams: maxStreams)
        }
        if action.close.contains(where: { $0 === handler }) {
            handler.shutdown()
            return []
        }
        self.logger.debug(
            "HTTP/2 connection ready",
            metadata: ["connection": "\(handler.id)", "maxConcurrentStreams": "\(maxStreams)"]
        )
        return self.runReturningStarts(action)
    }

    func maxStreamsChanged(connectionID: Int, maxStreams: Int) -> [(HTTP2ClientConnectionHandler, PendingRequest)] {
        self.runReturningStarts(self.state.withLockedValue { $0.maxStreamsChanged(connectionID: connectionID, maxStreams: maxStreams) })
    }

    /// A stream of this connection finished (hot path). Returns requests to start.
    func streamReleased(connectionID: Int) -> [(HTTP2ClientConnectionHandler, PendingRequest)] {
        let action = self.state.withLockedValue { $0.streamFinished(connectionID: connectionID) }
        // Mostly only `start`; connections to open when the first stream of one tells its limit.
        if action.connect.isEmpty && action.scheduleBackoffTimer == nil && action.scheduleIdleTimer == nil { return action.start }
        return self.runReturningStarts(action)
    }

    /// GOAWAY received (or the connection retires itself): take no new streams, maybe open a replacement.
    func connectionDraining(connectionID: Int, released: Int) {
        let now = NIODeadline.now()
        self.run(self.state.withLockedValue { $0.connectionDraining(connectionID: connectionID, released: released, now: now) })
    }

    /// Put a request that was not sent (or refused by the server unprocessed) back at the front of the queue.
    func requeue(_ request: PendingRequest, error: HTTP2PoolError) {
        let now = NIODeadline.now()
        self.run(self.state.withLockedValue { $0.requeue(request, error: error, now: now) })
    }

    func connectionClosed(connectionID: Int, wasReady: Bool, error: HTTP2PoolError) {
        let now = NIODeadline.now()
        let random = Double.random(in: 0...1)
        self.run(
            self.state.withLockedValue {
                $0.connectionClosed(connectionID: connectionID, wasReady: wasReady, error: error, now: now, random: random)
            }
        )
    }

    // MARK: shutdown

    func shutdown() async {
        let (pending, entries) = self.state.withLockedValue { $0.shutdown() }
        for p in pending {
            p.promise.fail(HTTP2PoolError.shutdown)
        }
        var closeFutures: [EventLoopFuture<Void>] = []
        for e in entries {
            if let h = e.connection {
                h.eventLoop.execute { h.shutdown() }
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
