import APNs
import AsyncHTTPClient
import FCM
import Foundation
import HTTP2Pool
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PushDispatch
import QueueStore
import PushgateCore
import WebPush

/// Builds a gateway from configuration: providers, queue, dispatcher, feedback sender.
public enum GatewayBuilder {
    public static func build(
        raw: RawConfig,
        logger: Logger = Logger(label: "pushgate"),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws -> Gateway {
        let settings = try GatewaySettings(raw)
        for w in raw.warnings { logger.warning("\(w)") }

        let providers = try ProviderSet.make(raw: raw, logger: logger, eventLoopGroup: eventLoopGroup)
        let httpClient = providers.httpClient
        let slots = providers.slots
        var hooks = providers.hooks
        var unavailable: [Platform: String] = [:]
        unavailable[.huawei] = "platform huawei is not supported by Pushgate (Huawei HMS)"
        if raw.bool("huawei.enabled") {
            logger.warning("huawei.enabled is true but Huawei HMS is not supported; huawei notifications are answered with a failed entry")
        }

        let engine: any QueueEngine
        do {
            engine = try QueueWiring.make(raw: raw, settings: settings, logger: logger)
        } catch {
            // The providers and the HTTP client exist already: close them before failing startup.
            let opened = hooks
            _ = try? BlockingStartup.run(timeout: 10, what: "closing the providers") {
                for hook in opened { await hook() }
                try await httpClient.shutdown()
            }
            throw error
        }
        let feedback = settings.feedbackURL.isEmpty ? nil : FeedbackSender(
            url: settings.feedbackURL, headers: settings.feedbackHeaders, client: httpClient, logger: Logger(label: "pushgate.feedback"))
        MetricsSetup.bootstrap()
        let dispatcher = Dispatcher(
            providers: slots,
            unavailable: unavailable,
            engine: engine,
            policy: RetryPolicy(baseDelay: settings.retryBackoff, maxDelay: settings.retryBackoffMax),
            feedback: feedback,
            hideToken: settings.hideToken,
            answer: .init(maxMessageBytes: settings.maxLogMessageBytes, maxAnswerBytes: settings.maxSyncAnswerBytes,
                          syncTimeout: Double(settings.syncTimeout)),
            logger: Logger(label: "pushgate.dispatch")
        )
        hooks.append { try? await httpClient.shutdown() }
        let enabled = slots.map { $0.provider.platform.name }.joined(separator: ", ")
        logger.info("providers enabled: \(enabled.isEmpty ? "none" : enabled)")
        return Gateway(raw: raw, settings: settings, dispatcher: dispatcher, feedback: feedback, logger: logger, shutdownHooks: hooks)
    }
}

/// The providers a configuration enables, with the shared outbound HTTP client (OAuth, feedback)
/// and the hooks that close them. Used by the gateway and by `pushgate send`.
public struct ProviderSet: Sendable {
    public var slots: [ProviderSlot]
    public var httpClient: HTTPClient
    public var hooks: [@Sendable () async -> Void]

