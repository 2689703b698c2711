import Logging
import NIOCore
import NIOSSL

/// An HTTP/2 origin: scheme + host + port.
public struct HTTP2Target: Hashable, Sendable, CustomStringConvertible {
    /// "https" or "http" (h2c with prior knowledge for "http").
    public var scheme: String
    public var host: String
    public var port: Int

    public init(scheme: String, host: String, port: Int) {
        self.scheme = scheme.lowercased()
        self.host = host
        self.port = port
    }

    /// Parses the origin out of a URL: "https://localhost:8443/any/path" -> https, localhost, 8443.
    /// Default ports are 443 (https) and 80 (http). IPv6 literals in brackets are accepted.
    public init?(url: String) {
        let lowered = url.lowercased()
        let scheme: String
        if lowered.hasPrefix("https://") {
            scheme = "https"
        } else if lowered.hasPrefix("http://") {
            scheme = "http"
        } else {
            return nil
        }
        var rest = url.dropFirst(scheme.count + 3)
        if let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            rest = rest[rest.startIndex..<end]
        }
        // Strip userinfo.
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        var host: Substring
        var portString: Substring? = nil
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portString = after.dropFirst() } else if !after.isEmpty { return nil }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[rest.startIndex..<colon]
            portString = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { return nil }
        let port: Int
        if let portString, !portString.isEmpty {
            guard let p = Int(portString), p > 0, p < 65536 else { return nil }
            port = p
        } else {
            port = scheme == "https" ? 443 : 80
        }
        self.init(scheme: scheme, host: String(host), port: port)
    }

    /// The path of a URL without its query, fragment and trailing slashes ("" for none): the prefix
    /// a provider's own paths go under ("https://host/base/" -> "/base").
    public static func pathPrefix(of url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return "" }
        let rest = url[schemeEnd.upperBound...]
        guard let slash = rest.firstIndex(of: "/") else { return "" }
        var prefix = rest[slash...]
        if let q = prefix.firstIndex(where: { $0 == "?" || $0 == "#" }) { prefix = prefix[..<q] }
        while prefix.hasSuffix("/") { prefix.removeLast() }
        return String(prefix)
    }

    var isTLS: Bool { self.scheme == "https" }
    var defaultPort: Int { self.isTLS ? 443 : 80 }

    /// Host as it appears in a URL / :authority (IPv6 literals bracketed).
    var hostForAuthority: String { self.host.contains(":") ? "[\(self.host)]" : self.host }

    /// Value for the `:authority` pseudo-header ("host" or "host:port").
    public var authority: String {
        self.port == self.defaultPort ? self.hostForAuthority : "\(self.hostForAuthority):\(self.port)"
    }

    /// "https://host[:port]" (port omitted when it is the scheme's default).
    public var origin: String { "\(self.scheme)://\(self.authority)" }

    public var description: String { self.origin }
}

/// What a pool is for, telling apart pools to one origin (APNs production and sandbox on one mock,
/// one app's pool and another's, one signing key's and another's, the channel management pools):
/// the provider, its environment, the app and the key id, each empty when it does not apply.
public struct HTTP2PoolLabel: Sendable, Hashable, CustomStringConvertible {
    /// `apns`, `fcm`, `hms`, `webpush`, …: the provider's name.
    public var provider: String
    /// APNs: `production`, `sandbox`, `production channels`, `sandbox channels`.
    public var environment: String
    /// The app (`apps[].id`, or `default`).
    public var app: String
    /// The APNs token key's id (`ios.key_id`, `ios.keys[].key_id`).
    public var keyID: String

    public init(provider: String = "", environment: String = "", app: String = "", keyID: String = "") {
        self.provider = provider
        self.environment = environment
        self.app = app
        self.keyID = keyID
    }

