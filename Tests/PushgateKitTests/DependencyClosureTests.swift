import Foundation
import XCTest

/// An embedding Swift server links the gateway, not an HTTP server: PushgateKit's dependency
/// closure, read from Package.swift, holds no Hummingbird product and no HTTP ingest target.
final class DependencyClosureTests: XCTestCase {
    /// Each target of Package.swift with its dependencies: target names as written, products as
    /// "package:product".
    static func targets(_ manifest: String) -> [String: [String]] {
        var out: [String: [String]] = [:]
        // A target starts at `.target(`, `.executableTarget(` or `.testTarget(` and runs to the next one.
        let starts = ["\n        .target(", "\n        .executableTarget(", "\n        .testTarget("]
        var cuts: [String.Index] = []
        for s in starts {
            var from = manifest.startIndex
            while let r = manifest.range(of: s, range: from..<manifest.endIndex) {
                cuts.append(r.lowerBound)
                from = r.upperBound
            }
        }
        cuts.sort()
        for (i, cut) in cuts.enumerated() {
            let end = i + 1 < cuts.count ? cuts[i + 1] : manifest.endIndex
            let block = String(manifest[cut..<end])
            guard let name = firstMatch(#"name: "([^"]+)""#, in: block) else { continue }
            var deps: [String] = []
            if let open = block.range(of: "dependencies: [") {
                let rest = block[open.upperBound...]
                // Products first (they also hold `name: "…"`), then the bare target names.
                for m in allMatches(#"\.product\(name: "([^"]+)", package: "([^"]+)"\)"#, in: String(rest)) { deps.append("\(m[1]):\(m[0])") }
                let withoutProducts = String(rest).replacingOccurrences(of: #"\.product\([^)]*\)"#, with: "", options: .regularExpression)
                let list = withoutProducts.prefix { $0 != "]" }
                for m in allMatches(#""([^"]+)""#, in: String(list)) { deps.append(m[0]) }
            }
            out[name] = deps
        }
        return out
    }

    static func firstMatch(_ pattern: String, in s: String) -> String? { allMatches(pattern, in: s).first?.first }

    static func allMatches(_ pattern: String, in s: String) -> [[String]] {
        guard let re = try? NSRegularExpression(pattern: pattern) else { return [] }
        let ns = s as NSString
        return re.matches(in: s, range: NSRange(location: 0, length: ns.length)).map { m in
            (1..<m.numberOfRanges).map { ns.substring(with: m.range(at: $0)) }
        }
    }

    /// Every target and product reachable from `root`.
    static func closure(of root: String, in targets: [String: [String]]) -> Set<String> {
        var seen: Set<String> = []
        var todo = [root]
        while let t = todo.popLast() {
            for d in targets[t] ?? [] where seen.insert(d).inserted {
                if targets[d] != nil { todo.append(d) }
            }
        }
        return seen
    }

    func testPushgateKitLinksNoHTTPServer() throws {
        let manifestURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Package.swift")
        let targets = Self.targets(try String(contentsOf: manifestURL, encoding: .utf8))
        // The reader sees the targets that matter (so an empty closure cannot pass).
        for t in ["PushgateKit", "GatewayCore", "HTTPIngest", "GorushRPC", "QueueStore"] {
            XCTAssertNotNil(targets[t], "Package.swift: no target \(t)")
        }
        XCTAssertTrue(targets["HTTPIngest"]?.contains("hummingbird:Hummingbird") ?? false, "the reader finds HTTPIngest's Hummingbird")
        let closure = Self.closure(of: "PushgateKit", in: targets)
        XCTAssertTrue(closure.contains("GatewayCore"), "\(closure.sorted())")
        XCTAssertTrue(closure.contains("QueueStore"), "\(closure.sorted())")
        let http = closure.filter { $0.hasPrefix("hummingbird:") || $0 == "HTTPIngest" || $0 == "GorushRPC" || $0.hasPrefix("grpc-swift") }
        XCTAssertEqual(http, [], "PushgateKit depends on an ingest transport: \(http.sorted())")
    }
}
