import Foundation
import ProviderKit
import PushgateCore

/// A notification rendered once as vivo's `/message/send` JSON, without its target: `regId` and
/// `requestId` are added per delivery.
public struct VivoPreparedMessage: PreparedPush, Sendable {
    public let fields: JSONObject
    public let payloadBytes: Int?

    /// The body for one regId; `requestId` (vivo drops a repeated one) is the delivery's id, so a
    /// retry is not delivered twice.
    public func body(regID: String, requestID: String) -> [UInt8] {
        var o = fields
        o["regId"] = .string(regID)
        o["requestId"] = .string(String(requestID.prefix(VivoMessageMapper.maxRequestIDLength)))
        return Array(JSONValue.object(o).jsonString.utf8)
    }
}

/// gorush's `title` / `message` / `data` and the `vivo` member mapped to vivo's notification
/// message. vivo has no pass-through message in its server API [inferred: none found], so a push
/// without a title and a message is refused; `data` travels as `clientCustomMap`.
public enum VivoMessageMapper {
    /// `title`: at most 40 characters; `content`: at most 100; `clientCustomMap`: 1024 (vivo's API doc copies, modood/pushapi).
    public static let maxTitleLength = 40
    public static let maxContentLength = 100
    public static let maxCustomMapLength = 1024
    public static let maxRequestIDLength = 64
    /// `timeToLive`: 60 seconds to 7 days (own bound [1]).
    public static let maxTimeToLiveSeconds: Int64 = 7 * 86_400
    public static let minTimeToLiveSeconds: Int64 = 60

    public static func check(_ n: PushNotification, options: VivoOptions?, defaultCategory: String) -> RequestMemberProblem? {
        if let problem = checkMessage(n, options: options) { return problem }
        if options?.category == nil && defaultCategory.isEmpty {
            return RequestMemberProblem(
                field: "\(VivoOptions.member).category",
                problem:
                    "is required: vivo classifies every message (classification and category); set it in the request or vivo.category for the app, else vivo counts it as an operations message (a few a day per device)"
            )
        }
        return nil
    }

    public static func checkMessage(_ n: PushNotification, options: VivoOptions?) -> RequestMemberProblem? {
        let title = n.title ?? ""
        let message = n.message ?? ""
        if title.isEmpty && message.isEmpty {
            return RequestMemberProblem(
                field: "message", problem: "vivo delivers notifications only (no pass-through messages): title and message are required")
        }
        if title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return RequestMemberProblem(field: "title", problem: "is required by vivo and must not be blank")
        }
        if message.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            return RequestMemberProblem(field: "message", problem: "is required by vivo (the notification's content) and must not be blank")
        }
        if title.vendorLength > maxTitleLength {
            return RequestMemberProblem(
                field: "title", problem: "is \(title.vendorLength) characters, vivo takes at most \(maxTitleLength)",
                limit: "\(maxTitleLength) characters")
        }
        if message.vendorLength > maxContentLength {
            return RequestMemberProblem(
                field: "message", problem: "is \(message.vendorLength) characters, vivo takes at most \(maxContentLength)",
                limit: "\(maxContentLength) characters")
        }
        if let data = n.data, !data.isEmpty {
            let text = JSONValue.object(customMap(data)).jsonString
            if text.vendorLength > maxCustomMapLength {
                return RequestMemberProblem(
                    field: "data", problem: "is \(text.vendorLength) characters as vivo's clientCustomMap, which takes at most \(maxCustomMapLength)",
                    limit: "\(maxCustomMapLength) characters")
            }
        }
        return nil
    }

    /// `clientCustomMap` is a map of strings: a string value as it is, any other as its JSON text.
    static func customMap(_ data: JSONObject) -> JSONObject {
        JSONObject(data.map { e in (e.key, e.value.stringValue.map(JSONValue.string) ?? .string(e.value.jsonString)) })
    }

    public static func prepare(_ n: PushNotification, options: VivoOptions?, configuration c: VivoConfiguration) throws(PushFailure)
        -> VivoPreparedMessage
    {
        if let problem = check(n, options: options, defaultCategory: c.defaultCategory) { throw PushFailure(problem.description) }
        let o = options ?? VivoOptions()
        let category = o.category ?? c.defaultCategory
        var f: [(String, JSONValue)] = [
            ("appId", .int(c.appID)),
            ("notifyType", .int(o.notifyType ?? 4)),
            ("title", .string(n.title ?? "")),
            ("content", .string(n.message ?? "")),
            ("skipType", .int(o.skipType ?? 1)),
            ("classification", .int(VivoOptions.categories[category] ?? 0)),
            ("category", .string(category)),
        ]
        if let s = o.skipContent { f.append(("skipContent", .string(s))) }
        if let ttl = n.timeToLive, ttl > 0 {
            f.append(("timeToLive", .int(max(minTimeToLiveSeconds, min(ttl, maxTimeToLiveSeconds)))))
        }
        var payload = 0
        if let data = n.data, !data.isEmpty {
            let map = customMap(data)
            payload = JSONValue.object(map).jsonString.utf8.count
            f.append(("clientCustomMap", .object(map)))
        }
        if o.testMode == true { f.append(("pushMode", .int(1))) }
        return VivoPreparedMessage(fields: JSONObject(f), payloadBytes: payload)
    }

    /// A vivo regId: letters and digits, 1...128.
    public static func isRegistrationID(_ t: String) -> Bool {
        (1...128).contains(t.utf8.count)
            && t.utf8.allSatisfy { b in (48...57).contains(b) || (65...90).contains(b) || (97...122).contains(b) || b == 95 || b == 45 }
    }
}
