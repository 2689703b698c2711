/// gorush's command line is Go's `flag` package: every flag takes one or two dashes (`-ios`,
/// `--ios`), values follow a space or `=`, and booleans may say `=true`/`=false`.
/// ArgumentParser reads long names with two dashes only, so arguments are rewritten first; this is
/// the only hand-written part of the CLI.
/// Rewrites gorush's Go-style flags into ArgumentParser's spelling, for the default command (`serve`).
public enum GorushFlags {
    /// Serve's long names (gorush's), which Go lets users write with one dash.
    static let longNames: Set<String> = [
        "config", "port", "address", "proxy", "pid", "version", "ping", "ios", "android", "huawei", "message", "token",
        "title", "topic", "key", "password", "key-id", "team-id", "production", "fcm-key", "hk", "hmskey", "hid", "hmsid",
        "engine", "redis-addr", "mock",
    ]
    static let boolNames: Set<String> = ["version", "ping", "ios", "android", "huawei", "production", "mock", "V"]

    public static func normalize(_ args: [String], subcommands: Set<String>) -> [String] {
        if let first = args.first, !first.hasPrefix("-"), subcommands.contains(first), first != "serve" { return args }
        var out: [String] = []
        var rest = args[...]
        while let a = rest.popFirst() {
            if a == "--" {
                out.append(a)
                out += rest
                break
            }
            guard a.hasPrefix("-"), a.count > 1 else {
                out.append(a)
                continue
            }
            let body = a.hasPrefix("--") ? a.dropFirst(2) : a.dropFirst()
            let name = String(body.prefix(while: { $0 != "=" }))
            let value: String? = body.contains("=") ? String(body.drop(while: { $0 != "=" }).dropFirst()) : nil
            let isLong = longNames.contains(name)
            guard isLong || name.count == 1 else {
                out.append(a)
                continue
            }
            let flag = isLong ? "--" + name : "-" + name
            if let value {
                if boolNames.contains(name) {
                    // Go: -ios=true / -ios=false.
                    if ["true", "1", "t", "yes"].contains(value.lowercased()) { out.append(flag) }
                } else {
                    out += [flag, value]
                }
            } else {
                out.append(flag)
            }
        }
        return out
    }
}
