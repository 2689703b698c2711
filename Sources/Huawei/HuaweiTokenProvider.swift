import AsyncHTTPClient
import Foundation
import Logging
import NIOCore

/// Failure to obtain an HMS OAuth 2.0 access token. Never carries the app secret.
public struct HuaweiAuthError: Error, Sendable, Equatable, CustomStringConvertible {
    /// HTTP status of the token endpoint, nil for a network failure.
    public var status: Int?
    public var message: String

    public init(status: Int?, message: String) {
        self.status = status
        self.message = message
    }

    /// A 4xx other than 408/429 from the token endpoint: the credentials are refused, retrying will not help.
    public var isPermanent: Bool {
        guard let status else { return false }
        return status >= 400 && status < 500 && status != 408 && status != 429
    }

    public var description: String {
        if let status { return "HMS OAuth token request failed (HTTP \(status)): \(message)" }
        return "HMS OAuth token request failed: \(message)"
    }
}

/// OAuth 2.0 client-credentials grant (`grant_type=client_credentials`, `client_id` = app id,
/// `client_secret` = app secret, form-encoded POST) with one shared cached access token.
///
/// The token is shared by every send until shortly before it expires; however many sends wait, at
/// most one token request is in flight. `invalidate(_:)` drops a token HMS refused (80200001 / 80200003).
public actor HuaweiTokenProvider {
    public static let grantType = "client_credentials"
    /// `expires_in` is taken within these bounds (HMS issues one-hour tokens).
    public static let lifetimeBounds: ClosedRange<Double> = 60...86_400
    /// Largest token response read.
    public static let maxResponseBytes = 64 * 1024
    /// Longest access token taken (HMS tokens are a few hundred bytes).
    public static let maxAccessTokenBytes = 8 * 1024

    /// Raw transport: POST `body` (form-encoded) to `url`, answer status and body.
    public typealias Transport = @Sendable (_ url: String, _ body: [UInt8]) async throws -> (status: Int, body: [UInt8])

    struct CachedToken {
        var value: String
        var refreshAt: Date
        var expiresAt: Date
    }

    public nonisolated let appID: String
    private let appSecret: String
    public nonisolated let tokenURL: String
    private let transport: Transport
    private let now: @Sendable () -> Date
    private let refreshMargin: TimeInterval
    private let logger: Logger

    private var cached: CachedToken?
    private var inFlight: Task<CachedToken, Error>?
    private var generation = 0
    /// Number of token requests made (successful or not).
    public private(set) var tokenRequests = 0

    /// Uses `httpClient` for the token exchange (give it a TLS configuration trusting the token endpoint).
    public init(
        appID: String, appSecret: String, tokenURL: String,
        httpClient: HTTPClient,
        logger: Logger = Logger(label: "pushgate.hms.oauth"),
        refreshMargin: TimeInterval = 300,
        requestTimeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            appID: appID, appSecret: appSecret, tokenURL: tokenURL,
            transport: Self.httpTransport(httpClient, timeout: requestTimeout),
            logger: logger, refreshMargin: refreshMargin, now: now)
    }

    /// With an explicit transport (tests).
    public init(
        appID: String, appSecret: String, tokenURL: String,
        transport: @escaping Transport,
        logger: Logger = Logger(label: "pushgate.hms.oauth"),
        refreshMargin: TimeInterval = 300,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.appID = appID
        self.appSecret = appSecret
        self.tokenURL = tokenURL
        self.transport = transport
        self.logger = logger
        self.refreshMargin = refreshMargin
        self.now = now
    }

    static func httpTransport(_ client: HTTPClient, timeout: TimeAmount) -> Transport {
        { url, body in
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
            request.headers.add(name: "accept", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await client.execute(request, timeout: timeout)
            var buffer = try await response.body.collect(upTo: maxResponseBytes)
            let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
            return (Int(response.status.code), bytes)
        }
    }

    /// The form body of the token request.
    public static func formBody(appID: String, appSecret: String) -> String {
        "grant_type=" + grantType + "&client_id=" + formEncode(appID) + "&client_secret=" + formEncode(appSecret)
    }

    /// Every UTF-8 byte outside `A-Z a-z 0-9 - . _ ~` percent-encoded.
    static func formEncode(_ s: String) -> String {
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
        let task = Task { try await self.fetchToken() }
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

    /// Drops `token` if it is the cached one (HMS refused it): the next send fetches a new one.
    public func invalidate(_ token: String) {
        if cached?.value == token {
            logger.debug("HMS access token invalidated")
            cached = nil
        }
    }

    /// `s` with the app secret blanked: a hostile or broken token server may echo the request.
    nonisolated func scrub(_ s: String) -> String {
        guard !appSecret.isEmpty else { return s }
        var out = s.replacingOccurrences(of: appSecret, with: "[REDACTED]")
        let encoded = Self.formEncode(appSecret)
        if encoded != appSecret { out = out.replacingOccurrences(of: encoded, with: "[REDACTED]") }
        return out
    }

    private func fetchToken() async throws -> CachedToken {
        tokenRequests += 1
        let issued = now()
        let body = Array(Self.formBody(appID: appID, appSecret: appSecret).utf8)
        let status: Int
        let responseBody: [UInt8]
        do {
            (status, responseBody) = try await transport(tokenURL, body)
        } catch {
            let why = scrub(oneLine("\(error)"))
            logger.warning("HMS OAuth token request failed", metadata: ["error": "\(why)"])
            throw HuaweiAuthError(status: nil, message: why)
        }
        let json =
            responseBody.count <= Self.maxResponseBytes
            ? (try? JSONSerialization.jsonObject(with: Data(responseBody))) as? [String: Any] : nil
        guard status == 200 else {
            // HMS: {"error":1101,"sub_error":20003,"error_description":"parameter invalid"}.
            var why = "HTTP \(status)"
            if let json {
                let parts = [json["error"], json["sub_error"], json["error_description"]].compactMap { v -> String? in
                    if let s = v as? String { return s }
                    if let n = v as? NSNumber { return n.stringValue }
                    return nil
                }
                if !parts.isEmpty { why = parts.joined(separator: ": ") }
            } else if !responseBody.isEmpty {
                why = String(decoding: responseBody.prefix(200), as: UTF8.self)
            }
            why = scrub(oneLine(why))
            logger.warning("HMS OAuth token request refused", metadata: ["status": "\(status)", "error": "\(why)"])
            throw HuaweiAuthError(status: status, message: why)
        }
        guard let json, let access = json["access_token"] as? String, !access.isEmpty else {
            throw HuaweiAuthError(status: status, message: "token response without access_token")
        }
        guard access.utf8.count <= Self.maxAccessTokenBytes, access.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw HuaweiAuthError(status: status, message: "token response with an access_token that cannot go in a header")
        }
        var expiresIn: Double = 3600
        if let n = json["expires_in"] as? NSNumber {
            expiresIn = n.doubleValue
        } else if let s = json["expires_in"] as? String, s.utf8.count <= 32, let d = Double(s) {
            expiresIn = d
        }
        // A hostile or broken token server: NaN, negative or centuries-long lifetimes are not taken.
        if !(expiresIn >= Self.lifetimeBounds.lowerBound) { expiresIn = Self.lifetimeBounds.lowerBound }
        expiresIn = min(expiresIn, Self.lifetimeBounds.upperBound)
        let margin = min(refreshMargin, expiresIn / 2)
        logger.debug("HMS access token fetched", metadata: ["expires_in": "\(expiresIn)"])
        return CachedToken(value: access, refreshAt: issued.addingTimeInterval(expiresIn - margin), expiresAt: issued.addingTimeInterval(expiresIn))
    }
}
