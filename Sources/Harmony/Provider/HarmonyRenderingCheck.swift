import ProviderKit
import PushgateCore

extension HarmonyModule {
    /// The body for every token: JSON, within the size once prepared.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        do {
            let prepared = try HarmonyMessageMapper.prepare(n)
            for token in n.tokens {
                RenderingCheck.mustBeJSON(prepared.body(token: token), within: HarmonyMessageMapper.maxMessageSize, "HarmonyOS body")
            }
            return ["HarmonyMessageMapper.prepare: push-type \(prepared.pushType.rawValue)"]
        } catch {
            return ["HarmonyMessageMapper.prepare: \(error)"]
        }
    }
}
