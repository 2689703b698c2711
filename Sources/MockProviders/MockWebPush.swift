import Crypto
import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import PushgateCore
import Signing
import WebPush

/// A browser / UnifiedPush-distributor key set made for tests: a P-256 key pair and a 16-byte auth
/// secret, as `PushManager.subscribe()` would create them.
public struct TestWebPushSubscriber: Sendable {
    public let id: String
    public let privateKey: P256.KeyAgreement.PrivateKey
    public let authSecret: [UInt8]

    public init(id: String, privateKey: P256.KeyAgreement.PrivateKey = .init(), authSecret: [UInt8]? = nil) {
        self.id = id
        self.privateKey = privateKey
        var g = SystemRandomNumberGenerator()
        self.authSecret = authSecret ?? (0..<16).map { _ in UInt8.random(in: 0...255, using: &g) }
    }

    /// base64url of the 65-byte uncompressed public key.
    public var p256dh: String { Base64URL.encode(privateKey.publicKey.x963Representation) }
    public var auth: String { Base64URL.encode(authSecret) }
    public var keys: WebPushSubscription.Keys { .init(p256dh: p256dh, auth: auth) }
}

/// A mock Web Push service (RFC 8030 + RFC 8291 + RFC 8292) that also accepts legacy UnifiedPush
/// unencrypted POSTs. It verifies VAPID (ES256 signature with the `k` key, `aud` = its origin,
/// `exp` at most 24 h ahead), decrypts `aes128gcm` bodies with the subscriber's private key,
/// records the plaintexts and answers scripted statuses per subscription id.
///
/// Endpoints: `<baseURL>/push/<id>`. A POST without `Content-Encoding` is taken as a legacy
/// UnifiedPush message (the raw body is the plaintext).
public final class MockWebPush: Sendable {
    public enum Reply: Sendable, Equatable {
        /// 201 Created with a `Location` (what push services answer).
        case created
        /// 200 with an ntfy-style JSON body (what ntfy answers).
        case ntfyOK
        case gone
        case notFound
        case tooManyRequests(retryAfter: Int?)
        case payloadTooLarge
        /// ntfy's 507 "no active subscriber" (temporary).
        case insufficientStorage
        case serverError(status: Int, retryAfter: Int?)
        case redirect(location: String)
        case custom(status: Int, body: String, headers: [String: String])
    }

    public struct RecordedPush: Sendable {
        public var subscriptionID: String
        public var path: String
        public var headers: [(String, String)]
        public var body: [UInt8]
        /// Decrypted (encrypted pushes) or raw (legacy) plaintext.
        public var plaintext: [UInt8]
        public var encrypted: Bool
        public var ttl: Int?
        public var urgency: String?
        public var topic: String?
        /// The `k=` of the VAPID header and the verified JWT claims (encrypted pushes).
        public var vapidKey: String?
        public var vapidAudience: String?
        public var vapidExpiry: Int64?
        public var vapidSubject: String?
        public var reply: Reply
        public var connectionID: Int
        /// When the request arrived.
        public var receivedAt: Date = Date()
        /// The mock's reading of a plaintext that is a JSON object with a `web_push` member (a declarative
        /// push message, or an attempt at one); nil for any other plaintext. A push service cannot read
        /// the encrypted payload, so the answer does not depend on it: tests read the verdict here.
        public var declarative: DeclarativeVerdict? = nil

        public var plaintextString: String { String(decoding: plaintext, as: UTF8.self) }

        /// Keeps a verified VAPID header's key and claims.
        mutating func setVAPID(_ v: VAPIDInfo) {
            vapidKey = v.key
            vapidAudience = v.aud
            vapidExpiry = v.exp
            vapidSubject = v.sub
        }
        public func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
    }

