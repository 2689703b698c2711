import ProviderKit
import PushgateCore

extension HonorModule {
    /// With an app default importance: what `prepare` takes renders as JSON within Honor's size for
    /// any well-formed token (the longest included).
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        do {
            let c = try HonorConfiguration(appID: "100", clientID: "fuzz", clientSecret: "fuzz", defaultImportance: "LOW")
            let prepared = try HonorMessageMapper.prepare(n, options: try HonorRequestMember.options(of: n), configuration: c)
            for token in n.tokens + [String(repeating: "t", count: 512)] where HonorMessageMapper.isToken(token) {
                RenderingCheck.mustBeJSON(prepared.body(token: token), within: HonorMessageMapper.maxMessageBytes, "Honor body")
            }
            return ["HonorMessageMapper.prepare: \(prepared.isNotification ? "notification" : "data") message"]
        } catch {
            return ["HonorMessageMapper.prepare: \(error)"]
        }
    }
}
