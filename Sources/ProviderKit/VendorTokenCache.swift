import Foundation
import Logging

/// A vendor's auth token, fetched by a signed request of the vendor's own (OPPO's `auth_token`,
/// vivo's `authToken`): one token for every send until `refreshMargin` before it expires; however
/// many sends wait, at most one auth request is in flight, and no two start closer than
/// `minimumInterval` (vivo allows 10 auth calls a second); `invalidate(_:)` drops a token the vendor
/// refused so the next send fetches a new one.
public actor VendorTokenCache: BearerTokenSource {
    /// A fresh token and how long it lives, or an error (its description never carries a secret).
    public typealias Fetch = @Sendable (_ now: Date) async throws -> (token: String, lifetime: TimeInterval)

    /// A token or an auth answer that is not one: `permanent` when the credentials were refused.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var permanent: Bool
        public init(_ message: String, permanent: Bool) {
            self.message = message
            self.permanent = permanent
        }
        public var description: String { message }
    }

    public static let maxTokenBytes = 4096

    private let vendor: String
    private let fetchToken: Fetch
    private let now: @Sendable () -> Date
    private let refreshMargin: TimeInterval
    private let minimumInterval: TimeInterval
    private let logger: Logger
    private var cached: (value: String, refreshAt: Date)?
    private var inFlight: Task<(String, Date), Error>?
    private var lastRequest: Date?
    /// Auth requests made (successful or not).
    public private(set) var requests = 0

    public init(
        vendor: String, refreshMargin: TimeInterval = 3600, minimumInterval: TimeInterval = 0.2, logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }, fetch: @escaping Fetch
    ) {
        self.vendor = vendor
        self.refreshMargin = refreshMargin
        self.minimumInterval = minimumInterval
        self.logger = logger
        self.now = now
        self.fetchToken = fetch
    }

    /// A valid token: the cached one, or a fresh one (one request however many callers wait).
    public func token() async throws -> String {
        if let cached, now() < cached.refreshAt { return cached.value }
        if let inFlight { return try await inFlight.value.0 }
        let task = Task { try await self.fetch() }
        inFlight = task
        defer { inFlight = nil }
        let (value, refreshAt) = try await task.value
        cached = (value, refreshAt)
        return value
    }

    /// Drops `token` if it is the cached one.
    public func invalidate(_ token: String) {
        if cached?.value == token {
            logger.debug("\(vendor) auth token invalidated")
            cached = nil
        }
    }

    private func fetch() async throws -> (String, Date) {
        if let lastRequest {
            let wait = minimumInterval - now().timeIntervalSince(lastRequest)
            if wait > 0 { try await Task.sleep(nanoseconds: UInt64(min(wait, 1) * 1_000_000_000)) }
        }
        let issued = now()
        lastRequest = issued
        requests += 1
        let (value, lifetime) = try await fetchToken(issued)
        guard !value.isEmpty, value.utf8.count <= Self.maxTokenBytes, value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Failure("\(vendor) auth answer with a token that cannot go in a request", permanent: false)
        }
        let life = lifetime.isFinite ? min(max(lifetime, 60), 7 * 86_400) : 60
        let margin = min(refreshMargin, life / 2)
        logger.debug("\(vendor) auth token fetched", metadata: ["lifetime": "\(life)"])
        return (value, issued.addingTimeInterval(life - margin))
    }

    /// A token that cannot be had ends the send: permanent when the credentials were refused.
    public func bearer(name: String, logger: Logger) async -> Result<String, BearerUnavailable> {
        do {
            return .success(try await token())
        } catch let f as Failure {
            logger.error("\(name) auth token unavailable", metadata: ["error": "\(f.message)"])
            return .failure(
                BearerUnavailable(
                    f.permanent ? .permanent(reason: f.message, status: nil) : .transient(reason: f.message, status: nil, retryAfter: nil)))
        } catch {
            return .failure(BearerUnavailable(.transient(reason: "\(name) auth: \(oneLine("\(error)"))", status: nil, retryAfter: nil)))
        }
    }
}
