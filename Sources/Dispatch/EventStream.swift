import Foundation
import Logging
import NIOConcurrencyHelpers
import PushgateCore

/// Where the delivery event stream is kept: the outbox of the webhook and the retention of
/// `GET /api/events` (SQLite and PostgreSQL: a table of the queue's store; memory: a bounded buffer).
public protocol EventStore: Sendable {
    /// Stores `events` in order, each with an id above every earlier one, keeping at most the store's
    /// bound (the oldest removed first). Returns them as stored and how many of the removed ones had
    /// not been posted (`postedSeq`).
    func append(_ events: [PushEvent]) async throws -> (stored: [StoredEvent], removedUnposted: Int)
    /// Up to `limit` events with an id above `after`, oldest first; only `app`'s when given.
    func events(after: Int64, app: String?, limit: Int) async throws -> [StoredEvent]
    /// The webhook's cursor: every event up to it was taken by the receiver.
    func postedSeq() async throws -> Int64
    func setPosted(_ seq: Int64) async throws
    /// The newest stored id (the cursor's start when none is stored).
    func lastSeq() async throws -> Int64
    func close() async
    /// Other processes store events here too (a PostgreSQL store shared by several gateways): live
    /// clients read the store, not only this process's batches.
    var isShared: Bool { get }
}

extension EventStore {
    public var isShared: Bool { false }
}

/// The memory engine's events: a bounded buffer, lost on restart. Ids start at the microseconds since
/// 1970 of the start, so a client resuming with an id of the previous run misses nothing newer.
public final class MemoryEventStore: EventStore {
    struct State {
        var events: [StoredEvent] = []
        /// Index of the oldest event in `events` (those before it are removed; compacted in batches).
        var head = 0
        var nextSeq: Int64
        var posted: Int64
    }

    private let state: NIOLockedValueBox<State>
    public let maxStored: Int

    public init(maxStored: Int, now: Date = Date()) {
        self.maxStored = max(1, maxStored)
        let start = Int64(max(0, min(now.timeIntervalSince1970, 1e11)) * 1_000_000)
        state = NIOLockedValueBox(State(nextSeq: start + 1, posted: start))
    }

    public func append(_ events: [PushEvent]) async throws -> (stored: [StoredEvent], removedUnposted: Int) {
        state.withLockedValue { s -> (stored: [StoredEvent], removedUnposted: Int) in
            var out: [StoredEvent] = []
            out.reserveCapacity(events.count)
            for e in events {
                out.append(StoredEvent(seq: s.nextSeq, app: e.app, body: e.body))
                s.nextSeq += 1
            }
            s.events += out
            var removed = 0
            let over = s.events.count - s.head - maxStored
            if over > 0 {
                for e in s.events[s.head..<(s.head + over)] where e.seq > s.posted { removed += 1 }
                s.head += over
            }
            if s.head > 4096, s.head * 2 > s.events.count {
                s.events.removeFirst(s.head)
                s.head = 0
            }
            return (out, removed)
        }
    }

    public func events(after: Int64, app: String?, limit: Int) async throws -> [StoredEvent] {
        state.withLockedValue { s -> [StoredEvent] in
            // Binary search for the first event above `after` (ids increase along the buffer).
            var lo = s.head
            var hi = s.events.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if s.events[mid].seq <= after { lo = mid + 1 } else { hi = mid }
            }
            var out: [StoredEvent] = []
            var i = lo
            while i < s.events.count, out.count < limit {
                if app == nil || s.events[i].app == app { out.append(s.events[i]) }
                i += 1
            }
            return out
        }
    }

    public func postedSeq() async throws -> Int64 { state.withLockedValue { $0.posted } }
    public func setPosted(_ seq: Int64) async throws { state.withLockedValue { $0.posted = max($0.posted, seq) } }
    public func lastSeq() async throws -> Int64 { state.withLockedValue { $0.nextSeq - 1 } }
    public func close() async {}

    /// Events kept now.
    public var count: Int { state.withLockedValue { $0.events.count - $0.head } }
}

/// The stream's counters (`pushgate_events_*` on `/metrics`).
public struct EventCounters: Sendable, Equatable {
    public var recorded: Int64 = 0
    public var posted: Int64 = 0
    public var dropped: Int64 = 0
    public var postFailures: Int64 = 0
    public var pending: Int64 = 0
    public var sseClients: Int64 = 0
    public var sseDisconnectedSlow: Int64 = 0
}

