import GatewayCore
import HTTPTypes
import Hummingbird
import PushgateCore

extension Gateway {
    /// Readiness, for load balancers: 200 while the gateway takes work, else 503 naming why
    /// (`notReadyReason`), with `Retry-After`. Open, as the health route is.
    static let readyRoute = "/readyz"

    func readiness(head: Bool = false) -> Response {
        guard let reason = notReadyReason else {
            return head ? Response(status: .ok, headers: Self.jsonHeaders) : json(.ok, Array(#"{"status":"ready"}"#.utf8))
        }
        var response = error(RequestError(status: 503, message: "Not ready.", detail: reason))
        response.headers[.retryAfter] = "1"
        if head { response.body = .init() }
        return response
    }
}
