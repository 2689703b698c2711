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
                let body = prepared.body(token: token)
                RenderingCheck.mustBeJSON(body, "Honor body")
                precondition(body.count <= HonorMessageMapper.maxMessageBytes, "Honor body over 4096 bytes after prepare")
            }
            return ["HonorMessageMapper.prepare: \(prepared.isNotification ? "notification" : "data") message"]
        } catch {
            return ["HonorMessageMapper.prepare: \(error)"]
        }
    }
}
