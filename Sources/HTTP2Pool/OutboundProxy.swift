import Foundation
import PushgateCore

/// An HTTP proxy that outbound connections tunnel through with `CONNECT host:port`.
///
/// `description` is `host:port` only: the credentials never reach a log line or an error text.
public struct ProxyEndpoint: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public var host: String
    public var port: Int
    /// Percent-decoded user info of the proxy URL (`http://user:pass@proxy:3128`), if any.
    public var username: String?
    public var password: String?

    public init(host: String, port: Int, username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// `host:port` (IPv6 literals bracketed), without credentials.
    public var description: String { "\(self.host.contains(":") ? "[\(self.host)]" : self.host):\(self.port)" }
    /// As `description`: a dump of a configuration never shows the password.
    public var debugDescription: String { self.description }

    /// `Basic base64(user:password)` when the URL had user info (RFC 7617), for `Proxy-Authorization`.
    public var basicAuthorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    /// Parses a proxy URL as Go's `httpproxy` does: `http://[user[:password]@]host[:port][/]`, or a bare
    /// `host[:port]` (http assumed). Port 80 when absent. Only `http` proxies are supported: the
    /// tunnel is a plain-text CONNECT (`https://` proxies, `socks5://` are refused, not ignored).
    public static func parse(_ text: String) -> Result<ProxyEndpoint, ProxyURLProblem> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return .failure(.init("is empty")) }
        var rest = Substring(trimmed)
        if let sep = rest.range(of: "://") {
            let scheme = rest[..<sep.lowerBound].lowercased()
            guard scheme == "http" else {
                return .failure(.init("scheme \"\(scheme)\" is not supported (an http:// proxy that accepts CONNECT)"))
            }
            rest = rest[sep.upperBound...]
        }
        // Authority ends at the first '/', '?' or '#'.
        if let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { rest = rest[..<end] }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userinfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let u = percentDecode(parts[0]), parts.count == 1 || percentDecode(parts[1]) != nil else {
                return .failure(.init("has a malformed user info (bad percent-encoding)"))
            }
            username = u
            password = parts.count == 2 ? percentDecode(parts[1]) : nil
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(.init("has an unterminated IPv6 literal")) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                portText = after.dropFirst()
            } else if !after.isEmpty {
                return .failure(.init("has text after the IPv6 literal"))
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { return .failure(.init("has no host")) }
        guard !host.contains(where: { $0 == " " || $0 == "@" || $0 == "[" || $0 == "]" }) else {
            return .failure(.init("has an invalid host"))
        }
        var port = 80
        if let portText, !portText.isEmpty {
            guard portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }), let p = Int(portText), (1...65535).contains(p)
            else {
                return .failure(.init("has an invalid port (1-65535)"))
            }
            port = p
        }
        return .success(ProxyEndpoint(host: String(host).lowercased(), port: port, username: username, password: password))
    }

    static func percentDecode(_ s: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(s.utf8.count)
        var it = s.utf8.makeIterator()
        while let b = it.next() {
            if b == UInt8(ascii: "%") {
                guard let h = it.next(), let l = it.next(), let hv = Hex.nibble(h), let lv = Hex.nibble(l) else { return nil }
                bytes.append(hv << 4 | lv)
            } else {
                bytes.append(b)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

/// Why a proxy URL was refused (the caller names the key or environment variable).
public struct ProxyURLProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var problem: String
    public init(_ problem: String) { self.problem = problem }
    public var description: String { self.problem }
}

/// A proxy setting that cannot be used: `key` is the config key or environment variable.
public struct OutboundProxyError: Error, Sendable, Equatable, CustomStringConvertible {
    public var key: String
    public var problem: String
    public init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }
    public var description: String { "\(self.key): \(self.problem)" }
}

/// Which proxy (if any) an outbound connection goes through: resolved once from `core.http_proxy`
/// and the environment, then asked per target. Pure (no I/O).
///
/// - `core.http_proxy` set: that proxy for every target, http and https (gorush applies it with Go's
///   `http.ProxyURL`), except the hosts `NO_PROXY` names.
/// - Otherwise Go's `http.ProxyFromEnvironment` (golang.org/x/net/http/httpproxy): `HTTPS_PROXY` /
///   `https_proxy` for https targets, `HTTP_PROXY` / `http_proxy` for http targets (the upper-case name
///   wins), never for `localhost` or a loopback IP literal, and not for the hosts `NO_PROXY` /
///   `no_proxy` names.
/// - `NO_PROXY`: comma-separated; `*` (everything), an IP (`10.1.2.3`, `[::1]:8443`) or CIDR
///   (`10.0.0.0/8`), a domain (`example.com` matches it and its subdomains; `.example.com` and
///   `*.example.com` only the subdomains), each optionally with `:port`. Domains never match IP literals.
public struct OutboundProxy: Sendable, Hashable, CustomStringConvertible {
    /// For https targets.
    public private(set) var httpsProxy: ProxyEndpoint?
    /// For http targets.
    public private(set) var httpProxy: ProxyEndpoint?
    /// Where the proxy came from (`core.http_proxy`, `HTTPS_PROXY` ...), for the start-up log.
    public private(set) var source: String
    /// Go's environment rule: no proxy for localhost / loopback literals. An explicit proxy has no such exception.
    private var exemptLoopback: Bool
    private var noProxy: [NoProxyRule]
    private var noProxyAll: Bool

    /// No proxy at all.
    public static let direct = OutboundProxy(httpsProxy: nil, httpProxy: nil, source: "", exemptLoopback: false, noProxy: "")

    private init(httpsProxy: ProxyEndpoint?, httpProxy: ProxyEndpoint?, source: String, exemptLoopback: Bool, noProxy: String) {
        self.httpsProxy = httpsProxy
        self.httpProxy = httpProxy
        self.source = source
        self.exemptLoopback = exemptLoopback
        let (rules, all) = Self.parseNoProxy(noProxy)
        self.noProxy = rules
        self.noProxyAll = all
    }

    /// One proxy for every target (tests, embedding), with an optional `NO_PROXY` list.
    public init(proxy: ProxyEndpoint, noProxy: String = "") {
        self.init(httpsProxy: proxy, httpProxy: proxy, source: "explicit", exemptLoopback: false, noProxy: noProxy)
    }

    /// Resolves `core.http_proxy` (`configured`, "" when unset; `configuredKey` names it in errors)
    /// and the environment.
    public init(configured: String, configuredKey: String = "core.http_proxy", environment: [String: String]) throws(OutboundProxyError) {
        func env(_ names: String...) -> (name: String, value: String)? {
            for n in names { if let v = environment[n], !v.isEmpty { return (n, v) } }
            return nil
        }
        func endpoint(_ text: String, key: String) throws(OutboundProxyError) -> ProxyEndpoint {
            switch ProxyEndpoint.parse(text) {
            case .success(let e): return e
            case .failure(let p): throw OutboundProxyError(key: key, problem: "proxy URL \(p.problem)")
            }
        }
        let noProxy = env("NO_PROXY", "no_proxy")?.value ?? ""
        if !configured.trimmingCharacters(in: .whitespaces).isEmpty {
            let p = try endpoint(configured, key: configuredKey)
            self.init(httpsProxy: p, httpProxy: p, source: configuredKey, exemptLoopback: false, noProxy: noProxy)
            return
        }
        var https: ProxyEndpoint?
        var http: ProxyEndpoint?
        var sources: [String] = []
        if let (name, value) = env("HTTPS_PROXY", "https_proxy") {
            https = try endpoint(value, key: name)
            sources.append(name)
        }
        if let (name, value) = env("HTTP_PROXY", "http_proxy") {
            http = try endpoint(value, key: name)
            sources.append(name)
        }
        self.init(httpsProxy: https, httpProxy: http, source: sources.joined(separator: ", "), exemptLoopback: true, noProxy: noProxy)
    }

    /// `https via host:port, http via host:port` (or `direct`), without credentials.
    public var description: String {
        let routes = [("https", self.httpsProxy), ("http", self.httpProxy)].compactMap { scheme, p in p.map { "\(scheme) via \($0)" } }
        return routes.isEmpty ? "direct" : routes.joined(separator: ", ")
    }

    /// True when `NO_PROXY` names any host (or `*`).
    public var hasExceptions: Bool { self.noProxyAll || !self.noProxy.isEmpty }

    /// True when no target can go through a proxy.
    public var isDirect: Bool { self.httpsProxy == nil && self.httpProxy == nil }

    /// The proxy for a connection to `host:port` (a name or an IP literal, IPv6 with or without
    /// brackets) of `scheme` (`https` / `http`), or nil to connect directly.
    public func proxy(forHost host: String, port: Int, scheme: String) -> ProxyEndpoint? {
        let proxy: ProxyEndpoint?
        switch scheme.lowercased() {
        case "https": proxy = self.httpsProxy
        case "http": proxy = self.httpProxy
        default: proxy = nil
        }
        guard let proxy else { return nil }
        return self.useProxy(host: host, port: port) ? proxy : nil
    }

    /// Go's `useProxy`: false when the target is exempt.
    func useProxy(host rawHost: String, port: Int) -> Bool {
        var host = rawHost.trimmingCharacters(in: .whitespaces).lowercased()
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") && !host.contains(":") { host = String(host.dropLast()) }
        let ip = IPLiteral.parse(host)
        if self.exemptLoopback {
            if host == "localhost" { return false }
            if let ip, ip.isLoopback { return false }
        }
        if self.noProxyAll { return false }
        let portText = String(port)
        for rule in self.noProxy where rule.matches(host: host, port: portText, ip: ip) {
            return false
        }
        return true
    }

    enum NoProxyRule: Hashable {
        case cidr(IPLiteral, prefix: Int)
        case ip(IPLiteral, port: String)
        /// `host` starts with "."; `matchHost`: the entry had no leading dot, so the bare domain matches too.
        case domain(host: String, port: String, matchHost: Bool)

        func matches(host: String, port: String, ip: IPLiteral?) -> Bool {
            switch self {
            case .cidr(let net, let prefix):
                guard let ip else { return false }
                return net.contains(ip, prefix: prefix)
            case .ip(let rule, let rulePort):
                guard let ip, ip == rule else { return false }
                return rulePort.isEmpty || rulePort == port
            case .domain(let suffix, let rulePort, let matchHost):
                guard ip == nil else { return false }
                guard host.hasSuffix(suffix) || (matchHost && host == suffix.dropFirst()) else { return false }
                return rulePort.isEmpty || rulePort == port
            }
        }
    }

    /// Go's `httpproxy` `config.init` parsing of NO_PROXY.
    static func parseNoProxy(_ text: String) -> (rules: [NoProxyRule], all: Bool) {
        var rules: [NoProxyRule] = []
        for raw in text.split(separator: ",") {
            let p = raw.trimmingCharacters(in: .whitespaces).lowercased()
            if p.isEmpty { continue }
            if p == "*" { return ([], true) }
            // IPv4/CIDR, IPv6/CIDR
            if let slash = p.firstIndex(of: "/") {
                let addr = String(p[..<slash])
                let bits = p[p.index(after: slash)...]
                if let ip = IPLiteral.parse(addr), !addr.hasPrefix("["), let n = Int(bits), bits.allSatisfy({ $0.isNumber }),
                    (0...(ip.bytes.count * 8)).contains(n)
                {
                    rules.append(.cidr(ip, prefix: n))
                }
                continue
            }
            // IPv4:port, [IPv6]:port, host:port
            var phost = p
            var pport = ""
            if let (h, port) = Self.splitHostPort(p) {
                if h.isEmpty { continue }
                phost = h
                pport = port
            }
            if let ip = IPLiteral.parse(phost) {
                rules.append(.ip(ip, port: pport))
                continue
            }
            if phost.isEmpty { continue }
            if phost.hasPrefix("*.") { phost = String(phost.dropFirst()) }
            var matchHost = false
            if !phost.hasPrefix(".") {
                matchHost = true
                phost = "." + phost
            }
            rules.append(.domain(host: phost, port: pport, matchHost: matchHost))
        }
        return (rules, false)
    }

    /// Go's `net.SplitHostPort` for the forms NO_PROXY uses: `host:port`, `[v6]:port`; nil when `s`
    /// has no port (a bare host or a bare IPv6 literal).
    static func splitHostPort(_ s: String) -> (String, String)? {
        if s.hasPrefix("[") {
            guard let close = s.firstIndex(of: "]") else { return nil }
            let after = s[s.index(after: close)...]
            guard after.hasPrefix(":") else { return nil }
            return (String(s[s.index(after: s.startIndex)..<close]), String(after.dropFirst()))
        }
        guard let colon = s.lastIndex(of: ":"), s.firstIndex(of: ":") == colon else { return nil }
        return (String(s[..<colon]), String(s[s.index(after: colon)...]))
    }
}

/// A parsed IPv4 (4 bytes) or IPv6 (16 bytes) literal; IPv4-mapped IPv6 is kept as IPv4 (Go's `net.IP.Equal`).
struct IPLiteral: Hashable {
    var bytes: [UInt8]

    static func parse(_ literal: String) -> IPLiteral? {
        var s = literal
        if s.hasPrefix("[") && s.hasSuffix("]") { s = String(s.dropFirst().dropLast()) }
        if let pct = s.firstIndex(of: "%") { s = String(s[..<pct]) }
        guard !s.isEmpty else { return nil }
        if !s.contains(":") {
            var a = in_addr()
            guard inet_pton(AF_INET, s, &a) == 1 else { return nil }
            return IPLiteral(bytes: withUnsafeBytes(of: &a) { Array($0) })
        }
        var a6 = in6_addr()
        guard inet_pton(AF_INET6, s, &a6) == 1 else { return nil }
        let b = withUnsafeBytes(of: &a6) { Array($0) }
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff { return IPLiteral(bytes: Array(b[12...])) }
        return IPLiteral(bytes: b)
    }

    var isLoopback: Bool {
        if self.bytes.count == 4 { return self.bytes[0] == 127 }
        return self.bytes[0..<15].allSatisfy { $0 == 0 } && self.bytes[15] == 1
    }

    func contains(_ other: IPLiteral, prefix: Int) -> Bool {
        guard other.bytes.count == self.bytes.count else { return false }
        var bits = prefix
        for i in 0..<self.bytes.count where bits > 0 {
            let mask: UInt8 = bits >= 8 ? 0xff : ~(0xff >> UInt8(bits))
            if self.bytes[i] & mask != other.bytes[i] & mask { return false }
            bits -= 8
        }
        return true
    }
}
