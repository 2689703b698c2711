import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import ProviderKit
import PushgateCore
import Xiaomi

/// Mock Xiaomi MiPush (`POST /v3/message/regid`) on a TLS server, as strict as the real service
/// where Pushgate could get it wrong: `Authorization: key=<AppSecret>` (lowercase `key`), the form
/// content type, the package name, one well-formed regid, a notification (Xiaomi delivers no
/// pass-through messages) with a title of fewer than 50 and a description of fewer than 128
/// characters, a payload of at most 4096 bytes, a `time_to_live` of at most two weeks, a known
/// `extra.channel_id` (the classification), `notify_type` and `extra.notify_effect` in range with
/// the URI each effect needs, and no unknown field. Answers use Xiaomi's `{"result","code",
/// "description","trace_id","data"}` shape with its documented codes.
public final class MockXiaomi: Sendable {
    public enum Reply: Sendable, Equatable {
        case ok
        /// Code 0 with the regid in `data.bad_regids` (uninstalled, unregistered).
        case badRegid
        /// Code 200001: the day's quota is spent.
        case quotaExceeded
        /// Code 10034: too many messages today.
        case tooManyToday
        /// Code 10027: the API is called too often.
        case tooFrequent
        /// HTTP 503 with code 10002 (system busy).
        case busy(retryAfter: Int?)
        case custom(status: Int, body: String)
    }

    public struct RecordedMessage: Sendable {
        public var regid: String
        public var form: [String: String]
        public var reply: Reply
        public var receivedAt: Date = Date()
    }

    public struct Options: Sendable {
        public var appSecret: String
        public var packageName: String
        /// The channels created in the mock's console (`extra.channel_id` must be one).
        public var channels: Set<String>
        public var tls: TLSConfiguration?
        public var port = 0
        public var responseDelay: TimeAmount? = nil
        public var recordRequests = true
        /// A non-nil answer replaces the scripted / default one.
        public var hook: (@Sendable (_ regid: String, _ body: [UInt8]) -> Reply?)? = nil

        public init(appSecret: String, packageName: String, channels: Set<String>, tls: TLSConfiguration?) {
            self.appSecret = appSecret
            self.packageName = packageName
            self.channels = channels
            self.tls = tls
        }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var requests = 0
        var rejections: [String] = []
        var messages: [RecordedMessage] = []
    }

    public static let sendPath = "/v3/message/regid"
    public static let knownFields: Set<String> = [
        "registration_id", "restricted_package_name", "pass_through", "title", "description", "payload", "notify_type", "time_to_live",
        "notify_id", "extra.channel_id", "extra.notify_effect", "extra.intent_uri", "extra.web_uri", "extra.notify_foreground",
        "extra.sound_uri", "extra.callback", "extra.callback.param", "extra.only_send_once",
    ]

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
    /// `xiaomi.endpoint`.
    public var baseURL: String { server.baseURL }

    public func script(regid: String, _ replies: [Reply]) { state.withLockedValue { $0.scripts[regid, default: []] += replies } }
    public func setDefaultReply(_ r: Reply) { state.withLockedValue { $0.defaultReply = r } }
    public var requestCount: Int { state.withLockedValue { $0.requests } }
    public var rejections: [String] { state.withLockedValue { $0.rejections } }
    public var messages: [RecordedMessage] { state.withLockedValue { $0.messages } }
    public func reset() { state.withLockedValue { $0 = State() } }

