import PushgateCore

/// One APNs push type (`apns-push-type`) and the rules APNs attaches to it: the topic suffix,
/// a forced priority or expiration, whether `content-available` is required, and the payload limit.
public struct APNsPushType: Sendable, Hashable, CustomStringConvertible {
    /// The `apns-push-type` header value.
    public let name: String
    /// Appended to the bundle id to form `apns-topic` (nil: the topic is used as given).
    public let topicSuffix: String?
    /// Priority APNs requires for this type, overriding the request's `priority`.
    public let forcedPriority: Int?
    /// Expiration APNs requires for this type, overriding the request's `expiration`.
    public let forcedExpiration: Int64?
    /// `aps.content-available: 1` is always set.
    public let forcesContentAvailable: Bool
    /// Largest payload APNs accepts for this type, in bytes.
    public let payloadLimit: Int

    public init(
        name: String, topicSuffix: String? = nil, forcedPriority: Int? = nil, forcedExpiration: Int64? = nil,
        forcesContentAvailable: Bool = false, payloadLimit: Int = APNsPushType.defaultPayloadLimit
    ) {
        self.name = name
        self.topicSuffix = topicSuffix
        self.forcedPriority = forcedPriority
        self.forcedExpiration = forcedExpiration
        self.forcesContentAvailable = forcesContentAvailable
        self.payloadLimit = payloadLimit
    }

    public static let defaultPayloadLimit = 4096
    public static let voipPayloadLimit = 5120
    /// A broadcast (`POST /4/broadcasts/apps/<bundle id>`) carries up to 5 KB (docs/apns-broadcast.md).
    public static let broadcastPayloadLimit = 5120

    public static let alert = APNsPushType(name: "alert")
    public static let background = APNsPushType(name: "background", forcedPriority: 5, forcesContentAvailable: true)
    public static let voip = APNsPushType(name: "voip", topicSuffix: ".voip", forcedPriority: 10, payloadLimit: voipPayloadLimit)
    public static let location = APNsPushType(name: "location", topicSuffix: ".location-query")
    public static let complication = APNsPushType(name: "complication", topicSuffix: ".complication")
    public static let fileprovider = APNsPushType(name: "fileprovider", topicSuffix: ".pushkit.fileprovider")
    public static let mdm = APNsPushType(name: "mdm")
    public static let liveactivity = APNsPushType(name: "liveactivity", topicSuffix: ".push-type.liveactivity")
    public static let pushtotalk = APNsPushType(name: "pushtotalk", topicSuffix: ".voip-ptt", forcedPriority: 10, forcedExpiration: 0)
    public static let widgets = APNsPushType(name: "widgets", topicSuffix: ".push-type.widgets")

    /// Every push type APNs knows, in documentation order.
    public static let all: [APNsPushType] = [
        .alert, .background, .voip, .location, .complication, .fileprovider, .mdm, .liveactivity, .pushtotalk, .widgets,
    ]

    /// Looks a push type up by its `push_type` name (case-insensitive); nil when unknown.
    public static func named(_ name: String) -> APNsPushType? {
        let lower = name.lowercased()
        return all.first(where: { $0.name == lower })
    }

    /// The push type a notification asks for: `push_type`, default `alert` (gorush's default).
    /// Throws a `PushFailure` naming the field for an unknown value.
    /// A notification with broadcast `channels` and no `push_type` is a Live Activity update.
    public static func of(_ notification: PushNotification) throws(PushFailure) -> APNsPushType {
        guard let raw = notification.pushType, !raw.isEmpty else {
            return (notification.channels?.isEmpty ?? true) ? .alert : .liveactivity
        }
        guard let type = named(raw) else {
            throw PushFailure("push_type: unknown APNs push type \"\(raw)\" (expected one of \(all.map(\.name).joined(separator: ", ")))")
        }
        return type
    }

    /// `apns-topic` for a bundle id (or a topic the client already suffixed: never appended twice).
    public func topic(for base: String) -> String {
        guard let suffix = topicSuffix, !base.hasSuffix(suffix) else { return base }
        return base + suffix
    }

    /// The bundle id of a topic: `topic(for:)` undone (the suffix dropped when the topic has it).
    public func bundleID(of topic: String) -> String {
        guard let suffix = topicSuffix, topic.hasSuffix(suffix), topic.utf8.count > suffix.utf8.count else { return topic }
        return String(topic.dropLast(suffix.count))
    }

    public var description: String { name }
}
