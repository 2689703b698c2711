import ArgumentParser
import AsyncHTTPClient
import Foundation
import GatewayCore
import GorushRPC
import HTTPIngest
import Hummingbird
import Logging
import MatrixIngest
import MockProviders
import NIOCore
import NIOSSL
import PushgateCore
import ServiceLifecycle

@main
struct Pushgate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushgate",
        abstract: "A multi-protocol push gateway (APNs, FCM, Web Push, UnifiedPush) speaking gorush's API.",
        discussion: """
            gorush's command line works as it is: `pushgate -c config.yml` serves, `pushgate -c config.yml --ping`
            checks a running gateway, `pushgate -c config.yml -ios -m hi -t <token> --topic com.example.app` sends once.
            Flags take one or two dashes, as in gorush (Go's flag package).
            """,
        version: PushgateVersion.version,
        subcommands: [Serve.self, VapidKeys.self, MockCommand.self, Bench.self, Send.self, ConfigKeys.self, ConfigReferenceCommand.self],
        defaultSubcommand: Serve.self
    )

    /// gorush's flags are Go flags (`-ios`, `--ios`, `-c=file`): spelled the way ArgumentParser reads them first.
    static func main() async {
        await main(GorushFlags.normalize(Array(CommandLine.arguments.dropFirst()), subcommands: subcommandNames))
    }

    static var subcommandNames: Set<String> {
        Set(configuration.subcommands.map { $0._commandName } + ["help"])
    }
}

/// Prints a one-line configuration error and exits 1 (no stack trace, no crash).
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("pushgate: \(message)\n".utf8))
    exit(1)
}

func makeLogger(_ label: String, level: String) -> Logger {
    var l = Logger(label: label)
    l.logLevel = Logger.Level(rawValue: level.lowercased()) ?? .info
    return l
}

