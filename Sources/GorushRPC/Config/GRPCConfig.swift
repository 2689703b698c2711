import ProviderKit

/// The `grpc:` section: gorush's gRPC ingest (`proto.Gorush/Send`, `proto.Health/Check`), keys and defaults as gorush's.
public enum GRPCConfig {
    public static let enabled = Setting<Bool>(
        "enabled", false, doc: "gorush's gRPC ingest (`proto.Gorush/Send`, `proto.Health/Check`) on its own port, TLS when `core.ssl` (docs/grpc.md)")
    /// gorush writes it as a string ("9000"); a number is read either way.
    public static let port = Setting<Int>(
        "port", 9000, range: 0...65535, doc: "port of the gRPC ingest")
    /// The largest request message (protobuf bytes) a stream may announce; larger ones are refused
    /// (RESOURCE_EXHAUSTED) before any of it is held. 1 MiB holds a `Send` of 1,000 FCM tokens
    /// (about 160 bytes each) and a 256 KiB message.
    public static let maxMessageBytes = Setting<Int>(
        "max_message_bytes", 1 << 20, range: 1024...(64 << 20),
        doc: "(new) the largest `Send` message; a stream announcing more is refused (`RESOURCE_EXHAUSTED`) before any of it is held")
    /// Bytes of request messages not yet complete that one connection, and all together, may hold;
    /// a stream that would go past either is refused (RESOURCE_EXHAUSTED).
    public static let maxPendingBytesPerConnection = Setting<Int>(
        "max_pending_bytes_per_connection", 4 << 20, range: 1029...(1 << 30),
        doc:
            "(new) bytes of request messages not yet complete that one connection / the whole gRPC port may hold; a stream going past either is refused (`RESOURCE_EXHAUSTED`)"
    )
    public static let maxPendingBytes = Setting<Int>(
        "max_pending_bytes", 64 << 20, range: 1029...(1 << 34),
        doc:
            "(new) bytes of request messages not yet complete that one connection / the whole gRPC port may hold; a stream going past either is refused (`RESOURCE_EXHAUSTED`)"
    )

    public static let section = ConfigSection(
        "grpc", keys: [enabled.key, port.key, maxMessageBytes.key, maxPendingBytesPerConnection.key, maxPendingBytes.key])
}

/// gRPC's settings as `grpc:` gives them (`GRPCConfig`), checked against each other and the HTTP port.
public struct GRPCSettings: Sendable, Equatable {
    /// `grpc.enabled` / `grpc.port`: gorush's gRPC ingest (nil: off).
    public var port: Int?
    /// `grpc.max_message_bytes`: the largest request message a gRPC stream may announce.
    public var maxMessageBytes: Int
    /// `grpc.max_pending_bytes_per_connection` / `grpc.max_pending_bytes`: request bytes the gRPC
    /// port holds for messages not yet complete, per connection and in all.
    public var maxPendingBytesPerConnection: Int
    public var maxPendingBytes: Int

    /// Reads `section` (`grpc`); `corePort` is `core.port`, which gRPC may not share. Throws a
    /// `ConfigError` naming the key.
    public init(_ section: SectionValues, corePort: Int) throws {
        port = section[GRPCConfig.enabled] ? section[GRPCConfig.port] : nil
        if let port, port != 0, port == corePort {
            throw ConfigError(key: section.path(GRPCConfig.port), problem: "\(port) is also core.port; gRPC needs a port of its own")
        }
        maxMessageBytes = section[GRPCConfig.maxMessageBytes]
        maxPendingBytesPerConnection = section[GRPCConfig.maxPendingBytesPerConnection]
        maxPendingBytes = section[GRPCConfig.maxPendingBytes]
        // A message of the largest size (and its 5-byte gRPC prefix) must fit in each budget.
        guard maxPendingBytesPerConnection >= maxMessageBytes + 5 else {
            throw ConfigError(
                key: section.path(GRPCConfig.maxPendingBytesPerConnection),
                problem:
                    "\(maxPendingBytesPerConnection) is less than grpc.max_message_bytes (\(maxMessageBytes)) + 5: no message of the largest size could arrive"
            )
        }
        guard maxPendingBytes >= maxPendingBytesPerConnection else {
            throw ConfigError(
                key: section.path(GRPCConfig.maxPendingBytes),
                problem: "\(maxPendingBytes) is less than grpc.max_pending_bytes_per_connection (\(maxPendingBytesPerConnection))")
        }
    }
}
