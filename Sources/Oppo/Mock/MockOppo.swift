import Crypto
import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import Oppo
import ProviderKit
import PushgateCore

/// Mock OPPO Push on a TLS server: `POST /server/v1/auth` checks the AppKey, a 13-digit
/// millisecond timestamp within 10 minutes of the mock's clock and `sign` = hex SHA-256(app_key +
/// timestamp + master_secret), and issues `auth_token`s; `POST
/// /server/v1/message/notification/unicast` checks an issued token, the `message` JSON (target type
/// 2, a well-formed regid, title and content within OPPO's lengths for the style, a known
/// `category`, a `notify_level` only with a category, `click_action_type` with what it needs,
/// `off_line_ttl` at most 10 days, `action_parameters` at most 4000 characters) and answers OPPO's
/// codes, scriptable per regid; `POST /server/v1/message/notification/unicast_batch` checks the
/// token and `messages`, a JSON array of 1...1000 such messages, each as strictly, and answers one
/// result per message (`messageId`, `registrationId`, `errorCode` 10000 for a dead or malformed
/// regid); a scripted quota, flow-control, auth or custom reply of any of its regids answers the
/// whole request, and `scriptBatchAnswer(_:)` replaces the next answer (hostile answers).
public final class MockOppo: Sendable {
    public enum Reply: Sendable, Equatable {
        case ok
        /// 10000: invalid registration id.
        case invalidRegid
        /// 33: the day's message limit is reached.
        case dailyLimit
        /// -2: flow control.
        case flowControl
        /// 11: the auth token is invalid (the mock forgets it too).
        case invalidAuthToken
        case custom(status: Int, body: String)
    }

