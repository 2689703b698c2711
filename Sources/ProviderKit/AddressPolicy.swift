import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What kind of address an IP is, for the SSRF guards of the providers whose destinations come
/// from requests (Web Push endpoints, WNS channel URIs): only `.public` may be contacted (Web Push:
/// unless `webpush.allow_private_endpoints` is set).
public enum IPAddressClass: String, Sendable, Equatable {
    case `public`
    case loopback
    case `private`
    case linkLocal
    case uniqueLocal
    case sharedAddressSpace
    case unspecified
    case multicast
    case broadcast
    case documentation
    case benchmarking
    case ipv4Mapped
    case reserved

    public var isPublic: Bool { self == .public }

    /// "a loopback address", used in refusal messages.
    public var phrase: String {
        switch self {
        case .public: return "a public address"
        case .loopback: return "a loopback address"
        case .private: return "a private address"
        case .linkLocal: return "a link-local address"
        case .uniqueLocal: return "a unique-local address"
        case .sharedAddressSpace: return "a carrier-grade NAT (shared) address"
        case .unspecified: return "an unspecified (\"this network\") address"
        case .multicast: return "a multicast address"
        case .broadcast: return "a broadcast address"
        case .documentation: return "a documentation address"
        case .benchmarking: return "a benchmarking address"
        case .ipv4Mapped: return "an IPv4-mapped IPv6 address"
        case .reserved: return "a reserved (non-global) address"
        }
    }
}

/// Pure classification of IPv4 and IPv6 addresses (no sockets, no DNS).
public enum IPAddressClassifier {
    /// Parses a literal (`10.0.0.1`, `::1`, `[fe80::1]`, `fe80::1%eth0`) into 4 or 16 bytes.
    public static func parse(_ literal: String) -> [UInt8]? {
        var s = literal
        if s.hasPrefix("[") && s.hasSuffix("]") { s = String(s.dropFirst().dropLast()) }
        if let pct = s.firstIndex(of: "%") { s = String(s[..<pct]) }
        if !s.contains(":") {
            var a = in_addr()
            guard inet_pton(AF_INET, s, &a) == 1 else { return nil }
            return withUnsafeBytes(of: &a) { Array($0) }
        }
        var a6 = in6_addr()
        guard inet_pton(AF_INET6, s, &a6) == 1 else { return nil }
        return withUnsafeBytes(of: &a6) { Array($0) }
    }

    /// Classifies a literal; nil when it is not an IP address.
    public static func classify(_ literal: String) -> IPAddressClass? {
        parse(literal).map(classify(bytes:))
    }

    /// Classifies 4 (IPv4) or 16 (IPv6) address bytes in network order.
    public static func classify(bytes b: [UInt8]) -> IPAddressClass {
        if b.count == 4 { return classifyV4(b[0], b[1], b[2], b[3]) }
        guard b.count == 16 else { return .reserved }
        return classifyV6(b)
    }

    public static func classifyV4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> IPAddressClass {
        switch (a, b, c, d) {
        case (255, 255, 255, 255): return .broadcast
        case (0, _, _, _): return .unspecified  // 0.0.0.0/8
        case (10, _, _, _): return .private  // 10/8
        case (100, 64...127, _, _): return .sharedAddressSpace  // 100.64/10
        case (127, _, _, _): return .loopback  // 127/8
        case (169, 254, _, _): return .linkLocal  // 169.254/16
        case (172, 16...31, _, _): return .private  // 172.16/12
        case (192, 0, 0, _): return .reserved  // 192.0.0/24 IETF protocol assignments
        case (192, 0, 2, _): return .documentation  // TEST-NET-1
        case (192, 88, 99, _): return .reserved  // 6to4 relay anycast (deprecated)
        case (192, 168, _, _): return .private  // 192.168/16
        case (198, 18...19, _, _): return .benchmarking  // 198.18/15
        case (198, 51, 100, _): return .documentation  // TEST-NET-2
        case (203, 0, 113, _): return .documentation  // TEST-NET-3
        case (224...239, _, _, _): return .multicast  // 224/4
        case (240...255, _, _, _): return .reserved  // 240/4
        default: return .public
        }
    }

