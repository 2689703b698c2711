import Foundation
import NIOCore
import PushgateCore

/// One notification rendered for APNs: payload bytes and the headers shared by every token and retry.
/// Per-delivery headers (`authorization`, `apns-id`) are added by `APNsProvider.send`.
public struct APNsPreparedPush: PreparedPush {
    public let pushType: APNsPushType
    /// `apns-topic`.
    public let topic: String
    /// `apns-priority` (nil: header omitted, APNs default 10).
    public let priority: Int?
    /// `apns-expiration` (nil: header omitted).
    public let expiration: Int64?
    /// `apns-collapse-id`.
    public let collapseID: String?
    /// The environment this notification goes to.
    public let production: Bool
    /// The exact payload bytes (size-checked).
    public let payload: [UInt8]
    /// `apns-push-type`, `apns-topic` and, when set, `apns-expiration`, `apns-priority`, `apns-collapse-id`.
    public let headers: [(String, String)]
    /// The payload as a ByteBuffer, shared (copy-on-write) by every request.
    public let body: ByteBuffer
    /// The app's bundle id (the topic without the push type's suffix): the broadcast path's.
    public let bundleID: String
    /// The headers of a broadcast to a channel (`apns-push-type: liveactivity` and, when set,
    /// `apns-expiration`, `apns-priority`); `apns-channel-id` is added per channel. Empty when the
    /// push type is not `liveactivity`.
    public let broadcastHeaders: [(String, String)]

    /// The index in `APNsConfiguration.signingKeys` of the key that signs it, and that key's id
    /// (set by the provider's `prepare`).
    public internal(set) var signingKey = 0
    public internal(set) var signingKeyID: String?

    /// `apns_id`: every delivery's `apns-id` (else each gets a new UUID).
    public private(set) var messageID: String?

    /// The payload's size, which the push type's limit applies to.
    public var payloadBytes: Int? { payload.count }

    public var payloadString: String { String(decoding: payload, as: UTF8.self) }

    public func header(_ name: String) -> String? { headers.first(where: { $0.0 == name })?.1 }

    /// Validates and renders a notification. Throws a `PushFailure` naming the field, or
    /// `PayloadTooLarge (N > LIMIT bytes)` for a payload over the push type's limit.
    public init(_ n: PushNotification, defaultTopic: String?, defaultProduction: Bool) throws(PushFailure) {
        let type = try APNsPushType.of(n)
        pushType = type

        let base: String
        if let t = n.topic, !t.isEmpty {
            base = t
        } else if let t = defaultTopic, !t.isEmpty {
            base = t
        } else {
            throw PushFailure("topic: missing (set the notification's topic or ios.topic to the app's bundle id)")
        }
        guard !base.contains(where: { $0 == "\r" || $0 == "\n" }) else { throw PushFailure("topic: contains a line break") }
        topic = type.topic(for: base)
        bundleID = type.bundleID(of: base)

        if let forced = type.forcedPriority {
            priority = forced
        } else {
            switch n.priority?.lowercased() {
            case "normal", "5": priority = 5
            case "high", "10": priority = 10
            case "1": priority = 1
            default: priority = nil
            }
        }

        if let forced = type.forcedExpiration {
            expiration = forced
        } else if let e = n.expiration {
            guard e >= 0 else { throw PushFailure("expiration: must be epoch seconds (0 or more), got \(e)") }
            expiration = e
        } else {
            expiration = nil
        }

        if let c = n.collapseID, !c.isEmpty {
            let size = c.utf8.count
            guard size <= 64 else { throw PushFailure("collapse_id: \(size) bytes, APNs allows at most 64") }
            guard !c.contains(where: { $0 == "\r" || $0 == "\n" }) else { throw PushFailure("collapse_id: contains a line break") }
            collapseID = c
        } else {
            collapseID = nil
        }

        messageID = n.apnsID
        if let id = n.apnsID, !id.isEmpty, UUID(uuidString: id) == nil {
            throw PushFailure("apns_id: \"\(id)\" is not a UUID (8-4-4-4-12 hexadecimal digits)")
        }

        production = n.productionOverride ?? defaultProduction

        let bytes = try APNsPayload.render(n, pushType: type)
        // A broadcast carries up to 5 KB; a notification also sent to device tokens is held to their limit.
        let broadcastOnly = n.tokens.isEmpty && !(n.channels ?? []).isEmpty
        let limit = broadcastOnly ? max(type.payloadLimit, APNsPushType.broadcastPayloadLimit) : type.payloadLimit
        guard bytes.count <= limit else {
            throw PushFailure.payloadTooLarge(size: bytes.count, limit: limit)
        }
        payload = bytes
        body = ByteBuffer(bytes: bytes)

        var h: [(String, String)] = [("apns-push-type", type.name), ("apns-topic", topic)]
        if let expiration { h.append(("apns-expiration", String(expiration))) }
        if let priority { h.append(("apns-priority", String(priority))) }
        if let collapseID { h.append(("apns-collapse-id", collapseID)) }
        headers = h
        if type == .liveactivity {
            var b: [(String, String)] = [("apns-push-type", type.name)]
            if let expiration { b.append(("apns-expiration", String(expiration))) }
            if let priority { b.append(("apns-priority", String(priority))) }
            broadcastHeaders = b
        } else {
            broadcastHeaders = []
        }
    }
}
