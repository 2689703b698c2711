import Foundation
import GatewayCore
import Hummingbird
import PushDispatch
import PushgateCore
import QueueStore

/// `GET /api/push/{notif_id}`: the state of every delivery of a notification.
///
/// ```
/// {"notif_id":"n1","counts":{"queued":0,"retrying":1,"delivered":1,"failed":1},
///  "deliveries":[{"platform":"ios","token":"**********…","state":"delivered","attempts":1,"provider_id":"…","finished_at":"…"},
///                {"platform":"ios","token":"…","state":"retrying","attempts":2,"next_try":"2026-01-01T00:00:05Z","last_error":"TooManyRequests"},
///                {"platform":"android","token":"…","state":"failed","attempts":1,"reason":"UNREGISTERED","finished_at":"…"}]}
/// ```
/// A delivery of a notification sent as its `fallback` (over the provider's limit) carries
/// `"fallback":{"payload_bytes":N,"limit":N,"fallback_bytes":N}`.
/// Tokens are masked per `log.hide_token`. 404 for an unknown (or pruned) notif_id.
extension Gateway {
    func registerStatusRoutes(_ routes: GatewayRouter) {
        let base = settings.routes.push.hasSuffix("/") ? String(settings.routes.push.dropLast()) : settings.routes.push
        routes.on(.get, base + "/:notif_id", access: .key) { request, context in
            // The id travels percent-encoded in the path (`order%2042%2F%C3%A9` is "order 42/é").
            let raw = context.parameters.get("notif_id") ?? ""
            // An app's key sees its own app's deliveries only; an admin key (or no keys configured) all.
            return await self.deliveryStatusResponse(notifID: raw.removingPercentEncoding ?? raw, app: context.scopedApp)
        }
        // Cancels the deliveries not yet sent, scoped to the key's app exactly as the status is.
        routes.on(.delete, base + "/:notif_id", access: .key) { request, context in
            let raw = context.parameters.get("notif_id") ?? ""
            return await self.cancelResponse(notifID: raw.removingPercentEncoding ?? raw, app: context.scopedApp)
        }
    }

    /// `{"notif_id":"…","cancelled":N,"already_sent":N,"already_over":N,"in_flight":N}`; 404 as the
    /// status route answers it (unknown, pruned, or only another app's).
    func cancelResponse(notifID: String, app: String?) async -> Response {
        guard dispatcher.statusSource != nil else {
            return error(
                RequestError(status: 404, message: "Delivery status is not available.", detail: "this queue engine keeps no delivery records"))
        }
        let summary: CancelSummary?
        do {
            summary = try await dispatcher.cancel(notifID: notifID, app: app)
        } catch {
            logger.error("cancel failed: \(error)")
            return json(
                .serviceUnavailable,
                RequestError(status: 503, message: "Cancel is unavailable.", detail: "the queue store could not be written; try again").json,
                extra: [(.retryAfter, "5")])
        }
        guard let summary else { return unknownNotification(notifID) }
        var w = JSONWriter(reservingCapacity: 128)
        var first = true
        w.raw("{")
        w.key("notif_id", first: &first)
        w.string(notifID)
        w.key("cancelled", first: &first)
        w.int(summary.cancelled)
        w.key("already_sent", first: &first)
        w.int(summary.alreadySent)
        w.key("already_over", first: &first)
        w.int(summary.alreadyOver)
        w.key("in_flight", first: &first)
        w.int(summary.inFlight)
        w.raw("}")
        return json(.ok, w.bytes)
    }

    func unknownNotification(_ notifID: String) -> Response {
        error(
            RequestError(
                status: 404, message: "Unknown notif_id.",
                detail: "no deliveries recorded for \(notifID.logSafe(max: 256)) (records are kept queue.status_retention)"))
    }

