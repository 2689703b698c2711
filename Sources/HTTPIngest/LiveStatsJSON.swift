import Foundation
import GatewayCore
import HTTP2Pool
import PushDispatch
import PushgateCore

/// `GET /api/stat/live` (admin): what the status page (`/ui`) draws and gorush's stat routes do not
/// have: the last 10 minutes of deliveries per provider in 5-second buckets, provider answers by
/// class, the queue's oldest pending delivery, the latest dead tokens and the HTTP/2 pools.
///
/// ```
/// {"now":1764180000.5,"bucket_seconds":5,"first_bucket_start":1764179405,"providers":["ios","android"],
///  "series":{"ios":{"delivered":[0,…,12],"failed":[0,…,1]},…},
///  "answers":{"ios":{"window":{"delivered":120,"token_dead":1,…},"total":{…}},…},
///  "queue":{"pending":3,"capacity":100000,"durable":true,"oldest_pending_since":"…","oldest_pending_seconds":4.2,"tracked":3},
///  "dead_tokens":{"total":1,"recent":[{"at":"…","app":"default","platform":"ios","token":"**********…","reason":"Unregistered"}]},
///  "pools":[{"origin":"https://api.push.apple.com","label":"apns production, app default, key ABC123DEFG","provider":"apns",
///            "environment":"production","app":"default","key_id":"ABC123DEFG","active_connections":2,"connections_opened":2,"pending_requests":0}],
///  "health":{"default":{"ios":{"state":"ok"},"wns":{"state":"failing","reason":"Forbidden (…)","since":"…"}}}}
/// ```
/// `health` is each app's providers' own state (`PushProvider.health`, the status page's per-app table).
/// `oldest_pending_*` and `tracked` count the deliveries this process accepted and has not finished
/// (deliveries resumed from a store after a restart, or queued by another gateway on a shared
/// PostgreSQL queue, are in `pending` only). Tokens are as the failure logs have them
/// (`log.hide_token`). At most `maxListedPools` pools are listed, the busiest first; several pools
/// may reach one origin (APNs production and sandbox on one host, each app's and each signing key's
/// own pools, the APNs channel management pools): `label` says what each is for, from `provider`,
/// `environment` (APNs), `app` and `key_id` (APNs token keys), each "" when it does not apply.
extension Gateway {
    /// Pools listed at most (Web Push opens one per push service origin).
    static let maxListedPools = 50

