import ProviderKit
import PushgateCore

extension APNsModule {
    /// The payload in both environments: JSON, within its push type's limit once prepared.
    public func checkRendering(_ n: PushNotification, targets: [PushTarget]) -> [String] {
        var lines: [String] = []
        for production in [false, true] {
            let prepared: APNsPreparedPush
            do {
                prepared = try APNsPreparedPush(n, defaultTopic: "com.example.fuzz", defaultProduction: production)
            } catch {
                lines.append("APNsPreparedPush: \(error)")
                continue
            }
            lines.append("APNsPreparedPush: \(prepared.payload.count) bytes, \(prepared.headers)")
            RenderingCheck.mustBeJSON(prepared.payload, "APNs payload")
            precondition(prepared.payload.count <= prepared.pushType.payloadLimit, "APNs payload over its limit after the size check")
            _ = prepared.header("apns-topic")
        }
        return lines
    }
}
