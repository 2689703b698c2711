import CFuzzerDriver
// libFuzzer target: RFC 8291 / RFC 8188 `aes128gcm` decryption (`WebPushCrypto.decrypt`, which the
// mock Web Push server runs on every body it receives). See docs/fuzzing.md.
//
// Every input is used twice:
//  1. Raw: the input is the body, decrypted with a fixed receiver key and auth secret (both derived
//     deterministically below). Mutations of seeds made by `WebPushCrypto.encrypt` reach the header
//     parsing, the key id (P-256 point) check, ECDH, the key derivation and the record loop; only the
//     header/length paths can be reached past authentication this way.
//  2. Recipe: `rs(2, big endian) || content...`. The harness builds a well-formed multi-record body
//     itself (salt and sender key fixed, every record sealed with the right per-record nonce), so the
//     fuzzer controls the decrypted records: record size, delimiters, padding, record count. A small
//     reference decoder (`reference`) says what `decrypt` must return; any difference is a finding.
//
// `PUSHGATE_FUZZ_WRITE_SEEDS=<dir>` writes the seed corpus (bodies made by `WebPushCrypto.encrypt`,
// and recipes) into <dir> and exits; Fuzz/corpus/aes128gcm/ was made that way.
import Crypto
import Foundation
import WebPush

/// The receiver (user agent) key pair and auth secret: fixed, so a reproducer reproduces.
let receiverKey = try! P256.KeyAgreement.PrivateKey(rawRepresentation: Array(SHA256.hash(data: Array("pushgate fuzz receiver key".utf8))))
let authSecret = Array(SHA256.hash(data: Array("pushgate fuzz auth secret".utf8)).prefix(16))
let receiverPublic = Array(receiverKey.publicKey.x963Representation)

