import Crypto
import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import Signing
import SwiftASN1
import X509

/// An APNs auth key made for tests: a P-256 key as the `.p8` PEM (PKCS#8) Apple hands out, with
/// the Key ID and Team ID it goes with.
public struct TestAPNsKey: Sendable {
    public let privateKey: P256.Signing.PrivateKey
    public let keyID: String
    public let teamID: String

    public init(privateKey: P256.Signing.PrivateKey, keyID: String, teamID: String) {
        self.privateKey = privateKey
        self.keyID = keyID
        self.teamID = teamID
    }

    public static func generate(keyID: String = "MOCKKEY123", teamID: String = "MOCKTEAM12") -> TestAPNsKey {
        TestAPNsKey(privateKey: P256.Signing.PrivateKey(), keyID: keyID, teamID: teamID)
    }

    public var publicKey: P256.Signing.PublicKey { privateKey.publicKey }
    /// `-----BEGIN PRIVATE KEY-----` (PKCS#8), like an `AuthKey_<KEYID>.p8` file.
    public var p8PEM: String { privateKey.pemRepresentation }

    /// Writes the `.p8` file (e.g. for `ios.key_path`).
    public func write(to path: String) throws {
        try (p8PEM + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// Mock APNs (`POST /3/device/<hex token>`, HTTP/2 over TLS) that checks requests like APNs does:
/// the provider token (ES256 JWT verified with the key's public half, `kid`/`iss`, numeric and
/// fresh `iat`) or, on a connection that presented a client certificate chaining to
/// `Options.clientCertificateRootsPEM` (certificate-based trust), no token but an `apns-topic` among
/// the certificate's topics (its subject UID and the 1.2.840.113635.100.6.3.6 extension), the path, `apns-topic`, `apns-push-type`, `apns-priority` (background must be 5),
/// `apns-expiration`, `apns-id`, `apns-collapse-id`, the payload size (4096, 5120 for VoIP) and
/// JSON with `aps`. Answers scripted replies per device token, in order, then the default (200
/// with `apns-id`). Records every request, thread-safely.
public final class MockAPNs: Sendable {
    /// A scripted answer.
    public enum Reply: Sendable, Equatable {
        /// 200 with `apns-id`.
        case ok
        /// This status with APNs' usual reason for it (200 is `.ok`).
        case status(Int)
        /// Any status and reason, optionally with `Retry-After` (seconds).
        case error(status: Int, reason: String, retryAfter: Int?)
        /// 429 TooManyRequests.
        case tooManyRequests(retryAfter: Int?)
        /// 410 Unregistered with a `timestamp` (ms).
        case unregistered
        /// 410 ExpiredToken.
        case expiredToken
        /// 400 BadDeviceToken.
        case badDeviceToken
        /// 400 DeviceTokenNotForTopic.
        case deviceTokenNotForTopic
        /// 500 InternalServerError.
        case internalError
        /// 503 ServiceUnavailable.
        case serviceUnavailable(retryAfter: Int?)
        /// 403 ExpiredProviderToken.
        case expiredProviderToken

        /// Status and reason of the answer (nil reason for 200).
        public var statusAndReason: (Int, String?) {
            switch self {
            case .ok: return (200, nil)
            case .status(let s): return (s, s == 200 ? nil : MockAPNs.defaultReason(s))
            case .error(let s, let r, _): return (s, r)
            case .tooManyRequests: return (429, "TooManyRequests")
            case .unregistered: return (410, "Unregistered")
            case .expiredToken: return (410, "ExpiredToken")
            case .badDeviceToken: return (400, "BadDeviceToken")
            case .deviceTokenNotForTopic: return (400, "DeviceTokenNotForTopic")
            case .internalError: return (500, "InternalServerError")
            case .serviceUnavailable: return (503, "ServiceUnavailable")
            case .expiredProviderToken: return (403, "ExpiredProviderToken")
            }
        }

        var retryAfter: Int? {
            switch self {
            case .error(_, _, let r), .tooManyRequests(let r), .serviceUnavailable(let r): return r
            default: return nil
            }
        }
    }

    /// One request as received, with what the mock answered.
    public struct RecordedRequest: Sendable {
        public var receivedAt: Date
        public var method: String
        public var path: String
        /// The device token from the path (empty when the path was not `/3/device/<token>`).
        public var token: String
        /// The `apns-channel-id` of a broadcast or channel-management request (nil otherwise).
        public var channelID: String?
        public var headers: [(String, String)]
        public var body: [UInt8]
        public var connectionID: Int
        /// The subject of the client certificate the connection presented (nil: token auth).
        public var clientCertificateSubject: String?
        /// That certificate's topics (UID first, then the topics extension).
        public var clientCertificateTopics: [String]
        public var status: Int
        /// The reason answered (nil for 200).
        public var reason: String?
        /// Whether the answer came from a script / the default reply (false: refused by the checks).
        public var scripted: Bool

        public func header(_ name: String) -> String? {
            let lower = name.lowercased()
            return headers.first(where: { $0.0.lowercased() == lower })?.1
        }
        public var apnsID: String? { header("apns-id") }
        public var topic: String? { header("apns-topic") }
        public var pushType: String? { header("apns-push-type") }
        public var priority: String? { header("apns-priority") }
        public var expiration: String? { header("apns-expiration") }
        public var collapseID: String? { header("apns-collapse-id") }
        /// The JWT after `bearer `.
        public var providerToken: String? {
            guard let auth = header("authorization") else { return nil }
            let parts = auth.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
            return String(parts[1])
        }
        /// The provider token's `kid` (which signing key, hence which app, sent it).
        public var providerKeyID: String? {
            guard let jwt = providerToken, let decoded = try? DecodedJWT(jwt) else { return nil }
            return decoded.header["kid"] as? String
        }
        public var bodyString: String { String(decoding: body, as: UTF8.self) }
        /// The payload as a dictionary (empty when not a JSON object).
        public var payload: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        }
        public var aps: [String: Any] { payload["aps"] as? [String: Any] ?? [:] }
    }

    public struct Options: Sendable {
        /// Verifies provider tokens (the public half of the `.p8` key).
        public var publicKey: P256.Signing.PublicKey
        /// Expected JWT `kid` / `iss` (nil: not checked).
        public var keyID: String?
        public var teamID: String?
        /// Further signing keys the mock trusts, each with its own `kid` and team (as Apple trusts every
        /// key of every account): a token whose `kid` names one of them is verified with it.
        public var additionalKeys: [TestAPNsKey] = []
        /// Keys restricted to one environment, by Key ID (true: production only, false: sandbox only),
        /// as Apple's team-scoped and topic-specific keys are: a token of such a key sent to a mock
        /// playing the other environment (`production`) is refused with 403 BadEnvironmentKeyIdInToken.
        public var keyEnvironments: [String: Bool] = [:]
        /// Keys restricted to a set of topics (bundle ids), by Key ID: a push to another topic with a
        /// token of such a key is refused with 400 TopicDisallowed.
        public var keyTopics: [String: [String]] = [:]
        /// A token whose `iat` is older than this is refused with 403 ExpiredProviderToken.
        public var maxTokenAge: Double = 3600
        /// Tolerated clock skew for an `iat` in the future.
        public var maxClockSkew: Double = 300
        public var tls: TLSConfiguration?
        public var port: Int = 0
        /// Scripted latency added before every response.
        public var responseDelay: TimeAmount? = nil
        /// Answers held until released (`MockResponseHold`).
        public var responseHold: MockResponseHold? = nil
        /// SETTINGS_MAX_CONCURRENT_STREAMS (APNs: 1 until a valid token was seen, then e.g. 500; here constant).
        public var maxConcurrentStreams: Int = 1000
        /// CA certificates (PEM) that client certificates must chain to. When set (and `tls` is),
        /// clients may present a certificate in the TLS handshake (one that does not verify fails the
        /// handshake); requests on such a connection need no provider token. Empty: no client
        /// certificates are asked for (token auth only, as `pushgate mock`).
        public var clientCertificateRootsPEM: [String] = []
        /// The environment this mock plays (nil: not checked). A client certificate that is marked
        /// for the other environment only (1.2.840.113635.100.6.3.1 development, .2 production) is
        /// answered 403 BadCertificateEnvironment.
        public var production: Bool? = nil
        /// Keep every request in `requests` (tests). Off for load runs (`pushgate mock` / `bench`):
        /// memory stays flat and only `hook` sees the requests.
        public var recordRequests = true
        /// Called (on the connection's event loop: keep it cheap) for every request that passed the
        /// checks, with the device token and the payload bytes; a non-nil answer replaces the
        /// scripted / default one (scripted failure rates, per-token counting in load tests).
        public var hook: (@Sendable (_ token: String, _ body: [UInt8]) -> Reply?)? = nil
        /// Port of the channel-management listener (0: any free port).
        public var channelsPort: Int = 0

        public init(publicKey: P256.Signing.PublicKey, keyID: String? = nil, teamID: String? = nil, tls: TLSConfiguration?) {
            self.publicKey = publicKey
            self.keyID = keyID
            self.teamID = teamID
            self.tls = tls
        }

        public init(key: TestAPNsKey, tls: TLSConfiguration?) {
            self.init(publicKey: key.publicKey, keyID: key.keyID, teamID: key.teamID, tls: tls)
        }
    }

    struct State {
        /// Broadcast channels per bundle id: id -> message storage policy.
        var channels: [String: [String: Int]] = [:]
        var channelsCreated = 0
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var requests: [RecordedRequest] = []
        /// Verified provider tokens and their `iat` (each distinct token is verified once).
        var verifiedTokens: [String: Int64] = [:]
        var providerTokensSeen: [String] = []
        /// Parsed client certificates by DER.
        var clientIdentities: [[UInt8]: ClientIdentity] = [:]
    }

    /// What the mock reads from a client certificate.
    struct ClientIdentity {
        var subject: String
        var uid: String?
        var topics: [String]
        var development = false
        var production = false
    }

    public static let payloadLimit = 4096
    public static let voipPayloadLimit = 5120
    static let pushTypes: Set<String> = [
        "alert", "background", "voip", "location", "complication", "fileprovider", "mdm",
        "liveactivity", "pushtotalk", "widgets", "controls",
    ]
    static let topicSuffixes: [String: String] = [
        "voip": ".voip", "location": ".location-query", "complication": ".complication",
        "fileprovider": ".pushkit.fileprovider", "liveactivity": ".push-type.liveactivity", "pushtotalk": ".voip-ptt",
        "widgets": ".push-type.widgets",
    ]

    /// Channels Apple keeps per app and environment.
    public static let maxChannelsPerApp = 10_000
    /// A broadcast carries up to 5 KB.
    public static let broadcastPayloadLimit = 5120

    public let options: Options
    let state = NIOLockedValueBox(State())
    let serverBox = NIOLockedValueBox<MockHTTPServer?>(nil)
    /// Apple's channel-management host (`api-manage-broadcast…`), a listener of its own.
    let channelServerBox = NIOLockedValueBox<MockHTTPServer?>(nil)

    public init(options: Options, eventLoopGroup: any EventLoopGroup) {
        self.options = options
        var serverOptions = MockHTTPServer.Options()
        serverOptions.tls = options.tls
        if var tls = options.tls, !options.clientCertificateRootsPEM.isEmpty {
            // A bad PEM leaves no roots: every presented certificate then fails the handshake.
            let roots = options.clientCertificateRootsPEM.flatMap { (try? NIOSSLCertificate.fromPEMBytes(Array($0.utf8))) ?? [] }
            tls.trustRoots = .certificates(roots)
            tls.certificateVerification = .optionalVerification
            serverOptions.tls = tls
        }
        serverOptions.port = options.port
        serverOptions.responseDelay = options.responseDelay
        serverOptions.responseHold = options.responseHold
        serverOptions.maxConcurrentStreams = options.maxConcurrentStreams
        let server = MockHTTPServer(
            options: serverOptions, eventLoopGroup: eventLoopGroup,
            syncHandler: { [weak self] request in
                guard let self else { return MockResponse(status: 503, headers: [], body: []) }
                return self.handle(request)
            })
        serverBox.withLockedValue { $0 = server }
        var channelOptions = serverOptions
        channelOptions.port = options.channelsPort
        let channelServer = MockHTTPServer(
            options: channelOptions, eventLoopGroup: eventLoopGroup,
            syncHandler: { [weak self] request in
                guard let self else { return MockResponse(status: 503, headers: [], body: []) }
                return self.handleChannelManagement(request)
            })
        channelServerBox.withLockedValue { $0 = channelServer }
    }

    public var server: MockHTTPServer { serverBox.withLockedValue { $0! } }
    public var channelServer: MockHTTPServer { channelServerBox.withLockedValue { $0! } }

    public func start() async throws {
        try await server.start()
        try await channelServer.start()
    }
    public func stop() async throws {
        try await server.stop()
        try await channelServer.stop()
    }
    public var port: Int { server.port }
    /// `https://127.0.0.1:<port>`: the APNs `endpoint`.
    public var baseURL: String { server.baseURL }
    /// The channel-management host: `ios.channels_endpoint`.
    public var channelsBaseURL: String { channelServer.baseURL }
    public var connectionsAccepted: Int { server.connectionsAccepted }

    // MARK: scripting

    /// Answers for the next requests to `token`, in order; then the default.
    public func script(_ token: String, _ replies: [Reply]) {
        state.withLockedValue { $0.scripts[token, default: []].append(contentsOf: replies) }
    }

    /// The answer when nothing is scripted for a token (initially `.ok`).
    public func setDefaultReply(_ reply: Reply) {
        state.withLockedValue { $0.defaultReply = reply }
    }

    public func reset() {
        state.withLockedValue { $0 = State() }
    }

    // MARK: observations

    /// Every request received, in arrival order.
    public var requests: [RecordedRequest] { state.withLockedValue { $0.requests } }
    public var requestCount: Int { state.withLockedValue { $0.requests.count } }
    public func requests(for token: String) -> [RecordedRequest] { state.withLockedValue { $0.requests.filter { $0.token == token } } }
    /// Distinct provider tokens (JWTs) that verified, in the order first seen.
    public var providerTokensSeen: [String] { state.withLockedValue { $0.providerTokensSeen } }
    /// Broadcasts (`POST /4/broadcasts/apps/<bundle id>`) received, accepted or not.
    public var broadcasts: [RecordedRequest] { state.withLockedValue { $0.requests.filter { $0.path.hasPrefix("/4/broadcasts/") } } }
    /// Channel-management requests (`/1/apps/...` on the management listener) received.
    public var channelRequests: [RecordedRequest] { state.withLockedValue { $0.requests.filter { $0.path.hasPrefix("/1/apps/") } } }
    /// The channels of a bundle id and their message storage policies.
    public func channels(of bundleID: String) -> [String: Int] { state.withLockedValue { $0.channels[bundleID] ?? [:] } }
    /// Requests refused by the checks (not by a script), as "status reason".
    public var rejections: [String] {
        state.withLockedValue { $0.requests.filter { !$0.scripted }.map { "\($0.status) \($0.reason ?? "")" } }
    }

    // MARK: handling

    static func defaultReason(_ status: Int) -> String {
        switch status {
        case 400: return "BadRequest"
        case 403: return "Forbidden"
        case 404: return "BadPath"
        case 405: return "MethodNotAllowed"
        case 410: return "Unregistered"
        case 413: return "PayloadTooLarge"
        case 429: return "TooManyRequests"
        case 500: return "InternalServerError"
        case 503: return "ServiceUnavailable"
        default: return "Status\(status)"
        }
    }

    static func isHex(_ s: Substring) -> Bool {
        s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) }
    }

