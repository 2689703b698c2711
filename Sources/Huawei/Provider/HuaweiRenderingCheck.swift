import ProviderKit
import PushgateCore

extension HuaweiModule {
    /// The message for every target (and an empty token, a topic send): JSON; within HMS's size
    /// once prepared.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        var lines: [String] = []
        let rendered = HuaweiMessageMapper.render(n)
        lines.append("HuaweiMessageMapper.render: \(rendered.messageJSONWithoutTarget.prefix(300))")
        RenderingCheck.mustBeJSON(rendered, targets: targets + [.token(""), .topic], "HMS")
        do {
            let prepared = try HuaweiMessageMapper.prepare(n)
            lines.append("HuaweiMessageMapper.prepare: ok")
            RenderingCheck.mustFit(prepared, targets: targets, limit: HuaweiMessageMapper.maxMessageSize, "HMS")
        } catch {
            lines.append("HuaweiMessageMapper.prepare: \(error)")
        }
        return lines
    }
}
