import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// vivo's answer to one send, classified (codes: docs/china-vendors.md, "vivo", with sources).
public enum VivoAnswer: Sendable, Equatable {
    case outcome(SendOutcome)
    /// 10070: the app's daily total is reached.
    case dailyQuota(reason: String)
}

public enum VivoResponseClassifier {
    public static let maxBodyBytes = 64 * 1024
    public static let invalidRegid: Int64 = 10302
    public static let dailyLimit: Int64 = 10070
    /// The authToken was refused (expired, unknown).
    public static let authCodes: Set<Int64> = [10000, 10050]
    /// Call limits and vivo's own failures: retried.
    public static let transientCodes: Set<Int64> = [10093, 10250, 10500, 10501]

    public struct Body: Sendable, Equatable {
        public var result: Int64?
        public var desc: String?
        public var taskID: String?
        public var authToken: String?
        /// `invalidUser.status` (1 unknown, 2 uninstalled or unsubscribed, 4 not a test device).
        public var invalidUserStatus: Int64?
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        if let n = json["result"] as? NSNumber, let i = Int64(exactly: n.doubleValue), i.magnitude < 1_000_000_000 { out.result = i }
        out.desc = (json["desc"] as? String).map { oneLine($0, max: 300) }
        out.taskID = (json["taskId"] as? String).map { oneLine($0, max: 128) } ?? (json["taskId"] as? NSNumber)?.stringValue
        if let t = json["authToken"] as? String, (1...VendorTokenCache.maxTokenBytes).contains(t.utf8.count) { out.authToken = t }
        if let u = json["invalidUser"] as? [String: Any], let s = u["status"] as? NSNumber, let i = Int64(exactly: s.doubleValue) {
            out.invalidUserStatus = i
        }
        return out
    }

    public static func classify(status: Int, body: [UInt8], retryAfter: String?) -> VivoAnswer {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        if let parsed, let code = parsed.result {
            let reason = parsed.desc.map { "\(code): \($0)" } ?? "\(code)"
            switch code {
            case 0 where (200..<300).contains(status): return .outcome(.delivered(providerID: parsed.taskID))
            // A regId vivo does not know or that was uninstalled: dead; "not a test device" (4) is not.
            case invalidRegid where parsed.invalidUserStatus != 4:
                return .outcome(.tokenDead(reason: reason + (parsed.invalidUserStatus.map { " (invalidUser status \($0))" } ?? ""), status: status))
            case dailyLimit: return .dailyQuota(reason: reason)
            case let c where authCodes.contains(c): return .outcome(.credentials(reason: reason, status: status))
            case let c where transientCodes.contains(c): return .outcome(.transient(reason: reason, status: status, retryAfter: delay))
            case 0: break
            default: return .outcome(.permanent(reason: reason, status: status))
            }
        }
        switch status {
        case 408, 429, 500...599: return .outcome(.transient(reason: "HTTP \(status)", status: status, retryAfter: delay))
        default: return .outcome(.permanent(reason: parsed == nil ? "unreadable vivo answer (HTTP \(status))" : "HTTP \(status)", status: status))
        }
    }

    /// 10252: the day's batch message bodies (`saveListPayload`) are spent; single sends still go.
    public static let listPayloadLimit: Int64 = 10252
    /// A `pushToList` answer is at most this long (1000 `invalidUsers`).
    public static let maxListBodyBytes = 1 << 20

