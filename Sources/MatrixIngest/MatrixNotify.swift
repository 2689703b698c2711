import GatewayCore
import Logging
import Metrics
import PushDispatch
import PushgateCore

/// `POST /_matrix/push/v1/notify`, transport aside: the body in, the status and JSON out.
///
/// Each device is mapped as Sygnal maps it (`SygnalMapping`), the sendable ones go through
/// `Gateway.accept` (one request per Pushgate app, synchronous with outcomes, waiting at most
/// `matrix.sync_timeout`), and the answer is `{"rejected": [pushkey, …]}`: the pushkeys of an
/// unknown or ambiguous `app_id`, of a pusher whose data cannot work, and of a token the provider
/// said is gone. A delivery still pending when the wait ends is not rejected and goes on through
/// the durable queue (its status route and feedback hook as any other push).
public struct MatrixNotifyHandler: Sendable {
    public let gateway: Gateway
    /// The `matrix` section in force (a reload replaces its apps and limits).
    public let runtime: MatrixRuntime
    public var settings: MatrixSettings { runtime.settings }

    public init(gateway: Gateway, settings: MatrixSettings) {
        self.init(gateway: gateway, runtime: MatrixRuntime(settings))
    }

    public init(gateway: Gateway, runtime: MatrixRuntime) {
        self.gateway = gateway
        self.runtime = runtime
    }

    public struct Answer: Sendable, Equatable {
        public var status: Int
        public var body: [UInt8]
        /// Seconds before a retry (a temporary failure).
        public var retryAfter: Int?
        /// The notif_ids of the deliveries queued (`GET /api/push/{notif_id}` on the gateway's own
        /// port follows each), in device order: the `X-Pushgate-Notif-Ids` header.
        public var notifIDs: [String] = []
    }

    /// Sygnal's series as its Prometheus client exposes them (counters with `_total`), beside the
    /// gateway's own: its Grafana dashboard's queries work unchanged.
    static let received = Counter(label: "sygnal_notifications_received_total")
    static let devicesReceived = Counter(label: "sygnal_notifications_devices_received_total")

    /// `trace`: the request's trace context (`tracing.enabled`): each app's `accept` is a span under it.
    public func handle(body: [UInt8], trace: IngestTrace? = nil) async -> Answer {
        let start = ContinuousClock.now
        let answer = await answer(body: body, trace: trace)
        let code = String(answer.status)
        Counter(label: "sygnal_pushgateway_status_codes_total", dimensions: [("code", code)]).increment()
        let elapsed = ContinuousClock.now - start
        Timer(label: "sygnal_notify_time", dimensions: [("code", code)]).recordNanoseconds(
            elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000)
        return answer
    }

    func answer(body: [UInt8], trace: IngestTrace? = nil) async -> Answer {
        // One request, one configuration (a reload during it does not mix two).
        let settings = self.settings
        let n: MatrixNotification
        do { n = try MatrixNotification.parse(body, maxDevices: settings.maxDevices) } catch {
            return Answer(status: error.status, body: error.json)
        }
        Self.received.increment()
        Self.devicesReceived.increment(by: n.devices.count)
        var rejected = [Bool](repeating: false, count: n.devices.count)
        var notifIDs = [String?](repeating: nil, count: n.devices.count)
        // The sendable devices by Pushgate app ("" the default app), in device order.
        var groups: [String: [(device: Int, notification: PushNotification)]] = [:]
        var order: [String] = []
        for (i, device) in n.devices.enumerated() {
            guard let app = settings.app(for: device.appID) else {
                gateway.logger.warning("matrix: no matrix.apps entry (or more than one glob) for app_id \(device.appID.logSafe(max: 128))")
                rejected[i] = true
                continue
            }
            Counter(label: "sygnal_per_pushkin_type_total", dimensions: [("pushkin", app.pattern)]).increment()
            switch SygnalMapping.plan(n, device: device, app: app) {
            case .send(let notification):
                let key = app.app ?? ""
                if groups[key] == nil { order.append(key) }
                groups[key, default: []].append((i, notification))
            case .reject(let why):
                gateway.logger.info("matrix: pushkey of app_id \(device.appID.logSafe(max: 128)) rejected: \(why)")
                rejected[i] = true
            case .nothing(let why):
                gateway.logger.debug("matrix: nothing sent for app_id \(device.appID.logSafe(max: 128)): \(why)")
            }
        }
        for key in order {
            guard let group = groups[key] else { continue }
            let request = PushRequest(notifications: group.map(\.notification))
            // A device the gateway refuses (a token over core.max_token_bytes, a field a provider
            // refuses) is rejected alone: it can never be sent, and the others go on.
            let options = IngestOptions(
                sync: true, app: key.isEmpty ? nil : key, outcomes: true, timeout: settings.syncTimeout, trace: trace, refuseNotificationsAlone: true)
            switch await gateway.accept(request, from: .open, options: options) {
            case .accepted(let result, _):
                for (i, id) in result.notifIDs.enumerated() where i < group.count {
                    if id.isEmpty {
                        rejected[group[i].device] = true
                    } else {
                        notifIDs[group[i].device] = id
                    }
                }
                for outcome in result.outcomes {
                    guard case .failed(_, tokenDead: true) = outcome.result,
                        let index = result.notifIDs.firstIndex(of: outcome.notifID), index < group.count
                    else { continue }
                    rejected[group[index].device] = true
                }
            case .replay:
                continue
            case .refused(let refusal):
                return Self.refusalAnswer(refusal)
            }
        }
        var w = JSONWriter()
        w.raw("{\"rejected\":")
        w.strings(n.devices.indices.filter { rejected[$0] }.map { n.devices[$0].pushkey })
        w.raw("}")
        return Answer(status: 200, body: w.bytes, notifIDs: notifIDs.compactMap { $0 })
    }

    /// A refusal of the gateway as the homeserver should see it: a request the gateway will never
    /// take is a 400; anything that may pass later (the queue full, the store down, a rate limit,
    /// a shutdown) is Sygnal's answer to a failed dispatch, 502, so the homeserver tries again.
    static func refusalAnswer(_ refusal: IngestRefusal) -> Answer {
        let text = refusal.error.message + (refusal.error.detail.map { " (\($0))" } ?? "")
        switch refusal.kind {
        case .invalid:
            return Answer(status: 400, body: MatrixRequestError("M_BAD_JSON", text).json)
        default:
            return Answer(status: 502, body: MatrixRequestError(status: 502, "M_UNKNOWN", text).json, retryAfter: refusal.retryAfter)
        }
    }
}
