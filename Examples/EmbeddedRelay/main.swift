// An upstream Swift server running Pushgate in-process: one alert to one token through APNs, then the
// per-token outcome and the delivery status. Depends on the PushgateKit product only.
//
//     swift run pushgate mock --dir /tmp/pg-mock &          # mock APNs on https://127.0.0.1:8443
//     swift run EmbeddedRelay https://127.0.0.1:8443 /tmp/pg-mock/mock-ca.pem /tmp/pg-mock/mock-apns.p8 \
//         MOCKKEY123 MOCKTEAM12 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
//
// Arguments (or the environment variables of the same meaning): APNS_URL, APNS_CA (PEM file of the
// APNs server's CA; omit it for Apple's), APNS_KEY (.p8), APNS_KEY_ID, APNS_TEAM_ID, TOKEN; APNS_TOPIC
// (default com.example.app).
import Foundation
import PushgateKit

let env = ProcessInfo.processInfo.environment
let args = Array(CommandLine.arguments.dropFirst())
let names = ["APNS_URL", "APNS_CA", "APNS_KEY", "APNS_KEY_ID", "APNS_TEAM_ID", "TOKEN"]
@MainActor func value(_ name: String) -> String {
    if let i = names.firstIndex(of: name), i < args.count { return args[i] }
    guard let v = env[name] else {
        FileHandle.standardError.write(Data("EmbeddedRelay: \(name) is required (argument or environment)\n".utf8))
        exit(2)
    }
    return v
}
let (url, caFile, keyFile) = (value("APNS_URL"), value("APNS_CA"), value("APNS_KEY"))
let (keyID, teamID, token) = (value("APNS_KEY_ID"), value("APNS_TEAM_ID"), value("TOKEN"))

do {
    // --- the README's example starts here
    var config = PushgateConfiguration()
    config.apns = .init(
        auth: .token(key: .file(keyFile), keyID: keyID, teamID: teamID),
        topic: env["APNS_TOPIC"] ?? "com.example.app", endpoint: url)
    if !caFile.isEmpty { config.trustRootsPEM = [try String(contentsOfFile: caFile, encoding: .utf8)] }
    config.queue = .memory  // or .sqlite(path: "data/pushgate.sqlite") to keep pending pushes across restarts

    let gateway = try await PushgateGateway(configuration: config)
    var alert = PushNotification(platform: .ios, tokens: [token])
    alert.title = "Hello"
    alert.message = "From a Swift server, in-process"
    let outcomes = try await gateway.send([alert], timeout: 30)
    for o in outcomes {
        switch o.result {
        case .delivered(let apnsID): print("delivered \(o.token) apns-id \(apnsID ?? "-")")
        case .failed(let reason, let dead): print("failed \(o.token): \(reason)\(dead ? " (dead token: delete it)" : "")")
        case .pending: print("still pending \(o.token)")
        case .skipped(let why): print("not sent \(o.token): \(why.rawValue)")
        }
    }
    if let id = outcomes.first?.notifID, let records = try await gateway.status(notifID: id) {
        for r in records { print("status \(id): \(r.state.rawValue) after \(r.attempts) attempt(s)") }
    }
    await gateway.shutdown()
    // --- the README's example ends here
    exit(outcomes.allSatisfy(\.isDelivered) ? 0 : 1)
} catch {
    // PushgateError's description is one line (`config error: ios.key_path: …`).
    FileHandle.standardError.write(Data("EmbeddedRelay: \(error)\n".utf8))
    exit(1)
}
