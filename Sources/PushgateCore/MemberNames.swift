/// Member names matched as Go's `encoding/json` matches them against struct fields, so a gorush client
/// that writes `"Tokens"` or `"Platform"` is understood: a member names a field when its key equals the
/// field's JSON name after case folding. Every field name here is lower-case ASCII, so the fold is
/// ASCII lower-casing plus the two non-ASCII characters that fold onto ASCII letters (U+212A KELVIN
/// SIGN onto `k`, U+017F LATIN SMALL LETTER LONG S onto `s`), as Go's `unicode.SimpleFold` does.
///
/// When several members name one field (`"tokens"` and `"Tokens"`), the last one in the object wins,
/// as in Go; a key repeated with the very same spelling counts at its first position (the parser keeps
/// one entry per distinct key: first place, last value). Work is linear in the keys of the object.
/// Free-form maps (`data`, `headers`, `content-state`, …) keep their keys verbatim.
enum MemberName {
    /// The folded form of `key`, or nil when it cannot name any (ASCII) field.
    static func fold(_ key: String) -> String? {
        var needsWork = false
        for b in key.utf8 where b >= 0x80 || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z")) {
            needsWork = true
            break
        }
        if !needsWork { return key }
        var out = String.UnicodeScalarView()
        for s in key.unicodeScalars {
            switch s.value {
            case 0x41...0x5A: out.append(Unicode.Scalar(s.value + 0x20)!)
            case 0..<0x80: out.append(s)
            case 0x212A: out.append("k")
            case 0x017F: out.append("s")
            default: return nil
            }
        }
        return String(out)
    }
}

/// The members of one JSON object by folded name (the fields of one gorush struct).
struct FoldedMembers {
    private let byName: [String: JSONValue]

    init(_ object: JSONObject) {
        var d: [String: JSONValue] = [:]
        d.reserveCapacity(object.count)
        for (key, value) in object {
            if let name = MemberName.fold(key) { d[name] = value }  // later members win
        }
        byName = d
    }

    /// The member naming field `name` (lower-case ASCII).
    subscript(name: String) -> JSONValue? { byName[name] }
}

/// The field names of a struct gorush decodes a pass-through object into (the Firebase Admin SDK's
/// `messaging` types for `notification`, `android`, `webpush`, `apns`, `fcm_options`; mapstructure's
/// `Sound` for the `sound` object). A member whose key folds onto a field name is renamed to it (the
/// field's exact spelling, which FCM and APNs expect); other members are kept as they are, and maps
/// (`data`, `headers`) keep their keys verbatim.
public final class KeySchema: Sendable {
    /// Field name -> the schema of its value when that value is itself a struct.
    let fields: [String: KeySchema?]
    /// Folded field name -> field name.
    let folded: [String: String]

    /// `protoNames`: the fields are a protobuf message's (FCM v1), whose JSON form also takes each
    /// field's lowerCamelCase name (`directBootOk` for `direct_boot_ok`): those fold onto the field too.
    public init(_ fields: [String: KeySchema?], protoNames: Bool = false) {
        self.fields = fields
        var f: [String: String] = [:]
        for name in fields.keys {
            if protoNames, name.contains("_") { f[name.replacingOccurrences(of: "_", with: "").lowercased()] = name }
        }
        for name in fields.keys { f[name.lowercased()] = name }
        folded = f
    }

    public convenience init(_ names: [String], protoNames: Bool = false) {
        var d: [String: KeySchema?] = [:]
        for n in names { d[n] = .some(nil) }
        self.init(d, protoNames: protoNames)
    }

    /// `object` with every member naming a field spelled as the field, recursively. Returns the object
    /// itself when nothing changes (the common case). Members renamed onto one field: the last wins.
    public func canonical(_ object: JSONObject) -> JSONObject {
        var changed = false
        var pairs: [(String, JSONValue)] = []
        pairs.reserveCapacity(object.count)
        for (key, value) in object {
            var name = key
            if fields[key] == nil, let f = MemberName.fold(key), let field = folded[f] {
                name = field
                changed = true
            }
            var v = value
            if let child = fields[name] ?? nil, case .object(let o) = value {
                let c = child.canonical(o)
                if c != o {
                    v = .object(c)
                    changed = true
                }
            }
            pairs.append((name, v))
        }
        return changed ? JSONObject(pairs) : object
    }

    /// gorush's `Sound` (decoded by mapstructure, which matches field names case-insensitively too).
    public static let sound = KeySchema(["critical", "name", "volume"])
}
