import Foundation

/// One queue engine (memory, SQLite, PostgreSQL): the queue the workers drain, where delivery
/// status is read, the counters (seeded from and saved to a store by durable engines) and the
/// readers it adds to the delivery event stream.
public protocol QueueEngine: Sendable {
    var driver: any QueueDriver { get }
    /// `GET /api/push/{notif_id}`; nil when the engine keeps no delivery records.
    var statusSource: (any DeliveryStatusSource)? { get }
    var stats: Stats { get }
    /// Readers of the delivery event stream owned by the engine (the memory engine's status records).
    var sinks: [any DeliveryEventSink] { get }
    /// Where `Idempotency-Key`s are kept.
    var idempotency: any IdempotencyStore { get }
}

/// The memory engine (`queue.engine: memory`): the in-memory queue, status records fed by the
/// event stream, counters that start at zero.
public struct MemoryEngine: QueueEngine {
    public let queue: MemoryQueue
    public let status: MemoryStatusStore
    public let stats = Stats()
    public let keys = MemoryIdempotencyStore()

    /// - Parameter dedupTTL: `core.idempotency_ttl`, how long a `dedup_key` holds.
    public init(capacity: Int, statusRetention: TimeInterval = 86_400, statusMaxRecords: Int = 1_000_000, dedupTTL: TimeInterval = 86_400) {
        queue = MemoryQueue(capacity: capacity, dedupTTL: dedupTTL)
        status = MemoryStatusStore(retention: statusRetention, maxRecords: statusMaxRecords)
    }

    public var driver: any QueueDriver { queue }
    public var statusSource: (any DeliveryStatusSource)? { status }
    public var sinks: [any DeliveryEventSink] { [status] }
    public var idempotency: any IdempotencyStore { keys }
}