    public struct Options: Sendable {
        public var tls: TLSConfiguration?
        /// Listening address (any loopback address, e.g. 127.0.0.2).
        public var host = "127.0.0.1"
        public var port: Int = 0
        /// The host name clients use for this service (e.g. `push.example.test`, which a test resolver
        /// maps to `host`): `baseURL`, endpoints and the VAPID `aud` check use it instead of `host`.
        public var publicHost: String? = nil
        public var responseDelay: TimeAmount? = nil
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced on each connection.
        public var maxConcurrentStreams: Int = 1000
        /// When set, VAPID `k=` must be this key (base64url) or the push is refused with 403.
        public var expectedVAPIDKey: String? = nil
        /// Accept POSTs without Content-Encoding as legacy UnifiedPush messages.
        public var acceptLegacy = true
        /// A push server whose distributor requires VAPID (UnifiedPush AND_3 `VAPID_REQUIRED`): a
        /// legacy POST without a valid VAPID Authorization is refused with 401 too.
        public var requireVAPID = false
        /// Keep every push in `pushes` (tests). Off for load runs: memory stays flat.
        public var recordRequests = true
        /// Called (on the event loop: keep it cheap) for every push that passed the checks, with the
        /// subscription id and the (decrypted) plaintext; a non-nil answer replaces the scripted /
        /// default one.
        public var hook: (@Sendable (_ id: String, _ plaintext: [UInt8]) -> Reply?)? = nil
        public init(tls: TLSConfiguration?) { self.tls = tls }
    }

    struct State {
        var subscribers: [String: TestWebPushSubscriber] = [:]
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .created
        var requests = 0
        var rejections: [String] = []
        var pushes: [RecordedPush] = []
        var sequence = 0
        /// Authorization headers whose JWT signature was verified, like a push service's cache: a
        /// gateway sends the same VAPID header to an origin until it re-signs. Expiry is still checked
        /// on every request.
        var verifiedVAPID: [String: VAPIDInfo] = [:]
    }

    public let options: Options
    let state = NIOLockedValueBox(State())
    let server: MockHTTPServer

    public init(options: Options, eventLoopGroup: any EventLoopGroup) {
        self.options = options
        var serverOptions = MockHTTPServer.Options()
        serverOptions.tls = options.tls
        serverOptions.host = options.host
        serverOptions.port = options.port
        serverOptions.responseDelay = options.responseDelay
        serverOptions.maxConcurrentStreams = options.maxConcurrentStreams
        let box = MockWebPushHandlerBox()
        self.server = MockHTTPServer(
            options: serverOptions, eventLoopGroup: eventLoopGroup,
            syncHandler: { request in
                box.mock?.handle(request) ?? MockResponse(status: 503)
            })
        box.set(self)
    }

    public func start() async throws { try await server.start() }
    public func stop() async throws { try await server.stop() }
    public var port: Int { server.port }
    /// `https://127.0.0.1:<port>` (or `https://<publicHost>:<port>`): also the VAPID `aud` the mock expects.
    public var baseURL: String {
        guard let name = options.publicHost else { return server.baseURL }
        return "\(options.tls == nil ? "http" : "https")://\(name):\(port)"
    }
    public var connectionsAccepted: Int { server.connectionsAccepted }
    /// Connections currently open.
    public var openConnections: Int { server.openConnections }

    // MARK: subscribers and scripting

    /// Creates (and registers) a subscriber with a fresh key pair and auth secret.
    @discardableResult
    public func makeSubscriber(id: String? = nil) -> TestWebPushSubscriber {
        let sid =
            id
            ?? state.withLockedValue { s -> String in
                s.sequence += 1
                return "sub\(s.sequence)"
            }
        let sub = TestWebPushSubscriber(id: sid)
        register(sub)
        return sub
    }

    public func register(_ subscriber: TestWebPushSubscriber) {
        state.withLockedValue { $0.subscribers[subscriber.id] = subscriber }
    }

    /// `https://127.0.0.1:PORT/push/<id>`.
    public func endpoint(id: String) -> String { "\(baseURL)/push/\(id)" }

    /// The browser-style subscription JSON of a subscriber (endpoint + keys).
    public func subscription(for subscriber: TestWebPushSubscriber) -> WebPushSubscription {
        WebPushSubscription(endpoint: endpoint(id: subscriber.id), keys: subscriber.keys)
    }

    /// A fresh subscriber's subscription (key pair + auth secret made here, private key kept by the mock).
    public func makeSubscription(id: String? = nil) -> (WebPushSubscription, TestWebPushSubscriber) {
        let s = makeSubscriber(id: id)
        return (subscription(for: s), s)
    }