/// The config file: `path` when given (it must exist), else gorush's search (`/etc/gorush/config.yml`,
/// `$HOME/.gorush/config.yml`, `./config.yml`), then Pushgate's own `config/pushgate.yml`, else
/// built-in defaults. Exits with one line on a bad file.
func loadConfig(_ path: String?, announce: Bool = false) -> RawConfig {
    let used = path ?? ConfigDiscovery.find()
    do {
        let raw = try RawConfig.load(path: used, dialects: Serve.configDialects)
        if announce {
            let note =
                used.map { "using config file \($0)" }
                ?? "no config file found (\(ConfigDiscovery.candidates().joined(separator: ", "))): built-in defaults"
            FileHandle.standardError.write(Data("pushgate: \(note)\n".utf8))
        }
        return raw
    } catch {
        fail("\(error)")
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the gateway (the default command); with -ios/-android send one push; with --ping check a running gateway.")

    @Option(name: .shortAndLong, help: "YAML config file (gorush's config.yml works too). Default: gorush's search, then config/pushgate.yml.")
    var config: String?

    @Flag(help: "Start the built-in mock providers (APNs, FCM, Web Push) on loopback and send to them: no real credentials needed.")
    var mock = false

    @Option(name: .shortAndLong, help: "Override core.port.") var port: Int?
    @Option(name: [.customShort("A"), .long], help: "Override core.address (\"\" = every IPv6 and IPv4 address).") var address: String?
    @Option(help: "Outbound proxy URL (core.http_proxy), e.g. http://proxy:3128.") var proxy: String?
    @Option(help: "Write the process id to this file (core.pid.path; enables core.pid).") var pid: String?
    @Flag(name: .customShort("V"), help: "Print the version and exit.") var showVersion = false
    @Flag(help: "GET the health route of the gateway this config describes: exit 0 when it answers 200, else 1 (Docker HEALTHCHECK).")
    var ping = false

    // gorush's one-shot mode.
    @Flag(help: "Send one iOS push (with -m, -t, --topic) and exit.") var ios = false
    @Flag(help: "Send one Android push (with -m, -t or --topic) and exit.") var android = false
    @Flag(help: "Send one Huawei HMS push (with -m, -t, --topic; --hid and --hk or the huawei section) and exit.") var huawei = false
    @Option(name: .shortAndLong, help: "Notification message (one-shot mode).") var message: String?
    @Option(name: .shortAndLong, help: "Device token (one-shot mode).") var token: String?
    @Option(help: "Notification title (one-shot mode).") var title: String?
    @Option(help: "APNs topic / FCM topic (one-shot mode).") var topic: String?
    @Option(name: [.customShort("i"), .customLong("key")], help: "ios.key_path: APNs certificate or key file.") var iosKey: String?
    @Option(name: [.customShort("P"), .long], help: "ios.password: certificate password.") var password: String?
    @Option(name: .customLong("key-id"), help: "ios.key_id (.p8 token auth).") var keyID: String?
    @Option(name: .customLong("team-id"), help: "ios.team_id (.p8 token auth).") var teamID: String?
    @Flag(help: "ios.production: APNs production environment.") var production = false
    @Option(name: .customLong("fcm-key"), help: "android.key_path: FCM service account JSON.") var fcmKey: String?
    @Option(name: [.customLong("hk"), .customLong("hmskey")], help: "huawei.appsecret.") var hmsKey: String?
    @Option(name: [.customLong("hid"), .customLong("hmsid")], help: "huawei.appid.") var hmsID: String?
    @Option(name: [.customShort("e"), .long], help: "stat.engine (gorush's; Pushgate counts in memory).") var engine: String?
    @Option(name: .customLong("redis-addr"), help: "stat.redis.addr (gorush's; not used).") var redisAddr: String?

    var oneShot: Bool { ios || android || huawei }

    func run() async throws {
        if showVersion {
            print("pushgate \(PushgateVersion.version)")
            return
        }
        var raw = loadConfig(config, announce: !ping && !oneShot)
        do { try applyFlags(to: &raw) } catch { fail("\(error)") }

        if ping { throw ExitCode(await Self.ping(raw: raw) ? 0 : 1) }
        if oneShot { throw ExitCode(await sendOnce(raw: raw) ? 0 : 1) }

        let output: LogOutputSettings
        do { output = try LogOutputSettings(raw) } catch { fail("\(error)") }
        output.bootstrap()
        var mocks: MockStack?
        if mock || raw.section("mock")[MockConfig.enabled] {
            do {
                let stack = try await MockStack.start(raw: raw)
                stack.apply(to: &raw)
                mocks = stack
                FileHandle.standardError.write(Data(stack.banner.utf8))
            } catch {
                fail("cannot start the mock providers: \(error)")
            }
        }
        let logger = Logger(label: "pushgate")
        // Bootstrapped before the gateway is built (its workers may send stored deliveries at once);
        // the exporter is shut down after the gateway drained.
        let tracing: (any Service)?
        do { tracing = TracingBootstrap.start(try TracingSettings(raw, environment: ProcessInfo.processInfo.environment), logger: logger) } catch {
            fail("\(error)")
        }
        let gateway: Gateway
        let pidFile: PIDFile?
        // A reload (SIGHUP, POST /api/reload) reads the same file again, with the same flags and mocks.
        let usedPath = config ?? ConfigDiscovery.find()
        let serve = self
        let stack = mocks
        let reloadSource: @Sendable () throws -> RawConfig = {
            var r = try RawConfig.load(path: usedPath, dialects: Serve.configDialects)
            try serve.applyFlags(to: &r)
            stack?.apply(to: &r)
            return r
        }
        do {
            gateway = try GatewayBuilder.build(raw: raw, logger: logger, reloadSource: reloadSource)
            pidFile = try PIDFile.create(raw: raw)
        } catch {
            fail("\(error)")
        }
        let scheme = gateway.settings.tls == nil ? "http" : "https"
        if let tls = gateway.settings.tls { logger.info("TLS on ingest (HTTP/1.1 and HTTP/2): \(tls.summary)") }
        var ingest: [any Service] = []
        for way in Self.ingestProtocols {
            do {
                ingest += try way.services(gateway: gateway)
            } catch let e as ConfigError {
                fail("\(e)")
            } catch {
                fail("config error: \(way.configKey): cannot listen there: \(error)")
            }
        }
        let app = try gateway.makeApplication(
            extraServices: ingest,
            onServerRunning: { channel in
                let listening = channel.localAddress.map { a in
                    let ip = a.ipAddress.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "?"
                    return "\(ip):\(a.port ?? 0)"
                }
                logger.info("pushgate \(PushgateVersion.version) listening on \(scheme)://\(listening ?? "?")")
            })
        let hangups = Self.reloadOnHangup(gateway)
        // The drain signal after the application: SIGTERM reaches it first (gRPC health NOT_SERVING at once).
        try await ServiceGroup(
            configuration: .init(
                services: (tracing.map { [$0] } ?? []) + [app, gateway.drainSignal], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        ).run()
        hangups.cancel()
        pidFile?.remove()
        try await mocks?.stop()
    }

    /// The ways in beside the HTTP API (`IngestProtocol`), one line each.
    static var ingestProtocols: [any IngestProtocol.Type] {
        // grpc-swift 2 needs macOS 15 (always true on Linux).
        guard #available(macOS 15.0, *) else { return [] }
        return [GorushRPCServer.self, MatrixServer.self]
    }

    /// Other programs' configuration files read as Pushgate's (`ConfigDialect`), one line each.
    static let configDialects: [any ConfigDialect.Type] = [SygnalConfig.self]

    /// SIGHUP reloads the configuration file (keys, apps); a bad file keeps the running one (logged).
    static func reloadOnHangup(_ gateway: Gateway) -> Task<Void, Never> {
        let hangups = AsyncStream<Void> { continuation in
            signal(SIGHUP, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
            source.setEventHandler { continuation.yield() }
            source.resume()
            MockCommand.keep.append(source)  // lives as long as the process
        }
        return Task {
            for await _ in hangups {
                _ = try? await gateway.reload()
            }
        }
    }

    /// gorush's flags over the file (its `MergeConfig`): only flags given change anything.
    func applyFlags(to raw: inout RawConfig) throws {
        if let port { raw.set("core", CoreConfig.port, port) }
        if let address { raw.set("core", CoreConfig.address, address) }
        if let proxy { try raw.set(assignment: "core.http_proxy=\(proxy)") }
        if let pid {
            raw.set("core", CoreConfig.pidPath, pid)
            raw.set("core", CoreConfig.pidEnabled, true)
            raw.set("core", CoreConfig.pidOverride, true)
        }
        if let iosKey { try raw.set(assignment: "ios.key_path=\(iosKey)") }
        if let password { try raw.set(assignment: "ios.password=\(password)") }
        if let keyID { try raw.set(assignment: "ios.key_id=\(keyID)") }
        if let teamID { try raw.set(assignment: "ios.team_id=\(teamID)") }
        if production { try raw.set(assignment: "ios.production=true") }
        if let fcmKey { try raw.set(assignment: "android.key_path=\(fcmKey)") }
        if let hmsKey { try raw.set(assignment: "huawei.appsecret=\(hmsKey)") }
        if let hmsID { try raw.set(assignment: "huawei.appid=\(hmsID)") }
        if let engine { try raw.set(assignment: "stat.engine=\(engine)") }
        if redisAddr != nil {
            FileHandle.standardError.write(Data("pushgate: --redis-addr accepted but not acted on (no Redis stat storage)\n".utf8))
        }
    }

    /// gorush's one-shot mode: one push to one token (or an FCM topic), the provider's answer printed.
    func sendOnce(raw: RawConfig) async -> Bool {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .warning
            return h
        }
        let platform: Platform = ios ? .ios : android ? .android : .huawei
        var object: [String: Any] = ["platform": platform.rawValue]
        if let token, !token.isEmpty { object["tokens"] = [token] }
        if let message { object["message"] = message }
        if let title { object["title"] = title }
        if let topic, !topic.isEmpty { object["topic"] = topic }  // APNs topic; FCM: a topic send (gorush's `req.Topic`)
        if message == nil, title == nil { fail("one-shot mode needs a message: -m \"text\"") }
        let n: PushNotification
        do {
            n = try Send.parseOne(object)
        } catch {
            fail("\(error)")
        }
        return await Send.deliver(n, raw: raw, json: false, tool: "pushgate")
    }

    /// gorush's `--ping`: GET the health route on this host (HTTPS when core.ssl is on; the
    /// certificate is not checked: it is our own, and the name may not be localhost).
    static func ping(raw: RawConfig) async -> Bool {
        let core = raw.section("core")
        let ssl = core[CoreConfig.ssl]
        var host = core[CoreConfig.address]
        if host.isEmpty || host == "0.0.0.0" || host == "::" { host = "localhost" }
        if host.contains(":") { host = "[\(host)]" }
        let url = "\(ssl ? "https" : "http")://\(host):\(core[CoreConfig.port])\(raw.section("api")[APIConfig.healthURI])"
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        var config = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow)
        config.timeout = .init(connect: .seconds(5), read: .seconds(10))
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        var healthy = false
        do {
            let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
            healthy = response.status == .ok
            if !healthy { FileHandle.standardError.write(Data("pushgate: \(url) answered \(response.status.code)\n".utf8)) }
        } catch {
            FileHandle.standardError.write(Data("pushgate: \(url): \(error)\n".utf8))
        }
        try? await client.shutdown()
        return healthy
    }
}

struct VapidKeys: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "vapid-keys", abstract: "Print a new VAPID key pair for webpush.vapid_private_key.")

    /// The Web Push module's tool (`ProviderRegistry.tools`).
    func run() throws {
        guard let tool = ProviderRegistry.tools.first(where: { $0.name == Self.configuration.commandName }) else { throw ExitCode(1) }
        print(tool.run())
    }
}

