import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import Signing

/// Failure to obtain an FCM OAuth2 access token.
public typealias FCMAuthError = OAuthTokenError

/// OAuth2 JWT bearer grant (RFC 7523) for the FCM scope, with a shared cached access token
/// (`OAuthTokenCache`): one token for every send until shortly before it expires, at most one token
/// request in flight, `invalidate(_:)` for a token FCM refused (401).
public final class FCMTokenProvider: Sendable {
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// Assertion lifetime (Google accepts at most one hour).
    public static let assertionLifetime: Int64 = 3600

    public typealias Transport = OAuthTokenCache.Transport

    public let serviceAccount: ServiceAccount
    private let signer: JWTSigner
    /// The shared token (what `BearerJSONSender` authorises sends with).
    public let cache: OAuthTokenCache

    /// Uses `httpClient` for the token exchange (give it a TLS configuration trusting the token endpoint).
    public convenience init(
        serviceAccount: ServiceAccount,
        httpClient: HTTPClient,
        logger: Logger = Logger(label: "pushgate.fcm.oauth"),
        refreshMargin: TimeInterval = 300,
        requestTimeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            serviceAccount: serviceAccount, transport: OAuthTokenCache.httpTransport(httpClient, timeout: requestTimeout), logger: logger,
            refreshMargin: refreshMargin, now: now)
    }

    /// With an explicit transport (tests).
    public init(
        serviceAccount: ServiceAccount,
        transport: @escaping Transport,
        logger: Logger = Logger(label: "pushgate.fcm.oauth"),
        refreshMargin: TimeInterval = 300,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        let signer = JWTSigner(key: .rs256(serviceAccount.privateKey))
        self.serviceAccount = serviceAccount
        self.signer = signer
        // Google's lifetimes are taken from 1 s up (a short one is refreshed at half its life).
        self.cache = OAuthTokenCache(
            provider: "FCM", transport: transport, logger: logger, refreshMargin: refreshMargin, lifetimeBounds: 1...86_400, now: now
        ) { issued in
            let assertion = try Self.assertion(signer: signer, account: serviceAccount, issuedAt: issued)
            return (serviceAccount.tokenURI, Array(Self.formBody(assertion: assertion).utf8))
        }
    }

    /// The RS256 assertion: header `{"alg":"RS256","typ":"JWT","kid":private_key_id}`, claims
    /// iss, scope, aud (= token_uri), iat, exp = iat + 3600.
    public func makeAssertion(issuedAt: Date) throws -> String {
        try Self.assertion(signer: signer, account: serviceAccount, issuedAt: issuedAt)
    }

    static func assertion(signer: JWTSigner, account: ServiceAccount, issuedAt: Date) throws -> String {
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        return try signer.sign(
            header: [("typ", .string("JWT")), ("kid", .string(account.privateKeyID))],
            claims: [
                ("iss", .string(account.clientEmail)),
                ("scope", .string(scope)),
                ("aud", .string(account.tokenURI)),
                ("iat", .int(iat)),
                ("exp", .int(iat + assertionLifetime)),
            ]
        )
    }

    /// The form body of the token request.
    public static func formBody(assertion: String) -> String {
        "grant_type=" + OAuthTokenCache.formEncode(grantType) + "&assertion=" + OAuthTokenCache.formEncode(assertion)
    }

    /// A valid access token: the cached one, or a fresh one (one request however many callers wait).
    public func accessToken() async throws -> String { try await cache.accessToken() }

    /// Drops `token` if it is the cached one (FCM answered 401 for it): the next send re-mints.
    public func invalidate(_ token: String) async { await cache.invalidate(token) }

    /// Token requests made (successful or not).
    public var tokenRequests: Int { get async { await cache.requests } }
}
