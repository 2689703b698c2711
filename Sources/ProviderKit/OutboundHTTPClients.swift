import AsyncHTTPClient
import HTTP2Pool
import NIOCore

/// The shared HTTP/1.1 clients (OAuth token requests, the feedback hook), one per route: a direct
/// client, and one per configured proxy (`core.http_proxy`, `HTTPS_PROXY` / `HTTP_PROXY`).
///
/// AsyncHTTPClient takes one proxy per client and has no per-host exception, so `NO_PROXY` is applied
/// here: `client(for:)` picks the client by the target URL.
public final class OutboundHTTPClients: Sendable {
    public let proxy: OutboundProxy
    /// Used for targets no proxy applies to.
    public let direct: HTTPClient
    private let proxied: [ProxyEndpoint: HTTPClient]

    /// `configuration` is used for every client; the proxied ones get its `proxy` set.
    public init(proxy: OutboundProxy, configuration: HTTPClient.Configuration, eventLoopGroup: any EventLoopGroup) {
        self.proxy = proxy
        self.direct = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: configuration)
        var proxied: [ProxyEndpoint: HTTPClient] = [:]
        for endpoint in [proxy.httpsProxy, proxy.httpProxy].compactMap({ $0 }) where proxied[endpoint] == nil {
            var c = configuration
            c.proxy = .server(
                host: endpoint.host, port: endpoint.port,
                authorization: endpoint.username.map { .basic(username: $0, password: endpoint.password ?? "") })
            proxied[endpoint] = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: c)
        }
        self.proxied = proxied
    }

    /// The client for `url` (http or https): through the proxy that applies to its host, else direct.
    public func client(for url: String) -> HTTPClient {
        guard let target = HTTP2Target(url: url),
            let endpoint = self.proxy.proxy(forHost: target.host, port: target.port, scheme: target.scheme),
            let client = self.proxied[endpoint]
        else { return self.direct }
        return client
    }

    /// Closes every client (the direct one last).
    public func shutdown() async {
        for c in self.proxied.values { try? await c.shutdown() }
        try? await self.direct.shutdown()
    }
}
