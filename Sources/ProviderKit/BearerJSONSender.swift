import Foundation
import HTTP2Pool
import Logging
import NIOCore
import PushgateCore

/// One JSON POST per delivery over a provider's HTTP/2 pool, authorised with the access token of
/// an `OAuthTokenCache`: FCM's and HMS's `messages:send`. A token the provider refuses
/// (`SendOutcome.credentials`) is dropped so the next send fetches a new one; a token that cannot
/// be had is a permanent failure when the endpoint refused the credentials, else a transient one.
public struct BearerJSONSender: Sendable {
    /// As logs name the provider ("FCM", "HMS").
    public let name: String
    public let pool: HTTP2ConnectionPool
    public let path: String
    public let contentType: String
    public let tokens: OAuthTokenCache
    /// Most bytes of an answer read for the classifier.
    public let maxResponseBytes: Int
    /// The outcome of an answer: status, body, `Retry-After`.
    public let classify: @Sendable (_ status: Int, _ body: [UInt8], _ retryAfter: String?) -> SendOutcome
    let logger: Logger

    public init(
        name: String, pool: HTTP2ConnectionPool, path: String, contentType: String, tokens: OAuthTokenCache, maxResponseBytes: Int = 1 << 20,
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

    public func send(_ body: [UInt8], context: DeliveryContext) async -> SendOutcome {
        let accessToken: String
        do {
            accessToken = try await tokens.accessToken()
        } catch let error as OAuthTokenError {
            logger.error("\(name) access token unavailable", metadata: ["error": "\(error)"])
            if error.isPermanent { return .permanent(reason: error.description, status: error.status) }
            return .transient(reason: error.description, status: error.status, retryAfter: nil)
        } catch {
            return .transient(reason: "\(name) OAuth: \(tokens.scrub("\(error)"))", status: nil, retryAfter: nil)
        }
        let request = HTTP2Request(
            method: "POST", path: path, headers: [("authorization", "Bearer \(accessToken)"), ("content-type", contentType)],
            body: ByteBuffer(bytes: body))
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