    /// What a `pushToList` answer says of each regId of the request, in request order; nil when
    /// the whole request was refused for a bad regId (10302) without saying which (each is then
    /// sent alone). `{"result":0,"taskId","invalidUsers":[{"status","userid"}…]}`: a listed regId is
    /// dead (status 1, 2, 3) or refused (4, not a test device), as `/message/send` classifies it;
    /// the others are delivered. Any other answer applies to every regId.
    public static func classifyList(status: Int, body: [UInt8], regids: [String], retryAfter: String?) -> [VivoAnswer]? {
        let json: [String: Any]? =
            body.isEmpty || body.count > maxListBodyBytes ? nil : (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        let code = (json?["result"] as? NSNumber).flatMap { Int64(exactly: $0.doubleValue) }
        if code == invalidRegid { return nil }
        guard let json, code == 0, (200..<300).contains(status) else {
            let whole =
                body.count <= maxBodyBytes
                ? classify(status: status, body: body, retryAfter: retryAfter)
                : .outcome(.permanent(reason: "unreadable vivo answer (HTTP \(status), \(body.count) bytes)", status: status))
            return Array(repeating: whole, count: regids.count)
        }
        let taskID = (json["taskId"] as? String).map { oneLine($0, max: 128) } ?? (json["taskId"] as? NSNumber)?.stringValue
        var invalid: [String: Int64] = [:]
        let listed: [Any] = (json["invalidUsers"] as? [Any]) ?? (json["invalidUsers"] as? [String: Any]).map { [$0] } ?? []
        for u in listed.prefix(regids.count * 2 + 16) {
            guard let d = u as? [String: Any], let id = d["userid"] as? String ?? (d["userid"] as? NSNumber)?.stringValue else { continue }
            // A status that is no integer still marks the regId as refused, not dead.
            invalid[id] = (d["status"] as? NSNumber).flatMap { Int64(exactly: $0.doubleValue) } ?? 4
        }
        return regids.map { regid in
            guard let s = invalid[regid] else { return .outcome(.delivered(providerID: taskID)) }
            let reason = "\(invalidRegid): invalidUsers status \(s)"
            return s == 4
                ? .outcome(.permanent(reason: reason + " (not a test device)", status: status)) : .outcome(.tokenDead(reason: reason, status: status))
        }
    }
}

/// One delivery waiting to go in a `pushToList`: its regId and its delivery id (`requestId` when
/// it goes alone).
public struct VivoBatchItem: Sendable {
    public var regid: String
    public var requestID: String
}

/// vivo Push: an `authToken` from `POST /message/auth` (appId, appKey, millisecond timestamp, MD5
/// signature with the AppSecret) shared by every send, fetched again an hour after it was issued
/// and when vivo refuses it, never more than 10 auth calls a second. A send goes out at once as
/// one `/message/send` when no send of the same rendered message is in flight; sends of it
/// arriving meanwhile wait and go together when it ends (`BatchCoalescer`): the message saved once
/// (`saveListPayload`, a `taskId`), then `pushToList` to 2...1000 regIds, each delivery getting its
/// own regId's result.
public final class VivoProvider: PushProvider {
    public var platform: Platform { .vivo }
    public let configuration: VivoConfiguration
    public let quota: DailyQuotaHold
    /// 10252: the day's batch message bodies are spent; batches go as single sends until the reset.
    public let listQuota: DailyQuotaHold
    public let tokens: VendorTokenCache
    /// Sends grouped per rendered message (one `pushToList` carries one saved message).
    public let batches: BatchCoalescer<JSONObject, VivoBatchItem, SendOutcome>
    /// The requests themselves (one send, or one batch).
    let sender: VivoSender
    let client: HTTPClient
    let timeout: TimeAmount
    let logger: Logger

    /// `pushToList` takes 2...1000 regIds (docs/china-vendors.md).
    public static let maxBatch = 1000

    public init(
        configuration: VivoConfiguration, httpClient: HTTPClient, timeout: TimeAmount = .seconds(30), maxWaiting: Int = 256,
        maxBatch: Int = VivoProvider.maxBatch, now: @escaping @Sendable () -> Date = { Date() },
        quotaClock: (@Sendable () -> Date)? = nil,
        logger: Logger = Logger(label: "pushgate.vivo")
    ) {
        self.configuration = configuration
        self.client = httpClient
        self.timeout = timeout
        self.logger = logger
        self.quota = DailyQuotaHold(now: quotaClock ?? now)
        self.listQuota = DailyQuotaHold(now: quotaClock ?? now)
        let c = configuration
        let tokens = VendorTokenCache(
            vendor: "vivo", refreshMargin: VivoConfiguration.refreshMargin, minimumInterval: VivoConfiguration.minimumAuthInterval,
            logger: logger, now: now
        ) { issued in
            let (status, body) = try await VivoProvider.post(
                httpClient, c.endpoint + VivoConfiguration.authPath, Array(c.authBody(at: issued).utf8), token: nil, timeout)
            let parsed = VivoResponseClassifier.parse(body)
            guard status == 200, let parsed, parsed.result == 0, let token = parsed.authToken else {
                let code = parsed?.result
                // 10200 parameters, 10206 signature, 10094 appId: the credentials are wrong; a timestamp
                // (10207) or a call limit (10250, 10093) may pass.
                throw VendorTokenCache.Failure(
                    "vivo auth refused (HTTP \(status), result \(code.map(String.init) ?? "none"): \(parsed?.desc ?? ""))",
                    permanent: code == 10200 || code == 10206 || code == 10094)
            }
            return (token, VivoConfiguration.tokenLifetime)
        }
        self.tokens = tokens
        let sender = VivoSender(
            configuration: c, client: httpClient, timeout: timeout, quota: quota, listQuota: listQuota, tokens: tokens, logger: logger)
        self.sender = sender
        self.batches = BatchCoalescer(
            maxBatch: min(max(1, maxBatch), Self.maxBatch), maxWaiting: maxWaiting,
            unsent: { _, why in .transient(reason: "vivo send not made: \(why)", status: nil, retryAfter: nil) }
        ) { fields, items in await sender.send(fields, items) }
    }

