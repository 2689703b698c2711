import Foundation
import ProviderKit
import PushgateCore

/// A parsed push endpoint URL.
public struct WebPushEndpoint: Sendable, Hashable {
    /// "https" or "http".
    public let scheme: String
    /// Host without brackets, lowercased.
    public let host: String
    public let port: Int
    /// Path and query, at least "/".
    public let pathAndQuery: String
    /// `scheme://host[:port]` (default port omitted, IPv6 bracketed): the VAPID `aud`.
    public let origin: String
    public let url: String

    /// Parses an absolute http(s) URL; nil when it is not one.
    public init?(_ url: String) {
        guard url.utf8.count <= 4096 else { return nil }
        var copy = url
        // ASCII URLs (every real endpoint) are parsed on bytes; others keep the Character-based parser.
        let fast = copy.withUTF8 { u -> Parts?? in
            u.allSatisfy { $0 < 0x80 } ? .some(Self.parseASCII(u)) : nil
        }
        guard let parts = fast ?? Self.parseCharacters(url) else { return nil }
        self.scheme = parts.scheme
        self.host = parts.host
        self.port = parts.port
        self.pathAndQuery = parts.path
        let defaultPort = parts.scheme == "https" ? 443 : 80
        let hostForURL = parts.host.contains(":") ? "[\(parts.host)]" : parts.host
        self.origin = parts.port == defaultPort ? "\(parts.scheme)://\(hostForURL)" : "\(parts.scheme)://\(hostForURL):\(parts.port)"
        self.url = url
    }

    struct Parts {
        var scheme: String
        var host: String
        var port: Int
        var path: String
    }

    /// The byte-level parser for ASCII URLs (same rules as `parseCharacters`).
    static func parseASCII(_ u: UnsafeBufferPointer<UInt8>) -> Parts? {
        let n = u.count
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (b >= 0x09 && b <= 0x0D) }
        func lower(_ b: UInt8) -> UInt8 { b >= 0x41 && b <= 0x5A ? b | 0x20 : b }
        func string(_ r: Range<Int>) -> String { String(decoding: UnsafeBufferPointer(rebasing: u[r]), as: UTF8.self) }
        // "://"
        var se = 0
        while se + 3 <= n && !(u[se] == 0x3A && u[se + 1] == 0x2F && u[se + 2] == 0x2F) { se += 1 }
        guard se + 3 <= n else { return nil }
        let scheme: String
        if se == 5, lower(u[0]) == 0x68, lower(u[1]) == 0x74, lower(u[2]) == 0x74, lower(u[3]) == 0x70, lower(u[4]) == 0x73 {
            scheme = "https"
        } else if se == 4, lower(u[0]) == 0x68, lower(u[1]) == 0x74, lower(u[2]) == 0x74, lower(u[3]) == 0x70 {
            scheme = "http"
        } else {
            return nil
        }
        let restStart = se + 3
        var restEnd = n
        var path = "/"
        if let end = (restStart..<n).first(where: { u[$0] == 0x2F || u[$0] == 0x3F || u[$0] == 0x23 }) {
            var pEnd = n
            if let hash = (end..<n).first(where: { u[$0] == 0x23 }) { pEnd = hash }
            if pEnd > end {
                guard (end..<pEnd).allSatisfy({ !isSpace(u[$0]) }) else { return nil }
                path = u[end] == 0x3F ? "/" + string(end..<pEnd) : string(end..<pEnd)
            }
            restEnd = end
        }
        let rest = restStart..<restEnd
        if rest.contains(where: { u[$0] == 0x40 }) { return nil }  // userinfo is never part of a push endpoint
        var hostRange: Range<Int>
        var portRange: Range<Int>?
        if !rest.isEmpty && u[rest.lowerBound] == 0x5B {  // "["
            guard let close = rest.first(where: { u[$0] == 0x5D }) else { return nil }
            hostRange = (rest.lowerBound + 1)..<close
            let after = (close + 1)..<rest.upperBound
            if !after.isEmpty && u[after.lowerBound] == 0x3A {
                portRange = (after.lowerBound + 1)..<after.upperBound
            } else if !after.isEmpty {
                return nil
            }
        } else if let colon = rest.last(where: { u[$0] == 0x3A }) {
            hostRange = rest.lowerBound..<colon
            portRange = (colon + 1)..<rest.upperBound
        } else {
            hostRange = rest
        }
        guard !hostRange.isEmpty, hostRange.allSatisfy({ !isSpace(u[$0]) && u[$0] != 0x2F }) else { return nil }
        var port = scheme == "https" ? 443 : 80
        if let portRange, !portRange.isEmpty {
            guard let p = Int(string(portRange)), p > 0, p < 65536 else { return nil }
            port = p
        }
        let host = String(decoding: hostRange.map { lower(u[$0]) }, as: UTF8.self)
        return Parts(scheme: scheme, host: host, port: port, path: path)
    }

    /// The Character-based parser (non-ASCII input; `parseASCII` gives the same answers on ASCII).
    static func parseCharacters(_ url: String) -> Parts? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let scheme = url[url.startIndex..<schemeEnd.lowerBound].lowercased()
        guard scheme == "https" || scheme == "http" else { return nil }
        var rest = url[schemeEnd.upperBound...]
        var path = "/"
        if let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            var p = String(rest[end...])
            if let hash = p.firstIndex(of: "#") { p = String(p[..<hash]) }
            if p.hasPrefix("?") { p = "/" + p }
            path = p.isEmpty ? "/" : p
            rest = rest[rest.startIndex..<end]
        }
        if rest.contains("@") { return nil }  // userinfo is never part of a push endpoint
        var host: Substring
        var portString: Substring?
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
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && !$0.isWhitespace && $0 != "/" }) else { return nil }
        let defaultPort = scheme == "https" ? 443 : 80
        var port = defaultPort
        if let portString, !portString.isEmpty {
            guard portString.allSatisfy(\.isASCII), let p = Int(portString), p > 0, p < 65536 else { return nil }
            port = p
        }
        guard path.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else { return nil }
        return Parts(scheme: scheme, host: host.lowercased(), port: port, path: path)
    }
}

