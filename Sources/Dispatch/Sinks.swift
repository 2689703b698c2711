import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import PushgateCore

/// swift-metrics instruments, per app and platform (made on first use), fed by the delivery event stream.
final class MetricsSink: DeliveryEventSink {
    private let made = NIOLockedValueBox<[String: [Platform: PlatformMetrics]]>([:])

    init() {}

    private func metrics(_ job: DeliveryJob) -> PlatformMetrics { metrics(app: job.accepted.app, platform: job.platform) }

    /// A notification of `app` was sent as its fallback (`pushgate_payload_fallbacks_total`).
    func fallback(app: String, platform: Platform) { metrics(app: app, platform: platform).fallbacks.increment() }

    private func metrics(app: String, platform p: Platform) -> PlatformMetrics {
        made.withLockedValue { m in
            if let existing = m[app]?[p] { return existing }
            let new = PlatformMetrics(platform: p, app: app)
            m[app, default: [:]][p] = new
            return new
        }
    }

    func record(_ event: DeliveryEvent) {
        switch event {
        case .attempted(let job, let outcome, let started, let ended):
            let m: PlatformMetrics? = metrics(job)
            m?.attempt(className: outcome.className, seconds: ended.timeIntervalSince(started))
            if outcome.isDelivered { m?.latency(seconds: ended.timeIntervalSince(job.enqueuedAt)) }
        case .retrying(let job, _):
            metrics(job).retried()
        case .finished(let job, .skipped(let why), _, _):
            metrics(job).skipped(why)
        case .finished(let job, let outcome, let phase, _) where phase != .notServed:
            metrics(job).finished(className: outcome.isDelivered ? "delivered" : "failed")
        default:
            break
        }
    }
}

/// Failed deliveries to the feedback hook (not those of a platform that is not served).
extension FeedbackSender: DeliveryEventSink {
    public func record(_ event: DeliveryEvent) {
        if case .finished(_, _, let phase, let failure?) = event, phase != .notServed { post(failure) }
    }
}

/// The log lines of a delivery's life.
struct LogSink: DeliveryEventSink {
    let logger: Logger

    func record(_ event: DeliveryEvent) {
        switch event {
        case .retrying(let job, _):
            logger.debug(
                "retrying push",
                metadata: [
                    "notif_id": "\(job.accepted.notifID.logSafe())", "attempt": "\(job.attempts)",
                    "reason": "\((job.lastError ?? "").logSafe())",
                ])
        case .finished(let job, _, .afterSending, let e?):
            logger.info(
                "push failed",
                metadata: [
                    "notif_id": "\(e.notifID.logSafe())", "platform": "\(e.platform)", "token": "\(e.token.logSafe())",
                    "error": "\(e.error.logSafe())", "attempts": "\(job.attempts)",
                ])
        case .finished(let job, .skipped(let why), _, _):
            logger.debug(
                "push not sent: \(why.rawValue)",
                metadata: ["notif_id": "\(job.accepted.notifID.logSafe())", "platform": "\(job.platform.name)"])
        case .finished(_, _, .beforeSending, let e?):
            logger.info(
                "push failed before sending",
                metadata: ["notif_id": "\(e.notifID.logSafe())", "token": "\(e.token.logSafe())", "error": "\(e.error.logSafe())"])
        default:
            break
        }
    }
}