    func handle(_ request: MockRequest) -> MockResponse {
        let received = Date()
        var token = ""
        var channelID: String?
        let apnsID = request.header("apns-id") ?? UUID().uuidString
        let identity = request.clientCertificate.map { clientIdentity($0) }
        func answer(_ status: Int, _ reason: String?, retryAfter: Int? = nil, scripted: Bool = false) -> MockResponse {
            record(request, at: received, identity: identity, token: token, channelID: channelID, status: status, reason: reason, scripted: scripted)
            var headers: [(String, String)] = [("apns-id", apnsID)]
            guard let reason else { return MockResponse(status: status, headers: headers) }
            if let retryAfter { headers.append(("retry-after", String(retryAfter))) }
            headers.append(("content-type", "application/json"))
            var body = #"{"reason":"\#(reason)""#
            if status == 410 && reason == "Unregistered" {
                body += #","timestamp":\#(Int64(received.timeIntervalSince1970 * 1000))"#
            }
            body += "}"
            return MockResponse(status: status, headers: headers, body: Array(body.utf8))
        }

        guard request.method == "POST" else { return answer(405, "MethodNotAllowed") }
        if request.path.hasPrefix(Self.broadcastPrefix) {
            channelID = request.header("apns-channel-id")
            let (status, reason, requestID) = broadcast(request, identity: identity)
            record(
                request, at: received, identity: identity, token: "", channelID: channelID, status: status, reason: reason, scripted: reason == nil)
            return Self.managementAnswer(status, reason, requestID: requestID)
        }
        let prefix = "/3/device/"
        guard request.path.hasPrefix(prefix) else { return answer(404, "BadPath") }
        let rawToken = request.path.dropFirst(prefix.count)
        token = String(rawToken)
        if rawToken.isEmpty { return answer(400, "MissingDeviceToken") }
        guard Self.isHex(rawToken), !rawToken.contains("/") else { return answer(400, "BadDeviceToken") }

        let topic: String
        if let identity {
            // Certificate-based trust: no provider token; the certificate must be for this
            // environment and the topic one of the certificate's. Without `apns-topic`, APNs uses
            // the subject's topic when the certificate has only one.
            if let production = options.production, identity.development || identity.production,
                production ? !identity.production : !identity.development
            {
                return answer(403, "BadCertificateEnvironment")
            }
            if let t = request.header("apns-topic"), !t.isEmpty {
                guard identity.topics.contains(t) else { return answer(400, "TopicDisallowed") }
                topic = t
            } else if identity.topics.count <= 1, let uid = identity.uid {
                topic = uid
            } else {
                return answer(400, "MissingTopic")
            }
        } else {
            // Provider token.
            if let refused = checkProviderToken(request.header("authorization")) { return answer(403, refused) }
            guard let t = request.header("apns-topic"), !t.isEmpty else { return answer(400, "MissingTopic") }
            if let refused = checkKeyScope(request.header("authorization"), topic: t) { return answer(refused.0, refused.1) }
            topic = t
        }

        // Headers.
        guard let pushType = request.header("apns-push-type") else { return answer(400, "InvalidPushType") }
        guard Self.pushTypes.contains(pushType) else { return answer(400, "InvalidPushType") }
        if let suffix = Self.topicSuffixes[pushType], !topic.hasSuffix(suffix) { return answer(400, "TopicDisallowed") }
        if let p = request.header("apns-priority") {
            guard ["1", "5", "10"].contains(p) else { return answer(400, "BadPriority") }
            if pushType == "background" && p != "5" { return answer(400, "BadPriority") }
        } else if pushType == "background" {
            return answer(400, "BadPriority")  // default 10 is an error for background pushes
        }
        if let e = request.header("apns-expiration"), Int64(e) == nil || Int64(e)! < 0 { return answer(400, "BadExpirationDate") }
        if let id = request.header("apns-id"), UUID(uuidString: id) == nil { return answer(400, "BadMessageId") }
        if let c = request.header("apns-collapse-id"), c.utf8.count > 64 { return answer(400, "BadCollapseId") }

        // Payload.
        if request.body.isEmpty { return answer(400, "PayloadEmpty") }
        let limit = pushType == "voip" ? Self.voipPayloadLimit : Self.payloadLimit
        if request.body.count > limit { return answer(413, "PayloadTooLarge") }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
            object["aps"] is [String: Any]
        else { return answer(400, "BadPayload") }

        // Scripted answer.
        if let hook = options.hook, let r = hook(token, request.body) {
            let (status, reason) = r.statusAndReason
            return answer(status, reason, retryAfter: r.retryAfter, scripted: true)
        }
        let reply: Reply = state.withLockedValue { s in
            if var queue = s.scripts[token], !queue.isEmpty {
                let r = queue.removeFirst()
                s.scripts[token] = queue
                return r
            }
            return s.defaultReply
        }
        let (status, reason) = reply.statusAndReason
        return answer(status, reason, retryAfter: reply.retryAfter, scripted: true)
    }

