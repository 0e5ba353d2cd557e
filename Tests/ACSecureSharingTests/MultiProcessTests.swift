import Foundation
import XCTest
import ACSecureTestSupport
import ACSecureFileCore
import ACSecureServices
import ACSecureFoundation
@testable import ACSecureSharing

/// Real processes with different app IDs on one store, and an extension process without secure services.
final class MultiProcessTests: XCTestCase {
    func testEncryptionGroupsAcrossProcesses() throws {
        let env = try SharingEnvironment()
        let a = try env.services("com.example.a")
        var rng = SplitMix64(seed: 3)
        let plain = randomBytes(9000, &rng)
        try writeSecure(env.path("shared"), plain, key: .group("com.example.team"), services: a)
        let store = env.storeDirectory

        // Another app (another process, another app ID) in the group reads the same bytes.
        XCTAssertEqual(try TestHost.run(["read", store, "com.example.b", "group:com.example.team", env.path("shared")]).stdout,
                       "OK " + hex(plain))
        // Wrong group, no group (its app key), or the owner's group key from a store it is not on: never bytes.
        for key in ["group:com.example.other", "app"] {
            XCTAssertEqual(try TestHost.run(["read", store, "com.example.b", key, env.path("shared")]).stdout,
                           "ERR ACErrorDomain \(ACErrorCode.badKeyOrCorruptData.rawValue) \(EIO)", key)
        }
        let other = try SharingEnvironment()
        _ = try other.services("com.example.b")
        XCTAssertEqual(try TestHost.run(["read", other.storeDirectory, "com.example.b", "group:com.example.team", env.path("shared")]).stdout,
                       "ERR ACErrorDomain \(ACErrorCode.badKeyOrCorruptData.rawValue) \(EIO)")

        // The other way: b writes for the group, a reads; b's app file stays b's.
        let fromB = randomBytes(100, &rng)
        XCTAssertEqual(try TestHost.run(["write", store, "com.example.b", "group:com.example.team", env.path("fromB"), hex(fromB)]).stdout, "OK")
        XCTAssertEqual(try readSecure(env.path("fromB"), key: .group("com.example.team"), services: a), fromB)
        XCTAssertEqual(try TestHost.run(["write", store, "com.example.b", "app", env.path("bOnly"), hex(fromB)]).stdout, "OK")
        XCTAssertEqual(aceCode { _ = try readSecure(env.path("bOnly"), services: a) }, .badKeyOrCorruptData)
    }

    /// The provider hands a crypto block to its extension; the extension process (no store, no
    /// ACSECURE_* variables) wraps a file; a host app process in the group reads it.
    func testExtensionWrapsAndHostAppReads() throws {
        let env = try SharingEnvironment()
        let provider = try env.services("com.example.provider")
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "com.example.share", services: provider)
        // The private channel: a 0600 file only this user reads.
        let blockPath = env.path("block")
        XCTAssertTrue(FileManager.default.createFile(atPath: blockPath, contents: Data(referencing: block), attributes: [.posixPermissions: 0o600]))
        var rng = SplitMix64(seed: 42)
        let plain = randomBytes(70_000, &rng)
        writePlain(env.path("picked.doc"), plain)
        let home = env.path("extension-home")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)

        let wrap = try TestHost.run(["wrap", blockPath, env.path("picked.doc"), env.path("out.wrapped"), "Picked Document.doc"],
                                    environment: ["HOME": home])
        XCTAssertEqual(wrap.stdout, "OK", wrap.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home), [], "the extension created no store")

        let name = hex(Array("Picked Document.doc".utf8))
        XCTAssertEqual(try TestHost.run(["unwrap", env.storeDirectory, "com.example.host", "com.example.share", env.path("out.wrapped")]).stdout,
                       "OK \(name) \(hex(plain))")
        for group in ["-", "com.example.other"] {
            XCTAssertEqual(try TestHost.run(["unwrap", env.storeDirectory, "com.example.host", group, env.path("out.wrapped")]).stdout,
                           "ERR ACErrorDomain \(ACErrorBadKeyOrCorruptData) 0", group)
        }
        // A file that is not wrapped: the distinct error, so the host uses it directly.
        XCTAssertEqual(try TestHost.run(["unwrap", env.storeDirectory, "com.example.host", "com.example.share", env.path("picked.doc")]).stdout,
                       "ERR \(ACWrappedFileReadErrorDomain) \(ACWrappedFileReadErrorUnknownWrapperFormat) 0")
        // A host on another store cannot read it.
        let other = try SharingEnvironment()
        _ = try other.services("com.example.host")
        XCTAssertEqual(try TestHost.run(["unwrap", other.storeDirectory, "com.example.host", "com.example.share", env.path("out.wrapped")]).stdout,
                       "ERR ACErrorDomain \(ACErrorBadKeyOrCorruptData) 0")
    }

    /// A nil group ID: every app of the store can unwrap (and only with nil).
    func testNilGroupBlockIsReadableByEveryAppOfTheStore() throws {
        let env = try SharingEnvironment()
        let provider = try env.services("com.example.provider")
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: provider)
        let blockPath = env.path("block")
        _ = FileManager.default.createFile(atPath: blockPath, contents: Data(referencing: block), attributes: [.posixPermissions: 0o600])
        writePlain(env.path("src"), Array("for everyone".utf8))
        XCTAssertEqual(try TestHost.run(["wrap", blockPath, env.path("src"), env.path("w"), "-"]).stdout, "OK")
        for app in ["com.example.x", "com.example.y"] {
            XCTAssertEqual(try TestHost.run(["unwrap", env.storeDirectory, app, "-", env.path("w")]).stdout,
                           "OK \(hex(Array("src".utf8))) \(hex(Array("for everyone".utf8)))")
        }
        XCTAssertEqual(try TestHost.run(["unwrap", env.storeDirectory, "com.example.x", "g", env.path("w")]).stdout,
                       "ERR ACErrorDomain \(ACErrorBadKeyOrCorruptData) 0")
    }
}
