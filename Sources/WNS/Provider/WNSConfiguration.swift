import Foundation
import ProviderKit
import PushgateCore

/// The `wns:` section: its keys, and the sender configuration they make.
public enum WNSSettings {
    public static let enabled = ProviderSettings.enabled
    public static let tenantID = Setting<String>(
        "tenant_id", "", doc: "(new) Entra flow (Windows App SDK): the app registration's directory (tenant) id")
    public static let clientID = Setting<String>("client_id", "", doc: "(new) Entra flow: the app registration's application (client) id")
    public static let clientSecret = Setting<String>(
        "client_secret", "", secrecy: .secret, doc: "(new) Entra flow: the app registration's client secret")
    public static let packageSID = Setting<String>(
        "package_sid", "", doc: "(new) legacy Live flow (Microsoft Store apps): the package SID (ms-app://S-1-15-2-…)")
    public static let packageSecret = Setting<String>(
        "package_secret", "", secrecy: .secret, doc: "(new) legacy Live flow: the package's client secret")
    public static let tokenURL = Setting<String>(
        "token_url", "", doc: "(new) token endpoint override, for tests and proxies (empty: the flow's own)")
    public static let maxTokens = ProviderSettings.maxTokens(1000)
    public static let maxRetry = ProviderSettings.maxRetry(3)
    public static let maxConcurrentPushes = ProviderSettings.maxConcurrentPushes(1024)
    public static let maxConnections = Setting<Int>(
        "max_connections", 16, range: 1...1000,
        doc: "(new) HTTP/1.1 keep-alive connections at most per channel host (WNS takes one request at a time per connection)")
    public static let connectTo = Setting<String>(
        "connect_to", "", doc: "(new) tests and `pushgate mock` only: send every notification to this host:port (the channel URI is still checked)")
    public static let resolve = Setting<[String]>(
        "resolve", [],
        doc: "(new) tests and `pushgate mock` only: fixed DNS answers for channel hosts, `host=address` (still held to the address rules)")

    public static var keys: [ConfigKey] {
        [
            enabled.key, tenantID.key, clientID.key, clientSecret.key, packageSID.key, packageSecret.key, tokenURL.key, maxTokens.key,
            maxRetry.key, maxConcurrentPushes.key, maxConnections.key, connectTo.key, resolve.key,
        ]
    }

    /// The sender configuration of an enabled section. Throws `ConfigError` naming the key.
    public static func senderConfiguration(_ s: SectionValues) throws -> WNSSenderConfiguration {
        let name = s.name
        let entra = [s[tenantID], s[clientID], s[clientSecret]]
        let live = [s[packageSID], s[packageSecret]]
        let credentials: WNSCredentials
        switch (entra.contains { !$0.isEmpty }, live.contains { !$0.isEmpty }) {
        case (true, true):
            throw ConfigError(
                key: name, problem: "set either tenant_id, client_id and client_secret (Entra) or package_sid and package_secret (Live), not both")
        case (false, false):
            throw ConfigError(
                key: name,
                problem: "enabled without credentials: set tenant_id, client_id and client_secret (Entra) or package_sid and package_secret (Live)")
        case (true, false):
            for (setting, value) in zip([tenantID, clientID, clientSecret], entra) where value.isEmpty {
                throw ConfigError(key: s.path(setting), problem: "must be set for the Entra flow")
            }
            guard WNSCredentials.isValidTenantID(s[tenantID]) else {
                throw ConfigError(key: s.path(tenantID), problem: "must be a directory id (a GUID) or a domain name")
            }
            credentials = .entra(tenantID: s[tenantID], clientID: s[clientID], clientSecret: s[clientSecret])
        case (false, true):
            for (setting, value) in zip([packageSID, packageSecret], live) where value.isEmpty {
                throw ConfigError(key: s.path(setting), problem: "must be set for the Live flow")
            }
            credentials = .live(packageSID: s[packageSID], secret: s[packageSecret])
        }
        var c = WNSSenderConfiguration(credentials: credentials)
        let url = s[tokenURL].trimmingCharacters(in: .whitespaces)
        if !url.isEmpty {
            guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
                throw ConfigError(key: s.path(tokenURL), problem: "must be an http(s) URL")
            }
            c.tokenURL = url
        }
        c.maxConnectionsPerHost = s[maxConnections]
        let connect = s[connectTo].trimmingCharacters(in: .whitespaces)
        if !connect.isEmpty {
            guard let colon = connect.lastIndex(of: ":"), let port = Int(connect[connect.index(after: colon)...]), (1...65535).contains(port),
                colon != connect.startIndex, !connect.contains("/"), !connect.contains("@")
            else {
                throw ConfigError(key: s.path(connectTo), problem: "must be host:port")
            }
            c.connectTo = connect
        }
        do {
            c.staticAnswers = try WNSAddressGuard.parseStaticAnswers(s[resolve])
        } catch {
            throw ConfigError(key: s.path(resolve), problem: error.description)
        }
        return c
    }
}
