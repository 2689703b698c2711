import Foundation
import Honor
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore

/// Mock Honor Push on a TLS server: `POST /auth/token` checks the form (`grant_type=client_credentials`,
/// the app's `client_id` and `client_secret`) and issues access tokens of `expires_in` 3600;
/// `POST /api/v1/<appId>/sendMessage` checks the app ID in the path, the bearer (one it issued and
/// did not revoke), a millisecond `timestamp` header, the JSON (one well-formed token; a notification
/// with a title and a body, a `clickAction` of type 1 (intent or action), 2 (an https url) or 3, an
/// `importance` of NORMAL or LOW; or a data message with a `data` text; `ttl` as "<seconds>s" up to
/// 15 days; `targetUserType` 0 or 1; no unknown field; at most 4096 bytes) and answers Honor's
/// shape, scriptable per token.
public final class MockHonor: Sendable {
    public enum Reply: Sendable, Equatable {
        case ok
        /// `code` 200, `sendResult` false, the token in `expireTokens`.
        case expiredToken
        /// The code of `Options.quotaCode`: the day's quota is spent.
        case dailyLimit
        /// HTTP 401, `code` 401: the access token is refused (the mock forgets it too).
        case invalidAccessToken
        /// HTTP 503 with `Retry-After: 1`: flow control.
        case flowControl
        case custom(status: Int, body: String)
    }

