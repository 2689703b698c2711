import Foundation
import ProviderKit
import PushgateCore

/// APNs broadcast channels (iOS 18 Live Activities) in the gateway's API, per app
/// (docs/apns-broadcast.md):
///
/// - `POST /api/apns/channels` `{"message_storage_policy":0|1, "app_id"?, "production"?, "topic"?}`
///   -> 201 `{"channel_id":"…","message_storage_policy":0,"production":false}`
/// - `GET /api/apns/channels[?app_id=&production=&topic=]` -> `{"channels":["…"]}`
/// - `GET /api/apns/channels/{channel_id}` -> `{"channel_id":"…","message_storage_policy":1,"push_type":"LiveActivity"}`
/// - `DELETE /api/apns/channels/{channel_id}` -> 204
///
/// Sent to Apple's channel-management host (`ios.channels_endpoint`) with the app's APNs
/// credentials. An app's key manages its own app's channels; an admin key (or no keys) any app's.
/// A channel id holds base64's `/` and `+`: percent-encode them in the path (`%2F`, `%2B`).
enum APNsChannelRoutes {
    static let path = "/api/apns/channels"

    static var routes: [ProviderRoute] {
        [
            ProviderRoute(method: "POST", path: path) { await create($0) },
            ProviderRoute(method: "GET", path: path, maxBodyBytes: 0) { request in
                await call(request, options(request.query)) { apns, bundleID, production, requestID in
                    let ids = try await apns.channels.list(bundleID: bundleID, production: production, requestID: requestID)
                    var w = JSONWriter(reservingCapacity: 32 + ids.count * 32)
                    w.raw(#"{"channels":"#)
                    w.strings(ids)
                    w.raw("}")
                    return ProviderRouteResponse(status: 200, body: w.bytes)
                }
            },
            ProviderRoute(method: "GET", path: path + "/:channel_id", maxBodyBytes: 0) { request in
                await call(request, options(request.query)) { apns, bundleID, production, requestID in
                    let id = try channelID(request.parameters["channel_id"])
                    let channel = try await apns.channels.read(bundleID: bundleID, channel: id, production: production, requestID: requestID)
                    var w = JSONWriter()
                    var first = true
                    w.raw("{")
                    w.key("channel_id", first: &first)
                    w.string(channel.id)
                    w.key("message_storage_policy", first: &first)
                    w.int(channel.storagePolicy)
                    w.key("push_type", first: &first)
                    w.string(channel.pushType)
                    w.raw("}")
                    return ProviderRouteResponse(status: 200, body: w.bytes)
                }
            },
            ProviderRoute(method: "DELETE", path: path + "/:channel_id", maxBodyBytes: 0) { request in
                await call(request, options(request.query)) { apns, bundleID, production, requestID in
                    let id = try channelID(request.parameters["channel_id"])
                    try await apns.channels.delete(bundleID: bundleID, channel: id, production: production, requestID: requestID)
                    return ProviderRouteResponse(status: 204)
                }
            },
        ]
    }

    struct Options {
        var app: String?
        var production: Bool?
        var topic: String?
        var problem: RequestError?
    }

    /// GET / DELETE: `app_id`, `production`, `topic` from the query.
    static func options(_ query: [String: String]) -> Options {
        var o = Options()
        if let a = query["app_id"] {
            guard AppID.isValid(a) else {
                o.problem = RequestError(message: "Invalid app_id.", detail: "app_id: must be 1-64 characters of A-Z a-z 0-9 . _ -")
                return o
            }
            o.app = a
        }
        if let p = query["production"] {
            switch p.lowercased() {
            case "true", "1": o.production = true
            case "false", "0": o.production = false
            default:
                o.problem = RequestError(message: "Invalid production.", detail: "production: true or false")
                return o
            }
        }
        o.topic = query["topic"]
        return o
    }

    /// The path's channel id, percent-decoded and checked.
    static func channelID(_ raw: String?) throws(RequestError) -> String {
        let id = (raw ?? "").removingPercentEncoding ?? ""
        guard APNsBroadcast.isValidChannelID(id) else {
            throw RequestError(
                message: "Invalid channel id.",
                detail:
                    "channel_id: not an APNs channel id (1-\(APNsBroadcast.maxChannelIDBytes) bytes of base64; percent-encode / and + in the path)")
        }
        return id
    }

    static let createFields: Set<String> = ["message_storage_policy", "app_id", "production", "topic"]

    static func create(_ request: ProviderRouteRequest) async -> ProviderRouteResponse {
        let object: JSONObject
        do {
            let value = try JSONParser.parse(request.body, limits: JSONLimits(maxDepth: 4, maxObjectKeys: 16, maxValues: 64, maxStringBytes: 1024))
            guard case .object(let o) = value else {
                return ProviderRouteResponse(RequestError(message: "Invalid JSON.", detail: "body: expected an object"))
            }
            object = o
        } catch {
            return ProviderRouteResponse(RequestError(message: "Invalid JSON.", detail: "body: \(error)"))
        }
        for key in object.keys where !createFields.contains(key) {
            return ProviderRouteResponse(
                RequestError(
                    message: "Unknown field.",
                    detail: "\(key.logSafe(max: 64)): not a channel field (message_storage_policy, app_id, production, topic)"))
        }
        guard case .int(let n)? = object["message_storage_policy"], let policy = APNsChannels.StoragePolicy(rawValue: Int(clamping: n)) else {
            return ProviderRouteResponse(
                RequestError(
                    message: "Invalid message_storage_policy.",
                    detail: "message_storage_policy: required, 0 (no messages stored) or 1 (most recent message stored)"))
        }
        var o = Options()
        switch object["app_id"] {
        case nil, .null?: break
        case .string(let s)? where AppID.isValid(s): o.app = s
        default:
            return ProviderRouteResponse(RequestError(message: "Invalid app_id.", detail: "app_id: must be 1-64 characters of A-Z a-z 0-9 . _ -"))
        }
        switch object["production"] {
        case nil, .null?: break
        case .bool(let b)?: o.production = b
        default: return ProviderRouteResponse(RequestError(message: "Invalid production.", detail: "production: expected a boolean"))
        }
        switch object["topic"] {
        case nil, .null?: break
        case .string(let s)?: o.topic = s
        default: return ProviderRouteResponse(RequestError(message: "Invalid topic.", detail: "topic: expected a string (the app's bundle id)"))
        }
        return await call(request, o) { apns, bundleID, production, requestID in
            let id = try await apns.channels.create(bundleID: bundleID, policy: policy, production: production, requestID: requestID)
            var w = JSONWriter()
            var first = true
            w.raw("{")
            w.key("channel_id", first: &first)
            w.string(id)
            w.key("message_storage_policy", first: &first)
            w.int(policy.rawValue)
            w.key("production", first: &first)
            w.raw(production ? "true" : "false")
            w.raw("}")
            return ProviderRouteResponse(status: 201, body: w.bytes)
        }
    }

    /// Resolves the app's APNs provider, the bundle id and the environment, then runs `body`;
    /// APNs' refusals become 4xx/5xx JSON naming APNs' reason.
    static func call(
        _ request: ProviderRouteRequest, _ o: Options,
        _ body: (APNsProvider, String, Bool, String) async throws -> ProviderRouteResponse
    ) async -> ProviderRouteResponse {
        if let problem = o.problem { return ProviderRouteResponse(problem) }
        let apns: APNsProvider
        switch request.provider(.ios, o.app) {
        case .failure(let e): return ProviderRouteResponse(e)
        case .success(let p):
            guard let a = p as? APNsProvider else {
                return ProviderRouteResponse(RequestError(message: "APNs is not enabled.", detail: "ios.enabled: this app does not send to APNs"))
            }
            apns = a
        }
        let own = apns.configuration.topic ?? ""
        let topic = o.topic.flatMap { $0.isEmpty ? nil : $0 } ?? own
        // An app's key manages its own app's channels: those of its ios.topic's bundle id only (the
        // APNs key may serve every app of the team; which bundle ids a tenant reaches is the gateway's call).
        if request.appScoped, APNsPushType.liveactivity.bundleID(of: topic) != APNsPushType.liveactivity.bundleID(of: own) || own.isEmpty {
            return ProviderRouteResponse(
                RequestError(
                    status: 403, message: "Forbidden.",
                    detail: own.isEmpty
                        ? "topic: this key's app has no ios.topic; an admin key manages channels of any topic"
                        : "topic: this key's app manages the channels of its own bundle id only (ios.topic); an admin key manages any"))
        }
        guard !topic.isEmpty, topic.utf8.count <= 255, topic.utf8.allSatisfy(APNsChannels.isBundleIDByte) else {
            return ProviderRouteResponse(
                RequestError(
                    message: "Invalid topic.",
                    detail: topic.isEmpty
                        ? "topic: missing (set ios.topic or give the app's bundle id as topic)" : "topic: not a bundle id (letters, digits, . and -)")
            )
        }
        let production = o.production ?? apns.configuration.production
        do {
            // A topic with the Live Activity suffix (`.push-type.liveactivity`) names the same bundle id.
            return try await body(apns, APNsPushType.liveactivity.bundleID(of: topic), production, UUID().uuidString.lowercased())
        } catch let e as RequestError {
            return ProviderRouteResponse(e)
        } catch let failure as APNsChannels.Failure {
            return answer(failure)
        } catch {
            return ProviderRouteResponse(RequestError(status: 502, message: "APNs channel request failed.", detail: "\(error)"))
        }
    }

    /// APNs' answer as ours: its 400 / 404 / 413 as they are (the caller's channel id or body), 429
    /// with its Retry-After, a refusal of the gateway's credentials or no answer as 502, APNs' 5xx as 503.
    static func answer(_ f: APNsChannels.Failure) -> ProviderRouteResponse {
        let detail = "APNs answered \(f.description)"
        switch f.status {
        case 400?, 404?, 413?:
            return ProviderRouteResponse(RequestError(status: f.status ?? 400, message: "APNs refused the channel request.", detail: detail))
        case 429?:
            let wait = RetryAfter.parse(f.retryAfter).map { String(Int($0.rounded(.up))) } ?? "1"
            return ProviderRouteResponse(
                RequestError(status: 429, message: "APNs rate-limits channel requests, try again later.", detail: detail),
                headers: [("Retry-After", wait)])
        case let s? where s >= 500:
            return ProviderRouteResponse(
                RequestError(status: 503, message: "APNs is unavailable, try again later.", detail: detail), headers: [("Retry-After", "5")])
        default:
            return ProviderRouteResponse(RequestError(status: 502, message: "APNs channel request failed.", detail: detail))
        }
    }
}
