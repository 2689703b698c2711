import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import Signing

/// Failure to obtain an OAuth2 access token.
public struct FCMAuthError: Error, Sendable, Equatable, CustomStringConvertible {
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
        if let status { return "FCM OAuth token request failed (HTTP \(status)): \(message)" }
        return "FCM OAuth token request failed: \(message)"
    }
}

/// OAuth2 JWT bearer grant (RFC 7523) for the FCM scope, with a shared cached access token.
///
/// One token is shared by every send until shortly before it expires; however many sends wait,
/// at most one token request is in flight. `invalidate(_:)` drops a token FCM refused (401).
public actor FCMTokenProvider {
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// Assertion lifetime (Google accepts at most one hour).
    public static let assertionLifetime: Int64 = 3600

    /// Raw transport: POST `body` (form-encoded) to `url`, answer status and body.
    public typealias Transport = @Sendable (_ url: String, _ body: [UInt8]) async throws -> (status: Int, body: [UInt8])

    struct CachedToken {
        var value: String
        var refreshAt: Date
        var expiresAt: Date
    }

    public nonisolated let serviceAccount: ServiceAccount
    private let signer: JWTSigner
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
        serviceAccount: ServiceAccount,
        httpClient: HTTPClient,
        logger: Logger = Logger(label: "pushgate.fcm.oauth"),
        refreshMargin: TimeInterval = 300,
        requestTimeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            serviceAccount: serviceAccount,
            transport: Self.httpTransport(httpClient, timeout: requestTimeout),
            logger: logger,
            refreshMargin: refreshMargin,
            now: now
        )
    }

    /// With an explicit transport (tests).
    public init(
        serviceAccount: ServiceAccount,
        transport: @escaping Transport,
        logger: Logger = Logger(label: "pushgate.fcm.oauth"),
        refreshMargin: TimeInterval = 300,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.serviceAccount = serviceAccount
        self.signer = JWTSigner(key: .rs256(serviceAccount.privateKey))
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
            var buffer = try await response.body.collect(upTo: 1 << 20)
            let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
            return (Int(response.status.code), bytes)
        }
    }

    /// The RS256 assertion: header `{"alg":"RS256","typ":"JWT","kid":private_key_id}`, claims
    /// iss, scope, aud (= token_uri), iat, exp = iat + 3600.
    public nonisolated func makeAssertion(issuedAt: Date) throws -> String {
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        return try signer.sign(
            header: [("typ", .string("JWT")), ("kid", .string(serviceAccount.privateKeyID))],
            claims: [
                ("iss", .string(serviceAccount.clientEmail)),
                ("scope", .string(Self.scope)),
                ("aud", .string(serviceAccount.tokenURI)),
                ("iat", .int(iat)),
                ("exp", .int(iat + Self.assertionLifetime)),
            ]
        )
    }

    /// The form body of the token request.
    public static func formBody(assertion: String) -> String {
        "grant_type=" + formEncode(grantType) + "&assertion=" + formEncode(assertion)
    }

    static func formEncode(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
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

    /// Drops `token` if it is the cached one (FCM answered 401 for it): the next send re-mints.
    public func invalidate(_ token: String) {
        if cached?.value == token {
            logger.debug("FCM access token invalidated")
            cached = nil
        }
    }

    private func countRequest() { tokenRequests += 1 }

    private func fetchToken() async throws -> CachedToken {
        countRequest()
        let issued = now()
        let assertion: String
        do {
            assertion = try makeAssertion(issuedAt: issued)
        } catch {
            throw FCMAuthError(status: nil, message: "cannot sign the assertion: \(error)")
        }
        let body = Array(Self.formBody(assertion: assertion).utf8)
        let status: Int
        let responseBody: [UInt8]
        do {
            (status, responseBody) = try await transport(serviceAccount.tokenURI, body)
        } catch {
            logger.warning("FCM OAuth token request failed", metadata: ["error": "\(error)"])
            throw FCMAuthError(status: nil, message: oneLine("\(error)"))
        }
        let json = (try? JSONSerialization.jsonObject(with: Data(responseBody))) as? [String: Any]
        guard status == 200 else {
            var why = "HTTP \(status)"
            if let json {
                let err = json["error"] as? String ?? (json["error"] as? [String: Any])?["status"] as? String
                let desc = json["error_description"] as? String ?? (json["error"] as? [String: Any])?["message"] as? String
                why = [err, desc].compactMap { $0 }.joined(separator: ": ")
            } else if !responseBody.isEmpty {
                why = String(decoding: responseBody.prefix(200), as: UTF8.self)
            }
            logger.warning("FCM OAuth token request refused", metadata: ["status": "\(status)", "error": "\(why)"])
            throw FCMAuthError(status: status, message: oneLine(why))
        }
        guard let json, let access = json["access_token"] as? String, !access.isEmpty else {
            throw FCMAuthError(status: status, message: "token response without access_token")
        }
        var expiresIn: Double = 3600
        if let n = json["expires_in"] as? NSNumber {
            expiresIn = n.doubleValue
        } else if let s = json["expires_in"] as? String, let d = Double(s) {
            expiresIn = d
        }
        // A hostile or broken token server: NaN, negative or centuries-long lifetimes are not taken.
        if !(expiresIn > 0) { expiresIn = 60 }
        expiresIn = min(expiresIn, 86_400)
        let margin = min(refreshMargin, expiresIn / 2)
        logger.debug("FCM access token minted", metadata: ["expires_in": "\(expiresIn)"])
        return CachedToken(value: access, refreshAt: issued.addingTimeInterval(expiresIn - margin), expiresAt: issued.addingTimeInterval(expiresIn))
    }
}
