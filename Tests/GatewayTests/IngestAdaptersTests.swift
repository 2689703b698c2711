import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HTTPTypes
import HummingbirdTesting
import Logging
import MockProviders
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore
import XCTest

@testable import GatewayCore
@testable import GorushRPC
@testable import HTTPIngest
@testable import PushgateKit

/// HTTP (`POST /api/push`), gRPC (`proto.Gorush/Send`) and the embedding API (`PushgateGateway`)
/// are adapters over one `Gateway.accept`: one table of requests, each way in on a gateway of its
/// own built from the same configuration, the same outcome from each.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class IngestAdaptersTests: XCTestCase {
    /// What became of a request, as each way in says it.
    enum Outcome: Equatable {
        case accepted, replayed, invalid, unknownApp, forbidden, unauthenticated, rateLimited, idempotencyMismatch
    }

    /// One request of the table: who sends it (a key), for which app, with which tokens, with an
    /// idempotency key; and the outcome every way in must give.
    struct Row {
        var name: String
        var key: String?
        var app: String?
        var tokens: [String]
        var idempotencyKey: String? = nil
        var expect: Outcome
    }

    static let badToken = String(repeating: "ab", count: 2100)  // 4,200 bytes: over core.max_token_bytes (4,096)

    static let table: [Row] = [
        Row(name: "valid, admin key, default app", key: MultiAppTests.adminKey, app: nil, tokens: [MultiAppTests.token(1)], expect: .accepted),
        Row(name: "valid, app key, own app", key: MultiAppTests.chatKey, app: "chat-t", tokens: [MultiAppTests.token(2)], expect: .accepted),
        Row(name: "a token over core.max_token_bytes", key: MultiAppTests.adminKey, app: nil, tokens: [badToken], expect: .invalid),
        Row(name: "unknown app", key: MultiAppTests.adminKey, app: "nope", tokens: [MultiAppTests.token(3)], expect: .unknownApp),
        Row(name: "app key naming another app", key: MultiAppTests.chatKey, app: "wallet-t", tokens: [MultiAppTests.token(4)], expect: .forbidden),
        Row(name: "wrong key", key: "not-a-configured-key-0123456789", app: nil, tokens: [MultiAppTests.token(5)], expect: .unauthenticated),
        Row(name: "no key", key: nil, app: nil, tokens: [MultiAppTests.token(5)], expect: .unauthenticated),
        // wallet's rate_limit is 1 delivery a second and the gateway's clock stands still: the
        // first request takes the second's only delivery.
        Row(name: "rate limit, first", key: MultiAppTests.walletKey, app: "wallet-t", tokens: [MultiAppTests.token(6)], expect: .accepted),
        Row(name: "rate limit, over", key: MultiAppTests.walletKey, app: "wallet-t", tokens: [MultiAppTests.token(7)], expect: .rateLimited),
        Row(
            name: "idempotency key, first", key: MultiAppTests.adminKey, app: nil, tokens: [MultiAppTests.token(8)], idempotencyKey: "k-1",
            expect: .accepted),
        Row(
            name: "idempotency key, same request", key: MultiAppTests.adminKey, app: nil, tokens: [MultiAppTests.token(8)], idempotencyKey: "k-1",
            expect: .replayed),
        Row(
            name: "idempotency key, another request", key: MultiAppTests.adminKey, app: nil, tokens: [MultiAppTests.token(9)], idempotencyKey: "k-1",
            expect: .idempotencyMismatch),
    ]

    /// A live gateway (HTTP and gRPC listeners) with the table's apps and keys, its clock standing still.
    func withGateway(
        _ env: TestEnvironment,
        _ body: @escaping @Sendable (any TestClientProtocol, GRPCClient<HTTP2ClientTransport.Posix>, Gateway) async throws -> Void
    ) async throws {
        let environment = MultiAppTests.keys.merging(["PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0"])
        {
            _, n in n
        }
        // Apps of their own (metrics are per process: other suites count chat's and wallet's sends).
        func ios(_ name: String, _ key: TestAPNsKey) -> String {
            "    ios: { key_path: \"\(env.directory)/\(name).p8\", key_id: \"\(key.keyID)\", team_id: \"\(key.teamID)\", "
                + "topic: com.example.\(name), endpoint: \"\(env.apns.baseURL)\" }\n"
        }
        let apps =
            "apps:\n  - id: chat-t\n    api_keys: [\"\(MultiAppTests.chatKey)\"]\n" + ios("chat", env.chatKey)
            + "  - id: wallet-t\n    api_keys: [\"\(MultiAppTests.walletKey)\"]\n    rate_limit: 1\n" + ios("wallet", env.walletKey)
        let raw = try RawConfig(yaml: env.merge(env.yaml(), apps), environment: environment)
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger, clock: { 1_000_000 })
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let app = try gateway.makeApplication(extraServices: [server])
        try await app.test(.live) { http in
            let port = try await server.listeningPort
            try await withGRPCClient(transport: try GorushRPCTests.transport(port: port, caPEM: nil)) { rpc in
                // The client connected and the gateway serving before any row (the health check is open).
                let health = try await GorushRPCTests.health(rpc)
                XCTAssertEqual(health, .serving)
                try await body(http, rpc, gateway)
            }
        }
    }

    // MARK: each way in, its answer mapped to an Outcome

    static func viaHTTP(_ row: Row, _ client: any TestClientProtocol) async throws -> (Outcome?, String) {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let key = row.key { headers[.authorization] = "Bearer \(key)" }
        if let k = row.idempotencyKey { headers[HTTPField.Name("Idempotency-Key")!] = k }
        let tokens = row.tokens.map { "\"\($0)\"" }.joined(separator: ",")
        let app = row.app.map { #""app_id":"\#($0)","# } ?? ""
        let body = #"{\#(app)"notifications":[{"tokens":[\#(tokens)],"platform":1,"message":"hi"}]}"#
        return try await client.execute(uri: "/api/push", method: .post, headers: headers, body: ByteBuffer(string: body)) { r in
            let text = String(buffer: r.body)
            let outcome: Outcome?
            switch r.status.code {
            case 200: outcome = r.headers[HTTPField.Name("Idempotent-Replayed")!] == "true" ? .replayed : .accepted
            case 400: outcome = text.contains("Unknown app.") ? .unknownApp : .invalid
            case 401: outcome = .unauthenticated
            case 403: outcome = .forbidden
            case 422: outcome = .idempotencyMismatch
            case 429: outcome = .rateLimited
            default: outcome = nil
            }
            return (outcome, "\(r.status.code) \(text)")
        }
    }

    static func viaGRPC(_ row: Row, _ client: GRPCClient<HTTP2ClientTransport.Posix>) async throws -> (Outcome?, String) {
        var request = Proto_NotificationRequest()
        request.platform = 1
        request.tokens = row.tokens
        request.message = "hi"
        var metadata: Metadata = [:]
        if let key = row.key { metadata.addString("Bearer \(key)", forKey: "authorization") }
        if let app = row.app { metadata.addString(app, forKey: "app-id") }
        if let k = row.idempotencyKey { metadata.addString(k, forKey: "idempotency-key") }
        do {
            let (_, answer) = try await GorushRPCTests.send(client, request, metadata: metadata)
            let replayed = answer[stringValues: "idempotent-replayed"].contains { $0 == "true" }
            return (replayed ? .replayed : .accepted, "OK")
        } catch let e as RPCError {
            let outcome: Outcome?
            switch e.code {
            case .invalidArgument: outcome = e.message.contains("Unknown app.") ? .unknownApp : .invalid
            case .unauthenticated: outcome = .unauthenticated
            case .permissionDenied: outcome = .forbidden
            case .failedPrecondition: outcome = .idempotencyMismatch
            case .resourceExhausted: outcome = e.message.contains("rate_limit") ? .rateLimited : nil
            default: outcome = nil
            }
            return (outcome, "\(e.code) \(e.message)")
        }
    }

    static func viaLibrary(_ row: Row, _ gateway: PushgateGateway) async throws -> (Outcome?, String) {
        var n = PushNotification(platform: .ios, tokens: row.tokens)
        n.message = "hi"
        do {
            let s = try await gateway.submit(PushRequest(notifications: [n]), app: row.app, idempotencyKey: row.idempotencyKey, apiKey: row.key ?? "")
            return (s.replayed ? .replayed : .accepted, "\(s)")
        } catch let e as PushgateError {
            let outcome: Outcome?
            switch e {
            case .invalidNotification: outcome = .invalid
            case .unknownApp: outcome = .unknownApp
            case .forbidden: outcome = .forbidden
            case .unauthorized: outcome = .unauthenticated
            case .rateLimited: outcome = .rateLimited
            case .idempotencyMismatch: outcome = .idempotencyMismatch
            default: outcome = nil
            }
            return (outcome, e.description)
        }
    }

    func testOneTableThroughEveryWayIn() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let answers = NIOLockedValueBox<[String: [String]]>([:])
        for way in ["http", "grpc", "library"] {
            try await withGateway(env) { http, rpc, gateway in
                let library = PushgateGateway(serving: gateway)
                var seen: [String] = []
                for row in Self.table {
                    let (outcome, said): (Outcome?, String)
                    switch way {
                    case "http": (outcome, said) = try await Self.viaHTTP(row, http)
                    case "grpc": (outcome, said) = try await Self.viaGRPC(row, rpc)
                    default: (outcome, said) = try await Self.viaLibrary(row, library)
                    }
                    XCTAssertEqual(outcome, row.expect, "\(way): \(row.name): \(said)")
                    seen.append("\(row.name): \(outcome.map { "\($0)" } ?? "?")")
                }
                answers.withLockedValue { $0[way] = seen }
            }
        }
        let all = answers.withLockedValue { $0 }
        XCTAssertEqual(all.count, 3)
        XCTAssertEqual(all["http"], all["grpc"])
        XCTAssertEqual(all["http"], all["library"])
    }

    /// The invalid request names its field the same way whichever way it came in.
    func testARefusalNamesTheSameFieldEverywhere() async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        let row = Self.table[2]
        try await withGateway(env) { http, rpc, gateway in
            let (_, h) = try await Self.viaHTTP(row, http)
            let (_, g) = try await Self.viaGRPC(row, rpc)
            let (_, l) = try await Self.viaLibrary(row, PushgateGateway(serving: gateway))
            for said in [h, g, l] {
                XCTAssertTrue(said.contains("tokens[0]") && said.contains("core.max_token_bytes"), said)
            }
        }
    }
}
