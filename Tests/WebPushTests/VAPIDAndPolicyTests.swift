import Crypto
import Foundation
import ProviderKit
import PushgateCore
import Signing
import XCTest

@testable import WebPush

final class VAPIDTests: XCTestCase {
    func testKeysFromBase64URLScalarDerivePublicKey() throws {
        let k = P256.Signing.PrivateKey()
        let keys = try VAPIDKeys(privateKeyBase64URL: Base64URL.encode(k.rawRepresentation))
        XCTAssertEqual(keys.publicKeyBase64URL, Base64URL.encode(k.publicKey.x963Representation))
        XCTAssertEqual(b64u(keys.publicKeyBase64URL).count, 65)
        XCTAssertEqual(keys.privateKeyBase64URL, Base64URL.encode(k.rawRepresentation))
        // PEM accepted too.
        XCTAssertEqual(try VAPIDKeys(privateKeyBase64URL: k.pemRepresentation).publicKeyBase64URL, keys.publicKeyBase64URL)
        let g = VAPIDKeys.generate()
        XCTAssertEqual(try VAPIDKeys(privateKeyBase64URL: g.privateKeyBase64URL).publicKeyBase64URL, g.publicKeyBase64URL)
        XCTAssertTrue(g.summary.contains("vapid_private_key: \"\(g.privateKeyBase64URL)\""))
    }

    func testBadKeysAndSubjectsNameTheKey() {
        for bad in ["", "not base64!", Base64URL.encode([UInt8](repeating: 1, count: 31)), Base64URL.encode([UInt8](repeating: 0, count: 32))] {
            XCTAssertThrowsError(try VAPIDKeys(privateKeyBase64URL: bad)) { e in
                XCTAssertTrue("\(e)".contains("webpush.vapid_private_key"), "\(e)")
                XCTAssertFalse("\(e)".contains("\n"))
            }
        }
        XCTAssertNoThrow(try validateVAPIDSubject("mailto:ops@example.com"))
        XCTAssertNoThrow(try validateVAPIDSubject("https://example.com/contact"))
        for bad in ["", "ops@example.com", "mailto:", "mailto:nobody", "http://example.com", "https://"] {
            XCTAssertThrowsError(try validateVAPIDSubject(bad)) { e in XCTAssertTrue("\(e)".contains("webpush.vapid_subject"), "\(e)") }
        }
    }

    func testConfigurationValidation() throws {
        let key = VAPIDKeys.generate().privateKeyBase64URL
        var c = WebPushConfiguration(vapidPrivateKey: key, vapidSubject: "mailto:a@b.c")
        XCTAssertEqual(c.defaultTTL, 86_400)
        XCTAssertFalse(c.allowHTTP)
        XCTAssertFalse(c.allowPrivateEndpoints)
        XCTAssertNil(c.hostAllowlist)
        XCTAssertNoThrow(try c.validate())
        c.defaultTTL = -1
        XCTAssertThrowsError(try c.validate()) { XCTAssertTrue("\($0)".contains("webpush.default_ttl")) }
        c.defaultTTL = 60
        c.hostAllowlist = ["https://push.example.com/"]
        XCTAssertThrowsError(try c.validate()) { XCTAssertTrue("\($0)".contains("webpush.host_allowlist[0]")) }
        c.hostAllowlist = nil
        c.vapidSubject = "nope"
        XCTAssertThrowsError(try c.validate()) { XCTAssertTrue("\($0)".contains("webpush.vapid_subject")) }
    }

    func testAuthorizationHeaderJWTAndCache() throws {
        let keys = VAPIDKeys.generate()
        let clock = Locked(Date(timeIntervalSince1970: 1_700_000_000))
        let auth = VAPIDAuthorizer(keys: keys, subject: "mailto:ops@example.com", now: { clock.withLock { $0 } })
        let header = try auth.authorization(origin: "https://push.example.net")
        XCTAssertTrue(header.hasPrefix("vapid t="))
        XCTAssertTrue(header.hasSuffix(", k=\(keys.publicKeyBase64URL)"))
        let token = String(header.dropFirst("vapid t=".count).prefix { $0 != "," })
        let jwt = try DecodedJWT(token)
        try jwt.verify(es256: keys.privateKey.publicKey)
        XCTAssertEqual(jwt.header["typ"] as? String, "JWT")
        XCTAssertEqual(jwt.header["alg"] as? String, "ES256")
        XCTAssertEqual(jwt.claims["aud"] as? String, "https://push.example.net")
        XCTAssertEqual(jwt.claims["sub"] as? String, "mailto:ops@example.com")
        XCTAssertEqual((jwt.claims["exp"] as? NSNumber)?.int64Value, 1_700_000_000 + 12 * 3600)

        // Cached per origin...
        XCTAssertEqual(try auth.authorization(origin: "https://push.example.net"), header)
        clock.withLock { $0 = $0.addingTimeInterval(10 * 3600) }
        XCTAssertEqual(try auth.authorization(origin: "https://push.example.net"), header)
        XCTAssertNotEqual(try auth.authorization(origin: "https://other.example.net"), header)
        XCTAssertEqual(auth.cachedOrigins, 2)
        // ...and re-minted within the last hour of validity.
        clock.withLock { $0 = $0.addingTimeInterval(1.5 * 3600) }
        let renewed = try auth.authorization(origin: "https://push.example.net")
        XCTAssertNotEqual(renewed, header)
        let renewedJWT = try DecodedJWT(String(renewed.dropFirst("vapid t=".count).prefix { $0 != "," }))
        XCTAssertEqual((renewedJWT.claims["exp"] as? NSNumber)?.int64Value, 1_700_000_000 + Int64(11.5 * 3600) + 12 * 3600)
        auth.invalidate(origin: "https://push.example.net")
        XCTAssertEqual(auth.cachedOrigins, 1)
    }
}

