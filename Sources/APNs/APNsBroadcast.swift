import ProviderKit
import PushgateCore

/// APNs broadcast push (iOS 18 Live Activities on a channel): the rules of channel ids and of the
/// fields that go with them (docs/apns-broadcast.md).
public enum APNsBroadcast {
    /// Longest channel id accepted (Apple's are base64 of a few dozen bytes; `apns-channel-id` is a header).
    public static let maxChannelIDBytes = 256

    /// Whether `id` can be an APNs channel id: 1 to 256 bytes of base64 (standard or URL-safe
    /// alphabet, `=` padding). Anything else is what APNs answers BadChannelId.
    public static func isValidChannelID(_ id: String) -> Bool {
        let u = id.utf8
        guard !u.isEmpty, u.count <= maxChannelIDBytes else { return false }
        return u.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2B || b == 0x2F || b == 0x3D
                || b == 0x2D || b == 0x5F
        }
    }

    /// The ingest problem of a notification's broadcast fields (`channels`, `input-push-channel`,
    /// `input-push-token`), nil when they are fine or absent.
    public static func check(_ n: PushNotification) -> IngestProblem? {
        let event = n.event?.lowercased()
        if let channels = n.channels, !channels.isEmpty {
            if let raw = n.pushType, !raw.isEmpty, raw.lowercased() != APNsPushType.liveactivity.name {
                return IngestProblem(
                    message: "Invalid push_type.",
                    detail: "push_type: broadcast channels carry Live Activity updates (push_type liveactivity), not \(raw.logSafe(max: 64))")
            }
            for (k, id) in channels.enumerated() where !isValidChannelID(id) {
                return IngestProblem(
                    message: "Invalid channel id.",
                    detail: "channels[\(k)]: not an APNs channel id (1-\(maxChannelIDBytes) bytes of base64, as POST /api/apns/channels returns)")
            }
            if event == "start" {
                return IngestProblem(
                    message: "Invalid event.",
                    detail: "event: a broadcast cannot start a Live Activity (send event start to push-to-start tokens, with input-push-channel)")
            }
        }
        if let id = n.inputPushChannel, !id.isEmpty {
            guard isValidChannelID(id) else {
                return IngestProblem(
                    message: "Invalid input-push-channel.",
                    detail: "input-push-channel: not an APNs channel id (1-\(maxChannelIDBytes) bytes of base64)")
            }
            guard event == "start" else {
                return IngestProblem(
                    message: "Invalid input-push-channel.", detail: "input-push-channel: only with event start (it subscribes the activity it starts)"
                )
            }
        }
        if n.inputPushToken == true, event != "start" {
            return IngestProblem(
                message: "Invalid input-push-token.",
                detail: "input-push-token: only with event start (it asks the activity it starts for a push token)")
        }
        return nil
    }
}
