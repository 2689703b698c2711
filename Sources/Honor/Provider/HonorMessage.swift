import Foundation
import ProviderKit
import PushgateCore

/// A notification rendered once as Honor's `sendMessage` JSON, without its target: `token` is added
/// per delivery (one token a request, so each answer is about one device).
public struct HonorPreparedMessage: PreparedPush, Sendable {
    public let fields: JSONObject
    public let payloadBytes: Int?
    /// Whether Honor shows it (a notification message) or hands it to the app (a data message).
    public let isNotification: Bool

    public func body(token: String) -> [UInt8] {
        var o = fields
        o["token"] = .array([.string(token)])
        return Array(JSONValue.object(o).jsonString.utf8)
    }
}

/// gorush's `title` / `message` / `data` and the `honor` member mapped to Honor's message: with a
/// title and a message, a notification message (`android.notification`, its `clickAction` and its
/// `importance`), `data` riding along as the message's `data` text; with `data` alone, a data
/// (pass-through) message.
public enum HonorMessageMapper {
    /// The rendered message: at most 4096 bytes (Honor publishes no size; HMS's, whose API Honor's
    /// follows, is 4096 [unconfirmed]).
    public static let maxMessageBytes = 4096
    /// What the target adds to a rendered message at most: `,"token":["…"]` with a 512-byte token.
    static let tokenAllowance = 16 + 512
    /// `ttl`: Honor keeps a message up to 15 days (1296000 s); 1 day when none is given.
    public static let maxTimeToLiveSeconds: Int64 = 1_296_000

    /// The checks that need the app: a notification's importance from the request or the app.
    public static func check(_ n: PushNotification, options: HonorOptions?, defaultImportance: String) -> RequestMemberProblem? {
        if let problem = checkMessage(n, options: options) { return problem }
        if isNotification(n) && options?.importance == nil && defaultImportance.isEmpty {
            return RequestMemberProblem(
                field: "\(HonorOptions.member).importance",
                problem:
                    "is required: Honor classifies every notification (NORMAL for service and communication, LOW for news and marketing); set it in the request or honor.importance for the app, else Honor counts it as marketing (2 a day per device)"
            )
        }
        return nil
    }

    static func isNotification(_ n: PushNotification) -> Bool { !(n.title ?? "").isEmpty || !(n.message ?? "").isEmpty }

    /// The message as Honor takes it: a notification with a title and a body, or a data message
    /// with data; within Honor's size.
    public static func checkMessage(_ n: PushNotification, options: HonorOptions?) -> RequestMemberProblem? {
        let title = n.title ?? ""
        let message = n.message ?? ""
        if isNotification(n) {
            if title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                return RequestMemberProblem(field: "title", problem: "is required by Honor for a notification and must not be blank")
            }
            if message.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                return RequestMemberProblem(field: "message", problem: "is required by Honor for a notification (its body) and must not be blank")
            }
            if let image = n.image, !image.isEmpty {
                guard image.utf8.count <= HonorOptions.maxIntentLength, let c = URLComponents(string: image), c.scheme?.lowercased() == "https",
                    c.host?.isEmpty == false
                else { return RequestMemberProblem(field: "image", problem: "must be an https URL of at most 1024 characters for Honor") }
            }
        } else if n.data?.isEmpty ?? true {
            return RequestMemberProblem(
                field: "message", problem: "Honor sends a notification (title and message) or a data message (data): neither is given")
        }
        let dataBytes = n.data.map { JSONValue.object($0).jsonString.utf8.count } ?? 0
        if dataBytes > maxMessageBytes {
            return RequestMemberProblem(
                field: "data", problem: "is \(dataBytes) bytes as Honor's data text, a whole Honor message takes at most \(maxMessageBytes)",
                limit: "\(maxMessageBytes) bytes")
        }
        // Bounded before rendering: a megabyte title or message is refused on its byte count alone.
        let textBytes = title.utf8.count + message.utf8.count
        if textBytes > maxMessageBytes {
            return RequestMemberProblem(
                field: title.utf8.count > message.utf8.count ? "title" : "message",
                problem: "title and message are \(textBytes) bytes, a whole Honor message takes at most \(maxMessageBytes)",
                limit: "\(maxMessageBytes) bytes")
        }
        let size = render(n, options: options, importance: "NORMAL").1 + tokenAllowance
        if size > maxMessageBytes {
            return RequestMemberProblem(
                field: dataBytes > textBytes ? "data" : "message",
                problem: "makes a \(size)-byte Honor message, which takes at most \(maxMessageBytes)",
                limit: "\(maxMessageBytes) bytes")
        }
        return nil
    }

    public static func prepare(_ n: PushNotification, options: HonorOptions?, configuration c: HonorConfiguration) throws(PushFailure)
        -> HonorPreparedMessage
    {
        if let problem = check(n, options: options, defaultImportance: c.defaultImportance) { throw PushFailure(problem.description) }
        let importance = options?.importance ?? c.defaultImportance
        let (fields, _, dataBytes) = render(n, options: options, importance: importance)
        return HonorPreparedMessage(fields: fields, payloadBytes: dataBytes, isNotification: isNotification(n))
    }

    /// The message without its token, its JSON size and its data's.
    static func render(_ n: PushNotification, options: HonorOptions?, importance: String) -> (JSONObject, Int, Int) {
        let o = options ?? HonorOptions()
        var top: [(String, JSONValue)] = []
        var dataBytes = 0
        if let data = n.data, !data.isEmpty {
            let text = JSONValue.object(data).jsonString
            dataBytes = text.utf8.count
            top.append(("data", .string(text)))
        }
        var android: [(String, JSONValue)] = []
        if let ttl = n.timeToLive, ttl > 0 { android.append(("ttl", .string("\(min(ttl, maxTimeToLiveSeconds))s"))) }
        if let t = o.biTag { android.append(("biTag", .string(t))) }
        if isNotification(n) {
            var click: [(String, JSONValue)] = [("type", .int(o.clickType ?? 3))]
            if let s = o.intent { click.append(("intent", .string(s))) }
            if let s = o.url { click.append(("url", .string(s))) }
            if let s = o.action { click.append(("action", .string(s))) }
            var notification: [(String, JSONValue)] = [("title", .string(n.title ?? "")), ("body", .string(n.message ?? ""))]
            if let image = n.image, !image.isEmpty { notification.append(("image", .string(image))) }
            notification.append(("clickAction", .object(JSONObject(click))))
            notification.append(("importance", .string(importance)))
            if let s = o.tag { notification.append(("tag", .string(s))) }
            if let s = o.group { notification.append(("group", .string(s))) }
            if let i = o.notifyID { notification.append(("notifyId", .int(i))) }
            android.append(("notification", .object(JSONObject(notification))))
        }
        if o.testMode == true { android.append(("targetUserType", .int(1))) }
        if !android.isEmpty { top.append(("android", .object(JSONObject(android)))) }
        let object = JSONObject(top)
        return (object, JSONValue.object(object).jsonString.utf8.count, dataBytes)
    }

    /// An Honor push token: visible ASCII without quotes or backslashes, 1...512 bytes (Honor
    /// documents no format; its tokens are HMS-like, about 130 letters, digits and punctuation).
    public static func isToken(_ t: String) -> Bool {
        (1...512).contains(t.utf8.count) && t.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }
    }
}