    public struct RecordedMessage: Sendable {
        public var regid: String
        public var authToken: String
        /// The `message` object.
        public var message: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(messageJSON.utf8))) as? [String: Any] ?? [:] }
        public var notification: [String: Any] { message["notification"] as? [String: Any] ?? [:] }
        public var messageJSON: String
        public var reply: Reply
    }

    public struct Options: Sendable {
        public var appKey: String
        public var masterSecret: String
        public var tls: TLSConfiguration?
        public var port = 0
        public var responseDelay: TimeAmount? = nil
        /// Answers wait until it lets them go (tests of sends in flight).
        public var hold: MockResponseHold? = nil
        public var recordRequests = true
        /// The mock's clock (the timestamp window is checked against it).
        public var now: @Sendable () -> Date = { Date() }
        public var hook: (@Sendable (_ regid: String, _ body: [UInt8]) -> Reply?)? = nil

        public init(appKey: String, masterSecret: String, tls: TLSConfiguration?) {
            self.appKey = appKey
            self.masterSecret = masterSecret
            self.tls = tls
        }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var issued: Set<String> = []
        var authRequests = 0
        var sendRequests = 0
        var rejections: [String] = []
        var messages: [RecordedMessage] = []
        var batchRequests = 0
        var batches: [[String]] = []
        var batchAnswers: [String] = []
    }

    /// `unicast_batch` takes at most 1000 messages.
    public static let maxBatch = 1000

    public static let categories: Set<String> = [
        "IM", "ACCOUNT", "TODO", "DEVICE_REMINDER", "ORDER", "SUBSCRIPTION", "NEWS", "CONTENT", "MARKETING", "SOCIAL",
    ]
    static let notificationFields: Set<String> = [
        "title", "sub_title", "content", "style", "category", "notify_level", "channel_id", "click_action_type", "click_action_activity",
        "click_action_url", "action_parameters", "off_line", "off_line_ttl", "show_time_type", "app_message_id",
    ]

    public let options: Options
    let state = NIOLockedValueBox(State())
    let serverBox = NIOLockedValueBox<MockHTTPServer?>(nil)

    public init(options: Options, eventLoopGroup: any EventLoopGroup) {
        self.options = options
        let server = MockHTTPServer.serving(
            self, tls: options.tls, port: options.port, responseDelay: options.responseDelay, responseHold: options.hold,
            eventLoopGroup: eventLoopGroup
        ) { mock, request in mock.handle(request) }
        serverBox.withLockedValue { $0 = server }
    }

    var server: MockHTTPServer { serverBox.withLockedValue { $0! } }
    public func start() async throws { try await server.start() }
    public func stop() async throws { try await server.stop() }
    public var baseURL: String { server.baseURL }

    public func script(regid: String, _ replies: [Reply]) { state.withLockedValue { $0.scripts[regid, default: []] += replies } }
    public func setDefaultReply(_ r: Reply) { state.withLockedValue { $0.defaultReply = r } }
    public func revokeAuthTokens() { state.withLockedValue { $0.issued.removeAll() } }
    public var authRequestCount: Int { state.withLockedValue { $0.authRequests } }
    public var sendRequestCount: Int { state.withLockedValue { $0.sendRequests } }
    public var rejections: [String] { state.withLockedValue { $0.rejections } }
    public var messages: [RecordedMessage] { state.withLockedValue { $0.messages } }
    /// `unicast_batch` requests that passed the checks.
    public var batchRequestCount: Int { state.withLockedValue { $0.batchRequests } }
    /// The regids of each `unicast_batch` request that passed the checks, in order.
    public var batches: [[String]] { state.withLockedValue { $0.batches } }
    /// The body of the next `unicast_batch` answer (HTTP 200), whatever the request's regids.
    public func scriptBatchAnswer(_ body: String) { state.withLockedValue { $0.batchAnswers.append(body) } }

    static func answer(_ code: Int, _ message: String, data: [String: Any]? = nil) -> MockResponse {
        var o: [String: Any] = ["code": code, "message": message]
        if let data { o["data"] = data }
        let body = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: 200, headers: [("content-type", "application/json;charset=UTF-8")], body: Array(body))
    }

    static func parseForm(_ body: [UInt8]) -> [String: String]? {
        var out: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard kv.count == 2, let k = kv[0].replacingOccurrences(of: "+", with: " ").removingPercentEncoding,
                let v = kv[1].replacingOccurrences(of: "+", with: " ").removingPercentEncoding, out[k] == nil
            else { return nil }
            out[k] = v
        }
        return out
    }

    func handle(_ request: MockRequest) -> MockResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        guard request.method == "POST" else { return MockResponse(status: 405) }
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return refuse(40, "content-type must be application/x-www-form-urlencoded", auth: path == "/server/v1/auth")
        }
        switch path {
        case "/server/v1/auth": return handleAuth(request)
        case "/server/v1/message/notification/unicast": return handleUnicast(request)
        case "/server/v1/message/notification/unicast_batch": return handleUnicastBatch(request)
        default: return MockResponse(status: 404)
        }
    }

    func refuse(_ code: Int, _ why: String, auth: Bool) -> MockResponse {
        state.withLockedValue {
            if auth { $0.authRequests += 1 } else { $0.sendRequests += 1 }
            $0.rejections.append(why)
        }
        return Self.answer(code, why)
    }

    func handleAuth(_ request: MockRequest) -> MockResponse {
        guard let f = Self.parseForm(request.body) else { return refuse(40, "malformed form", auth: true) }
        guard f["app_key"] == options.appKey else { return refuse(14, "Invalid AppKey", auth: true) }
        guard let ts = f["timestamp"], ts.utf8.count == 13, ts.utf8.allSatisfy({ (48...57).contains($0) }), let ms = Int64(ts) else {
            return refuse(19, "Invalid Timestamp: 13 digits of milliseconds", auth: true)
        }
        let skew = abs(Double(ms) / 1000 - options.now().timeIntervalSince1970)
        guard skew <= 600 else { return refuse(19, "Timestamp outside 10 minutes", auth: true) }
        let expected = SHA256.hash(data: Array((options.appKey + ts + options.masterSecret).utf8)).map { String(format: "%02x", $0) }.joined()
        guard f["sign"] == expected else { return refuse(16, "Invalid Signature", auth: true) }
        let token = "oppo-" + UUID().uuidString.lowercased()
        state.withLockedValue {
            $0.authRequests += 1
            $0.issued.insert(token)
        }
        return Self.answer(0, "Success", data: ["auth_token": token, "create_time": Int64(options.now().timeIntervalSince1970 * 1000)])
    }

    static func isRegid(_ t: String) -> Bool {
        (1...256).contains(t.utf8.count)
            && t.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-") }
    }

    func problem(_ n: [String: Any]) -> (Int, String)? {
        for k in n.keys where !Self.notificationFields.contains(k) { return (41, "unknown field notification.\(k)") }
        let style = (n["style"] as? NSNumber)?.intValue ?? 1
        guard [1, 2, 3].contains(style) else { return (41, "invalid style") }
        guard let title = n["title"] as? String, !title.isEmpty, title.utf16.count <= 50 else { return (41, "title: 1 to 50 characters") }
        guard let content = n["content"] as? String, !content.isEmpty, content.utf16.count <= (style == 2 ? 128 : 50) else {
            return (41, "content: 1 to 50 characters (128 in style 2)")
        }
        if let c = n["category"] {
            guard let s = c as? String, Self.categories.contains(s) else { return (67, "invalid category") }
        }
        if let l = n["notify_level"] {
            guard n["category"] != nil else { return (67, "notify_level needs category") }
            guard let i = (l as? NSNumber)?.intValue, [1, 2, 16].contains(i) else { return (67, "invalid notify_level") }
        }
        let click = (n["click_action_type"] as? NSNumber)?.intValue ?? 0
        switch click {
        case 0: break
        case 1, 4: if (n["click_action_activity"] as? String ?? "").isEmpty { return (41, "click_action_activity required") }
        case 2, 5: if (n["click_action_url"] as? String ?? "").isEmpty { return (41, "click_action_url required") }
        default: return (41, "invalid click_action_type")
        }
        if let a = n["action_parameters"] {
            guard let s = a as? String, s.utf16.count <= 4000, (try? JSONSerialization.jsonObject(with: Data(s.utf8))) is [String: Any] else {
                return (41, "action_parameters: a JSON object of at most 4000 characters")
            }
        }
        if let t = n["off_line_ttl"] {
            guard let i = (t as? NSNumber)?.int64Value, (1...864_000).contains(i) else { return (41, "off_line_ttl: at most 10 days") }
        }
        return nil
    }

    func handleUnicast(_ request: MockRequest) -> MockResponse {
        guard let f = Self.parseForm(request.body) else { return refuse(40, "malformed form", auth: false) }
        for k in f.keys where k != "auth_token" && k != "message" { return refuse(41, "unknown parameter \(k)", auth: false) }
        guard let token = f["auth_token"], state.withLockedValue({ $0.issued.contains(token) }) else {
            return refuse(11, "Invalid AuthToken", auth: false)
        }
        guard let text = f["message"], let m = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] else {
            return refuse(40, "message must be a JSON object", auth: false)
        }
        guard (m["target_type"] as? NSNumber)?.intValue == 2 else { return refuse(41, "target_type must be 2 (registration id)", auth: false) }
        guard let regid = m["target_value"] as? String, Self.isRegid(regid) else { return refuse(10000, "Invalid RegistrationId", auth: false) }
        guard let n = m["notification"] as? [String: Any] else { return refuse(40, "notification is required", auth: false) }
        if let (code, why) = problem(n) { return refuse(code, why, auth: false) }
        let hooked = options.hook?(regid, request.body)
        let reply: Reply = state.withLockedValue { s in
            s.sendRequests += 1
            return self.reply(&s, regid: regid, hooked: hooked, token: token, messageJSON: text)
        }
        switch reply {
        case .ok: return Self.answer(0, "Success", data: ["messageId": "oppo-msg-\(UInt32.random(in: 1...UInt32.max))"])
        case .invalidRegid: return Self.answer(10000, "Invalid RegistrationId")
        case .dailyLimit: return Self.answer(33, "The number of messages exceeds the daily limit")
        case .flowControl: return Self.answer(-2, "Service in Flow Control")
        case .invalidAuthToken: return Self.answer(11, "Invalid AuthToken")
        case .custom(let status, let body):
            return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
        }
    }
}

