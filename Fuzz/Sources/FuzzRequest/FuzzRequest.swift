// libFuzzer target: the `/api/push` body decoder and validation, and every provider rendering that
// runs on a decoded notification at ingest or dispatch. A crash, a trap (overflow, bad conversion,
// out-of-range index), a broken property below (reported with `fatalError`), a timeout or an
// out-of-memory is a finding. See docs/fuzzing.md.
//
// Per input:
//  1. `RequestParser.parse(input, limits: registeredLimits)` then `registeredLimits.check` (what
//     `/api/push` runs). On success, per notification, through the registry: its module's
//     `checkIngest` (ingest) and `checkRendering` (what `prepare` renders at dispatch, for every
//     target, checked by the module: valid JSON, within the provider's limits; each provider's own
//     file, e.g. `Sources/APNs/APNsRenderingCheck.swift`). On failure: the 4xx answer
//     (`RequestError.json`) must be valid JSON and the status a 4xx.
//  2. `JSONParser.parse` alone with small limits: a document accepted under small limits is accepted
//     under the defaults with the same value.
//  3. Round trip: for any document `JSONParser` accepts, `JSONWriter` output parses again to the same
//     value (integral doubles compared as the integers the writer prints them as, see `normalized`),
//     and writing that value again gives the same bytes.
import CFuzzerDriver
import Foundation
import Providers
import PushgateCore

/// Limits large enough for anything the renderers produce (the checks are of syntax, not size).
let outputLimits = JSONLimits(maxDepth: 256, maxObjectKeys: 1 << 22, maxValues: 1 << 26, maxStringBytes: 1 << 28)
/// Small limits, so the fuzzer reaches every limit error quickly.
let smallLimits = JSONLimits(maxDepth: 4, maxObjectKeys: 8, maxValues: 64, maxStringBytes: 64)
/// Defaults of JSONParser (deep enough for any request `registeredLimits` accepts).
let defaultLimits = JSONLimits()
/// The default limits with every registered provider module's platform rules, as the gateway parses.
let registeredLimits: RequestLimits = ProviderRegistry.requestLimits
/// The deliveries `n` asks for, by its platform's registered rules.
func targets(_ n: PushNotification) -> [PushTarget] { n.targets(registeredLimits.platforms[n.platform]) }
/// Small request limits, so every "over a limit" answer is reached by short inputs.
let smallRequestLimits: RequestLimits = {
    var l = registeredLimits
    l.maxNotifications = 3
    l.maxDeliveries = 4
    l.maxTokens = [.ios: 2, .android: 2, .huawei: 1, .webpush: 2]  // unifiedpush: the fallback
    l.maxTokenBytes = 80
    l.maxFieldBytes = 16
    l.maxMessageBytes = 64
    l.maxObjectKeys = 6
    l.maxDepth = 5
    return l
}()
/// `PUSHGATE_FUZZ_VERBOSE=1`: print what each stage answered (run the binary on one file to see it).
let verbose = ProcessInfo.processInfo.environment["PUSHGATE_FUZZ_VERBOSE"] == "1"

