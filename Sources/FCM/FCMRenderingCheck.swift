import ProviderKit
import PushgateCore

extension FCMModule {
    /// The message for every target (and an empty token, a topic path, a topic send): JSON; within
    /// FCM's size once prepared.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        var lines: [String] = []
        let rendered: FCMPreparedMessage?
        do { rendered = try FCMMessageMapper.render(n) } catch {
            rendered = nil
            lines.append("FCMMessageMapper.render: \(error)")
        }
        if let rendered {
            lines.append("FCMMessageMapper.render: \(rendered.messageJSONWithoutTarget.prefix(300))")
            RenderingCheck.mustBeJSON(rendered, targets: targets + [.token(""), .token("/topics/fuzz"), .topic], "FCM")
        }
        do {
            let prepared = try FCMMessageMapper.prepare(n)
            lines.append("FCMMessageMapper.prepare: ok")
            RenderingCheck.mustFit(prepared, targets: targets, limit: FCMMessageMapper.maxMessageSize, "FCM")
        } catch {
            lines.append("FCMMessageMapper.prepare: \(error)")
        }
        return lines
    }
}
