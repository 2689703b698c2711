import Crypto
import Foundation
import NIOPosix
import PushgateCore
import Signing
import XCTest

@testable import MockProviders
@testable import WebPush

/// Interop against independent implementations (http_ece, pywebpush, PyJWT). Runs when
/// `PUSHGATE_INTEROP_PYTHON` points to a python with `Tests/interop/requirements.txt` installed.
final class WebPushInteropTests: XCTestCase {
    static let interopDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("interop")

    func python() throws -> String {
        guard let py = ProcessInfo.processInfo.environment["PUSHGATE_INTEROP_PYTHON"], !py.isEmpty else {
            throw XCTSkip("set PUSHGATE_INTEROP_PYTHON to a python with http-ece, pywebpush, py-vapid, PyJWT, cryptography")
        }
        return py
    }

    /// Runs a script; returns (exit status, stdout, stderr).
    func run(_ script: String, _ args: [String], stdin: [UInt8] = []) throws -> (Int32, [UInt8], String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try python())
        // "--opt=value": a base64url value may begin with "-", which argparse would take for an option.
        var joined: [String] = []
        var i = 0
        while i < args.count {
            if args[i].hasPrefix("--"), i + 1 < args.count {
                joined.append(args[i] + "=" + args[i + 1])
                i += 2
            } else {
                joined.append(args[i])
                i += 1
            }
        }
        p.arguments = [Self.interopDir.appendingPathComponent(script).path] + joined
        let inPipe = Pipe()
        let outPipe = Pipe()
        let errPipe = Pipe()
        p.standardInput = inPipe
        p.standardOutput = outPipe
        p.standardError = errPipe
        try p.run()
        inPipe.fileHandleForWriting.write(Data(stdin))
        try inPipe.fileHandleForWriting.close()
        let out = outPipe.fileHandleForReading.readDataToEndOfFile()
        let err = errPipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, Array(out), String(decoding: err, as: UTF8.self))
    }

    func testGatewayBodyDecryptsWithHTTPECE() throws {
        _ = try python()
        let sub = TestWebPushSubscriber(id: "interop")
        for message in ["When I grow up, I want to be a watermelon", "", String(repeating: "ü", count: 1996) + "x"] {
            let body = try WebPushCrypto.encrypt(Array(message.utf8), for: try WebPushReceiverKeys(sub.keys))
            let (status, out, err) = try run(
                "webpush_decrypt.py",
                [
                    "--private-key", Base64URL.encode(sub.privateKey.rawRepresentation),
                    "--auth", sub.auth,
                ], stdin: body)
            XCTAssertEqual(status, 0, err)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), message)
        }
        // And the RFC example body, as a control.
        let (status, out, err) = try run(
            "webpush_decrypt.py",
            [
                "--private-key", RFC8291.uaPrivate, "--auth", RFC8291.authSecret,
                "--body", RFC8291.body,
            ])
        XCTAssertEqual(status, 0, err)
        XCTAssertEqual(String(decoding: out, as: UTF8.self), RFC8291.plaintext)
        // A tampered body must fail (the check can fail).
        var bad = try WebPushCrypto.encrypt(Array("x".utf8), for: try WebPushReceiverKeys(sub.keys))
        bad[bad.count - 3] ^= 1
        let (badStatus, _, _) = try run(
            "webpush_decrypt.py",
            [
                "--private-key", Base64URL.encode(sub.privateKey.rawRepresentation),
                "--auth", sub.auth,
            ], stdin: bad)
        XCTAssertNotEqual(badStatus, 0)
    }

    func testPywebpushBodyDecryptsWithGatewayAndMockDecryptors() throws {
        _ = try python()
        // One random subscriber, and one whose auth secret begins with "-" (base64url does that 1 time in 64;
        // passed as a separate argv word argparse took it for an option and CI failed on it once).
        var dash = TestWebPushSubscriber(id: "interop-dash")
        while !dash.auth.hasPrefix("-") { dash = TestWebPushSubscriber(id: "interop-dash") }
        for sub in [TestWebPushSubscriber(id: "interop"), dash] {
            let message = "{\"from\":\"pywebpush\",\"n\":42}"
            let (status, out, err) = try run("webpush_encrypt.py", ["--p256dh", sub.p256dh, "--auth", sub.auth, "--message", message])
            XCTAssertEqual(status, 0, err)
            let body = b64u(String(decoding: out, as: UTF8.self))
            XCTAssertEqual(
                String(decoding: try WebPushCrypto.decrypt(body, receiverPrivateKey: sub.privateKey, authSecret: sub.authSecret), as: UTF8.self),
                message)
            XCTAssertEqual(
                String(decoding: try MockWebPush.decrypt(body, privateKey: sub.privateKey, authSecret: sub.authSecret), as: UTF8.self), message)
        }
    }

    func testVAPIDHeaderVerifiesWithPyJWT() async throws {
        _ = try python()
        // A real delivery to the mock, then the recorded header is checked independently.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pki = try TestPKI.generate()
        let mock = MockWebPush(options: .init(tls: try pki.serverTLSConfiguration()), eventLoopGroup: group)
        try await mock.start()
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "https://pushgate.test/contact")
        config.allowPrivateEndpoints = true
        let engine = try WebPushEngine(configuration: config, tlsConfiguration: try pki.clientTLSConfiguration(), eventLoopGroup: group)
        let (sub, subscriber) = mock.makeSubscription()
        var n = PushNotification(platform: .webpush)
        n.payload = "interop"
        let outcome = await WebPushProvider(engine: engine).send(
            try engine.prepare(n), to: .subscription(sub),
            context: DeliveryContext(messageID: "i"))
        await engine.shutdown()
        try await mock.stop()
        try await group.shutdownGracefully()
        XCTAssertTrue(outcome.isDelivered, "\(outcome)")
        let push = try XCTUnwrap(mock.pushes.first)
        let authorization = try XCTUnwrap(push.header("authorization"))

        let (ok, out, err) = try run(
            "webpush_vapid_verify.py",
            [
                "--authorization", authorization, "--audience", mock.baseURL,
                "--public-key", keys.publicKeyBase64URL,
            ])
        XCTAssertEqual(ok, 0, err)
        XCTAssertTrue(String(decoding: out, as: UTF8.self).contains("\"sub\": \"https://pushgate.test/contact\""))
        let (wrongAud, _, _) = try run("webpush_vapid_verify.py", ["--authorization", authorization, "--audience", "https://other.example"])
        XCTAssertNotEqual(wrongAud, 0, "a wrong audience must be refused")
        let (wrongKey, _, _) = try run(
            "webpush_vapid_verify.py",
            [
                "--authorization", authorization, "--audience", mock.baseURL,
                "--public-key", VAPIDKeys.generate().publicKeyBase64URL,
            ])
        XCTAssertNotEqual(wrongKey, 0)
        // The recorded body also decrypts with http_ece.
        let (dec, plain, decErr) = try run(
            "webpush_decrypt.py",
            [
                "--private-key", Base64URL.encode(subscriber.privateKey.rawRepresentation),
                "--auth", subscriber.auth,
            ], stdin: push.body)
        XCTAssertEqual(dec, 0, decErr)
        XCTAssertEqual(String(decoding: plain, as: UTF8.self), "interop")
    }

    /// A declarative message as the gateway renders and sends it, taken from the bytes the
    /// mock push service received and decrypted by http_ece: a document with "web_push": 8030 and the
    /// notification's title, body and navigate URL.
    func testDeclarativeMessageDecryptsWithHTTPECE() async throws {
        _ = try python()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pki = try TestPKI.generate()
        let mock = MockWebPush(options: .init(tls: try pki.serverTLSConfiguration()), eventLoopGroup: group)
        try await mock.start()
        let keys = VAPIDKeys.generate()
        var config = WebPushConfiguration(vapidPrivateKey: keys.privateKeyBase64URL, vapidSubject: "mailto:interop@pushgate.test")
        config.allowPrivateEndpoints = true
        config.declarative = true  // the webpush.declarative default: no "declarative" on the notification
        let engine = try WebPushEngine(configuration: config, tlsConfiguration: try pki.clientTLSConfiguration(), eventLoopGroup: group)
        let (sub, subscriber) = mock.makeSubscription()
        var n = PushNotification(platform: .webpush)
        n.title = "Déclaratif \"1\""
        n.message = "Body ✓"
        n.data = JSONObject([("url", .string("https://example.com/inbox?x=1&y=é"))])
        n.badge = 7
        n.collapseID = "t1"
        let outcome = await WebPushProvider(engine: engine).send(
            try engine.prepare(n), to: .subscription(sub), context: DeliveryContext(messageID: "d"))
        await engine.shutdown()
        try await mock.stop()
        try await group.shutdownGracefully()
        XCTAssertTrue(outcome.isDelivered, "\(outcome)")
        let push = try XCTUnwrap(mock.pushes.first)
        XCTAssertEqual(push.header("content-encoding"), "aes128gcm")

        let (status, out, err) = try run(
            "webpush_decrypt.py",
            ["--private-key", Base64URL.encode(subscriber.privateKey.rawRepresentation), "--auth", subscriber.auth], stdin: push.body)
        XCTAssertEqual(status, 0, err)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out)) as? [String: Any], String(decoding: out, as: UTF8.self))
        XCTAssertEqual(doc["web_push"] as? Int, 8030)
        XCTAssertEqual(doc["app_badge"] as? Int, 7)
        let notification = try XCTUnwrap(doc["notification"] as? [String: Any])
        XCTAssertEqual(notification["title"] as? String, "Déclaratif \"1\"")
        XCTAssertEqual(notification["body"] as? String, "Body ✓")
        XCTAssertEqual(notification["navigate"] as? String, "https://example.com/inbox?x=1&y=é")
        XCTAssertEqual(notification["tag"] as? String, "t1")
        // The mock's reader agrees.
        XCTAssertEqual(push.declarative?.message?.navigate, "https://example.com/inbox?x=1&y=é")
    }
}