    /// Answers for the next pushes to `id`, in order; then the default.
    public func script(id: String, replies: [Reply]) {
        state.withLockedValue { $0.scripts[id, default: []].append(contentsOf: replies) }
    }

    public func setDefaultReply(_ reply: Reply) { state.withLockedValue { $0.defaultReply = reply } }
    public func reset() {
        state.withLockedValue {
            $0.pushes = []
            $0.rejections = []
            $0.requests = 0
            $0.scripts = [:]
        }
    }

    // MARK: observations

    public var requestCount: Int { state.withLockedValue { $0.requests } }
    /// Why requests were refused before recording (bad VAPID, undecryptable body, missing TTL, ...).
    public var rejections: [String] { state.withLockedValue { $0.rejections } }
    public var pushes: [RecordedPush] { state.withLockedValue { $0.pushes } }
    /// Why recorded declarative push messages are not valid ones (see `DeclarativeVerdict`).
    public var declarativeProblems: [String] {
        pushes.compactMap { if case .invalid(let why) = $0.declarative { return why } else { return nil } }
    }
    public func pushes(id: String) -> [RecordedPush] { pushes.filter { $0.subscriptionID == id } }

    // MARK: handling

    func reject(_ status: Int, _ why: String) -> MockResponse {
        state.withLockedValue { $0.rejections.append(why) }
        return MockResponse(status: status, headers: [("content-type", "text/plain")], body: Array(why.utf8))
    }

    func handle(_ request: MockRequest) -> MockResponse {
        state.withLockedValue { $0.requests += 1 }
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        guard path.hasPrefix("/push/"), path.count > 6 else { return reject(404, "no such endpoint \(path)") }
        let id = String(path.dropFirst(6))
        guard request.method == "POST" else { return reject(405, "method \(request.method) not allowed") }
        guard let ttlString = request.header("ttl") else { return reject(400, "missing TTL header") }
        guard let ttl = Int(ttlString), ttl >= 0 else { return reject(400, "bad TTL header \(ttlString)") }
        let urgency = request.header("urgency")
        if let u = urgency, !["very-low", "low", "normal", "high"].contains(u) { return reject(400, "bad Urgency \(u)") }
        let topic = request.header("topic")
        if let t = topic, !(1...32).contains(t.utf8.count) || !t.utf8.allSatisfy(Self.isBase64URL) {
            return reject(400, "bad Topic \(t)")
        }
        if request.body.count > 4096 { return reject(413, "payload of \(request.body.count) bytes exceeds 4096") }

        var record = RecordedPush(
            subscriptionID: id, path: request.path, headers: request.headers, body: request.body,
            plaintext: [], encrypted: false, ttl: ttl, urgency: urgency, topic: topic,
            reply: .created, connectionID: request.connectionID)
        let encoding = request.header("content-encoding")
        if let encoding {
            guard encoding.lowercased() == "aes128gcm" else { return reject(400, "unsupported Content-Encoding \(encoding)") }
            guard let authorization = request.header("authorization") else { return reject(401, "missing VAPID Authorization") }
            switch verifyVAPID(authorization) {
            case .failure(let r): return reject(r.status, r.message)
            case .success(let v):
                record.setVAPID(v)
            }
            guard let sub = state.withLockedValue({ $0.subscribers[id] }) else { return reject(404, "unknown subscription \(id)") }
            do {
                record.plaintext = try Self.decrypt(request.body, privateKey: sub.privateKey, authSecret: sub.authSecret)
            } catch {
                return reject(400, "cannot decrypt: \(error)")
            }
            record.encrypted = true
        } else {
            guard options.acceptLegacy else { return reject(400, "missing Content-Encoding") }
            guard !request.body.isEmpty else { return reject(400, "empty legacy message") }
            if let authorization = request.header("authorization") {
                switch verifyVAPID(authorization) {
                case .failure(let r): return reject(r.status, r.message)
                case .success(let v):
                    record.setVAPID(v)
                }
            } else if options.requireVAPID {
                return reject(401, "VAPID required")
            }
            record.plaintext = request.body
        }
        record.declarative = Self.declarativeVerdict(record.plaintext)
        let hooked = options.hook?(id, record.plaintext)
        let reply: Reply = state.withLockedValue { s in
            if let hooked { return hooked }
            if var queue = s.scripts[id], !queue.isEmpty {
                let r = queue.removeFirst()
                s.scripts[id] = queue
                return r
            }
            return s.defaultReply
        }
        record.reply = reply
        let keep = options.recordRequests
        let n = state.withLockedValue { s -> Int in
            if keep {
                s.pushes.append(record)
                return s.pushes.count
            }
            return s.requests
        }
        return Self.response(reply, id: id, sequence: n)
    }