func note(_ s: @autoclosure () -> String) {
    if verbose { print(s()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRequest(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size > 0 && data != nil ? Array(UnsafeBufferPointer(start: data, count: size)) : []
    fuzzRequestParser(bytes)
    fuzzSmallLimits(bytes)
    fuzzJSONParser(bytes)
    return 0
}

func mustBeJSON(_ bytes: [UInt8], _ what: @autoclosure () -> String) {
    do {
        _ = try JSONParser.parse(bytes, limits: outputLimits)
    } catch {
        fatalError("\(what()) is not valid JSON (\(error)): \(String(decoding: bytes.prefix(400), as: UTF8.self))")
    }
}

func fuzzRequestParser(_ bytes: [UInt8]) {
    let request: PushRequest
    do {
        request = try RequestParser.parse(bytes, limits: registeredLimits)
    } catch {
        guard (400..<500).contains(error.status), !error.message.isEmpty else {
            fatalError("RequestParser answered \(error.status) \(error.message)")
        }
        mustBeJSON(error.json, "RequestError.json")
        note("RequestParser: \(error.status) \(error)")
        return
    }
    note("RequestParser: accepted \(request.notifications.count) notification(s)")
    // The request's rules as a whole, as the gateway holds every way in to them.
    if let problem = registeredLimits.check(request) {
        guard (400..<500).contains(problem.status), !problem.message.isEmpty else {
            fatalError("RequestLimits.check answered \(problem.status) \(problem.message)")
        }
        mustBeJSON(problem.json, "RequestLimits.check's RequestError.json")
        note("RequestLimits.check: \(problem.status) \(problem)")
        return
    }
    for n in request.notifications {
        renderForProviders(n)
        // A `fallback` is rendered by the same code when the notification is over the limit.
        if let f = n.fallback?.notification {
            precondition(targets(f) == targets(n) && f.platform == n.platform && f.fallback == nil, "a fallback changed the targets")
            renderForProviders(f)
        }
    }
}

/// The same body under small limits: a 4xx naming the limit, or (if it fits) the same request as
/// under the defaults. The defaults are at least as large as every small limit, except that a
/// notification count of 0 (no limit) is not used.
func fuzzSmallLimits(_ bytes: [UInt8]) {
    do {
        let small = try RequestParser.parse(bytes, limits: smallRequestLimits)
        guard let full = try? RequestParser.parse(bytes, limits: registeredLimits) else {
            fatalError("accepted under small request limits but refused under the defaults")
        }
        precondition(
            small.notifications == full.notifications && small.sync == full.sync,
            "different requests under small and default limits")
    } catch {
        guard (400..<500).contains(error.status), !error.message.isEmpty else {
            fatalError("RequestParser (small limits) answered \(error.status) \(error.message)")
        }
        mustBeJSON(error.json, "RequestError.json")
        note("RequestParser (small limits): \(error.status) \(error)")
    }
}

/// What runs on one accepted notification: its provider module's ingest checks (what
/// `Gateway.accept` runs for the platform), then its rendering as `prepare` would make it, checked by
/// the module (`ProviderModule.checkRendering`: JSON, within the provider's limits).
func renderForProviders(_ n: PushNotification) {
    let module = ProviderRegistry.module(for: n.platform)
    note("  \(n.platform): \(targets(n).count) target(s)")
    let moduleProblem = module?.checkIngest(n)
    note("  \(n.platform) module checkIngest: \(moduleProblem.map { "\($0.message) \($0.detail)" } ?? "ok")")
    for line in module?.checkRendering(n, targets: targets(n)) ?? [] { note("  \(line)") }
}

func fuzzJSONParser(_ bytes: [UInt8]) {
    // Small limits: every limit error reachable; an accepted document is accepted by the defaults too.
    if let small = try? JSONParser.parse(bytes, limits: smallLimits) {
        guard let full = try? JSONParser.parse(bytes, limits: defaultLimits) else {
            fatalError("accepted under small limits but refused under the defaults")
        }
        precondition(small == full, "different values under small and default limits")
    }

    // Round trip through JSONWriter.
    guard let value = try? JSONParser.parse(bytes, limits: defaultLimits) else { return }
    var w1 = JSONWriter()
    w1.write(value)
    let again: JSONValue
    do {
        again = try JSONParser.parse(w1.bytes, limits: defaultLimits)
    } catch {
        fatalError("JSONWriter output refused by JSONParser (\(error)): \(String(decoding: w1.bytes.prefix(400), as: UTF8.self))")
    }
    if normalized(value) != again {
        fatalError("round trip changed the value: \(String(decoding: w1.bytes.prefix(400), as: UTF8.self))")
    }
    var w2 = JSONWriter()
    w2.write(again)
    precondition(w1.bytes == w2.bytes, "writing the re-parsed value gives different bytes")
}

/// The value as JSONWriter prints it: an integral double of magnitude below 1e15 is written without
/// a fraction (`1.0` -> `1`, `-0.0` -> `0`), so it parses back as an integer. Everything else is
/// written exactly (Swift prints the shortest text that parses back to the same double).
func normalized(_ v: JSONValue) -> JSONValue {
    switch v {
    case .double(let d) where d.isFinite && d == d.rounded() && abs(d) < 1e15:
        return .int(Int64(d))
    case .array(let a):
        return .array(a.map(normalized))
    case .object(let o):
        return .object(JSONObject(o.map { ($0.key, normalized($0.value)) }))
    default:
        return v
    }
}

// SwiftPM links an executable target with `main` aliased to `<Module>_main` (so tests can link the
// module), which hides libFuzzer's own `main`; this entry point hands over to libFuzzer's driver.
@_cdecl("FuzzRequest_main")
public func fuzzRequestMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzRequest(data, size) }
}
