// The platforms the suites send to are declared by their provider modules (`Platform.ios` in APNs,
// …), which the registry exports: the registry declares them all at once, so that numbers read back
// from stores are known whichever platform a test names first.
@_exported import Providers
@_exported import PushgateCore

/// Every registered provider's platforms (declares them; call before reading a store written by
/// another process).
public let registeredPlatforms: [Platform] = ProviderRegistry.platforms
