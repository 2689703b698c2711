import Foundation
import GorushRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import TestSupport
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// `core.tls_min_version` on the HTTP and the gRPC ingest port, over real TLS handshakes: a client
/// capped below the minimum is refused, one at the minimum is served.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
final class IngestTLSMinimumTests: XCTestCase {
    /// The gateway with core.ssl (the test PKI's leaf) and `minimum`; `body` gets the HTTP and gRPC ports.
    func withTLSGateway(minimum: String?, _ body: (_ http: Int, _ grpc: Int) async throws -> Void) async throws {
        let env = try await TestEnvironment.start()
        defer { Task { await env.stop() } }
        try env.pki.leafCertificatePEM.write(toFile: env.directory + "/ingest-cert.pem", atomically: true, encoding: .utf8)
        try env.pki.leafPrivateKeyPEM.write(toFile: env.directory + "/ingest-key.pem", atomically: true, encoding: .utf8)
        var environment = [
            "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": "0", "PUSHGATE_CORE_SSL": "true",
            "PUSHGATE_CORE_CERT_PATH": env.directory + "/ingest-cert.pem", "PUSHGATE_CORE_KEY_PATH": env.directory + "/ingest-key.pem",
        ]
        if let minimum { environment["PUSHGATE_CORE_TLS_MIN_VERSION"] = minimum }
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let gateway = try GatewayBuilder.build(raw: try RawConfig(yaml: env.yaml(), environment: environment), logger: logger)
        let server = try XCTUnwrap(try GorushRPCServer.make(gateway: gateway))
        let httpPort = NIOLockedValueBox<Int?>(nil)
        let app = try gateway.makeApplication(extraServices: [server]) { channel in
            httpPort.withLockedValue { $0 = channel.localAddress?.port }
        }
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let running = Task { try await group.run() }
        let grpcPort = try await server.listeningPort
        try await waitUntil("the HTTP port listens") { httpPort.withLockedValue { $0 } != nil }
        do {
            try await body(httpPort.withLockedValue { $0 } ?? 0, grpcPort)
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
        await group.triggerGracefulShutdown()
        try await running.value
    }

    /// The default (1.2): TLS 1.0 and 1.1 refused on both ports, 1.2 and 1.3 served.
    func testTLSBelow12IsRefusedByDefault() async throws {
        try await withTLSGateway(minimum: nil) { http, grpc in
            for (port, isGRPC) in [(http, false), (grpc, true)] {
                for version in [TLSVersion.tlsv1, .tlsv11] {
                    let outcome = await Self.handshake(port: port, grpc: isGRPC, maximum: version)
                    XCTAssertEqual(outcome, .refused, "port \(port), \(version)")
                }
                let v12 = await Self.handshake(port: port, grpc: isGRPC, minimum: .tlsv12, maximum: .tlsv12)
                XCTAssertEqual(v12, .served(.tlsv12), "port \(port)")
                let v13 = await Self.handshake(port: port, grpc: isGRPC, minimum: .tlsv13, maximum: .tlsv13)
                XCTAssertEqual(v13, .served(.tlsv13), "port \(port)")
            }
        }
    }

    /// "1.3": TLS 1.2 refused on both ports (on gRPC, closed as its handshake completes), 1.3 served.
    func testTLS13Minimum() async throws {
        try await withTLSGateway(minimum: "1.3") { http, grpc in
            for (port, isGRPC) in [(http, false), (grpc, true)] {
                let v12 = await Self.handshake(port: port, grpc: isGRPC, minimum: .tlsv12, maximum: .tlsv12)
                XCTAssertEqual(v12, .refused, "port \(port)")
                let v13 = await Self.handshake(port: port, grpc: isGRPC, minimum: .tlsv13, maximum: .tlsv13)
                XCTAssertEqual(v13, .served(.tlsv13), "port \(port)")
            }
        }
    }

    enum Outcome: Equatable {
        /// The handshake failed, or the server closed the connection before answering the probe.
        case refused
        /// The handshake completed at this version and the server answered the probe.
        case served(TLSVersion)
    }

    /// A TLS client limited to `minimum`...`maximum`, without certificate checks (the version is the
    /// point here). After the handshake it sends a probe (HTTP/1.1 `GET /healthz` on the HTTP port,
    /// the HTTP/2 preface with ALPN h2 on the gRPC port) and waits for the first answer or the close.
    static func handshake(port: Int, grpc: Bool, minimum: TLSVersion = .tlsv1, maximum: TLSVersion) async -> Outcome {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = minimum
        tls.maximumTLSVersion = maximum
        tls.certificateVerification = .none
        tls.applicationProtocols = grpc ? ["h2"] : ["http/1.1"]
        let probe = grpc ? "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" : "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
        let group = MultiThreadedEventLoopGroup.singleton
        do {
            let context = try NIOSSLContext(configuration: tls)
            let done = group.any().makePromise(of: TLSVersion?.self)
            let channel = try await ClientBootstrap(group: group).channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: nil))
                    try channel.pipeline.syncOperations.addHandler(ProbeHandler(probe: probe, done: done))
                }
            }.connect(host: "127.0.0.1", port: port).get()
            defer { channel.close(promise: nil) }
            // Either the answer or the close ends the wait; the timeout is only a backstop.
            let timeout = channel.eventLoop.scheduleTask(in: .seconds(30)) { done.succeed(nil) }
            defer { timeout.cancel() }
            guard let version = try await done.futureResult.get() else { return .refused }
            return .served(version)
        } catch {
            return .refused
        }
    }

    /// Sends `probe` once the handshake completes; completes `done` with the negotiated version at
    /// the first bytes back, nil when the connection fails or closes first.
    final class ProbeHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let probe: String
        let done: EventLoopPromise<TLSVersion?>
        private var version: TLSVersion?

        init(probe: String, done: EventLoopPromise<TLSVersion?>) {
            self.probe = probe
            self.done = done
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case .handshakeCompleted = event as? TLSUserEvent {
                version = try? context.pipeline.syncOperations.nioSSL_tlsVersion()
                context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: probe)), promise: nil)
            }
            context.fireUserInboundEventTriggered(event)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            done.succeed(version)
        }

        func errorCaught(context: ChannelHandlerContext, error: Error) {
            done.succeed(nil)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            done.succeed(nil)
            context.fireChannelInactive()
        }
    }
}
