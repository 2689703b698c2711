import Foundation
import HTTPTypes
import Hummingbird
import PushDispatch
import PushgateCore
import ServiceLifecycle

/// Why a parsed, valid request was not queued: the answer's error (429, 503, 507 or 500) and, but
/// for 500, the seconds to wait before trying again.
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
    /// Refused: 429 over the app's rate, 503 queue (or the app's share) full or the store cannot take
    /// writes (507 its disk is full), 500 the store failed otherwise;
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
        } catch let fault as StoreUnavailableError {
            // The store cannot take writes (full disk, I/O error, database unreachable or too slow):
            // nothing was queued; the client is told the cause, never the store's own message.
            limiter?.refund(deliveries)
            let e = RequestError(
                status: fault.httpStatus, message: "Not queued: \(fault), try again later.", detail: "store_\(fault.cause.rawValue)")
            return .failure(IngestRefusal(error: e, retryAfter: fault.retryAfter))
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

    /// Why the gateway cannot take work now (nil: it can): a graceful shutdown started, the queue's
    /// store refuses writes, or no provider is enabled. `/readyz` answers 503 with it and gRPC
    /// `Health/Check` NOT_SERVING; `/healthz` (liveness) does not look at it.
    public var notReadyReason: String? {
        if isDraining { return "the gateway is shutting down" }
        if let problem = dispatcher.queue.storeProblem { return problem.description }
        if !dispatcher.hasProviders { return "no provider is enabled" }
        return nil
    }

    /// Readiness, for load balancers: 200 while the gateway takes work, else 503 naming why
    /// (`notReadyReason`), with `Retry-After`. Open, as the health route is.
    static let readyRoute = "/readyz"

    func readiness(head: Bool = false) -> Response {
        guard let reason = notReadyReason else {
            return head ? Response(status: .ok, headers: Self.jsonHeaders) : json(.ok, Array(#"{"status":"ready"}"#.utf8))
        }
        var response = error(RequestError(status: 503, message: "Not ready.", detail: reason))
        response.headers[.retryAfter] = "1"
        if head { response.body = .init() }
        return response
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
