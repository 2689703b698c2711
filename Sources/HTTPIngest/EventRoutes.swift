import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import ServiceLifecycle

/// `GET /api/events`: the delivery event stream as Server-Sent Events (`text/event-stream`), each
/// event `id: <event id>` and `data: <json>`. An app's key sees its app's events, an admin key (or
/// no keys configured) every app's. `Last-Event-ID` (or `?last_event_id=`) resumes after that event
/// from the stored ones (`events.max_stored`); without it the stream starts with the next event.
/// A comment line every 15 s keeps proxies from closing an idle stream; a client more than
/// `events.sse_client_buffer` events behind is disconnected (it resumes with `Last-Event-ID`).
extension Gateway {
    static let eventsRoute = "/api/events"
    static let lastEventIDHeader = HTTPField.Name("Last-Event-ID")!
    /// Seconds between two heartbeat comments.
    static let sseHeartbeatSeconds: Double = 15
    /// A store other gateways write to (shared PostgreSQL) is read this often for their events.
    static let sseSharedPollSeconds: Double = 1
    /// Stored events read per query while a client catches up.
    static let ssePage = 500

    func registerEventRoutes(_ routes: GatewayRouter) {
        routes.on(.get, Self.eventsRoute, access: .key) { request, context in
            var app: String?
            if case .key(.app(let own)) = context.caller { app = own }
            return await self.eventStreamResponse(request, app: app)
        }
    }

    /// An event id as a client sends it back: a decimal number of at most 18 digits (nil: not one).
    static func parseEventID(_ s: String) -> Int64? {
        let t = s.trimmingCharacters(in: .whitespaces)
        guard !t.isEmpty, t.utf8.count <= 18, t.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(t)
    }

    func eventStreamResponse(_ request: Request, app: String?) async -> Response {
        guard let events else {
            return error(
                RequestError(
                    status: 404, message: "The event stream is not enabled.", detail: "set events.enabled: true or events.webhook_url"))
        }
        var resume: Int64?
        if let h = request.headers[Self.lastEventIDHeader] {
            guard let id = Self.parseEventID(h) else {
                return error(RequestError(status: 400, message: "Invalid Last-Event-ID.", detail: "Last-Event-ID must be an event id (digits)"))
            }
            resume = id
        } else if let q = request.uri.queryParameters.get("last_event_id") {
            guard let id = Self.parseEventID(q) else {
                return error(RequestError(status: 400, message: "Invalid last_event_id.", detail: "last_event_id must be an event id (digits)"))
            }
            resume = id
        }
        // Subscribed before the start is read: an event stored meanwhile is in the store or the
        // subscription (or both: ids at or below the cursor are skipped).
        guard let sub = events.subscribe(app: app) else {
            return json(
                .serviceUnavailable,
                RequestError(
                    status: 503, message: "Too many event stream clients.",
                    detail: "events.sse_max_clients (\(events.maxClients)) clients are connected; try again"
                ).json, extra: [(.retryAfter, "5")])
        }
        let start: Int64
        if let resume {
            start = resume
        } else {
            do {
                start = try await events.store.lastSeq()
            } catch {
                events.unsubscribe(sub)
                logger.error("event store query failed: \(error)")
                return json(
                    .serviceUnavailable,
                    RequestError(status: 503, message: "The event stream is unavailable.", detail: "the event store could not be read; try again")
                        .json, extra: [(.retryAfter, "5")])
            }
        }
        requestCounters.count(200)
        var headers = Self.jsonHeaders
        headers[.contentType] = "text/event-stream; charset=utf-8"
        headers[.cacheControl] = "no-cache"
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        let store = events.store
        let shared = store.isShared
        let logger = self.logger
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                // Wakes the writer every 15 s for a heartbeat comment (every second when the store is
                // shared, to read the other gateways' events; a heartbeat every 15th of those).
                let heartbeatDue = NIOLockedValueBox(false)
                let heartbeat = Task {
                    let tick = shared ? Self.sseSharedPollSeconds : Self.sseHeartbeatSeconds
                    let ticksPerBeat = max(1, Int(Self.sseHeartbeatSeconds / tick))
                    var n = 0
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(tick))
                        n += 1
                        if n % ticksPerBeat == 0 { heartbeatDue.withLockedValue { $0 = true } }
                        sub.wake()
                    }
                }
                defer {
                    heartbeat.cancel()
                    events.unsubscribe(sub)
                }
                var cursor = start
                do {
                    try await withGracefulShutdownHandler {
                        try await writer.write(ByteBuffer(string: ": pushgate event stream\nretry: 2000\n\n"))
                        // The stored events after the cursor, page by page.
                        while true {
                            let page = try await store.events(after: cursor, app: app, limit: Self.ssePage)
                            if page.isEmpty { break }
                            try await writer.write(Self.sseFrames(page))
                            cursor = page[page.count - 1].seq
                            if page.count < Self.ssePage { break }
                        }
                        for await _ in sub.wakes {
                            var got = sub.take().filter { $0.seq > cursor }
                            if shared {
                                // Every gateway's events, in id order, from the store.
                                got = try await store.events(after: cursor, app: app, limit: Self.ssePage)
                            }
                            let beat = heartbeatDue.withLockedValue { due in
                                defer { due = false }
                                return due
                            }
                            if got.isEmpty {
                                if beat { try await writer.write(ByteBuffer(string: ": heartbeat\n\n")) }
                                continue
                            }
                            try await writer.write(Self.sseFrames(got))
                            cursor = got[got.count - 1].seq
                            // A full page: more may wait in the store.
                            if shared, got.count == Self.ssePage { sub.wake() }
                        }
                    } onGracefulShutdown: {
                        sub.close()
                    }
                    if sub.overflowed { logger.notice("event stream client fell behind; disconnected (it resumes with Last-Event-ID)") }
                    try await writer.finish(nil)
                } catch {
                    // The client went away (or the store failed): the stream ends; the client resumes.
                    logger.debug("event stream ended: \(error)")
                }
            })
    }

    /// `id: <id>\ndata: <json>\n\n` per event (the JSON has no newline).
    static func sseFrames(_ events: [StoredEvent]) -> ByteBuffer {
        var b = ByteBuffer()
        b.reserveCapacity(events.count * 360)
        for e in events {
            b.writeString("id: ")
            b.writeString(e.id)
            b.writeString("\ndata: ")
            b.writeString(e.json)
            b.writeString("\n\n")
        }
        return b
    }
}
