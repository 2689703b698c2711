import Crypto
import FCM
import Foundation
import MockKit
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import X509
import _CryptoExtras

/// A Google service account made for tests: an RSA-2048 key (PKCS#8 PEM) and the JSON file
/// pointing `token_uri` at a mock token endpoint.
public struct TestServiceAccount: Sendable {
    public let projectID: String
    public let clientEmail: String
    public let privateKeyID: String
    public let privateKey: _RSA.Signing.PrivateKey

    public var publicKey: _RSA.Signing.PublicKey { privateKey.publicKey }
    /// `-----BEGIN PRIVATE KEY-----` (PKCS#8), as in Google's JSON files.
    public var privateKeyPEM: String { privateKey.pkcs8PEMRepresentation }

    public init(projectID: String, clientEmail: String, privateKeyID: String, privateKey: _RSA.Signing.PrivateKey) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyID = privateKeyID
        self.privateKey = privateKey
    }

    public static func generate(
        projectID: String = "pushgate-test",
        clientEmail: String? = nil
    ) throws -> TestServiceAccount {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let keyID = SHA256.hash(data: key.publicKey.derRepresentation).prefix(20).map { String(format: "%02x", $0) }.joined()
        return TestServiceAccount(
            projectID: projectID,
            clientEmail: clientEmail ?? "pushgate@\(projectID).iam.gserviceaccount.com",
            privateKeyID: keyID,
            privateKey: key
        )
    }

    /// The service-account JSON (Google's field names) with `token_uri` set.
    public func json(tokenURI: String) -> String {
        let object: [String: String] = [
            "type": "service_account",
            "project_id": projectID,
            "private_key_id": privateKeyID,
            "private_key": privateKeyPEM + "\n",
            "client_email": clientEmail,
            "client_id": "100000000000000000000",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": tokenURI,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        ]
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])
        return String(decoding: data, as: UTF8.self)
    }

    /// A self-signed X.509 certificate of the key (what Google publishes per `private_key_id`),
    /// for verifying assertions with independent libraries.
    public func certificatePEM(validFor seconds: TimeInterval = 86_400) throws -> String {
        let name = try DistinguishedName { CommonName(clientEmail) }
        let now = Date()
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(privateKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(seconds),
            issuer: name,
            subject: name,
            signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: Certificate.Extensions {},
            issuerPrivateKey: Certificate.PrivateKey(privateKey)
        )
        return try certificate.serializeAsPEM().pemString
    }
}

/// Mock FCM HTTP v1 (`POST /v1/projects/{id}/messages:send`) plus a mock OAuth2 token endpoint
/// (`POST /token`), on one TLS server. The token endpoint verifies the JWT bearer assertion like
/// Google does; the send endpoint checks the bearer and the message shape, records every message
/// and answers scripted errors per target in FCM's error JSON shape.
public final class MockFCM: Sendable {
    /// A scripted answer of the send endpoint.
    public enum Reply: Sendable, Equatable {
        case ok
        /// 404 NOT_FOUND, errorCode UNREGISTERED.
        case unregistered
        /// 403 PERMISSION_DENIED, errorCode SENDER_ID_MISMATCH.
        case senderIDMismatch
        /// 400 INVALID_ARGUMENT with this message.
        case invalidArgument(String)
        /// 401 UNAUTHENTICATED, errorCode THIRD_PARTY_AUTH_ERROR (APNs/Web Push credentials refused).
        case thirdPartyAuthError
        /// 429 RESOURCE_EXHAUSTED, errorCode QUOTA_EXCEEDED.
        case quotaExceeded(retryAfter: Int?)
        /// 503 UNAVAILABLE, errorCode UNAVAILABLE.
        case unavailable(retryAfter: Int?)
        /// 500 INTERNAL, errorCode INTERNAL.
        case internalError
        /// 401 UNAUTHENTICATED without details (the access token was refused).
        case unauthenticated
        /// Anything else.
        case custom(status: Int, body: String, retryAfter: Int?)
    }

    /// One message accepted by the send endpoint's shape checks (whatever was answered).
    public struct RecordedMessage: Sendable {
        /// "token", "topic", "condition" or "fid".
        public var targetKind: String
        public var target: String
        public var validateOnly: Bool
        /// The `message` object, re-serialised.
        public var messageJSON: String
        /// The raw request body.
        public var body: [UInt8]
        /// `message.data` (all values strings by the time it is recorded).
        public var data: [String: String]?
        public var notification: [String: String]?
        public var bearer: String
        public var reply: Reply
        /// When the send request arrived.
        public var receivedAt: Date = Date()

