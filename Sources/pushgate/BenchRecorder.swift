import Foundation
import Histogram
import MockProviders
import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#endif

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on this machine, so a timestamp
/// written by `pushgate bench` can be compared with the time a separate `pushgate mock` received it.
@inline(__always) func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Bench token layout (hex, so valid for APNs, and also used for FCM tokens and Web Push ids):
/// 8-char marker, 40 zero/pad chars, 16-char sequence number. `bbbbbbbb`: deliver; `dddddddd`:
/// the mock answers "token dead" (410 Unregistered / FCM UNREGISTERED / HMS 80300007 / Web Push 410).
enum BenchToken {
    static let liveMarker = "bbbbbbbb"
    static let deadMarker = "dddddddd"
    static let pad = String(repeating: "0", count: 40)
    static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    static func make(_ seq: UInt64, dead: Bool) -> String {
        var bytes = [UInt8](repeating: 0x30, count: 64)
        let marker: UInt8 = dead ? 0x64 : 0x62
        for i in 0..<8 { bytes[i] = marker }
        var v = seq
        for i in stride(from: 63, through: 48, by: -1) {
            bytes[i] = hexDigits[Int(v & 0xF)]
            v >>= 4
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    enum Kind { case live(UInt64), dead(UInt64), other }

    /// Whether bench sequence number `seq` is a dead token when one in `every` is (spread by a
    /// multiplicative hash, so every platform of a mixed run gets its share).
    static func isDead(_ seq: Int, every: Int?) -> Bool {
        guard let every, every > 0 else { return false }
        if every == 1 { return true }
        return ((UInt64(seq) &* 0x9E37_79B9_7F4A_7C15) >> 40) % UInt64(every) == 0
    }

    static func parse(_ token: String) -> Kind {
        let u = token.utf8
        guard u.count == 64 else { return .other }
        var it = u.makeIterator()
        guard let first = it.next(), first == 0x62 || first == 0x64 else { return .other }
        var seq: UInt64 = 0
        var i = 0
        for b in u {
            if i < 8 {
                if b != first { return .other }
            } else if i >= 48 {
                let d: UInt8
                switch b {
                case 0x30...0x39: d = b - 0x30
                case 0x61...0x66: d = b - 0x61 + 10
                default: return .other
                }
                seq = seq << 4 | UInt64(d)
            }
            i += 1
        }
        return first == 0x62 ? .live(seq) : .dead(seq)
    }
}

/// What the mocks saw, for load tests and external crash tests: per-token counts, successes,
/// injected failures, and the client-send -> mock-receive latency (from a `"pgbt":<monotonic ns>`
/// field the bench puts in the payload `data`). Cheap and thread-safe: called on event loops.
final class MockRecorder: Sendable {
    /// A mock provider by its `MockRegistry` name.
    struct Provider: RawRepresentable, Hashable, Sendable {
        let rawValue: String
        init?(rawValue: String) {
            guard MockRegistry.module(named: rawValue) != nil else { return nil }
            self.rawValue = rawValue
        }
        static var allCases: [Provider] { MockRegistry.modules.compactMap { Provider(rawValue: $0.name) } }
        static let apns = Provider(rawValue: "apns")!
        static let fcm = Provider(rawValue: "fcm")!
        static let webpush = Provider(rawValue: "webpush")!
    }

    /// Scripted failures: `rate` of the requests get `status` (on top of the dead-token marker).
    struct Failure: Sendable {
        var rate: Double = 0
        var status: Int = 503
    }

    enum Verdict { case ok, dead, injected(Int) }

    struct PerProvider {
        var received = 0
        var ok = 0
        var dead = 0
        var injected = 0
    }

    struct State {
        var providers: [Provider: PerProvider] = [:]
        /// Bench tokens by sequence number: bit 7 = answered OK at least once, bits 0-6 = receptions (saturating).
        var dense: [UInt8] = []
        var denseDistinct = 0
        var denseOKDistinct = 0
        /// Other tokens: receptions.
        var other: [String: Int] = [:]
        var latency = Histogram<UInt64>(lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)
        var firstOK: UInt64 = 0
        var lastOK: UInt64 = 0
        var resetAt = monotonicNanos()
    }

    private let failureBox: NIOLockedValueBox<[Provider: Failure]>
    private let state = NIOLockedValueBox(State())

    init(failures: [Provider: Failure] = [:]) {
        self.failureBox = NIOLockedValueBox(failures)
    }

    /// Scripted failures now in force (changed at run time with `POST /__mock/failures`).
    var failures: [Provider: Failure] {
        failureBox.withLockedValue { $0 }
    }

    func setFailure(_ provider: Provider, _ failure: Failure) {
        failureBox.withLockedValue { $0[provider] = failure }
    }

    /// The `"pgbt":123` or `"pgbt":"123"` value in a payload, also inside a JSON string (HMS sends `data`
    /// as JSON text: `"data":"{\"pgbt\":123}"`).
    static func sendTimestamp(_ body: [UInt8]) -> UInt64? {
        let n = body.count
        guard n >= 8 else { return nil }
        return body.withUnsafeBufferPointer { p -> UInt64? in
            let quote: UInt8 = 0x22
            let backslash: UInt8 = 0x5C
            var i = 1
            while i + 4 < n {
                // pgbt, just after a quote
                if p[i] == 0x70 && p[i + 1] == 0x67 && p[i + 2] == 0x62 && p[i + 3] == 0x74 && p[i - 1] == quote {
                    var j = i + 4
                    if j < n && p[j] == backslash { j += 1 }
                    if j + 1 < n && p[j] == quote && p[j + 1] == 0x3A {
                        j += 2
                        if j < n && p[j] == backslash { j += 1 }
                        if j < n && p[j] == quote { j += 1 }
                        var v: UInt64 = 0
                        var digits = 0
                        while j < n, p[j] >= 0x30, p[j] <= 0x39 {
                            v = v &* 10 &+ UInt64(p[j] - 0x30)
                            j += 1
                            digits += 1
                        }
                        return digits > 0 ? v : nil
                    }
                }
                i += 1
            }
            return nil
        }
    }

    /// Records one request that passed the mock's checks and says how to answer it.
    func observe(_ provider: Provider, token: String, body: [UInt8]) -> Verdict {
        let now = monotonicNanos()
        let kind = BenchToken.parse(token)
        var verdict: Verdict = .ok
        if case .dead = kind {
            verdict = .dead
        } else if let f = failureBox.withLockedValue({ $0[provider] }), f.rate > 0, f.rate >= 1 || Double.random(in: 0..<1) < f.rate {
            verdict = .injected(f.status)
        }
        let sent: UInt64? = {
            if case .ok = verdict { return Self.sendTimestamp(body) }
            return nil
        }()
        state.withLockedValue { s in
            var p = s.providers[provider] ?? PerProvider()
            p.received += 1
            switch verdict {
            case .ok:
                p.ok += 1
                if s.firstOK == 0 { s.firstOK = now }
                s.lastOK = now
                if let sent, now >= sent, sent >= s.resetAt {
                    _ = s.latency.record(max(1, (now - sent) / 1000))
                }
            case .dead: p.dead += 1
            case .injected: p.injected += 1
            }
            s.providers[provider] = p
            switch kind {
            case .live(let seq), .dead(let seq):
                // Refuse absurd sequence numbers before converting: a token of all `d`s parses to
                // more than Int.max (Int(seq) trapped and stopped `pushgate mock`).
                if seq > 50_000_000 { return }
                let i = Int(seq)
                if i >= s.dense.count {
                    s.dense.append(contentsOf: repeatElement(0, count: max(i + 1 - s.dense.count, s.dense.count / 2 + 1024)))
                }
                var c = s.dense[i]
                if c & 0x7F == 0 { s.denseDistinct += 1 }
                if case .ok = verdict, c & 0x80 == 0 {
                    c |= 0x80
                    s.denseOKDistinct += 1
                }
                if c & 0x7F < 0x7F { c += 1 }
                s.dense[i] = c
            case .other:
                s.other[token, default: 0] += 1
            }
        }
        return verdict
    }

    func reset() {
        state.withLockedValue { $0 = State() }
    }

    struct Snapshot: Sendable {
        var providers: [Provider: PerProvider]
        var denseDistinct: Int
        var denseOKDistinct: Int
        var denseCapacity: Int
        var otherDistinct: Int
        var latency: Histogram<UInt64>
        var firstOK: UInt64
        var lastOK: UInt64
        var received: Int { providers.values.reduce(0) { $0 + $1.received } }
        var ok: Int { providers.values.reduce(0) { $0 + $1.ok } }
    }

    var snapshot: Snapshot {
        state.withLockedValue { s in
            Snapshot(
                providers: s.providers, denseDistinct: s.denseDistinct, denseOKDistinct: s.denseOKDistinct,
                denseCapacity: s.dense.count, otherDistinct: s.other.count, latency: s.latency,
                firstOK: s.firstOK, lastOK: s.lastOK)
        }
    }

    /// Bench sequence numbers below `below` never answered OK (live tokens only), at most `limit`.
    func missing(below: Int, deadEvery: Int?, limit: Int = 1000) -> [Int] {
        state.withLockedValue { s in
            var out: [Int] = []
            for i in 0..<below {
                if BenchToken.isDead(i, every: deadEvery) { continue }
                let c = i < s.dense.count ? s.dense[i] : 0
                if c & 0x80 == 0 {
                    out.append(i)
                    if out.count >= limit { break }
                }
            }
            return out
        }
    }

    /// `GET /__mock/stats` JSON. With `tokens`, also every non-bench token with its count.
    func statsJSON(tokens: Bool) -> String {
        let snap = snapshot
        let other = tokens ? state.withLockedValue { $0.other } : [:]
        var out = "{"
        out += "\"received\":\(snap.received),\"ok\":\(snap.ok)"
        for p in Provider.allCases {
            let c = snap.providers[p] ?? PerProvider()
            out += ",\"\(p.rawValue)\":{\"received\":\(c.received),\"ok\":\(c.ok),\"dead\":\(c.dead),\"injected\":\(c.injected)}"
        }
        out += ",\"bench_tokens\":{\"distinct\":\(snap.denseDistinct),\"ok_distinct\":\(snap.denseOKDistinct)}"
        out += ",\"other_tokens\":{\"distinct\":\(snap.otherDistinct)}"
        let h = snap.latency
        out +=
            ",\"latency_us\":{\"count\":\(h.totalCount),\"p50\":\(h.valueAtPercentile(50)),\"p90\":\(h.valueAtPercentile(90)),\"p99\":\(h.valueAtPercentile(99)),\"p999\":\(h.valueAtPercentile(99.9)),\"max\":\(h.max)}"
        out += ",\"first_ok_ns\":\(snap.firstOK),\"last_ok_ns\":\(snap.lastOK),\"now_ns\":\(monotonicNanos())"
        if tokens {
            out += ",\"tokens\":{"
            var first = true
            for (k, v) in other.sorted(by: { $0.key < $1.key }) {
                if !first { out += "," }
                first = false
                out += "\"\(k.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\":\(v)"
            }
            out += "}"
        }
        out += "}"
        return out
    }
}
