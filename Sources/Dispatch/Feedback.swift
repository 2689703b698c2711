import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore

/// POSTs every failed delivery to `core.feedback_hook_url` in gorush's log-entry format, retried
/// with backoff. Bounded: past `capacity` waiting entries, new ones are logged and dropped.
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

    /// - Parameter headers: gorush's `core.feedback_header` strings, `"Key: value"`.
    public init(
        url: String, headers: [String], client: HTTPClient, logger: Logger, capacity: Int = 10_000, maxAttempts: Int = 5, baseDelay: Double = 1
    ) {
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

    /// Sends entries until `finish()` (then drains what is queued) or cancellation.
    public func run() async {
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

    public func finish() { continuation.finish() }

    private func deliver(_ entry: LogEntry) async {
        defer { queued.withLockedValue { $0 -= 1 } }
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
                logger.warning("feedback hook failed: \(error)", metadata: ["attempt": "\(attempt)"])
                if let e = error as? HTTPClientError, e == .alreadyShutdown { break }
            }
            if attempt < maxAttempts {
                let delay = baseDelay * pow(2, Double(attempt - 1)) * Double.random(in: 0.75...1)
                try? await Task.sleep(for: .seconds(delay))
                if Task.isCancelled { break }
            }
        }
        logger.error("feedback hook gave up on an entry", metadata: ["token": "\(entry.token.logSafe())", "error": "\(entry.error.logSafe())"])
    }
}