    public static func make(raw: RawConfig, logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws -> ProviderSet {
        let caFile = raw.string("core.ca_file")
        var extraRoots: [String] = []
        if !caFile.isEmpty {
            guard let pem = try? String(contentsOfFile: caFile, encoding: .utf8), pem.contains("BEGIN CERTIFICATE") else {
                throw ConfigError(key: "core.ca_file", problem: "\(caFile) holds no PEM certificate")
            }
            extraRoots.append(pem)
        }
        var poolConfig = HTTP2PoolConfiguration()
        do {
            poolConfig.tlsConfiguration = try HTTP2PoolConfiguration.tls(extraRootsPEM: extraRoots)
        } catch {
            throw ConfigError(key: "core.ca_file", problem: "cannot use \(caFile): \(error)")
        }

        var clientTLS = TLSConfiguration.makeClientConfiguration()
        if !extraRoots.isEmpty {
            do {
                let certs = try extraRoots.flatMap { try NIOSSLCertificate.fromPEMBytes(Array($0.utf8)) }
                clientTLS.additionalTrustRoots = [.certificates(certs)]
            } catch {
                throw ConfigError(key: "core.ca_file", problem: "cannot parse \(caFile): \(error)")
            }
        }
        var clientConfig = HTTPClient.Configuration(tlsConfiguration: clientTLS, redirectConfiguration: .disallow)
        clientConfig.timeout = .init(connect: .seconds(10), read: .seconds(Int64(raw.int("core.feedback_timeout"))))
        let httpClient = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: clientConfig)
        var hooks: [@Sendable () async -> Void] = []

        var slots: [ProviderSlot] = []
        do {
            if raw.bool("ios.enabled") {
                let apnsConfig: APNsConfiguration
                do {
                    let keyB64 = raw.string("ios.key_base64")
                    if raw.string("ios.key_path").isEmpty, !keyB64.isEmpty {
                        guard let data = Data(base64Encoded: keyB64), let pem = String(data: data, encoding: .utf8) else {
                            throw ConfigError(key: "ios.key_base64", problem: "not base64 of a .p8 PEM key")
                        }
                        apnsConfig = try APNsConfiguration(
                            keyPEM: pem, keyID: raw.string("ios.key_id"), teamID: raw.string("ios.team_id"),
                            production: raw.bool("ios.production"), topic: raw.string("ios.topic"), endpoint: raw.string("ios.endpoint"),
                            maxRetry: raw.int("ios.max_retry"), connectionsPerEnvironment: raw.int("ios.connections"))
                    } else {
                        apnsConfig = try APNsConfiguration(
                            keyPath: raw.string("ios.key_path"), keyID: raw.string("ios.key_id"), teamID: raw.string("ios.team_id"),
                            production: raw.bool("ios.production"), topic: raw.string("ios.topic"), endpoint: raw.string("ios.endpoint"),
                            maxRetry: raw.int("ios.max_retry"), connectionsPerEnvironment: raw.int("ios.connections"))
                    }
                } catch let e as APNsConfigurationError {
                    throw ConfigError(key: e.key, problem: e.problem)
                }
                let provider: APNsProvider
                do {
                    provider = try APNsProvider(configuration: apnsConfig, poolConfiguration: poolConfig, eventLoopGroup: eventLoopGroup, logger: Logger(label: "pushgate.apns"))
                } catch {
                    throw ConfigError(key: error.key, problem: error.problem)
                }
                slots.append(ProviderSlot(provider: provider, maxRetry: apnsConfig.maxRetry, concurrency: raw.int("ios.max_concurrent_pushes")))
                hooks.append { await provider.shutdown() }
            }
            if raw.bool("android.enabled") {
                let fcmConfig: FCMConfiguration
                do {
                    fcmConfig = try FCMConfiguration(
                        keyPath: raw.string("android.key_path"), credential: raw.string("android.credential"),
                        endpoint: raw.string("android.endpoint"), maxRetry: raw.int("android.max_retry"))
                } catch {
                    throw ConfigError(key: "android", problem: error.description)
                }
                let provider: FCMProvider
                do {
                    provider = try FCMProvider(configuration: fcmConfig, httpClient: httpClient, poolConfiguration: poolConfig, eventLoopGroup: eventLoopGroup, logger: Logger(label: "pushgate.fcm"))
                } catch {
                    throw ConfigError(key: "android", problem: error.description)
                }
                slots.append(ProviderSlot(provider: provider, maxRetry: fcmConfig.maxRetry, concurrency: raw.int("android.max_concurrent_pushes")))
                hooks.append { await provider.shutdown() }
            }
            try WebPushWiring.add(raw: raw, poolConfig: poolConfig, httpClient: httpClient, eventLoopGroup: eventLoopGroup, slots: &slots, hooks: &hooks)
        } catch {
            try? httpClient.syncShutdown()
            throw error
        }
        return ProviderSet(slots: slots, httpClient: httpClient, hooks: hooks)
    }
}

enum WebPushWiring {
    /// Web Push (platform 4) and UnifiedPush (platform 5) share one engine: VAPID keys, tokens and connections.
    static func add(raw: RawConfig, poolConfig: HTTP2PoolConfiguration, httpClient: HTTPClient, eventLoopGroup: any EventLoopGroup,
                    slots: inout [ProviderSlot], hooks: inout [@Sendable () async -> Void]) throws {
        let web = raw.bool("webpush.enabled"), up = raw.bool("unifiedpush.enabled")
        guard web || up else { return }
        var config = WebPushConfiguration(vapidPrivateKey: raw.string("webpush.vapid_private_key"), vapidSubject: raw.string("webpush.vapid_subject"))
        config.allowHTTP = raw.bool("webpush.allow_http")
        config.allowPrivateEndpoints = raw.bool("webpush.allow_private_endpoints")
        let allow = raw.list("webpush.host_allowlist")
        config.hostAllowlist = allow.isEmpty ? nil : allow
        config.defaultTTL = raw.int("webpush.default_ttl")
        config.maxRetry = raw.int("webpush.max_retry")
        let engine: WebPushEngine
        do {
            engine = try WebPushEngine(configuration: config, poolConfiguration: poolConfig, eventLoopGroup: eventLoopGroup, logger: Logger(label: "pushgate.webpush"))
        } catch let e as WebPushConfigurationError {
            throw ConfigError(key: "webpush", problem: e.description)
        } catch {
            throw ConfigError(key: "webpush", problem: "\(error)")
        }
        let concurrency = raw.int("webpush.max_concurrent_pushes")
        if web { slots.append(ProviderSlot(provider: WebPushProvider(engine: engine), maxRetry: config.maxRetry, concurrency: concurrency)) }
        if up { slots.append(ProviderSlot(provider: UnifiedPushProvider(engine: engine), maxRetry: raw.int("unifiedpush.max_retry"), concurrency: concurrency)) }
        hooks.append { await engine.shutdown() }
    }
}
