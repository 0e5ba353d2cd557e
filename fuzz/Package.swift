// swift-tools-version: 6.1
// libFuzzer targets for the secure file engine, kept out of the library's own build (as swift-nio-http2's
// FuzzTesting/). Build and run them with scripts/test.d/40-fuzz-smoke.sh, or by hand:
//
//     cd fuzz && SWIFT_BACKTRACE=enable=no swift build --product FuzzSecureFileParse --sanitize fuzzer --sanitize address \
//         -Xswiftc -sanitize=address,fuzzer
//     .build/debug/FuzzSecureFileParse Corpus/FuzzSecureFileParse -max_total_time=60
//
// (debug; a -c release build needs -Xswiftc -DACSECURE_SYSCALL_MOCKING for the in-memory file system,
// which the library's release builds leave out). swiftc keeps only the last -sanitize= flag and SwiftPM
// passes its two in an order that changes between build plans: the combined -Xswiftc flag comes last,
// so the Swift code always gets both ASan and libFuzzer's instrumentation.
//
// The fuzz logic lives in Harness/ (also built by the main package as ACSecureFuzzHarness, so the unit
// tests replay Corpus/ and FailCases/ without sanitizers).
import PackageDescription
import Foundation

// A path dependency's identity is its directory name, which depends on where the repository was cloned.
let parentIdentity = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "ACSecureFileFuzz",
    products: [
        .executable(name: "FuzzSecureFileParse", targets: ["FuzzSecureFileParse"]),
        .executable(name: "FuzzOperationSequence", targets: ["FuzzOperationSequence"]),
        .executable(name: "FuzzSeedStoreParse", targets: ["FuzzSeedStoreParse"]),
        .executable(name: "FuzzCryptoBlockParse", targets: ["FuzzCryptoBlockParse"]),
        .executable(name: "FuzzWrappedFileParse", targets: ["FuzzWrappedFileParse"]),
        .executable(name: "FuzzCAPIArguments", targets: ["FuzzCAPIArguments"]),
    ],
    dependencies: [
        .package(path: ".."),
    ],
    targets: [
        .target(name: "FuzzHarness", dependencies: [.product(name: "ACSecureFileKit", package: parentIdentity),
                                                   .product(name: "ACSecureFileCAPIKit", package: parentIdentity),
                                                   .product(name: "ACSystemCallsTesting", package: parentIdentity)], path: "Harness"),
        .executableTarget(name: "FuzzSecureFileParse", dependencies: ["FuzzHarness"]),
        .executableTarget(name: "FuzzOperationSequence", dependencies: ["FuzzHarness"]),
        .executableTarget(name: "FuzzSeedStoreParse", dependencies: ["FuzzHarness"]),
        .executableTarget(name: "FuzzCryptoBlockParse", dependencies: ["FuzzHarness"]),
        .executableTarget(name: "FuzzWrappedFileParse", dependencies: ["FuzzHarness"]),
        .executableTarget(name: "FuzzCAPIArguments", dependencies: ["FuzzHarness"]),
    ],
    swiftLanguageModes: [.v6]
)

// The harness needs the library's system-call mocking (the in-memory file system), which the library
// compiles in debug builds only: the same condition here, so a debug build works as it is.
for target in package.targets {
    target.swiftSettings = (target.swiftSettings ?? []) + [.define("ACSECURE_SYSCALL_MOCKING", .when(configuration: .debug))]
}