/// The delivery event stream: a reader of `DeliveryEvent`s that turns each transition into a
/// `PushEvent`, stores them in batches off the workers' path (the writer task, `run`), then hands
/// the stored events to the live `GET /api/events` clients and wakes the webhook poster.
public final class EventStream: DeliveryEventSink {
    public let store: any EventStore
    let mapper: PushEventMapper
    /// Only these types are recorded (nil: all).
    let types: Set<PushEventType>?
    let logger: Logger
    let now: @Sendable () -> Date
    /// Events recorded and not yet stored, at most `maxStaged` (past it the oldest are dropped and counted).
    private let staged = NIOLockedValueBox<[PushEvent]>([])
    let maxStaged: Int
    let writeBatch: Int
    private let signal: AsyncStream<Void>.Continuation
    private let signals: AsyncStream<Void>
    private let subscribers = NIOLockedValueBox<[UInt64: EventSubscriber]>([:])
    private let nextSubscriber = NIOLockedValueBox<UInt64>(1)
    public let maxClients: Int
    public let clientBuffer: Int
    let counters = NIOLockedValueBox(EventCounters())
    /// Whether removed unposted events count as dropped (a webhook is configured).
    let countsDrops: Bool
    /// Called after each stored batch (the webhook poster's wake).
    private let observers = NIOLockedValueBox<[@Sendable () -> Void]>([])
    private let finished = NIOLockedValueBox(false)
    /// The writer stored its last batch (`finish()` was called): nothing more will be stored.
    public var isFinished: Bool { finished.withLockedValue { $0 } }
    /// When the last "dropped" line was logged (one a second at most), and the drops since.
    private let dropLog = NIOLockedValueBox<(last: Double, unlogged: Int)>((0, 0))

