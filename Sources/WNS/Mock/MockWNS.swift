import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL

/// A mock Windows Notification Service on one HTTPS/1.1 server (TLS offers http/1.1 only, as WNS
/// takes no HTTP/2): both token endpoints (the legacy Live `POST /accesstoken.srf` and Entra's
/// `POST /{tenant}/oauth2/v2.0/token`) and every other path as a channel endpoint.
///
/// As strict as the service where a sender could get it wrong, stricter where the service only
/// advises: a channel POST needs a `Content-Length` body (chunked is refused), no
/// `Expect: 100-continue`, a bearer token it issued and that has not expired, `X-WNS-Type` with the
/// content type of its type, a payload of at most 5,000 bytes whose XML root is the type's element,
/// and only known `X-WNS-*` headers with valid values (cache policy not on a toast, tag only on a
/// tile). The token endpoints check every form field and the flow's scope. Answers are scripted per
/// channel (path and query): 404, 406 and 503 with `Retry-After`, 410, 413.
public final class MockWNS: Sendable {
    /// A scripted answer of a channel.
    public enum Reply: Sendable, Equatable {
        case ok
        /// 200 with `X-WNS-Status: dropped` or `channelthrottled`, and with `device`,
        /// `X-WNS-DeviceConnectionStatus` (else `connected` when the request asked for it).
        case okWithStatus(String, device: String? = nil)
        /// This status, with `Retry-After` and `X-WNS-Error-Description` when given.
        case status(Int, retryAfter: Int? = nil, description: String? = nil)
    }

    /// One token request that passed the checks.
    public struct TokenRequest: Sendable, Equatable {
        /// "live" or "entra".
        public var flow: String
        public var tenant: String?
        public var form: [String: String]
    }

    /// One channel POST that passed the checks (whatever was answered).
    public struct Message: Sendable {
        /// The channel's path and query.
        public var channel: String
        public var host: String
        public var type: String
        public var contentType: String
        /// Every `x-wns-*` header (lowercased names).
        public var wnsHeaders: [String: String]
        public var contentLength: String?
        public var body: [UInt8]
        public var bearer: String
        public var reply: Reply
        /// When it arrived (wall clock, not `Options.now`).
        public var receivedAt = Date()
        public var bodyString: String { String(decoding: body, as: UTF8.self) }
    }

    public struct Options: Sendable {
        public var tls: TLSConfiguration?
        public var port = 0
        /// The legacy flow's package SID and secret.
        public var packageSID = "ms-app://s-1-15-2-1111111111-2222222222-3333333333-4444444444-5555555555-6666666666-7777777777"
        public var packageSecret = "mock-package-secret"
        /// The Entra flow's tenant, client id and secret.
        public var tenantID = "11111111-2222-3333-4444-555555555555"
        public var clientID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
        public var clientSecret = "mock-client-secret"
        /// `expires_in` of issued tokens.
        public var tokenLifetime = 86_400
        public var recordRequests = true
        /// While held, answers wait until the test releases them (token answers too).
        public var hold: MockResponseHold?
        /// Added before every answer.
        public var responseDelay: TimeAmount?
        /// Called for every channel POST that passed the checks, with its path and query and the
        /// body; a non-nil answer replaces the scripted / default one (load tools' verdicts).
        public var hook: (@Sendable (_ channel: String, _ body: [UInt8]) -> Reply?)?
        /// The mock's clock (tokens expire by it).
        public var now: @Sendable () -> Date = { Date() }
        public init(tls: TLSConfiguration?) { self.tls = tls }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var issued: [String: Date] = [:]
        var tokenRequests: [TokenRequest] = []
        var tokenRejections: [String] = []
        var sendRejections: [String] = []
        var messages: [Message] = []
        var sendRequests = 0
    }

