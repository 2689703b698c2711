import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import ProviderKit
import PushgateCore

/// OPPO's answer to one send or auth request, classified (codes: OPPO's API doc copy, table with
/// sources in docs/china-vendors.md).
public enum OppoAnswer: Sendable, Equatable {
    case outcome(SendOutcome)
    /// 33: the app's daily message limit is reached.
    case dailyQuota(reason: String)
}

public enum OppoResponseClassifier {
    public static let maxBodyBytes = 64 * 1024
    public static let transientCodes: Set<Int64> = [-2, -1, 13, 55]
    public static let invalidAuthToken: Int64 = 11
    public static let dailyLimit: Int64 = 33
    public static let invalidRegid: Int64 = 10000

    public struct Body: Sendable, Equatable {
        public var code: Int64?
        public var message: String?
        public var data: [String: String] = [:]
    }

    public static func parse(_ body: [UInt8]) -> Body? {
        guard !body.isEmpty, body.count <= maxBodyBytes,
            let json = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        else { return nil }
        var out = Body()
        if let n = json["code"] as? NSNumber, let i = Int64(exactly: n.doubleValue), i.magnitude < 1_000_000_000 { out.code = i }
        out.message = (json["message"] as? String).map { oneLine($0, max: 300) }
        if let d = json["data"] as? [String: Any] {
            for (k, v) in d.prefix(16) {
                if let s = v as? String { out.data[k] = oneLine(s, max: 4096) } else if let n = v as? NSNumber { out.data[k] = n.stringValue }
            }
        }
        return out
    }

    public static func classify(status: Int, body: [UInt8], retryAfter: String?) -> OppoAnswer {
        let delay = RetryAfter.parse(retryAfter)
        let parsed = parse(body)
        if let parsed, let code = parsed.code {
            let reason = parsed.message.map { "\(code): \($0)" } ?? "\(code)"
            if code == 0, (200..<300).contains(status) { return .outcome(.delivered(providerID: parsed.data["messageId"])) }
            if let answer = answer(code: code, reason: reason, status: status, retryAfter: delay) { return answer }
        }
        return httpAnswer(status: status, readable: parsed != nil, retryAfter: delay)
    }

    /// A non-zero code, as every answer classifies it (nil: 0, which says nothing by itself).
    static func answer(code: Int64, reason: String, status: Int, retryAfter delay: Double?) -> OppoAnswer? {
        switch code {
        case invalidRegid: return .outcome(.tokenDead(reason: reason, status: status))
        case invalidAuthToken: return .outcome(.credentials(reason: reason, status: status))
        case dailyLimit: return .dailyQuota(reason: reason)
        case let c where transientCodes.contains(c): return .outcome(.transient(reason: reason, status: status, retryAfter: delay))
        case 0: return nil
        default: return .outcome(.permanent(reason: reason, status: status))
        }
    }

    static func httpAnswer(status: Int, readable: Bool, retryAfter delay: Double?) -> OppoAnswer {
        switch status {
        case 408, 429, 500...599: return .outcome(.transient(reason: "HTTP \(status)", status: status, retryAfter: delay))
        default: return .outcome(.permanent(reason: readable ? "HTTP \(status)" : "unreadable OPPO answer (HTTP \(status))", status: status))
        }
    }

    /// A `unicast_batch` answer is at most this long: 1000 results of a message id, a regid and an
    /// error message each.
    public static let maxBatchBodyBytes = 1 << 20

