import Crypto
import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore
import Vivo

/// Mock vivo Push on a TLS server: `POST /message/auth` checks the AppID and AppKey, a
/// millisecond timestamp within 10 minutes of the mock's clock and `sign` = lowercase hex
/// MD5(appId + appKey + timestamp + appSecret), refuses more than 10 auth calls in one second of
/// its clock (10093), and issues `authToken`s; `POST /message/send` checks the `authToken` header,
/// the JSON (the AppID, a well-formed regId, a title of at most 40 and a content of at most 100
/// characters, `notifyType`, `skipType` with the `skipContent` it needs, `classification` present
/// and matching a known `category`, `clientCustomMap` a map of strings of at most 1024 characters,
/// a `requestId` of at most 64, no unknown field) and answers vivo's codes, scriptable per regId.
/// `POST /message/saveListPayload` checks the token and the message as strictly (no `regId`) and
/// answers a `taskId`; `POST /message/pushToList` checks the token, the AppID, `regIds` (2...1000),
/// a `taskId` it issued and the `requestId`, and answers `invalidUsers` (status 2 for a scripted
/// dead regId, 1 for a malformed one); a scripted quota, auth or custom reply of any of its regIds
/// answers the whole request, and `scriptListAnswer(_:)` replaces the next answer (hostile answers).
public final class MockVivo: Sendable {
    public enum Reply: Sendable, Equatable {
        case ok
        /// 10302 with `invalidUser` status 2 (uninstalled).
        case invalidUser
        /// 10070: the day's total is reached.
        case dailyLimit
        /// 10000: the authToken is refused (the mock forgets it too).
        case invalidAuthToken
        /// 10252 (`saveListPayload` only): the day's batch message bodies are spent.
        case listPayloadLimit
        case custom(status: Int, body: String)
    }

