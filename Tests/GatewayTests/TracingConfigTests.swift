import Foundation
import Logging
import XCTest

@testable import GatewayCore

/// `tracing:` (docs/observability.md): defaults, `PUSHGATE_TRACING_*`, the `OTEL_*` variables that
/// decide it, and one-line errors naming the key, without the endpoint's credentials.
final class TracingConfigTests: XCTestCase {
    func settings(_ yaml: String, _ env: [String: String] = [:]) throws -> TracingSettings {
        try GatewaySettings(RawConfig(yaml: yaml, environment: env), environment: env).tracing
    }

    func testDefaultsAreOffWithTheLocalCollector() throws {
        let t = try settings("")
        XCTAssertFalse(t.enabled)
        XCTAssertFalse(t.disabledByEnvironment)
        XCTAssertEqual(t.endpoint, "http://127.0.0.1:4318")
        XCTAssertEqual(t.serviceName, "pushgate")
        XCTAssertEqual(t.sampleRatio, 1.0)
        XCTAssertEqual(t.exportURL(environment: [:]), "http://127.0.0.1:4318/v1/traces")
    }

    func testFileAndEnvironmentSetIt() throws {
        let t = try settings("tracing:\n  enabled: true\n  endpoint: https://otel.example:4318/\n  sample_ratio: 0.25\n")
        XCTAssertTrue(t.enabled)
        XCTAssertEqual(t.sampleRatio, 0.25)
        XCTAssertEqual(t.exportURL(environment: [:]), "https://otel.example:4318/v1/traces", "one slash before v1/traces")
        let e = try settings("", ["PUSHGATE_TRACING_ENABLED": "true", "PUSHGATE_TRACING_SERVICE_NAME": "edge-push"])
        XCTAssertTrue(e.enabled)
        XCTAssertEqual(e.serviceName, "edge-push")
    }

    func testOTelVariables() throws {
        let on = "tracing:\n  enabled: true\n"
        let off = try settings(on, ["OTEL_SDK_DISABLED": "TRUE"])
        XCTAssertFalse(off.enabled, "OTEL_SDK_DISABLED=true turns it off")
        XCTAssertTrue(off.disabledByEnvironment)
        XCTAssertTrue(try settings(on, ["OTEL_SDK_DISABLED": "false"]).enabled)
        XCTAssertFalse(try settings("", ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"]).enabled, "OTEL_* alone never turns it on")
        let t = try settings(on)
        XCTAssertEqual(t.exportURL(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"]), "http://collector:4318/v1/traces")
        XCTAssertEqual(
            t.exportURL(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/spans"]),
            "http://b:2/spans", "the signal's own variable is the whole URL and wins")
        let shown = t.exportURL(environment: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://user:s3cret@c:4318/v1/traces?token=abc"])
        XCTAssertEqual(shown, "https://[REDACTED]@c:4318/v1/traces?[REDACTED]", "credentials never shown")
    }

    func testBadValuesAreOneLineNamingTheKeyWithoutCredentials() {
        for (yaml, env, key) in [
            ("tracing:\n  endpoint: ftp://c:21\n", [String: String](), "tracing.endpoint"),
            ("tracing:\n  endpoint: \"http://user:s3cret@\"\n", [:], "tracing.endpoint"),
            ("tracing:\n  endpoint: not a url\n", [:], "tracing.endpoint"),
            ("tracing:\n  sample_ratio: 1.5\n", [:], "tracing.sample_ratio"),
            ("tracing:\n  sample_ratio: half\n", [:], "tracing.sample_ratio"),
            ("tracing:\n  sample_ratio: nan\n", [:], "tracing.sample_ratio"),
            ("tracing:\n  service_name: \" \"\n", [:], "tracing.service_name"),
            ("tracing:\n  enabled: true\n", ["OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://user:s3cret@c"], "OTEL_EXPORTER_OTLP_ENDPOINT"),
            ("tracing:\n  enabled: true\n", ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "c:4318"], "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            ("", ["PUSHGATE_TRACING_ENDPOINT": "file:///etc/passwd"], "tracing.endpoint"),
        ] {
            XCTAssertThrowsError(try settings(yaml, env), "\(yaml) \(env)") { e in
                let text = "\(e)"
                XCTAssertTrue(text.hasPrefix("config error: \(key):"), text)
                XCTAssertFalse(text.contains("s3cret"), text)
                XCTAssertFalse(text.contains("\n"), text)
            }
        }
        // A variable the gateway does not use (tracing off) is not its concern.
        XCTAssertNoThrow(try settings("", ["OTEL_EXPORTER_OTLP_ENDPOINT": "nonsense"]))
    }

    func testRedactedConfigHidesTheEndpointCredentials() throws {
        let raw = try RawConfig(yaml: "tracing:\n  endpoint: https://user:s3cret@otel.example:4318\n", environment: [:])
        let yaml = raw.redactedYAML()
        XCTAssertFalse(yaml.contains("s3cret"), yaml)
        XCTAssertTrue(yaml.contains("otel.example:4318"), yaml)
    }
}

/// The OpenTelemetry SDK's diagnostic log shows the `OTEL_*` values it applies: hidden.
final class SecretDroppingLogHandlerTests: XCTestCase {
    final class Recorder: @unchecked Sendable {
        var events: [LogEvent] = []
    }

    struct RecordingHandler: LogHandler {
        let recorder: Recorder
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            var e = event
            e.metadata = metadata.merging(event.metadata ?? [:]) { _, new in new }
            recorder.events.append(e)
        }
    }

    func testValuesOfTheSDKsOverrideLinesAreHidden() {
        let recorder = Recorder()
        var logger = Logger(label: "pushgate.otel") { _ in SecretDroppingLogHandler(RecordingHandler(recorder: recorder)) }
        logger[metadataKey: "environment_key"] = "OTEL_EXPORTER_OTLP_HEADERS"
        logger[metadataKey: "environment_value"] = "authorization=Bearer s3cret"
        logger[metadataKey: "previous_value"] = "https://user:s3cret@otel.example"
        logger.info("Configuration updated from environment", metadata: ["new_value": "s3cret", "carrier": "s3cret"])
        XCTAssertEqual(recorder.events.count, 1)
        let m = recorder.events[0].metadata ?? [:]
        XCTAssertEqual(m["environment_key"], "OTEL_EXPORTER_OTLP_HEADERS", "the variable's name stays")
        for key in ["environment_value", "previous_value", "new_value", "carrier"] { XCTAssertEqual(m[key], "[REDACTED]", key) }
        XCTAssertFalse("\(m)".contains("s3cret"))
    }
}