    /// `apns sandbox, app chat, key ABC123DEFG`.
    public var description: String {
        var parts: [String] = []
        let head = [provider, environment].filter { !$0.isEmpty }.joined(separator: " ")
        if !head.isEmpty { parts.append(head) }
        if !app.isEmpty { parts.append("app \(app)") }
        if !keyID.isEmpty { parts.append("key \(keyID)") }
        return parts.joined(separator: ", ")
    }
}

public struct HTTP2PoolConfiguration: Sendable {
    /// Long-lived multiplexed connections per target, spread over the event loops: opened as soon
    /// as requests overlap and kept while idle (the floor).
    public var connectionsPerTarget: Int = 2
    /// The ceiling: while requests wait for a stream and every connection has all the streams its
    /// server allows (SETTINGS_MAX_CONCURRENT_STREAMS) in use, more connections open, up to this many
    /// (at least `connectionsPerTarget`).
    public var maxConnectionsPerTarget: Int = 32
    /// TLS configuration; the pool forces ALPN to ["h2"].
    public var tlsConfiguration: TLSConfiguration = .makeClientConfiguration()
    /// TCP connect + TLS handshake + HTTP/2 preface (first SETTINGS) must finish within this.
    public var connectTimeout: TimeAmount = .seconds(10)
    /// Per request, measured from `execute` (time waiting for a stream included).
    public var requestTimeout: TimeAmount = .seconds(30)
    /// Requests waiting for a free stream; beyond this `execute` fails fast with `.tooManyPending`.
    public var maxPendingRequests: Int = 100_000
    public var reconnectBackoffInitial: TimeAmount = .milliseconds(100)
    public var reconnectBackoffMax: TimeAmount = .seconds(10)
    /// Close a connection beyond `connectionsPerTarget` that had no stream for this long (nil = keep
    /// them open). The floor stays open.
    public var idleTimeout: TimeAmount? = .seconds(60)
    /// Response body bytes kept per request; the rest is not buffered: the stream is reset (CANCEL)
    /// and the response completes with the first `maxResponseBodyBytes` bytes and `bodyTruncated`.
    /// Push services answer with short JSON; a multi-MB answer is hostile or broken.
    public var maxResponseBodyBytes: Int = 64 * 1024
    /// Response header fields kept per request (pseudo-headers excluded); further fields are dropped.
    /// The header block as a whole is already bounded by swift-nio-http2 through the
    /// SETTINGS_MAX_HEADER_LIST_SIZE (64 KiB) this client advertises.
    public var maxResponseHeaderFields: Int = 100
    /// ALPN protocols offered in the TLS handshake. The pool always requires "h2" to be negotiated;
    /// offering "http/1.1" too lets an HTTP/1.1-only server finish the handshake (some refuse a
    /// ClientHello without a common protocol), so the caller learns `.alpnNotNegotiated` cleanly.
    public var offeredALPN: [String] = ["h2"]
    /// Outbound HTTP proxy: a connection whose target it applies to is a TCP connection to the proxy,
    /// `CONNECT host:port`, then TLS and HTTP/2 through the tunnel. With `HTTP2Request.connectAddresses`
    /// the CONNECT names the first of those (checked) addresses, so the proxy never resolves the name.
    public var proxy: OutboundProxy = .direct
    /// What the pools made with this configuration are for (the status page and `/api/stat/live`
    /// list it beside the origin: several pools may reach one origin).
    public var label = HTTP2PoolLabel()

    public init() {}

    /// Presents this client certificate (the leaf first, then intermediates) and key on every TLS
    /// connection of the pool (mutual TLS, e.g. APNs certificate-based trust).
    public mutating func presentClientCertificate(chain: [NIOSSLCertificate], privateKey: NIOSSLPrivateKey) {
        self.tlsConfiguration.certificateChain = chain.map { .certificate($0) }
        self.tlsConfiguration.privateKey = .privateKey(privateKey)
    }

