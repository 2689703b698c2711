import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ProviderKit
import PushgateCore

/// A channel URI that passed the shape checks: where one WNS notification is POSTed.
public struct WNSChannel: Sendable, Hashable {
    /// The URI as given.
    public let uri: String
    /// Lowercased host, `notify.windows.com` or a subdomain of it.
    public let host: String
    /// Path and query, at least "/".
    public let pathAndQuery: String

    /// The WNS domain: a channel URI's host is it or a subdomain of it ("never push to any other domain").
    public static let domain = "notify.windows.com"
    /// The longest channel URI accepted (real ones are a few hundred bytes).
    public static let maxURIBytes = 2048

    /// Checks the shape of a channel URI: `https`, no userinfo, no port, no fragment, a host on
    /// `notify.windows.com` (the domain itself or a subdomain), printable ASCII only. The failure's
    /// reason starts with "channel URI refused:".
    public static func parse(_ uri: String) -> Result<WNSChannel, PushFailure> {
        func refuse(_ why: String) -> Result<WNSChannel, PushFailure> { .failure(PushFailure("channel URI refused: \(why)")) }
        let u = Array(uri.utf8)
        guard !u.isEmpty else { return refuse("empty") }
        guard u.count <= maxURIBytes else { return refuse("longer than \(maxURIBytes) bytes") }
        guard u.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("contains a space, a control or a non-ASCII character") }
        let prefix = Array("https://".utf8)
        guard u.count > prefix.count, zip(u, prefix).allSatisfy({ ($0 | 0x20) == $1 || $0 == $1 }) else {
            return refuse("not an https URL")
        }
        var end = prefix.count
        while end < u.count, u[end] != UInt8(ascii: "/"), u[end] != UInt8(ascii: "?"), u[end] != UInt8(ascii: "#") { end += 1 }
        let authority = u[prefix.count..<end]
        if authority.contains(UInt8(ascii: "@")) { return refuse("has userinfo") }
        if authority.contains(UInt8(ascii: "[")) { return refuse("has an IP address for its host") }
        if authority.contains(UInt8(ascii: ":")) { return refuse("has a port") }
        let host = String(decoding: authority.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        let validLabels = labels.allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                && label.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: "-") }
        }
        guard !host.isEmpty, validLabels else { return refuse("host \(host.logSafe(max: 128)) is not a DNS name") }
        guard host == domain || host.hasSuffix("." + domain) else {
            return refuse("host \(host.logSafe(max: 128)) is not on \(domain)")
        }
        let rest = u[end...]
        if rest.contains(UInt8(ascii: "#")) { return refuse("has a fragment") }
        var path = String(decoding: rest, as: UTF8.self)
        if path.isEmpty { path = "/" } else if path.hasPrefix("?") { path = "/" + path }
        return .success(WNSChannel(uri: uri, host: host, pathAndQuery: path))
    }
}

/// The address half of the channel guard: the channel host's addresses must all be public
/// (`IPAddressClassifier`, the Web Push guard's rules). Answers are cached briefly per host.
///
/// Where the resolution happens: at ingest (`WNSProvider.checkIngestAsync`: a refused host is a 400
/// naming the token; a host DNS cannot answer in time is accepted) and again before each send (a
/// refused host fails the delivery permanently, before any connection).
///
/// What it does not stop: the HTTP client resolves the host again when it connects, so a DNS answer
/// that changed in between is not seen. The host is always in Microsoft's `notify.windows.com` zone
/// (checked by `WNSChannel.parse`), whose answers a sender cannot choose.
public final class WNSAddressGuard: Sendable {
    public enum Verdict: Sendable, Equatable {
        case allowed
        /// A permanent refusal ("channel URI refused: h resolves to 127.0.0.1, a loopback address").
        case refused(String)
        /// DNS failed: worth retrying.
        case unresolved(String)
    }

    /// host -> addresses (tests and `pushgate mock`: `wns.resolve`); hosts not in it go to DNS.
    let staticAnswers: [String: [[UInt8]]]
    let classify: @Sendable ([UInt8]) -> IPAddressClass
    let lookup: @Sendable (String) async throws -> [[UInt8]]
    let cacheSeconds: Double
    let now: @Sendable () -> Date
    private let cache = NIOLockedValueBox<[String: (verdict: Verdict, expires: Date)]>([:])
    static let maxCacheEntries = 10_000

    public init(
        staticAnswers: [String: [[UInt8]]] = [:], cacheSeconds: Double = 60,
        classify: @escaping @Sendable ([UInt8]) -> IPAddressClass = { IPAddressClassifier.classify(bytes: $0) },
        now: @escaping @Sendable () -> Date = { Date() },
        lookup: @escaping @Sendable (String) async throws -> [[UInt8]]
    ) {
        self.staticAnswers = staticAnswers
        self.cacheSeconds = cacheSeconds
        self.classify = classify
        self.now = now
        self.lookup = lookup
    }

    /// Parses `wns.resolve` entries (`host=address`, like curl's `--resolve`).
    public static func parseStaticAnswers(_ entries: [String]) throws(ConfigProblem) -> [String: [[UInt8]]] {
        var out: [String: [[UInt8]]] = [:]
        for entry in entries {
            let parts = entry.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty, let bytes = IPAddressClassifier.parse(parts[1]) else {
                throw ConfigProblem("\(entry.logSafe(max: 128)): expected host=address")
            }
            out[parts[0].lowercased(), default: []].append(bytes)
        }
        return out
    }

    public struct ConfigProblem: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ d: String) { description = d }
    }

    /// Whether `host` may be contacted.
    public func check(_ host: String) async -> Verdict {
        let t = now()
        if let hit = cache.withLockedValue({ $0[host] }), hit.expires > t { return hit.verdict }
        let addresses: [[UInt8]]
        if let fixed = staticAnswers[host] {
            addresses = fixed
        } else {
            do {
                addresses = try await lookup(host)
            } catch {
                return .unresolved("DNS: \(String(describing: error).logSafe(max: 200))")
            }
        }
        let verdict = judge(host, addresses)
        if cacheSeconds > 0 {
            cache.withLockedValue { table in
                if table.count >= Self.maxCacheEntries { table.removeAll(keepingCapacity: true) }
                table[host] = (verdict, t.addingTimeInterval(cacheSeconds))
            }
        }
        return verdict
    }

    /// `check` of each host, at most `concurrency` at a time.
    public func check(_ hosts: [String], concurrency: Int) async -> [String: Verdict] {
        await withTaskGroup(of: (String, Verdict).self) { group in
            var out: [String: Verdict] = [:]
            var next = hosts.makeIterator()
            for _ in 0..<max(1, concurrency) {
                guard let h = next.next() else { break }
                group.addTask { (h, await self.check(h)) }
            }
            for await (h, v) in group {
                out[h] = v
                if let more = next.next() { group.addTask { (more, await self.check(more)) } }
            }
            return out
        }
    }

    func judge(_ host: String, _ addresses: [[UInt8]]) -> Verdict {
        guard !addresses.isEmpty else { return .unresolved("DNS: \(host) has no addresses") }
        for a in addresses {
            let cls = classify(a)
            if !cls.isPublic {
                return .refused("channel URI refused: \(host) resolves to \(IPAddressClassifier.format(a)), \(cls.phrase)")
            }
        }
        return .allowed
    }
}
