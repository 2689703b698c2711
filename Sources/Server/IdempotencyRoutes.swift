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

    enum IdempotencyStep {
        /// Go on: with the claimed key and the request id to answer with, or without a key.
        case proceed((key: String, requestID: String)?)
        /// Answer this (a replay, 409, 422, 400 for a bad key, 503 when the store fails).
        case answer(Response)
    }

    /// The header's key: an sf-string (`"abc"`, as the draft writes it) or a bare token, 1-255
    /// visible ASCII characters.
    static func idempotencyKey(_ raw: String) -> String? {
        var v = Substring(raw.trimmingCharacters(in: .whitespaces))
        if v.count >= 2, v.first == "\"", v.last == "\"" { v = v.dropFirst().dropLast() }
        guard !v.isEmpty, v.utf8.count <= maxIdempotencyKeyBytes, v.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return String(v)
    }

    func claimIdempotency(_ request: Request, body: ByteBuffer, app: String) async -> IdempotencyStep {
        let values = request.headers[values: Self.idempotencyKeyHeader]
        guard let raw = values.first else { return .proceed(nil) }
        guard values.count == 1, let key = Self.idempotencyKey(raw) else {
            return .answer(
                self.error(
                    RequestError(
                        message: "Invalid Idempotency-Key header.",
                        detail: "Idempotency-Key: one value of 1-\(Self.maxIdempotencyKeyBytes) visible ASCII characters (optionally quoted)")))
        }
        let hash = Hex.encode(SHA256.hash(data: body.readableBytesView))
        let claim: IdempotencyClaim
        do {
            claim = try await dispatcher.idempotency.claim(
                app: app, key: key, bodyHash: hash, now: Date(), ttl: settings.idempotencyTTL,
                abandonAfter: Double(settings.syncTimeout) + 30)
        } catch {
            logger.error("idempotency store failed: \(error)")
            return .answer(
                json(
                    .serviceUnavailable,
                    RequestError(status: 503, message: "Idempotency keys are unavailable, try again later.", detail: "nothing was queued").json,
                    extra: [(.retryAfter, "1")]))
        }
        switch claim {
        case .claimed:
            return .proceed((key, RandomID.timeOrdered()))
        case .replay(let a):
            var extra: [(HTTPField.Name, String)] = [(Self.requestIDHeader, a.requestID), (Self.idempotentReplayedHeader, "true")]
            if !a.notifIDs.isEmpty { extra.append((Self.notifIDsHeader, a.notifIDs)) }
            return .answer(json(HTTPResponse.Status(code: a.status), a.body, extra: extra))
        case .mismatch:
            return .answer(
                self.error(
                    RequestError(
                        status: 422, message: "Idempotency-Key reused with a different request.",
                        detail: "Idempotency-Key \(key.logSafe(max: 64)) was first used with another body (within core.idempotency_ttl)")))
        case .inProgress:
            return .answer(
                json(
                    .conflict,
                    RequestError(
                        status: 409, message: "A request with this Idempotency-Key is being processed.",
                        detail: "retry after the first request with Idempotency-Key \(key.logSafe(max: 64)) was answered"
                    ).json,
                    extra: [(.retryAfter, "1")]))
        }
    }

    func keepIdempotentAnswer(app: String, key: String, _ answer: IdempotentAnswer) async {
        do {
            try await dispatcher.idempotency.finish(app: app, key: key, answer: answer)
        } catch {
            // The deliveries are queued: answer anyway. A retry with the key will see it in progress
            // until `sync_timeout + 30 s`, then be processed again (at-least-once).
            logger.error("could not keep the answer of Idempotency-Key \(key.logSafe(max: 64)): \(error)")
        }
    }
}