/// The SSRF guard for user-supplied endpoints: scheme, host allowlist, and (after DNS resolution)
/// public addresses only unless `allow_private_endpoints`.
public struct EndpointPolicy: Sendable {
    public var allowHTTP: Bool
    public var allowPrivateEndpoints: Bool
    /// Lowercased entries: exact host, or `*.example.com` / `.example.com` for any subdomain.
    public var hostAllowlist: [String]?
    /// How addresses are classified (default `IPAddressClassifier.classify(bytes:)`). Replaceable so
    /// that tests, which may only use loopback, can call e.g. 127.0.0.2 public.
    public var addressClassifier: @Sendable ([UInt8]) -> IPAddressClass = { IPAddressClassifier.classify(bytes: $0) }

    public init(allowHTTP: Bool = false, allowPrivateEndpoints: Bool = false, hostAllowlist: [String]? = nil) {
        self.allowHTTP = allowHTTP
        self.allowPrivateEndpoints = allowPrivateEndpoints
        self.hostAllowlist = hostAllowlist?.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }

    public init(_ config: WebPushConfiguration) {
        self.init(allowHTTP: config.allowHTTP, allowPrivateEndpoints: config.allowPrivateEndpoints, hostAllowlist: config.hostAllowlist)
    }

    /// Checks that need no DNS: URL shape, scheme, allowlist, and an IP-literal host.
    public func check(_ endpoint: String) -> Result<WebPushEndpoint, PushFailure> {
        guard let ep = WebPushEndpoint(endpoint) else {
            let scheme = endpoint.range(of: "://").map { String(endpoint[..<$0.lowerBound]) }
            if let scheme, scheme.lowercased() != "https", scheme.lowercased() != "http" {
                return .failure(PushFailure("endpoint refused: scheme \"\(scheme)\" is not https"))
            }
            return .failure(PushFailure("endpoint refused: not an absolute https URL"))
        }
        return check(ep)
    }

    public func check(_ ep: WebPushEndpoint) -> Result<WebPushEndpoint, PushFailure> {
        if ep.scheme == "http" && !allowHTTP {
            return .failure(PushFailure("endpoint refused: plain http (set webpush.allow_http to allow)"))
        }
        if let list = hostAllowlist, !Self.hostAllowed(ep.host, list) {
            return .failure(PushFailure("endpoint refused: host \(ep.host) is not in webpush.host_allowlist"))
        }
        if !allowPrivateEndpoints {
            if let bytes = IPAddressClassifier.parse(ep.host) {
                if let why = refusal(bytes, host: nil) { return .failure(PushFailure(why)) }
            } else if ep.host == "localhost" || ep.host.hasSuffix(".localhost") {
                return .failure(PushFailure("endpoint refused: \(ep.host) is a loopback name (set webpush.allow_private_endpoints to allow)"))
            }
        }
        return .success(ep)
    }

    /// The refusal for a set of resolved addresses: refused if any one of them is not public.
    public func check(resolved addresses: [[UInt8]], host: String) -> PushFailure? {
        if allowPrivateEndpoints { return nil }
        for a in addresses {
            if let why = refusal(a, host: host) { return PushFailure(why) }
        }
        return nil
    }

    func refusal(_ bytes: [UInt8], host: String?) -> String? {
        IPAddressClassifier.refusal(for: bytes, host: host, class: addressClassifier(bytes))
    }

    static func hostAllowed(_ host: String, _ list: [String]) -> Bool {
        for entry in list {
            if entry.hasPrefix("*.") {
                let suffix = entry.dropFirst(1)  // ".example.com"
                if host.hasSuffix(suffix) { return true }
            } else if entry.hasPrefix(".") {
                if host.hasSuffix(entry) || host == entry.dropFirst() { return true }
            } else if host == entry {
                return true
            }
        }
        return false
    }
}