    public struct RecordedMessage: Sendable {
        public var token: String
        public var accessToken: String
        public var json: String
        public var reply: Reply
        public var message: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:] }
    }

    public struct Options: Sendable {
        public var appID: String
        public var clientID: String
        public var clientSecret: String
        public var tls: TLSConfiguration?
        public var port = 0
        public var responseDelay: TimeAmount? = nil
        public var recordRequests = true
        /// The answer code of a spent daily quota (Honor publishes none: the gateway's `honor.quota_codes` names it).
        public var quotaCode: Int64 = 80_300_013
        public var hook: (@Sendable (_ token: String, _ body: [UInt8]) -> Reply?)? = nil

        public init(appID: String, clientID: String, clientSecret: String, tls: TLSConfiguration?) {
            self.appID = appID
            self.clientID = clientID
            self.clientSecret = clientSecret
            self.tls = tls
        }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var issued: Set<String> = []
        var tokenRequests = 0
        var sendRequests = 0
        var rejections: [String] = []
        var messages: [RecordedMessage] = []
    }

    static let topFields: Set<String> = ["data", "notification", "android", "token"]
    static let androidFields: Set<String> = ["ttl", "biTag", "data", "notification", "targetUserType"]
    static let notificationFields: Set<String> = [
        "title", "body", "image", "clickAction", "style", "bigTitle", "bigBody", "importance", "when", "buttons", "badge", "notifyId", "tag", "group",
    ]
    static let clickFields: Set<String> = ["type", "intent", "url", "action"]

    public let options: Options
    let state = NIOLockedValueBox(State())
    let serverBox = NIOLockedValueBox<MockHTTPServer?>(nil)

    public init(options: Options, eventLoopGroup: any EventLoopGroup) {
        self.options = options
        let server = MockHTTPServer.serving(
            self, tls: options.tls, port: options.port, responseDelay: options.responseDelay, eventLoopGroup: eventLoopGroup
        ) { mock, request in mock.handle(request) }
        serverBox.withLockedValue { $0 = server }
    }

    var server: MockHTTPServer { serverBox.withLockedValue { $0! } }
    public func start() async throws { try await server.start() }
    public func stop() async throws { try await server.stop() }
    public var baseURL: String { server.baseURL }
    public var tokenURL: String { server.baseURL + "/auth/token" }

    public func script(token: String, _ replies: [Reply]) { state.withLockedValue { $0.scripts[token, default: []] += replies } }
    public func revokeAccessTokens() { state.withLockedValue { $0.issued.removeAll() } }
    public var tokenRequestCount: Int { state.withLockedValue { $0.tokenRequests } }
    public var sendRequestCount: Int { state.withLockedValue { $0.sendRequests } }
    public var rejections: [String] { state.withLockedValue { $0.rejections } }
    public var messages: [RecordedMessage] { state.withLockedValue { $0.messages } }

    static func json(_ status: Int, _ o: [String: Any], headers: [(String, String)] = []) -> MockResponse {
        let body = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: status, headers: [("content-type", "application/json;charset=UTF-8")] + headers, body: Array(body))
    }

    static func answer(_ code: Int64, _ message: String, status: Int = 200, data: [String: Any]? = nil) -> MockResponse {
        var o: [String: Any] = ["code": code, "message": message]
        if let data { o["data"] = data }
        return json(status, o)
    }

    func refuse(_ status: Int, _ code: Int64, _ why: String, token: Bool) -> MockResponse {
        state.withLockedValue {
            if token { $0.tokenRequests += 1 } else { $0.sendRequests += 1 }
            $0.rejections.append(why)
        }
        if token { return Self.json(status, ["error": status == 401 ? "invalid_client" : "invalid_request", "error_description": why]) }
        return Self.answer(code, why, status: status)
    }

    func handle(_ request: MockRequest) -> MockResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        guard request.method == "POST" else { return MockResponse(status: 405) }
        if path == "/auth/token" { return handleToken(request) }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[1] == "api", parts[2] == "v1", parts[4] == "sendMessage" else { return MockResponse(status: 404) }
        guard parts[3] == options.appID else { return refuse(403, 80_300_002, "app ID \(parts[3]) is not this app's", token: false) }
        return handleSend(request)
    }

    func handleToken(_ request: MockRequest) -> MockResponse {
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return refuse(400, 0, "content-type must be application/x-www-form-urlencoded", token: true)
        }
        let form = MockForm.parse(request.body)
        guard form["grant_type"] == "client_credentials" else {
            return refuse(400, 0, "unsupported grant_type \(form["grant_type"] ?? "")", token: true)
        }
        guard form["client_id"] == options.clientID else { return refuse(401, 0, "invalid client_id", token: true) }
        guard form["client_secret"] == options.clientSecret else { return refuse(401, 0, "invalid client_secret", token: true) }
        let token = "honor-" + UUID().uuidString.lowercased()
        state.withLockedValue {
            $0.tokenRequests += 1
            $0.issued.insert(token)
        }
        return Self.json(200, ["access_token": token, "expires_in": 3600, "token_type": "Bearer"])
    }

    /// Why a message is refused (Honor's 80100003-style "incorrect message structure"), or nil.
    func problem(_ m: [String: Any], size: Int) -> String? {
        guard size <= HonorMessageMapper.maxMessageBytes else { return "message of \(size) bytes, at most 4096" }
        for k in m.keys where !Self.topFields.contains(k) { return "unknown field \(k)" }
        guard let tokens = m["token"] as? [Any], tokens.count == 1, let token = tokens[0] as? String, HonorMessageMapper.isToken(token) else {
            return "token: one well-formed push token"
        }
        if let data = m["data"] { guard let s = data as? String, !s.isEmpty else { return "data must be a non-empty string" } }
        let android = m["android"] as? [String: Any] ?? [:]
        if m["android"] != nil && m["android"] as? [String: Any] == nil { return "android must be an object" }
        for k in android.keys where !Self.androidFields.contains(k) { return "unknown field android.\(k)" }
        if let ttl = android["ttl"] {
            guard let s = ttl as? String, s.hasSuffix("s"), let secs = Int64(s.dropLast()), (1...1_296_000).contains(secs) else {
                return "android.ttl: \"<seconds>s\" up to 1296000s"
            }
        }
        if let t = android["targetUserType"] { guard let i = (t as? NSNumber)?.intValue, i == 0 || i == 1 else { return "targetUserType: 0 or 1" } }
        if let b = android["biTag"] { guard b is String else { return "biTag must be a string" } }
        guard let n = android["notification"] as? [String: Any] else {
            if android["notification"] != nil { return "android.notification must be an object" }
            return m["data"] == nil ? "neither a notification nor data" : nil
        }
        for k in n.keys where !Self.notificationFields.contains(k) { return "unknown field android.notification.\(k)" }
        guard let title = n["title"] as? String, !title.isEmpty else { return "android.notification.title is required" }
        guard let body = n["body"] as? String, !body.isEmpty else { return "android.notification.body is required" }
        guard let importance = n["importance"] as? String, ["NORMAL", "LOW"].contains(importance) else {
            return "android.notification.importance is required: NORMAL or LOW"
        }
        if let image = n["image"] { guard let s = image as? String, s.hasPrefix("https://") else { return "image must be an https URL" } }
        guard let click = n["clickAction"] as? [String: Any] else { return "android.notification.clickAction is required" }
        for k in click.keys where !Self.clickFields.contains(k) { return "unknown field clickAction.\(k)" }
        switch (click["type"] as? NSNumber)?.intValue {
        case 1:
            if (click["intent"] as? String ?? "").isEmpty && (click["action"] as? String ?? "").isEmpty {
                return "clickAction type 1 needs intent or action"
            }
        case 2: guard (click["url"] as? String ?? "").hasPrefix("https://") else { return "clickAction type 2 needs an https url" }
        case 3: break
        default: return "clickAction.type: 1, 2 or 3"
        }
        if let id = n["notifyId"] {
            guard let i = (id as? NSNumber)?.int64Value, (0...2_147_483_647).contains(i) else { return "notifyId out of range" }
        }
        return nil
    }

    func handleSend(_ request: MockRequest) -> MockResponse {
        let auth = request.header("authorization") ?? ""
        guard auth.hasPrefix("Bearer "), state.withLockedValue({ $0.issued.contains(String(auth.dropFirst(7))) }) else {
            return refuse(401, 401, "access token invalid", token: false)
        }
        let accessToken = String(auth.dropFirst(7))
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/json") else {
            return refuse(400, 80_100_003, "content-type must be application/json", token: false)
        }
        guard let ts = request.header("timestamp"), ts.utf8.count == 13, ts.utf8.allSatisfy({ (48...57).contains($0) }) else {
            return refuse(400, 80_100_001, "timestamp header: 13 digits of milliseconds", token: false)
        }
        guard let m = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            return refuse(400, 80_100_003, "body must be a JSON object", token: false)
        }
        if let why = problem(m, size: request.body.count) { return refuse(400, 80_100_003, why, token: false) }
        let token = (m["token"] as? [Any])?.first as? String ?? ""
        let hooked = options.hook?(token, request.body)
        let record = options.recordRequests
        let text = String(decoding: request.body, as: UTF8.self)
        let reply: Reply = state.withLockedValue { s in
            s.sendRequests += 1
            var r = Reply.ok
            if let hooked {
                r = hooked
            } else if var q = s.scripts[token], !q.isEmpty {
                r = q.removeFirst()
                s.scripts[token] = q
            }
            if r == .invalidAccessToken { s.issued.remove(accessToken) }
            if record { s.messages.append(RecordedMessage(token: token, accessToken: accessToken, json: text, reply: r)) }
            return r
        }
        let requestID = "honor-req-\(UInt32.random(in: 1...UInt32.max))"
        switch reply {
        case .ok:
            return Self.answer(200, "success", data: ["sendResult": true, "requestId": requestID, "failTokens": [], "expireTokens": []])
        case .expiredToken:
            return Self.answer(200, "success", data: ["sendResult": false, "requestId": requestID, "failTokens": [], "expireTokens": [token]])
        case .dailyLimit: return Self.answer(options.quotaCode, "the app's daily push quota is spent")
        case .invalidAccessToken: return Self.answer(401, "access token invalid", status: 401)
        case .flowControl:
            return MockResponse(
                status: 503, headers: [("content-type", "application/json"), ("retry-after", "1")],
                body: Array(#"{"code":503,"message":"flow control"}"#.utf8))
        case .custom(let status, let body):
            return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
        }
    }
}

