import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Random (version 4) UUIDs in lower case: message ids (`apns-id`), request ids, idempotency slots.
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
        var raw: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &raw) { out in pool.withLockedValue { $0.take16(into: out) } }
        return withUnsafeBytes(of: &raw) { b in
            String(unsafeUninitializedCapacity: 36) { s in
                var o = 0
                for i in 0..<16 {
                    var byte = b[i]
                    if i == 6 { byte = (byte & 0x0F) | 0x40 }  // version 4
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
