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

    /// Traps unless `bytes` is one JSON value of at most `limit` bytes (a body after `prepare`'s size check).
    public static func mustBeJSON(_ bytes: [UInt8], within limit: Int, _ what: @autoclosure () -> String) {
        mustBeJSON(bytes, what())
        precondition(bytes.count <= limit, "\(what()) over \(limit) bytes after the size check")
    }

    /// A message rendered once with its target spliced in per send (FCM, HMS): the message without its
    /// target and the body for each of `targets` the provider can take must be JSON.
    public static func mustBeJSON(_ rendered: some SplicedTargetMessage, targets: [PushTarget], _ what: String) {
        mustBeJSON(Array(rendered.messageJSONWithoutTarget.utf8), "\(what) message without target")
        for target in targets {
            if let body = rendered.body(for: target) { mustBeJSON(body, "\(what) body for \(target)") }
        }
    }

    /// The same, once prepared: the body of each of `targets` within `limit` bytes.
    public static func mustFit(_ prepared: some SplicedTargetMessage, targets: [PushTarget], limit: Int, _ what: String) {
        for target in targets {
            precondition(prepared.size(for: target) <= limit, "\(what) body for \(target) over \(limit) bytes after prepare")
        }
    }
}