extension MockOppo {
    /// The next reply for `regid` (the hook's, else its script's, else the default), recorded.
    func reply(_ s: inout State, regid: String, hooked: Reply?, token: String, messageJSON: String) -> Reply {
        var r = s.defaultReply
        if let hooked {
            r = hooked
        } else if var q = s.scripts[regid], !q.isEmpty {
            r = q.removeFirst()
            s.scripts[regid] = q
        }
        if r == .invalidAuthToken { s.issued.remove(token) }
        if options.recordRequests { s.messages.append(RecordedMessage(regid: regid, authToken: token, messageJSON: messageJSON, reply: r)) }
        return r
    }

    func handleUnicastBatch(_ request: MockRequest) -> MockResponse {
        guard let f = Self.parseForm(request.body) else { return refuse(40, "malformed form", auth: false) }
        for k in f.keys where k != "auth_token" && k != "messages" { return refuse(41, "unknown parameter \(k)", auth: false) }
        guard let token = f["auth_token"], state.withLockedValue({ $0.issued.contains(token) }) else {
            return refuse(11, "Invalid AuthToken", auth: false)
        }
        guard let text = f["messages"], let list = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [Any] else {
            return refuse(40, "messages must be a JSON array", auth: false)
        }
        guard (1...Self.maxBatch).contains(list.count) else { return refuse(41, "messages: 1 to \(Self.maxBatch) messages", auth: false) }
        var targets: [(regid: String, valid: Bool, json: String)] = []
        for (i, item) in list.enumerated() {
            guard let m = item as? [String: Any] else { return refuse(40, "messages[\(i)] must be a JSON object", auth: false) }
            for k in m.keys where !["target_type", "target_value", "notification", "verify_registration_id"].contains(k) {
                return refuse(41, "unknown field messages[\(i)].\(k)", auth: false)
            }
            guard (m["target_type"] as? NSNumber)?.intValue == 2 else {
                return refuse(41, "messages[\(i)].target_type must be 2 (registration id)", auth: false)
            }
            guard let regid = m["target_value"] as? String else { return refuse(41, "messages[\(i)].target_value is required", auth: false) }
            guard let n = m["notification"] as? [String: Any] else { return refuse(40, "messages[\(i)].notification is required", auth: false) }
            if let (code, why) = problem(n) { return refuse(code, "messages[\(i)]: \(why)", auth: false) }
            let json = (try? JSONSerialization.data(withJSONObject: m, options: [.sortedKeys])).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            targets.append((regid, Self.isRegid(regid), json))
        }
        let hooks = targets.map { $0.valid ? options.hook?($0.regid, request.body) : nil }
        let (replies, scripted): ([Reply?], String?) = state.withLockedValue { s in
            s.sendRequests += 1
            s.batchRequests += 1
            s.batches.append(targets.map(\.regid))
            let replies = zip(targets, hooks).map { t, hooked in
                t.valid ? self.reply(&s, regid: t.regid, hooked: hooked, token: token, messageJSON: t.json) : nil
            }
            return (replies, s.batchAnswers.isEmpty ? nil : s.batchAnswers.removeFirst())
        }
        if let scripted { return MockResponse(status: 200, headers: [("content-type", "application/json")], body: Array(scripted.utf8)) }
        // A reply that is no regid's own answers the whole request.
        for r in replies {
            switch r {
            case .dailyLimit?: return Self.answer(33, "The number of messages exceeds the daily limit")
            case .flowControl?: return Self.answer(-2, "Service in Flow Control")
            case .invalidAuthToken?: return Self.answer(11, "Invalid AuthToken")
            case .custom(let status, let body)?:
                return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
            default: continue
            }
        }
        let data: [[String: Any]] = zip(targets, replies).map { t, r in
            guard r == .ok else {
                return [
                    "registrationId": t.regid, "messageId": "", "errorCode": 10000,
                    "errorMessage": "Invalid RegistrationId",
                ]
            }
            return ["registrationId": t.regid, "messageId": "oppo-msg-\(UInt32.random(in: 1...UInt32.max))"]
        }
        let body = (try? JSONSerialization.data(withJSONObject: ["code": 0, "message": "Success", "data": data], options: [.sortedKeys])) ?? Data()
        return MockResponse(status: 200, headers: [("content-type", "application/json;charset=UTF-8")], body: Array(body))
    }
}

