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
import TestSupport
import Tracing
import XCTest

@testable import GatewayCore
@testable import GorushRPC
@testable import HTTPIngest
@testable import PushgateKit

/// The ingest span of each way in (HTTP, gRPC, the embedding API) and the delivery attempt's span
/// under it, through the queue, recorded by a W3C-propagating test tracer bootstrapped for this
/// process (gateways with `tracing.enabled: false`, every other suite's, make no span: checked
/// here too). The OTLP export itself is `Tests/system/tracing-test.py`'s.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class IngestTracingTests: XCTestCase {
    static let tracer: RecordingTracer = {
        let t = RecordingTracer()
        InstrumentationSystem.bootstrap(t)
        return t
    }()

    let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
    let callerSpan = "00f067aa0ba902b7"
    var traceParent: String { "00-\(traceID)-\(callerSpan)-01" }

    func withGateway(
        tracing: Bool, script: [(token: String, replies: [MockAPNs.Reply])] = [],
        _ body: @escaping @Sendable (any TestClientProtocol, GRPCClient<HTTP2ClientTransport.Posix>, Gateway) async throws -> Void
    ) async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        for s in script { env.apns.script(s.token, s.replies) }
        let environment = [
            "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0",
            "PUSHGATE_TRACING_ENABLED": tracing ? "true" : "false",
        ]
        let raw = try RawConfig(yaml: env.yaml(), environment: environment)
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: raw, logger: logger, environment: environment)
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let app = try gateway.makeApplication(extraServices: [server])
        try await app.test(.live) { http in
            let port = try await server.listeningPort
            try await withGRPCClient(transport: try GorushRPCTests.transport(port: port, caPEM: nil)) { rpc in
                try await body(http, rpc, gateway)
            }
        }
    }

    /// The spans of the delivery of `notifID` and of the request whose child it is, once both ended.
    func spans(of notifID: String) async throws -> (ingest: RecordingTracer.Finished, deliver: RecordingTracer.Finished) {
        let tracer = Self.tracer
        try await waitUntil("the spans of \(notifID)", timeout: 30) {
            guard let d = tracer.find({ $0.attributes["pushgate.notif_id"] == notifID }).first else { return false }
            return !tracer.find({ $0.spanID == d.parentSpanID }).isEmpty
        }
        let d = try XCTUnwrap(tracer.find({ $0.attributes["pushgate.notif_id"] == notifID }).first)
        let i = try XCTUnwrap(tracer.find({ $0.spanID == d.parentSpanID }).first)
        return (i, d)
    }

    static func body(_ notifID: String, token: String = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90") -> String {
        #"{"notifications":[{"tokens":["\#(token)"],"platform":1,"message":"hi","notif_id":"\#(notifID)"}]}"#
    }

    func testEachWayInIsASpanAndEachAttemptItsChild() async throws {
        _ = Self.tracer
        let traceParent = self.traceParent
        try await withGateway(tracing: true) { http, rpc, gateway in
            // HTTP, with the caller's traceparent.
            let headers: HTTPFields = [
                .contentType: "application/json", HTTPField.Name("traceparent")!: traceParent, HTTPField.Name("tracestate")!: "v=1",
            ]
            try await http.execute(uri: "/api/push", method: .post, headers: headers, body: ByteBuffer(string: Self.body("t-http"))) {
                XCTAssertEqual($0.status, .ok)
            }
            // gRPC, with the traceparent in the metadata.
            var request = Proto_NotificationRequest()
            request.platform = 1
            request.tokens = ["a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"]
            request.message = "hi"
            request.id = "t-grpc"
            var metadata: Metadata = [:]
            metadata.addString(traceParent, forKey: "traceparent")
            _ = try await GorushRPCTests.send(rpc, request, metadata: metadata)
            // The embedding API, inside a span of the embedding process's own.
            let library = PushgateGateway(serving: gateway)
            var n = PushNotification(platform: .ios, tokens: ["a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"])
            n.message = "hi"
            n.notifID = "t-lib"
            let outer = startSpan("embedder handler")
            _ = try await ServiceContext.withValue(outer.context) {
                try await library.submit(PushRequest(notifications: [n]))
            }
            outer.end()
            // Refused: a span too, its status and why.
            try await http.execute(
                uri: "/api/push", method: .post, headers: headers,
                body: ByteBuffer(string: #"{"app_id":"nope","notifications":[{"platform":1,"tokens":["a1"],"message":"hi"}]}"#)
            ) { XCTAssertEqual($0.status, .badRequest) }
        }
        let http = try await spans(of: "t-http")
        XCTAssertEqual(http.ingest.name, "POST /api/push")
        XCTAssertEqual(http.ingest.kind, .server)
        XCTAssertEqual(http.ingest.traceID, traceID)
        XCTAssertEqual(http.ingest.parentSpanID, callerSpan, "the caller's span is the parent")
        XCTAssertEqual(http.ingest.attributes["pushgate.outcome"], "accepted")
        XCTAssertEqual(http.ingest.attributes["http.response.status_code"], "200")
        XCTAssertEqual(http.ingest.attributes["pushgate.deliveries"], "1")
        XCTAssertEqual(http.ingest.attributes["pushgate.app"], "default")
        XCTAssertEqual(http.deliver.name, "pushgate.deliver ios")
        XCTAssertEqual(http.deliver.kind, .client)
        XCTAssertEqual(http.deliver.traceID, traceID)
        XCTAssertEqual(http.deliver.attributes["pushgate.outcome"], "delivered")
        XCTAssertEqual(http.deliver.attributes["pushgate.attempt"], "1")
        XCTAssertEqual(http.deliver.attributes["pushgate.platform"], "ios")
        XCTAssertNotNil(http.deliver.attributes["pushgate.provider_message_id"])
        XCTAssertNil(http.deliver.attributes["pushgate.token"], "log.hide_token (default): no token in a span")
        XCTAssertFalse(http.deliver.isError)

        let rpc = try await spans(of: "t-grpc")
        XCTAssertEqual(rpc.ingest.name, "proto.Gorush/Send")
        XCTAssertEqual(rpc.ingest.traceID, traceID)
        XCTAssertEqual(rpc.ingest.parentSpanID, callerSpan)
        XCTAssertEqual(rpc.deliver.attributes["pushgate.outcome"], "delivered")

        let lib = try await spans(of: "t-lib")
        let outer = try XCTUnwrap(Self.tracer.find({ $0.name == "embedder handler" }).first)
        XCTAssertEqual(lib.ingest.name, "pushgate.ingest")
        XCTAssertEqual(lib.ingest.parentSpanID, outer.spanID, "the embedder's task-local span is the parent")
        XCTAssertEqual(lib.ingest.traceID, outer.traceID)

        let refused = try XCTUnwrap(
            Self.tracer.find({ $0.name == "POST /api/push" && $0.attributes["pushgate.outcome"] == "refused" }).first)
        XCTAssertEqual(refused.attributes["http.response.status_code"], "400")
        XCTAssertEqual(refused.attributes["pushgate.refusal"], "unknown_app")
        XCTAssertEqual(refused.attributes["pushgate.app_requested"], "nope")
        XCTAssertFalse(refused.isError, "a 4xx is the client's doing")
    }

    func testRetryAndDeadTokenAttemptsAndAMalformedTraceparent() async throws {
        _ = Self.tracer
        let dead = "dddddddd00000000000000000000000000000000000000000000000000000001"
        let flaky = "eeeeeeee00000000000000000000000000000000000000000000000000000002"
        let script: [(token: String, replies: [MockAPNs.Reply])] = [(dead, [.unregistered]), (flaky, [.serviceUnavailable(retryAfter: nil), .ok])]
        try await withGateway(tracing: true, script: script) { http, _, gateway in
            let headers: HTTPFields = [.contentType: "application/json", HTTPField.Name("traceparent")!: "00-" + String(repeating: "x", count: 400)]
            try await http.execute(uri: "/api/push", method: .post, headers: headers, body: ByteBuffer(string: Self.body("t-dead", token: dead))) {
                XCTAssertEqual($0.status, .ok)
            }
            try await http.execute(uri: "/api/push", method: .post, headers: headers, body: ByteBuffer(string: Self.body("t-retry", token: flaky))) {
                XCTAssertEqual($0.status, .ok)
            }
            try await waitUntil("t-retry's two attempts", timeout: 30) {
                Self.tracer.find({ $0.attributes["pushgate.notif_id"] == "t-retry" }).count == 2
            }
        }
        // A retry: a second attempt's span under the same request span, after a 503.
        let attempts = Self.tracer.find({ $0.attributes["pushgate.notif_id"] == "t-retry" })
        XCTAssertEqual(attempts.map { $0.attributes["pushgate.attempt"] }, ["1", "2"])
        XCTAssertEqual(attempts.map { $0.attributes["pushgate.outcome"] }, ["retry", "delivered"])
        XCTAssertEqual(attempts.first?.attributes["http.response.status_code"], "503")
        XCTAssertEqual(Set(attempts.map(\.parentSpanID)).count, 1, "both attempts are children of the request's span")
        XCTAssertEqual(attempts.map(\.isError), [true, false])
        let deadSpans = try await spans(of: "t-dead")
        XCTAssertNil(deadSpans.ingest.parentSpanID, "a malformed traceparent is no parent: a new trace")
        XCTAssertNotEqual(deadSpans.ingest.traceID, traceID)
        XCTAssertEqual(deadSpans.deliver.traceID, deadSpans.ingest.traceID)
        XCTAssertEqual(deadSpans.deliver.attributes["http.response.status_code"], "410")
        XCTAssertEqual(deadSpans.deliver.attributes["pushgate.reason"], "Unregistered")
        XCTAssertEqual(deadSpans.deliver.attributes["pushgate.outcome"], "failed")
        XCTAssertEqual(deadSpans.deliver.attributes["pushgate.token_dead"], "true")
        XCTAssertTrue(deadSpans.deliver.isError)
    }

    func testTracingOffMakesNoSpan() async throws {
        _ = Self.tracer
        let before = Self.tracer.count
        let traceParent = self.traceParent
        try await withGateway(tracing: false) { http, _, gateway in
            XCTAssertFalse(gateway.tracingEnabled)
            XCTAssertFalse(gateway.dispatcher.tracing)
            let headers: HTTPFields = [.contentType: "application/json", HTTPField.Name("traceparent")!: traceParent]
            try await http.execute(uri: "/api/push", method: .post, headers: headers, body: ByteBuffer(string: Self.body("t-off"))) {
                XCTAssertEqual($0.status, .ok)
            }
            try await waitUntil("t-off delivered", timeout: 30) { gateway.dispatcher.stats.snapshot.successTasks >= 1 }
        }
        let made = Self.tracer.find { $0.sequence >= before && ($0.name.hasPrefix("POST ") || $0.name.hasPrefix("pushgate.")) }
        XCTAssertTrue(made.isEmpty, "tracing off, yet spans: \(made.map(\.name))")
    }
}