    static func answer(_ status: Int, code: Int, description: String, data: [String: Any]? = nil, headers: [(String, String)] = [])
        -> MockResponse
    {
        var o: [String: Any] = [
            "result": code == 0 ? "ok" : "error", "code": code, "description": description,
            "trace_id": "Xcm\(UInt64.random(in: 1...UInt64.max))",
        ]
        if code != 0 { o["reason"] = description }
        if let data { o["data"] = data }
        let body = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: status, headers: [("content-type", "application/json;charset=UTF-8")] + headers, body: Array(body))
    }

    /// `application/x-www-form-urlencoded`; nil when a pair is malformed or a name repeats.
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

    static func isRegid(_ t: String) -> Bool {
        (1...512).contains(t.utf8.count)
            && t.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) && $0.isASCII || "+/=-_.".unicodeScalars.contains($0) }
    }

    /// Why the form is not a message Xiaomi takes: the code and description it answers.
    func problem(_ f: [String: String]) -> (Int, String)? {
        for k in f.keys where !Self.knownFields.contains(k) { return (10017, "unknown parameter \(k)") }
        guard let regids = f["registration_id"], !regids.isEmpty else { return (10016, "registration_id is required") }
        guard regids.split(separator: ",", omittingEmptySubsequences: false).allSatisfy({ Self.isRegid(String($0)) }) else {
            return (10017, "malformed registration_id")
        }
        guard let pkg = f["restricted_package_name"] else { return (10016, "restricted_package_name is required") }
        guard pkg == options.packageName else { return (22022, "invalid package name \(pkg)") }
        guard f["pass_through"] == "0" else { return (10017, "pass-through messages are no longer delivered: pass_through must be 0") }
        guard let title = f["title"], !title.trimmingCharacters(in: .whitespaces).isEmpty else { return (10016, "title is required") }
        guard title.utf16.count < 50 else { return (10017, "title must be shorter than 50") }
        guard let d = f["description"], !d.trimmingCharacters(in: .whitespaces).isEmpty else { return (10016, "description is required") }
        guard d.utf16.count < 128 else { return (10017, "description must be shorter than 128") }
        if let p = f["payload"], p.utf8.count > 4096 { return (65009, "message too long") }
        if let t = f["notify_type"] {
            guard let i = Int(t), (-1...7).contains(i), i != 0 else { return (10017, "invalid notify_type") }
        }
        if let t = f["time_to_live"] {
            guard let ms = Int64(t), ms > 0, ms <= 14 * 86_400_000 else { return (10017, "invalid time_to_live") }
        }
        if let n = f["notify_id"] {
            guard let i = Int64(n), (0...Int64(Int32.max)).contains(i) else { return (10017, "invalid notify_id") }
        }
        guard let channel = f["extra.channel_id"], !channel.isEmpty else {
            return (27001, "extra.channel_id is required: the app sends all traffic with the new message classification")
        }
        guard options.channels.contains(channel) else { return (27001, "channel \(channel) is not registered") }
        switch f["extra.notify_effect"] {
        case nil, "1"?: break
        case "2"?: if (f["extra.intent_uri"] ?? "").isEmpty { return (10016, "extra.intent_uri is required with notify_effect 2") }
        case "3"?:
            guard let u = f["extra.web_uri"], let c = URLComponents(string: u), ["http", "https"].contains(c.scheme ?? "") else {
                return (10016, "extra.web_uri must be an http(s) URL with notify_effect 3")
            }
        default: return (10017, "invalid extra.notify_effect")
        }
        if let p = f["extra.callback.param"], p.utf8.count > 64 { return (65036, "callback param too long") }
        return nil
    }

    func handle(_ request: MockRequest) -> MockResponse {
        func refuse(_ status: Int, _ code: Int, _ why: String) -> MockResponse {
            state.withLockedValue {
                $0.requests += 1
                $0.rejections.append(why)
            }
            return Self.answer(status, code: code, description: why)
        }
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        guard path == Self.sendPath else {
            return MockResponse(status: 404, headers: [("content-type", "text/plain")], body: Array("Not Found".utf8))
        }
        guard request.method == "POST" else { return refuse(405, 10012, "method \(request.method)") }
        // The word `key` must be lowercase (pId=1559).
        guard request.header("authorization") == "key=" + options.appSecret else { return refuse(200, 21301, "authentication failed") }
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return refuse(200, 10008, "content-type must be application/x-www-form-urlencoded")
        }
        guard let form = Self.parseForm(request.body) else { return refuse(200, 10008, "malformed form body") }
        if let (code, why) = problem(form) { return refuse(200, code, why) }
        let regid = form["registration_id"] ?? ""
        let hooked = options.hook?(regid, request.body)
        let record = options.recordRequests
        let reply: Reply = state.withLockedValue { s in
            s.requests += 1
            var r = s.defaultReply
            if let hooked {
                r = hooked
            } else if var q = s.scripts[regid], !q.isEmpty {
                r = q.removeFirst()
                s.scripts[regid] = q
            }
            if record { s.messages.append(RecordedMessage(regid: regid, form: form, reply: r)) }
            return r
        }
        let id = "scm\(UInt64.random(in: 1...UInt64.max))"
        switch reply {
        case .ok: return Self.answer(200, code: 0, description: "成功", data: ["id": id])
        case .badRegid: return Self.answer(200, code: 0, description: "成功", data: ["id": id, "bad_regids": regid])
        case .quotaExceeded: return Self.answer(200, code: 200001, description: "exceed quota")
        case .tooManyToday: return Self.answer(200, code: 10034, description: "应用当日发送消息数量过多")
        case .tooFrequent: return Self.answer(200, code: 10027, description: "应用的API调用太频繁")
        case .busy(let after):
            return Self.answer(503, code: 10002, description: "系统繁忙", headers: after.map { [("retry-after", String($0))] } ?? [])
        case .custom(let status, let body):
            return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(body.utf8))
        }
    }
}