extension ProviderMockModule {
    /// The mock Honor: a throwaway App ID, Client ID and Client Secret; the app's default importance `NORMAL`.
    public static let honor = ProviderMockModule(name: "honor", title: "Honor", platforms: [.honor]) { tls, _, settings, group in
        var random = SystemRandomNumberGenerator()
        func hex(_ n: Int) -> String { (0..<n).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined() }
        var options = MockHonor.Options(
            appID: String(UInt64.random(in: 100_000_000...999_999_999, using: &random)), clientID: hex(8), clientSecret: hex(16), tls: tls)
        options.port = settings.port
        options.responseDelay = settings.delay
        options.recordRequests = settings.recordRequests
        if let verdict = settings.verdict {
            options.hook = { token, body in
                switch verdict(token, body) {
                case .ok: return nil
                case .dead: return .expiredToken
                case .injected(let status):
                    switch status {
                    case 429, 503: return .flowControl
                    default: return .custom(status: status, body: #"{"code":81000001,"message":"injected failure"}"#)
                    }
                }
            }
        }
        let mock = MockHonor(options: options, eventLoopGroup: group)
        try await mock.start()
        return RunningMockHonor(mock: mock)
    }
}

public typealias RunningMockHonor = RunningMock<MockHonor>

extension RunningMock where Mock == MockHonor {
    public init(mock: MockHonor) {
        self.init(
            mock: mock, name: "honor", baseURL: mock.baseURL,
            overrides: [
                ("honor.enabled", .bool(true)),
                ("honor.app_id", .string(mock.options.appID)),
                ("honor.client_id", .string(mock.options.clientID)),
                ("honor.client_secret", .string(mock.options.clientSecret)),
                ("honor.endpoint", .string(mock.baseURL)),
                ("honor.token_url", .string(mock.tokenURL)),
            ],
            defaults: [("honor.importance", .string("NORMAL")), ("honor.quota_codes", .string(String(mock.options.quotaCode)))],
            comments: ["honor.client_secret": "the mock's throwaway secret"],
            banner: "  Honor      \(mock.baseURL)   (OAuth token endpoint \(mock.tokenURL), app id \(mock.options.appID))",
            stop: { try await mock.stop() })
    }
}