/// docs/configuration.md, generated from the typed configuration (`ConfigReference`); a test in
/// GatewayTests fails when the committed page differs from this output.
struct ConfigReferenceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config-reference", abstract: "Print the configuration reference (docs/configuration.md) as Markdown.")

    func run() { print(ConfigReference.markdown(adapters: [MatrixSettings.reference]), terminator: "") }
}

/// The configuration keys of the providers, from the registry, as Markdown table rows
/// (`config-reference` prints the whole reference).
struct ConfigKeys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config-keys", abstract: "Print every provider section's keys (default, range, secrecy) as Markdown table rows.")

    func run() {
        print("| key | default | range | secrecy |")
        print("|---|---|---|---|")
        for section in ProviderRegistry.sections {
            for key in section.keys {
                let range = key.range.map { "\($0.lowerBound)...\($0.upperBound)" } ?? ""
                let secrecy: String
                switch key.secrecy {
                case .plain: secrecy = ""
                case .secret: secrecy = "secret"
                case .identifier: secrecy = "identifier"
                }
                print("| `\(section.name).\(key.name)` | `\(Self.yaml(key.defaultValue))` | \(range) | \(secrecy) |")
            }
        }
    }

    static func yaml(_ v: ConfigValue) -> String {
        switch v {
        case .string(let s): return "\"\(s)\""
        case .int(let i): return "\(i)"
        case .bool(let b): return "\(b)"
        case .list(let l): return "[" + l.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
        }
    }
}