    /// What a `unicast_batch` answer says of each regid of the request, in request order; nil when
    /// the whole request was refused naming a bad regid without saying which (each is then sent alone).
    /// `{"code":0,"data":[{"messageId","registrationId","errorCode","errorMessage"}…]}`: a result
    /// is matched to its regid by `registrationId` (in order when a regid is in the request twice),
    /// else by position when no result names one; a regid no result speaks of is transient.
    public static func classifyBatch(status: Int, body: [UInt8], regids: [String], retryAfter: String?) -> [OppoAnswer]? {
        let delay = RetryAfter.parse(retryAfter)
        let json: [String: Any]? =
            body.isEmpty || body.count > maxBatchBodyBytes ? nil : (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        let code = (json?["code"] as? NSNumber).flatMap { Int64(exactly: $0.doubleValue) }.flatMap { $0.magnitude < 1_000_000_000 ? $0 : nil }
        guard let json, let code, code == 0, (200..<300).contains(status) else {
            let reason = code.map { c in (json?["message"] as? String).map { "\(c): \(oneLine($0, max: 300))" } ?? "\(c)" }
            if code == invalidRegid { return nil }
            let whole =
                code.flatMap { answer(code: $0, reason: reason ?? "", status: status, retryAfter: delay) }
                ?? httpAnswer(status: status, readable: json != nil, retryAfter: delay)
            return Array(repeating: whole, count: regids.count)
        }
        struct Entry {
            var regid: String?
            var messageID: String?
            var code: Int64?
            var message: String?
            var unreadableCode = false
        }
        var entries: [Entry] = []
        for e in (json["data"] as? [Any] ?? []).prefix(regids.count * 2 + 16) {
            guard let d = e as? [String: Any] else {
                entries.append(Entry())
                continue
            }
            var entry = Entry()
            entry.regid = (d["registrationId"] as? String).flatMap { OppoMessageMapper.isRegistrationID($0) ? $0 : nil }
            entry.messageID = (d["messageId"] as? String).map { oneLine($0, max: 128) } ?? (d["messageId"] as? NSNumber)?.stringValue
            if let v = d["errorCode"], !(v is NSNull) {
                // A code that is no integer is an error all the same.
                entry.code = (v as? NSNumber).flatMap { Int64(exactly: $0.doubleValue) }.flatMap { $0.magnitude < 1_000_000_000 ? $0 : nil }
                entry.unreadableCode = entry.code == nil
            }
            entry.message = (d["errorMessage"] as? String).map { oneLine($0, max: 300) }
            entries.append(entry)
        }
        var byRegid: [String: [Int]] = [:]
        for (i, e) in entries.enumerated() { if let r = e.regid { byRegid[r, default: []].append(i) } }
        let positional = byRegid.isEmpty && entries.count == regids.count
        var used = Set<Int>()
        return regids.enumerated().map { (i, regid) -> OppoAnswer in
            var index: Int?
            if positional {
                index = i
            } else if var list = byRegid[regid], !list.isEmpty {
                index = list.removeFirst()
                byRegid[regid] = list
            }
            guard let index, used.insert(index).inserted else {
                return .outcome(.transient(reason: "OPPO's unicast_batch answer has no result for this regid", status: status, retryAfter: delay))
            }
            let e = entries[index]
            if e.unreadableCode {
                return .outcome(.permanent(reason: "OPPO's unicast_batch answer has an unreadable errorCode for this regid", status: status))
            }
            guard let c = e.code, c != 0 else { return .outcome(.delivered(providerID: e.messageID)) }
            let reason = e.message.map { "\(c): \($0)" } ?? "\(c)"
            return answer(code: c, reason: reason, status: status, retryAfter: delay) ?? .outcome(.delivered(providerID: e.messageID))
        }
    }
}

/// One delivery waiting to go in a `unicast_batch`: its regid and its `message` object.
public struct OppoBatchItem: Sendable {
    public var regid: String
    public var message: String
}

/// OPPO Push: an `auth_token` from `POST /server/v1/auth` (app_key, millisecond timestamp,
/// SHA-256 signature with the MasterSecret) shared by every send and refreshed an hour before its
/// 24 hours end, re-fetched when OPPO refuses it (11); form-encoded sends. A send goes out at once
/// as one `unicast` when no send of the app is in flight; sends arriving meanwhile wait and go
/// together in one `unicast_batch` (up to 1000 messages) when it ends (`BatchCoalescer`), each
/// delivery getting its own regid's result.
public final class OppoProvider: PushProvider {
    public var platform: Platform { .oppo }
    public let configuration: OppoConfiguration
    public let quota: DailyQuotaHold
    public let tokens: VendorTokenCache
    /// The app's sends, grouped while one is in flight.
    public let batches: BatchCoalescer<String, OppoBatchItem, SendOutcome>
    /// The requests themselves (one send, or one batch).
    let sender: OppoSender
    let client: HTTPClient
    let timeout: TimeAmount
    let logger: Logger

    /// `unicast_batch` takes at most 1000 messages (OPPO-DOC, docs/china-vendors.md).
    public static let maxBatch = 1000
    /// The `message` objects of one batch together: at most 1 MiB (own bound; the form encoding
    /// can triple it).
    public static let maxBatchBytes = 1 << 20