    public static func classifyV6(_ b: [UInt8]) -> IPAddressClass {
        let first10 = b[0..<10].allSatisfy { $0 == 0 }
        if first10 && b[10] == 0xFF && b[11] == 0xFF {
            return .ipv4Mapped  // ::ffff:0:0/96
        }
        if b[0..<15].allSatisfy({ $0 == 0 }) {
            if b[15] == 0 { return .unspecified }  // ::
            if b[15] == 1 { return .loopback }  // ::1
        }
        if first10 && b[10] == 0 && b[11] == 0 { return .reserved }  // ::/96 IPv4-compatible (deprecated)
        // 64:ff9b::/96 NAT64 well-known prefix: judge the embedded IPv4 address.
        if b[0] == 0x00, b[1] == 0x64, b[2] == 0xFF, b[3] == 0x9B, b[4..<12].allSatisfy({ $0 == 0 }) {
            return classifyV4(b[12], b[13], b[14], b[15])
        }
        if b[0] == 0x00, b[1] == 0x64, b[2] == 0xFF, b[3] == 0x9B, b[4] == 0x00, b[5] == 0x01 {
            return .private  // 64:ff9b:1::/48 local-use NAT64
        }
        if b[0] == 0xFF { return .multicast }  // ff00::/8
        if b[0] == 0xFE && (b[1] & 0xC0) == 0x80 { return .linkLocal }  // fe80::/10
        if b[0] == 0xFE && (b[1] & 0xC0) == 0xC0 { return .private }  // fec0::/10 site-local (deprecated)
        if (b[0] & 0xFE) == 0xFC { return .uniqueLocal }  // fc00::/7
        // Global unicast is 2000::/3; everything else is reserved.
        guard (b[0] & 0xE0) == 0x20 else { return .reserved }
        if b[0] == 0x20, b[1] == 0x01, b[2] == 0x0D, b[3] == 0xB8 { return .documentation }  // 2001:db8::/32
        if b[0] == 0x3F, b[1] == 0xFF, (b[2] & 0xF0) == 0x00 { return .documentation }  // 3fff::/20
        if b[0] == 0x20, b[1] == 0x01, b[2] == 0x00, b[3] == 0x02, b[4] == 0, b[5] == 0 { return .benchmarking }  // 2001:2::/48
        if b[0] == 0x20, b[1] == 0x01, (b[2] & 0xFE) == 0x00 { return .reserved }  // 2001::/23 IETF (Teredo, ORCHID, ...)
        if b[0] == 0x20, b[1] == 0x02 { return classifyV4(b[2], b[3], b[4], b[5]) }  // 2002::/16 6to4: embedded IPv4
        return .public
    }

    /// Text form of 4 or 16 address bytes.
    public static func format(_ b: [UInt8]) -> String {
        var buf = [CChar](repeating: 0, count: 64)
        if b.count == 4 {
            var a = in_addr()
            withUnsafeMutableBytes(of: &a) { $0.copyBytes(from: b) }
            _ = inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
        } else if b.count == 16 {
            var a = in6_addr()
            withUnsafeMutableBytes(of: &a) { $0.copyBytes(from: b) }
            _ = inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
        } else {
            return "?"
        }
        let n = buf.firstIndex(of: 0) ?? buf.count
        return String(decoding: buf[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Blocking name resolution (getaddrinfo), returning 4- and 16-byte addresses.
public enum HostResolver {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    public static func resolve(_ host: String, port: Int) throws -> [[UInt8]] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Darwin)
            hints.ai_socktype = SOCK_STREAM
        #else
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #endif
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            let msg = String(cString: gai_strerror(rc))
            throw Failure(description: "cannot resolve \(host): \(msg)")
        }
        defer { freeaddrinfo(first) }
        var out: [[UInt8]] = []
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let ai = p {
            if let sa = ai.pointee.ai_addr {
                if ai.pointee.ai_family == AF_INET {
                    sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                        var a = sin.pointee.sin_addr
                        out.append(withUnsafeBytes(of: &a) { Array($0) })
                    }
                } else if ai.pointee.ai_family == AF_INET6 {
                    sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                        var a = sin6.pointee.sin6_addr
                        out.append(withUnsafeBytes(of: &a) { Array($0) })
                    }
                }
            }
            p = ai.pointee.ai_next
        }
        if out.isEmpty { throw Failure(description: "cannot resolve \(host): no addresses") }
        return out
    }
}
