import GRPCCore
import GRPCNIOTransportHTTP2Posix
import GatewayCore
@_exported import GorushRPCConfig
import Logging
import Metrics
import NIOCore
import ServiceLifecycle

/// gorush's gRPC ingest (`grpc.enabled`, `grpc.port`): `proto.Gorush/Send` and `proto.Health/Check`
/// of gorush.proto over HTTP/2, TLS with `core.ssl`'s certificate when it is on. Runs beside the
/// HTTP server as one of the gateway's services (`Gateway.makeApplication(extraServices:)`): it
/// answers NOT_SERVING from the start of a graceful shutdown and stops after the workers drained.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
public struct GorushRPCServer: Service, IngestProtocol {
    public static let configKey = "grpc.port"

    let server: GRPCServer<HTTP2ServerTransport.Posix>
    let transport: HTTP2ServerTransport.Posix
    let logger: Logger
    let port: Int

    /// The gRPC server of `gateway`'s configuration (`grpc:`); nil when `grpc.enabled` is false.
    /// Throws a `ConfigError` naming the key for settings that cannot work.
    public static func make(gateway: Gateway) throws -> GorushRPCServer? {
        let grpc = try settings(gateway.raw, gateway: gateway)
        register(gateway: gateway)
        guard let port = grpc.port else { return nil }
        return try GorushRPCServer(gateway: gateway, grpc: grpc, port: port)
    }

    /// `grpc:` of `raw`, checked against the gateway's HTTP port.
    public static func settings(_ raw: RawConfig, gateway: Gateway) throws -> GRPCSettings {
        try GRPCSettings(raw.section("grpc"), corePort: gateway.settings.port)
    }

    /// A reload checks `grpc:`: a value that cannot work refuses the reload, as at start (a changed
    /// key takes effect at a restart, which the reload's log line says, as for every core key).
    static func register(gateway: Gateway) {
        gateway.register(
            AdapterSection(
                name: "grpc", show: { _ in nil },
                reload: { raw, _ in
                    _ = try settings(raw, gateway: gateway)
                    return AdapterReload(apply: {})
                }))
    }

    /// The services to run among the gateway's: this server, or none.
    public static func services(gateway: Gateway) throws -> [any Service] {
        try make(gateway: gateway).map { [$0] } ?? []
    }

    init(gateway: Gateway, grpc: GRPCSettings, port: Int) throws {
        let settings = gateway.settings
        let security: HTTP2ServerTransport.Posix.TransportSecurity
        if let tls = settings.tls {
            security = .tls(certificateChain: [.bytes(tls.certificatePEM, format: .pem)], privateKey: .bytes(tls.keyPEM, format: .pem))
        } else {
            security = .plaintext
        }
        // core.max_connections and core.max_connections_per_address (their own counts on this port)
        // and core.read_timeout (per stream), as on HTTP; each stream's key and message bytes.
        let limits = RPCIngestLimits(gateway: gateway, grpc: grpc)
        let config = HTTP2ServerTransport.Posix.Config.defaults { c in
            // grpc.max_message_bytes: RPCStreamAdmissionHandler refuses a larger message on its prefix;
            // grpc-swift's own limit (also after decompression) is the same.
            c.rpc.maxRequestPayloadSize = grpc.maxMessageBytes
            c.connection.maxIdleTime = .seconds(settings.idleTimeout)
            // grpc-swift's default is no limit: each open stream may hold a message up to the size above.
            c.http2.maxConcurrentStreams = 100
            c.channelDebuggingCallbacks = limits.callbacks
        }
        transport = HTTP2ServerTransport.Posix(
            address: try Self.address(host: Gateway.bindHost(settings.address), port: port), transportSecurity: security, config: config)
        server = GRPCServer(
            transport: transport,
            services: [GorushSendService(gateway: gateway), GorushHealthService(gateway: gateway)],
            interceptors: [RequestMetricsInterceptor()])
        logger = gateway.logger
        self.port = port
    }

    /// `core.address` as a socket address: an IP literal as it is, a host name resolved.
    static func address(host: String, port: Int) throws -> GRPCNIOTransportCore.SocketAddress {
        if host.contains(":") { return .ipv6(host: host, port: port) }
        let resolved = try NIOCore.SocketAddress.makeAddressResolvingHost(host, port: port)
        switch resolved {
        case .v6: return .ipv6(host: resolved.ipAddress ?? host, port: port)
        default: return .ipv4(host: resolved.ipAddress ?? host, port: port)
        }
    }

    /// The port the server listens on (the bound one when `grpc.port` is 0); waits until it listens.
    public var listeningPort: Int {
        get async throws {
            let address = try await transport.listeningAddress
            return address.ipv4?.port ?? address.ipv6?.port ?? 0
        }
    }

    public func run() async throws {
        let logger = self.logger
        let transport = self.transport
        let server = self.server
        let announce = Task {
            guard let address = try? await transport.listeningAddress else { return }
            let shown = address.ipv4.map { "\($0.host):\($0.port)" } ?? address.ipv6.map { "[\($0.host)]:\($0.port)" } ?? "\(address)"
            logger.info("gRPC server is running on \(shown) (proto.Gorush, proto.Health)")
        }
        defer { announce.cancel() }
        let port = self.port
        do {
            try await withGracefulShutdownHandler {
                try await server.serve()
            } onGracefulShutdown: {
                server.beginGracefulShutdown()
            }
        } catch {
            // A port in use (or not allowed) stops the gateway with one line naming the key.
            let cause = (error as? RPCError)?.cause ?? (error as? RuntimeError)?.cause ?? error
            throw GorushRPCServerError(description: "grpc.port \(port): the gRPC server stopped: \(cause)")
        }
    }
}

/// Why the gRPC server stopped (printed by `pushgate serve` as it exits).
public struct GorushRPCServerError: Error, CustomStringConvertible {
    public var description: String
}

/// `pushgate_grpc_requests_total{method,code}`: every RPC by its full method name and gRPC status name.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
struct RequestMetricsInterceptor: ServerInterceptor {
    static let label = "pushgate_grpc_requests_total"

    func intercept<Input: Sendable, Output: Sendable>(
        request: StreamingServerRequest<Input>, context: ServerContext,
        next: @Sendable (StreamingServerRequest<Input>, ServerContext) async throws -> StreamingServerResponse<Output>
    ) async throws -> StreamingServerResponse<Output> {
        let method = context.descriptor.fullyQualifiedMethod
        do {
            let response = try await next(request, context)
            switch response.accepted {
            case .success: Self.count(method, "OK")
            case .failure(let e): Self.count(method, Self.name(e.code))
            }
            return response
        } catch let e as RPCError {
            Self.count(method, Self.name(e.code))
            throw e
        } catch {
            Self.count(method, "UNKNOWN")
            throw error
        }
    }

    static func count(_ method: String, _ code: String) {
        Counter(label: label, dimensions: [("method", method), ("code", code)]).increment()
    }

    /// The canonical status names (`grpc/status.h`).
    static func name(_ code: RPCError.Code) -> String {
        let names = [
            "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
            "UNAUTHENTICATED",
        ]
        return names.indices.contains(code.rawValue) ? names[code.rawValue] : "UNKNOWN"
    }
}