    public struct RecordedMessage: Sendable {
        public var regid: String
        public var authToken: String
        public var json: String
        public var reply: Reply
        public var message: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:] }
    }

    public struct Options: Sendable {
        public var appID: Int64
        public var appKey: String
        public var appSecret: String
        public var tls: TLSConfiguration?
        public var port = 0
        public var responseDelay: TimeAmount? = nil
        /// Answers wait until it lets them go (tests of sends in flight).
        public var hold: MockResponseHold? = nil
        public var recordRequests = true
        public var now: @Sendable () -> Date = { Date() }
        public var hook: (@Sendable (_ regid: String, _ body: [UInt8]) -> Reply?)? = nil

        public init(appID: Int64, appKey: String, appSecret: String, tls: TLSConfiguration?) {
            self.appID = appID
            self.appKey = appKey
            self.appSecret = appSecret
            self.tls = tls
        }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var issued: Set<String> = []
        var authRequests = 0
        var authTimes: [Date] = []
        var sendRequests = 0
        var rejections: [String] = []
        var messages: [RecordedMessage] = []
        var payloads: [String: String] = [:]
        var saveListRequests = 0
        var saveListReplies: [Reply] = []
        var pushToListRequests = 0
        var batches: [[String]] = []
        var listAnswers: [String] = []
    }

    /// `pushToList` takes 2...1000 regIds.
    public static let listRange = 2...1000
    static let listFields: Set<String> = ["appId", "regIds", "taskId", "requestId", "pushMode"]

    static let sendFields: Set<String> = [
        "appId", "regId", "notifyType", "title", "content", "timeToLive", "skipType", "skipContent", "classification", "category",
        "clientCustomMap", "requestId", "pushMode", "networkType", "extra",
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
    public func revokeAuthTokens() { state.withLockedValue { $0.issued.removeAll() } }
    public var authRequestCount: Int { state.withLockedValue { $0.authRequests } }
    public var sendRequestCount: Int { state.withLockedValue { $0.sendRequests } }
    public var rejections: [String] { state.withLockedValue { $0.rejections } }
    public var messages: [RecordedMessage] { state.withLockedValue { $0.messages } }
    /// `saveListPayload` requests that passed the checks.
    public var saveListRequestCount: Int { state.withLockedValue { $0.saveListRequests } }
    /// `pushToList` requests that passed the checks.
    public var pushToListRequestCount: Int { state.withLockedValue { $0.pushToListRequests } }
    /// The regIds of each `pushToList` request that passed the checks, in order.
    public var batches: [[String]] { state.withLockedValue { $0.batches } }
    /// Replies of the next `saveListPayload` requests (`.listPayloadLimit`, `.dailyLimit`, …).
    public func scriptSaveList(_ replies: [Reply]) { state.withLockedValue { $0.saveListReplies += replies } }
    /// The body of the next `pushToList` answer (HTTP 200), whatever the request's regIds.
    public func scriptListAnswer(_ body: String) { state.withLockedValue { $0.listAnswers.append(body) } }

    static func answer(_ result: Int, _ desc: String, extra: [String: Any] = [:]) -> MockResponse {
        var o: [String: Any] = ["result": result, "desc": desc]
        for (k, v) in extra { o[k] = v }
        let body = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: 200, headers: [("content-type", "application/json;charset=UTF-8")], body: Array(body))
    }

    func refuse(_ code: Int, _ why: String, auth: Bool) -> MockResponse {
        state.withLockedValue {
            if auth { $0.authRequests += 1 } else { $0.sendRequests += 1 }
            $0.rejections.append(why)
        }
        return Self.answer(code, why)
    }

    func handle(_ request: MockRequest) -> MockResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        guard request.method == "POST" else { return MockResponse(status: 405) }
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/json") else {
            return refuse(10200, "content-type must be application/json", auth: path == "/message/auth")
        }
        guard let json = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            return refuse(10200, "body must be a JSON object", auth: path == "/message/auth")
        }
        switch path {
        case "/message/auth": return handleAuth(json)
        case "/message/send": return handleSend(json, token: request.header("authtoken"), body: request.body)
        case "/message/saveListPayload": return handleSaveList(json, token: request.header("authtoken"), body: request.body)
        case "/message/pushToList": return handlePushToList(json, token: request.header("authtoken"), body: request.body)
        default: return MockResponse(status: 404)
        }
    }

    func handleAuth(_ f: [String: Any]) -> MockResponse {
        guard let id = (f["appId"] as? NSNumber)?.int64Value ?? (f["appId"] as? String).flatMap({ Int64($0) }), id == options.appID else {
            return refuse(10094, "appId mismatch", auth: true)
        }
        guard f["appKey"] as? String == options.appKey else { return refuse(10200, "invalid appKey", auth: true) }
        guard let ts = (f["timestamp"] as? NSNumber)?.int64Value, String(ts).count == 13 else {
            return refuse(10207, "timestamp: 13 digits of milliseconds", auth: true)
        }
        let now = options.now()
        guard abs(Double(ts) / 1000 - now.timeIntervalSince1970) <= 600 else { return refuse(10207, "timestamp outside 10 minutes", auth: true) }
        let expected = Insecure.MD5.hash(data: Array((String(options.appID) + options.appKey + String(ts) + options.appSecret).utf8))
            .map { String(format: "%02x", $0) }.joined()
        guard f["sign"] as? String == expected else { return refuse(10206, "invalid sign", auth: true) }
        let limited = state.withLockedValue { s -> Bool in
            s.authTimes = s.authTimes.filter { now.timeIntervalSince($0) < 1 }
            return s.authTimes.count >= 10
        }
        if limited { return refuse(10093, "auth called more than 10 times a second", auth: true) }
        let token = "vivo-" + UUID().uuidString.lowercased()
        state.withLockedValue {
            $0.authRequests += 1
            $0.authTimes.append(now)
            $0.issued.insert(token)
        }
        return Self.answer(0, "请求成功", extra: ["authToken": token])
    }

    static func isRegid(_ t: String) -> Bool {
        (1...128).contains(t.utf8.count)
            && t.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-") }
    }

    /// The message's problem; `list`: a `saveListPayload` body, which names no regId.
    func problem(_ m: [String: Any], list: Bool = false) -> (Int, String)? {
        for k in m.keys where !Self.sendFields.contains(k) || (list && k == "regId") { return (10200, "unknown field \(k)") }
        guard (m["appId"] as? NSNumber)?.int64Value == options.appID else { return (10094, "appId mismatch") }
        if !list {
            guard let regid = m["regId"] as? String, Self.isRegid(regid) else { return (10302, "regId不合法") }
        }
        guard let nt = (m["notifyType"] as? NSNumber)?.intValue, (1...4).contains(nt) else { return (10200, "notifyType: 1 to 4") }
        guard let title = m["title"] as? String, !title.isEmpty, title.utf16.count <= 40 else { return (10200, "title: 1 to 40 characters") }
        guard let content = m["content"] as? String, !content.isEmpty, content.utf16.count <= 100 else {
            return (10200, "content: 1 to 100 characters")
        }
        guard let skip = (m["skipType"] as? NSNumber)?.intValue, (1...4).contains(skip) else { return (10200, "skipType: 1 to 4") }
        if skip != 1, (m["skipContent"] as? String ?? "").isEmpty { return (10200, "skipContent is required with skipType \(skip)") }
        guard let k = (m["classification"] as? NSNumber)?.int64Value, k == 0 || k == 1 else {
            return (10200, "classification is required: 0 operations, 1 system")
        }
        guard let category = m["category"] as? String, let kind = VivoOptions.categories[category] else { return (10096, "invalid category") }
        guard kind == k else { return (10097, "category and classification do not match") }
        if let ttl = m["timeToLive"] {
            guard let i = (ttl as? NSNumber)?.int64Value, (60...604_800).contains(i) else { return (10200, "timeToLive: 60 s to 7 days") }
        }
        if let map = m["clientCustomMap"] {
            guard let d = map as? [String: Any], d.values.allSatisfy({ $0 is String }),
                let text = try? JSONSerialization.data(withJSONObject: d), String(decoding: text, as: UTF8.self).utf16.count <= 1024
            else { return (10200, "clientCustomMap: a map of strings of at most 1024 characters") }
        }
        guard let rid = m["requestId"] as? String, (1...64).contains(rid.utf8.count) else { return (10200, "requestId: 1 to 64 characters") }
        return nil
    }

    func handleSend(_ m: [String: Any], token: String?, body: [UInt8]) -> MockResponse {
        guard let token, state.withLockedValue({ $0.issued.contains(token) }) else { return refuse(10000, "authToken invalid", auth: false) }
        if let (code, why) = problem(m) { return refuse(code, why, auth: false) }
        let regid = m["regId"] as? String ?? ""
        let hooked = options.hook?(regid, body)
        let text = String(decoding: body, as: UTF8.self)
        let reply: Reply = state.withLockedValue { s in
            s.sendRequests += 1
            return self.reply(&s, regid: regid, hooked: hooked, token: token, json: text)
        }
        switch reply {
        case .ok: return Self.answer(0, "请求成功", extra: ["taskId": "vivo-task-\(UInt32.random(in: 1...UInt32.max))"])
        case .invalidUser: return Self.answer(10302, "regId不合法", extra: ["invalidUser": ["status": 2, "userid": regid]])
        case .dailyLimit: return Self.answer(10070, "超过当日发送总量")
        case .invalidAuthToken: return Self.answer(10000, "authToken invalid")
        case .listPayloadLimit: return Self.answer(10200, "listPayloadLimit is a saveListPayload reply")
        case .custom(let status, let body):
            return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
        }
    }
}