extension ProviderMockModule {
    /// The mock Xiaomi: a throwaway AppSecret, package `com.example.app`, channels `mock_private` and `mock_public`.
    public static let xiaomi = ProviderMockModule(name: "xiaomi", title: "Xiaomi", platforms: [.xiaomi]) { tls, _, settings, group in
        var random = SystemRandomNumberGenerator()
        let secret = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined()
        var options = MockXiaomi.Options(
            appSecret: secret, packageName: "com.example.app", channels: ["mock_private", "mock_public"], tls: tls)
        options.port = settings.port
        options.responseDelay = settings.latencyMs > 0 ? .milliseconds(Int64(settings.latencyMs)) : nil
        options.recordRequests = settings.recordRequests
        if let verdict = settings.verdict {
            options.hook = { regid, body in
                switch verdict(regid, body) {
                case .ok: return nil
                case .dead: return .badRegid
                case .injected(let status):
                    switch status {
                    case 429: return .tooFrequent
                    case 503: return .busy(retryAfter: nil)
                    default: return .custom(status: status, body: #"{"result":"error","code":1,"description":"injected failure"}"#)
                    }
                }
            }
        }
        let mock = MockXiaomi(options: options, eventLoopGroup: group)
        try await mock.start()
        return RunningMockXiaomi(mock: mock)
    }
}

public typealias RunningMockXiaomi = RunningMock<MockXiaomi>

extension RunningMock where Mock == MockXiaomi {
    /// The classification default a gateway run against the mock gets unless it sets its own: the
    /// mock's private channel.
    public init(mock: MockXiaomi) {
        let channels = mock.options.channels.sorted().joined(separator: ", ")
        self.init(
            mock: mock, name: "xiaomi", baseURL: mock.baseURL,
            overrides: [
                ("xiaomi.enabled", .bool(true)),
                ("xiaomi.app_secret", .string(mock.options.appSecret)),
                ("xiaomi.package_name", .string(mock.options.packageName)),
                ("xiaomi.endpoint", .string(mock.baseURL)),
            ],
            defaults: [("xiaomi.channel_id", .string("mock_private"))],
            comments: [
                "xiaomi.app_secret": "the mock's throwaway secret",
                "xiaomi.channel_id": "the mock's channels: \(channels)",
            ],
            banner: "  Xiaomi     \(mock.baseURL)   (package \(mock.options.packageName), channels \(channels))",
            stop: { try await mock.stop() })
    }
}
