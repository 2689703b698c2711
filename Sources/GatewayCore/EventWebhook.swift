import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore
import ServiceLifecycle

/// POSTs the stored delivery events to `events.webhook_url` as JSON arrays of up to `batchMax`
/// events, oldest first, signed `X-Pushgate-Signature: sha256=<hex HMAC-SHA256(secret, body)>` (as
/// GitHub signs its webhooks). The store's cursor moves past a batch only when the receiver answered
/// 2xx; anything else is retried with capped exponential backoff, so an outage loses nothing within
/// `events.max_stored`. One POST at a time: the receiver gets the events in order (a batch may come
/// again after a timeout: receivers dedupe by `id`). At a stop the receiver gets `StopGrace.standard`
/// for what is stored; a POST still unanswered then is cancelled, and what was not taken stays in
/// the SQLite / PostgreSQL store for the next start (the memory engine logs how many it drops).
public final class EventWebhook: Sendable {
    public let url: String
    let key: SymmetricKey?
    let client: HTTPClient
    let stream: EventStream
    let batchMax: Int
    let batchSeconds: Double
    let timeout: Int64
    let retryBase: Double
    let retryMax: Double
    let logger: Logger
    private let wakeContinuation: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>
    private let stopped = NIOLockedValueBox(false)
    private let stopGrace: StopGrace

