import Foundation

/// Where `pushgate` looks for its config when no `-c` is given: gorush's places (viper's search of
/// `/etc/gorush/`, `$HOME/.gorush`, `.` for `config.*`), then Pushgate's own `config/pushgate.yml`.
public enum ConfigDiscovery {
    public static func candidates(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var c = ["/etc/gorush/config.yml", "/etc/gorush/config.yaml"]
        if let home = environment["HOME"], !home.isEmpty { c += ["\(home)/.gorush/config.yml", "\(home)/.gorush/config.yaml"] }
        c += ["config.yml", "config.yaml", "config/pushgate.yml"]
        return c
    }

    public static func find(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        candidates(environment: environment).first { FileManager.default.isReadableFile(atPath: $0) }
    }
}
