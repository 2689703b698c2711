import Crypto
import Foundation
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
    /// Longest key accepted (UUIDs and hashes fit many times over).
    static let maxIdempotencyKeyBytes = 255

    /// The header's key: an sf-string (`"abc"`, as the draft writes it) or a bare token, 1-255
    /// visible ASCII characters.
    static func idempotencyKey(_ raw: String) -> String? {
        var v = Substring(raw.trimmingCharacters(in: .whitespaces))
        if v.count >= 2, v.first == "\"", v.last == "\"" { v = v.dropFirst().dropLast() }
        guard !v.isEmpty, v.utf8.count <= maxIdempotencyKeyBytes, v.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return String(v)
    }

    /// The request's `Idempotency-Key`: nil without one, else the key or the 400 for a bad one
    /// (several values, empty, too long, not visible ASCII).
    static func idempotencyKey(_ headers: HTTPFields) -> Result<String, RequestError>? {
        let values = headers[values: idempotencyKeyHeader]
        guard let raw = values.first else { return nil }
        guard values.count == 1, let key = idempotencyKey(raw) else {
            return .failure(
                RequestError(
                    message: "Invalid Idempotency-Key header.",
                    detail: "Idempotency-Key: one value of 1-\(maxIdempotencyKeyBytes) visible ASCII characters (optionally quoted)"))
        }
        return .success(key)
    }
}