/// The sender side of recipe bodies: fixed key and salt, so the derived CEK and nonce are computed once.
let senderKey = try! P256.KeyAgreement.PrivateKey(rawRepresentation: Array(SHA256.hash(data: Array("pushgate fuzz sender key".utf8))))
let senderPublic = Array(senderKey.publicKey.x963Representation)
let salt = Array(SHA256.hash(data: Array("pushgate fuzz salt".utf8)).prefix(16))
let derived: WebPushCrypto.DerivedKeys = {
    let shared = try! senderKey.sharedSecretFromKeyAgreement(with: receiverKey.publicKey)
    return shared.withUnsafeBytes { secret in
        WebPushCrypto.deriveKeys(ecdhSecret: secret, authSecret: authSecret, uaPublic: receiverPublic, asPublic: senderPublic, salt: salt)
    }
}()
let cek = SymmetricKey(data: derived.contentEncryptionKey)

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>)
    -> CInt
{
    _ = derived
    if let dir = ProcessInfo.processInfo.environment["PUSHGATE_FUZZ_WRITE_SEEDS"] {
        writeSeeds(to: dir)
        exit(0)
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAES128GCM(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size > 0 && data != nil ? Array(UnsafeBufferPointer(start: data, count: size)) : []
    // 1. Raw body.
    _ = try? WebPushCrypto.decrypt(bytes, receiverPrivateKey: receiverKey, authSecret: authSecret)
    // 2. Recipe.
    if bytes.count >= 2 {
        let rs = Int(bytes[0]) << 8 | Int(bytes[1])
        let content = Array(bytes[2...])
        let body = sealedBody(rs: rs, content: content)
        let expected = reference(rs: rs, content: content)
        let got = try? WebPushCrypto.decrypt(body, receiverPrivateKey: receiverKey, authSecret: authSecret)
        if got != expected {
            fatalError(
                "decrypt gave \(got.map { "\($0.count) bytes" } ?? "an error"), the reference \(expected.map { "\($0.count) bytes" } ?? "an error") (rs \(rs), \(content.count) content bytes)"
            )
        }
    }
    return 0
}

/// Header `salt || rs || 65 || sender key`, then `content` cut into records of `rs - 16` plaintext
/// bytes (the last one shorter), each sealed with nonce XOR its sequence number. With `rs` < 18 the
/// content is sealed as one record (decrypt must refuse the header anyway).
func sealedBody(rs: Int, content: [UInt8]) -> [UInt8] {
    var out = salt
    out += [
        UInt8(truncatingIfNeeded: rs >> 24), UInt8(truncatingIfNeeded: rs >> 16), UInt8(truncatingIfNeeded: rs >> 8), UInt8(truncatingIfNeeded: rs),
    ]
    out.append(UInt8(senderPublic.count))
    out += senderPublic
    let step = rs >= 18 ? rs - 16 : max(content.count, 1)
    var offset = 0
    var seq: UInt64 = 0
    while offset < content.count {
        let record = content[offset..<min(offset + step, content.count)]
        var nonce = derived.nonce
        for i in 0..<8 { nonce[11 - i] ^= UInt8(truncatingIfNeeded: seq >> (8 * UInt64(i))) }
        let box = try! AES.GCM.seal(record, using: cek, nonce: try! AES.GCM.Nonce(data: nonce))
        out += box.ciphertext
        out += box.tag
        offset += step
        seq += 1
    }
    return out
}

/// RFC 8188 section 2 as `decrypt` implements it: at least one record; in each record, trailing
/// zero bytes are padding, the byte before them is the delimiter, 2 in the last record and 1 in the
/// others; a record with no delimiter is refused. nil = must be refused.
func reference(rs: Int, content: [UInt8]) -> [UInt8]? {
    guard rs >= 18, !content.isEmpty else { return nil }
    let step = rs - 16
    var out: [UInt8] = []
    var offset = 0
    while offset < content.count {
        let end = min(offset + step, content.count)
        let record = content[offset..<end]
        guard let d = record.lastIndex(where: { $0 != 0 }) else { return nil }
        guard record[d] == (end == content.count ? 2 : 1) else { return nil }
        out += record[offset..<d]
        offset = end
    }
    return out
}

func writeSeeds(to dir: String) {
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    func write(_ name: String, _ bytes: [UInt8]) {
        _ = FileManager.default.createFile(atPath: dir + "/" + name, contents: Data(bytes))
    }
    let receiver = try! WebPushReceiverKeys(publicKey: receiverKey.publicKey, authSecret: authSecret)
    // Bodies as the gateway sends them (fixed sender key and salt variants, so the files are stable).
    let plaintexts: [(String, [UInt8])] = [
        ("empty", []),
        ("short", Array("hello".utf8)),
        ("json", Array(#"{"title":"Hi","message":"Hello from Pushgate","data":{"chatId":"42"}}"#.utf8)),
        ("max", [UInt8](repeating: 0x61, count: WebPushCrypto.maxPlaintextSize)),
        ("binary", (0..<256).map { UInt8($0) }),
    ]
    for (i, (name, p)) in plaintexts.enumerated() {
        let s = Array(SHA256.hash(data: Array("salt \(i)".utf8)).prefix(16))
        let body = try! WebPushCrypto.encrypt(p, for: receiver, senderKey: senderKey, salt: s)
        // Every seed must decrypt (a check of the harness's keys, not of the fuzzed code).
        precondition((try? WebPushCrypto.decrypt(body, receiverPrivateKey: receiverKey, authSecret: authSecret)) == p)
        write("body-\(name)", body)
    }
    // Recipes: rs(2) || records.
    func recipe(_ rs: Int, _ content: [UInt8]) -> [UInt8] { [UInt8(rs >> 8), UInt8(rs & 0xFF)] + content }
    write("recipe-one-record", recipe(4096, Array("hello".utf8) + [2]))
    write("recipe-padded", recipe(4096, Array("hello".utf8) + [2, 0, 0, 0, 0]))
    // rs 20: 4 plaintext bytes per record.
    write("recipe-three-records", recipe(20, Array("abc".utf8) + [1] + Array("d".utf8) + [1, 0, 0] + Array("ef".utf8) + [2]))
    write("recipe-full-last", recipe(18, [0x61, 1, 0x62, 2]))
    write("recipe-bad-delimiter", recipe(20, Array("abc".utf8) + [2] + Array("d".utf8) + [2]))
    write("recipe-rs-too-small", recipe(17, [2]))
}

// SwiftPM links an executable target with `main` aliased to `<Module>_main` (so tests can link the
// module), which hides libFuzzer's own `main`; this entry point hands over to libFuzzer's driver.
@_cdecl("FuzzAES128GCM_main")
public func fuzzAES128GCMMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzAES128GCM(data, size) }
}