extension MockVivo {
    /// The next reply for `regid` (the hook's, else its script's, else the default), recorded.
    func reply(_ s: inout State, regid: String, hooked: Reply?, token: String, json: String) -> Reply {
        var r = s.defaultReply
        if let hooked {
            r = hooked
        } else if var q = s.scripts[regid], !q.isEmpty {
            r = q.removeFirst()
            s.scripts[regid] = q
        }
        if r == .invalidAuthToken { s.issued.remove(token) }
        if options.recordRequests { s.messages.append(RecordedMessage(regid: regid, authToken: token, json: json, reply: r)) }
        return r
    }

    func handleSaveList(_ m: [String: Any], token: String?, body: [UInt8]) -> MockResponse {
        guard let token, state.withLockedValue({ $0.issued.contains(token) }) else { return refuse(10000, "authToken invalid", auth: false) }
        if let (code, why) = problem(m, list: true) { return refuse(code, why, auth: false) }
        let text = String(decoding: body, as: UTF8.self)
        let (reply, taskID): (Reply?, String) = state.withLockedValue { s in
            s.sendRequests += 1
            s.saveListRequests += 1
            let r = s.saveListReplies.isEmpty ? nil : s.saveListReplies.removeFirst()
            if r == .invalidAuthToken { s.issued.remove(token) }
            let id = "vivo-list-\(s.saveListRequests)-\(UInt32.random(in: 1...UInt32.max))"
            if r == nil || r == .ok { s.payloads[id] = text }
            return (r, id)
        }
        switch reply {
        case nil, .ok?: return Self.answer(0, "请求成功", extra: ["taskId": taskID])
        case .listPayloadLimit?: return Self.answer(10252, "批量发送消息体超出限制")
        case .dailyLimit?: return Self.answer(10070, "超过当日发送总量")
        case .invalidAuthToken?: return Self.answer(10000, "authToken invalid")
        case .invalidUser?: return Self.answer(10200, "invalidUser is a pushToList reply")
        case .custom(let status, let body)?:
            return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
        }
    }