    /// Keeps a request with the answer given (unless `recordRequests` is off).
    func record(
        _ request: MockRequest, at received: Date, identity: ClientIdentity?, token: String, channelID: String?, status: Int, reason: String?,
        scripted: Bool
    ) {
        guard options.recordRequests else { return }
        let record = RecordedRequest(
            receivedAt: received, method: request.method, path: request.path, token: token, channelID: channelID,
            headers: request.headers, body: request.body, connectionID: request.connectionID,
            clientCertificateSubject: identity?.subject, clientCertificateTopics: identity?.topics ?? [],
            status: status, reason: reason, scripted: scripted)
        state.withLockedValue { $0.requests.append(record) }
    }

    // MARK: broadcast channels (iOS 18)

    static let broadcastPrefix = "/4/broadcasts/apps/"

    /// An answer of the broadcast or channel-management API: `apns-request-id` always, the reason
    /// as `{"reason":…}` on errors.
    static func managementAnswer(_ status: Int, _ reason: String?, requestID: String, extra: [(String, String)] = [], body: String? = nil)
        -> MockResponse
    {
        var headers: [(String, String)] = [("apns-request-id", requestID)]
        headers.append(contentsOf: extra)
        if let reason {
            headers.append(("content-type", "application/json"))
            return MockResponse(status: status, headers: headers, body: Array(#"{"reason":"\#(reason)"}"#.utf8))
        }
        if let body {
            headers.append(("content-type", "application/json"))
            return MockResponse(status: status, headers: headers, body: Array(body.utf8))
        }
        return MockResponse(status: status, headers: headers)
    }

    /// Whether `id` is shaped like a channel id (base64, at most 256 bytes).
    static func isChannelID(_ id: String) -> Bool {
        let u = id.utf8
        guard !u.isEmpty, u.count <= 256 else { return false }
        return u.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2B || b == 0x2F || b == 0x3D
                || b == 0x2D || b == 0x5F
        }
    }

    /// Authentication of a broadcast or channel request for `bundleID`: the provider token, or a
    /// client certificate for this environment whose topics include the bundle id. nil when good.
    func authorize(_ request: MockRequest, identity: ClientIdentity?, bundleID: String) -> (Int, String)? {
        if let identity {
            if let production = options.production, identity.development || identity.production,
                production ? !identity.production : !identity.development
            {
                return (403, "BadCertificateEnvironment")
            }
            return identity.topics.contains(bundleID) ? nil : (400, "TopicDisallowed")
        }
        if let refused = checkProviderToken(request.header("authorization")) { return (403, refused) }
        return checkKeyScope(request.header("authorization"), topic: bundleID)
    }

    /// A verified token's key used outside its environment or topics (`keyEnvironments`,
    /// `keyTopics`): APNs' answer; nil when within them.
    func checkKeyScope(_ authorization: String?, topic: String) -> (Int, String)? {
        guard !options.keyEnvironments.isEmpty || !options.keyTopics.isEmpty, let authorization else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let decoded = try? DecodedJWT(String(parts[1])), let kid = decoded.header["kid"] as? String else { return nil }
        if let keyProduction = options.keyEnvironments[kid], let production = options.production, keyProduction != production {
            return (403, "BadEnvironmentKeyIdInToken")
        }
        if let topics = options.keyTopics[kid] {
            let covered = topics.contains { topic == $0 || topic.hasPrefix($0 + ".") }
            if !covered { return (400, "TopicDisallowed") }
        }
        return nil
    }

    /// The request id a client gave (`apns-request-id`, a UUID), else one made up; nil when it is not a UUID.
    static func requestID(_ request: MockRequest) -> String? {
        guard let given = request.header("apns-request-id") else { return UUID().uuidString.lowercased() }
        return UUID(uuidString: given) == nil ? nil : given
    }

    /// `POST /4/broadcasts/apps/<bundle id>` on the push host: the channel must exist for the bundle
    /// id, the push type is `liveactivity`, `apns-expiration` is 0 on a No Messages Stored channel,
    /// the payload a Live Activity `update` or `end` of at most 5 KB.
    func broadcast(_ request: MockRequest, identity: ClientIdentity?) -> (status: Int, reason: String?, requestID: String) {
        guard let requestID = Self.requestID(request) else { return (400, "BadRequestId", UUID().uuidString.lowercased()) }
        let bundleID = String(request.path.dropFirst(Self.broadcastPrefix.count))
        guard !bundleID.isEmpty, !bundleID.contains("/") else { return (404, "BadPath", requestID) }
        if let refused = authorize(request, identity: identity, bundleID: bundleID) { return (refused.0, refused.1, requestID) }
        guard let channel = request.header("apns-channel-id") else { return (400, "MissingChannelId", requestID) }
        guard Self.isChannelID(channel) else { return (400, "BadChannelId", requestID) }
        guard let policy = state.withLockedValue({ $0.channels[bundleID]?[channel] }) else { return (400, "ChannelNotRegistered", requestID) }
        guard let pushType = request.header("apns-push-type") else { return (400, "MissingPushType", requestID) }
        guard pushType == "liveactivity" else { return (400, "InvalidPushType", requestID) }
        if let p = request.header("apns-priority"), !["1", "5", "10"].contains(p) { return (400, "BadPriority", requestID) }
        if let e = request.header("apns-expiration") {
            guard let v = Int64(e), v >= 0 else { return (400, "BadExpirationDate", requestID) }
            if policy == 0 && v != 0 { return (400, "BadExpirationDate", requestID) }
        }
        if request.body.isEmpty { return (400, "PayloadEmpty", requestID) }
        if request.body.count > Self.broadcastPayloadLimit { return (413, "PayloadTooLarge", requestID) }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
            let aps = object["aps"] as? [String: Any],
            let event = aps["event"] as? String, event == "update" || event == "end",
            aps["timestamp"] is NSNumber,
            event == "end" || aps["content-state"] is [String: Any]
        else { return (400, "BadPayload", requestID) }
        return (200, nil, requestID)
    }

    /// Apple's channel-management API on its own listener: `POST /1/apps/<bundle id>/channels`
    /// (create), `GET` it with `apns-channel-id` (read), `GET /1/apps/<bundle id>/all-channels`,
    /// `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id` (204).
    func handleChannelManagement(_ request: MockRequest) -> MockResponse {
        let received = Date()
        let identity = request.clientCertificate.map { clientIdentity($0) }
        var channelID = request.header("apns-channel-id")
        let requestID = Self.requestID(request)
        func answer(_ status: Int, _ reason: String?, extra: [(String, String)] = [], body: String? = nil) -> MockResponse {
            record(
                request, at: received, identity: identity, token: "", channelID: channelID, status: status, reason: reason, scripted: reason == nil)
            return Self.managementAnswer(status, reason, requestID: requestID ?? UUID().uuidString.lowercased(), extra: extra, body: body)
        }
        guard requestID != nil else { return answer(400, "BadRequestId") }
        let prefix = "/1/apps/"
        guard request.path.hasPrefix(prefix) else { return answer(404, "BadPath") }
        let rest = request.path.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard rest.count == 2, !rest[0].isEmpty, rest[1] == "channels" || rest[1] == "all-channels" else { return answer(404, "BadPath") }
        let bundleID = String(rest[0])
        if let refused = authorize(request, identity: identity, bundleID: bundleID) { return answer(refused.0, refused.1) }

        if rest[1] == "all-channels" {
            guard request.method == "GET" else { return answer(405, "MethodNotAllowed") }
            let ids = state.withLockedValue { Array(($0.channels[bundleID] ?? [:]).keys).sorted() }
            let list = ids.map { "\"\($0)\"" }.joined(separator: ",")
            return answer(200, nil, body: #"{"channels":[\#(list)]}"#)
        }
        switch request.method {
        case "POST":
            guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
                return answer(400, "BadRequest")
            }
            guard let pushType = object["push-type"] else { return answer(400, "MissingPushType") }
            guard pushType as? String == "LiveActivity" else { return answer(400, "InvalidPushType") }
            // An integer 0 or 1 (not true, not 0.5, not "1").
            struct Policy: Decodable {
                let policy: Int
                enum CodingKeys: String, CodingKey { case policy = "message-storage-policy" }
            }
            guard object["message-storage-policy"] != nil, let policy = try? JSONDecoder().decode(Policy.self, from: Data(request.body)).policy,
                policy == 0 || policy == 1
            else { return answer(400, "BadMessageStoragePolicy") }
            var bytes = [UInt8](repeating: 0, count: 16)
            for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
            let id = Data(bytes).base64EncodedString()
            let created: Bool = state.withLockedValue { s in
                guard (s.channels[bundleID]?.count ?? 0) < Self.maxChannelsPerApp else { return false }
                s.channels[bundleID, default: [:]][id] = policy
                s.channelsCreated += 1
                return true
            }
            guard created else { return answer(400, "CannotCreateChannelConfig") }
            channelID = id
            return answer(201, nil, extra: [("apns-channel-id", id)])
        case "GET", "DELETE":
            guard let id = request.header("apns-channel-id") else { return answer(400, "MissingChannelId") }
            guard Self.isChannelID(id) else { return answer(400, "BadChannelId") }
            if request.method == "GET" {
                guard let policy = state.withLockedValue({ $0.channels[bundleID]?[id] }) else { return answer(404, "ChannelNotRegistered") }
                return answer(200, nil, body: #"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#)
            }
            let removed = state.withLockedValue { $0.channels[bundleID]?.removeValue(forKey: id) != nil }
            return removed ? answer(204, nil) : answer(404, "ChannelNotRegistered")
        default:
            return answer(405, "MethodNotAllowed")
        }
    }

    /// The subject, UID and topics of a client certificate (parsed once per certificate).
    func clientIdentity(_ der: [UInt8]) -> ClientIdentity {
        if let known = state.withLockedValue({ $0.clientIdentities[der] }) { return known }
        var identity = ClientIdentity(subject: "(unparsable certificate)", uid: nil, topics: [])
        if let certificate = try? Certificate(derEncoded: der) {
            identity.subject = certificate.subject.description
            for rdn in certificate.subject {
                for attribute in rdn where attribute.type == [0, 9, 2342, 19_200_300, 100, 1, 1] {
                    if identity.uid == nil { identity.uid = String(attribute.value) }
                }
            }
            if let uid = identity.uid { identity.topics.append(uid) }
            identity.development = certificate.extensions[oid: [1, 2, 840, 113635, 100, 6, 3, 1]] != nil
            identity.production = certificate.extensions[oid: [1, 2, 840, 113635, 100, 6, 3, 2]] != nil
            if let ext = certificate.extensions[oid: [1, 2, 840, 113635, 100, 6, 3, 6]],
                let root = try? DER.parse(ext.value), case .constructed(let children) = root.content
            {
                for child in children where child.identifier == .utf8String {
                    if let s = try? ASN1UTF8String(derEncoded: child), !identity.topics.contains(String(s)) {
                        identity.topics.append(String(s))
                    }
                }
            }
        }
        let parsed = identity
        state.withLockedValue { $0.clientIdentities[der] = parsed }
        return parsed
    }

    /// nil when the token is good, else APNs' 403 reason.
    func checkProviderToken(_ authorization: String?) -> String? {
        guard let authorization, !authorization.isEmpty else { return "MissingProviderToken" }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return "MissingProviderToken" }
        let jwt = String(parts[1])
        let now = Date().timeIntervalSince1970

        let known = state.withLockedValue { $0.verifiedTokens[jwt] }
        let iat: Int64
        if let known {
            iat = known
        } else {
            guard let decoded = try? DecodedJWT(jwt) else { return "InvalidProviderToken" }
            guard decoded.header["alg"] as? String == "ES256" else { return "InvalidProviderToken" }
            let kid = decoded.header["kid"] as? String
            var (keyID, teamID, publicKey) = (options.keyID, options.teamID, options.publicKey)
            if let other = options.additionalKeys.first(where: { $0.keyID == kid }) {
                (keyID, teamID, publicKey) = (other.keyID, other.teamID, other.publicKey)
            }
            if let keyID, kid != keyID { return "InvalidProviderToken" }
            if let teamID, decoded.claims["iss"] as? String != teamID { return "InvalidProviderToken" }
            // iat must be a JSON number (not a string, not a boolean).
            guard Self.iatIsNumber(jwt), let n = decoded.claims["iat"] as? NSNumber else { return "InvalidProviderToken" }
            guard (try? decoded.verify(es256: publicKey)) != nil else { return "InvalidProviderToken" }
            iat = n.int64Value
            state.withLockedValue {
                if $0.verifiedTokens.updateValue(iat, forKey: jwt) == nil { $0.providerTokensSeen.append(jwt) }
            }
        }
        if Double(iat) > now + options.maxClockSkew { return "InvalidProviderToken" }
        if now - Double(iat) > options.maxTokenAge { return "ExpiredProviderToken" }
        return nil
    }

    /// Whether the claims' `iat` is written as a JSON number.
    static func iatIsNumber(_ jwt: String) -> Bool {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let claims = Base64URL.decode(String(parts[1])) else { return false }
        let text = String(decoding: claims, as: UTF8.self)
        guard let range = text.range(of: "\"iat\"") else { return false }
        let rest = text[range.upperBound...].drop(while: { $0 == " " || $0 == ":" })
        guard let first = rest.first else { return false }
        return first.isNumber || first == "-"
    }
}
