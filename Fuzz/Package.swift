// swift-tools-version:6.0
// Fuzz targets for Pushgate. A separate package so the fuzzer flags never touch
// the main build; run it with ../scripts/fuzz.sh (see ../docs/fuzzing.md). Each target is a
// libFuzzer entry point (`LLVMFuzzerTestOneInput`), built with
//   swift build -c release -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library
import PackageDescription

let package = Package(
    name: "pushgate-fuzz",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "pushgate", path: ".."),
        // Same range as the root package (the receiver's P-256 key for the aes128gcm target).
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
    ],
    targets: [
        // Declares libFuzzer's LLVMFuzzerRunDriver for the targets' `main`.
        .target(name: "CFuzzerDriver"),
        // The /api/push decoder and validation, then every provider rendering that runs on a
        // decoded notification; JSONParser alone with small limits; the JSONWriter round trip.
        .executableTarget(
            name: "FuzzRequest",
            dependencies: [
                "CFuzzerDriver",
                .product(name: "PushgateCore", package: "pushgate"),
                .product(name: "Providers", package: "pushgate"),
            ]),
        // RFC 8291 / RFC 8188 aes128gcm decryption (WebPushCrypto.decrypt, what the mock Web Push
        // server runs on every body) on raw mutated bodies and on well-formed multi-record bodies.
        .executableTarget(
            name: "FuzzAES128GCM",
            dependencies: [
                "CFuzzerDriver",
                .product(name: "WebPush", package: "pushgate"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
