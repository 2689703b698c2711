import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore

/// POSTs every failed delivery to `core.feedback_hook_url` in gorush's log-entry format, retried
/// with backoff. Bounded: past `capacity` waiting entries, new ones are logged and dropped. At a stop
/// the hook gets `StopGrace.standard` for what is queued; what it has not taken then is dropped
/// with one log line (a hook that is down or never answers does not hold the stop).
public final class FeedbackSender: Sendable {
    public let url: String
    private let headers: [(String, String)]
    private let client: HTTPClient
    private let logger: Logger
    private let capacity: Int
    private let maxAttempts: Int
    private let baseDelay: Double
    private let stream: AsyncStream<LogEntry>
    private let continuation: AsyncStream<LogEntry>.Continuation
    private let queued = NIOLockedValueBox(0)
    /// Entries whose delivery the stop cut short.
    private let cut = NIOLockedValueBox(0)
    private let stopGrace: StopGrace

    /// - Parameter headers: gorush's `core.feedback_header` strings, `"Key: value"`.
    public init(
        url: String, headers: [String], client: HTTPClient, logger: Logger, capacity: Int = 10_000, maxAttempts: Int = 5, baseDelay: Double = 1,
        stopGrace: Duration = StopGrace.standard
    ) {
        self.stopGrace = StopGrace(grace: stopGrace)
        self.url = url
        self.headers = headers.compactMap { h in
            guard let i = h.firstIndex(of: ":") else { return nil }
            let k = h[..<i].trimmingCharacters(in: .whitespaces)
            let v = h[h.index(after: i)...].trimmingCharacters(in: .whitespaces)
            return k.isEmpty ? nil : (k, v)
        }
        self.client = client
        self.logger = logger
        self.capacity = capacity
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        (stream, continuation) = AsyncStream.makeStream(of: LogEntry.self)
    }

    public func post(_ entry: LogEntry) {
        let ok = queued.withLockedValue { n -> Bool in
            if n >= capacity { return false }
            n += 1
            return true
        }
        guard ok else {
            logger.error(
                "feedback queue full; dropping feedback entry", metadata: ["token": "\(entry.token.logSafe())", "error": "\(entry.error.logSafe())"])
            return
        }
        continuation.yield(entry)
    }

    /// Sends entries until `finish()` (then drains what is queued, for at most the stop grace) or
    /// cancellation.
    public func run() async {
        let wasCut = await stopGrace.run { await self.sendAll() }
        let dropped = queued.withLockedValue { $0 } + cut.withLockedValue { $0 }
        if wasCut || dropped > 0 {
            logger.warning(
                "feedback hook did not take \(dropped) entries within \(stopGrace.grace) of the stop: dropped",
                metadata: ["url": "\(url.urlOriginForLogs ?? "(feedback hook)")"])
        }
    }

    private func sendAll() async {
        await withTaskGroup(of: Void.self) { group in
            var inFlight = 0
            for await entry in stream {
                if inFlight >= 16 {
                    await group.next()
                    inFlight -= 1
                }
                group.addTask { await self.deliver(entry) }
                inFlight += 1
            }
        }
    }

    /// Stops taking entries; `run` ends once the queued ones are sent, or after the stop grace.
    public func finish() {
        continuation.finish()
        stopGrace.requestStop()
    }

    private func deliver(_ entry: LogEntry) async {
        defer { queued.withLockedValue { $0 -= 1 } }
        if Task.isCancelled {
            cut.withLockedValue { $0 += 1 }
            return
        }
        let body = entry.json
        for attempt in 1...maxAttempts {
            do {
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
                for (k, v) in headers { request.headers.add(name: k, value: v) }
                request.body = .bytes(ByteBuffer(bytes: body))
                let response = try await client.execute(request, timeout: .seconds(10))
                _ = try? await response.body.collect(upTo: 1 << 20)
                if (200..<300).contains(Int(response.status.code)) { return }
                logger.warning("feedback hook answered \(response.status.code)", metadata: ["attempt": "\(attempt)"])
                if (400..<500).contains(Int(response.status.code)), response.status.code != 429, response.status.code != 408 { break }
            } catch {
                if Task.isCancelled {
                    // The stop's grace is over: counted and logged once by `run`.
                    cut.withLockedValue { $0 += 1 }
                    return
                }
                logger.warning("feedback hook failed: \(error)", metadata: ["attempt": "\(attempt)"])
                if let e = error as? HTTPClientError, e == .alreadyShutdown { break }
            }
            if attempt < maxAttempts {
                let delay = baseDelay * pow(2, Double(attempt - 1)) * Double.random(in: 0.75...1)
                try? await Task.sleep(for: .seconds(delay))
                if Task.isCancelled {
                    cut.withLockedValue { $0 += 1 }
                    return
                }
            }
        }
        logger.error("feedback hook gave up on an entry", metadata: ["token": "\(entry.token.logSafe())", "error": "\(entry.error.logSafe())"])
    }
}
