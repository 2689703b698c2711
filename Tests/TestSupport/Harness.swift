import Foundation
import PushgateCore

/// A provider under test with the mock servers it talks to (APNs, FCM, Web Push suites).
public protocol ProviderHarness: Sendable {
    associatedtype Provider: PushProvider
    var provider: Provider { get }
    /// Stops the provider, then the mocks and their event loops.
    func shutdown() async throws
}

extension ProviderHarness {
    /// One delivery attempt as the dispatcher makes it: prepare, then send.
    public func attempt(
        _ n: PushNotification, to target: PushTarget, messageID: String = UUID().uuidString.lowercased()
    ) async throws -> SendOutcome {
        let prepared = try provider.prepare(n)
        return await provider.send(prepared, to: target, context: DeliveryContext(messageID: messageID))
    }
}

/// Runs `body` with a harness made by `make`, shutting it down afterwards whether `body` threw or not.
public func withHarness<H: ProviderHarness>(
    _ make: () async throws -> H, _ body: (H) async throws -> Void
) async throws {
    let h = try await make()
    do {
        try await body(h)
    } catch {
        try? await h.shutdown()
        throw error
    }
    try await h.shutdown()
}

extension PushNotification {
    /// The test suites' notification builder: a platform, its tokens, a message, then any field.
    public static func test(
        _ platform: Platform, tokens: [String] = [], message: String? = nil,
        _ configure: (inout PushNotification) -> Void = { _ in }
    ) -> PushNotification {
        var n = PushNotification(platform: platform, tokens: tokens)
        n.message = message
        configure(&n)
        return n
    }
}
