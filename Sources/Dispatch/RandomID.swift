import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// UUIDs in lower case: random ones (version 4) for message ids (`apns-id`), time-ordered ones
/// (version 7) for request ids.
///
/// Foundation's `UUID()` on Linux opens, reads and closes /dev/urandom for every id, and
/// `uuidString` formats it with snprintf (then `lowercased()` copies it again): measured at a fifth of
/// the CPU of the gateway's Swift concurrency threads at 25k deliveries/s (docs/benchmarks.md, issue
/// 17). This takes 16 bytes at a time from a 4 KiB buffer refilled by one read of the system's random
/// device kept open (the system generator, `SystemRandomNumberGenerator`, when it cannot be opened or
/// read), and writes the 36 characters directly. Same distribution and source as `UUID()`.
public enum RandomID {
    private struct Pool {
        var bytes = [UInt8](repeating: 0, count: 4096)
        var next = 4096
        var device: Int32 = -2  // -2: not opened yet; -1: unavailable

        mutating func take16(into out: UnsafeMutableRawBufferPointer) {
            if next + 16 > bytes.count { refill() }
            bytes.withUnsafeBytes { out.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[next..<next + 16])) }
            next += 16
        }

        private mutating func refill() {
            if device == -2 { device = open("/dev/urandom", O_RDONLY | O_CLOEXEC) }
            var filled = 0
            if device >= 0 {
                let fd = device
                filled = bytes.withUnsafeMutableBytes { buffer in
                    var n = 0
                    while n < buffer.count {
                        let r = read(fd, buffer.baseAddress! + n, buffer.count - n)
                        if r > 0 {
                            n += r
                        } else if r < 0 && errno == EINTR {
                            continue
                        } else {
                            break
                        }
                    }
                    return n
                }
            }
            if filled < bytes.count {
                var g = SystemRandomNumberGenerator()
                for i in stride(from: 0, to: bytes.count, by: 8) {
                    withUnsafeBytes(of: g.next()) { bytes.replaceSubrange(i..<i + 8, with: $0) }
                }
            }
            next = 0
        }
    }

    private static let pool = NIOLockedValueBox(Pool())
    private static let hex = Array("0123456789abcdef".utf8)

    /// A new random UUID, e.g. `"3f2b8a4c-1d7e-4b0a-9c55-0e6f1a2b3c4d"`.
    public static func uuid() -> String {
        make(version: 4, milliseconds: nil)
    }

    /// A new time-ordered UUID (version 7, RFC 9562 section 5.7): the Unix time in milliseconds in
    /// its first 48 bits, then 74 random bits, e.g. `"019ab3c2-5e10-7a3b-9c55-0e6f1a2b3c4d"`. Request
    /// ids, whose notification ids (`<request id>-<n>`) are a store's index key: ids made one after
    /// the other land next to each other in it instead of at random pages (in the SQLite store a
    /// random key rewrote 1.3 index pages a commit).
    public static func timeOrdered(milliseconds: UInt64 = currentMilliseconds()) -> String {
        make(version: 7, milliseconds: milliseconds)
    }

    /// The Unix time in milliseconds (0 before 1970).
    public static func currentMilliseconds() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        guard t.tv_sec >= 0 else { return 0 }
        return UInt64(t.tv_sec) &* 1000 &+ UInt64(max(0, t.tv_nsec) / 1_000_000)
    }

    private static func make(version: UInt8, milliseconds: UInt64?) -> String {
        var raw: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &raw) { out in
            pool.withLockedValue { $0.take16(into: out) }
            if let ms = milliseconds {
                for i in 0..<6 { out[i] = UInt8(truncatingIfNeeded: ms >> (8 * (5 - UInt64(i)))) }
            }
        }
        return withUnsafeBytes(of: &raw) { b in
            String(unsafeUninitializedCapacity: 36) { s in
                var o = 0
                for i in 0..<16 {
                    var byte = b[i]
                    if i == 6 { byte = (byte & 0x0F) | (version << 4) }  // version
                    if i == 8 { byte = (byte & 0x3F) | 0x80 }  // RFC 4122 variant
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        s[o] = UInt8(ascii: "-")
                        o += 1
                    }
                    s[o] = hex[Int(byte >> 4)]
                    s[o + 1] = hex[Int(byte & 0x0F)]
                    o += 2
                }
                return o
            }
        }
    }
}
