import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import PushgateCore

extension Gateway {
    /// Readiness, for load balancers: 200 while the gateway takes work, else 503 naming why
    /// (`notReadyReason`), with `Retry-After`. Open, as the health route is. A provider that fails
    /// for its configuration (`PushProvider.health`) leaves the gateway ready (the other apps and
    /// providers work, and another instance has the same configuration): the 200's body lists it,
    /// `{"status":"ready","failing":[{"app":"default","provider":"wns","reason":"…","since":"…"}]}`.
    static let readyRoute = "/readyz"

    func readiness(head: Bool = false) -> Response {
        guard let reason = notReadyReason else {
            if head { return Response(status: .ok, headers: Self.jsonHeaders) }
            let failing = providerHealth.compactMap { h -> (String, Platform, String, Date)? in
                guard case .failing(let reason, let since) = h.health else { return nil }
                return (h.app, h.platform, reason, since)
            }
            guard !failing.isEmpty else { return json(.ok, Array(#"{"status":"ready"}"#.utf8)) }
            var w = JSONWriter()
            w.raw(#"{"status":"ready","failing":["#)
            for (i, (app, platform, reason, since)) in failing.enumerated() {
                if i > 0 { w.raw(",") }
                var f = true
                w.raw("{")
                w.key("app", first: &f)
                w.string(app)
                w.key("provider", first: &f)
                w.string(platform.name)
                w.key("reason", first: &f)
                w.string(reason)
                w.key("since", first: &f)
                w.string(RFC3339.milliseconds(since))
                w.raw("}")
            }
            w.raw("]}")
            return json(.ok, w.bytes)
        }
        var response = error(RequestError(status: 503, message: "Not ready.", detail: reason))
        response.headers[.retryAfter] = "1"
        if head { response.body = .init() }
        return response
    }
}
