// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "ACSecureFile",
    products: [
        // Swift API: the engine, secure services and the Foundation layer.
        .library(name: "ACSecureFileKit", targets: ["ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSystemCalls", "ACSecureFoundation", "ACSecureSharingCore", "ACSecureSharing"]),
        // The POSIX-style C API (CACSecureFile's headers) with the engine inside: libACSecureFile.so.
        .library(name: "ACSecureFile", type: .dynamic, targets: ["CACSecureFile", "ACSecureFileCAPI"]),
        .executable(name: "acsecure", targets: ["acsecure"]),
        // Encrypted SQLite: the "acsecure" VFS (ACSecureSQLite.h) on the C API, for C and Swift.
        .library(name: "ACSecureSQLite", targets: ["CACSecureSQLite"]),
        // The C API as a static part of another package's executable: the fuzz targets (fuzz/) call it
        // in process, on the same engine as ACSecureFileKit.
        .library(name: "ACSecureFileCAPIKit", targets: ["CACSecureFile", "ACSecureFileCAPI"]),
        // The in-memory file system the fuzz targets run the engine on (test support, not an API).
        .library(name: "ACSystemCallsTesting", targets: ["ACSystemCallsTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(name: "CACSecureLibCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CACSecureSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CACSystemSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // Every file-system call of every module: EINTR and short-transfer retries, and (debug builds
        // only, ACSECURE_SYSCALL_MOCKING) per-thread fault injection and an in-memory backend.
        .target(name: "ACSystemCalls", dependencies: ["CACSecureLinux"]),
        // Beside it, for tests and the fuzzers only (no library module depends on it): an in-memory
        // file system that `Sys` can run on instead of the kernel (debug builds, ACSECURE_SYSCALL_MOCKING).
        .target(name: "ACSystemCallsTesting", dependencies: ["ACSystemCalls", "ACCrypto"]),
        // AES-256-GCM and HKDF (OpenSSL), randomness, Argon2id and guarded key memory (libsodium);
        // also the one lock type every module uses (Lock.swift: a pthread mutex, which TSan understands).
        .target(name: "ACCrypto", dependencies: ["CACSecureLibCrypto", "CACSecureSodium", "CACSecureLinux"]),
        // The store, the seed, lock/unlock/retire, key derivation and process hardening.
        .target(name: "ACSecureServices", dependencies: ["ACSystemCalls", "ACCrypto", "CACSecureLinux"]),
        // prctl for ProcessHardening (Swift cannot call C varargs).
        .target(name: "CACSecureLinux"),
        // The chunked file format and the POSIX-semantics engine.
        .target(name: "ACSecureFileCore", dependencies: ["ACSystemCalls", "ACCrypto", "ACSecureServices", "CACSecureLinux"]),

        // ACFileHandle and the secure Foundation extensions (FileManager, Data, NSDictionary, ...).
        .target(name: "ACSecureFoundation", dependencies: ["ACSystemCalls", "ACSecureFileCore", "ACSecureServices", "ACCrypto"]),
        // Extension wrapped files and crypto blocks on the engine alone (no Foundation): what the C API needs.
        .target(name: "ACSecureSharingCore", dependencies: ["ACSystemCalls", "ACSecureFileCore", "ACSecureServices", "ACCrypto"]),
        // Encryption groups, extension wrapped files, derived keys, sensitive data, re-keying (NSError/Data face).
        .target(name: "ACSecureSharing", dependencies: ["ACSystemCalls", "ACSecureSharingCore", "ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureFoundation"]),

        // The C shim (CShim/): the C API's public headers and its variadic entry point, read in C and
        // forwarded to Swift (module CACSecureFile).
        .target(name: "CACSecureFile", path: "CShim"),
        // The Swift side of the C API: descriptor table, errno/ACE_* mapping, exported entry points.
        // No Foundation anywhere below it: libACSecureFile.so stands on the Swift core runtime.
        .target(name: "ACSecureFileCAPI", dependencies: ["ACSystemCalls", "CACSecureFile", "ACSecureFileCore", "ACSecureServices", "ACSecureSharingCore", "ACCrypto"]),

        // The SQLite VFS "acsecure": SQLite's files through the C API (also built as a loadable extension).
        .target(name: "CACSecureSQLite", dependencies: ["CACSystemSQLite", "CACSecureFile", "ACSecureFileCAPI"]),

        .executableTarget(name: "acsecure", dependencies: [
            "ACSystemCalls", "ACSecureFileCore", "ACSecureServices", "ACSecureSharing", "ACSecureFoundation", "ACCrypto",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        // What the tests share: a seeded generator, temporary directories, child processes (Glibc only).
        .target(name: "ACSecureTestSupport", path: "Tests/ACSecureTestSupport"),
        .testTarget(name: "ACCryptoTests", dependencies: ["ACCrypto", "ACSecureTestSupport"]),
        .testTarget(name: "ACSecureSQLiteTests", dependencies: ["CACSecureSQLite", "CACSystemSQLite", "CACSecureFile", "ACSystemCalls", "ACSecureTestSupport"]),
        .testTarget(name: "ACSecureServicesTests", dependencies: ["ACSecureServices", "ACCrypto", "ACSystemCalls", "ACSecureTestSupport"]),
        .testTarget(name: "ACSecureFileCAPITests", dependencies: ["ACSystemCalls", "ACSecureFileCAPI", "CACSecureFile", "ACSecureFileCore", "ACSecureServices", "ACSecureSharingCore", "ACSecureTestSupport"]),
        .testTarget(name: "ACSecureFoundationTests", dependencies: ["ACSystemCalls", "ACSecureFoundation", "ACSecureFileCore", "ACSecureServices", "ACSecureFileCAPI", "ACSecureTestSupport"]),
        // The child process ACSecureFoundationTests SIGKILLs in the middle of an atomic write (and expects to trap on misuse).
        .executableTarget(name: "ACSecureFoundationCrashHelper", dependencies: ["ACSecureFoundation", "ACSecureFileCore", "ACSecureServices", "ACSecureTestSupport"], path: "Tests/ACSecureFoundationCrashHelper"),
        // The reference's examples ported as docs/PORTING.md says: a renamed method breaks this build.
        .testTarget(name: "ACSecurePortingTests", dependencies: ["ACSecureFoundation", "ACSecureSharing", "ACSecureServices", "ACSecureTestSupport"]),
        .testTarget(name: "ACSecureSharingTests", dependencies: ["ACSystemCalls", "ACSecureSharing", "ACSecureSharingCore", "ACSecureFoundation", "ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureTestSupport"]),
        // The child process of ACSecureSharingTests: another app on the same store, or an extension without services.
        .executableTarget(name: "ACSecureSharingTestHost", dependencies: ["ACSecureSharing", "ACSecureFileCore", "ACSecureServices", "ACCrypto"], path: "Tests/ACSecureSharingTestHost"),
        .testTarget(name: "ACSecureFileCoreTests", dependencies: ["ACSystemCalls", "ACSystemCallsTesting", "ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureFuzzHarness", "ACSecureTestSupport"]),
        // The fuzz targets' logic (fuzz/Harness, also built by fuzz/Package.swift), so the unit tests replay fuzz/FailCases.
        .target(name: "ACSecureFuzzHarness", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureSharing", "ACSecureFileCAPI", "CACSecureFile", "ACSystemCallsTesting"], path: "fuzz/Harness"),
        // Several of these write one secure file at once (MultiProcessWriterTests).
        .executableTarget(name: "ACSecureMultiWriter", dependencies: ["ACSecureFileCore", "ACSecureServices"], path: "Tests/ACSecureMultiWriter"),
        // The child process CrashConsistencyTests SIGKILLs in the middle of writing. The crash tests
        // start it thousands of times: with the Swift runtime linked in, each start binds 8 shared
        // libraries instead of 19 (a third less time per child).
        .executableTarget(name: "ACSecureCrashChild", dependencies: ["ACSystemCalls", "ACSecureFileCore", "ACSecureServices", "ACSecureTestSupport"], path: "Tests/ACSecureCrashChild",
                          linkerSettings: [.unsafeFlags(["-static-stdlib"])]),
        // The README's Swift code, verbatim (scripts/test.d/35-readme.sh checks that and runs it).
        .executableTarget(name: "ACSecureReadmeExample", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACSecureFoundation"], path: "Tests/ACSecureReadmeExample"),
        // Writes the current-version test vectors of docs/test-vectors (FormatVectorTests checks its output).
        .executableTarget(name: "ACSecureVectorWriter", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACCrypto"], path: "Tests/ACSecureVectorWriter"),
    ],
    swiftLanguageModes: [.v6]
)

// System-call mocking (fault injection, the in-memory file system) exists in debug builds only: a
// release build of the library has no hook on its system calls. The fuzzers' release build turns it on
// with -Xswiftc -DACSECURE_SYSCALL_MOCKING (scripts/test.d/40-fuzz-smoke.sh).
for target in package.targets where target.type != .system && !target.name.hasPrefix("CAC") {  // Swift targets
    target.swiftSettings = (target.swiftSettings ?? []) + [.define("ACSECURE_SYSCALL_MOCKING", .when(configuration: .debug))]
}
