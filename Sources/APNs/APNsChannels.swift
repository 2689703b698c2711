import Foundation
import HTTP2Pool
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore

/// APNs broadcast channel management (iOS 18): create, read, list and delete the channels of a
/// bundle id on Apple's channel-management host (`ios.channels_endpoint`), with the provider's
/// credentials. Low volume: one HTTP/2 connection per environment, opened on first use and closed
/// after a minute idle. Facts and sources: docs/apns-broadcast.md.
public final class APNsChannels: Sendable {
    /// Apple's message storage policies.
    public enum StoragePolicy: Int, Sendable, CaseIterable {
        /// 0: No Messages Stored (a broadcast reaches the devices online now; `apns-expiration` must be 0).
        case noMessagesStored = 0
        /// 1: Most Recent Message Stored (the latest broadcast waits for devices offline now).
        case mostRecentMessageStored = 1
    }

    /// A channel as APNs describes it.
    public struct Channel: Sendable, Equatable {
        public var id: String
        public var storagePolicy: Int
        public var pushType: String
    }

    /// What APNs (or the way to it) answered instead of success.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// APNs' HTTP status; nil when no answer came (connection, timeout, credentials).
        public var status: Int?
        /// APNs' `reason` (e.g. `ChannelNotRegistered`), or what went wrong on the way.
        public var reason: String
        public var retryAfter: String?
        public var description: String { status.map { "\($0) \(reason)" } ?? reason }
    }

    let configuration: APNsConfiguration
    let tokens: APNsTokenManager?
    /// The token of each of `configuration.signingKeys` (empty: `tokens` signs everything).
    let keyTokens: [APNsTokenManager]
    let poolConfiguration: HTTP2PoolConfiguration
    let eventLoopGroup: any EventLoopGroup
    let logger: Logger
    /// Connections per environment and signing key (APNs binds a connection to its tokens' key).
    private let pools = NIOLockedValueBox<(byKey: [String: HTTP2ConnectionPool], closed: Bool)>(([:], false))

    /// Largest list answer read (10,000 channels of ~30 bytes fit well).
    static let maxResponseBytes = 2 << 20

    init(
        configuration: APNsConfiguration, tokens: APNsTokenManager?, keyTokens: [APNsTokenManager] = [],
        poolConfiguration: HTTP2PoolConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger
    ) {
        self.configuration = configuration
        self.tokens = tokens
        self.keyTokens = keyTokens
        var pc = poolConfiguration
        pc.connectionsPerTarget = 1
        pc.idleTimeout = .seconds(60)
        pc.maxResponseBodyBytes = Self.maxResponseBytes
        self.poolConfiguration = pc
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
    }

    func pool(production: Bool, keyID: String = "") throws(Failure) -> HTTP2ConnectionPool {
        let url = configuration.channelsBaseURL(production: production)
        guard let target = HTTP2Target(url: url) else { throw Failure(status: nil, reason: "ios.channels_endpoint is not an http(s) URL") }
        let name = "\(production ? "production" : "sandbox") \(keyID)"
        let made: HTTP2ConnectionPool? = pools.withLockedValue { p in
            if p.closed { return nil }
            if let existing = p.byKey[name] { return existing }
            var log = logger
            log[metadataKey: "apns-env"] = "\(production ? "production" : "sandbox")-channels"
            if !keyID.isEmpty { log[metadataKey: "apns-key-id"] = "\(keyID)" }
            var pc = poolConfiguration
            pc.label.provider = "apns"
            pc.label.environment = production ? "production channels" : "sandbox channels"
            pc.label.keyID = keyID
            let made = HTTP2ConnectionPool(target: target, configuration: pc, eventLoopGroup: eventLoopGroup, logger: log)
            p.byKey[name] = made
            return made
        }
        guard let made else { throw Failure(status: nil, reason: "the gateway is shutting down") }
        return made
    }

    /// `POST /1/apps/<bundle id>/channels` `{"message-storage-policy":N,"push-type":"LiveActivity"}`:
    /// the new channel's id (APNs' `apns-channel-id` response header).
    public func create(bundleID: String, policy: StoragePolicy, production: Bool, requestID: String) async throws(Failure) -> String {
        let body = ByteBuffer(string: #"{"message-storage-policy":\#(policy.rawValue),"push-type":"LiveActivity"}"#)
        let response = try await send(
            "POST", bundleID: bundleID, path: "/channels", channel: nil, body: body, production: production, requestID: requestID)
        guard response.status == 201 || response.status == 200 else { throw Self.failure(response) }
        guard let id = response.header("apns-channel-id"), APNsBroadcast.isValidChannelID(id) else {
            throw Failure(status: response.status, reason: "APNs answered without a valid apns-channel-id header")
        }
        return id
    }

    /// `GET /1/apps/<bundle id>/channels` with `apns-channel-id`: the channel's settings.
    public func read(bundleID: String, channel: String, production: Bool, requestID: String) async throws(Failure) -> Channel {
        let response = try await send(
            "GET", bundleID: bundleID, path: "/channels", channel: channel, body: nil, production: production, requestID: requestID)
        guard response.status == 200 else { throw Self.failure(response) }
        // An answer is as untrusted as a request: the policy must be 0 or 1 (`Int(exactly:)` never
        // traps on 1e300), the push type a short string.
        guard let object = Self.jsonObject(response.body),
            let number = object["message-storage-policy"] as? NSNumber, let policy = Int(exactly: number.doubleValue),
            StoragePolicy(rawValue: policy) != nil
        else { throw Failure(status: response.status, reason: "APNs answered a channel without a valid message-storage-policy") }
        let pushType = (object["push-type"] as? String).map { $0.logSafe(max: 64) } ?? "LiveActivity"
        return Channel(id: channel, storagePolicy: policy, pushType: pushType)
    }

    /// `GET /1/apps/<bundle id>/all-channels`: every channel id of the bundle id in that environment.
    public func list(bundleID: String, production: Bool, requestID: String) async throws(Failure) -> [String] {
        let response = try await send(
            "GET", bundleID: bundleID, path: "/all-channels", channel: nil, body: nil, production: production, requestID: requestID)
        guard response.status == 200 else { throw Self.failure(response) }
        guard let object = Self.jsonObject(response.body), let list = object["channels"] as? [Any] else {
            throw Failure(status: response.status, reason: "APNs answered a channel list without channels")
        }
        // Only ids that can be ids (an answer is as untrusted as a request).
        return list.compactMap { $0 as? String }.filter(APNsBroadcast.isValidChannelID)
    }

    /// `DELETE /1/apps/<bundle id>/channels` with `apns-channel-id` (204).
    public func delete(bundleID: String, channel: String, production: Bool, requestID: String) async throws(Failure) {
        let response = try await send(
            "DELETE", bundleID: bundleID, path: "/channels", channel: channel, body: nil, production: production, requestID: requestID)
        guard response.status == 204 || response.status == 200 else { throw Self.failure(response) }
    }

    func send(
        _ method: String, bundleID: String, path: String, channel: String?, body: ByteBuffer?, production: Bool, requestID: String
    ) async throws(Failure) -> HTTP2Response {
        guard !bundleID.isEmpty, bundleID.utf8.allSatisfy(Self.isBundleIDByte) else {
            throw Failure(status: nil, reason: "the topic is not a bundle id (letters, digits, '.', '-')")
        }
        var headers: [(String, String)] = []
        var auth: APNsTokenManager.Token?
        // The key that signs the app's pushes in this environment signs its channel management too.
        var tokens = self.tokens
        if keyTokens.count > 1 {
            guard let i = configuration.signingKeyIndex(topic: bundleID, bundleID: bundleID, production: production), i < keyTokens.count else {
                let environment = APNsEnvironment(production: production).rawValue
                throw Failure(status: nil, reason: "no APNs token key signs for \(bundleID) in the \(environment) environment (ios.keys)")
            }
            tokens = keyTokens[i]
        }
        if let tokens {
            do { auth = try tokens.token() } catch { throw Failure(status: nil, reason: "cannot sign the APNs provider token: \(error)") }
            if let auth { headers.append(("authorization", auth.authorization)) }
        }
        headers.append(("apns-request-id", requestID))
        if let channel { headers.append(("apns-channel-id", channel)) }
        if body != nil { headers.append(("content-type", "application/json")) }
        let request = HTTP2Request(method: method, path: "/1/apps/" + bundleID + path, headers: headers, body: body)
        let response: HTTP2Response
        do {
            response = try await pool(production: production, keyID: keyTokens.count > 1 ? tokens?.keyID ?? "" : "").execute(request)
        } catch let failure as Failure {
            throw failure
        } catch {
            logger.debug("APNs channel request failed", metadata: ["error": "\(error)"])
            throw Failure(status: nil, reason: "no answer from the APNs channel-management host: \(error)")
        }
        if response.status == 403 || response.status == 429, let tokens,
            let reason = APNsResponseClassifier.reason(in: Array(response.body.readableBytesView)), APNsProvider.keyReasons.contains(reason)
        {
            if reason == "ExpiredProviderToken", let auth { tokens.invalidate(auth.jwt) }
            // A refusal of the provider token names the key that signed it (`namesKeys`).
            let named = configuration.namesKeys ? " (key id \(tokens.keyID))" : ""
            throw Failure(status: response.status, reason: "\(reason.logSafe(max: 64))\(named)", retryAfter: response.header("retry-after"))
        }
        return response
    }

    static func failure(_ response: HTTP2Response) -> Failure {
        let reason =
            APNsResponseClassifier.reason(in: Array(response.body.readableBytesView)) ?? APNsResponseClassifier.defaultReason(response.status)
        return Failure(status: response.status, reason: reason.logSafe(max: 128), retryAfter: response.header("retry-after"))
    }

    static func jsonObject(_ body: ByteBuffer) -> [String: Any]? {
        guard body.readableBytes > 0 else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any]
    }

    /// A bundle id goes into the request path: letters, digits, `.` and `-` only.
    @inline(__always) public static func isBundleIDByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x2D
    }

    func shutdown() async {
        let all = pools.withLockedValue { state -> [HTTP2ConnectionPool] in
            state.closed = true
            defer { state.byKey = [:] }
            return Array(state.byKey.values)
        }
        for p in all { await p.shutdown() }
    }
}
