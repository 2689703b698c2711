import Foundation
import PushDispatch
import PushgateCore
import ServiceLifecycle

/// Readiness and draining: whether the gateway takes work now.
extension Gateway {
    /// True from the start of a graceful shutdown (after the HTTP server stopped taking requests):
    /// the gateway takes no more work (gRPC `Health/Check` answers NOT_SERVING, `Send` UNAVAILABLE).
    public var isDraining: Bool { draining.withLockedValue { $0 } }

    /// Why the gateway cannot take work now (nil: it can): a graceful shutdown started, the queue's
    /// store refuses writes, or no provider is enabled. `/readyz` answers 503 with it and gRPC
    /// `Health/Check` NOT_SERVING; `/healthz` (liveness) does not look at it.
    public var notReadyReason: String? {
        if isDraining { return "the gateway is shutting down" }
        if let problem = dispatcher.queue.storeProblem { return problem.description }
        if !dispatcher.hasProviders { return "no provider is enabled" }
        return nil
    }

    /// Each served app's providers' own state (`PushProvider.health`), by app id then registry order.
    /// A failing provider does not make the gateway unready: it is one app's configuration error,
    /// and the gateway still serves every other provider and app (`/readyz` lists it in its body).
    public var providerHealth: [(app: String, platform: Platform, health: ProviderHealth)] {
        var out: [(app: String, platform: Platform, health: ProviderHealth)] = []
        for a in dispatcher.allApps.sorted(by: { $0.id < $1.id }) {
            for p in ProviderRegistry.platforms {
                guard let slot = a.slots[p] else { continue }
                out.append((a.id, p, slot.provider.health))
            }
        }
        return out
    }

    /// A service that marks the gateway draining when graceful shutdown reaches it: run it after the
    /// application in the same service group (`[app, gateway.drainSignal]`) and it is reached first, at
    /// SIGTERM, before the HTTP server finishes its requests.
    public var drainSignal: any Service { DrainSignalService(gateway: self) }
}

/// Marks the gateway as draining when graceful shutdown reaches it: it is shut down right after the
/// HTTP server (before the workers drain the queue), so services that outlive the HTTP server (gRPC)
/// stop taking work from then on.
struct DrainSignalService: Service {
    let gateway: Gateway

    func run() async throws {
        try? await gracefulShutdown()
        gateway.draining.withLockedValue { $0 = true }
    }
}
