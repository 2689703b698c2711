import Foundation
import MockProviders
import ProviderKit
import PushgateCore
import XCTest

@testable import GatewayCore
@testable import HTTPIngest

/// What each registered provider contributes, platform by platform: a test fails naming the
/// platform and the missing piece when a module is registered without it.
final class ProviderContributionTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String { try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8) }

    /// Keys every platform's section has: the README documents them once as `<platform>.<key>`.
    static var sharedKeys: Set<String> {
        let platformSections = ProviderRegistry.sections.filter { Platform(name: $0.name) != nil }
        let all = platformSections.map { Set($0.keys.map(\.name)) }
        return all.dropFirst().reduce(all.first ?? []) { $0.intersection($1) }
    }

    func testEveryPlatformHasAModuleAMockAndABenchTarget() {
        XCTAssertEqual(Set(ProviderRegistry.platforms), Set(Platform.allCases), "a Platform case without a module, or a module without a case")
        for p in ProviderRegistry.platforms {
            XCTAssertNotNil(MockRegistry.module(for: p), "\(p.name): no mock in MockRegistry (tests, serve --mock, bench)")
            // `pushgate bench` sends to the platforms a mock receives (Bench.benchPlatforms).
            XCTAssertTrue(MockRegistry.platforms.contains(p), "\(p.name): no bench target")
        }
        let names = MockRegistry.modules.map(\.name)
        XCTAssertEqual(names.count, Set(names).count, "mock names are unique: \(names)")
    }

    func testEveryPlatformHasAConfigSectionWithItsKeys() {
        for p in ProviderRegistry.platforms {
            guard let section = ProviderRegistry.sections.first(where: { $0.name == p.name }) else {
                XCTFail("\(p.name): no configuration section")
                continue
            }
            let keys = Set(section.keys.map(\.name))
            for key in ["enabled", "max_tokens", "max_retry", "coalesce_seconds"] {
                XCTAssertTrue(keys.contains(key), "\(p.name).\(key) missing")
            }
            XCTAssertEqual(ProviderRegistry.platformRules[p]?.maxTokens, RawConfig.defaults["\(p.name).max_tokens"].flatMap { Int(configValue: $0) })
        }
    }

    /// The README's configuration table names every key of every registered section (keys every
    /// platform section has may be written once as `<platform>.<key>`); `config/pushgate.yml` has
    /// every platform's section.
    func testTheConfigurationReferenceDocumentsEverySection() throws {
        let readme = try Self.text("README.md")
        let shared = Self.sharedKeys
        for section in ProviderRegistry.sections {
            for key in section.keys {
                let documented =
                    readme.contains("`\(section.name).\(key.name)`") || (shared.contains(key.name) && readme.contains("`<platform>.\(key.name)`"))
                XCTAssertTrue(documented, "README.md's configuration table does not document \(section.name).\(key.name)")
            }
        }
        let example = try Self.text("config/pushgate.yml")
        for p in ProviderRegistry.platforms {
            XCTAssertTrue(example.contains("\n\(p.name):"), "config/pushgate.yml has no \(p.name): section")
        }
    }

    func testTheOpenAPIPlatformEnumListsEveryPlatform() throws {
        let spec = try Self.text("docs/openapi.yaml")
        guard let start = spec.range(of: "\n    Platform:\n") else { return XCTFail("docs/openapi.yaml: no Platform schema") }
        let enums = spec[start.upperBound...].split(separator: "\n").prefix(20).filter { $0.contains("enum: [") }
        XCTAssertEqual(enums.count, 2, "the Platform schema's integer and string enums")
        func values(_ line: Substring) -> Set<String> {
            let inner = line.drop { $0 != "[" }.dropFirst().prefix { $0 != "]" }
            return Set(
                inner.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) })
        }
        for p in ProviderRegistry.platforms {
            XCTAssertTrue(
                enums.first.map(values)?.contains("\(p.rawValue)") ?? false, "docs/openapi.yaml: Platform's integer enum lacks \(p.rawValue)")
            XCTAssertTrue(enums.last.map(values)?.contains(p.name) ?? false, "docs/openapi.yaml: Platform's string enum lacks \(p.name)")
        }
    }

    /// Each platform's counters are in `/metrics` and its counts in `/api/stat/app` of a running gateway;
    /// every registered mock points a gateway at itself by enabling its platforms.
    func testEveryPlatformHasMetricsStatsAndAMockConfiguration() async throws {
        let counters = ProviderRegistry.counters
        XCTAssertEqual(counters.map(\.platform), ProviderRegistry.platforms)
        let names = counters.flatMap { [$0.counters.success, $0.counters.error] }
        XCTAssertEqual(names.count, Set(names).count, "counter names are unique: \(names)")
        let env = try await TestEnvironment.start()
        let overrides = Set(env.stack.overrides.map(\.key))
        for p in ProviderRegistry.platforms {
            XCTAssertTrue(overrides.contains("\(p.name).enabled"), "\(p.name): no registered mock enables it (MockRegistry)")
        }
        try await env.withGateway { client, _ in
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let lines = Set(metrics.split(separator: "\n").map(String.init))
            let stat = try await client.execute(uri: "/api/stat/app", method: .get) { jsonObject(String(buffer: $0.body)) }
            for (p, c) in counters {
                for (name, help) in [(c.success, c.successHelp), (c.error, c.errorHelp)] {
                    XCTAssertTrue(lines.contains("# HELP \(name) \(help)"), "\(p.name): \(name) not in /metrics")
                    XCTAssertTrue(lines.contains("\(name) 0"), "\(p.name): \(name)'s sample not in /metrics")
                }
                XCTAssertNotNil(stat[p.name] as? [String: Int], "\(p.name) not in /api/stat/app")
            }
        }
        await env.stop()
    }
}