/// A tracer keeping every ended span, propagating W3C `traceparent` (the part of OpenTelemetry's
/// tracer the gateway relies on: inject, extract, parent and trace ids).
final class RecordingTracer: Tracer, Sendable {
    struct IDs: Sendable {
        var traceID: String
        var spanID: String
    }

    enum IDsKey: ServiceContextKey {
        typealias Value = IDs
    }

    struct Finished: Sendable {
        var name: String
        var kind: SpanKind
        var traceID: String
        var spanID: String
        var parentSpanID: String?
        var attributes: [String: String]
        var isError: Bool
        /// Its place among the spans ended so far.
        var sequence: Int
    }

    final class Span: Tracing.Span, Sendable {
        let context: ServiceContext
        let kind: SpanKind
        let parent: String?
        let tracer: RecordingTracer
        private let state: NIOLockedValueBox<(name: String, attributes: SpanAttributes, error: Bool, ended: Bool)>

        init(name: String, kind: SpanKind, context: ServiceContext, parent: String?, tracer: RecordingTracer) {
            self.context = context
            self.kind = kind
            self.parent = parent
            self.tracer = tracer
            state = NIOLockedValueBox((name, [:], false, false))
        }

        var operationName: String {
            get { state.withLockedValue { $0.name } }
            set { state.withLockedValue { $0.name = newValue } }
        }
        var attributes: SpanAttributes {
            get { state.withLockedValue { $0.attributes } }
            set { state.withLockedValue { $0.attributes = newValue } }
        }
        var isRecording: Bool { state.withLockedValue { !$0.ended } }
        func setStatus(_ status: SpanStatus) { state.withLockedValue { $0.error = status.code == .error } }
        func addEvent(_ event: SpanEvent) {}
        func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant) {}
        func addLink(_ link: SpanLink) {}
        func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
            let s = state.withLockedValue { s -> (String, SpanAttributes, Bool)? in
                if s.ended { return nil }
                s.ended = true
                return (s.name, s.attributes, s.error)
            }
            guard let (name, attributes, error) = s, let ids = context[IDsKey.self] else { return }
            var flat: [String: String] = [:]
            func keep(_ key: String, _ value: SpanAttribute) {
                switch value {
                case .string(let v): flat[key] = v
                case .int64(let v): flat[key] = String(v)
                case .int32(let v): flat[key] = String(v)
                case .bool(let v): flat[key] = String(v)
                case .double(let v): flat[key] = String(v)
                default: flat[key] = "\(value)"
                }
            }
            attributes.forEach(keep)
            tracer.finished.withLockedValue {
                $0.append(
                    Finished(
                        name: name, kind: kind, traceID: ids.traceID, spanID: ids.spanID, parentSpanID: parent, attributes: flat, isError: error,
                        sequence: $0.count))
            }
        }
    }

    let finished = NIOLockedValueBox<[Finished]>([])

    var count: Int { finished.withLockedValue { $0.count } }

    func find(_ match: (Finished) -> Bool) -> [Finished] { finished.withLockedValue { $0.filter(match) } }

    static func hex(_ bytes: Int) -> String { (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined() }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind, at instant: @autoclosure () -> Instant,
        function: String, file fileID: String, line: UInt
    ) -> Span {
        var c = context()
        let parent = c[IDsKey.self]
        c[IDsKey.self] = IDs(traceID: parent?.traceID ?? Self.hex(16), spanID: Self.hex(8))
        return Span(name: operationName, kind: kind, context: c, parent: parent?.spanID, tracer: self)
    }

    func forceFlush() {}

    func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        guard let ids = context[IDsKey.self] else { return }
        injector.inject("00-\(ids.traceID)-\(ids.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract)
    where Extract.Carrier == Carrier {
        guard let tp = extractor.extract(key: "traceparent", from: carrier) else { return }
        let parts = tp.split(separator: "-")
        guard parts.count == 4 else { return }
        context[IDsKey.self] = IDs(traceID: String(parts[1]), spanID: String(parts[2]))
    }
}
