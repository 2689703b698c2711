import Crypto
import Foundation
import Signing

/// The APNs provider token (ES256 JWT), one per key, shared by every connection of both environments.
///
/// - A token is re-minted when older than a lifetime drawn at random from `lifetime` (40–50 minutes),
///   so APNs (which refuses tokens older than an hour) never sees a stale one and several gateways
///   sharing a key do not all refresh at once.
/// - After `ExpiredProviderToken`, `invalidate(_:)` re-mints, but only if the failing token is still
///   the current one (many in-flight requests failing together cause one re-mint), and such forced
///   re-mints happen at most once per `minimumInterval` (20 minutes): APNs answers
///   `TooManyProviderTokenUpdates` to faster refreshes, and a clock-skewed host must not re-mint per push.
/// - The hot path (`authorization`) takes a lock, reads the clock and returns a cached string; signing
///   happens only when a new token is minted.
public final class APNsTokenManager: @unchecked Sendable {
    public typealias Clock = @Sendable () -> Double
    public typealias Random = @Sendable (ClosedRange<Double>) -> Double

    public struct Token: Sendable, Equatable {
        /// The compact JWS.
        public let jwt: String
        /// `bearer <jwt>`, the `authorization` header value.
        public let authorization: String
        /// The `iat` claim (epoch seconds).
        public let issuedAt: Int64
        /// Clock time when minted.
        let mintedAt: Double
        /// Clock time after which it is replaced.
        let refreshAt: Double
    }

    public let keyID: String
    public let teamID: String
    public let lifetime: ClosedRange<Double>
    public let minimumInterval: Double

    private let signer: JWTSigner
    private let clock: Clock
    private let random: Random
    private let lock = NSLock()
    private var current: Token?
    private var lastForcedMint: Double?
    private var mintCount = 0

    /// - Parameters:
    ///   - clock: epoch seconds (injected by tests).
    ///   - lifetime: age range (seconds) after which a token is re-minted; one value drawn per token.
    ///   - minimumInterval: least time between two re-mints forced by `ExpiredProviderToken`.
    public init(
        key: P256.Signing.PrivateKey, keyID: String, teamID: String,
        clock: @escaping Clock = { Date().timeIntervalSince1970 },
        lifetime: ClosedRange<Double> = 40 * 60...50 * 60,
        minimumInterval: Double = 20 * 60,
        random: @escaping Random = { Double.random(in: $0) }
    ) {
        self.signer = JWTSigner(key: .es256(key))
        self.keyID = keyID
        self.teamID = teamID
        self.clock = clock
        self.lifetime = lifetime
        self.minimumInterval = minimumInterval
        self.random = random
    }

    /// The token manager of a token-auth configuration (nil with certificate auth: there is no JWT).
    public convenience init?(configuration: APNsConfiguration, clock: @escaping Clock = { Date().timeIntervalSince1970 }) {
        guard case .token(let key, let keyID, let teamID) = configuration.credentials else { return nil }
        self.init(key: key, keyID: keyID, teamID: teamID, clock: clock)
    }

    /// The current token, minted when there is none or it reached its lifetime.
    public func token() throws -> Token {
        let now = clock()
        lock.lock()
        defer { lock.unlock() }
        if let t = current, now < t.refreshAt, now >= t.mintedAt - 60 {
            return t
        }
        return try mintLocked(now: now)
    }

    /// The `authorization` header value (`bearer <jwt>`).
    public func authorization() throws -> String { try token().authorization }

    /// Called after APNs answered `ExpiredProviderToken` for `token` (the JWT or the `authorization`
    /// value that was sent). Returns true when the next `token()` will be a new one.
    @discardableResult
    public func invalidate(_ token: String) -> Bool {
        let now = clock()
        lock.lock()
        defer { lock.unlock() }
        guard let t = current, t.jwt == token || t.authorization == token else {
            // Already replaced by another request's invalidation (or a scheduled refresh).
            return true
        }
        if let last = lastForcedMint, now - last < minimumInterval, now >= last {
            return false
        }
        lastForcedMint = now
        current = nil
        return true
    }

    /// How many tokens were minted (for tests and metrics).
    public var mintedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return mintCount
    }

    private func mintLocked(now: Double) throws -> Token {
        let iat = Int64(now.rounded(.down))
        let jwt = try signer.sign(header: [("kid", .string(keyID))], claims: [("iss", .string(teamID)), ("iat", .int(iat))])
        let t = Token(jwt: jwt, authorization: "bearer " + jwt, issuedAt: iat, mintedAt: now, refreshAt: now + random(lifetime))
        current = t
        mintCount += 1
        return t
    }
}