    static func response(_ reply: Reply, id: String, sequence: Int) -> MockResponse {
        func text(_ status: Int, _ s: String, _ h: [(String, String)] = []) -> MockResponse {
            MockResponse(status: status, headers: [("content-type", "text/plain")] + h, body: Array(s.utf8))
        }
        switch reply {
        case .created:
            return MockResponse(status: 201, headers: [("location", "/message/\(id)-\(sequence)")], body: [])
        case .ntfyOK:
            return MockResponse.json(
                200, "{\"id\":\"m\(sequence)\",\"time\":\(Int(Date().timeIntervalSince1970)),\"event\":\"message\",\"topic\":\"\(id)\"}")
        case .gone: return text(410, "push subscription has unsubscribed or expired")
        case .notFound: return text(404, "push subscription not found")
        case .tooManyRequests(let ra): return text(429, "too many requests", ra.map { [("retry-after", String($0))] } ?? [])
        case .payloadTooLarge: return text(413, "payload too large")
        case .insufficientStorage:
            return MockResponse.json(
                507, "{\"code\":50701,\"http\":507,\"error\":\"cannot publish to UnifiedPush topic without previously active subscriber\"}")
        case .serverError(let st, let ra): return text(st, "server error", ra.map { [("retry-after", String($0))] } ?? [])
        case .redirect(let loc): return MockResponse(status: 301, headers: [("location", loc)], body: [])
        case .custom(let st, let body, let headers):
            return MockResponse(status: st, headers: headers.map { ($0.key, $0.value) }, body: Array(body.utf8))
        }
    }

    struct VAPIDInfo {
        var key: String
        var aud: String
        var exp: Int64
        var sub: String
    }
    struct Refusal: Error {
        var status: Int
        var message: String
    }

    func verifyVAPID(_ header: String) -> Result<VAPIDInfo, Refusal> {
        let now = Int64(Date().timeIntervalSince1970)
        if let cached = state.withLockedValue({ $0.verifiedVAPID[header] }) {
            guard cached.exp > now else { return .failure(Refusal(status: 401, message: "VAPID JWT expired")) }
            return .success(cached)
        }
        let result = verifyVAPIDSignature(header, now: now)
        if case .success(let info) = result {
            state.withLockedValue { s in
                if s.verifiedVAPID.count >= 1024 { s.verifiedVAPID.removeAll(keepingCapacity: true) }
                s.verifiedVAPID[header] = info
            }
        }
        return result
    }