final class AddressPolicyTests: XCTestCase {
    func testClassifiesRequiredAddresses() {
        let cases: [(String, IPAddressClass)] = [
            ("10.0.0.1", .private), ("192.168.1.1", .private), ("172.16.0.1", .private), ("172.31.255.255", .private),
            ("169.254.169.254", .linkLocal), ("127.0.0.1", .loopback), ("127.8.9.10", .loopback),
            ("::1", .loopback), ("fc00::1", .uniqueLocal), ("fd12:3456::1", .uniqueLocal), ("fe80::1", .linkLocal),
            ("::", .unspecified), ("0.0.0.0", .unspecified), ("0.1.2.3", .unspecified),
            ("100.64.0.1", .sharedAddressSpace), ("100.127.255.255", .sharedAddressSpace),
            ("224.0.0.1", .multicast), ("239.255.255.250", .multicast), ("ff02::1", .multicast),
            ("255.255.255.255", .broadcast), ("240.0.0.1", .reserved),
            ("192.0.2.1", .documentation), ("198.51.100.7", .documentation), ("203.0.113.9", .documentation),
            ("2001:db8::1", .documentation), ("198.18.0.1", .benchmarking),
            ("::ffff:127.0.0.1", .ipv4Mapped), ("::ffff:8.8.8.8", .ipv4Mapped), ("::ffff:10.0.0.1", .ipv4Mapped),
            ("64:ff9b::a00:1", .private), ("2002:c0a8:0101::1", .private), ("2001::1", .reserved),
            // Public examples (never contacted: pure classification).
            ("8.8.8.8", .public), ("1.1.1.1", .public), ("172.32.0.1", .public), ("100.128.0.1", .public),
            ("142.250.74.110", .public), ("2a00:1450:4001:81c::200a", .public), ("2606:4700:4700::1111", .public),
            ("64:ff9b::808:808", .public),
        ]
        for (ip, expected) in cases {
            XCTAssertEqual(IPAddressClassifier.classify(ip), expected, ip)
        }
        XCTAssertNil(IPAddressClassifier.classify("push.example.com"))
        XCTAssertNil(IPAddressClassifier.classify("999.1.1.1"))
        XCTAssertEqual(IPAddressClassifier.classify("[::1]"), .loopback)
    }

    func testRefusalMessages() {
        XCTAssertEqual(
            IPAddressClassifier.refusal(for: IPAddressClassifier.parse("127.0.0.1")!),
            "endpoint refused: 127.0.0.1 is a loopback address (set webpush.allow_private_endpoints to allow)")
        XCTAssertEqual(
            IPAddressClassifier.refusal(for: IPAddressClassifier.parse("::ffff:10.0.0.1")!),
            "endpoint refused: ::ffff:10.0.0.1 is an IPv4-mapped IPv6 address of a private address (set webpush.allow_private_endpoints to allow)")
        XCTAssertNil(IPAddressClassifier.refusal(for: IPAddressClassifier.parse("8.8.4.4")!))
    }

