import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL

/// Another API the HMS mock's server answers (`MockHMS.Options.routes`): nil passes the request on.
public protocol MockHMSRoute: Sendable {
    func handle(_ request: MockRequest, path: String, mock: MockHMS) -> MockResponse?
    /// Forgets what it recorded (`MockHMS.reset`).
    func reset()
}

/// Mock Huawei HMS Push Kit (`POST /v1/{appid}/messages:send`) plus a mock OAuth 2.0 token endpoint
/// (`POST /oauth2/v3/token`, client-credentials grant), on one TLS server. As strict as the real
/// service where Pushgate could get it wrong: the app's id and secret, the bearer token, the app id
/// in the path, the content type, the JSON shape (one target; `data` a string; android fields in
/// range; a notification with a click action and a sound or `default_sound`), the token format and
/// the 4096-byte message limit. Answers use HMS's `{"code","msg","requestId"}` shape.
public final class MockHMS: Sendable {
    /// A scripted answer of the send endpoint.
    public enum Reply: Sendable, Equatable {
        case ok
        /// 200, code 80300007 (invalid token).
        case invalidToken
        /// 200, code 80100000 with the token in `illegal_tokens` (partial success, 0 accepted).
        case illegalToken
        /// 401, code 80200003 (OAuth token expired).
        case oauthExpired
        /// 500, code 81000001 (internal error).
        case internalError(retryAfter: Int?)
        /// 503 (traffic control), no body.
        case trafficControl(retryAfter: Int?)
        /// 429 (too many requests), no body.
        case tooManyRequests(retryAfter: Int?)
        /// 400, code 80100003 with this message.
        case badMessage(String)
        /// Anything else.
        case custom(status: Int, body: String, retryAfter: Int?)
    }

    /// One message accepted by the send endpoint's checks (whatever was answered).
    public struct RecordedMessage: Sendable {
        /// "token", "topic" or "condition".
        public var targetKind: String
        /// The tokens, or the topic / condition.
        public var targets: [String]
        public var validateOnly: Bool
        /// The `message` object, re-serialised with sorted keys.
        public var messageJSON: String
        public var body: [UInt8]
        public var bearer: String
        public var reply: Reply
        public var receivedAt: Date = Date()