    public static let livePath = "/accesstoken.srf"
    public static let liveScope = "notify.windows.com"
    public static let entraScope = "https://wns.windows.com/.default"
    public static let maxPayloadBytes = 5000
    static let knownHeaders: Set<String> = [
        "x-wns-type", "x-wns-cache-policy", "x-wns-requestforstatus", "x-wns-tag", "x-wns-ttl", "x-wns-group", "x-wns-suppresspopup",
        "x-wns-match",
    ]

    public let options: Options
    let state = NIOLockedValueBox(State())
    let serverBox = NIOLockedValueBox<MockHTTPServer?>(nil)

    public init(options: Options, eventLoopGroup: any EventLoopGroup) {
        self.options = options
        var o = MockHTTPServer.Options()
        var tls = options.tls
        tls?.applicationProtocols = ["http/1.1"]
        o.tls = tls
        o.port = options.port
        o.responseHold = options.hold
        o.responseDelay = options.responseDelay
        let server = MockHTTPServer(options: o, eventLoopGroup: eventLoopGroup) { [weak self] request in
            guard let self else { return MockResponse(status: 503) }
            return self.handle(request)
        }
        serverBox.withLockedValue { $0 = server }
    }

    var server: MockHTTPServer { serverBox.withLockedValue { $0! } }
    public func start() async throws { try await server.start() }
    public func stop() async throws { try await server.stop() }
    public var port: Int { server.port }
    public var baseURL: String { server.baseURL }
    /// `wns.connect_to`: where the gateway sends every channel's notifications.
    public var connectTo: String { "127.0.0.1:\(port)" }
    /// `wns.token_url` for the legacy flow.
    public var liveTokenURL: String { baseURL + Self.livePath }
    /// `wns.token_url` for the Entra flow.
    public var entraTokenURL: String { baseURL + "/\(options.tenantID)/oauth2/v2.0/token" }
    /// Connections the server accepted.
    public var connectionsAccepted: Int { server.connectionsAccepted }
    /// Connections open now.
    public var openConnections: Int { server.openConnections }

    // MARK: scripting and observations

    /// Answers for the next POSTs to `channel` (path and query), in order; then the default.
    public func script(channel: String, _ replies: [Reply]) {
        state.withLockedValue { $0.scripts[channel, default: []].append(contentsOf: replies) }
    }
    public func setDefaultReply(_ r: Reply) { state.withLockedValue { $0.defaultReply = r } }
    /// Issues a token without a token request (tests whose answers are all held).
    public func issueToken() -> String {
        let token = "wns-test-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        let expires = options.now().addingTimeInterval(Double(options.tokenLifetime))
        state.withLockedValue { $0.issued[token] = expires }
        return token
    }
    /// Forgets every issued token: sends get 401 until a new one is fetched.
    public func revokeAccessTokens() { state.withLockedValue { $0.issued.removeAll() } }

    public var tokenRequests: [TokenRequest] { state.withLockedValue { $0.tokenRequests } }
    public var tokenRejections: [String] { state.withLockedValue { $0.tokenRejections } }
    public var sendRejections: [String] { state.withLockedValue { $0.sendRejections } }
    public var messages: [Message] { state.withLockedValue { $0.messages } }
    public var sendRequests: Int { state.withLockedValue { $0.sendRequests } }

    // MARK: handling

