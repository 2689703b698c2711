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