    private func verifyVAPIDSignature(_ header: String, now: Int64) -> Result<VAPIDInfo, Refusal> {
        // vapid t=<jwt>, k=<key>
        guard header.lowercased().hasPrefix("vapid ") else { return .failure(Refusal(status: 401, message: "Authorization scheme is not vapid")) }
        var t: String?
        var k: String?
        for part in header.dropFirst(6).split(separator: ",") {
            let kv = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard kv.count == 2 else { continue }
            if kv[0] == "t" { t = String(kv[1]) } else if kv[0] == "k" { k = String(kv[1]) }
        }
        guard let t, let k else { return .failure(Refusal(status: 401, message: "vapid header needs t= and k=")) }
        if let expected = options.expectedVAPIDKey, expected != k {
            return .failure(Refusal(status: 403, message: "VAPID key does not match the subscription's applicationServerKey"))
        }
        guard let raw = Base64URL.decode(k), raw.count == 65,
            let publicKey = try? P256.Signing.PublicKey(x963Representation: raw)
        else {
            return .failure(Refusal(status: 401, message: "k= is not an uncompressed P-256 public key"))
        }
        let jwt: DecodedJWT
        do {
            jwt = try DecodedJWT(t)
            try jwt.verify(es256: publicKey)
        } catch {
            return .failure(Refusal(status: 401, message: "VAPID JWT rejected: \(error)"))
        }
        guard (jwt.header["typ"] as? String)?.uppercased() == "JWT" || jwt.header["typ"] == nil else {
            return .failure(Refusal(status: 401, message: "VAPID JWT typ is not JWT"))
        }
        guard let aud = jwt.claims["aud"] as? String, aud == baseURL else {
            return .failure(Refusal(status: 401, message: "VAPID aud \(jwt.claims["aud"] ?? "missing") is not \(baseURL)"))
        }
        guard let expNumber = jwt.claims["exp"] as? NSNumber else { return .failure(Refusal(status: 401, message: "VAPID exp missing")) }
        let exp = expNumber.int64Value
        guard exp > now else { return .failure(Refusal(status: 401, message: "VAPID JWT expired")) }
        guard exp <= now + 24 * 3600 else { return .failure(Refusal(status: 401, message: "VAPID exp more than 24 hours ahead")) }
        let sub = jwt.claims["sub"] as? String ?? ""
        guard sub.hasPrefix("mailto:") || sub.hasPrefix("https:") else {
            return .failure(Refusal(status: 401, message: "VAPID sub must be mailto: or https: (got \(sub))"))
        }
        return .success(VAPIDInfo(key: k, aud: aud, exp: exp, sub: sub))
    }

    static func isBase64URL(_ b: UInt8) -> Bool {
        (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F
    }

    /// RFC 8291 aes128gcm decryption with the gateway's own decryptor (WebPushCrypto).
    static func decrypt(_ body: [UInt8], privateKey: P256.KeyAgreement.PrivateKey, authSecret: [UInt8]) throws -> [UInt8] {
        try WebPushCrypto.decrypt(body, receiverPrivateKey: privateKey, authSecret: authSecret)
    }
}

/// A declarative push message as a user agent reads it (W3C Push API "declarative push message";
/// docs/declarative-web-push.md lists the members and their sources).
public struct DeclarativePushMessage: Sendable, Equatable {
    public var title: String
    public var navigate: String
    public var body: String?
    public var tag: String?
    public var lang: String?
    public var dir: String?
    public var silent: Bool?
    /// `notification.data`, as JSON.
    public var data: JSONValue?
    /// The top-level `app_badge`.
    public var appBadge: Int64?
    /// The top-level `mutable`.
    public var mutable: Bool?
}

/// The mock's verdict on a plaintext that is a JSON object with a `web_push` member.
public enum DeclarativeVerdict: Sendable, Equatable {
    case valid(DeclarativePushMessage)
    /// Why it is not a valid declarative push message, naming the member (`notification.navigate: ...`).
    case invalid(String)