    public init(
        store: any EventStore, hideToken: Bool, platformRules: [Platform: PlatformRules] = [:], types: Set<PushEventType>? = nil,
        countsDrops: Bool, maxClients: Int = 100,
        clientBuffer: Int = 10_000, maxStaged: Int = 100_000, writeBatch: Int = 2_000, logger: Logger = Logger(label: "pushgate.events"),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.store = store
        self.mapper = PushEventMapper(hideToken: hideToken, platformRules: platformRules)
        self.types = types
        self.countsDrops = countsDrops
        self.maxClients = max(0, maxClients)
        self.clientBuffer = max(1, clientBuffer)
        self.maxStaged = max(1, maxStaged)
        self.writeBatch = max(1, writeBatch)
        self.logger = logger
        self.now = now
        (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    public var snapshot: EventCounters { counters.withLockedValue { $0 } }

    public func record(_ event: borrowing DeliveryEvent) {
        var events = mapper.events(event, now: now())
        if let types { events.removeAll { !types.contains($0.type) } }
        guard !events.isEmpty else { return }
        let dropped = staged.withLockedValue { s -> Int in
            s += events
            let over = s.count - maxStaged
            if over > 0 { s.removeFirst(over) }
            return max(0, over)
        }
        counters.withLockedValue { $0.recorded += Int64(events.count) }
        if dropped > 0 { self.dropped(dropped, why: "the event store is behind") }
        signal.yield()
    }

    /// Events lost: counted, and logged (a line a second at most, with the number since the last line).
    func dropped(_ n: Int, why: String) {
        let total = counters.withLockedValue { c -> Int64 in
            c.dropped += Int64(n)
            return c.dropped
        }
        let t = now().timeIntervalSince1970
        let since = dropLog.withLockedValue { l -> Int? in
            l.unlogged += n
            guard t - l.last >= 1 else { return nil }
            l.last = t
            defer { l.unlogged = 0 }
            return l.unlogged
        }
        if let since { logger.error("delivery events dropped: \(why)", metadata: ["dropped": "\(since)", "dropped_total": "\(total)"]) }
    }

    /// Called after every stored batch (and once the writer stops).
    public func observe(_ body: @escaping @Sendable () -> Void) { observers.withLockedValue { $0.append(body) } }

    /// Stores what is recorded until `finish()` (then stores what is left) or cancellation.
    public func run() async {
        for await _ in signals { await flush() }
        await flush()
        finished.withLockedValue { $0 = true }
        for s in subscribers.withLockedValue({ Array($0.values) }) { s.close() }
        for o in observers.withLockedValue({ $0 }) { o() }
    }

    /// Stores every staged event (in batches of `writeBatch`); a store error keeps them staged and
    /// is retried with backoff while the stream runs.
    func flush() async {
        var delay = 0.05
        while true {
            let batch = staged.withLockedValue { s -> [PushEvent] in
                let n = min(s.count, writeBatch)
                let b = Array(s.prefix(n))
                s.removeFirst(n)
                return b
            }
            if batch.isEmpty { return }
            do {
                let (stored, removed) = try await store.append(batch)
                if removed > 0, countsDrops { dropped(removed, why: "over events.max_stored before the webhook took them") }
                publish(stored)
                delay = 0.05
            } catch {
                staged.withLockedValue { s in
                    s.insert(contentsOf: batch, at: 0)
                    let over = s.count - maxStaged
                    if over > 0 { s.removeFirst(over) }
                }
                logger.error("storing delivery events failed: \(error)")
                if Task.isCancelled { return }
                try? await Task.sleep(for: .seconds(delay))
                delay = min(delay * 2, 5)
            }
        }
    }

    private func publish(_ stored: [StoredEvent]) {
        guard !stored.isEmpty else { return }
        for s in subscribers.withLockedValue({ Array($0.values) }) { s.offer(stored) }
        for o in observers.withLockedValue({ $0 }) { o() }
    }

    /// Stops taking events: `run` stores what is staged and returns.
    public func finish() { signal.finish() }

    /// A live client of `GET /api/events` (`app`: only its events), or nil past `maxClients`.
    public func subscribe(app: String?) -> EventSubscriber? {
        let id = nextSubscriber.withLockedValue { n -> UInt64 in
            defer { n += 1 }
            return n
        }
        let sub = EventSubscriber(id: id, app: app, capacity: clientBuffer)
        let ok = subscribers.withLockedValue { s -> Bool in
            guard s.count < maxClients else { return false }
            s[id] = sub
            return true
        }
        guard ok else { return nil }
        counters.withLockedValue { $0.sseClients += 1 }
        return sub
    }

    public func unsubscribe(_ sub: EventSubscriber) {
        let removed = subscribers.withLockedValue { $0.removeValue(forKey: sub.id) } != nil
        sub.close()
        counters.withLockedValue { c in
            if removed { c.sseClients -= 1 }
            if sub.overflowed { c.sseDisconnectedSlow += 1 }
        }
    }

    /// `/metrics` lines (Prometheus text).
    public var metricsText: String {
        let c = snapshot
        func series(_ name: String, _ help: String, _ type: String, _ v: Int64) -> String {
            "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(v)\n"
        }
        return series("pushgate_events_recorded_total", "Delivery events recorded", "counter", c.recorded)
            + series("pushgate_events_posted_total", "Delivery events the webhook receiver took (2xx)", "counter", c.posted)
            + series("pushgate_events_pending", "Delivery events stored and not yet taken by the webhook receiver", "gauge", c.pending)
            + series(
                "pushgate_events_dropped_total", "Delivery events lost before the webhook took them (events.max_stored, store behind)", "counter",
                c.dropped)
            + series("pushgate_events_post_failures_total", "Webhook POSTs that failed (no answer, or not 2xx)", "counter", c.postFailures)
            + series("pushgate_events_sse_clients", "Clients connected to GET /api/events", "gauge", c.sseClients)
            + series(
                "pushgate_events_sse_slow_disconnects_total", "GET /api/events clients disconnected for falling behind", "counter",
                c.sseDisconnectedSlow)
    }

    /// Updates the webhook's counters.
    public func countPost(events: Int, pending: Int64) {
        counters.withLockedValue {
            $0.posted += Int64(events)
            $0.pending = max(0, pending)
        }
    }

    public func countPostFailure() { counters.withLockedValue { $0.postFailures += 1 } }
    public func setPending(_ pending: Int64) { counters.withLockedValue { $0.pending = max(0, pending) } }
}

/// One live `GET /api/events` client: the stored events for it, bounded by `capacity` (a client that
/// falls further behind is disconnected: `overflowed`), and the wake of its writer.
public final class EventSubscriber: Sendable {
    public let id: UInt64
    public let app: String?
    let capacity: Int
    private let state = NIOLockedValueBox<(events: [StoredEvent], overflowed: Bool, closed: Bool)>(([], false, false))
    private let continuation: AsyncStream<Void>.Continuation
    /// Yields when events arrive, on `wake()` and ends when the client is closed.
    public let wakes: AsyncStream<Void>

    init(id: UInt64, app: String?, capacity: Int) {
        self.id = id
        self.app = app
        self.capacity = capacity
        (wakes, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func offer(_ events: [StoredEvent]) {
        let mine = app == nil ? events : events.filter { $0.app == app }
        guard !mine.isEmpty else { return }
        let close = state.withLockedValue { s -> Bool in
            guard !s.closed, !s.overflowed else { return false }
            // A client that took everything before is never cut off by one large batch; one that
            // left events untaken and would hold more than `capacity` is (memory: capacity + a batch).
            if !s.events.isEmpty, s.events.count + mine.count > capacity {
                s.overflowed = true
                s.events = []
                return true
            }
            s.events += mine
            return false
        }
        if close { continuation.finish() } else { continuation.yield() }
    }

    /// Takes the events received so far.
    public func take() -> [StoredEvent] {
        state.withLockedValue { s in
            defer { s.events = [] }
            return s.events
        }
    }

    /// Fell behind by more than `capacity` events: disconnected.
    public var overflowed: Bool { state.withLockedValue { $0.overflowed } }

    /// Wakes the writer (the heartbeat).
    public func wake() { continuation.yield() }

    public func close() {
        state.withLockedValue { $0.closed = true }
        continuation.finish()
    }
}
