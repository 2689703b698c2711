import ProviderKit
import PushgateCore
import XCTest

@testable import WNS

final class WNSConfigurationTests: XCTestCase {
    func section(_ values: [String: ConfigValue]) -> SectionValues {
        SectionValues(name: "wns", values: values.merging(["enabled": .bool(true)]) { a, _ in a })
    }

    func error(_ values: [String: ConfigValue], file: StaticString = #filePath, line: UInt = #line) -> ConfigError? {
        do {
            _ = try WNSSettings.senderConfiguration(section(values))
            XCTFail("accepted", file: file, line: line)
            return nil
        } catch let e as ConfigError {
            return e
        } catch {
            XCTFail("\(error)", file: file, line: line)
            return nil
        }
    }

    func testFlows() throws {
        let entra = try WNSSettings.senderConfiguration(
            section(["tenant_id": .string("contoso.onmicrosoft.com"), "client_id": .string("id"), "client_secret": .string("s")]))
        XCTAssertEqual(entra.credentials, .entra(tenantID: "contoso.onmicrosoft.com", clientID: "id", clientSecret: "s"))
        XCTAssertEqual(entra.credentials.defaultTokenURL, "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token")
        XCTAssertNil(entra.tokenURL)
        XCTAssertNil(entra.connectTo)
        let live = try WNSSettings.senderConfiguration(section(["package_sid": .string("ms-app://s-1"), "package_secret": .string("p")]))
        XCTAssertEqual(live.credentials.defaultTokenURL, "https://login.live.com/accesstoken.srf")
        XCTAssertEqual(
            live.credentials.formBody, "grant_type=client_credentials&client_id=ms-app%3A%2F%2Fs-1&client_secret=p&scope=notify.windows.com")
        XCTAssertEqual(
            entra.credentials.formBody, "grant_type=client_credentials&client_id=id&client_secret=s&scope=https%3A%2F%2Fwns.windows.com%2F.default")
    }

    func testRefusals() {
        XCTAssertEqual(error([:])?.key, "wns")
        XCTAssertEqual(
            error(["tenant_id": .string("t"), "client_id": .string("c"), "client_secret": .string("s"), "package_sid": .string("p")])?.key, "wns")
        XCTAssertEqual(error(["tenant_id": .string("t"), "client_id": .string("c")])?.key, "wns.client_secret")
        XCTAssertEqual(error(["package_sid": .string("p")])?.key, "wns.package_secret")
        XCTAssertEqual(error(["tenant_id": .string("../evil"), "client_id": .string("c"), "client_secret": .string("s")])?.key, "wns.tenant_id")
        let live: [String: ConfigValue] = ["package_sid": .string("p"), "package_secret": .string("s")]
        XCTAssertEqual(error(live.merging(["connect_to": .string("127.0.0.1")]) { $1 })?.key, "wns.connect_to")
        XCTAssertEqual(error(live.merging(["connect_to": .string("127.0.0.1:99999")]) { $1 })?.key, "wns.connect_to")
        XCTAssertEqual(error(live.merging(["resolve": .list(["x"])]) { $1 })?.key, "wns.resolve")
        XCTAssertEqual(error(live.merging(["token_url": .string("file:///etc/passwd")]) { $1 })?.key, "wns.token_url")
        // The secret is never in an error.
        let e = error(["package_sid": .string("p"), "package_secret": .string("hunter2"), "tenant_id": .string("t")])
        XCTAssertFalse(e?.description.contains("hunter2") ?? true)
    }

    func testSecretsAreMarkedSecret() {
        let secret = WNSSettings.keys.filter { $0.secrecy == .secret }.map(\.name)
        XCTAssertEqual(Set(secret), ["client_secret", "package_secret"])
    }
}
