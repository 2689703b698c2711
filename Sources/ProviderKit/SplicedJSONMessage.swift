import PushgateCore

/// A JSON request body rendered once with its target left out, as FCM's and HMS's `messages:send`
/// take it: `head` (up to and including `"message":{`), the target member spliced in per delivery
/// (`"token":"…"`), then `tail` (`,<the rest of the message>}}`, or just `}}`).
public struct SplicedJSONBody: Sendable {
    public let head: [UInt8]
    public let tail: [UInt8]

    public init(head: [UInt8], tail: [UInt8]) {
        self.head = head
        self.tail = tail
    }

    /// The body with `target`, one JSON member, spliced in.
    public func body(target: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(head.count + target.count + tail.count)
        out.append(contentsOf: head)
        out.append(contentsOf: target)
        out.append(contentsOf: tail)
        return out
    }

    /// The size of `body(target:)`, without making it.
    public func size(target: [UInt8]) -> Int { head.count + target.count + tail.count }

    /// `"key":"value"`, as a JSON member.
    public static func member(_ key: String, _ value: String) -> [UInt8] {
        var w = JSONWriter(reservingCapacity: key.utf8.count + value.utf8.count + 8)
        w.string(key)
        w.raw(":")
        w.string(value)
        return w.bytes
    }

    /// The `message` object without its target, for logs and tests.
    public var messageJSONWithoutTarget: String {
        var rest = tail
        rest.removeLast(2)
        if rest.first == UInt8(ascii: ",") { rest.removeFirst() }
        return "{" + String(decoding: rest, as: UTF8.self) + "}"
    }
}

/// A message whose target is spliced into a body rendered once (FCM, HMS): a device token, or the
/// notification's topic send (`topic` / `condition`).
public protocol SplicedTargetMessage: PreparedPush {
    var spliced: SplicedJSONBody { get }
    /// The topic-send target of the notification (`topic` or `condition`), if any.
    var topicTarget: (key: String, value: String)? { get }
    /// The target member for `target`; nil when the provider cannot take it (a Web Push
    /// subscription, a topic send without topic or condition).
    func targetMember(for target: PushTarget) -> [UInt8]?
}

extension SplicedTargetMessage {
    /// The request body for one target, or nil when the provider cannot take it.
    public func body(for target: PushTarget) -> [UInt8]? { targetMember(for: target).map(spliced.body(target:)) }

    /// Size in bytes of the body for `target` (0 if the target is unsupported).
    public func size(for target: PushTarget) -> Int { targetMember(for: target).map(spliced.size(target:)) ?? 0 }

    /// The rendered `message` object without its target, for logs and tests.
    public var messageJSONWithoutTarget: String { spliced.messageJSONWithoutTarget }

    /// The check of a planned delivery (`PushProvider.validate`), `provider` naming the service in
    /// the reason: a token that is not empty, or the notification's own topic send, within `limit` bytes.
    public func check(target: PushTarget, provider: String, limit: Int) -> PushFailure? {
        switch target {
        case .subscription:
            return PushFailure("\(provider) cannot deliver to a Web Push subscription")
        case .topic where topicTarget == nil:
            return PushFailure("\(provider) topic send without topic or condition")
        case .token(let t) where t.isEmpty:
            return PushFailure("the token must not be empty")
        default:
            let size = size(for: target)
            return size > limit ? .payloadTooLarge(size: size, limit: limit) : nil
        }
    }

    /// The size of the largest body of `targets`, the limit applies to (a body with an empty
    /// `emptyTarget` when there is no target yet, e.g. a check before the targets are known).
    public func largestSize(of targets: [PushTarget], emptyTarget: [UInt8]) -> Int {
        var largest = 0
        for target in targets { largest = max(largest, size(for: target)) }
        return largest == 0 ? spliced.size(target: emptyTarget) : largest
    }
}
