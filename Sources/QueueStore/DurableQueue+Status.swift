import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PushDispatch
import PushgateCore

/// `DeliveryStatusSource`: the stored records, overlaid with the updates the store has not taken yet.
extension DurableQueue {
    public func deliveryStatus(notifID: String) async throws -> [DeliveryStatusRecord]? {
        await flush()  // read this process's own changes
        guard let stored = try await backend.status(notifID: notifID) else { return nil }
        // Updates the store refused are not in it yet: what happened is what this process holds.
        let pending: [Int64: JobUpdate] = state.withLockedValue { s in
            guard !s.retained.isEmpty else { return [:] }
            var byJob: [Int64: JobUpdate] = [:]
            for u in s.retained { byJob[u.jobID] = u }  // the last of a job's updates
            return byJob
        }
        return stored.map { row in pending[row.jobID].map { Self.overlay($0, on: row.record) } ?? row.record }
    }

    /// A stored record as an update not written yet leaves it.
    static func overlay(_ u: JobUpdate, on r: DeliveryStatusRecord) -> DeliveryStatusRecord {
        var out = r
        switch u {
        case .reschedule(_, let attempts, let notBefore, let lastError, _, _):
            out.state = .retrying
            out.attempts = attempts
            out.nextTry = Date(timeIntervalSince1970: notBefore)
            out.error = lastError
        case .complete(let c):
            let state = DeliveryState(
                code: c.state, attempts: c.attempts, notBefore: Date(timeIntervalSince1970: 0), lastError: c.info, providerID: c.info)
            out = DeliveryStatusRecord(
                platform: r.platform, token: r.token, state: state, attempts: c.attempts, finishedAt: Date(timeIntervalSince1970: c.finishedAt),
                app: r.app, fallback: r.fallback)
        }
        return out
    }
}