    func testEndpointPolicy() {
        let strict = EndpointPolicy()
        func reason(_ p: EndpointPolicy, _ url: String) -> String? {
            if case .failure(let f) = p.check(url) { return f.reason }
            return nil
        }
        XCTAssertNil(reason(strict, "https://fcm.googleapis.com/fcm/send/abc:def"))
        XCTAssertEqual(reason(strict, "http://push.example.com/x"), "endpoint refused: plain http (set webpush.allow_http to allow)")
        XCTAssertEqual(reason(strict, "ftp://push.example.com/x"), "endpoint refused: scheme \"ftp\" is not https")
        XCTAssertEqual(
            reason(strict, "https://127.0.0.1:8443/push/1"),
            "endpoint refused: 127.0.0.1 is a loopback address (set webpush.allow_private_endpoints to allow)")
        XCTAssertNotNil(reason(strict, "https://[::1]/x"))
        XCTAssertNotNil(reason(strict, "https://[fc00::1]/x"))
        XCTAssertNotNil(reason(strict, "https://169.254.169.254/latest/meta-data"))
        XCTAssertNotNil(reason(strict, "https://localhost/x"))
        XCTAssertNotNil(reason(strict, "https://user:pw@push.example.com/x"))
        XCTAssertNotNil(reason(strict, "not a url"))
        XCTAssertNil(reason(EndpointPolicy(allowHTTP: true), "http://push.example.com/x"))
        XCTAssertNil(reason(EndpointPolicy(allowPrivateEndpoints: true), "https://127.0.0.1:8443/push/1"))

        let listed = EndpointPolicy(hostAllowlist: ["fcm.googleapis.com", "*.push.services.mozilla.com", "ntfy.sh"])
        XCTAssertNil(reason(listed, "https://fcm.googleapis.com/fcm/send/x"))
        XCTAssertNil(reason(listed, "https://updates.push.services.mozilla.com/wpush/v2/x"))
        XCTAssertNil(reason(listed, "https://NTFY.sh/upABC"))
        XCTAssertEqual(reason(listed, "https://evil.example/x"), "endpoint refused: host evil.example is not in webpush.host_allowlist")
        XCTAssertNotNil(reason(listed, "https://ntfy.sh.evil.example/x"))

        // Resolved addresses: refused if any one is not public.
        let addrs = [IPAddressClassifier.parse("142.250.74.110")!, IPAddressClassifier.parse("10.1.2.3")!]
        XCTAssertEqual(
            strict.check(resolved: addrs, host: "push.example.com")?.reason,
            "endpoint refused: push.example.com resolves to 10.1.2.3, a private address (set webpush.allow_private_endpoints to allow)")
        XCTAssertNil(strict.check(resolved: [addrs[0]], host: "push.example.com"))
        XCTAssertNil(EndpointPolicy(allowPrivateEndpoints: true).check(resolved: addrs, host: "x"))
    }

    func testEndpointParsing() throws {
        let ep = try XCTUnwrap(WebPushEndpoint("https://Push.Example.com:443/wpush/v2/abc?x=1#frag"))
        XCTAssertEqual(ep.host, "push.example.com")
        XCTAssertEqual(ep.port, 443)
        XCTAssertEqual(ep.origin, "https://push.example.com")
        XCTAssertEqual(ep.pathAndQuery, "/wpush/v2/abc?x=1")
        let ep2 = try XCTUnwrap(WebPushEndpoint("https://127.0.0.1:8443/push/1"))
        XCTAssertEqual(ep2.origin, "https://127.0.0.1:8443")
        let ep3 = try XCTUnwrap(WebPushEndpoint("https://[::1]:9000"))
        XCTAssertEqual(ep3.origin, "https://[::1]:9000")
        XCTAssertEqual(ep3.pathAndQuery, "/")
        XCTAssertNil(WebPushEndpoint("https://"))
        XCTAssertNil(WebPushEndpoint("https://host:99999/"))
    }

    /// The byte parser used for ASCII URLs gives the Character parser's answers.
    func testASCIIEndpointParserAgreesWithCharacterParser() {
        let urls = [
            "https://Push.Example.com:443/wpush/v2/abc?x=1#frag", "HTTPS://h", "http://h:80", "http://h:8080/", "https://h?q",
            "https://h#f", "https://h/#f", "https://h/p#f g", "https://h/p q", "https://h p/", "https://u@h/", "https://h/@x",
            "https://[::1]", "https://[::1]:9000/x", "https://[::1]x", "https://[::1", "https://h:", "https://h:+443/",
            "https://h:-1/", "https://h:0/", "https://h:65536/", "https://h:1x/", "ftp://h/", "https:/h", "https://", "://h",
            "https://a:b:443/", "https://h\r\n/", "https://h/\t", "wss://h", "https:///x", "https://h?#", "https://H.EXAMPLE/P",
        ]
        for url in urls {
            var copy = url
            let ascii = copy.withUTF8 { WebPushEndpoint.parseASCII($0) }
            let chars = WebPushEndpoint.parseCharacters(url)
            XCTAssertEqual(
                ascii.map { "\($0.scheme)|\($0.host)|\($0.port)|\($0.path)" },
                chars.map { "\($0.scheme)|\($0.host)|\($0.port)|\($0.path)" }, url)
        }
        XCTAssertEqual(WebPushEndpoint("https://h/é")?.pathAndQuery, nil)
        XCTAssertEqual(WebPushEndpoint("https://h/p#é")?.pathAndQuery, "/p")
    }
}