    func handlePushToList(_ m: [String: Any], token: String?, body: [UInt8]) -> MockResponse {
        guard let token, state.withLockedValue({ $0.issued.contains(token) }) else { return refuse(10000, "authToken invalid", auth: false) }
        for k in m.keys where !Self.listFields.contains(k) { return refuse(10200, "unknown field \(k)", auth: false) }
        guard (m["appId"] as? NSNumber)?.int64Value == options.appID else { return refuse(10094, "appId mismatch", auth: false) }
        guard let regids = m["regIds"] as? [Any], Self.listRange.contains(regids.count) else {
            return refuse(10200, "regIds: \(Self.listRange.lowerBound) to \(Self.listRange.upperBound) regIds", auth: false)
        }
        guard let ids = regids as? [String] else { return refuse(10200, "regIds must be strings", auth: false) }
        guard let rid = m["requestId"] as? String, (1...64).contains(rid.utf8.count) else {
            return refuse(10200, "requestId: 1 to 64 characters", auth: false)
        }
        if let mode = m["pushMode"] {
            guard let i = (mode as? NSNumber)?.intValue, i == 0 || i == 1 else { return refuse(10200, "pushMode: 0 or 1", auth: false) }
        }
        guard let taskID = m["taskId"] as? String, let payload = state.withLockedValue({ $0.payloads[taskID] }) else {
            return refuse(10200, "taskId不合法: not one saveListPayload answered", auth: false)
        }
        let hooks = ids.map { Self.isRegid($0) ? options.hook?($0, body) : nil }
        let (replies, scripted): ([Reply?], String?) = state.withLockedValue { s in
            s.sendRequests += 1
            s.pushToListRequests += 1
            s.batches.append(ids)
            let replies = zip(ids, hooks).map { id, hooked in
                Self.isRegid(id) ? self.reply(&s, regid: id, hooked: hooked, token: token, json: payload) : nil
            }
            return (replies, s.listAnswers.isEmpty ? nil : s.listAnswers.removeFirst())
        }
        if let scripted { return MockResponse(status: 200, headers: [("content-type", "application/json")], body: Array(scripted.utf8)) }
        // A reply that is no regId's own answers the whole request.
        for r in replies {
            switch r {
            case .dailyLimit?: return Self.answer(10070, "超过当日发送总量")
            case .invalidAuthToken?: return Self.answer(10000, "authToken invalid")
            case .custom(let status, let body)?:
                return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
            default: continue
            }
        }
        var invalid: [[String: Any]] = []
        for (id, r) in zip(ids, replies) {
            if r == nil { invalid.append(["status": 1, "userid": id]) } else if r == .invalidUser { invalid.append(["status": 2, "userid": id]) }
        }
        var extra: [String: Any] = ["taskId": taskID]
        if !invalid.isEmpty { extra["invalidUsers"] = invalid }
        return Self.answer(0, "请求成功", extra: extra)
    }
}

extension ProviderMockModule {
    /// The mock vivo: a throwaway AppID, AppKey and AppSecret; the app's default category `IM`.
    public static let vivo = ProviderMockModule(name: "vivo", title: "vivo", platforms: [.vivo]) { tls, _, settings, group in
        var random = SystemRandomNumberGenerator()
        func hex(_ n: Int) -> String { (0..<n).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined() }
        var options = MockVivo.Options(appID: Int64.random(in: 10_000...99_999, using: &random), appKey: hex(12), appSecret: hex(16), tls: tls)
        options.port = settings.port
        options.responseDelay = settings.delay
        options.hold = settings.hold
        options.recordRequests = settings.recordRequests
        if let verdict = settings.verdict {
            options.hook = { regid, body in
                switch verdict(regid, body) {
                case .ok: return nil
                case .dead: return .invalidUser
                case .injected(let status):
                    switch status {
                    case 429, 503: return .custom(status: 200, body: #"{"result":10500,"desc":"busy"}"#)
                    default: return .custom(status: status, body: #"{"result":10501,"desc":"injected failure"}"#)
                    }
                }
            }
        }
        let mock = MockVivo(options: options, eventLoopGroup: group)
        try await mock.start()
        return RunningMockVivo(mock: mock)
    }
}

public typealias RunningMockVivo = RunningMock<MockVivo>

extension RunningMock where Mock == MockVivo {
    /// The classification default a gateway run against the mock gets unless it sets its own: `IM`.
    public init(mock: MockVivo) {
        self.init(
            mock: mock, name: "vivo", baseURL: mock.baseURL,
            overrides: [
                ("vivo.enabled", .bool(true)),
                ("vivo.app_id", .string(String(mock.options.appID))),
                ("vivo.app_key", .string(mock.options.appKey)),
                ("vivo.app_secret", .string(mock.options.appSecret)),
                ("vivo.endpoint", .string(mock.baseURL)),
            ],
            defaults: [("vivo.category", .string("IM"))],
            comments: ["vivo.app_secret": "the mock's throwaway secret"],
            banner: "  vivo       \(mock.baseURL)   (app id \(mock.options.appID))",
            stop: { try await mock.stop() })
    }
}
