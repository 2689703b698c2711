import Foundation
import ProviderKit

/// gorush's `core.pid`: the process id written to `path` at start (refused when the file exists and
/// `override` is false), removed at a clean stop.
public struct PIDFile: Sendable {
    public let path: String

    public static func create(raw: RawConfig, pid: Int32 = ProcessInfo.processInfo.processIdentifier) throws -> PIDFile? {
        let core = raw.section("core")
        guard core[CoreConfig.pidEnabled] else { return nil }
        let path = core[CoreConfig.pidPath]
        let key = core.path(CoreConfig.pidPath)
        guard !path.isEmpty, !path.contains("\0") else { throw ConfigError(key: key, problem: "is empty") }
        if FileManager.default.fileExists(atPath: path), !core[CoreConfig.pidOverride] {
            throw ConfigError(key: key, problem: "\(path) already exists (core.pid.override is false)")
        }
        let dir = (path as NSString).deletingLastPathComponent
        do {
            if !dir.isEmpty { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
            try Data("\(pid)".utf8).write(to: URL(fileURLWithPath: path))
        } catch {
            throw ConfigError(key: key, problem: "cannot write \(path): \(error.localizedDescription)")
        }
        return PIDFile(path: path)
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