    /// Client TLS configuration trusting the system roots plus extra PEM roots (the gateway's `core.ca_file`).
    /// Each string may hold one or several PEM certificates.
    public static func tls(extraRootsPEM: [String]) throws -> TLSConfiguration {
        var config = TLSConfiguration.makeClientConfiguration()
        var certs: [NIOSSLCertificate] = []
        for pem in extraRootsPEM {
            do {
                certs.append(contentsOf: try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))
            } catch {
                throw HTTP2PoolError.tls("invalid PEM root certificate: \(error)")
            }
        }
        if !certs.isEmpty {
            config.additionalTrustRoots = [.certificates(certs)]
        }
        return config
    }
}

public struct HTTP2Request: Sendable {
    public var method: String
    public var path: String
    /// Lowercase names. The pool adds :method :scheme :authority :path (and content-length when a body is set).
    public var headers: [(String, String)]
    public var body: ByteBuffer?
    /// When set, a connection opened for this request goes to these addresses (tried in order, with
    /// NIO's Happy Eyeballs) instead of resolving the target's host; the host still gives TLS SNI,
    /// `:authority` and the certificate name check. Lets a caller that checked a DNS answer (the Web
    /// Push SSRF guard) connect to exactly the checked addresses. An existing connection of the pool
    /// (made for an earlier request, to addresses checked then) may carry the request.
    public var connectAddresses: [SocketAddress]?
    /// Names (`:path` included) whose value is new on every request, such as `apns-id` or a device
    /// token in the path: HPACK-encoded without indexing (RFC 7541 6.2.2). Indexed, each would take a
    /// dynamic-table entry that is never used again and push out the repeated ones (`authorization`,
    /// `apns-topic`), which then travel and are Huffman-coded in full again.
    public var uniqueHeaders: [String] = []

    public init(
        method: String = "POST", path: String, headers: [(String, String)] = [], body: ByteBuffer? = nil,
        connectAddresses: [SocketAddress]? = nil
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.connectAddresses = connectAddresses
    }
}

public struct HTTP2Response: Sendable {
    public var status: Int
    /// Response headers without pseudo-headers (trailers, if any, are appended).
    public var headers: [(String, String)]
    public var body: ByteBuffer
    /// True when the body was longer than `maxResponseBodyBytes`: `body` holds its beginning only.
    public var bodyTruncated: Bool

    public init(status: Int, headers: [(String, String)], body: ByteBuffer, bodyTruncated: Bool = false) {
        self.status = status
        self.headers = headers
        self.body = body
        self.bodyTruncated = bodyTruncated
    }

    /// Case-insensitive lookup, first value.
    public func header(_ name: String) -> String? {
        for (n, v) in self.headers where n == name {
            return v
        }
        let lower = name.lowercased()
        for (n, v) in self.headers where n.lowercased() == lower {
            return v
        }
        return nil
    }
}

