import AsyncHTTPClient
import Foundation
import Logging
import NIOCore

/// Failure to obtain an OAuth 2.0 access token from a provider's token endpoint. Never carries a
/// secret of the request (a token server may echo it: it is blanked).
public struct OAuthTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Who asked, as logs name it ("FCM", "HMS").
    public var provider: String
    /// HTTP status of the token endpoint, nil for a network failure.
    public var status: Int?
    public var message: String

    public init(provider: String, status: Int?, message: String) {
        self.provider = provider
        self.status = status
        self.message = message
    }

    /// A 4xx other than 408/429 from the token endpoint: the credentials are refused, retrying will not help.
    public var isPermanent: Bool {
        guard let status else { return false }
        return status >= 400 && status < 500 && status != 408 && status != 429
    }

    public var description: String {
        if let status { return "\(provider) OAuth token request failed (HTTP \(status)): \(message)" }
        return "\(provider) OAuth token request failed: \(message)"
    }
}

/// One OAuth 2.0 access token shared by every send of a provider (FCM's JWT bearer grant, HMS's
/// client credentials): the cached token until `refreshMargin` before it expires; however many
/// sends wait, at most one token request is in flight; `invalidate(_:)` drops a token the provider
/// refused, so the next send fetches a new one.
///
/// The token response is untrusted: read up to `maxResponseBytes`, an access token of visible
/// ASCII up to `maxAccessTokenBytes` (it goes in a header), `expires_in` held to `lifetimeBounds`
/// (NaN, negative and centuries-long lifetimes are not taken).
public actor OAuthTokenCache {
    /// Raw transport: POST `body` (form-encoded) to `url`, answer status and body.
    public typealias Transport = @Sendable (_ url: String, _ body: [UInt8]) async throws -> (status: Int, body: [UInt8])
    /// The token request to send at a time (FCM signs an assertion issued then).
    public typealias MakeRequest = @Sendable (_ issuedAt: Date) throws -> (url: String, body: [UInt8])

    public static let maxResponseBytes = 64 * 1024
    public static let maxAccessTokenBytes = 8 * 1024
    /// The lifetime taken when `expires_in` is missing.
    public static let defaultLifetime: Double = 3600
    /// The lifetime taken when `expires_in` is below the bounds, NaN or not a number.
    public static let fallbackLifetime: Double = 60

    struct CachedToken {
        var value: String
        var refreshAt: Date
    }

    private let provider: String
    private let makeRequest: MakeRequest
    private let transport: Transport
    private let now: @Sendable () -> Date
    private let refreshMargin: TimeInterval
    private let lifetimeBounds: ClosedRange<Double>
    /// Blanked in every error and log line (the app secret a token server might echo).
    private let secrets: [String]
    private let logger: Logger

    private var cached: CachedToken?
    private var inFlight: Task<CachedToken, Error>?
    private var generation = 0
    /// Token requests made (successful or not).
    public private(set) var requests = 0

    public init(
        provider: String, transport: @escaping Transport, logger: Logger, refreshMargin: TimeInterval = 300,
        lifetimeBounds: ClosedRange<Double> = 60...86_400, secrets: [String] = [], now: @escaping @Sendable () -> Date = { Date() },
        makeRequest: @escaping MakeRequest
    ) {
        self.provider = provider
        self.transport = transport
        self.logger = logger
        self.refreshMargin = refreshMargin
        self.lifetimeBounds = lifetimeBounds
        self.secrets = secrets.filter { !$0.isEmpty }
        self.now = now
        self.makeRequest = makeRequest
    }

    /// A form-encoded POST through `client`, its answer read up to `maxResponseBytes`.
    public static func httpTransport(_ client: HTTPClient, timeout: TimeAmount) -> Transport {
        { url, body in
            let answer = try await BoundedPOST.send(
                client, url: url, contentType: "application/x-www-form-urlencoded", headers: [("accept", "application/json")], body: body,
                maxBytes: maxResponseBytes, timeout: timeout)
            return (answer.status, answer.body)
        }
    }

    /// Every UTF-8 byte outside `A-Z a-z 0-9 - . _ ~` percent-encoded (`application/x-www-form-urlencoded`).
    public static func formEncode(_ s: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            default:
                out.append(contentsOf: [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 0x0F)]])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A valid access token: the cached one, or a fresh one (one request however many callers wait).
    public func accessToken() async throws -> String {
        if let cached, now() < cached.refreshAt { return cached.value }
        if let inFlight { return try await inFlight.value.value }
        let myGeneration = generation &+ 1
        generation = myGeneration
        let task = Task { try await self.fetch() }
        inFlight = task
        do {
            let token = try await task.value
            if generation == myGeneration {
                cached = token
                inFlight = nil
            }
            return token.value
        } catch {
            if generation == myGeneration { inFlight = nil }
            throw error
        }
    }

    /// Drops `token` if it is the cached one: the next send fetches a new one.
    public func invalidate(_ token: String) {
        if cached?.value == token {
            logger.debug("\(provider) access token invalidated")
            cached = nil
        }
    }

    /// `s` with every secret blanked, plain and form-encoded.
    public nonisolated func scrub(_ s: String) -> String {
        var out = s
        for secret in secrets {
            out = out.replacingOccurrences(of: secret, with: "[REDACTED]")
            let encoded = Self.formEncode(secret)
            if encoded != secret { out = out.replacingOccurrences(of: encoded, with: "[REDACTED]") }
        }
        return out
    }

    private func failure(_ status: Int?, _ message: String) -> OAuthTokenError {
        OAuthTokenError(provider: provider, status: status, message: scrub(oneLine(message)))
    }

    private func fetch() async throws -> CachedToken {
        requests += 1
        let issued = now()
        let request: (url: String, body: [UInt8])
        do {
            request = try makeRequest(issued)
        } catch {
            throw failure(nil, "cannot make the token request: \(error)")
        }
        let status: Int
        let responseBody: [UInt8]
        do {
            (status, responseBody) = try await transport(request.url, request.body)
        } catch {
            let e = failure(nil, "\(error)")
            logger.warning("\(provider) OAuth token request failed", metadata: ["error": "\(e.message)"])
            throw e
        }
        let json =
            responseBody.count <= Self.maxResponseBytes
            ? (try? JSONSerialization.jsonObject(with: Data(responseBody))) as? [String: Any] : nil
        guard status == 200 else {
            let e = failure(status, Self.refusal(status: status, json: json, body: responseBody))
            logger.warning("\(provider) OAuth token request refused", metadata: ["status": "\(status)", "error": "\(e.message)"])
            throw e
        }
        guard let json, let access = json["access_token"] as? String, !access.isEmpty else {
            throw failure(status, "token response without access_token")
        }
        guard access.utf8.count <= Self.maxAccessTokenBytes, access.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw failure(status, "token response with an access_token that cannot go in a header")
        }
        var expiresIn = Self.defaultLifetime
        if let n = json["expires_in"] as? NSNumber {
            expiresIn = n.doubleValue
        } else if let s = json["expires_in"] as? String {
            expiresIn = s.utf8.count <= 32 ? Double(s) ?? .nan : .nan
        } else if json["expires_in"] != nil {
            expiresIn = .nan
        }
        if !(expiresIn >= lifetimeBounds.lowerBound) { expiresIn = max(Self.fallbackLifetime, lifetimeBounds.lowerBound) }
        expiresIn = min(expiresIn, lifetimeBounds.upperBound)
        let margin = min(refreshMargin, expiresIn / 2)
        logger.debug("\(provider) access token fetched", metadata: ["expires_in": "\(expiresIn)"])
        return CachedToken(value: access, refreshAt: issued.addingTimeInterval(expiresIn - margin))
    }

    /// Why the endpoint refused, from its JSON: OAuth's `{"error":"invalid_grant","error_description":…}`,
    /// Google's `{"error":{"status":…,"message":…}}`, HMS's `{"error":1101,"sub_error":20003,…}`.
    static func refusal(status: Int, json: [String: Any]?, body: [UInt8]) -> String {
        guard let json else { return body.isEmpty ? "HTTP \(status)" : String(decoding: body.prefix(200), as: UTF8.self) }
        func text(_ v: Any?) -> String? {
            if let s = v as? String { return s }
            if let n = v as? NSNumber { return n.stringValue }
            return nil
        }
        let nested = json["error"] as? [String: Any]
        let parts = [
            text(json["error"]) ?? text(nested?["status"]), text(json["sub_error"]),
            text(json["error_description"]) ?? text(nested?["message"]),
        ].compactMap { $0 }
        return parts.isEmpty ? "HTTP \(status)" : parts.joined(separator: ": ")
    }
}

/// `s` on one line (CR and LF as spaces), cut to `max` characters: a remote answer quoted in an error.
public func oneLine(_ s: String, max: Int = 200) -> String {
    var out = s.replacingOccurrences(of: "\r", with: " ").replacingOccurrences(of: "\n", with: " ")
    if out.count > max { out = String(out.prefix(max)) + "..." }
    return out
}
