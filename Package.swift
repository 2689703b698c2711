// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "pushgate",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "pushgate", targets: ["pushgate"]),
        // The request model and the providers as libraries (embedding, and the fuzz targets in Fuzz/).
        .library(name: "PushgateCore", targets: ["PushgateCore"]),
        .library(name: "APNs", targets: ["APNs"]),
        .library(name: "FCM", targets: ["FCM"]),
        .library(name: "WebPush", targets: ["WebPush"]),
        .library(name: "Huawei", targets: ["Huawei"]),
        .library(name: "Harmony", targets: ["Harmony"]),
        .library(name: "WNS", targets: ["WNS"]),
        .library(name: "Xiaomi", targets: ["Xiaomi"]),
        .library(name: "Oppo", targets: ["Oppo"]),
        .library(name: "Vivo", targets: ["Vivo"]),
        .library(name: "Honor", targets: ["Honor"]),
        // The one list of provider modules (the gateway, `pushgate send`, the fuzz targets).
        .library(name: "Providers", targets: ["Providers"]),
        // The gateway in-process for Swift servers (README "Embedding Pushgate in a Swift server").
        .library(name: "PushgateKit", targets: ["PushgateKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.34.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // gRPC ingest (gorush.proto): the GorushRPC target only.
        .package(url: "https://github.com/grpc/grpc-swift-2.git", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport.git", from: "2.9.2"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        // Tracing (docs/observability.md): the span API everywhere, the OTLP exporter in `serve` only.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0"),
    ],
    targets: [
        // Request model, gorush JSON, outcomes, error classes. No I/O.
        .target(name: "PushgateCore"),
        // One small JWS signer (ES256 / RS256) shared by APNs, FCM and VAPID.
        .target(
            name: "Signing",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]),
        // HTTP/2 client connection pool on swift-nio-http2.
        .target(
            name: "HTTP2Pool",
            dependencies: [
                "PushgateCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        // What a provider module declares (config section, ingest checks, how it is built); the
        // registry in Server lists one module per provider folder.
        .target(
            name: "ProviderKit",
            dependencies: [
                "PushgateCore", "HTTP2Pool",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .target(
            name: "APNs",
            dependencies: [
                "PushgateCore", "Signing", "HTTP2Pool", "ProviderKit",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                // Certificate auth: .p12/.pem loading (BoringSSL), the certificate's topics and dates, its expiry gauge.
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]),
        .target(
            name: "FCM",
            dependencies: [
                "PushgateCore", "Signing", "HTTP2Pool", "ProviderKit",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        // Huawei HMS Push Kit (gorush platform 3): OAuth client credentials, messages:send.
        .target(
            name: "Huawei",
            dependencies: [
                "PushgateCore", "HTTP2Pool", "ProviderKit",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/Huawei/Provider"),
        // Huawei's mock: HMS Push Kit and its OAuth token endpoint on one TLS server.
        .target(
            name: "HuaweiMock",
            dependencies: [
                "MockKit", "PushgateCore",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ], path: "Sources/Huawei/Mock"),
        // HarmonyOS Push Kit v3 (platform 6): service-account JWT (PS256), push-type; HMS's answers.
        .target(
            name: "Harmony",
            dependencies: [
                "PushgateCore", "HTTP2Pool", "ProviderKit", "Signing", "Huawei",
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/Harmony/Provider"),
        // HarmonyOS's mock: the v3 endpoint, served on the HMS mock's server with its answers.
        .target(
            name: "HarmonyMock",
            dependencies: [
                "MockKit", "HuaweiMock", "Harmony", "Huawei", "Signing", "PushgateCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ], path: "Sources/Harmony/Mock"),
        // Xiaomi MiPush: `Authorization: key=<AppSecret>`, form-encoded sends, Xiaomi's answers and daily quota.
        .target(
            name: "Xiaomi",
            dependencies: [
                "PushgateCore", "ProviderKit",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/Xiaomi/Provider"),
        // The strict mock Xiaomi (tests, `pushgate mock`).
        .target(
            name: "XiaomiMock",
            dependencies: [
                "MockKit", "ProviderKit", "PushgateCore", "Xiaomi",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ], path: "Sources/Xiaomi/Mock"),
        // OPPO Push: the signed `auth_token`, form-encoded unicast sends, OPPO's answers and daily limit.
        .target(
            name: "Oppo",
            dependencies: [
                "PushgateCore", "ProviderKit",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/Oppo/Provider"),
        // The strict mock OPPO (tests, `pushgate mock`).
        .target(
            name: "OppoMock",
            dependencies: [
                "MockKit", "ProviderKit", "PushgateCore", "Oppo",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ], path: "Sources/Oppo/Mock"),
        // vivo Push: the signed `authToken` (MD5, at most 10 auth calls a second), JSON sends, vivo's answers and daily limit.
        .target(
            name: "Vivo",
            dependencies: [
                "PushgateCore", "ProviderKit",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/Vivo/Provider"),
        // The strict mock vivo (tests, `pushgate mock`).
        .target(
            name: "VivoMock",
            dependencies: [
                "MockKit", "ProviderKit", "PushgateCore", "Vivo",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ], path: "Sources/Vivo/Mock"),
        // Honor Push: the OAuth 2.0 client-credentials token shared by every send, JSON sends, Honor's answers and daily limit.
        .target(
            name: "Honor",
            dependencies: [
                "PushgateCore", "ProviderKit",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/Honor/Provider"),
        // The strict mock Honor (tests, `pushgate mock`).
        .target(
            name: "HonorMock",
            dependencies: [
                "MockKit", "ProviderKit", "PushgateCore", "Honor",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ], path: "Sources/Honor/Mock"),
        // Web Push (RFC 8030/8291/8292) and UnifiedPush.
        .target(
            name: "WebPush",
            dependencies: [
                "PushgateCore", "Signing", "HTTP2Pool", "ProviderKit",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        // Windows Push Notification Services (WNS): Entra / Live tokens, channel URI guard, HTTP/1.1 sends.
        .target(
            name: "WNS",
            dependencies: [
                "PushgateCore", "ProviderKit", "HTTP2Pool",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ], path: "Sources/WNS/Provider"),
        // The registry: the one list of provider modules, and what the rest reads from it.
        .target(
            name: "Providers",
            dependencies: ["PushgateCore", "ProviderKit", "APNs", "FCM", "Huawei", "Harmony", "WebPush", "WNS", "Xiaomi", "Oppo", "Vivo", "Honor"]),
        // Queues, workers, retry policy. (Named PushDispatch: "Dispatch" is the system libdispatch module.)
        .target(
            name: "PushDispatch",
            dependencies: [
                "PushgateCore",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ], path: "Sources/Dispatch"),
        // Durable queue engines (SQLite embedded, PostgreSQL shared) and delivery status records.
        .target(
            name: "QueueStore",
            dependencies: [
                "PushgateCore", "PushDispatch",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        // The gateway without a transport: typed configuration, the provider and app registries,
        // assembly and reload, and `Gateway.accept`, the one way a push request enters. HTTP, gRPC
        // and the embedding API are adapters over it; nothing here knows an HTTP server.
        .target(
            name: "GatewayCore",
            dependencies: [
                "QueueStore", "GorushRPCConfig",
                "PushgateCore", "PushDispatch", "ProviderKit", "Providers", "HTTP2Pool",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]),
        // gorush's REST API on Hummingbird (HTTP/1.1, HTTP/2 over TLS): routes and their access,
        // request limits and timeouts, mapped to and from `Gateway.accept`.
        .target(
            name: "HTTPIngest",
            dependencies: [
                "GatewayCore", "PushgateCore", "PushDispatch", "ProviderKit", "QueueStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]),
        // gRPC's configuration section and settings (`grpc:`), which the gateway's configuration reads
        // among its sections.
        .target(name: "GorushRPCConfig", dependencies: ["ProviderKit"], path: "Sources/GorushRPC/Config"),
        // gorush's gRPC ingest (gorush.proto): the generated code (scripts/generate-grpc.sh) and the services.
        .target(
            name: "GorushRPC",
            dependencies: [
                "GatewayCore", "GorushRPCConfig", "PushgateCore", "PushDispatch",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
                .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            exclude: ["Proto", "Config"]),
        // The Matrix Push Gateway API (Sygnal's /_matrix/push/v1/notify) on a listener of its own,
        // Sygnal's mapping to each provider, and sygnal.yaml read as a configuration.
        .target(
            name: "MatrixIngest",
            dependencies: [
                "GatewayCore", "PushgateCore", "PushDispatch", "Signing",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]),
        // The embedding API: a gateway built from a configuration value, run in-process (no HTTP listener).
        .target(
            name: "PushgateKit",
            dependencies: [
                "GatewayCore", "PushgateCore", "PushDispatch", "QueueStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        // The README's embedding example: depends on PushgateKit only.
        .executableTarget(name: "EmbeddedRelay", dependencies: ["PushgateKit"], path: "Examples/EmbeddedRelay"),
        // What every provider's mock is built with: the TLS HTTP/1.1 + HTTP/2 test server, the
        // throwaway PKI, and how a mock registers (`ProviderMockModule`). A provider's own mock
        // (`Sources/<Provider>/Mock`) depends on this only.
        .target(
            name: "MockKit",
            dependencies: [
                "PushgateCore", "ProviderKit",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]),
        // HTTP/2 TLS mock providers used by tests, `pushgate mock` and the bench harness, and the
        // list of every provider's mock (`MockRegistry`).
        .target(
            name: "MockProviders",
            dependencies: [
                "MockKit", "HuaweiMock", "HarmonyMock", "PushgateCore", "Signing", "APNs", "FCM", "Huawei", "Harmony", "WebPush", "ProviderKit",
                "WNSMock", "XiaomiMock", "OppoMock", "VivoMock", "HonorMock",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]),
        // The strict WNS mock (HTTPS/1.1 on loopback): both token endpoints and the channel endpoint.
        .target(
            name: "WNSMock",
            dependencies: [
                "MockKit", "PushgateCore", "ProviderKit", "WNS",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ], path: "Sources/WNS/Mock"),
        .executableTarget(
            name: "pushgate",
            dependencies: [
                "GatewayCore", "HTTPIngest", "GorushRPC", "MatrixIngest", "MockProviders", "PushgateCore", "Signing",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
            ]),
        // Shared by the test suites: the one poll-until helper.
        .target(name: "TestSupport", dependencies: ["PushgateCore", "Providers"], path: "Tests/TestSupport"),
        // Server: the provider modules' platform rules the parser is tested with (`RequestLimits.registered`).
        // Parses with the registered provider modules' platform rules (ProviderRegistry, in GatewayCore).
        .testTarget(name: "PushgateCoreTests", dependencies: ["TestSupport", "PushgateCore", "GatewayCore"]),
        .testTarget(
            name: "PushDispatchTests",
            dependencies: [
                "TestSupport", "PushDispatch", "PushgateCore",
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ], path: "Tests/DispatchTests"),
        .testTarget(
            name: "APNsTests",
            dependencies: [
                "TestSupport", "APNs", "MockProviders", "HTTP2Pool", "Signing", "PushgateCore",
            ]),
        .testTarget(
            name: "QueueStoreTests",
            dependencies: [
                "TestSupport", "QueueStore", "PushDispatch", "PushgateCore", .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(name: "SigningTests", dependencies: ["Signing"]),
        .testTarget(name: "ProviderKitTests", dependencies: ["ProviderKit", "TestSupport"]),
        .testTarget(
            name: "HTTP2PoolTests",
            dependencies: [
                "TestSupport",
                "HTTP2Pool", "MockProviders",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]),
        .testTarget(
            name: "FCMTests",
            dependencies: [
                "TestSupport", "FCM", "MockProviders", "HTTP2Pool", "Signing", "PushgateCore",
            ]),
        .testTarget(
            name: "HuaweiTests",
            dependencies: [
                "TestSupport", "Huawei", "MockProviders", "HTTP2Pool", "PushgateCore", "Signing",
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]),
        .testTarget(
            name: "XiaomiTests",
            dependencies: [
                "TestSupport", "Xiaomi", "XiaomiMock", "MockProviders", "ProviderKit", "PushgateCore",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]),
        .testTarget(
            name: "OppoTests",
            dependencies: [
                "TestSupport", "Oppo", "OppoMock", "MockProviders", "ProviderKit", "PushgateCore",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]),
        .testTarget(
            name: "VivoTests",
            dependencies: [
                "TestSupport", "Vivo", "VivoMock", "MockProviders", "ProviderKit", "PushgateCore",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]),
        .testTarget(
            name: "HonorTests",
            dependencies: [
                "TestSupport", "Honor", "HonorMock", "MockProviders", "ProviderKit", "PushgateCore",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]),
        .testTarget(
            name: "HarmonyTests",
            dependencies: [
                "TestSupport", "Harmony", "Huawei", "MockProviders", "HTTP2Pool", "PushgateCore", "Signing",
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "WebPushTests",
            dependencies: [
                "TestSupport",
                "WebPush", "MockProviders", "HTTP2Pool", "Signing", "PushgateCore", "ProviderKit",
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "WNSTests",
            dependencies: [
                "TestSupport", "WNS", "WNSMock", "MockKit", "ProviderKit", "PushgateCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "MatrixIngestTests",
            dependencies: [
                "TestSupport", "MatrixIngest", "GatewayCore", "PushgateCore", "PushDispatch", "MockProviders",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        // The gateway side imports PushgateKit only; MockProviders starts the mock APNs.
        .testTarget(name: "PushgateKitTests", dependencies: ["PushgateKit", "MockProviders", "WNSMock"]),
        .testTarget(
            name: "GatewayTests",
            dependencies: [
                "TestSupport",
                "GatewayCore", "HTTPIngest", "GorushRPC", "MatrixIngest", "PushgateKit", "MockProviders", "PushgateCore", "PushDispatch", "Signing",
                "WNSMock", "XiaomiMock", "OppoMock", "VivoMock", "HonorMock",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