    static func post(
        _ client: HTTPClient, _ url: String, _ body: [UInt8], token: String?, _ timeout: TimeAmount,
        maxBytes: Int = VivoResponseClassifier.maxBodyBytes
    ) async throws -> (Int, [UInt8]) {
        let answer = try await BoundedPOST.send(
            client, url: url, contentType: "application/json;charset=UTF-8", headers: token.map { [("authToken", $0)] } ?? [], body: body,
            maxBytes: maxBytes + 1, timeout: timeout)
        return (answer.status, answer.body)
    }

    /// The ingest rule that needs the app's configuration: a category from the request or the app.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: VivoOptions?
        do { options = try VivoRequestMember.options(of: n) } catch { return error.ingestProblem }
        return checkIngest(n, options: options)
    }

    public func checkIngest(_ n: PushNotification, options: VivoOptions?) -> IngestProblem? {
        VivoMessageMapper.check(n, options: options, defaultCategory: configuration.defaultCategory)?.ingestProblem
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        let options: VivoOptions?
        do { options = try VivoRequestMember.options(of: notification) } catch { throw PushFailure(error.description) }
        return try prepare(notification, options: options)
    }

    public func prepare(_ notification: PushNotification, options: VivoOptions?) throws(PushFailure) -> VivoPreparedMessage {
        try VivoMessageMapper.prepare(notification, options: options, configuration: configuration)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard case .token(let t) = target else { return PushFailure("vivo sends to regIds only") }
        return VivoMessageMapper.isRegistrationID(t) ? nil : PushFailure("InvalidRegistrationId (not a vivo regId)")
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? VivoPreparedMessage, case .token(let regid) = target, VivoMessageMapper.isRegistrationID(regid) else {
            return .permanent(reason: "unsupported vivo target", status: nil)
        }
        if let held = await quota.current() {
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "vivo", until: held.until, reason: held.reason), status: nil)
        }
        return await batches.submit(VivoBatchItem(regid: regid, requestID: context.messageID), key: p.fields)
    }

    public func shutdown() async { await batches.close() }
}

/// The requests of `VivoProvider`'s sends: one `/message/send`, or `saveListPayload` and
/// `pushToList` for several regIds of one message.
struct VivoSender: Sendable {
    let configuration: VivoConfiguration
    let client: HTTPClient
    let timeout: TimeAmount
    let quota: DailyQuotaHold
    let listQuota: DailyQuotaHold
    let tokens: VendorTokenCache
    let logger: Logger

