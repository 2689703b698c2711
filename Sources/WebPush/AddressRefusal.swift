import ProviderKit

/// The Web Push guard's refusal messages (the classification is `ProviderKit`'s, shared with WNS).
extension IPAddressClassifier {
    /// The refusal message for a non-public address, or nil when public.
    /// With `host`, the message reads "endpoint refused: HOST resolves to ADDR, a loopback address (...)".
    public static func refusal(for bytes: [UInt8], host: String? = nil) -> String? {
        refusal(for: bytes, host: host, class: classify(bytes: bytes))
    }

    /// The refusal message for an address already classified as `cls` (nil when `.public`).
    public static func refusal(for bytes: [UInt8], host: String?, class cls: IPAddressClass) -> String? {
        if cls.isPublic { return nil }
        var phrase = cls.phrase
        if cls == .ipv4Mapped {
            let inner = classifyV4(bytes[12], bytes[13], bytes[14], bytes[15])
            if !inner.isPublic { phrase += " of \(inner.phrase)" }
        }
        let subject = host.map { "\($0) resolves to \(format(bytes))," } ?? "\(format(bytes)) is"
        return "endpoint refused: \(subject) \(phrase) (set webpush.allow_private_endpoints to allow)"
    }
}
