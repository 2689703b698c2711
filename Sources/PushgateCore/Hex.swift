/// Hexadecimal digits, for the few places that read them from untrusted text (proxy URL
/// percent-escapes, `sha256:` key digests) or write digests as text.
public enum Hex {
    /// Lowercase hex digits of `bytes` (two per byte), e.g. a SHA-256 digest as stored or logged.
    public static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The value of one ASCII hex digit (either case), nil for anything else.
    @inlinable
    public static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// The bytes an even number of hex digits spell, nil when the count is odd or a character is not a digit.
    public static func decode<S: Collection>(_ digits: S) -> [UInt8]? where S.Element == UInt8 {
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var it = digits.makeIterator()
        while let h = it.next(), let l = it.next() {
            guard let hv = nibble(h), let lv = nibble(l) else { return nil }
            out.append(hv << 4 | lv)
        }
        return out
    }
}
