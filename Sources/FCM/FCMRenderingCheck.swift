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
            RenderingCheck.mustBeJSON(Array(rendered.messageJSONWithoutTarget.utf8), "FCM message without target")
            for target in targets + [.token(""), .token("/topics/fuzz"), .topic] {
                if let body = rendered.body(for: target) { RenderingCheck.mustBeJSON(body, "FCM body for \(target)") }
            }
        }
        do {
            let prepared = try FCMMessageMapper.prepare(n)
            lines.append("FCMMessageMapper.prepare: ok")
            for target in targets {
                precondition(prepared.size(for: target) <= FCMMessageMapper.maxMessageSize, "FCM body over 4096 bytes after prepare")
            }
        } catch {
            lines.append("FCMMessageMapper.prepare: \(error)")
        }
        return lines
    }
}
