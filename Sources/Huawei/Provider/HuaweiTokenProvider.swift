import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit

/// Failure to obtain an HMS OAuth 2.0 access token. Never carries the app secret.
public typealias HuaweiAuthError = OAuthTokenError

/// OAuth 2.0 client-credentials grant (`grant_type=client_credentials`, `client_id` = app id,
/// `client_secret` = app secret, form-encoded POST) with one shared cached access token
/// (`OAuthTokenCache`): one token for every send until shortly before it expires, at most one token
/// request in flight, `invalidate(_:)` for a token HMS refused (80200001 / 80200003). The app secret
/// is blanked in every error (a hostile or broken token server may echo the request).
public final class HuaweiTokenProvider: Sendable {
    public static let grantType = "client_credentials"
    /// `expires_in` is taken within these bounds (HMS issues one-hour tokens).
    public static let lifetimeBounds: ClosedRange<Double> = 60...86_400

    public typealias Transport = OAuthTokenCache.Transport

    public let appID: String
    public let tokenURL: String
    /// The shared token (what `BearerJSONSender` authorises sends with).
    public let cache: OAuthTokenCache

    /// Uses `httpClient` for the token exchange (give it a TLS configuration trusting the token endpoint).
    public convenience init(
        appID: String, appSecret: String, tokenURL: String,
        httpClient: HTTPClient,
        logger: Logger = Logger(label: "pushgate.hms.oauth"),
        refreshMargin: TimeInterval = 300,
        requestTimeout: TimeAmount = .seconds(30),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            appID: appID, appSecret: appSecret, tokenURL: tokenURL,
            transport: OAuthTokenCache.httpTransport(httpClient, timeout: requestTimeout),
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
        self.tokenURL = tokenURL
        let body = Array(Self.formBody(appID: appID, appSecret: appSecret).utf8)
        self.cache = OAuthTokenCache(
            provider: "HMS", transport: transport, logger: logger, refreshMargin: refreshMargin, lifetimeBounds: Self.lifetimeBounds,
            secrets: [appSecret], now: now
        ) { _ in (tokenURL, body) }
    }

    /// The form body of the token request.
    public static func formBody(appID: String, appSecret: String) -> String {
        "grant_type=" + grantType + "&client_id=" + OAuthTokenCache.formEncode(appID) + "&client_secret="
            + OAuthTokenCache.formEncode(appSecret)
    }

    /// A valid access token: the cached one, or a fresh one (one request however many callers wait).
    public func accessToken() async throws -> String { try await cache.accessToken() }

    /// Drops `token` if it is the cached one (HMS refused it): the next send fetches a new one.
    public func invalidate(_ token: String) async { await cache.invalidate(token) }

    /// `s` with the app secret blanked.
    func scrub(_ s: String) -> String { cache.scrub(s) }

    /// Token requests made (successful or not).
    public var tokenRequests: Int { get async { await cache.requests } }
}
