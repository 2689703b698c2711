import Foundation
import PushDispatch
import PushgateCore
import ServiceLifecycle

/// Why a parsed, valid request was not queued: the answer's error (429, 503 or 500) and, for the
/// first two, the seconds to wait before trying again.
public struct IngestRefusal: Error, Sendable {
    public var error: RequestError
    public var retryAfter: Int?
}

/// The steps of `POST /api/push` after the body is parsed, shared with the other ingest (gRPC `Send`):
/// the same field checks, rate limit, queue, durability and status records.
extension Gateway {
    /// Each notification's field checks (the gateway's, then its provider module's), as the 400 that
    /// names the field: `notifications[i].<field>`.
    public static func fieldProblem(_ parsed: PushRequest) -> RequestError? {
        for (i, n) in parsed.notifications.enumerated() {
            if let problem = IngestValidation.validate(n) {
                return RequestError(message: problem.message, detail: "notifications[\(i)].\(problem.detail)")
            }
        }
        return nil
    }

    /// The app's rate limit, then the queue: what `/api/push` does with a checked request of `app`.
    /// Refused: 429 over the app's rate, 503 queue (or the app's share) full, 500 the store failed;
    /// nothing was queued then and the rate limiter is refunded.
    public func admit(_ parsed: PushRequest, app: String, sync: Bool, requestID: String? = nil) async -> Result<SubmitResult, IngestRefusal> {
        let limiter = runtime.withLockedValue { $0.limiters[app] }
        let deliveries = Self.deliveryCount(parsed)
        if let limiter, let wait = limiter.take(deliveries) {
            let e = RequestError(
                status: 429, message: "Too many requests, try again later.",
                detail: "app \(app) accepts \(limiter.rate) deliveries per second (rate_limit)")
            return .failure(IngestRefusal(error: e, retryAfter: wait))
        }
        do {
            return .success(try await dispatcher.submit(parsed, sync: sync, app: app, requestID: requestID))
        } catch let full as QueueFullError {
            limiter?.refund(deliveries)  // nothing was queued
            let e = RequestError(
                status: 503, message: full.app == nil ? "Queue is full, try again later." : "App's share of the queue is full, try again later.",
                detail: full.description)
            return .failure(IngestRefusal(error: e, retryAfter: full.retryAfter))
        } catch {
            // The store's error stays in the log: it can name tables, paths or values of other requests.
            limiter?.refund(deliveries)
            logger.error("push submission failed: \(error)")
            return .failure(
                IngestRefusal(
                    error: RequestError(status: 500, message: "Internal error.", detail: "the request was not queued; see the gateway log"),
                    retryAfter: nil))
        }
    }

    /// True from the start of a graceful shutdown (after the HTTP server stopped taking requests):
    /// the gateway takes no more work (gRPC `Health/Check` answers NOT_SERVING, `Send` UNAVAILABLE).
    public var isDraining: Bool { draining.withLockedValue { $0 } }

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
