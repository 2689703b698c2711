import ProviderKit
import PushgateCore

extension HarmonyModule {
    /// The body for every token: JSON, within the size once prepared.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        do {
            let prepared = try HarmonyMessageMapper.prepare(n)
            for token in n.tokens {
                let body = prepared.body(token: token)
                RenderingCheck.mustBeJSON(body, "HarmonyOS body")
                precondition(body.count <= HarmonyMessageMapper.maxMessageSize, "HarmonyOS body over 4096 bytes after prepare")
            }
            return ["HarmonyMessageMapper.prepare: push-type \(prepared.pushType.rawValue)"]
        } catch {
            return ["HarmonyMessageMapper.prepare: \(error)"]
        }
    }
}