    func handle(_ request: MockRequest) -> MockResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        if path == Self.livePath { return handleToken(request, flow: "live", tenant: nil) }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count == 5, parts[0].isEmpty, parts[2] == "oauth2", parts[3] == "v2.0", parts[4] == "token" {
            return handleToken(request, flow: "entra", tenant: String(parts[1]))
        }
        return handleSend(request)
    }

    static func parseForm(_ body: [UInt8]) -> [String: String] {
        var out: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1).map(String.init)
            func decode(_ s: String) -> String { s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? s }
            out[decode(kv[0])] = kv.count > 1 ? decode(kv[1]) : ""
        }
        return out
    }

    static func json(_ status: Int, _ object: [String: Any]) -> MockResponse {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: status, headers: [("content-type", "application/json")], body: Array(data))
    }

    func handleToken(_ request: MockRequest, flow: String, tenant: String?) -> MockResponse {
        func refuse(_ status: Int, _ error: String, _ description: String) -> MockResponse {
            state.withLockedValue { $0.tokenRejections.append("\(flow): \(description)") }
            return Self.json(status, ["error": error, "error_description": description])
        }
        guard request.method == "POST" else { return refuse(405, "invalid_request", "method must be POST") }
        let contentType = request.header("content-type") ?? ""
        guard contentType.lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return refuse(400, "invalid_request", "content-type must be application/x-www-form-urlencoded, got \(contentType)")
        }
        let form = Self.parseForm(request.body)
        guard form["grant_type"] == "client_credentials" else {
            return refuse(400, "unsupported_grant_type", "grant_type must be client_credentials")
        }
        let expected: (id: String, secret: String, scope: String)
        if flow == "live" {
            expected = (options.packageSID, options.packageSecret, Self.liveScope)
        } else {
            guard tenant == options.tenantID else { return refuse(400, "invalid_request", "unknown tenant \(tenant ?? "")") }
            expected = (options.clientID, options.clientSecret, Self.entraScope)
        }
        guard form["client_id"] == expected.id else { return refuse(400, "invalid_client", "unknown client_id") }
        guard form["client_secret"] == expected.secret else { return refuse(401, "invalid_client", "bad client_secret") }
        guard form["scope"] == expected.scope else {
            return refuse(400, "invalid_scope", "scope must be \(expected.scope), got \(form["scope"] ?? "nothing")")
        }
        let token = "wns-\(flow)-" + (0..<4).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }.joined()
        let lifetime = options.tokenLifetime
        state.withLockedValue {
            $0.issued[token] = options.now().addingTimeInterval(Double(lifetime))
            $0.tokenRequests.append(TokenRequest(flow: flow, tenant: tenant, form: form))
        }
        if flow == "live" {
            return Self.json(200, ["access_token": token, "token_type": "bearer", "expires_in": lifetime])
        }
        // Entra answers numbers as strings.
        return Self.json(200, ["access_token": token, "token_type": "Bearer", "expires_in": String(lifetime), "ext_expires_in": String(lifetime)])
    }

    func handleSend(_ request: MockRequest) -> MockResponse {
        func refuse(_ status: Int, _ description: String) -> MockResponse {
            state.withLockedValue {
                $0.sendRequests += 1
                $0.sendRejections.append(description)
            }
            return MockResponse(status: status, headers: [("x-wns-error-description", description)])
        }
        guard request.method == "POST" else { return refuse(405, "only POST is allowed") }
        if request.header("transfer-encoding") != nil { return refuse(400, "chunked transfer encoding is not supported") }
        guard let length = request.header("content-length"), Int(length) == request.body.count else {
            return refuse(411, "Content-Length is required")
        }
        if request.header("expect") != nil { return refuse(400, "Expect: 100-continue must not be sent") }
        let auth = request.header("authorization") ?? ""
        guard auth.hasPrefix("Bearer ") else { return refuse(401, "no bearer token") }
        let bearer = String(auth.dropFirst(7))
        let now = options.now()
        let valid = state.withLockedValue { s -> Bool in s.issued[bearer].map { $0 > now } ?? false }
        guard valid else { return refuse(401, "the access token is invalid or expired") }
        for (name, _) in request.headers where name.hasPrefix("x-wns-") && !Self.knownHeaders.contains(name) {
            return refuse(400, "unknown header \(name)")
        }
        let typeHeader = request.header("x-wns-type") ?? ""
        let types = ["wns/toast": "text/xml", "wns/tile": "text/xml", "wns/badge": "text/xml", "wns/raw": "application/octet-stream"]
        guard let wantedContentType = types[typeHeader] else { return refuse(400, "X-WNS-Type \(typeHeader) is not valid") }
        let contentType = request.header("content-type") ?? ""
        let mediaType = contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        guard mediaType == wantedContentType else {
            return refuse(400, "Content-Type \(contentType) is not \(wantedContentType) for \(typeHeader)")
        }
        if let ttl = request.header("x-wns-ttl"), !(ttl.allSatisfy(\.isASCII) && UInt32(ttl) != nil) {
            return refuse(400, "X-WNS-TTL \(ttl) is not an integer")
        }
        if let policy = request.header("x-wns-cache-policy") {
            guard policy == "cache" || policy == "no-cache" else { return refuse(400, "X-WNS-Cache-Policy \(policy) is not valid") }
            guard typeHeader != "wns/toast" else { return refuse(400, "X-WNS-Cache-Policy does not apply to toasts") }
        }
        if let status = request.header("x-wns-requestforstatus"), status != "true" && status != "false" {
            return refuse(400, "X-WNS-RequestForStatus \(status) is not valid")
        }
        if let tag = request.header("x-wns-tag") {
            guard typeHeader == "wns/tile" else { return refuse(400, "X-WNS-Tag applies to tiles only") }
            guard (1...16).contains(tag.count) else { return refuse(400, "X-WNS-Tag is longer than 16 characters") }
        }
        guard request.body.count <= Self.maxPayloadBytes else {
            return refuse(413, "the payload exceeds the 5000 byte limit")
        }
        if typeHeader != "wns/raw" {
            let root = String(typeHeader.dropFirst(4))
            guard Self.rootElement(request.body) == root else { return refuse(400, "the payload's root element is not <\(root)>") }
        }
        let channel = request.path
        let hooked = options.hook?(channel, request.body)
        let reply = state.withLockedValue { s -> Reply in
            s.sendRequests += 1
            if let hooked { return hooked }
            if var q = s.scripts[channel], !q.isEmpty {
                let r = q.removeFirst()
                s.scripts[channel] = q
                return r
            }
            return s.defaultReply
        }
        if options.recordRequests {
            var wns: [String: String] = [:]
            for (n, v) in request.headers where n.hasPrefix("x-wns-") { wns[n] = v }
            let m = Message(
                channel: channel, host: request.header("host") ?? "", type: typeHeader, contentType: contentType, wnsHeaders: wns,
                contentLength: request.header("content-length"), body: request.body, bearer: bearer, reply: reply)
            state.withLockedValue { $0.messages.append(m) }
        }
        switch reply {
        case .ok, .okWithStatus:
            var status = "received"
            var device: String?
            if case .okWithStatus(let s, let d) = reply { (status, device) = (s, d) }
            var headers = [("x-wns-status", status), ("x-wns-msg-id", String(UInt64.random(in: 0...UInt64.max), radix: 16))]
            if device == nil, request.header("x-wns-requestforstatus") == "true" { device = "connected" }
            if let device { headers.append(("x-wns-deviceconnectionstatus", device)) }
            return MockResponse(status: 200, headers: headers)
        case .status(let code, let retryAfter, let description):
            var headers: [(String, String)] = []
            if let retryAfter { headers.append(("retry-after", String(retryAfter))) }
            if let description { headers.append(("x-wns-error-description", description)) }
            return MockResponse(status: code, headers: headers)
        }
    }

    /// The name of the first element of an XML payload (after a declaration, comments, white space).
    static func rootElement(_ body: [UInt8]) -> String? {
        var s = Substring(String(decoding: body, as: UTF8.self))
        while true {
            s = s.drop { $0.isWhitespace }
            if s.hasPrefix("<?") {
                guard let end = s.range(of: "?>") else { return nil }
                s = s[end.upperBound...]
            } else if s.hasPrefix("<!--") {
                guard let end = s.range(of: "-->") else { return nil }
                s = s[end.upperBound...]
            } else {
                break
            }
        }
        guard s.hasPrefix("<") else { return nil }
        return String(s.dropFirst().prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == ":" })
    }
}
