import Crypto
import Foundation
import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore
import PushDispatch
import PushgateCore

/// `Idempotency-Key` on `POST /api/push` (docs/delivery-controls.md), after the IETF httpapi draft
/// "The Idempotency-Key HTTP Header Field": the first request with a key is processed and its
/// answer kept for `core.idempotency_ttl`; the same key with the same body gets that answer again
/// (same body, same `X-Pushgate-Request-Id`, `Idempotent-Replayed: true`) and nothing is sent; with
/// another body 422; while the first is being processed 409. Keys are per app.
extension Gateway {
    static let idempotencyKeyHeader = HTTPField.Name("Idempotency-Key")!
    static let idempotentReplayedHeader = HTTPField.Name("Idempotent-Replayed")!
    /// The request's `Idempotency-Key`: nil without one, else the key or the 400 for a bad one
    /// (several values, empty, too long, not visible ASCII).
    static func idempotencyKey(_ headers: HTTPFields) -> Result<String, RequestError>? {
        let values = headers[values: idempotencyKeyHeader]
        guard let raw = values.first else { return nil }
        guard values.count == 1 else { return .failure(invalidIdempotencyKey(field: "Idempotency-Key").error) }
        return idempotencyKey(raw, field: "Idempotency-Key").mapError(\.error)
    }
}
