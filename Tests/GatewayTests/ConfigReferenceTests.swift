import Foundation
import MatrixIngest
import XCTest

@testable import GatewayCore

/// docs/configuration.md is generated from the typed configuration; config/pushgate.yml names only
/// keys that exist and has every section.
final class ConfigReferenceTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String { try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8) }

    func testTheCommittedConfigurationReferenceIsTheGeneratedOne() throws {
        let generated = ConfigReference.markdown(adapters: [MatrixSettings.reference])
        let committed = try Self.text("docs/configuration.md")
        if committed != generated {
            let a = committed.split(separator: "\n", omittingEmptySubsequences: false)
            let b = generated.split(separator: "\n", omittingEmptySubsequences: false)
            let first = (0..<min(a.count, b.count)).first { a[$0] != b[$0] } ?? min(a.count, b.count)
            let committedLine = first < a.count ? String(a[first]) : "(end of file)"
            let generatedLine = first < b.count ? String(b[first]) : "(end of file)"
            XCTFail(
                "docs/configuration.md differs from the configuration in the code at line \(first + 1): "
                    + "committed \(committedLine) / generated \(generatedLine); "
                    + "run `swift run pushgate config-reference > docs/configuration.md`")
        }
    }

    func testEveryKeyHasADescription() {
        for section in RawConfig.sections + [MatrixSettings.reference.section] {
            for key in section.keys { XCTAssertFalse(key.doc.isEmpty, "\(section.name).\(key.name) has no doc: in the code") }
        }
        for key in AppConfig.documentedKeys { XCTAssertFalse(key.doc.isEmpty, "apps[].\(key.name) has no doc:") }
    }

    func testTheSampleConfigNamesKnownKeysAndEverySection() throws {
        let sample = try Self.text("config/pushgate.yml")
        let raw = try RawConfig(yaml: sample, environment: [:])
        XCTAssertEqual(raw.warnings, [], "config/pushgate.yml: every key it names exists and is acted on")
        for section in RawConfig.sections {
            XCTAssertTrue(sample.contains("\n\(section.name):"), "config/pushgate.yml has no \(section.name): section")
        }
    }
}
