import GatewayCore
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import NIOCore
import ServiceLifecycle

/// The HTTP way in: gorush's REST API on Hummingbird, a thin adapter over `Gateway.accept`.
extension Gateway {
    /// Builds the Hummingbird application serving the gorush API: plain HTTP/1.1, or with `core.ssl`
    /// HTTP/1.1 and HTTP/2 over TLS (ALPN). `core.address: ""` listens on IPv6 and IPv4 like gorush's `:port`.
    /// - Parameter extraServices: further ingest servers (gRPC), stopped after the HTTP server (see `services(extra:)`).
    public func makeApplication(
        extraServices: [any Service] = [], onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let readTimeout = TimeAmount.seconds(Int64(settings.readTimeout))
        let maxBody = settings.maxBodyBytes
        let idle = Duration.seconds(settings.idleTimeout)
        // Slow and many clients: a connection that sends nothing is closed after core.idle_timeout,
        // a request must arrive whole within core.read_timeout, past core.max_connections new
        // connections wait in the listen backlog until one closes (Hummingbird's own limiter), and
        // past core.max_connections_per_address one address's new connections are closed at once.
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [RequestReadTimeoutHandler(timeout: readTimeout, maxBodyBytes: maxBody)],
            idleTimeout: .seconds(Int64(settings.idleTimeout)))
        // core.max_connections_per_address: one client's connections past it are closed as they are
        // accepted, so they never wait in the backlog ahead of other clients (health checks, scrapers).
        let perAddress = AddressConnectionLimit(maxPerAddress: settings.maxConnectionsPerAddress, portName: "HTTP port", logger: logger)
        let server: HTTPServerBuilder
        if let tls = settings.tls {
            let configuration = HTTP2UpgradeChannel.Configuration(
                idleTimeout: idle,
                streamConfiguration: .init(additionalChannelHandlers: [
                    RequestReadTimeoutHandler(timeout: readTimeout, maxBodyBytes: maxBody)
                ]))
            server = HTTPServerBuilder { responder in
                addressLimited(
                    try HTTP2UpgradeChannel(tlsConfiguration: tls.configuration, configuration: configuration, responder: responder),
                    limit: perAddress)
            }
        } else {
            server = HTTPServerBuilder { responder in
                addressLimited(HTTP1Channel(responder: responder, configuration: http1), limit: perAddress)
            }
        }
        var app = Application(
            router: makeRouter(),
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(Self.bindHost(settings.address), port: settings.port),
                serverName: "pushgate/\(PushgateVersion.version)",
                backlog: 1024,
                availableConnectionsDelegate: .maximum(settings.maxConnections, logger: logger)
            ),
            onServerRunning: onServerRunning,
            logger: logger
        )
        app.addServices(services(extra: extraServices))
        return app
    }
}