    func deliveryStatusResponse(notifID: String, app: String? = nil) async -> Response {
        guard let source = dispatcher.statusSource else {
            return error(
                RequestError(status: 404, message: "Delivery status is not available.", detail: "this queue engine keeps no delivery records"))
        }
        let records: [DeliveryStatusRecord]?
        do {
            records = try await source.deliveryStatus(notifID: notifID)
        } catch {
            // The store cannot be read now (a database unreachable, an I/O error): a retryable answer.
            logger.error("delivery status query failed: \(error)")
            return json(
                .serviceUnavailable,
                RequestError(status: 503, message: "Delivery status is unavailable.", detail: "the queue store could not be read; try again").json,
                extra: [(.retryAfter, "5")])
        }
        // Rows of another app than the key's are left out: a notification only another app has is
        // answered exactly as an unknown one (a client-chosen id's existence is not told).
        guard var records else { return unknownNotification(notifID) }
        if let app {
            records.removeAll { $0.app != app }
            if records.isEmpty { return unknownNotification(notifID) }
        }
        let t = now
        return json(.ok, Self.statusJSON(notifID: notifID, records: records.map { $0.scheduled(now: t) }, hideToken: settings.hideToken))
    }

    static func statusJSON(notifID: String, records: [DeliveryStatusRecord], hideToken: Bool) -> [UInt8] {
        var counts: [DeliveryStatusRecord.State: Int] = [:]
        for r in records { counts[r.state, default: 0] += 1 }
        var w = JSONWriter(reservingCapacity: 128 + records.count * 160)
        var first = true
        w.raw("{")
        w.key("notif_id", first: &first)
        w.string(notifID)
        w.key("counts", first: &first)
        w.raw("{")
        var f2 = true
        // The delivery controls' states only when some delivery is in them (gorush's four always).
        for s in [DeliveryStatusRecord.State.queued, .retrying, .delivered, .failed, .duplicate, .coalesced, .cancelled, .quietHours, .scheduled]
        where !s.isExtension || counts[s, default: 0] > 0 {
            w.key(s.rawValue, first: &f2)
            w.int(counts[s] ?? 0)
        }
        w.raw("}")
        w.key("deliveries", first: &first)
        w.raw("[")
        for (i, r) in records.enumerated() {
            if i > 0 { w.raw(",") }
            var f = true
            w.raw("{")
            if r.app != AppID.defaultApp {
                w.key("app", first: &f)
                w.string(r.app)
            }
            w.key("platform", first: &f)
            w.string(r.platform.name)
            w.key("token", first: &f)
            w.string(TokenMask.apply(r.token, hide: hideToken))
            w.key("state", first: &f)
            w.string(r.state.rawValue)
            w.key("attempts", first: &f)
            w.int(r.attempts)
            if let fb = r.fallback {
                w.key("fallback", first: &f)
                fb.write(into: &w)
            }
            if let label = r.analyticsLabel {
                w.key("analytics_label", first: &f)
                w.string(label)
            }
            switch r.state {
            case .queued:
                break
            case .scheduled:
                if let t = r.nextTry {
                    w.key("send_at", first: &f)
                    w.string(iso(t))
                }
            case .retrying:
                if let t = r.nextTry {
                    w.key("next_try", first: &f)
                    w.string(iso(t))
                }
                if let e = r.error {
                    w.key("last_error", first: &f)
                    w.string(e)
                }
            case .delivered:
                if let id = r.providerID {
                    w.key("provider_id", first: &f)
                    w.string(id)
                }
                if let detail = r.providerDetail {
                    w.key("provider_detail", first: &f)
                    w.string(detail)
                }
                if let t = r.finishedAt {
                    w.key("finished_at", first: &f)
                    w.string(iso(t))
                }
            case .failed:
                w.key("reason", first: &f)
                w.string(r.error ?? "")
                if let t = r.finishedAt {
                    w.key("finished_at", first: &f)
                    w.string(iso(t))
                }
            case .duplicate, .coalesced, .cancelled, .quietHours:
                if let t = r.finishedAt {
                    w.key("finished_at", first: &f)
                    w.string(iso(t))
                }
            }
            w.raw("}")
        }
        w.raw("]}")
        return w.bytes
    }
}
