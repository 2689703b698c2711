import PushgateCore

/// What `ProviderModule.checkRendering` implementations check their renderings with.
public enum RenderingCheck {
    /// Generous limits: a rendering the provider would send must parse within them.
    static let limits = JSONLimits(maxDepth: 256, maxObjectKeys: 1 << 22, maxValues: 1 << 26, maxStringBytes: 1 << 28)

    /// Traps unless `bytes` is one JSON value.
    public static func mustBeJSON(_ bytes: [UInt8], _ what: @autoclosure () -> String) {
        do {
            _ = try JSONParser.parse(bytes, limits: limits)
        } catch {
            fatalError("\(what()) is not valid JSON (\(error)): \(String(decoding: bytes.prefix(400), as: UTF8.self))")
        }
    }
}