    /// `maxWaiting`: the sends that may wait for a batch at once (the app's `max_concurrent_pushes`,
    /// which bounds them already).
    public init(
        configuration: OppoConfiguration, httpClient: HTTPClient, timeout: TimeAmount = .seconds(30), maxWaiting: Int = 256,
        maxBatch: Int = OppoProvider.maxBatch, now: @escaping @Sendable () -> Date = { Date() },
        quotaClock: (@Sendable () -> Date)? = nil,
        logger: Logger = Logger(label: "pushgate.oppo")
    ) {
        self.configuration = configuration
        self.client = httpClient
        self.timeout = timeout
        self.logger = logger
        self.quota = DailyQuotaHold(now: quotaClock ?? now)
        let c = configuration
        let tokens = VendorTokenCache(vendor: "OPPO", logger: logger, now: now) { issued in
            let (status, body) = try await OppoProvider.post(
                httpClient, c.endpoint + OppoConfiguration.authPath, Array(c.authForm(at: issued).utf8), timeout)
            let parsed = OppoResponseClassifier.parse(body)
            guard status == 200, let parsed, parsed.code == 0, let token = parsed.data["auth_token"] else {
                let code = parsed?.code
                // 14 bad app key, 16 bad signature: the credentials are wrong; anything else may pass.
                throw VendorTokenCache.Failure(
                    "OPPO auth refused (HTTP \(status), code \(code.map(String.init) ?? "none"): \(parsed?.message ?? ""))",
                    permanent: code == 14 || code == 16 || code == 28)
            }
            return (token, OppoConfiguration.tokenLifetime)
        }
        self.tokens = tokens
        let sender = OppoSender(configuration: c, client: httpClient, timeout: timeout, quota: quota, tokens: tokens, logger: logger)
        self.sender = sender
        self.batches = BatchCoalescer(
            maxBatch: min(max(1, maxBatch), Self.maxBatch), maxCost: Self.maxBatchBytes, maxWaiting: maxWaiting,
            cost: { $0.message.utf8.count }, unsent: { _, why in .transient(reason: "OPPO send not made: \(why)", status: nil, retryAfter: nil) }
        ) { _, items in await sender.send(items) }
    }

    static func post(_ client: HTTPClient, _ url: String, _ body: [UInt8], _ timeout: TimeAmount, maxBytes: Int = OppoResponseClassifier.maxBodyBytes)
        async throws -> (Int, [UInt8])
    {
        let answer = try await BoundedPOST.send(
            client, url: url, contentType: "application/x-www-form-urlencoded;charset=UTF-8", body: body, maxBytes: maxBytes + 1,
            timeout: timeout)
        return (answer.status, answer.body)
    }

    /// The ingest rule that needs the app's configuration: the classification from the request or
    /// the app's default (else a 400 naming the field), with the message checks of the vendor.
    public func checkIngest(_ n: PushNotification) -> IngestProblem? {
        let options: OppoOptions?
        do { options = try OppoRequestMember.options(of: n) } catch { return error.ingestProblem }
        return checkIngest(n, options: options)
    }

    public func checkIngest(_ n: PushNotification, options: OppoOptions?) -> IngestProblem? {
        OppoMessageMapper.check(n, options: options, defaultCategory: configuration.defaultCategory)?.ingestProblem
    }

    public func prepare(_ notification: PushNotification) throws -> any PreparedPush {
        let options: OppoOptions?
        do { options = try OppoRequestMember.options(of: notification) } catch { throw PushFailure(error.description) }
        return try prepare(notification, options: options)
    }

    public func prepare(_ notification: PushNotification, options: OppoOptions?) throws(PushFailure) -> OppoPreparedMessage {
        try OppoMessageMapper.prepare(notification, options: options, configuration: configuration)
    }

    public func validate(target: PushTarget, of prepared: any PreparedPush) -> PushFailure? {
        guard case .token(let t) = target else { return PushFailure("OPPO sends to registration ids only") }
        return OppoMessageMapper.isRegistrationID(t) ? nil : PushFailure("InvalidRegistrationId (not an OPPO regid)")
    }

    public func send(_ prepared: any PreparedPush, to target: PushTarget, context: DeliveryContext) async -> SendOutcome {
        guard let p = prepared as? OppoPreparedMessage, case .token(let regid) = target, OppoMessageMapper.isRegistrationID(regid) else {
            return .permanent(reason: "unsupported OPPO target", status: nil)
        }
        if let held = await quota.current() {
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "OPPO", until: held.until, reason: held.reason), status: nil)
        }
        return await batches.submit(OppoBatchItem(regid: regid, message: p.message(for: regid)), key: configuration.appKey)
    }

    public func shutdown() async { await batches.close() }
}

