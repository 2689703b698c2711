import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore
import SQLiteNIO
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// A queue written by the previous release is read by this one: the SQLite file and the PostgreSQL
/// dump in `Tests/system/fixtures/` were made by release 83bd60d (`testMakeFixture`) with pending
/// deliveries (scheduled ones, and retries an APNs 503 put off) of every platform, each with the
/// members its provider reads, and finished ones whose status a client may still ask for. Started on
/// them, this build sends each pending delivery to the mocks exactly as that release sent the same
/// notification (its twin, sent at once when the fixture was made), and answers the status routes
/// byte for byte as that release did.
///
/// Making a fixture (only with the release whose store it stands for, said in its commit):
/// `PUSHGATE_MAKE_STORE_FIXTURE=sqlite swift test --filter StoreUpgradeTests/testMakeFixture`, and
/// `=postgres` with `PUSHGATE_TEST_POSTGRES_URL` set (scripts/start-postgres.sh; pg_dump on the PATH).
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class StoreUpgradeTests: XCTestCase {
    static let release = "83bd60d"
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("system/fixtures")

    /// The Web Push subscriber of the fixture: its keys are fixed so that the mock of a later run can
    /// decrypt what is sent to the stored subscription.
    static func subscriber(_ id: String) throws -> TestWebPushSubscriber {
        let seed = SHA256.hash(data: Data("pushgate store fixture \(id)".utf8))
        let key = try P256.KeyAgreement.PrivateKey(rawRepresentation: Data(seed))
        return TestWebPushSubscriber(id: id, privateKey: key, authSecret: Array(SHA256.hash(data: Data(id.utf8)).prefix(16)))
    }

    static func apnsToken(_ n: Int) -> String { String(format: "%064x", n) }

    /// A notification of every platform, with the members its provider reads; `%T` is its target
    /// member (tokens or subscriptions).
    static let notifications: [(platform: String, body: String)] = [
        (
            "ios",
            #"{"platform":1,%T,"topic":"com.example.app","title":"T","message":"M","badge":3,"sound":"ping.caf","category":"C","thread-id":"th","url-args":["a"],"alert":{"subtitle":"S","loc-key":"K","loc-args":["x"]},"mutable_content":true,"interruption_level":"time-sensitive","relevance-score":0.5,"data":{"k":"v","n":1},"collapse_id":"col","expiration":4102444800,"priority":"normal","retry":2}"#
        ),
        (
            "ios",
            #"{"platform":1,%T,"topic":"com.example.app","push_type":"liveactivity","event":"update","timestamp":1700000000,"content-state":{"score":"1-0"},"stale-date":4102444800,"dismissal-date":4102448400}"#
        ),
        ("ios", #"{"platform":1,%T,"topic":"com.example.app","name":"alarm.caf","volume":0.7,"message":"M","fallback":{"message":"F"}}"#),
        (
            "android",
            #"{"platform":2,%T,"title":"T","message":"M","image":"https://example.com/i.png","sound":"s","priority":"high","collapse_id":"c","time_to_live":600,"data":{"a":"1","b":2},"android":{"ttl":"3.5s","notification":{"channel_id":"ch","proxy":"ALLOW"}},"fcm_options":{"analytics_label":"lbl"},"notification":{"title":"NT"}}"#
        ),
        (
            "huawei",
            #"{"platform":3,%T,"title":"T","message":"M","data":{"k":"v"},"huawei_notification":{"title":"HT"},"huawei_data":"{\"raw\":1}","huawei_collapse_key":5,"huawei_ttl":"86400s","bi_tag":"bt","fast_app_target":1,"category":"IM"}"#
        ),
        ("webpush", #"{"platform":4,%T,"title":"T","message":"M","data":{"url":"https://example.com"},"urgency":"high","time_to_live":60}"#),
        ("webpush", #"{"platform":4,%T,"title":"T","message":"M","declarative":true,"navigate":"https://example.com/open","silent":true}"#),
        ("unifiedpush", #"{"platform":5,%T,"message":"M","data":{"k":"v"},"urgency":"low"}"#),
        ("harmony", #"{"platform":6,%T,"title":"T","message":"M","badge":2,"data":{"k":"v"}}"#),
        ("harmony", #"{"platform":6,%T,"push_type":"voip","harmony_payload":{"extraData":"{\"call\":1}"}}"#),
    ]

    /// What the fixture holds besides the store: the mock origin its Web Push targets name, the
    /// status answers, and for each pending delivery the provider request its twin made.
    struct Manifest: Codable {
        var release: String
        var webpushOrigin: String
        /// notif_id -> `GET /api/push/{notif_id}` answer body.
        var statusAnswers: [String: String]
        /// A pending delivery's target marker -> what the provider received for its twin.
        var expected: [String: String]
    }

    /// The target member of notification `i`: "pending" (stored, sent by the next release) or "twin".
    static func target(_ i: Int, platform: String, kind: String, webpush: MockWebPush?) throws -> (member: String, marker: String) {
        let marker = "\(kind)-\(i)"
        switch platform {
        case "ios":
            return (#""tokens":["\#(apnsToken((kind == "pending" ? 0x1000 : 0x2000) + i))"]"#, apnsToken((kind == "pending" ? 0x1000 : 0x2000) + i))
        case "webpush":
            let s = try subscriber(marker)
            let endpoint = (webpush?.endpoint(id: marker)) ?? ""
            return (#""subscriptions":[{"endpoint":"\#(endpoint)","keys":{"p256dh":"\#(s.p256dh)","auth":"\#(s.auth)"}}]"#, marker)
        case "unifiedpush":
            return (#""subscriptions":[{"endpoint":"\#((webpush?.endpoint(id: marker)) ?? "")"}]"#, marker)
        default: return (#""tokens":["\#(marker)"]"#, marker)
        }
    }

    /// What a provider received for a target marker (sorted-key JSON; headers that name the attempt,
    /// such as apns-id, left out).
    static func received(_ env: TestEnvironment, marker: String) -> String? {
        var out: [Any] = []
        for r in env.apns.requests where r.token == marker && r.status == 200 {
            var headers: [String: String] = [:]
            for (k, v) in r.headers where k.lowercased().hasPrefix("apns-") && k.lowercased() != "apns-id" { headers[k.lowercased()] = v }
            out.append(["headers": headers, "payload": AnswerCorpusTests.json(r.body)])
        }
        for m in env.fcm.messages where m.target == marker {
            var message = AnswerCorpusTests.json(Array(m.messageJSON.utf8)) as? [String: Any] ?? [:]
            message["token"] = "-"
            out.append(["fcm": message])
        }
        for m in env.hms.messages where m.targets.contains(marker) {
            var message = AnswerCorpusTests.json(Array(m.messageJSON.utf8)) as? [String: Any] ?? [:]
            message["token"] = "-"
            out.append(["hms": message])
        }
        for m in env.hms.v3Messages where String(decoding: m.body, as: UTF8.self).contains(marker) {
            var payload = AnswerCorpusTests.json(Array(m.payloadJSON.utf8)) as? [String: Any] ?? [:]
            payload["target"] = "-"
            out.append(["harmony": payload, "pushOptions": AnswerCorpusTests.json(Array(m.pushOptionsJSON.utf8))])
        }
        for p in env.webpush.pushes where p.subscriptionID == marker {
            out.append([
                "plaintext": p.plaintextString, "ttl": p.ttl.map { "\($0)" } ?? "-", "urgency": p.urgency ?? "-", "encrypted": p.encrypted,
            ])
        }
        guard !out.isEmpty else { return nil }
        let data = (try? JSONSerialization.data(withJSONObject: out, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    static func harmonyAndHMS(_ env: TestEnvironment) throws -> String { try XCTUnwrap(env.stack.mock(RunningMockHMS.self)).configSnippet }

    static func statusAnswer(_ client: some TestClientProtocol, _ id: String) async throws -> String {
        try await client.execute(uri: "/api/push/\(id)", method: .get) { "\($0.status.code) " + String(buffer: $0.body) }
    }

    // MARK: making the fixture (the release it stands for)

    func testMakeFixture() async throws {
        guard let engine = ProcessInfo.processInfo.environment["PUSHGATE_MAKE_STORE_FIXTURE"] else {
            throw XCTSkip("makes the store fixture: PUSHGATE_MAKE_STORE_FIXTURE=sqlite or postgres")
        }
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        var environment = ["PUSHGATE_QUEUE_ENGINE": engine, "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": "0", "PUSHGATE_IOS_MAX_RETRY": "50"]
        let file = env.directory + "/fixture.sqlite"
        if engine == "sqlite" {
            environment["PUSHGATE_QUEUE_SQLITE_PATH"] = file
        } else {
            let url = try XCTUnwrap(ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"])
            environment["PUSHGATE_QUEUE_POSTGRES_URL"] = url
            try Self.psql(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        }
        for i in Self.notifications.indices {
            for kind in ["pending", "twin"] { env.webpush.register(try Self.subscriber("\(kind)-\(i)")) }
        }
        let statusIDs = NIOLockedValueBox<[String]>([])
        let expected = NIOLockedValueBox<[String: String]>([:])
        let statusAnswers = NIOLockedValueBox<[String: String]>([:])
        let sendAt = Int(Date().timeIntervalSince1970) + 60
        try await env.withGateway(Self.harmonyAndHMS(env), environment: environment) { client, gateway in
            for (i, n) in Self.notifications.enumerated() {
                // The twin, sent now: what the pending one must become.
                let twin = try Self.target(i, platform: n.platform, kind: "twin", webpush: env.webpush)
                let body = n.body.replacingOccurrences(of: "%T", with: twin.member)
                let r = try await client.push(#"{"notifications":[\#(body.dropLast()),"notif_id":"twin-\#(i)"}],"sync":true}"#)
                XCTAssertEqual(r.status, 200, r.body)
                let got = try XCTUnwrap(Self.received(env, marker: twin.marker), "\(n.platform) #\(i) twin: \(r.body)")
                statusIDs.withLockedValue { $0.append("twin-\(i)") }
                // The pending one: scheduled two minutes ahead, or (even ones on APNs) retried after a 503.
                let pending = try Self.target(i, platform: n.platform, kind: "pending", webpush: env.webpush)
                expected.withLockedValue { $0[pending.marker] = got }
                let pbody = n.body.replacingOccurrences(of: "%T", with: pending.member).dropLast()
                if n.platform == "ios", i % 2 == 0 {
                    env.apns.script(pending.marker, [.serviceUnavailable(retryAfter: 60)])
                    let p = try await client.push(#"{"notifications":[\#(pbody),"notif_id":"pending-\#(i)"}]}"#)
                    XCTAssertEqual(p.status, 200, p.body)
                    let tried = await eventually { !env.apns.requests(for: pending.marker).isEmpty }
                    XCTAssertTrue(tried)
                } else {
                    let p = try await client.push(#"{"notifications":[\#(pbody),"notif_id":"pending-\#(i)","send_at":\#(sendAt)}]}"#)
                    XCTAssertEqual(p.status, 200, p.body)
                }
            }
            // A dead token and a refused one, finished: their status is kept.
            env.fcm.script(token: "dead-1", responses: [.unregistered])
            let d = try await client.push(#"{"notifications":[{"notif_id":"dead-1","platform":2,"tokens":["dead-1"],"message":"x"}],"sync":true}"#)
            XCTAssertEqual(d.status, 200, d.body)
            let bad = try await client.push(#"{"notifications":[{"notif_id":"bad-1","platform":1,"tokens":["not-hex"],"message":"x"}],"sync":true}"#)
            XCTAssertEqual(bad.status, 200, bad.body)
            statusIDs.withLockedValue { $0.append(contentsOf: ["dead-1", "bad-1"]) }
            for id in statusIDs.withLockedValue({ $0 }) + Self.notifications.indices.map({ "pending-\($0)" }) {
                let answer = try await Self.statusAnswer(client, id)
                statusAnswers.withLockedValue { $0[id] = answer }
            }
            let retried = await eventually { gateway.dispatcher.queue.pendingCount == Self.notifications.count }
            XCTAssertTrue(retried, "every pending delivery still pending at the stop")
        }
        let manifest = Manifest(
            release: Self.release, webpushOrigin: env.webpush.baseURL, statusAnswers: statusAnswers.withLockedValue { $0 },
            expected: expected.withLockedValue { $0 })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let out = Self.fixtures.appendingPathComponent("store-\(Self.release)-\(engine).json")
        try encoder.encode(manifest).write(to: out)
        if engine == "sqlite" {
            // One self-contained file: the WAL checkpointed into it by the clean stop.
            XCTAssertFalse(
                FileManager.default.fileExists(atPath: file + "-wal") && ((try? Data(contentsOf: URL(fileURLWithPath: file + "-wal")).count) ?? 0) > 0
            )
            let target = Self.fixtures.appendingPathComponent("store-\(Self.release).sqlite")
            try? FileManager.default.removeItem(at: target)
            try FileManager.default.copyItem(at: URL(fileURLWithPath: file), to: target)
        } else {
            let url = try XCTUnwrap(ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"])
            let dump = try Self.run("pg_dump", ["--no-owner", "--no-privileges", "--inserts", url])
            try dump.write(to: Self.fixtures.appendingPathComponent("store-\(Self.release).pgsql"), atomically: true, encoding: .utf8)
        }
    }

    // MARK: reading it

    func testTheSQLiteStoreOfThePreviousReleaseIsDelivered() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let manifest = try Self.manifest("sqlite")
        let file = env.directory + "/upgraded.sqlite"
        try FileManager.default.copyItem(atPath: Self.fixtures.appendingPathComponent("store-\(Self.release).sqlite").path, toPath: file)
        try await Self.rewriteSQLite(file, from: manifest.webpushOrigin, to: env.webpush.baseURL)
        try await upgrade(env, manifest, ["PUSHGATE_QUEUE_ENGINE": "sqlite", "PUSHGATE_QUEUE_SQLITE_PATH": file])
    }

    func testThePostgreSQLStoreOfThePreviousReleaseIsDelivered() async throws {
        guard let url = ProcessInfo.processInfo.environment["PUSHGATE_TEST_POSTGRES_URL"], !url.isEmpty else {
            throw XCTSkip("PUSHGATE_TEST_POSTGRES_URL is not set (scripts/start-postgres.sh)")
        }
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let manifest = try Self.manifest("postgres")
        // pg_dump's `\restrict` guard lines are for psql versions that know them; the data does not need them.
        let dump = try String(contentsOf: Self.fixtures.appendingPathComponent("store-\(Self.release).pgsql"), encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix("\\restrict") && !$0.hasPrefix("\\unrestrict") }
            .joined(separator: "\n")
        try Self.psql(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        try Self.psql(url, dump.replacingOccurrences(of: manifest.webpushOrigin, with: env.webpush.baseURL))
        defer { try? Self.psql(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;") }
        try await upgrade(env, manifest, ["PUSHGATE_QUEUE_ENGINE": "postgres", "PUSHGATE_QUEUE_POSTGRES_URL": url])
    }

    static func manifest(_ engine: String) throws -> Manifest {
        let data = try Data(contentsOf: fixtures.appendingPathComponent("store-\(release)-\(engine).json"))
        return try JSONDecoder().decode(Manifest.self, from: data)
    }

    /// Starts this build on the upgraded store: every pending delivery reaches its mock as its twin
    /// did, and the finished ones' status answers are those of the release that wrote them.
    func upgrade(_ env: TestEnvironment, _ manifest: Manifest, _ environment: [String: String]) async throws {
        for i in Self.notifications.indices { env.webpush.register(try Self.subscriber("pending-\(i)")) }
        XCTAssertEqual(manifest.expected.count, Self.notifications.count)
        try await env.withGateway(Self.harmonyAndHMS(env), environment: environment) { client, gateway in
            // A Web Push token (its endpoint) names the mock's port, moved to this run's.
            let oldPort = ":" + (manifest.webpushOrigin.split(separator: ":").last.map(String.init) ?? "") + "/"
            let newPort = ":\(env.webpush.port)/"
            for (id, answer) in manifest.statusAnswers.sorted(by: { $0.key < $1.key }) where !id.hasPrefix("pending-") {
                let now = try await Self.statusAnswer(client, id)
                XCTAssertEqual(now, answer.replacingOccurrences(of: oldPort, with: newPort), "GET /api/push/\(id)")
            }
            let delivered = await eventually(timeout: 30) {
                manifest.expected.keys.allSatisfy { Self.received(env, marker: $0) != nil }
            }
            XCTAssertTrue(
                delivered, "every pending delivery of the old store sent: \(manifest.expected.keys.filter { Self.received(env, marker: $0) == nil })")
            for (marker, expected) in manifest.expected.sorted(by: { $0.key < $1.key }) {
                XCTAssertEqual(Self.received(env, marker: marker), expected, "what \(marker) became")
            }
            let drained = await eventually { gateway.dispatcher.queue.pendingCount == 0 }
            XCTAssertTrue(drained)
        }
    }

    /// The Web Push endpoints the old store names point at the mock of this run.
    static func rewriteSQLite(_ path: String, from old: String, to new: String) async throws {
        let db = try await SQLiteConnection.open(storage: .file(path: path))
        do {
            let tables = try await db.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0.column("name")?.string }
            for table in tables {
                let columns = try await db.query("SELECT name, type FROM pragma_table_info('\(table)')")
                for c in columns where (c.column("type")?.string ?? "").uppercased().contains("TEXT") || c.column("type")?.string == "" {
                    guard let name = c.column("name")?.string else { continue }
                    _ = try await db.query(
                        "UPDATE \"\(table)\" SET \"\(name)\" = replace(\"\(name)\", ?, ?) WHERE typeof(\"\(name)\") = 'text'",
                        [.text(old), .text(new)])
                }
            }
        } catch {
            try? await db.close()
            throw error
        }
        try await db.close()
    }

    @discardableResult
    static func psql(_ url: String, _ sql: String) throws -> String {
        try run("psql", ["-v", "ON_ERROR_STOP=1", "-q", url], input: sql)
    }

    static func run(_ tool: String, _ arguments: [String], input: String? = nil) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = [tool] + arguments
        let out = Pipe()
        let err = Pipe()
        p.standardOutput = out
        p.standardError = err
        let inPipe = Pipe()
        p.standardInput = inPipe
        try p.run()
        if let input { inPipe.fileHandleForWriting.write(Data(input.utf8)) }
        try inPipe.fileHandleForWriting.close()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw NSError(
                domain: tool, code: Int(p.terminationStatus), userInfo: [NSLocalizedDescriptionKey: String(decoding: errors, as: UTF8.self)])
        }
        return String(decoding: data, as: UTF8.self)
    }
}