        /// The `message` object as a dictionary.
        public var message: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(messageJSON.utf8))) as? [String: Any] ?? [:]
        }
    }

    public struct Options: Sendable {
        public var projectID: String
        public var publicKey: _RSA.Signing.PublicKey
        /// Expected `iss` and `kid` of assertions (nil = not checked).
        public var clientEmail: String?
        public var privateKeyID: String?
        /// `expires_in` of the access tokens issued.
        public var accessTokenLifetime: Int = 3599
        public var tls: TLSConfiguration?
        public var responseDelay: TimeAmount? = nil
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced on each connection.
        public var maxConcurrentStreams: Int = 1000
        public var port: Int = 0
        /// Keep every message in `messages` (tests). Off for load runs: memory stays flat.
        public var recordRequests = true
        /// Called (on the event loop: keep it cheap) for every send that passed the checks, with the
        /// target (token / topic / condition) and the raw body; a non-nil answer replaces the
        /// scripted / default one.
        public var hook: (@Sendable (_ target: String, _ body: [UInt8]) -> Reply?)? = nil

        public init(
            projectID: String, publicKey: _RSA.Signing.PublicKey, clientEmail: String? = nil, privateKeyID: String? = nil, tls: TLSConfiguration?
        ) {
            self.projectID = projectID
            self.publicKey = publicKey
            self.clientEmail = clientEmail
            self.privateKeyID = privateKeyID
            self.tls = tls
        }

        public init(serviceAccount: TestServiceAccount, tls: TLSConfiguration?) {
            self.init(
                projectID: serviceAccount.projectID, publicKey: serviceAccount.publicKey,
                clientEmail: serviceAccount.clientEmail, privateKeyID: serviceAccount.privateKeyID, tls: tls)
        }
    }

    struct State {
        var scripts: [String: [Reply]] = [:]
        var defaultReply: Reply = .ok
        var tokenRequests = 0
        var tokenRejections: [String] = []
        var assertions: [String] = []
        var issued: Set<String> = []
        var sendRequests = 0
        var sendRejections: [String] = []
        var messages: [RecordedMessage] = []
    }

    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    public static let tokenPath = "/token"

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
    /// `https://127.0.0.1:<port>`: the FCM `endpoint`.
    public var baseURL: String { server.baseURL }
    /// The token endpoint URL: put it in the service account's `token_uri`.
    public var tokenURL: String { baseURL + Self.tokenPath }
    public var connectionsAccepted: Int { server.connectionsAccepted }

    // MARK: scripting

    /// Answers for the next sends to `token` (or a topic / condition string), in order; then the default.
    public func script(token: String, responses: [Reply]) {
        state.withLockedValue { $0.scripts[token, default: []].append(contentsOf: responses) }
    }

    /// The answer when nothing is scripted for a target (initially `.ok`).
    public func setDefaultReply(_ reply: Reply) {
        state.withLockedValue { $0.defaultReply = reply }
    }

    /// Forgets every issued access token: the next sends get 401 UNAUTHENTICATED until re-minted.
    public func revokeAccessTokens() {
        state.withLockedValue { $0.issued.removeAll() }
    }

    public func reset() {
        state.withLockedValue { $0 = State() }
    }

    // MARK: observations

    public var tokenRequestCount: Int { state.withLockedValue { $0.tokenRequests } }
    /// Why token requests were refused.
    public var tokenRejections: [String] { state.withLockedValue { $0.tokenRejections } }
    /// Every assertion received (verified or not).
    public var assertions: [String] { state.withLockedValue { $0.assertions } }
    public var sendRequestCount: Int { state.withLockedValue { $0.sendRequests } }
    /// Why send requests were refused before recording (bad bearer, bad shape, ...).
    public var sendRejections: [String] { state.withLockedValue { $0.sendRejections } }
    public var messages: [RecordedMessage] { state.withLockedValue { $0.messages } }

    // MARK: handling

    func handle(_ request: MockRequest) -> MockResponse {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        if path == Self.tokenPath {
            return handleToken(request)
        }
        if path.hasPrefix("/v1/projects/") && path.hasSuffix("/messages:send") {
            return handleSend(request, path: path)
        }
        return Self.fcmError(404, status: "NOT_FOUND", message: "The requested URL \(path) was not found on this server.", errorCode: nil)
    }

    static func json(_ status: Int, _ object: Any, headers: [(String, String)] = []) -> MockResponse {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return MockResponse(status: status, headers: [("content-type", "application/json; charset=UTF-8")] + headers, body: Array(data))
    }

    /// FCM's error body: `{"error":{"code","message","status","details":[{"@type":"...FcmError","errorCode"}]}}`.
    static func fcmError(_ code: Int, status: String, message: String, errorCode: String?, retryAfter: Int? = nil) -> MockResponse {
        var error: [String: Any] = ["code": code, "message": message, "status": status]
        if let errorCode {
            error["details"] = [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": errorCode]]
        }
        return json(code, ["error": error], headers: retryAfter.map { [("retry-after", String($0))] } ?? [])
    }

    static func oauthError(_ error: String, _ description: String) -> MockResponse {
        json(400, ["error": error, "error_description": description])
    }

    static func base64URLDecode(_ s: Substring) -> Data? {
        var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        return Data(base64Encoded: t)
    }

    func handleToken(_ request: MockRequest) -> MockResponse {
        let now = Int64(Date().timeIntervalSince1970)
        func refuse(_ error: String, _ description: String) -> MockResponse {
            state.withLockedValue {
                $0.tokenRequests += 1
                $0.tokenRejections.append(description)
            }
            return Self.oauthError(error, description)
        }
        guard request.method == "POST" else {
            return refuse("invalid_request", "token endpoint requires POST")
        }
        let contentType = request.header("content-type") ?? ""
        guard contentType.lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return refuse("invalid_request", "content-type must be application/x-www-form-urlencoded, got \(contentType)")
        }
        let form = MockForm.parse(request.body)
        guard form["grant_type"] == Self.grantType else {
            return refuse("unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        guard let assertion = form["assertion"], !assertion.isEmpty else {
            return refuse("invalid_request", "Missing required parameter: assertion")
        }
        state.withLockedValue { $0.assertions.append(assertion) }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerData = Self.base64URLDecode(parts[0]),
            let claimsData = Self.base64URLDecode(parts[1]),
            let signature = Self.base64URLDecode(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any]
        else {
            return refuse("invalid_grant", "Invalid JWT: malformed")
        }
        guard header["alg"] as? String == "RS256" else {
            return refuse("invalid_grant", "Invalid JWT: alg must be RS256")
        }
        if let typ = header["typ"] as? String, typ != "JWT" {
            return refuse("invalid_grant", "Invalid JWT: typ must be JWT")
        }
        if let kid = options.privateKeyID, header["kid"] as? String != kid {
            return refuse("invalid_grant", "Invalid JWT: kid \(header["kid"] ?? "missing") is not the service account's private_key_id")
        }
        let signingInput = Data((parts[0] + "." + parts[1]).utf8)
        guard
            options.publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature), for: signingInput, padding: .insecurePKCS1v1_5)
        else {
            return refuse("invalid_grant", "Invalid JWT Signature.")
        }
        if let iss = options.clientEmail, claims["iss"] as? String != iss {
            return refuse("invalid_grant", "Invalid JWT: iss must be \(iss)")
        }
        guard let scope = claims["scope"] as? String, scope.split(separator: " ").contains(Substring(Self.scope)) else {
            return refuse("invalid_scope", "Invalid JWT: scope must include \(Self.scope)")
        }
        guard claims["aud"] as? String == tokenURL else {
            return refuse("invalid_grant", "Invalid JWT: aud must be \(tokenURL), got \(claims["aud"] ?? "nothing")")
        }
        guard let iatN = claims["iat"] as? NSNumber, let expN = claims["exp"] as? NSNumber else {
            return refuse("invalid_grant", "Invalid JWT: iat and exp must be numbers")
        }
        let iat = iatN.int64Value
        let exp = expN.int64Value
        guard exp > iat, exp - iat <= 3600 else {
            return refuse("invalid_grant", "Invalid JWT: exp - iat must be at most 3600 seconds (got \(exp - iat))")
        }
        guard iat <= now + 300, exp > now - 300 else {
            return refuse(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values.")
        }
        var random = SystemRandomNumberGenerator()
        let accessToken = "ya29.mock-" + (0..<24).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined()
        let lifetime = options.accessTokenLifetime
        state.withLockedValue {
            $0.tokenRequests += 1
            $0.issued.insert(accessToken)
        }
        return Self.json(200, ["access_token": accessToken, "expires_in": lifetime, "token_type": "Bearer"])
    }

    func handleSend(_ request: MockRequest, path: String) -> MockResponse {
        func refuse(_ response: MockResponse, _ why: String) -> MockResponse {
            state.withLockedValue {
                $0.sendRequests += 1
                $0.sendRejections.append(why)
            }
            return response
        }
        func invalid(_ message: String) -> MockResponse {
            refuse(Self.fcmError(400, status: "INVALID_ARGUMENT", message: message, errorCode: "INVALID_ARGUMENT"), message)
        }
        guard request.method == "POST" else {
            return refuse(Self.fcmError(405, status: "INVALID_ARGUMENT", message: "method must be POST", errorCode: nil), "method \(request.method)")
        }
        // Bearer check first, as Google's front end does.
        let auth = request.header("authorization") ?? ""
        let bearer = auth.hasPrefix("Bearer ") ? String(auth.dropFirst(7)) : ""
        let known = state.withLockedValue { $0.issued.contains(bearer) }
        guard !bearer.isEmpty, known else {
            return refuse(
                Self.fcmError(
                    401, status: "UNAUTHENTICATED",
                    message:
                        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                    errorCode: nil), bearer.isEmpty ? "missing bearer" : "unknown bearer")
        }
        let project = path.dropFirst("/v1/projects/".count).dropLast("/messages:send".count)
        guard project == options.projectID else {
            return refuse(
                Self.fcmError(
                    403, status: "PERMISSION_DENIED",
                    message:
                        "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/\(project)' (or it may not exist).",
                    errorCode: nil), "project \(project)")
        }
        guard (request.header("content-type") ?? "").lowercased().hasPrefix("application/json") else {
            return invalid("content-type must be application/json")
        }
        if request.body.count > 4096 {
            return invalid("Message is too big (\(request.body.count) bytes)")
        }
        guard let top = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            return invalid("Invalid JSON payload received.")
        }
        for key in top.keys where key != "message" && key != "validate_only" && key != "validateOnly" {
            return invalid("Invalid JSON payload received. Unknown name \"\(key)\": Cannot find field.")
        }
        let validateOnly = (top["validate_only"] as? Bool) ?? (top["validateOnly"] as? Bool) ?? false
        guard let message = top["message"] as? [String: Any] else {
            return invalid("Request contains an invalid argument: message is required.")
        }
        let targets = ["token", "topic", "condition", "fid"].filter { message[$0] != nil }
        guard targets.count == 1, let targetKind = targets.first, let target = message[targetKind] as? String, !target.isEmpty else {
            return invalid(
                "Invalid JSON payload: exactly one of message.token, message.topic, message.condition, message.fid must be set (got \(targets))")
        }
        let allowed: Set<String> = [
            "token", "topic", "condition", "fid", "name", "data", "notification", "android", "webpush", "apns", "fcm_options", "fcmOptions",
        ]
        for key in message.keys where !allowed.contains(key) {
            return invalid("Invalid JSON payload received. Unknown name \"\(key)\" at 'message': Cannot find field.")
        }
        var data: [String: String]? = nil
        if let raw = message["data"] {
            guard let dict = raw as? [String: Any] else { return invalid("Invalid value at 'message.data': expected an object") }
            var out: [String: String] = [:]
            for (k, v) in dict {
                guard let s = v as? String else {
                    return invalid("Invalid value at 'message.data[\(k)].value' (TYPE_STRING)")
                }
                out[k] = s
            }
            data = out
        }
        var notification: [String: String]? = nil
        if let raw = message["notification"] {
            guard let dict = raw as? [String: Any] else { return invalid("Invalid value at 'message.notification'") }
            var out: [String: String] = [:]
            for (k, v) in dict {
                guard ["title", "body", "image"].contains(k) else {
                    return invalid("Invalid JSON payload received. Unknown name \"\(k)\" at 'message.notification': Cannot find field.")
                }
                guard let s = v as? String else { return invalid("Invalid value at 'message.notification.\(k)' (TYPE_STRING)") }
                out[k] = s
            }
            notification = out
        }
        if let android = message["android"] {
            guard let a = android as? [String: Any] else { return invalid("Invalid value at 'message.android'") }
            // AndroidConfig's fields (FCM v1 reference); anything else is refused as FCM refuses it.
            let known: Set<String> = [
                "collapse_key", "collapseKey", "priority", "ttl", "restricted_package_name", "restrictedPackageName", "data", "notification",
                "fcm_options", "fcmOptions", "direct_boot_ok", "directBootOk", "bandwidth_constrained_ok", "bandwidthConstrainedOk",
                "restricted_satellite_ok", "restrictedSatelliteOk",
            ]
            for key in a.keys where !known.contains(key) {
                return invalid("Invalid JSON payload received. Unknown name \"\(key)\" at 'message.android': Cannot find field.")
            }
            for key in ["direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"] {
                if let v = a[key], !(v is Bool) {
                    return invalid("Invalid value at 'message.android.\(key)' (TYPE_BOOL), \(v)")
                }
            }
            if let p = a["priority"] {
                guard let ps = p as? String, ["HIGH", "NORMAL", "high", "normal"].contains(ps) else {
                    return invalid(
                        "Invalid value at 'message.android.priority' (type.googleapis.com/google.firebase.fcm.v1.AndroidMessagePriority), \"\(p)\"")
                }
            }
            if let ttl = a["ttl"] {
                guard let ts = ttl as? String, ts.hasSuffix("s"), Double(ts.dropLast()) != nil else {
                    return invalid("Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), \(ttl)")
                }
            }
            if let problem = Self.checkFCMOptions(a["fcm_options"] ?? a["fcmOptions"], at: "message.android.fcm_options") {
                return invalid(problem)
            }
            if let raw = a["notification"] {
                guard let an = raw as? [String: Any] else { return invalid("Invalid value at 'message.android.notification'") }
                if let problem = Self.checkAndroidNotification(an) { return invalid(problem) }
            }
        }
        if let raw = message["apns"] {
            guard let apns = raw as? [String: Any] else { return invalid("Invalid value at 'message.apns'") }
            // ApnsConfig's fields (FCM v1 reference).
            for key in apns.keys where !Self.isField(key, of: ["headers", "payload", "fcm_options", "live_activity_token"]) {
                return invalid("Invalid JSON payload received. Unknown name \"\(key)\" at 'message.apns': Cannot find field.")
            }
            if let token = apns["live_activity_token"] ?? apns["liveActivityToken"], !(token is String) {
                return invalid("Invalid value at 'message.apns.live_activity_token' (TYPE_STRING), \(token)")
            }
            if let problem = Self.checkFCMOptions(apns["fcm_options"] ?? apns["fcmOptions"], at: "message.apns.fcm_options") {
                return invalid(problem)
            }
        }
        if let problem = Self.checkFCMOptions(message["fcm_options"] ?? message["fcmOptions"], at: "message.fcm_options") {
            return invalid(problem)
        }

        let hooked = options.hook?(target, request.body)
        let record = options.recordRequests
        let messageJSON =
            record ? String(decoding: (try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys])) ?? Data(), as: UTF8.self) : ""
        let reply: Reply = state.withLockedValue { s in
            s.sendRequests += 1
            let r: Reply
            if let hooked {
                r = hooked
            } else if var queue = s.scripts[target], !queue.isEmpty {
                r = queue.removeFirst()
                s.scripts[target] = queue
            } else {
                r = s.defaultReply
            }
            if record {
                s.messages.append(
                    RecordedMessage(
                        targetKind: targetKind, target: target, validateOnly: validateOnly, messageJSON: messageJSON,
                        body: request.body, data: data, notification: notification, bearer: bearer, reply: r))
            }
            return r
        }
        return response(for: reply, validateOnly: validateOnly)
    }

    /// Whether a member names one of `fields` (snake_case) by its proto name or its lowerCamelCase JSON name.
    static func isField(_ key: String, of fields: [String]) -> Bool {
        fields.contains(key) || fields.contains { camelCase($0) == key }
    }

    static func camelCase(_ name: String) -> String {
        let parts = name.split(separator: "_")
        guard let first = parts.first else { return name }
        return String(first) + parts.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }

    /// AndroidNotification's fields (FCM v1 reference, projects.messages).
    static let androidNotificationFields = [
        "title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key", "body_loc_args", "title_loc_key",
        "title_loc_args", "channel_id", "ticker", "sticky", "event_time", "local_only", "notification_priority", "default_sound",
        "default_vibrate_timings", "default_light_settings", "vibrate_timings", "visibility", "notification_count", "light_settings",
        "image", "bypass_proxy_notification", "proxy",
    ]

    /// AndroidNotification.Proxy's values.
    public static let proxyValues: Set<String> = ["PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"]

    /// FCM's refusal of an `android.notification`, nil when it passes.
    static func checkAndroidNotification(_ an: [String: Any]) -> String? {
        for key in an.keys where !isField(key, of: androidNotificationFields) {
            return "Invalid JSON payload received. Unknown name \"\(key)\" at 'message.android.notification': Cannot find field."
        }
        if let p = an["proxy"] {
            guard let ps = p as? String, proxyValues.contains(ps) else {
                return
                    "Invalid value at 'message.android.notification.proxy' (type.googleapis.com/google.firebase.fcm.v1.AndroidNotification.Proxy), \"\(p)\""
            }
        }
        if let b = an["bypass_proxy_notification"] ?? an["bypassProxyNotification"], !(b is Bool) {
            return "Invalid value at 'message.android.notification.bypass_proxy_notification' (TYPE_BOOL), \(b)"
        }
        return nil
    }

    /// FCM's refusal of an `fcm_options` object (`analytics_label`: 1-50 of `[a-zA-Z0-9-_.~%]`), nil when it passes.
    static func checkFCMOptions(_ raw: Any?, at path: String) -> String? {
        guard let raw else { return nil }
        guard let options = raw as? [String: Any] else { return "Invalid value at '\(path)'" }
        for key in options.keys where !isField(key, of: ["analytics_label", "image", "link"]) {
            return "Invalid JSON payload received. Unknown name \"\(key)\" at '\(path)': Cannot find field."
        }
        if let label = options["analytics_label"] ?? options["analyticsLabel"] {
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~%")
            guard let l = label as? String, (1...50).contains(l.count), l.allSatisfy({ allowed.contains($0) }) else {
                return "Invalid value at '\(path).analytics_label': analytics label must match ^[a-zA-Z0-9-_.~%]{1,50}$"
            }
        }
        return nil
    }

    func response(for reply: Reply, validateOnly: Bool) -> MockResponse {
        switch reply {
        case .ok:
            let id = validateOnly ? "fake_message_id" : "0:\(UInt64.random(in: 1...UInt64.max))%\(UInt32.random(in: 1...UInt32.max))"
            return Self.json(200, ["name": "projects/\(options.projectID)/messages/\(id)"])
        case .unregistered:
            return Self.fcmError(404, status: "NOT_FOUND", message: "Requested entity was not found.", errorCode: "UNREGISTERED")
        case .senderIDMismatch:
            return Self.fcmError(403, status: "PERMISSION_DENIED", message: "SenderId mismatch", errorCode: "SENDER_ID_MISMATCH")
        case .invalidArgument(let message):
            return Self.fcmError(400, status: "INVALID_ARGUMENT", message: message, errorCode: "INVALID_ARGUMENT")
        case .thirdPartyAuthError:
            return Self.fcmError(
                401, status: "UNAUTHENTICATED", message: "Auth error from APNS or Web Push Service", errorCode: "THIRD_PARTY_AUTH_ERROR")
        case .quotaExceeded(let retryAfter):
            return Self.fcmError(
                429, status: "RESOURCE_EXHAUSTED", message: "Quota exceeded for quota metric 'Send requests'.", errorCode: "QUOTA_EXCEEDED",
                retryAfter: retryAfter)
        case .unavailable(let retryAfter):
            return Self.fcmError(
                503, status: "UNAVAILABLE", message: "The service is currently unavailable.", errorCode: "UNAVAILABLE", retryAfter: retryAfter)
        case .internalError:
            return Self.fcmError(500, status: "INTERNAL", message: "Internal error encountered.", errorCode: "INTERNAL")
        case .unauthenticated:
            return Self.fcmError(401, status: "UNAUTHENTICATED", message: "Request had invalid authentication credentials.", errorCode: nil)
        case .custom(let status, let body, let retryAfter):
            return MockResponse(
                status: status,
                headers: [("content-type", "application/json; charset=UTF-8")] + (retryAfter.map { [("retry-after", String($0))] } ?? []),
                body: Array(body.utf8))
        }
    }
}
