import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import PushgateCore

/// swift-metrics instruments, per app and platform (made on first use), fed by the delivery event stream.
final class MetricsSink: DeliveryEventSink {
    /// By app and platform, one level: found with one hash per event (two levels were two).
    private let made = NIOLockedValueBox<[AppPlatform: PlatformMetrics]>([:])

    private struct AppPlatform: Hashable {
        var app: String
        var platform: Platform
    }

    init() {}

    private func metrics(_ job: DeliveryJob) -> PlatformMetrics { metrics(app: job.accepted.app, platform: job.platform) }

    /// A notification of `app` was sent as its fallback (`pushgate_payload_fallbacks_total`).
    func fallback(app: String, platform: Platform) { metrics(app: app, platform: platform).fallbacks.increment() }

    private func metrics(app: String, platform p: Platform) -> PlatformMetrics {
        let key = AppPlatform(app: app, platform: p)
        return made.withLockedValue { m in
            if let existing = m[key] { return existing }
            let new = PlatformMetrics(platform: p, app: app)
            m[key] = new
            return new
        }
    }

    func record(_ event: borrowing DeliveryEvent) {
        switch event {
        case .attempted(let job, let outcome, let started, let ended):
            let m: PlatformMetrics? = metrics(job)
            m?.attempt(outcome, seconds: ended.timeIntervalSince(started))
            if outcome.isDelivered { m?.latency(seconds: ended.timeIntervalSince(job.enqueuedAt)) }
        case .retrying(let job, _):
            metrics(job).retried()
        case .finished(let job, .skipped(let why), _, _):
            metrics(job).skipped(why)
        case .finished(let job, let outcome, let phase, _) where phase != .notServed:
            metrics(job).finished(delivered: outcome.isDelivered)
        default:
            break
        }
    }
}

/// Failed deliveries to the feedback hook (not those of a platform that is not served).
extension FeedbackSender: DeliveryEventSink {
    public func record(_ event: borrowing DeliveryEvent) {
        switch event {
        case .finished(_, _, let phase, let failure?) where phase != .notServed: post(failure)
        default: break
        }
    }
}

/// The log lines of a delivery's life.
struct LogSink: DeliveryEventSink {
    let logger: Logger

    func record(_ event: borrowing DeliveryEvent) {
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

/// swift-metrics instruments for one platform, made once.
/// A class: handed out per event, a struct of six dictionaries and three instruments cost a retain
/// and release of each member per copy.
final class PlatformMetrics: Sendable {
    let platform: Platform
    /// By `SendOutcome.classIndex`.
    let attempts: [Counter]
    let delivered: Counter
    let failed: Counter
    let retries: Counter
    let skips: [SkipReason: Counter]
    /// Notifications sent as their `fallback` (over the provider's limit).
    let fallbacks: Counter
    let sendDuration: Timer
    let deliveryLatency: Timer

    init(platform: Platform, app: String = AppID.defaultApp) {
        self.platform = platform
        let p = ("provider", platform.name)
        let appLabel = ("app", app)
        attempts = SendOutcome.classNames.map { c in
            Counter(label: "pushgate_provider_responses_total", dimensions: [appLabel, p, ("class", c)])
        }
        delivered = Counter(label: "pushgate_push_success_total", dimensions: [appLabel, p])
        failed = Counter(label: "pushgate_push_error_total", dimensions: [appLabel, p])
        retries = Counter(label: "pushgate_push_retry_total", dimensions: [appLabel, p])
        var sk: [SkipReason: Counter] = [:]
        for why in [SkipReason.duplicate, .coalesced, .cancelled, .quietHours] {
            sk[why] = Counter(label: "pushgate_push_skipped_total", dimensions: [appLabel, p, ("reason", why.rawValue)])
        }
        skips = sk
        fallbacks = Counter(label: "pushgate_payload_fallbacks_total", dimensions: [appLabel, p])
        sendDuration = Timer(label: "pushgate_provider_request_duration_seconds", dimensions: [appLabel, p], preferredDisplayUnit: .seconds)
        deliveryLatency = Timer(label: "pushgate_delivery_latency_seconds", dimensions: [appLabel, p], preferredDisplayUnit: .seconds)
    }

    func attempt(_ outcome: SendOutcome, seconds: Double) {
        attempts[outcome.classIndex].increment()
        sendDuration.recordNanoseconds(Self.nanoseconds(seconds))
    }

    func latency(seconds: Double) { deliveryLatency.recordNanoseconds(Self.nanoseconds(seconds)) }

    /// Seconds as nanoseconds for a timer, 0 to 1e6 s: a clock step can make a difference negative or
    /// absurd, and `Int64(Double)` traps out of range.
    static func nanoseconds(_ seconds: Double) -> Int64 {
        guard seconds.isFinite, seconds > 0 else { return 0 }
        return Int64(min(seconds, 1e6) * 1e9)
    }
    func retried() { retries.increment() }
    func skipped(_ why: SkipReason) { skips[why]?.increment() }
    func finished(delivered isDelivered: Bool) { (isDelivered ? delivered : failed).increment() }
}
