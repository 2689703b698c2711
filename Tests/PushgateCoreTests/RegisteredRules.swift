import GatewayCore
import PushgateCore

extension RequestLimits {
    /// The defaults with the registered provider modules' platform rules, as the gateway parses with
    /// (PushgateCore has no platform rules of its own).
    static var registered: RequestLimits { ProviderRegistry.requestLimits }
}

extension PushNotification {
    /// The rules its platform's provider module declares.
    var registeredRules: PlatformRules? { ProviderRegistry.platformRules[platform] }
}

extension RequestParser {
    /// A body as the gateway takes it: parsed, then held to the request's rules as a whole
    /// (`RequestLimits.check`, which the gateway runs for every way in).
    static func parseChecked(_ body: [UInt8], limits: RequestLimits) throws(RequestError) -> PushRequest {
        let request = try parse(body, limits: limits)
        if let problem = limits.check(request) { throw problem }
        return request
    }
}
