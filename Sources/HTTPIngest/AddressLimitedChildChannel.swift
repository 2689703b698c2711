import GatewayCore
import HummingbirdCore
import Logging
import NIOCore

/// Hummingbird's child channel (HTTP/1.1, or HTTP/2 over TLS) behind `AddressConnectionLimit`: a
/// connection over its address's cap is closed before any handler is added to it. Hummingbird has
/// a global limit only (`availableConnectionsDelegate`, which holds further connections in the
/// listen backlog), so one address's idle connections would otherwise keep every other client out.
struct AddressLimitedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let limit: AddressConnectionLimit

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard limit.admit(channel) else {
            // A failed initializer makes NIO drop the connection without registering it: close it here.
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(AddressConnectionLimitReached())
        }
        return base.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// `base` behind `limit`, for `HTTPServerBuilder`'s existential child channel.
func addressLimited(_ base: any ServerChildChannel, limit: AddressConnectionLimit) -> any ServerChildChannel {
    func wrap<C: ServerChildChannel>(_ c: C) -> any ServerChildChannel { AddressLimitedChildChannel<C>(base: c, limit: limit) }
    return wrap(base)
}

struct AddressConnectionLimitReached: Error, CustomStringConvertible {
    var description: String { "core.max_connections_per_address reached" }
}
