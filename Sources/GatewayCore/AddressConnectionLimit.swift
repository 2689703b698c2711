import Logging
import NIOConcurrencyHelpers
import NIOCore

/// `core.max_connections_per_address`: how many connections one client IP address may hold open on
/// one port. Past it, a new connection from that address is closed as it is accepted (nothing is
/// read from it), so one client cannot take the slots of `core.max_connections` that everyone
/// shares; the refusals are logged at most once a minute with their count.
///
/// The address is the peer's IP as the socket reports it (an IPv4 client of a dual-stack listener is
/// its `::ffff:a.b.c.d` form); a connection without an IP address (a Unix socket) is not counted.
public final class AddressConnectionLimit: Sendable {
    public let maxPerAddress: Int
    /// Names the port in the log line ("HTTP port", "gRPC port").
    let portName: String
    let logger: Logger
    /// How often, at most, refused connections are logged (with the count refused since).
    public static let warningInterval = TimeAmount.seconds(60)

    private struct State {
        var open: [String: Int] = [:]
        var refusals = RefusalLog()
    }
    private let state = NIOLockedValueBox(State())

    public init(maxPerAddress: Int, portName: String, logger: Logger) {
        self.maxPerAddress = maxPerAddress
        self.portName = portName
        self.logger = logger
    }

    /// Counts `channel` against its address until it closes and answers true, or answers false when
    /// its address already holds `maxPerAddress` connections (the caller closes it, uncounted).
    public func admit(_ channel: any Channel) -> Bool {
        guard let address = channel.remoteAddress?.ipAddress else { return true }
        let now = NIODeadline.now()
        // (admitted, refused connections to report now: the first refusal, then at most one warning
        // a minute counting those refused since the last one).
        let (admitted, report) = state.withLockedValue { s -> (Bool, Int?) in
            let open = s.open[address, default: 0]
            if open < maxPerAddress {
                s.open[address] = open + 1
                return (true, nil)
            }
            return (false, s.refusals.refused(now: now, interval: Self.warningInterval))
        }
        guard admitted else {
            if let refused = report {
                logger.warning(
                    "\(portName): \(address) holds core.max_connections_per_address (\(maxPerAddress)) connections, its new ones are closed at once (\(refused) refused since the last warning; logged at most once a minute)"
                )
            }
            return false
        }
        channel.closeFuture.whenComplete { [self] _ in
            self.state.withLockedValue { s in
                let left = s.open[address, default: 1] - 1
                s.open[address] = left > 0 ? left : nil
            }
        }
        return true
    }
}

/// When to log refused connections: the first refusal at once, then at most once per interval,
/// with the count refused since the last line (a flood must not flood the log too).
public struct RefusalLog: Sendable {
    var unlogged = 0
    var last: NIODeadline?

    public init() {}

    /// Counts one refusal; the number to report now, or nil to stay quiet.
    public mutating func refused(now: NIODeadline, interval: TimeAmount) -> Int? {
        unlogged += 1
        if let last, now - last < interval { return nil }
        defer {
            unlogged = 0
            last = now
        }
        return unlogged
    }
}