    func send(_ fields: JSONObject, _ items: [VivoBatchItem]) async -> [SendOutcome] {
        if let held = await quota.current() {
            let o = SendOutcome.quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "vivo", until: held.until, reason: held.reason), status: nil)
            return Array(repeating: o, count: items.count)
        }
        // pushToList takes at least 2 regIds; once the day's batch bodies are spent, each goes alone.
        if items.count == 1 { return [await single(fields, items[0])] }
        if await listQuota.current() != nil { return await eachAlone(fields, items) }
        let token: String
        switch await tokens.bearer(name: "vivo", logger: logger) {
        case .success(let t): token = t
        case .failure(let f): return Array(repeating: f.outcome, count: items.count)
        }
        // 1. The message, saved once: its taskId.
        var saved = fields
        saved["requestId"] = .string(UUID().uuidString.lowercased())
        let status: Int
        let body: [UInt8]
        do {
            (status, body) = try await VivoProvider.post(
                client, configuration.endpoint + VivoConfiguration.saveListPayloadPath, Array(JSONValue.object(saved).jsonString.utf8),
                token: token, timeout)
        } catch {
            return Array(repeating: .transient(reason: "\(error)", status: nil, retryAfter: nil), count: items.count)
        }
        let parsed = VivoResponseClassifier.parse(body)
        if parsed?.result == VivoResponseClassifier.listPayloadLimit {
            let (until, started) = await listQuota.hold(reason: "\(VivoResponseClassifier.listPayloadLimit): \(parsed?.desc ?? "")")
            if started {
                logger.warning("vivo batch message limit reached: sending each regId alone until vivo's day resets", metadata: ["until": "\(until)"])
            }
            return await eachAlone(fields, items)
        }
        guard status == 200, let parsed, parsed.result == 0, let taskID = parsed.taskID, !taskID.isEmpty else {
            var answer = VivoResponseClassifier.classify(status: status, body: body, retryAfter: nil)
            if case .outcome(.delivered) = answer {
                answer = .outcome(.transient(reason: "vivo saveListPayload answer without a taskId", status: status, retryAfter: nil))
            }
            let o = await settle(answer, token: token, status: status)
            return Array(repeating: o, count: items.count)
        }
        // 2. The regIds, with the taskId.
        var list: [(String, JSONValue)] = [
            ("appId", .int(configuration.appID)), ("regIds", .array(items.map { .string($0.regid) })), ("taskId", .string(taskID)),
            ("requestId", .string(UUID().uuidString.lowercased())),
        ]
        if let mode = fields["pushMode"] { list.append(("pushMode", mode)) }
        let listStatus: Int
        let listBody: [UInt8]
        do {
            (listStatus, listBody) = try await VivoProvider.post(
                client, configuration.endpoint + VivoConfiguration.pushToListPath, Array(JSONValue.object(JSONObject(list)).jsonString.utf8),
                token: token, timeout, maxBytes: VivoResponseClassifier.maxListBodyBytes)
        } catch {
            return Array(repeating: .transient(reason: "\(error)", status: nil, retryAfter: nil), count: items.count)
        }
        guard
            let answers = VivoResponseClassifier.classifyList(
                status: listStatus, body: listBody, regids: items.map(\.regid), retryAfter: nil)
        else {
            logger.debug("vivo refused a pushToList for a bad regId: sending each alone")
            return await eachAlone(fields, items)
        }
        var out: [SendOutcome] = []
        out.reserveCapacity(answers.count)
        for a in answers { out.append(await settle(a, token: token, status: listStatus)) }
        return out
    }

    func eachAlone(_ fields: JSONObject, _ items: [VivoBatchItem]) async -> [SendOutcome] {
        await withTaskGroup(of: (Int, SendOutcome).self) { g in
            for (i, item) in items.enumerated() { g.addTask { (i, await self.single(fields, item)) } }
            var out = Array(repeating: SendOutcome.transient(reason: "not sent", status: nil, retryAfter: nil), count: items.count)
            for await (i, o) in g { out[i] = o }
            return out
        }
    }

    func single(_ fields: JSONObject, _ item: VivoBatchItem) async -> SendOutcome {
        let token: String
        switch await tokens.bearer(name: "vivo", logger: logger) {
        case .success(let t): token = t
        case .failure(let f): return f.outcome
        }
        let body = VivoPreparedMessage(fields: fields, payloadBytes: nil).body(regID: item.regid, requestID: item.requestID)
        let status: Int
        let answer: [UInt8]
        do {
            (status, answer) = try await VivoProvider.post(client, configuration.endpoint + VivoConfiguration.sendPath, body, token: token, timeout)
        } catch {
            return .transient(reason: "\(error)", status: nil, retryAfter: nil)
        }
        return await settle(VivoResponseClassifier.classify(status: status, body: answer, retryAfter: nil), token: token, status: status)
    }

    /// An answer's outcome: a refused token is dropped (the dispatcher retries once with a new
    /// one); a quota answer holds the app's sends until vivo's day resets.
    func settle(_ answer: VivoAnswer, token: String, status: Int) async -> SendOutcome {
        switch answer {
        case .outcome(let o):
            if case .credentials = o {
                await tokens.invalidate(token)
                logger.warning("vivo refused the authToken: fetching a new one")
            }
            return o
        case .dailyQuota(let reason):
            let (until, started) = await quota.hold(reason: reason)
            if started {
                logger.warning(
                    "vivo daily limit reached: sends to this app held until vivo's day resets",
                    metadata: ["until": "\(until)", "answer": "\(reason)"])
            }
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "vivo", until: until, reason: reason), status: status)
        }
    }
}
