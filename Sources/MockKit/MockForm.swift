import Foundation

/// An `application/x-www-form-urlencoded` body (the OAuth token endpoints' requests).
public enum MockForm {
    /// The body's fields (a repeated name: the last value).
    public static func parse(_ body: [UInt8]) -> [String: String] {
        var out: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String {
                s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(s)
            }
            out[decode(kv[0])] = kv.count > 1 ? decode(kv[1]) : ""
        }
        return out
    }

}
