import Foundation
import GatewayCore
import MockKit
import MockProviders
import ProviderKit
import XCTest

final class MockSnippetTests: XCTestCase {
    /// The YAML `pushgate mock` writes for a gateway (gateway-snippet.yml, what the README runs the
    /// gateway on) sets, for every mock, each key the tests point a gateway at it with, to the same value.
    func testEveryMockSnippetSetsWhatItsConfigurationKeysSet() async throws {
        let env = try await TestEnvironment.start()
        var checked = 0
        for m in env.stack.mocks {
            let raw = try RawConfig(yaml: m.configSnippet, environment: [:])
            for (key, value) in m.configOverrides + m.configDefaults {
                XCTAssertEqual(raw.values[key], value, "\(m.name): \(key) in its snippet:\n\(m.configSnippet)")
                checked += 1
            }
        }
        XCTAssertGreaterThan(checked, env.stack.mocks.count, "every mock has keys")
        await env.stop()
    }

    /// Dotted keys become nested maps in the order given; strings are quoted with their escapes,
    /// lists in flow style; a comment goes after its key's line; a blank line ends each section.
    func testDottedKeysRenderAsYAMLThatReadsBack() throws {
        let values: [(key: String, value: ConfigValue)] = [
            ("oppo.enabled", .bool(true)),
            ("oppo.master_secret", .string("s\"e\\c\nret\u{1}")),
            ("core.port", .int(8088)),
            ("oppo.category", .string("IM")),
            ("core.tls.ciphers", .list(["a", "b c"])),
        ]
        let yaml = MockConfigYAML.render(values, comments: ["oppo.master_secret": "a throwaway"])
        XCTAssertEqual(
            yaml,
            """
            oppo:
              enabled: true
              master_secret: "s\\"e\\\\c\\nret\\u0001"   # a throwaway
              category: "IM"

            core:
              port: 8088
              tls:
                ciphers: ["a", "b c"]


            """)
        let raw = try RawConfig(yaml: yaml, environment: [:])
        XCTAssertEqual(raw.values["oppo.master_secret"], .string("s\"e\\c\nret\u{1}"))
        XCTAssertEqual(raw.values["oppo.enabled"], .bool(true))
        XCTAssertEqual(raw.values["core.port"], .int(8088))
    }
}
