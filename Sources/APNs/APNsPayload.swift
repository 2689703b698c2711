import PushgateCore

/// Renders the APNs JSON payload of a notification with gorush's mapping, once, into exact bytes.
///
/// `aps` keys (in this order, each only when set): `alert`, `badge`, `sound`, `thread-id`, `category`,
/// `content-available`, `content-changed` (push type `widgets`), `mutable-content`, `url-args`, `interruption-level`, `relevance-score`,
/// live activity keys (`timestamp`, `event`, `content-state`, `stale-date`, `dismissal-date`,
/// `attributes-type`, `attributes`, `input-push-token`, `input-push-channel`). `data` keys follow
/// `aps` at the root.
///
/// `message` without `title` is `"alert":"message"`; with `title` it is `alert{title, body}`; the
/// `alert` object's fields then override or extend the dictionary (a `message` without `title`
/// becomes the dictionary's `body` when `alert` fields are present, rather than being dropped).
public enum APNsPayload {
    /// A push that wakes the app without showing anything: push type `background`, or
    /// `content_available` with no alert, title, message, badge or sound.
    public static let backgroundPush = PlatformRules.BackgroundPushRule("apns background") { n in
        if n.pushType == "background" { return true }
        guard n.contentAvailable == true else { return false }
        return (n.alert?.isEmpty ?? true) && n.title == nil && (n.message ?? "").isEmpty && n.badge == nil && n.sound == nil
    }

