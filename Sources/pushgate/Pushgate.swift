import ArgumentParser
import Foundation
import Hummingbird
import Logging
import Server

@main
struct Pushgate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushgate",
        abstract: "A multi-protocol push gateway (APNs, FCM, Web Push, UnifiedPush) speaking gorush's API.",
        version: PushgateVersion.version,
        subcommands: [Serve.self, VapidKeys.self, MockCommand.self, Bench.self, Send.self],
        defaultSubcommand: Serve.self
    )
}

/// Prints a one-line configuration error and exits 1 (no stack trace, no crash).
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("pushgate: \(message)\n".utf8))
    exit(1)
}

/// Loads `path`; a missing default path (not given with `--config`) means built-in defaults.
/// Exits with one line on a bad file.
func loadConfig(_ path: String, announceDefaults: Bool = false) -> RawConfig {
    let explicit = CommandLine.arguments.contains(where: { $0 == "--config" || $0 == "-c" || $0.hasPrefix("--config=") })
    let used: String? = (FileManager.default.fileExists(atPath: path) || explicit) ? path : nil
    do {
        let raw = try RawConfig.load(path: used)
        if used == nil, announceDefaults {
            FileHandle.standardError.write(Data("pushgate: \(path) not found, using built-in defaults\n".utf8))
        }
        return raw
    } catch {
        fail("\(error)")
    }
}

func makeLogger(_ label: String, level: String) -> Logger {
    var l = Logger(label: label)
    l.logLevel = Logger.Level(rawValue: level.lowercased()) ?? .info
    return l
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the gateway.")

    @Option(name: .shortAndLong, help: "YAML config file (gorush's config.yml works too).")
    var config: String = "config/pushgate.yml"

    @Flag(help: "Start the built-in mock providers (APNs, FCM, Web Push) on loopback and send to them: no real credentials needed.")
    var mock = false

    @Option(help: "Override core.port.")
    var port: Int?

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .info
            return h
        }
        var raw = loadConfig(config, announceDefaults: true)
        if let port { raw.set("core", CoreConfig.port, port) }
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
        let logger = makeLogger("pushgate", level: raw.section("log")[LogConfig.accessLevel])
        let gateway: Gateway
        do {
            gateway = try GatewayBuilder.build(raw: raw, logger: logger)
        } catch {
            fail("\(error)")
        }
        let app = gateway.makeApplication(onServerRunning: { channel in
            logger.info("pushgate \(PushgateVersion.version) listening on \(channel.localAddress.map { "\($0)" } ?? "?")")
        })
        try await app.runService()
        try await mocks?.stop()
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
