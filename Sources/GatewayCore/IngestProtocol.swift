import ServiceLifecycle

/// A way in beside the HTTP API (gRPC's gorush.proto today): an adapter that decodes its wire
/// format, authenticates its caller with `Gateway.authenticate(presentedKey:)` before reading a
/// body, and hands each request to `Gateway.accept`. Adding one is its folder (a target depending on
/// `GatewayCore`) and its line in the executable's list (`Serve.ingestProtocols` in `Sources/pushgate`).
///
/// Its services run among the gateway's (`Gateway.services(extra:)`): started after the workers,
/// they keep answering (refusing new work as the gateway drains) until the workers are done.
public protocol IngestProtocol {
    /// The configuration key a failure to start names (`grpc.port`).
    static var configKey: String { get }
    /// The services serving it for `gateway`; none when its configuration turns it off.
    static func services(gateway: Gateway) throws -> [any Service]
}
