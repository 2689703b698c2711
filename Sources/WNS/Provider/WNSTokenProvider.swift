import Foundation
import Logging
import ProviderKit

/// How the gateway authenticates with WNS.
public enum WNSCredentials: Sendable, Equatable {
    /// Microsoft Entra ID client credentials (Windows App SDK apps): the app registration's tenant,
    /// client id and secret; scope `https://wns.windows.com/.default`.
    case entra(tenantID: String, clientID: String, clientSecret: String)
    /// The legacy Live flow (Microsoft Store / UWP apps): the package SID and its secret; scope
    /// `notify.windows.com`.
    case live(packageSID: String, secret: String)

    public static let entraScope = "https://wns.windows.com/.default"
    public static let liveScope = "notify.windows.com"
    public static let liveTokenURL = "https://login.live.com/accesstoken.srf"

    /// `https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token`.
    public static func entraTokenURL(tenantID: String) -> String {
        "https://login.microsoftonline.com/\(tenantID)/oauth2/v2.0/token"
    }

    /// The flow's token endpoint.
    public var defaultTokenURL: String {
        switch self {
        case .entra(let tenant, _, _): return Self.entraTokenURL(tenantID: tenant)
        case .live: return Self.liveTokenURL
        }
    }

    /// "Entra" or "Live", as logs and errors name the flow.
    public var flowName: String {
        switch self {
        case .entra: return "Entra"
        case .live: return "Live"
        }
    }

    var secret: String {
        switch self {
        case .entra(_, _, let s), .live(_, let s): return s
        }
    }

    /// The form body of the token request (client credentials grant, every value form-encoded).
    public var formBody: String {
        let (id, secret, scope): (String, String, String)
        switch self {
        case .entra(_, let clientID, let clientSecret): (id, secret, scope) = (clientID, clientSecret, Self.entraScope)
        case .live(let sid, let s): (id, secret, scope) = (sid, s, Self.liveScope)
        }
        return "grant_type=client_credentials&client_id=" + OAuthTokenCache.formEncode(id) + "&client_secret="
            + OAuthTokenCache.formEncode(secret) + "&scope=" + OAuthTokenCache.formEncode(scope)
    }

    /// Whether a tenant id can go in the token URL's path: a GUID or a domain name.
    public static func isValidTenantID(_ s: String) -> Bool {
        (1...256).contains(s.utf8.count)
            && s.utf8.allSatisfy {
                ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x2E
            }
            && !s.hasPrefix(".") && !s.contains("..")
    }
}

/// The one WNS access token shared by every send (`OAuthTokenCache`): fetched with the configured
/// flow, refreshed `refreshMargin` before it expires, at most one token request in flight, dropped
/// when WNS answers 401 so that the next send fetches a new one. The secret is blanked in every
/// error (a token server may echo the request).
public final class WNSTokenProvider: Sendable {
    /// `expires_in` is taken within these bounds (both flows issue one-day tokens).
    public static let lifetimeBounds: ClosedRange<Double> = 60...86_400

    public let credentials: WNSCredentials
    public let tokenURL: String
    public let cache: OAuthTokenCache

    public init(
        credentials: WNSCredentials, tokenURL: String? = nil, transport: @escaping OAuthTokenCache.Transport,
        logger: Logger = Logger(label: "pushgate.wns.oauth"), refreshMargin: TimeInterval = 300,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.credentials = credentials
        let url = tokenURL ?? credentials.defaultTokenURL
        self.tokenURL = url
        let body = Array(credentials.formBody.utf8)
        self.cache = OAuthTokenCache(
            provider: "WNS (\(credentials.flowName))", transport: transport, logger: logger, refreshMargin: refreshMargin,
            lifetimeBounds: Self.lifetimeBounds, secrets: [credentials.secret], now: now
        ) { _ in (url, body) }
    }

    public func accessToken() async throws -> String { try await cache.accessToken() }
    public func invalidate(_ token: String) async { await cache.invalidate(token) }
    /// Token requests made (successful or not).
    public var tokenRequests: Int { get async { await cache.requests } }
}
