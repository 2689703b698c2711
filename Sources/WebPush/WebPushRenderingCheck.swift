import Foundation
import ProviderKit
import PushgateCore

extension WebPushModule {
    /// The request checks and the plaintext (JSON unless the request gave its own payload); the TTL
    /// at the ends of time.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        var lines = ["WebPushRequestValidator.validate: \(WebPushRequestValidator.validate(n) ?? "ok")"]
        do {
            let prepared = try WebPushRequestValidator.prepare(n)
            lines.append(
                "WebPushRequestValidator.prepare: \(prepared.plaintext.count) bytes, ttl \(prepared.ttl), urgency \(prepared.urgency ?? "-"), topic \(prepared.topic ?? "-")"
            )
            _ = prepared.ttlSeconds()
            _ = prepared.ttlSeconds(now: Date(timeIntervalSince1970: 0))
            _ = prepared.ttlSeconds(now: Date(timeIntervalSince1970: 1e12))
            if n.payload == nil { RenderingCheck.mustBeJSON(prepared.plaintext, "Web Push plaintext") }
        } catch {
            lines.append("WebPushRequestValidator.prepare: \(error)")
        }
        return lines
    }
}
