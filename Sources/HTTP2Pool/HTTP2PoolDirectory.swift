import NIOConcurrencyHelpers

/// Every open HTTP/2 pool of the process (APNs, FCM, HMS, Web Push origins), for the status page
/// and `/metrics`. Held weakly: a pool leaves when it shuts down or is freed, so listing pools
/// keeps none alive.
public enum HTTP2PoolDirectory {
    /// One pool's figures.
    public struct Entry: Sendable, Equatable {
        /// `scheme://host[:port]`.
        public var origin: String
        /// What it is for (provider, environment, app, key).
        public var label: HTTP2PoolLabel
        /// Connections established and not yet closed.
        public var activeConnections: Int
        /// Connections ever established by the pool.
        public var connectionsOpened: Int
        /// Requests waiting for a stream.
        public var pendingRequests: Int
    }

    private struct WeakPool: @unchecked Sendable {
        weak var pool: HTTP2ConnectionPool?
    }

    private static let pools = NIOLockedValueBox<[ObjectIdentifier: WeakPool]>([:])

    static func add(_ pool: HTTP2ConnectionPool) {
        pools.withLockedValue { $0[ObjectIdentifier(pool)] = WeakPool(pool: pool) }
    }

    static func remove(_ pool: HTTP2ConnectionPool) {
        remove(ObjectIdentifier(pool))
    }

    static func remove(_ id: ObjectIdentifier) {
        _ = pools.withLockedValue { $0.removeValue(forKey: id) }
    }

    /// The pools open now, by origin (pools freed meanwhile are dropped from the list).
    public static var snapshot: [Entry] {
        let live: [HTTP2ConnectionPool] = pools.withLockedValue { p in
            p = p.filter { $0.value.pool != nil }
            return p.values.compactMap(\.pool)
        }
        return live.map { pool in
            let s = pool.core.stats
            return Entry(
                origin: pool.target.origin, label: pool.label, activeConnections: s.activeConnections, connectionsOpened: s.connectionsOpened,
                pendingRequests: s.pending)
        }.sorted { ($0.origin, $0.label.description, $0.activeConnections) < ($1.origin, $1.label.description, $1.activeConnections) }
    }
}
