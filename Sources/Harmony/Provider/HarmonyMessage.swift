import Foundation
import ProviderKit
import PushgateCore

/// A HarmonyOS Push Kit v3 message type: the `push-type` header, which decides the `payload`'s shape.
public enum HarmonyPushType: Int, Sendable, CaseIterable {
    /// Notification (and badge) message: `payload.notification`.
    case alert = 0
    /// Service widget (card) update.
    case card = 1
    /// Extension (text-to-speech / voice broadcast) notification.
    case voice = 2
    /// Background message: `payload.extraData`, delivered to the running app, nothing shown.
    case background = 6
    /// Live view (live window) message.
    case liveView = 7
    /// In-app call (VoIP) message.
    case voip = 10

    /// The names `push_type` takes for platform harmony (the number as a string works too).
    public var names: [String] {
        switch self {
        case .alert: return ["alert"]
        case .card: return ["card", "widget", "form"]
        case .voice: return ["voice", "extension"]
        case .background: return ["background"]
        case .liveView: return ["liveview", "live_view", "liveactivity"]
        case .voip: return ["voip", "call"]
        }
    }

    public init?(name: String) {
        let lower = name.lowercased()
        if let n = Int(lower), let t = HarmonyPushType(rawValue: n) {
            self = t
            return
        }
        guard let t = HarmonyPushType.allCases.first(where: { $0.names.contains(lower) }) else { return nil }
        self = t
    }

    /// "alert (0), card (1), ...": for the ingest answer.
    public static let listed = allCases.map { "\($0.names[0]) (\($0.rawValue))" }.joined(separator: ", ")
}

/// One notification rendered for Push Kit v3 once; each send only splices its token in:
/// `{"payload":{..},"pushOptions":{..},"target":{"token":["<token>"]}}`.
public struct HarmonyPreparedMessage: PreparedPush {
    public let pushType: HarmonyPushType
    /// Up to and including `"target":{"token":[`.
    let head: [UInt8]
    /// The largest request body of the notification's tokens (set by `prepare`).
    public internal(set) var payloadBytes: Int? = nil

    static let tail: [UInt8] = Array("]}}".utf8)

    public func body(token: String) -> [UInt8] {
        var w = JSONWriter(reservingCapacity: token.utf8.count + 8)
        w.string(token)
        var out: [UInt8] = []
        out.reserveCapacity(head.count + w.bytes.count + Self.tail.count)
        out.append(contentsOf: head)
        out.append(contentsOf: w.bytes)
        out.append(contentsOf: Self.tail)
        return out
    }
}

/// Pushgate's mapping of gorush-style fields onto Push Kit v3 (docs/harmonyos.md).
public enum HarmonyMessageMapper {
    /// The largest request body sent (Push Kit's message limit, as for HMS: result code 80300008).
    public static let maxMessageSize = 4096

    /// The push type a notification asks for: `push_type` when set, else alert when it shows
    /// something (title, message or a `harmony_payload.notification`), else background.
    public static func pushType(_ n: PushNotification) -> HarmonyPushType? {
        if let p = n.pushType, !p.isEmpty { return HarmonyPushType(name: p) }
        if !(n.title ?? "").isEmpty || !(n.message ?? "").isEmpty || n.harmonyPayload?["notification"] != nil { return .alert }
        return .background
    }

    /// Why Push Kit would refuse the notification (a 400 detail naming the field), or nil.
    public static func problem(_ n: PushNotification) -> String? {
        guard let type = pushType(n) else {
            return "push_type: for platform harmony one of \(HarmonyPushType.listed), got \"\(String((n.pushType ?? "").prefix(40)))\""
        }
        if n.dryRun == true { return "dry_run: Push Kit v3 has no validate-only send" }
        switch type {
        case .alert, .voice:
            if n.harmonyPayload?["notification"] == nil, (n.title ?? "").isEmpty || (n.message ?? "").isEmpty {
                return "message: a HarmonyOS \(type.names[0]) message needs title and message (or harmony_payload.notification)"
            }
            if let c = n.harmonyPayload?["notification"], c.objectValue == nil {
                return "harmony_payload.notification: must be an object"
            }
        case .background, .voip:
            if n.harmonyPayload == nil, n.data == nil || n.data?.isEmpty == true {
                return "data: a HarmonyOS \(type.names[0]) message carries data (sent as payload.extraData) or a harmony_payload"
            }
        case .card, .liveView:
            if n.harmonyPayload == nil || n.harmonyPayload?.isEmpty == true {
                return "harmony_payload: required for push_type \(type.names[0]) (Push Kit's payload for this message type, passed through)"
            }
        }
        return nil
    }

    /// The v3 `payload` object.
    static func payload(_ n: PushNotification, type: HarmonyPushType) -> JSONObject {
        var payload = n.harmonyPayload ?? JSONObject()
        switch type {
        case .alert, .voice:
            var notification = payload["notification"]?.objectValue ?? JSONObject()
            if let t = n.title, !t.isEmpty { notification["title"] = .string(t) }
            if let b = n.message, !b.isEmpty { notification["body"] = .string(b) }
            if let image = n.image, !image.isEmpty { notification["image"] = .string(image) }
            if let c = n.category, !c.isEmpty { notification["category"] = .string(c) }
            if let badge = n.badge, notification["badge"] == nil { notification["badge"] = .object(JSONObject([("setNum", .int(Int64(badge)))])) }
            var click = notification["clickAction"]?.objectValue ?? JSONObject([("actionType", .int(0))])
            if let data = n.data, !data.isEmpty, click["data"] == nil { click["data"] = .object(data) }
            notification["clickAction"] = .object(click)
            payload["notification"] = .object(notification)
        case .background, .voip:
            if payload["extraData"] == nil, let data = n.data, !data.isEmpty {
                payload["extraData"] = .string(JSONValue.object(data).jsonString)
            }
        case .card, .liveView:
            break
        }
        return payload
    }

    /// v3 `pushOptions`: `ttl` from `time_to_live`, `biTag` from `bi_tag`, `testMessage` from `development`.
    static func pushOptions(_ n: PushNotification) -> JSONObject {
        var o = JSONObject()
        if let ttl = n.timeToLive { o["ttl"] = .int(Int64(ttl)) }
        if let tag = n.biTag, !tag.isEmpty { o["biTag"] = .string(tag) }
        if n.fields.bool("development") == true {  // gorush's member (decoded with the APNs ones)
            o["testMessage"] = .bool(true)
        }
        return o
    }

    /// Checks, renders and applies the size limit to the largest token's body.
    public static func prepare(_ n: PushNotification) throws(PushFailure) -> HarmonyPreparedMessage {
        if let why = problem(n) { throw PushFailure(why) }
        guard let type = pushType(n) else { throw PushFailure("push_type: unknown") }
        var w = JSONWriter(reservingCapacity: 512)
        w.raw("{\"payload\":")
        w.write(.object(payload(n, type: type)))
        w.raw(",\"pushOptions\":")
        w.write(.object(pushOptions(n)))
        w.raw(",\"target\":{\"token\":[")
        var prepared = HarmonyPreparedMessage(pushType: type, head: w.bytes)
        let largest = n.tokens.map { prepared.body(token: $0).count }.max() ?? prepared.body(token: "").count
        if largest > maxMessageSize { throw PushFailure.payloadTooLarge(size: largest, limit: maxMessageSize) }
        prepared.payloadBytes = largest
        return prepared
    }
}