    public init(
        url: String, secret: String, client: HTTPClient, stream: EventStream, batchMax: Int, batchMilliseconds: Int,
        timeoutSeconds: Int = 10, retryBase: Double = 0.5, retryMax: Double = 60, logger: Logger = Logger(label: "pushgate.events.webhook"),
        stopGrace: Duration = StopGrace.standard
    ) {
        self.stopGrace = StopGrace(grace: stopGrace)
        self.url = url
        self.key = secret.isEmpty ? nil : SymmetricKey(data: Array(secret.utf8))
        self.client = client
        self.stream = stream
        self.batchMax = max(1, batchMax)
        self.batchSeconds = Double(max(0, batchMilliseconds)) / 1000
        self.timeout = Int64(max(1, timeoutSeconds))
        self.retryMax = max(0.001, retryMax)
        self.retryBase = min(max(0.001, retryBase), self.retryMax)
        self.logger = logger
        (wakes, wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let c = wakeContinuation
        stream.observe { c.yield() }
    }

    /// `sha256=<hex>` of `body` under `secret` (what a receiver compares, in constant time).
    public static func signature(secret: String, body: [UInt8]) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: Array(secret.utf8)))
        return "sha256=" + Hex.encode(Data(mac))
    }

    /// The JSON array of a batch.
    static func body(_ events: [StoredEvent]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(events.count * 320)
        for (i, e) in events.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out += Array(e.json.utf8)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// The URL's scheme, host and port for log lines (never its path or query: they may carry a token).
    var safeURL: String { url.urlOriginForLogs ?? "(webhook)" }

    /// Posts until `stop()` (then what is stored is tried once more, for at most the stop grace) or
    /// cancellation.
    public func run() async {
        if await stopGrace.run({ await self.postAll() }) {
            logger.warning("event webhook \(safeURL) did not take the stored events within \(stopGrace.grace) of the stop")
        }
    }

    /// After the stop (the store still open): logs the events the receiver did not take, which a
    /// durable store keeps for the next start and the memory engine drops.
    public func reportUnposted() async {
        guard let posted = try? await stream.store.postedSeq(), let newest = try? await stream.store.lastSeq(), newest > posted else { return }
        let left = newest - posted
        if stream.store is MemoryEventStore {
            logger.warning("stopping with \(left) delivery events not posted to the event webhook: the memory engine drops them")
        } else {
            logger.warning("stopping with \(left) delivery events not posted to the event webhook: kept in the store for the next start")
        }
    }

    private func postAll() async {
        var failures = 0
        var iterator = wakes.makeAsyncIterator()
        while !Task.isCancelled {
            let cursor: Int64
            let batch: [StoredEvent]
            do {
                cursor = try await stream.store.postedSeq()
                batch = try await stream.store.events(after: cursor, app: nil, limit: batchMax)
                let newest = try await stream.store.lastSeq()
                stream.setPending(newest - cursor)
            } catch {
                logger.error("reading delivery events for the webhook failed: \(error)")
                failures += 1
                if await pause(failures: failures) { return }
                continue
            }
            if batch.isEmpty {
                // The writer stored its last events: nothing more will come.
                if stream.isFinished { return }
                // Wait for the next stored batch (after a stop: the writer's last one).
                guard await iterator.next() != nil else { return }
                continue
            }
            if batch.count < batchMax, batchSeconds > 0, !stopped.withLockedValue({ $0 }) {
                // Gather up to `batch_ms` more before posting a partial batch.
                try? await Task.sleep(for: .seconds(batchSeconds))
                if let more = try? await stream.store.events(after: cursor, app: nil, limit: batchMax), more.count > batch.count {
                    if await post(more, cursor: cursor) {
                        failures = 0
                    } else {
                        failures += 1
                        if await pause(failures: failures) { return }
                    }
                    continue
                }
            }
            if await post(batch, cursor: cursor) {
                failures = 0
            } else {
                failures += 1
                if await pause(failures: failures) { return }
            }
        }
    }

    /// Waits the backoff after `failures` failed attempts; true when the poster should end (stopped
    /// and nothing left to wait for, or cancelled).
    private func pause(failures: Int) async -> Bool {
        if stopped.withLockedValue({ $0 }) { return true }
        let delay = min(retryMax, retryBase * pow(2, Double(min(failures - 1, 30)))) * Double.random(in: 0.8...1)
        try? await Task.sleep(for: .seconds(delay))
        return Task.isCancelled
    }

    /// One POST of `batch`; true when the receiver answered 2xx (the cursor then moves past it).
    private func post(_ batch: [StoredEvent], cursor: Int64) async -> Bool {
        let body = Self.body(batch)
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Pushgate/\(PushgateVersion.version)")
        if let key {
            let mac = HMAC<SHA256>.authenticationCode(for: body, using: key)
            request.headers.add(name: "X-Pushgate-Signature", value: "sha256=" + Hex.encode(Data(mac)))
        }
        request.headers.add(name: "X-Pushgate-Event-Count", value: String(batch.count))
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(request, timeout: .seconds(timeout))
            _ = try? await response.body.collect(upTo: 64 << 10)
            guard (200..<300).contains(Int(response.status.code)) else {
                stream.countPostFailure()
                logger.warning("event webhook \(safeURL) answered \(response.status.code)", metadata: ["events": "\(batch.count)"])
                return false
            }
        } catch {
            // Cut short by the stop: logged once by `run`.
            if Task.isCancelled { return false }
            stream.countPostFailure()
            logger.warning("event webhook \(safeURL) failed: \(error)", metadata: ["events": "\(batch.count)"])
            return false
        }
        let last = batch[batch.count - 1].seq
        do {
            try await stream.store.setPosted(last)
        } catch {
            // Posted but the cursor not saved: the batch is posted again (receivers dedupe by id).
            logger.error("saving the event webhook's cursor failed: \(error)")
        }
        let newest = (try? await stream.store.lastSeq()) ?? last
        stream.countPost(events: batch.count, pending: newest - last)
        return true
    }

    /// Ends `run` once what is stored now was tried (after the stream stopped storing), or after
    /// the stop grace.
    public func stop() {
        stopped.withLockedValue { $0 = true }
        wakeContinuation.yield()
        stopGrace.requestStop()
    }
}

/// Runs the event stream's writer and the webhook poster beside the workers; on graceful shutdown
/// (after the workers drained: their last events are stored) stores what is staged, gives the
/// webhook the stop grace for what is left, then closes the store.
struct EventService: Service {
    let events: EventStream
    let webhook: EventWebhook?

    func run() async throws {
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await events.run() }
                if let webhook { group.addTask { await webhook.run() } }
                await group.waitForAll()
            }
        } onGracefulShutdown: {
            events.finish()
            webhook?.stop()
        }
        await webhook?.reportUnposted()
        await events.store.close()
    }
}