    package func liveStatsJSON() -> [UInt8] {
        let a = dispatcher.activity.snapshot
        let now = Date()
        let served = Set(dispatcher.allApps.flatMap { $0.slots.keys })
        let platforms = ProviderRegistry.platforms.filter { served.contains($0) }
        var w = JSONWriter(reservingCapacity: 4096)
        var first = true
        w.raw("{")
        w.key("now", first: &first)
        w.double((now.timeIntervalSince1970 * 1000).rounded() / 1000)
        w.key("bucket_seconds", first: &first)
        w.int(RecentActivity.bucketSeconds)
        w.key("first_bucket_start", first: &first)
        w.int(a.firstBucketStart)
        w.key("providers", first: &first)
        w.strings(platforms.map(\.name))
        w.key("series", first: &first)
        w.raw("{")
        var fs = true
        for p in platforms {
            let buckets = a.buckets[p] ?? []
            w.key(p.name, first: &fs)
            w.raw(#"{"delivered":"#)
            Self.ints(buckets.map(\.delivered), into: &w)
            w.raw(#","failed":"#)
            Self.ints(buckets.map(\.failed), into: &w)
            w.raw("}")
        }
        w.raw("}")
        w.key("answers", first: &first)
        w.raw("{")
        var fa = true
        for p in platforms {
            var window = [Int](repeating: 0, count: RecentActivity.classes.count)
            for b in a.buckets[p] ?? [] { for i in window.indices { window[i] += b.answers[i] } }
            let total = a.answersTotal[p] ?? []
            w.key(p.name, first: &fa)
            w.raw(#"{"window":"#)
            Self.classes(window.map(Int64.init), into: &w)
            w.raw(#","total":"#)
            Self.classes(total, into: &w)
            w.raw("}")
        }
        w.raw("}")
        w.key("queue", first: &first)
        w.raw("{")
        var fq = true
        w.key("pending", first: &fq)
        w.int(dispatcher.queue.pendingCount)
        w.key("capacity", first: &fq)
        w.int(dispatcher.queue.capacity)
        w.key("durable", first: &fq)
        w.raw(dispatcher.queue.isDurable ? "true" : "false")
        w.key("oldest_pending_since", first: &fq)
        if let since = a.oldestPendingSince { w.string(Self.iso(since)) } else { w.raw("null") }
        w.key("oldest_pending_seconds", first: &fq)
        if let since = a.oldestPendingSince { w.double((max(0, now.timeIntervalSince(since)) * 10).rounded() / 10) } else { w.raw("null") }
        w.key("tracked", first: &fq)
        w.int(a.pendingTracked)
        w.raw("}")
        w.key("dead_tokens", first: &first)
        w.raw(#"{"total":"#)
        w.int(a.deadTokensTotal)
        w.raw(#","recent":["#)
        for (i, d) in a.recentDeadTokens.enumerated() {
            if i > 0 { w.raw(",") }
            var fd = true
            w.raw("{")
            w.key("at", first: &fd)
            w.string(Self.iso(d.at))
            w.key("app", first: &fd)
            w.string(d.app)
            w.key("platform", first: &fd)
            w.string(d.platform.name)
            w.key("token", first: &fd)
            w.string(d.token)
            w.key("reason", first: &fd)
            w.string(d.reason)
            w.raw("}")
        }
        w.raw("]}")
        w.key("pools", first: &first)
        w.raw("[")
        let pools = HTTP2PoolDirectory.snapshot
            .sorted {
                ($0.activeConnections + $0.pendingRequests, $1.origin, $1.label.description)
                    > ($1.activeConnections + $1.pendingRequests, $0.origin, $0.label.description)
            }
            .prefix(Self.maxListedPools)
        for (i, p) in pools.enumerated() {
            if i > 0 { w.raw(",") }
            var fp = true
            w.raw("{")
            w.key("origin", first: &fp)
            w.string(p.origin)
            w.key("label", first: &fp)
            w.string(p.label.description)
            w.key("provider", first: &fp)
            w.string(p.label.provider)
            w.key("environment", first: &fp)
            w.string(p.label.environment)
            w.key("app", first: &fp)
            w.string(p.label.app)
            w.key("key_id", first: &fp)
            w.string(p.label.keyID)
            w.key("active_connections", first: &fp)
            w.int(p.activeConnections)
            w.key("connections_opened", first: &fp)
            w.int(p.connectionsOpened)
            w.key("pending_requests", first: &fp)
            w.int(p.pendingRequests)
            w.raw("}")
        }
        w.raw("]")
        w.key("health", first: &first)
        w.raw("{")
        var fh = true
        var openApp: String?
        var fp = true
        for h in providerHealth {
            if h.app != openApp {
                if openApp != nil { w.raw("}") }
                w.key(h.app, first: &fh)
                w.raw("{")
                openApp = h.app
                fp = true
            }
            var fs = true
            w.key(h.platform.name, first: &fp)
            w.raw("{")
            w.key("state", first: &fs)
            switch h.health {
            case .ok:
                w.string("ok")
            case .failing(let reason, let since):
                w.string("failing")
                w.key("reason", first: &fs)
                w.string(reason)
                w.key("since", first: &fs)
                w.string(Self.iso(since))
            }
            w.raw("}")
        }
        if openApp != nil { w.raw("}") }
        w.raw("}}")
        return w.bytes
    }

    private static func ints(_ list: [Int], into w: inout JSONWriter) {
        w.raw("[")
        for (i, n) in list.enumerated() {
            if i > 0 { w.raw(",") }
            w.int(n)
        }
        w.raw("]")
    }

    private static func classes(_ counts: [Int64], into w: inout JSONWriter) {
        w.raw("{")
        var f = true
        for (i, name) in RecentActivity.classes.enumerated() {
            w.key(name, first: &f)
            w.int(i < counts.count ? counts[i] : 0)
        }
        w.raw("}")
    }

    static func iso(_ d: Date) -> String {
        d.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
    }
}