extension ProviderMockModule {
    /// The mock OPPO: a throwaway AppKey and MasterSecret; the app's default category `IM`.
    public static let oppo = ProviderMockModule(name: "oppo", title: "OPPO", platforms: [.oppo]) { tls, _, settings, group in
        var random = SystemRandomNumberGenerator()
        func hex(_ n: Int) -> String { (0..<n).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined() }
        var options = MockOppo.Options(appKey: hex(12), masterSecret: hex(16), tls: tls)
        options.port = settings.port
        options.responseDelay = settings.delay
        options.hold = settings.hold
        options.recordRequests = settings.recordRequests
        if let verdict = settings.verdict {
            options.hook = { regid, body in
                switch verdict(regid, body) {
                case .ok: return nil
                case .dead: return .invalidRegid
                case .injected(let status):
                    switch status {
                    case 429, 503: return .flowControl
                    default: return .custom(status: status, body: #"{"code":-1,"message":"injected failure"}"#)
                    }
                }
            }
        }
        let mock = MockOppo(options: options, eventLoopGroup: group)
        try await mock.start()
        return RunningMockOppo(mock: mock)
    }
}

public typealias RunningMockOppo = RunningMock<MockOppo>

extension RunningMock where Mock == MockOppo {
    /// The classification default a gateway run against the mock gets unless it sets its own: `IM`.
    public init(mock: MockOppo) {
        self.init(
            mock: mock, name: "oppo", baseURL: mock.baseURL,
            overrides: [
                ("oppo.enabled", .bool(true)),
                ("oppo.app_key", .string(mock.options.appKey)),
                ("oppo.master_secret", .string(mock.options.masterSecret)),
                ("oppo.endpoint", .string(mock.baseURL)),
            ],
            defaults: [("oppo.category", .string("IM"))],
            comments: ["oppo.master_secret": "the mock's throwaway secret"],
            banner: "  OPPO       \(mock.baseURL)   (app key \(mock.options.appKey))",
            stop: { try await mock.stop() })
    }
}
