// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "ACSecureFile",
    products: [
        // Swift API: the engine, secure services and the Foundation layer.
        .library(name: "ACSecureFileKit", targets: ["ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureFoundation", "ACSecureSharingCore", "ACSecureSharing"]),
        // The POSIX-style C API (CACSecureFile's headers) with the engine inside: libACSecureFile.so.
        .library(name: "ACSecureFile", type: .dynamic, targets: ["CACSecureFile", "ACSecureFileCAPI"]),
        .executable(name: "acsecure", targets: ["acsecure"]),
        // Encrypted SQLite: the "acsecure" VFS (ACSecureSQLite.h) on the C API, for C and Swift.
        .library(name: "ACSecureSQLite", targets: ["CACSecureSQLite"]),
        // The C API as a static part of another package's executable: the fuzz targets (fuzz/) call it
        // in process, on the same engine as ACSecureFileKit.
        .library(name: "ACSecureFileCAPIKit", targets: ["CACSecureFile", "ACSecureFileCAPI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(name: "CACSecureLibCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CACSecureSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CACSystemSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // AES-256-GCM and HKDF (OpenSSL), randomness, Argon2id and guarded key memory (libsodium).
        .target(name: "ACCrypto", dependencies: ["CACSecureLibCrypto", "CACSecureSodium"]),
        // The store, the seed, lock/unlock/retire, key derivation and process hardening.
        .target(name: "ACSecureServices", dependencies: ["ACCrypto", "CACSecureLinux"]),
        // prctl for ProcessHardening (Swift cannot call C varargs).
        .target(name: "CACSecureLinux"),
        // The chunked file format and the POSIX-semantics engine.
        .target(name: "ACSecureFileCore", dependencies: ["ACCrypto", "ACSecureServices"]),

        // ACFileHandle and the secure Foundation extensions (FileManager, Data, NSDictionary, ...).
        .target(name: "ACSecureFoundation", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACCrypto"]),
        // Extension wrapped files and crypto blocks on the engine alone (no Foundation): what the C API needs.
        .target(name: "ACSecureSharingCore", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACCrypto"]),
        // Encryption groups, extension wrapped files, derived keys, sensitive data, re-keying (NSError/Data face).
        .target(name: "ACSecureSharing", dependencies: ["ACSecureSharingCore", "ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureFoundation"]),

        // The C boundary: public headers and the variadic entry points (read in C, forwarded to Swift).
        .target(name: "CACSecureFile"),
        // The Swift side of the C API: descriptor table, errno/ACE_* mapping, exported entry points.
        // No Foundation anywhere below it: libACSecureFile.so stands on the Swift core runtime.
        .target(name: "ACSecureFileCAPI", dependencies: ["CACSecureFile", "ACSecureFileCore", "ACSecureServices", "ACSecureSharingCore", "ACCrypto"]),

        // The SQLite VFS "acsecure": SQLite's files through the C API (also built as a loadable extension).
        .target(name: "CACSecureSQLite", dependencies: ["CACSystemSQLite", "CACSecureFile", "ACSecureFileCAPI"]),

        .executableTarget(name: "acsecure", dependencies: [
            "ACSecureFileCore", "ACSecureServices", "ACSecureSharing", "ACSecureFoundation", "ACCrypto",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        .testTarget(name: "ACCryptoTests", dependencies: ["ACCrypto"]),
        .testTarget(name: "ACSecureSQLiteTests", dependencies: ["CACSecureSQLite", "CACSystemSQLite", "CACSecureFile"]),
        .testTarget(name: "ACSecureServicesTests", dependencies: ["ACSecureServices", "ACCrypto"]),
        .testTarget(name: "ACSecureFileCAPITests", dependencies: ["ACSecureFileCAPI", "CACSecureFile", "ACSecureFileCore", "ACSecureServices", "ACSecureSharingCore"]),
        .testTarget(name: "ACSecureFoundationTests", dependencies: ["ACSecureFoundation", "ACSecureFileCore", "ACSecureServices", "ACSecureFileCAPI"]),
        // The child process ACSecureFoundationTests SIGKILLs in the middle of an atomic write (and expects to trap on misuse).
        .executableTarget(name: "ACSecureFoundationCrashHelper", dependencies: ["ACSecureFoundation", "ACSecureFileCore", "ACSecureServices"], path: "Tests/ACSecureFoundationCrashHelper"),
        // The reference's examples ported as docs/PORTING.md says: a renamed method breaks this build.
        .testTarget(name: "ACSecurePortingTests", dependencies: ["ACSecureFoundation", "ACSecureSharing", "ACSecureServices"]),
        .testTarget(name: "ACSecureSharingTests", dependencies: ["ACSecureSharing", "ACSecureSharingCore", "ACSecureFoundation", "ACSecureFileCore", "ACSecureServices", "ACCrypto"]),
        // The child process of ACSecureSharingTests: another app on the same store, or an extension without services.
        .executableTarget(name: "ACSecureSharingTestHost", dependencies: ["ACSecureSharing", "ACSecureFileCore", "ACSecureServices", "ACCrypto"], path: "Tests/ACSecureSharingTestHost"),
        .testTarget(name: "ACSecureFileCoreTests", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureFuzzHarness"]),
        // The fuzz targets' logic (fuzz/Harness, also built by fuzz/Package.swift), so the unit tests replay fuzz/FailCases.
        .target(name: "ACSecureFuzzHarness", dependencies: ["ACSecureFileCore", "ACSecureServices", "ACCrypto", "ACSecureSharing", "ACSecureFileCAPI", "CACSecureFile"], path: "fuzz/Harness"),
        // Several of these write one secure file at once (MultiProcessWriterTests).
        .executableTarget(name: "ACSecureMultiWriter", dependencies: ["ACSecureFileCore", "ACSecureServices"], path: "Tests/ACSecureMultiWriter"),
        // The child process CrashConsistencyTests SIGKILLs in the middle of writing.
        .executableTarget(name: "ACSecureCrashChild", dependencies: ["ACSecureFileCore", "ACSecureServices"], path: "Tests/ACSecureCrashChild"),
    ],
    swiftLanguageModes: [.v6]
)
