import PushgateCore
import SwiftProtobuf

/// gorush's `rpc/server.go` `Send`: the proto `NotificationRequest` as the gorush JSON notification
/// gorush builds from it (`notify.PushNotification`), so it goes through the same parser, checks and
/// queue as `POST /api/push`. Go's zero values are gorush's "not set": empty strings, `false` and a
/// badge of 0 or less are left out, as gorush's `omitempty` JSON leaves them out. docs/grpc.md has the table.
enum GorushMapping {
    /// `{"notifications":[{…}]}`, the body `POST /api/push` would get for this request.
    /// Throws a `RequestError` naming the field for what JSON cannot carry (a NaN or infinite number in `data`).
    static func body(_ r: Proto_NotificationRequest) throws(RequestError) -> [UInt8] {
        var w = JSONWriter(reservingCapacity: 256 + r.tokens.reduce(0) { $0 + $1.utf8.count + 3 })
        var first = true
        w.raw(#"{"notifications":[{"#)
        if !r.id.isEmpty {
            w.key("notif_id", first: &first)
            w.string(r.id)
        }
        w.key("platform", first: &first)
        w.int(r.platform)
        w.key("tokens", first: &first)
        w.strings(r.tokens)
        for (name, value) in [
            ("message", r.message), ("title", r.title), ("topic", r.topic), ("category", r.category), ("sound", r.sound),
            ("thread-id", r.threadID), ("image", r.image), ("push_type", r.pushType),
        ] where !value.isEmpty {
            w.key(name, first: &first)
            w.string(value)
        }
        for (name, value) in [("content_available", r.contentAvailable), ("mutable_content", r.mutableContent), ("development", r.development)]
        where value {
            w.key(name, first: &first)
            w.raw("true")
        }
        // `if badge > 0 { notification.Badge = &badge }`
        if r.badge > 0 {
            w.key("badge", first: &first)
            w.int(r.badge)
        }
        // `strings.ToLower(in.GetPriority().String())`: always set, "normal" by default; Go names an
        // unknown enum value by its number.
        w.key("priority", first: &first)
        switch r.priority {
        case .normal: w.string("normal")
        case .high: w.string("high")
        case .UNRECOGNIZED(let n): w.string(String(n))
        }
        if r.hasAlert { alert(r.alert, into: &w, first: &first) }
        if r.hasData {
            w.key("data", first: &first)
            try write(r.data, at: "notifications[0].data", into: &w)
        }
        if r.hasFcmOptions, !r.fcmOptions.analyticsLabel.isEmpty {
            w.key("fcm_options", first: &first)
            var f = true
            w.raw("{")
            w.key("analytics_label", first: &f)
            w.string(r.fcmOptions.analyticsLabel)
            w.raw("}")
        }
        w.raw("}]}")
        return w.bytes
    }

    /// gorush copies `Action` into both `action` and `action-loc-key` (its `actionLocKey` field is
    /// never read); kept, so the APNs payload is the one gorush sends.
    private static func alert(_ a: Proto_Alert, into w: inout JSONWriter, first: inout Bool) {
        var fields: [(String, String)] = [
            ("title", a.title), ("body", a.body), ("subtitle", a.subtitle), ("action", a.action), ("action-loc-key", a.action),
            ("launch-image", a.launchImage), ("loc-key", a.locKey), ("title-loc-key", a.titleLocKey),
        ]
        fields.removeAll { $0.1.isEmpty }
        let lists = [("loc-args", a.locArgs), ("title-loc-args", a.titleLocArgs)].filter { !$0.1.isEmpty }
        // Go's `omitzero` on an all-empty Alert leaves the key out.
        guard !fields.isEmpty || !lists.isEmpty else { return }
        w.key("alert", first: &first)
        var f = true
        w.raw("{")
        for (name, value) in fields {
            w.key(name, first: &f)
            w.string(value)
        }
        for (name, list) in lists {
            w.key(name, first: &f)
            w.strings(list)
        }
        w.raw("}")
    }

    /// A `google.protobuf.Struct` as gorush's `Struct.AsMap()` then `json.Marshal` write it: keys in
    /// byte order (Go sorts map keys), numbers as doubles (an integral one without a fraction).
    static func write(_ s: Google_Protobuf_Struct, at path: String, into w: inout JSONWriter) throws(RequestError) {
        let keys = s.fields.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var first = true
        w.raw("{")
        for k in keys {
            w.key(k, first: &first)
            // The key is in the dictionary: the fallback is never used.
            try write(s.fields[k] ?? Google_Protobuf_Value(), at: path + "." + k, into: &w)
        }
        w.raw("}")
    }

    static func write(_ v: Google_Protobuf_Value, at path: String, into w: inout JSONWriter) throws(RequestError) {
        switch v.kind {
        case .nullValue, nil: w.raw("null")
        case .boolValue(let b): w.raw(b ? "true" : "false")
        case .stringValue(let s): w.string(s)
        case .numberValue(let d):
            guard d.isFinite else {
                throw RequestError(message: RequestError.missingNotifications, detail: "\(path): \(d) is not a JSON number")
            }
            w.double(d)
        case .structValue(let s): try write(s, at: path, into: &w)
        case .listValue(let l):
            w.raw("[")
            for (i, e) in l.values.enumerated() {
                if i > 0 { w.raw(",") }
                try write(e, at: "\(path)[\(i)]", into: &w)
            }
            w.raw("]")
        }
    }
}
