import Foundation
import Logging
import NIOConcurrencyHelpers
import PushgateCore

#if canImport(Glibc)
    import Glibc
#endif

/// gorush's `log:` section acted on: `format` (`string` | `json`), `access_log` / `error_log`
/// (`stdout`, `stderr` or a file appended to), `access_level` / `error_level` (logrus level names).
/// Messages at `error_level` or above go to the error log, the others at `access_level` or above to
/// the access log.
///
/// swift-log ships only a stream handler with a fixed text format; the JSON lines and the two
/// destinations gorush operators configure are this small handler.
public struct LogOutputSettings: Sendable {
    public var json: Bool
    public var accessLevel: Logger.Level
    public var errorLevel: Logger.Level
    public var access: LogDestination
    public var error: LogDestination

    public init(_ raw: RawConfig) throws {
        let log = raw.section("log")
        switch log[LogConfig.format].lowercased() {
        case "", "string", "text": json = false
        case "json": json = true
        case let other: throw ConfigError(key: log.path(LogConfig.format), problem: "\"\(other)\" is not a log format (string, json)")
        }
        accessLevel = try Self.level(log[LogConfig.accessLevel], key: log.path(LogConfig.accessLevel))
        errorLevel = try Self.level(log[LogConfig.errorLevel], key: log.path(LogConfig.errorLevel))
        access = try LogDestination.open(log[LogConfig.accessLog], key: log.path(LogConfig.accessLog), default: .standardOutput)
        error = try LogDestination.open(log[LogConfig.errorLog], key: log.path(LogConfig.errorLog), default: .standardError)
    }

    /// logrus's names (gorush's configs) and swift-log's.
    static func level(_ name: String, key: String) throws -> Logger.Level {
        switch name.lowercased().trimmingCharacters(in: .whitespaces) {
        case "trace": return .trace
        case "debug": return .debug
        case "", "info": return .info
        case "notice": return .notice
        case "warn", "warning": return .warning
        case "error": return .error
        case "fatal", "panic", "critical": return .critical
        default: throw ConfigError(key: key, problem: "\"\(name)\" is not a log level (debug, info, warn, error, fatal)")
        }
    }

    /// Makes every `Logger` of the process write here (once per process: swift-log's rule).
    public func bootstrap() {
        let settings = self
        LoggingSystem.bootstrap { label in GatewayLogHandler(label: label, settings: settings) }
    }
}

/// Where log lines go: standard output, standard error or a file opened for appending.
public final class LogDestination: Sendable {
    private let handle: FileHandle
    private let lock = NIOLock()

    init(handle: FileHandle) { self.handle = handle }

    public static let standardOutput = LogDestination(handle: .standardOutput)
    public static let standardError = LogDestination(handle: .standardError)

    static func open(_ spec: String, key: String, default fallback: LogDestination) throws -> LogDestination {
        switch spec.trimmingCharacters(in: .whitespaces) {
        case "": return fallback
        case "stdout": return .standardOutput
        case "stderr": return .standardError
        case let path:
            let dir = (path as NSString).deletingLastPathComponent
            if !dir.isEmpty { try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
            let fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640)
            guard fd >= 0 else {
                throw ConfigError(key: key, problem: "cannot open \(path) for appending: \(String(cString: strerror(errno)))")
            }
            return LogDestination(handle: FileHandle(fileDescriptor: fd, closeOnDealloc: true))
        }
    }

    func write(_ line: [UInt8]) {
        lock.withLock { try? handle.write(contentsOf: line) }
    }
}

struct GatewayLogHandler: LogHandler {
    let label: String
    let settings: LogOutputSettings
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    var logLevel: Logger.Level

    init(label: String, settings: LogOutputSettings) {
        self.label = label
        self.settings = settings
        logLevel = min(settings.accessLevel, settings.errorLevel)
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let toError = event.level >= settings.errorLevel
        guard toError || event.level >= settings.accessLevel else { return }
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { _, new in new } }
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        let line = Self.format(
            time: Date(), level: event.level, label: label, message: "\(event.message)", metadata: all, json: settings.json)
        (toError ? settings.error : settings.access).write(line)
    }

    static func format(time: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata, json: Bool) -> [UInt8] {
        let stamp = time.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        let keys = metadata.keys.sorted()
        if json {
            // logrus's JSON formatter's field names: level, msg, time; metadata as further fields.
            var w = JSONWriter()
            var first = true
            w.raw("{")
            w.key("time", first: &first)
            w.string(stamp)
            w.key("level", first: &first)
            w.string(level == .warning ? "warning" : level.rawValue)
            w.key("label", first: &first)
            w.string(label)
            w.key("msg", first: &first)
            w.string(message)
            for k in keys where !["time", "level", "label", "msg"].contains(k) {
                w.key(k, first: &first)
                w.string("\(metadata[k].map { "\($0)" } ?? "")")
            }
            w.raw("}\n")
            return w.bytes
        }
        var s = "\(stamp) \(level) \(label): \(message)"
        for k in keys { s += " \(k)=\(metadata[k].map { "\($0)" } ?? "")" }
        s += "\n"
        return Array(s.utf8)
    }
}