        public var target: String { targets.first ?? "" }
        /// The `message` object as a dictionary.
        public var message: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(messageJSON.utf8))) as? [String: Any] ?? [:]
        }
        public var android: [String: Any] { message["android"] as? [String: Any] ?? [:] }
    }

    public struct Options: Sendable {
        public var appID: String
        public var appSecret: String
        /// `expires_in` of the access tokens issued.
        public var accessTokenLifetime: Int = 3600
        public var tls: TLSConfiguration?
        public var responseDelay: TimeAmount? = nil
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced on each connection.
        public var maxConcurrentStreams: Int = 1000
        public var port: Int = 0
        /// Keep every message in `messages` (tests). Off for load runs.
        public var recordRequests = true
        /// Called for every send that passed the checks with its first target and the raw body; a
        /// non-nil answer replaces the scripted / default one.
        public var hook: (@Sendable (_ target: String, _ body: [UInt8]) -> Reply?)? = nil
        /// Other APIs answered on the same server with HMS's answers, asked in order before HMS's own
        /// routes (a push service that shares HMS's answer codes adds its endpoint here).
        public var routes: [any MockHMSRoute] = []

        public init(appID: String, appSecret: String, tls: TLSConfiguration?) {
            self.appID = appID
            self.appSecret = appSecret
            self.tls = tls
        }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var tokenRequests = 0
        var tokenRejections: [String] = []
        var issued: Set<String> = []
        var sendRequests = 0
        var sendRejections: [String] = []
        var messages: [RecordedMessage] = []

        /// The answer to a message for `token`: the test hook's, else the next one scripted for the
        /// token, else the default (every route alike).
        mutating func reply(for token: String, hooked: Reply?) -> Reply {
            if let hooked { return hooked }
            if var queue = scripts[token], !queue.isEmpty {
                let r = queue.removeFirst()
                scripts[token] = queue
                return r
            }
            return defaultReply
        }
    }

    public static let tokenPath = "/oauth2/v3/token"
    /// The largest message HMS takes (80300008 above it).
    public static let maxMessageBytes = 4096

    public let options: Options
    let state = NIOLockedValueBox(State())
    let serverBox = NIOLockedValueBox<MockHTTPServer?>(nil)

    public init(options: Options, eventLoopGroup: any EventLoopGroup) {
        self.options = options
        let server = MockHTTPServer.serving(
            self, tls: options.tls, port: options.port, responseDelay: options.responseDelay,
            maxConcurrentStreams: options.maxConcurrentStreams, eventLoopGroup: eventLoopGroup
        ) { mock, request in mock.handle(request) }
        serverBox.withLockedValue { $0 = server }
    }

    var server: MockHTTPServer { serverBox.withLockedValue { $0! } }

    public func start() async throws { try await server.start() }
    public func stop() async throws { try await server.stop() }
    public var port: Int { server.port }
    /// `https://127.0.0.1:<port>`: `huawei.endpoint`.
    public var baseURL: String { server.baseURL }
    /// `huawei.token_url`.
    public var tokenURL: String { baseURL + Self.tokenPath }

    // MARK: scripting

    /// Answers for the next sends to `token` (or a topic / condition), in order; then the default.
    public func script(token: String, responses: [Reply]) {
        state.withLockedValue { $0.scripts[token, default: []].append(contentsOf: responses) }
    }

    public func setDefaultReply(_ reply: Reply) {
        state.withLockedValue { $0.defaultReply = reply }
    }

    /// Forgets every issued access token: the next sends get 401 / 80200003 until a new one is fetched.
    public func revokeAccessTokens() {
        state.withLockedValue { $0.issued.removeAll() }
    }

    public func reset() {
        for route in options.routes { route.reset() }
        state.withLockedValue { $0 = State() }
    }

    // MARK: observations

    public var tokenRequestCount: Int { state.withLockedValue { $0.tokenRequests } }
    public var tokenRejections: [String] { state.withLockedValue { $0.tokenRejections } }
    public var sendRequestCount: Int { state.withLockedValue { $0.sendRequests } }
    public var sendRejections: [String] { state.withLockedValue { $0.sendRejections } }
    public var messages: [RecordedMessage] { state.withLockedValue { $0.messages } }

    // MARK: handling

    func handle(_ request: MockRequest) -> MockResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        if path == Self.tokenPath { return handleToken(request) }
        if path.hasPrefix("/v1/") && path.hasSuffix("/messages:send") { return handleSend(request, path: path) }
        for route in options.routes {
            if let answer = route.handle(request, path: path, mock: self) { return answer }
        }
        return MockResponse(status: 404, headers: [("content-type", "text/plain")], body: Array("Not Found".utf8))
    }

    /// The answer to a message for `token` on any route: `hooked` (the test hook's) when given, else
    /// the next one scripted for the token, else the default.
    public func nextReply(for token: String, hooked: Reply?) -> Reply {
        state.withLockedValue { $0.reply(for: token, hooked: hooked) }
    }

    public static func json(_ status: Int, _ object: Any, headers: [(String, String)] = []) -> MockResponse {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: status, headers: [("content-type", "application/json;charset=UTF-8")] + headers, body: Array(data))
    }

    /// HMS's answer body `{"code","msg","requestId"}`.
    public static func hmsAnswer(_ status: Int, code: String, msg: String, retryAfter: Int? = nil) -> MockResponse {
        json(
            status, ["code": code, "msg": msg, "requestId": "\(UInt64.random(in: 1...UInt64.max))"],
            headers: retryAfter.map { [("retry-after", String($0))] } ?? [])
    }

    func handleToken(_ request: MockRequest) -> MockResponse {
        // HMS's OAuth errors: {"error":1101,"sub_error":20003,"error_description":"..."}.
        func refuse(_ status: Int, _ error: Int, _ sub: Int, _ description: String) -> MockResponse {
            state.withLockedValue {
                $0.tokenRequests += 1
                $0.tokenRejections.append(description)
            }
            return Self.json(status, ["error": error, "sub_error": sub, "error_description": description])
        }
        guard request.method == "POST" else { return refuse(405, 1101, 20001, "method must be POST") }
        let contentType = request.header("content-type") ?? ""
        guard contentType.lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return refuse(400, 1101, 20001, "content-type must be application/x-www-form-urlencoded, got \(contentType)")
        }
        let form = MockForm.parse(request.body)
        guard form["grant_type"] == "client_credentials" else {
            return refuse(400, 1101, 20002, "unsupported grant_type \(form["grant_type"] ?? "")")
        }
        guard form["client_id"] == options.appID else { return refuse(400, 1101, 20003, "parameter invalid: unknown client_id") }
        guard form["client_secret"] == options.appSecret else { return refuse(401, 1102, 20004, "invalid client_secret") }
        var random = SystemRandomNumberGenerator()
        let accessToken = "CV" + (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined() + "/+="
        state.withLockedValue {
            $0.tokenRequests += 1
            $0.issued.insert(accessToken)
        }
        return Self.json(200, ["access_token": accessToken, "expires_in": options.accessTokenLifetime, "token_type": "Bearer"])
    }

    /// Characters of an HMS push token (base64-like, with `:` `-` `_` `.`); 1...512 of them.
    public static func isTokenFormat(_ t: String) -> Bool {
        guard (1...512).contains(t.utf8.count) else { return false }
        return t.utf8.allSatisfy { b in
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): return true
            case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "."), UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="):
                return true
            default: return false
            }
        }
    }

    static func isDuration(_ v: Any?) -> Bool {
        guard let s = v as? String else { return false }
        return s.range(of: #"^\d+(\.\d{1,9})?[sS]?$"#, options: .regularExpression) != nil
    }

    /// Why `message` is not one HMS takes (nil: fine).
    static func shapeProblem(_ message: [String: Any]) -> String? {
        let allowed: Set<String> = ["data", "notification", "android", "apns", "webpush", "token", "topic", "condition"]
        for key in message.keys where !allowed.contains(key) { return "unknown field message.\(key)" }
        if let data = message["data"], !(data is String) { return "message.data must be a string" }
        guard let android = message["android"] else { return nil }
        guard let a = android as? [String: Any] else { return "message.android must be an object" }
        if let u = a["urgency"], !["HIGH", "NORMAL"].contains(u as? String ?? "") { return "android.urgency must be HIGH or NORMAL" }
        if let ttl = a["ttl"], !isDuration(ttl) { return "android.ttl is malformed" }
        if let k = a["collapse_key"] {
            guard let n = k as? NSNumber, let i = Int(exactly: n.doubleValue), (-1...100).contains(i) else {
                return "android.collapse_key must be in [-1, 100]"
            }
        }
        if let f = a["fast_app_target"] {
            guard let n = f as? NSNumber, [1, 2].contains(n.intValue) else { return "android.fast_app_target must be 1 or 2" }
        }
        if let d = a["data"], !(d is String) { return "android.data must be a string" }
        guard let notification = a["notification"] else { return nil }
        guard let nt = notification as? [String: Any] else { return "android.notification must be an object" }
        for key in ["title", "body", "image", "sound", "channel_id", "icon", "tag", "color"] {
            if let v = nt[key], !(v is String) { return "android.notification.\(key) must be a string" }
        }
        let sound = nt["sound"] as? String ?? ""
        if sound.isEmpty && (nt["default_sound"] as? Bool) != true { return "sound must not be empty when default_sound is false" }
        guard let click = nt["click_action"] as? [String: Any], let type = (click["type"] as? NSNumber)?.intValue else {
            return "android.notification.click_action.type is required"
        }
        switch type {
        case 1 where (click["intent"] as? String ?? "").isEmpty && (click["action"] as? String ?? "").isEmpty:
            return "click_action: intent or action is required when type is 1"
        case 2 where (click["url"] as? String ?? "").isEmpty: return "click_action: url is required when type is 2"
        case 1, 2, 3, 4: return nil
        default: return "click_action.type must be in [1, 4]"
        }
    }

    func handleSend(_ request: MockRequest, path: String) -> MockResponse {
        func refuse(_ response: MockResponse, _ why: String) -> MockResponse {
            state.withLockedValue {
                $0.sendRequests += 1
                $0.sendRejections.append(why)
            }
            return response
        }
        func bad(_ message: String) -> MockResponse {
            refuse(Self.hmsAnswer(400, code: "80100003", msg: "Illegal payload, \(message)"), message)
        }
        guard request.method == "POST" else { return refuse(MockResponse(status: 405), "method \(request.method)") }
        let auth = request.header("authorization") ?? ""
        let bearer = auth.hasPrefix("Bearer ") ? String(auth.dropFirst(7)) : ""
        guard !bearer.isEmpty else {
            return refuse(Self.hmsAnswer(401, code: "80200001", msg: "Oauth authentication error"), "missing bearer")
        }
        guard state.withLockedValue({ $0.issued.contains(bearer) }) else {
            return refuse(Self.hmsAnswer(401, code: "80200003", msg: "Oauth Token expired."), "unknown bearer")
        }
        let appID = path.dropFirst("/v1/".count).dropLast("/messages:send".count)
        guard appID == options.appID else {
            // A token of one app used for another (HMS: 80200001).
            return refuse(Self.hmsAnswer(401, code: "80200001", msg: "Oauth authentication error"), "app id \(appID) in the path")
        }
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/json") else {
            return bad("content-type must be application/json")
        }
        if request.body.count > Self.maxMessageBytes {
            return refuse(
                Self.hmsAnswer(200, code: "80300008", msg: "The message body size exceeds the default value"),
                "message of \(request.body.count) bytes")
        }
        guard let top = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            return bad("the body is not a JSON object")
        }
        for key in top.keys where key != "message" && key != "validate_only" { return bad("unknown field \(key)") }
        if let v = top["validate_only"], !(v is Bool) { return bad("validate_only must be a boolean") }
        let validateOnly = (top["validate_only"] as? Bool) ?? false
        guard let message = top["message"] as? [String: Any] else { return bad("message is required") }
        let kinds = ["token", "topic", "condition"].filter { message[$0] != nil }
        guard kinds.count == 1, let kind = kinds.first else {
            return refuse(
                Self.hmsAnswer(200, code: "80300010", msg: "The number of tokens in the message body exceeds the default value"),
                "targets \(kinds)")
        }
        var targets: [String]
        if kind == "token" {
            guard let list = message["token"] as? [Any], let tokens = list as? [String], (1...1000).contains(tokens.count) else {
                return refuse(
                    Self.hmsAnswer(200, code: "80300010", msg: "The number of tokens in the message body exceeds the default value"),
                    "token must be an array of 1 to 1000 strings")
            }
            let malformed = tokens.filter { !Self.isTokenFormat($0) }
            if !malformed.isEmpty {
                return refuse(Self.hmsAnswer(200, code: "80300007", msg: "All the tokens are invalid"), "malformed token")
            }
            targets = tokens
        } else {
            guard let s = message[kind] as? String, !s.isEmpty else { return bad("\(kind) must be a non-empty string") }
            targets = [s]
        }
        if let problem = Self.shapeProblem(message) { return bad(problem) }

        let hooked = options.hook?(targets[0], request.body)
        let record = options.recordRequests
        let messageJSON =
            record ? String(decoding: (try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys])) ?? Data(), as: UTF8.self) : ""
        let reply: Reply = state.withLockedValue { s in
            s.sendRequests += 1
            let r = s.reply(for: targets[0], hooked: hooked)
            if record {
                s.messages.append(
                    RecordedMessage(
                        targetKind: kind, targets: targets, validateOnly: validateOnly, messageJSON: messageJSON, body: request.body,
                        bearer: bearer, reply: r))
            }
            return r
        }
        return response(for: reply, targets: targets)
    }

    public func response(for reply: Reply, targets: [String]) -> MockResponse {
        switch reply {
        case .ok:
            return Self.hmsAnswer(200, code: "80000000", msg: "Success")
        case .invalidToken:
            return Self.hmsAnswer(200, code: "80300007", msg: "All the tokens are invalid")
        case .illegalToken:
            let msg = (try? JSONSerialization.data(withJSONObject: ["success": 0, "failure": targets.count, "illegal_tokens": targets])) ?? Data()
            return Self.hmsAnswer(200, code: "80100000", msg: String(decoding: msg, as: UTF8.self))
        case .oauthExpired:
            return Self.hmsAnswer(401, code: "80200003", msg: "Oauth Token expired.")
        case .internalError(let retryAfter):
            return Self.hmsAnswer(500, code: "81000001", msg: "System inner error", retryAfter: retryAfter)
        case .trafficControl(let retryAfter):
            return MockResponse(status: 503, headers: retryAfter.map { [("retry-after", String($0))] } ?? [])
        case .tooManyRequests(let retryAfter):
            return MockResponse(status: 429, headers: retryAfter.map { [("retry-after", String($0))] } ?? [])
        case .badMessage(let message):
            return Self.hmsAnswer(400, code: "80100003", msg: message)
        case .custom(let status, let body, let retryAfter):
            return MockResponse(
                status: status,
                headers: [("content-type", "application/json;charset=UTF-8")] + (retryAfter.map { [("retry-after", String($0))] } ?? []),
                body: Array(body.utf8))
        }
    }
}