/// The one error of the HTTP/2 pool: a typed `code` to branch on, a `detail` for humans.
///
/// Shaped like async-http-client's `HTTPClientError` (a public struct wrapping a code enum, so new
/// codes are not a breaking change). Callers match on `code` (or compare with the static values),
/// never on the text.
public struct HTTP2PoolError: Error, Sendable, CustomStringConvertible, Hashable {
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// TCP connect failed / refused / timed out, or the HTTP/2 preface was not completed.
        case connectFailed
        /// The connection closed before the response was complete (the server may have processed it).
        case connectionClosed
        /// The server sent GOAWAY and the stream was not processed (surfaced only after the pool's
        /// transparent re-queues are exhausted).
        case goaway
        /// The server reset the stream (RST_STREAM) with an error code other than REFUSED_STREAM.
        case streamReset
        /// The server refused the stream unprocessed (RST_STREAM REFUSED_STREAM), re-queues exhausted.
        case streamRefused
        /// `requestTimeout` elapsed (queue time included).
        case timeout
        /// More than `maxPendingRequests` waiting for a stream.
        case tooManyPending
        /// The pool was shut down.
        case shutdown
        /// TLS handshake / certificate verification failure, or an invalid TLS configuration.
        case tls
        /// TLS worked but the server did not negotiate "h2" via ALPN (an HTTP/1.1-only origin); the
        /// request was never sent.
        case alpnNotNegotiated
        /// The request has a header field or request line HTTP/2 forbids (RFC 9113 §8.2-8.3): it was
        /// never sent. `detail` names the field.
        case invalidRequest
        /// The response's header block is malformed (RFC 9113 §8.2-8.3): the stream was reset
        /// (PROTOCOL_ERROR) and its answer not read. `detail` says what was wrong.
        case malformedResponse
    }

    public let code: Code
    /// Human-readable detail (an HTTP/2 error code name, the underlying error); "" when none.
    public let detail: String

    public init(_ code: Code, _ detail: String = "") {
        self.code = code
        self.detail = detail
    }

    public static func connectFailed(_ detail: String) -> Self { Self(.connectFailed, detail) }
    public static let connectionClosed = Self(.connectionClosed)
    public static func goaway(_ errorCode: String) -> Self { Self(.goaway, errorCode) }
    /// A reset with this RFC 9113 error code name; REFUSED_STREAM becomes `.streamRefused`.
    public static func streamReset(_ errorCode: String) -> Self {
        Self(errorCode == "REFUSED_STREAM" ? .streamRefused : .streamReset, errorCode)
    }
    public static let timeout = Self(.timeout)
    public static let tooManyPending = Self(.tooManyPending)
    public static let shutdown = Self(.shutdown)
    public static func tls(_ detail: String) -> Self { Self(.tls, detail) }
    public static func alpnNotNegotiated(_ detail: String) -> Self { Self(.alpnNotNegotiated, detail) }
    public static func invalidRequest(_ detail: String) -> Self { Self(.invalidRequest, detail) }
    public static func malformedResponse(_ detail: String) -> Self { Self(.malformedResponse, detail) }

    /// True when the server provably did not process the request: refused before processing
    /// (GOAWAY above last-stream-id, REFUSED_STREAM), or no connection was made. The pool itself
    /// re-queues refused streams; this tells a caller what a further attempt risks.
    public var wasNotProcessed: Bool {
        switch self.code {
        case .connectFailed, .goaway, .streamRefused, .tooManyPending, .shutdown, .tls, .alpnNotNegotiated, .invalidRequest: return true
        case .connectionClosed, .streamReset, .timeout, .malformedResponse: return false
        }
    }

    /// True when a later attempt on another connection may succeed: refused unprocessed (GOAWAY,
    /// REFUSED_STREAM), the connect failed, or the connection closed before a response.
    public var isRetryable: Bool {
        switch self.code {
        case .connectFailed, .connectionClosed, .goaway, .streamRefused: return true
        case .streamReset, .timeout, .tooManyPending, .shutdown, .tls, .alpnNotNegotiated, .invalidRequest, .malformedResponse: return false
        }
    }

    /// Lets `catch HTTP2PoolError.timeout` match a thrown error of that code and detail.
    public static func ~= (pattern: HTTP2PoolError, error: any Error) -> Bool {
        (error as? HTTP2PoolError) == pattern
    }

    public var description: String {
        switch self.code {
        case .connectFailed: return "HTTP/2 connect failed: \(self.detail)"
        case .connectionClosed: return "HTTP/2 connection closed before the response was complete"
        case .goaway: return "HTTP/2 GOAWAY: \(self.detail)"
        case .streamReset, .streamRefused: return "HTTP/2 stream reset by peer: \(self.detail)"
        case .timeout: return "HTTP/2 request timed out"
        case .tooManyPending: return "HTTP/2 pool: too many pending requests"
        case .shutdown: return "HTTP/2 pool is shut down"
        case .tls, .alpnNotNegotiated: return "TLS error: \(self.detail)"
        case .invalidRequest: return "HTTP/2 request not sent: \(self.detail)"
        case .malformedResponse: return "HTTP/2 malformed response: \(self.detail)"
        }
    }
}
