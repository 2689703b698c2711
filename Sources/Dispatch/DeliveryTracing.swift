import Foundation
import PushgateCore
import Tracing

/// W3C Trace Context as Pushgate carries it: the `traceparent` of a request's ingest span is kept
/// with each accepted notification (`AcceptedNotification.traceParent`, the durable stores' column
/// `traceparent`), and each delivery attempt's span is started as its child, whenever and wherever
/// the delivery runs. Read and written by the bootstrapped instrument (swift-otel's W3C propagator
/// in `serve`); with none bootstrapped nothing is injected and every helper returns nil.
public enum TraceContext {
    /// Longest `tracestate` passed on (W3C: at most 32 list members; 512 characters is what a
    /// vendor must propagate).
    public static let maxTraceStateBytes = 512

    struct DictionaryExtractor: Extractor {
        func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
    }

    struct DictionaryInjector: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
    }

    /// The `traceparent` of `context` (a span's), nil when the instrument injects none (the no-op one).
    public static func traceParent(of context: ServiceContext, instrument: any Instrument = InstrumentationSystem.instrument) -> String? {
        var headers: [String: String] = [:]
        instrument.inject(context, into: &headers, using: DictionaryInjector())
        return headers["traceparent"]
    }

    /// The parent context for a span: `traceParent` (and `traceState`) when they are well-formed,
    /// else a top-level context (a new trace). Checked here first, so that what a client sends never
    /// reaches the instrument's parser (which logs what it cannot parse) unless it is valid.
    public static func context(
        traceParent: String?, traceState: String? = nil, instrument: any Instrument = InstrumentationSystem.instrument
    ) -> ServiceContext {
        var context = ServiceContext.topLevel
        guard let traceParent, isValid(traceParent: traceParent) else { return context }
        var headers = ["traceparent": traceParent]
        if let traceState, isValid(traceState: traceState) { headers["tracestate"] = traceState }
        instrument.extract(headers, into: &context, using: DictionaryExtractor())
        return context
    }

    /// A version-00 `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not all zero.
    public static func isValid(traceParent s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count == 55, u[0] == UInt8(ascii: "0"), u[1] == UInt8(ascii: "0"), u[2] == UInt8(ascii: "-"), u[35] == UInt8(ascii: "-"),
            u[52] == UInt8(ascii: "-")
        else { return false }
        func hex(_ r: Range<Int>) -> Bool { u[r].allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) } }
        func zero(_ r: Range<Int>) -> Bool { u[r].allSatisfy { $0 == 0x30 } }
        return hex(3..<35) && hex(36..<52) && hex(53..<55) && !zero(3..<35) && !zero(36..<52)
    }

    /// A `tracestate` of at most 32 `key=value` members, `maxTraceStateBytes`, printable ASCII.
    public static func isValid(traceState s: String) -> Bool {
        guard !s.isEmpty, s.utf8.count <= maxTraceStateBytes, s.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else { return false }
        let members = s.split(separator: ",", omittingEmptySubsequences: false)
        guard members.count <= 32 else { return false }
        for m in members {
            let t = m.trimmingCharacters(in: .whitespaces)
            let kv = t.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard kv.count == 2, !kv[0].isEmpty, kv[0].utf8.count <= 256, !kv[1].isEmpty, kv[1].utf8.count <= 256,
                kv[0].utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || "_-*/@".utf8.contains($0) }),
                !kv[1].contains("="), kv[1].last != " "
            else { return false }
        }
        return true
    }
}

extension Dispatcher {
    /// One delivery attempt inside a span (`tracing` on): the child of the request's ingest span
    /// (`AcceptedNotification.traceParent`), a client span around `provider.send`, ended once the
    /// attempt's outcome is known (delivered, retry or failed).
    func sendTraced(
        _ job: DeliveryJob, prepared: any PreparedPush, provider: any PushProvider, started: Date
    ) async -> DeliveryTransition {
        let parent = TraceContext.context(traceParent: job.accepted.traceParent)
        let span = startSpan("pushgate.deliver \(job.platform.name)", context: parent, ofKind: .client)
        span.attributes["pushgate.platform"] = job.platform.name
        span.attributes["pushgate.app"] = job.accepted.app
        span.attributes["pushgate.notif_id"] = job.accepted.notifID
        span.attributes["pushgate.message_id"] = job.messageID
        span.attributes["pushgate.attempt"] = job.attempts + 1
        span.attributes["pushgate.max_attempts"] = job.maxAttempts
        if !hideToken { span.attributes["pushgate.token"] = job.target.reportedToken }
        let outcome = await provider.send(prepared, to: job.target, context: DeliveryContext(messageID: job.messageID))
        let draw = outcome.isDelivered ? 0 : random()
        let transition = lifecycle.step(job, .attempted(outcome, started: started), now: now(), random: draw)
        if let status = outcome.status { span.attributes["http.response.status_code"] = status }
        span.attributes["pushgate.outcome_class"] = outcome.className
        if case .delivered(let id, let detail) = outcome {
            if let id { span.attributes["pushgate.provider_message_id"] = id }
            if let detail { span.attributes["pushgate.provider_detail"] = detail }
        }
        if let reason = outcome.reason { span.attributes["pushgate.reason"] = reason }
        var result = "retry"
        for case .complete(let final) in transition.effects {
            switch final {
            case .delivered: result = "delivered"
            case .failed(_, let tokenDead):
                result = "failed"
                span.attributes["pushgate.token_dead"] = tokenDead
            case .skipped: result = "skipped"
            }
        }
        span.attributes["pushgate.outcome"] = result
        if !outcome.isDelivered { span.setStatus(SpanStatus(code: .error, message: outcome.reason)) }
        span.end()
        return transition
    }
}