/// The requests of `OppoProvider`'s sends: one `unicast`, or one `unicast_batch` of several.
struct OppoSender: Sendable {
    let configuration: OppoConfiguration
    let client: HTTPClient
    let timeout: TimeAmount
    let quota: DailyQuotaHold
    let tokens: VendorTokenCache
    let logger: Logger

    func send(_ items: [OppoBatchItem]) async -> [SendOutcome] {
        if let held = await quota.current() {
            let o = SendOutcome.quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "OPPO", until: held.until, reason: held.reason), status: nil)
            return Array(repeating: o, count: items.count)
        }
        if items.count == 1 { return [await unicast(items[0])] }
        let token: String
        switch await tokens.bearer(name: "OPPO", logger: logger) {
        case .success(let t): token = t
        case .failure(let f): return Array(repeating: f.outcome, count: items.count)
        }
        var messages = "["
        for (i, item) in items.enumerated() {
            if i > 0 { messages += "," }
            messages += item.message
        }
        messages += "]"
        let form = "auth_token=" + OAuthTokenCache.formEncode(token) + "&messages=" + OAuthTokenCache.formEncode(messages)
        let status: Int
        let body: [UInt8]
        do {
            (status, body) = try await OppoProvider.post(
                client, configuration.endpoint + OppoConfiguration.unicastBatchPath, Array(form.utf8), timeout,
                maxBytes: OppoResponseClassifier.maxBatchBodyBytes)
        } catch {
            return Array(repeating: .transient(reason: "\(error)", status: nil, retryAfter: nil), count: items.count)
        }
        guard let answers = OppoResponseClassifier.classifyBatch(status: status, body: body, regids: items.map(\.regid), retryAfter: nil) else {
            // Refused naming a bad regid without saying which: each alone says which.
            logger.debug("OPPO refused a unicast_batch for a bad regid: sending each alone")
            return await withTaskGroup(of: (Int, SendOutcome).self) { g in
                for (i, item) in items.enumerated() { g.addTask { (i, await self.unicast(item)) } }
                var out = Array(repeating: SendOutcome.transient(reason: "not sent", status: nil, retryAfter: nil), count: items.count)
                for await (i, o) in g { out[i] = o }
                return out
            }
        }
        var out: [SendOutcome] = []
        out.reserveCapacity(answers.count)
        for a in answers { out.append(await settle(a, token: token, status: status)) }
        return out
    }

    func unicast(_ item: OppoBatchItem) async -> SendOutcome {
        let token: String
        switch await tokens.bearer(name: "OPPO", logger: logger) {
        case .success(let t): token = t
        case .failure(let f): return f.outcome
        }
        let form = "auth_token=" + OAuthTokenCache.formEncode(token) + "&message=" + OAuthTokenCache.formEncode(item.message)
        let status: Int
        let body: [UInt8]
        do {
            (status, body) = try await OppoProvider.post(client, configuration.endpoint + OppoConfiguration.unicastPath, Array(form.utf8), timeout)
        } catch {
            return .transient(reason: "\(error)", status: nil, retryAfter: nil)
        }
        return await settle(OppoResponseClassifier.classify(status: status, body: body, retryAfter: nil), token: token, status: status)
    }

    /// An answer's outcome: a refused token is dropped (the dispatcher retries once with a new
    /// one); a quota answer holds the app's sends until OPPO's day resets.
    func settle(_ answer: OppoAnswer, token: String, status: Int) async -> SendOutcome {
        switch answer {
        case .outcome(let o):
            if case .credentials = o {
                await tokens.invalidate(token)
                logger.warning("OPPO refused the auth_token: fetching a new one")
            }
            return o
        case .dailyQuota(let reason):
            let (until, started) = await quota.hold(reason: reason)
            if started {
                logger.warning(
                    "OPPO daily limit reached: sends to this app held until OPPO's day resets",
                    metadata: ["until": "\(until)", "answer": "\(reason)"])
            }
            return .quotaExceeded(reason: DailyQuotaHold.heldOutcome(vendor: "OPPO", until: until, reason: reason), status: status)
        }
    }
}
