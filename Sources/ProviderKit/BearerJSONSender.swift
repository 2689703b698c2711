import Foundation
import HTTP2Pool
import Logging
import NIOCore
import PushgateCore

/// Where a `BearerJSONSender` gets its `Authorization: Bearer` value: an OAuth access token
/// (`OAuthTokenCache`: FCM, HMS) or a self-signed service-account JWT.
public protocol BearerTokenSource: Sendable {
    /// The bearer value, or the outcome of a send that cannot have one (logged as `name`'s).
    func bearer(name: String, logger: Logger) async -> Result<String, BearerUnavailable>
    /// The provider refused `token` (`SendOutcome.credentials`): the next send gets a new one.
    func invalidate(_ token: String) async
}

/// Why a send has no bearer value: the outcome it ends with.
public struct BearerUnavailable: Error, Sendable {
    public var outcome: SendOutcome
    public init(_ outcome: SendOutcome) { self.outcome = outcome }
}

extension OAuthTokenCache: BearerTokenSource {
    /// A token that cannot be had is a permanent failure when the endpoint refused the
    /// credentials, else a transient one.
    public func bearer(name: String, logger: Logger) async -> Result<String, BearerUnavailable> {
        do {
            return .success(try await accessToken())
        } catch let error as OAuthTokenError {
            logger.error("\(name) access token unavailable", metadata: ["error": "\(error)"])
            if error.isPermanent { return .failure(BearerUnavailable(.permanent(reason: error.description, status: error.status))) }
            return .failure(BearerUnavailable(.transient(reason: error.description, status: error.status, retryAfter: nil)))
        } catch {
            return .failure(BearerUnavailable(.transient(reason: "\(name) OAuth: \(scrub("\(error)"))", status: nil, retryAfter: nil)))
        }
    }
}

/// One JSON POST per delivery over a provider's HTTP/2 pool, authorised with a bearer value of a
/// `BearerTokenSource` (FCM's and HMS's `messages:send`, and the like). A value the
/// provider refuses (`SendOutcome.credentials`) is dropped so the next send gets a new one.
public struct BearerJSONSender: Sendable {
    /// As logs name the provider ("FCM", "HMS").
    public let name: String
    public let pool: HTTP2ConnectionPool
    public let path: String
    public let contentType: String
    public let tokens: any BearerTokenSource
    /// Most bytes of an answer read for the classifier.
    public let maxResponseBytes: Int
    /// The outcome of an answer: status, body, `Retry-After`.
    public let classify: @Sendable (_ status: Int, _ body: [UInt8], _ retryAfter: String?) -> SendOutcome
    let logger: Logger

    public init(
        name: String, pool: HTTP2ConnectionPool, path: String, contentType: String, tokens: any BearerTokenSource, maxResponseBytes: Int = 1 << 20,
        logger: Logger, classify: @escaping @Sendable (_ status: Int, _ body: [UInt8], _ retryAfter: String?) -> SendOutcome
    ) {
        self.name = name
        self.pool = pool
        self.path = path
        self.contentType = contentType
        self.tokens = tokens
        self.maxResponseBytes = maxResponseBytes
        self.logger = logger
        self.classify = classify
    }

    /// POSTs `body` with `headers` after the authorization and the content type.
    public func send(_ body: [UInt8], headers: [(String, String)] = [], context: DeliveryContext) async -> SendOutcome {
        let accessToken: String
        switch await tokens.bearer(name: name, logger: logger) {
        case .success(let t): accessToken = t
        case .failure(let unavailable): return unavailable.outcome
        }
        var all = [("authorization", "Bearer \(accessToken)"), ("content-type", contentType)]
        if !headers.isEmpty { all += headers }
        let request = HTTP2Request(method: "POST", path: path, headers: all, body: ByteBuffer(bytes: body))
        // One attempt: a connection-level failure goes back to the retry policy (the pool has
        // already re-queued what the server refused unprocessed).
        let response: HTTP2Response
        do {
            response = try await pool.execute(request)
        } catch {
            let reason = "\(error)"
            logger.debug("\(name) send failed at the connection level", metadata: ["error": "\(reason)", "message_id": "\(context.messageID)"])
            return .transient(reason: reason, status: nil, retryAfter: nil)
        }
        var buffer = response.body
        let bytes = buffer.readBytes(length: min(buffer.readableBytes, maxResponseBytes)) ?? []
        let outcome = classify(response.status, bytes, response.header("retry-after"))
        if case .credentials = outcome { await tokens.invalidate(accessToken) }
        if !outcome.isDelivered {
            logger.debug(
                "\(name) send not delivered",
                metadata: ["status": "\(response.status)", "outcome": "\(outcome.className)", "reason": "\(outcome.reason ?? "")"])
        }
        return outcome
    }
}
