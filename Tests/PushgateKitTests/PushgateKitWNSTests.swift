import Foundation
import MockProviders
import NIOPosix
import PushgateKit
import WNSMock
import XCTest

/// The embedding API sends to WNS: configured by its keys' names, a notification built in code with
/// its `wns` object, against the strict mock WNS over real TLS.
final class PushgateKitWNSTests: XCTestCase {
    func testEmbeddedGatewaySendsATileAndAToast() async throws {
        let pki = try TestPKI.generate()
        let wns = MockWNS(options: MockWNS.Options(tls: try pki.serverTLSConfiguration()), eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        try await wns.start()
        defer { Task { try? await wns.stop() } }
        var config = PushgateConfiguration()
        config.trustRootsPEM = [pki.caCertificatePEM]
        config.settings = [
            "wns.enabled": "true", "wns.package_sid": wns.options.packageSID, "wns.package_secret": wns.options.packageSecret,
            "wns.token_url": wns.liveTokenURL, "wns.connect_to": wns.connectTo, "wns.resolve": "db5p.notify.windows.com=20.1.2.3",
        ]
        let gateway = try await PushgateGateway(configuration: config)
        do {
            let channel = "https://db5p.notify.windows.com/?token=kit"
            var tile = PushNotification(platform: .wns, tokens: [channel])
            tile.wns = JSONObject([("type", .string("tile")), ("xml", .string("<tile><visual/></tile>")), ("tag", .string("kit"))])
            var toast = PushNotification(platform: .wns, tokens: [channel])
            toast.title = "Kit"
            toast.message = "Hello"
            let outcomes = try await gateway.send([tile, toast], timeout: 30)
            XCTAssertEqual(outcomes.map { if case .delivered = $0.result { true } else { false } }, [true, true], "\(outcomes)")
            XCTAssertEqual(outcomes.map(\.platform), [.wns, .wns])
            XCTAssertEqual(Set(wns.messages.map(\.type)), ["wns/tile", "wns/toast"])
            XCTAssertEqual(wns.messages.first { $0.type == "wns/tile" }?.wnsHeaders["x-wns-tag"], "kit")
            // A wns object built in code is held to the same rules: refused whole, naming the field.
            var bad = PushNotification(platform: .wns, tokens: [channel])
            bad.wns = JSONObject([("type", .string("tile"))])
            do {
                _ = try await gateway.send([bad], timeout: 30)
                XCTFail("a tile without xml was accepted")
            } catch {
                XCTAssertTrue("\(error)".contains("notifications[0].wns.xml"), "\(error)")
            }
            XCTAssertEqual(wns.messages.count, 2)
        } catch {
            await gateway.shutdown()
            throw error
        }
        await gateway.shutdown()
    }
}
