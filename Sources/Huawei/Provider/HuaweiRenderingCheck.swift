import ProviderKit
import PushgateCore

extension HuaweiModule {
    /// The message for every target (and an empty token, a topic send): JSON; within HMS's size
    /// once prepared.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        var lines: [String] = []
        let rendered = HuaweiMessageMapper.render(n)
        lines.append("HuaweiMessageMapper.render: \(rendered.messageJSONWithoutTarget.prefix(300))")
        RenderingCheck.mustBeJSON(Array(rendered.messageJSONWithoutTarget.utf8), "HMS message without target")
        for target in targets + [.token(""), .topic] {
            if let body = rendered.body(for: target) { RenderingCheck.mustBeJSON(body, "HMS body for \(target)") }
        }
        do {
            let prepared = try HuaweiMessageMapper.prepare(n)
            lines.append("HuaweiMessageMapper.prepare: ok")
            for target in targets {
                precondition(prepared.size(for: target) <= HuaweiMessageMapper.maxMessageSize, "HMS body over 4096 bytes after prepare")
            }
        } catch {
            lines.append("HuaweiMessageMapper.prepare: \(error)")
        }
        return lines
    }
}