    public var message: DeclarativePushMessage? { if case .valid(let m) = self { return m } else { return nil } }
}

extension MockWebPush {
    /// Reads `plaintext` as a declarative push message, stricter than a browser (which falls back to a
    /// `push` event on failure): `web_push` the integer 8030, `notification` an object with a non-empty
    /// string `title` and an absolute http(s) URL `navigate`, and every other known member of its JSON type
    /// (`dir` one of auto, ltr, rtl; URL members absolute; `app_badge` an integer 0 or more; `mutable`,
    /// `silent`, `renotify`, `requireInteraction` booleans; `timestamp` an integer 0 or more; `actions`
    /// objects with `action`, `title` and `navigate`). Unknown members are ignored, as a browser does.
    /// nil when the plaintext is not a JSON object with a `web_push` member.
    public static func declarativeVerdict(_ plaintext: [UInt8]) -> DeclarativeVerdict? {
        // Cheap test first: the load tools' plaintexts never name web_push.
        let marker = Array("\"web_push\"".utf8)
        guard plaintext.count >= marker.count,
            (0...(plaintext.count - marker.count)).contains(where: { plaintext[$0..<($0 + marker.count)].elementsEqual(marker) })
        else { return nil }
        guard case .object(let top)? = try? JSONParser.parse(plaintext), let marked = top["web_push"] else { return nil }
        guard case .int(8030) = marked else { return .invalid("web_push: must be the integer 8030, got \(marked.jsonString.prefix(40))") }
        guard case .object(let n)? = top["notification"] else { return .invalid("notification: required, an object") }
        func string(_ key: String) throws(DeclarativeProblem) -> String? {
            guard let v = n[key] else { return nil }
            guard case .string(let s) = v else { throw DeclarativeProblem("notification.\(key): must be a string") }
            return s
        }
        func url(_ value: String?, _ name: String) throws(DeclarativeProblem) {
            guard let value else { return }
            guard let u = URL(string: value), let scheme = u.scheme?.lowercased(), scheme == "https" || scheme == "http",
                let host = u.host, !host.isEmpty
            else { throw DeclarativeProblem("\(name): must be an absolute http(s) URL, got \"\(value.prefix(80))\"") }
        }
        func bool(_ o: JSONObject, _ key: String, _ name: String) throws(DeclarativeProblem) -> Bool? {
            guard let v = o[key] else { return nil }
            guard case .bool(let b) = v else { throw DeclarativeProblem("\(name): must be a boolean") }
            return b
        }
        func unsigned(_ o: JSONObject, _ key: String, _ name: String) throws(DeclarativeProblem) -> Int64? {
            guard let v = o[key] else { return nil }
            guard case .int(let i) = v, i >= 0 else { throw DeclarativeProblem("\(name): must be an integer 0 or more") }
            return i
        }
        do throws(DeclarativeProblem) {
            guard let title = try string("title"), !title.isEmpty else {
                throw DeclarativeProblem("notification.title: required, a non-empty string")
            }
            guard let navigate = try string("navigate") else { throw DeclarativeProblem("notification.navigate: required, a URL string") }
            try url(navigate, "notification.navigate")
            var m = DeclarativePushMessage(title: title, navigate: navigate)
            m.body = try string("body")
            m.tag = try string("tag")
            m.lang = try string("lang")
            m.dir = try string("dir")
            if let d = m.dir, !["auto", "ltr", "rtl"].contains(d) { throw DeclarativeProblem("notification.dir: must be auto, ltr or rtl") }
            for key in ["icon", "image", "badge"] { try url(try string(key), "notification.\(key)") }
            m.silent = try bool(n, "silent", "notification.silent")
            for key in ["renotify", "requireInteraction"] { _ = try bool(n, key, "notification.\(key)") }
            _ = try unsigned(n, "timestamp", "notification.timestamp")
            if let v = n["vibrate"] {
                guard case .array(let list) = v,
                    list.allSatisfy({ if case .int(let i) = $0 { return (0...Int64(UInt32.max)).contains(i) } else { return false } })
                else { throw DeclarativeProblem("notification.vibrate: must be an array of integers 0 to 4294967295") }
            }
            if let v = n["actions"] {
                guard case .array(let list) = v else { throw DeclarativeProblem("notification.actions: must be an array") }
                for (i, a) in list.enumerated() {
                    guard case .object(let ao) = a, case .string? = ao["action"], case .string? = ao["title"], case .string(let nav)? = ao["navigate"]
                    else { throw DeclarativeProblem("notification.actions[\(i)]: must be an object with string action, title and navigate") }
                    try url(nav, "notification.actions[\(i)].navigate")
                }
            }
            m.data = n["data"]
            m.appBadge = try unsigned(top, "app_badge", "app_badge")
            m.mutable = try bool(top, "mutable", "mutable")
            return .valid(m)
        } catch {
            return .invalid(error.reason)
        }
    }

    struct DeclarativeProblem: Error {
        var reason: String
        init(_ reason: String) { self.reason = reason }
    }
}

/// Breaks the init-time cycle between the server's handler and the mock.
final class MockWebPushHandlerBox: Sendable {
    private let box = NIOLockedValueBox<Weak?>(nil)
    struct Weak: @unchecked Sendable { weak var value: MockWebPush? }
    func set(_ mock: MockWebPush) { box.withLockedValue { $0 = Weak(value: mock) } }
    var mock: MockWebPush? { box.withLockedValue { $0?.value } }
}
