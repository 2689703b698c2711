import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Name resolution for the SSRF guards (Web Push endpoints, WNS channel hosts), on its own small
/// thread pool.
///
/// `getaddrinfo` blocks a thread for as long as the DNS server takes. It never runs on
/// `NIOThreadPool.singleton` (sqlite-nio runs every SQLite statement there: a slow or hostile DNS
/// server must not stall the queue), nor on an event loop. Bounds:
/// - `threads` lookups run at once; at most `maxLookups` are running or waiting (further lookups fail
///   at once with a transient error rather than queueing without limit);
/// - concurrent lookups of one host share one `getaddrinfo` call;
/// - a caller waits at most `timeout`; a lookup that outlives it keeps its slot until it returns, so
///   stuck lookups cannot pile up behind the bound.
public final class DNSResolver: Sendable {
    /// Its own pool (never `NIOThreadPool.singleton`).
    public let threadPool: NIOThreadPool
    let eventLoopGroup: any EventLoopGroup
    let maxLookups: Int
    let timeout: TimeAmount
    /// The blocking lookup (getaddrinfo; replaceable for tests).
    let blockingLookup: @Sendable (String, Int) throws -> [[UInt8]]
    private let state = NIOLockedValueBox<(inFlight: [String: EventLoopFuture<[[UInt8]]>], count: Int)>(([:], 0))
    private let isShutDown = NIOLockedValueBox(false)

    public init(
        threads: Int = 2, maxLookups: Int = 64, timeout: TimeAmount = .seconds(10), eventLoopGroup: any EventLoopGroup,
        blockingLookup: @escaping @Sendable (String, Int) throws -> [[UInt8]] = { try HostResolver.resolve($0, port: $1) }
    ) {
        self.blockingLookup = blockingLookup
        self.threadPool = NIOThreadPool(numberOfThreads: max(1, threads))
        self.threadPool.start()
        self.eventLoopGroup = eventLoopGroup
        self.maxLookups = max(1, maxLookups)
        self.timeout = timeout
    }

    /// Lookups currently running or waiting for a thread.
    public var lookupsInFlight: Int { state.withLockedValue { $0.count } }

    public func resolve(_ host: String, port: Int) async throws -> [[UInt8]] {
        try await lookup(host, port: port).get()
    }

    public func lookup(_ host: String, port: Int) -> EventLoopFuture<[[UInt8]]> {
        let loop = eventLoopGroup.next()
        let key = "\(host):\(port)"
        enum Decision { case join(EventLoopFuture<[[UInt8]]>), start(EventLoopPromise<[[UInt8]]>), busy }
        let decision = state.withLockedValue { s -> Decision in
            if let f = s.inFlight[key] { return .join(f) }
            guard s.count < maxLookups else { return .busy }
            let p = loop.makePromise(of: [[UInt8]].self)
            s.inFlight[key] = p.futureResult
            s.count += 1
            return .start(p)
        }
        let shared: EventLoopFuture<[[UInt8]]>
        switch decision {
        case .busy:
            return loop.makeFailedFuture(HostResolver.Failure(description: "cannot resolve \(host): more than \(maxLookups) DNS lookups in flight"))
        case .join(let f):
            shared = f
        case .start(let p):
            shared = p.futureResult
            threadPool.runIfActive(eventLoop: loop) { [blockingLookup] in try blockingLookup(host, port) }
                .whenComplete { result in
                    self.state.withLockedValue { s in
                        s.inFlight[key] = nil
                        s.count -= 1
                    }
                    p.completeWith(result)
                }
        }
        // Each caller gets its own deadline.
        let mine = loop.makePromise(of: [[UInt8]].self)
        let done = NIOLockedValueBox(false)
        let timeout = self.timeout
        let timer = loop.scheduleTask(in: timeout) {
            guard
                done.withLockedValue({ d in
                    defer { d = true }
                    return !d
                })
            else { return }
            mine.fail(HostResolver.Failure(description: "cannot resolve \(host): timed out after \(timeout.nanoseconds / 1_000_000) ms"))
        }
        shared.hop(to: loop).whenComplete { result in
            timer.cancel()
            guard
                done.withLockedValue({ d in
                    defer { d = true }
                    return !d
                })
            else { return }
            mine.completeWith(result)
        }
        return mine.futureResult
    }

    public func shutdown() async {
        let already = isShutDown.withLockedValue { s -> Bool in
            defer { s = true }
            return s
        }
        if already { return }
        try? await threadPool.shutdownGracefully()
    }
}
