import PushDispatch
import PushgateCore

/// gorush's answer to a push request (`{"counts":…,"logs":[…],"success":"ok"}` with Pushgate's
/// additions), the one every way in gives or maps, and the one kept for an idempotency key's replays.
extension SubmitResult {
    public var gorushAnswer: [UInt8] {
        var w = JSONWriter(reservingCapacity: 64 + self.logs.count * 160)
        w.raw(#"{"counts":"#)
        w.int(self.counts)
        w.raw(#","logs":["#)
        for (i, e) in self.logs.enumerated() {
            if i > 0 { w.raw(",") }
            e.write(into: &w)
        }
        w.raw("]")
        // Pushgate additions, only when they say something: failures left out of the capped answer
        // (core.max_sync_answer_bytes), and deliveries still under way at core.sync_timeout.
        if self.omittedLogs > 0 {
            w.raw(#","logs_omitted":"#)
            w.int(self.omittedLogs)
        }
        if self.pending > 0 {
            w.raw(#","pending":"#)
            w.int(self.pending)
        }
        // Notifications over the provider's limit sent as their `fallback` (decided at ingest, so
        // in async mode too).
        if !self.fallbacks.isEmpty {
            w.raw(#","fallbacks":["#)
            for (i, u) in self.fallbacks.enumerated() {
                if i > 0 { w.raw(",") }
                var first = true
                w.raw("{")
                w.key("notif_id", first: &first)
                w.string(u.notifID)
                w.key("platform", first: &first)
                w.string(u.platform.name)
                u.info.writeMembers(into: &w, first: &first)
                w.raw("}")
            }
            w.raw("]")
        }
        if self.omittedFallbacks > 0 {
            w.raw(#","fallbacks_omitted":"#)
            w.int(self.omittedFallbacks)
        }
        w.raw(#","success":"ok"}"#)
        return w.bytes
    }

    /// The `counts` of a `gorushAnswer` (a kept idempotent answer), nil if it has none.
    public static func counts(inGorushAnswer body: [UInt8]) -> Int? {
        let prefix = Array(#"{"counts":"#.utf8)
        guard body.starts(with: prefix) else { return nil }
        var n = 0
        for b in body.dropFirst(prefix.count) {
            guard b >= 0x30, b <= 0x39 else { break }
            let (m, o1) = n.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int(b - 0x30))
            if o1 || o2 { return nil }
            n = a
        }
        return n
    }
}

extension Gateway {
    /// Longer notif_id lists are left out of headers and metadata (clients and proxies cap header
    /// sizes); the request id still names them.
    public static let maxNotifIDsList = 8192

    /// The notif_ids as a header or metadata value (`X-Pushgate-Notif-Ids`): comma-separated, each
    /// `headerEncoded`; nil when longer than `maxNotifIDsList`.
    public static func notifIDsList(_ ids: [String]) -> String? {
        let list = ids.map(headerEncoded).joined(separator: ",")
        return list.utf8.count <= maxNotifIDsList ? list : nil
    }

    /// The notif_ids of a `notifIDsList` value.
    public static func notifIDs(fromList list: String) -> [String] {
        guard !list.isEmpty else { return [] }
        return list.split(separator: ",", omittingEmptySubsequences: false).map { part in
            var bytes: [UInt8] = []
            var it = Array(part.utf8)[...]
            while let b = it.popFirst() {
                if b == UInt8(ascii: "%"), it.count >= 2, let v = Hex.decode(Array(it.prefix(2))), v.count == 1 {
                    bytes.append(v[0])
                    it = it.dropFirst(2)
                } else {
                    bytes.append(b)
                }
            }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// A notif_id as it travels in a header or gRPC metadata list (`X-Pushgate-Notif-Ids`): every
    /// byte outside visible ASCII, and "%" and ",", percent-encoded, so a comma-separated list
    /// carries each exact id (CR/LF included).
    public static func headerEncoded(_ id: String) -> String {
        var out = ""
        for b in id.utf8 {
            if b > 0x20, b < 0x7F, b != UInt8(ascii: "%"), b != UInt8(ascii: ",") {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out += "%" + (b < 16 ? "0" : "") + String(b, radix: 16, uppercase: true)
            }
        }
        return out
    }
}
