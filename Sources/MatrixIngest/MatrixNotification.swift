import PushgateCore

/// A `/notify` refused before anything was sent: 400 with Matrix's error JSON.
public struct MatrixRequestError: Error, Sendable, Equatable {
    public var status: Int
    /// `M_NOT_JSON`, `M_BAD_JSON`, `M_TOO_LARGE`, `M_UNKNOWN`.
    public var errcode: String
    public var error: String

    public init(status: Int = 400, _ errcode: String, _ error: String) {
        self.status = status
        self.errcode = errcode
        self.error = error
    }

    /// `{"errcode": …, "error": …}`.
    public var json: [UInt8] {
        var w = JSONWriter()
        var first = true
        w.raw("{")
        w.key("errcode", first: &first)
        w.string(errcode)
        w.key("error", first: &first)
        w.string(error)
        w.raw("}")
        return w.bytes
    }

    static func badJSON(_ field: String, _ problem: String) -> MatrixRequestError {
        MatrixRequestError("M_BAD_JSON", "\(field): \(problem)")
    }
}

/// The `notification` object of `POST /_matrix/push/v1/notify` (Matrix Push Gateway API v1), typed
/// as Sygnal types it (`sygnal/notifications.py`): a field of the wrong type is a 400 naming it.
public struct MatrixNotification: Sendable, Equatable {
    public var eventID: String?
    public var roomID: String?
    public var type: String?
    public var sender: String?
    public var senderDisplayName: String?
    public var roomName: String?
    public var roomAlias: String?
    public var membership: String?
    public var userIsTarget: Bool?
    /// `high` or `low` (anything else counts as high, as in Sygnal).
    public var prio: String?
    public var content: JSONObject?
    public var unread: Int64?
    public var missedCalls: Int64?
    public var devices: [Device]

    public struct Device: Sendable, Equatable {
        public var appID: String
        public var pushkey: String
        public var pushkeyTS: Int64
        /// The pusher's `data` (`format`, `default_payload`, Web Push's `endpoint` and `auth`, …).
        public var data: JSONObject?
        public var tweaks: JSONObject?

        public init(appID: String, pushkey: String, pushkeyTS: Int64 = 0, data: JSONObject? = nil, tweaks: JSONObject? = nil) {
            self.appID = appID
            self.pushkey = pushkey
            self.pushkeyTS = pushkeyTS
            self.data = data
            self.tweaks = tweaks
        }
    }

    public init(devices: [Device]) {
        self.devices = devices
    }

    /// Limits of the parse: nesting, keys and string sizes stay bounded whatever the body.
    static let jsonLimits = JSONLimits(maxDepth: 24, maxObjectKeys: 1000, maxValues: 50_000, maxStringBytes: 256 * 1024)

    /// Parses a `/notify` body. `maxDevices`: more devices is a 400 naming `notification.devices`.
    public static func parse(_ body: [UInt8], maxDevices: Int) throws(MatrixRequestError) -> MatrixNotification {
        let root: JSONValue
        do { root = try JSONParser.parse(body, limits: jsonLimits) } catch {
            throw MatrixRequestError("M_NOT_JSON", "Expected JSON request body (\(error.description.logSafe(max: 200)))")
        }
        guard case .object(let top) = root else { throw MatrixRequestError("M_NOT_JSON", "Expected a JSON object") }
        guard case .object(let n)? = top["notification"] else {
            throw MatrixRequestError.badJSON("notification", "expecting an object in the 'notification' key")
        }
        guard case .array(let list)? = n["devices"] else {
            throw MatrixRequestError.badJSON("notification.devices", "expected a list")
        }
        guard !list.isEmpty else { throw MatrixRequestError.badJSON("notification.devices", "no devices in notification") }
        guard list.count <= maxDevices else {
            throw MatrixRequestError.badJSON("notification.devices", "\(list.count) devices, more than matrix.max_devices (\(maxDevices))")
        }
        var out = MatrixNotification(devices: [])
        out.eventID = try string(n, "event_id")
        out.roomID = try string(n, "room_id")
        out.type = try string(n, "type")
        out.sender = try string(n, "sender")
        out.senderDisplayName = try string(n, "sender_display_name")
        out.roomName = try string(n, "room_name")
        out.roomAlias = try string(n, "room_alias")
        out.membership = try string(n, "membership")
        out.prio = try string(n, "prio")
        switch n["user_is_target"] {
        case nil, .null?: break
        case .bool(let b)?: out.userIsTarget = b
        default: throw MatrixRequestError.badJSON("notification.user_is_target", "expected true or false")
        }
        switch n["content"] {
        case nil, .null?: break
        case .object(let o)?: out.content = o
        default: throw MatrixRequestError.badJSON("notification.content", "expected an object")
        }
        switch n["counts"] {
        case nil, .null?: break
        case .object(let c)?:
            out.unread = try count(c, "unread")
            out.missedCalls = try count(c, "missed_calls")
        default: throw MatrixRequestError.badJSON("notification.counts", "expected an object")
        }
        for (i, item) in list.enumerated() {
            let path = "notification.devices[\(i)]"
            guard case .object(let d) = item else { throw MatrixRequestError.badJSON(path, "expected an object") }
            guard case .string(let appID)? = d["app_id"], !appID.isEmpty else {
                throw MatrixRequestError.badJSON("\(path).app_id", "missing or not a string")
            }
            guard case .string(let pushkey)? = d["pushkey"], !pushkey.isEmpty else {
                throw MatrixRequestError.badJSON("\(path).pushkey", "missing or not a string")
            }
            var device = Device(appID: appID, pushkey: pushkey)
            switch d["pushkey_ts"] {
            case nil, .null?: break
            case .int(let ts)?: device.pushkeyTS = ts
            default: throw MatrixRequestError.badJSON("\(path).pushkey_ts", "expected an integer")
            }
            switch d["data"] {
            case nil, .null?: break
            case .object(let o)?: device.data = o
            default: throw MatrixRequestError.badJSON("\(path).data", "expected an object")
            }
            switch d["tweaks"] {
            case nil, .null?: break
            case .object(let o)?: device.tweaks = o
            default: throw MatrixRequestError.badJSON("\(path).tweaks", "expected an object")
            }
            out.devices.append(device)
        }
        return out
    }

    static func string(_ o: JSONObject, _ key: String) throws(MatrixRequestError) -> String? {
        switch o[key] {
        case nil, .null?: return nil
        case .string(let s)?: return s
        default: throw MatrixRequestError.badJSON("notification.\(key)", "expected a string")
        }
    }

    static func count(_ o: JSONObject, _ key: String) throws(MatrixRequestError) -> Int64? {
        switch o[key] {
        case nil, .null?: return nil
        case .int(let i)? where i >= 0 && i <= Int64(Int32.max): return i
        default: throw MatrixRequestError.badJSON("notification.counts.\(key)", "expected an integer from 0 to \(Int32.max)")
        }
    }
}