    public static func render(_ n: PushNotification, pushType: APNsPushType) throws(PushFailure) -> [UInt8] {
        var w = JSONWriter(reservingCapacity: 256 + (n.message?.utf8.count ?? 0))
        w.raw("{\"aps\":{")
        var first = true

        // alert
        let alertFields = n.alert.flatMap { $0.isEmpty ? nil : $0 }
        let title = nonEmpty(n.title)
        let message = nonEmpty(n.message)
        if title == nil, alertFields == nil, let message {
            w.key("alert", first: &first)
            w.string(message)
        } else if title != nil || alertFields != nil {
            let a = alertFields ?? APNsAlert()
            var entries: [(String, JSONValue)] = []
            func put(_ key: String, _ value: JSONValue?) {
                guard let value else { return }
                if let i = entries.firstIndex(where: { $0.0 == key }) { entries[i].1 = value } else { entries.append((key, value)) }
            }
            put("title", title.map(JSONValue.string))
            put("body", message.map(JSONValue.string))
            put("title", nonEmpty(a.title).map(JSONValue.string))
            put("subtitle", nonEmpty(a.subtitle).map(JSONValue.string))
            put("body", nonEmpty(a.body).map(JSONValue.string))
            put("launch-image", nonEmpty(a.launchImage).map(JSONValue.string))
            put("title-loc-key", nonEmpty(a.titleLocKey).map(JSONValue.string))
            put("title-loc-args", nonEmptyArray(a.titleLocArgs))
            put("loc-key", nonEmpty(a.locKey).map(JSONValue.string))
            put("loc-args", nonEmptyArray(a.locArgs))
            put("action", nonEmpty(a.action).map(JSONValue.string))
            put("action-loc-key", nonEmpty(a.actionLocKey).map(JSONValue.string))
            put("summary-arg", nonEmpty(a.summaryArg).map(JSONValue.string))
            if let count = a.summaryArgCount, count > 0 { put("summary-arg-count", .int(Int64(count))) }
            w.key("alert", first: &first)
            w.write(JSONObject(entries))
        }

        if let badge = n.badge, badge >= 0 {
            w.key("badge", first: &first)
            w.int(badge)
        }

        let soundName = nonEmpty(n.soundName)
        let soundVolume = n.soundVolume.flatMap { $0 > 0 ? $0 : nil }
        if soundName != nil || soundVolume != nil {
            // gorush's top-level `name` / `volume` (apns2's SoundName / SoundVolume): a fresh critical-sound
            // dictionary {critical: 1, name (default "default"), volume (default 1)} replacing `sound`.
            w.key("sound", first: &first)
            w.raw("{\"critical\":1,\"name\":")
            w.string(soundName ?? "default")
            w.raw(",\"volume\":")
            w.double(soundVolume ?? 1)
            w.raw("}")
        } else if let sound = n.sound {
            switch sound {
            case .string(let s) where !s.isEmpty:
                w.key("sound", first: &first)
                w.string(s)
            case .object(let o):
                w.key("sound", first: &first)
                w.write(try criticalSound(o))
            default:
                break
            }
        }

        if let v = nonEmpty(n.threadID) {
            w.key("thread-id", first: &first)
            w.string(v)
        }
        if let v = nonEmpty(n.category) {
            w.key("category", first: &first)
            w.string(v)
        }
        if n.contentAvailable == true || pushType.forcesContentAvailable {
            w.key("content-available", first: &first)
            w.int(1)
        }
        if pushType == .widgets {
            // WidgetKit push: `content-changed: true` makes WidgetKit reload the widget's timelines
            // (developer.apple.com, "Updating widgets with WidgetKit push notifications").
            w.key("content-changed", first: &first)
            w.raw("true")
        }
        if n.mutableContent == true {
            w.key("mutable-content", first: &first)
            w.int(1)
        }
        if let args = n.urlArgs, !args.isEmpty {
            w.key("url-args", first: &first)
            w.write(.array(args.map(JSONValue.string)))
        }
        if let v = nonEmpty(n.interruptionLevel) {
            w.key("interruption-level", first: &first)
            w.string(v)
        }
        if let v = n.relevanceScore {
            guard v.isFinite else { throw PushFailure("relevance-score: must be a finite number") }
            w.key("relevance-score", first: &first)
            w.double(v)
        }
        // Live Activities
        if let v = n.timestamp {
            w.key("timestamp", first: &first)
            w.int(v)
        }
        if let v = nonEmpty(n.event) {
            w.key("event", first: &first)
            w.string(v)
        }
        if let v = n.contentState {
            w.key("content-state", first: &first)
            w.write(v)
        }
        if let v = n.staleDate {
            w.key("stale-date", first: &first)
            w.int(v)
        }
        if let v = n.dismissalDate {
            w.key("dismissal-date", first: &first)
            w.int(v)
        }
        if let v = nonEmpty(n.attributesType) {
            w.key("attributes-type", first: &first)
            w.string(v)
        }
        if let v = n.attributes {
            w.key("attributes", first: &first)
            w.write(v)
        }
        if n.inputPushToken == true {
            w.key("input-push-token", first: &first)
            w.int(1)
        }
        if let v = nonEmpty(n.inputPushChannel) {
            w.key("input-push-channel", first: &first)
            w.string(v)
        }
        w.raw("}")

        if let data = n.data {
            for (key, value) in data {
                if key == "aps" {
                    throw PushFailure("data.aps: the key \"aps\" is reserved for the APNs payload; use the notification fields instead")
                }
                w.raw(",")
                w.string(key)
                w.raw(":")
                w.write(value)
            }
        }
        w.raw("}")
        return w.bytes
    }

    /// `sound` as `{critical, name, volume}`: `critical` as 0/1 (a boolean is accepted), `volume` a number.
    static func criticalSound(_ o: JSONObject) throws(PushFailure) -> JSONObject {
        var out = JSONObject()
        for (key, value) in o {
            switch key {
            case "critical":
                switch value {
                case .bool(let b): out["critical"] = .int(b ? 1 : 0)
                case .int(let i): out["critical"] = .int(i == 0 ? 0 : 1)
                case .null: break
                default: throw PushFailure("sound.critical: expected 0, 1 or a boolean")
                }
            case "name":
                switch value {
                case .string: out["name"] = value
                case .null: break
                default: throw PushFailure("sound.name: expected a string")
                }
            case "volume":
                switch value {
                case .int, .double: out["volume"] = value
                case .null: break
                default: throw PushFailure("sound.volume: expected a number")
                }
            default:
                out[key] = value
            }
        }
        return out
    }

    @inline(__always) static func nonEmpty(_ s: String?) -> String? {
        guard let s, !s.isEmpty else { return nil }
        return s
    }

    static func nonEmptyArray(_ a: [String]?) -> JSONValue? {
        guard let a, !a.isEmpty else { return nil }
        return .array(a.map(JSONValue.string))
    }
}
