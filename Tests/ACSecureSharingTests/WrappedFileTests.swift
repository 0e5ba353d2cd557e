#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACCrypto
import ACSecureFileCore
import ACSecureServices
import ACSecureFoundation
@testable import ACSecureSharing
import ACSecureSharingCore

final class WrappedFileTests: XCTestCase {
    /// Round trips of several sizes (empty, inside a chunk, at chunk edges, many chunks), in one process.
    func testWrapAndUnwrapRoundTrip() throws {
        let env = try SharingEnvironment()
        let provider = try env.services("com.example.provider")
        let host = try env.services("com.example.host")
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "g1", services: provider)
        XCTAssertEqual(block.length, 56)
        var rng = SplitMix64(seed: 7)
        for size in [0, 1, 4087, 4088, 4096, 8192 + 5, 300_000] {
            let plain = randomBytes(size, &rng)
            writePlain(env.path("report.pdf"), plain)
            try ACWrappedFile.wrapFile(atPath: env.path("report.pdf"), toPath: env.path("wrapped"), cryptoBlock: block)
            XCTAssertNotEqual(readPlain(env.path("wrapped")), plain)
            let h = try ACUnwrappedFile.readWrappedFile(atPath: env.path("wrapped"), sharedGroupID: "g1", services: host)
            XCTAssertEqual(h.actualFileName, "report.pdf")
            XCTAssertEqual(try h.length, UInt64(size))
            XCTAssertEqual(Array(try h.readToEnd() ?? Data()), plain, "size \(size)")
            try h.close()
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: env.directory).filter { $0.hasPrefix(".") }, [],
                       "no temporary file is left behind")
    }

    func testActualFileNameTravelsEncrypted() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: s)
        writePlain(env.path("src"), Array("hello".utf8))
        let name = "Quarterly résumé ✓.txt"
        try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("w"), cryptoBlock: block, actualFileName: name)
        let raw = Data(readPlain(env.path("w")))
        XCTAssertNil(raw.range(of: Data("Quarterly".utf8)), "the name must not appear in the clear")
        XCTAssertNil(raw.range(of: Data("hello".utf8)))
        let h = try ACUnwrappedFile.readWrappedFile(atPath: env.path("w"), sharedGroupID: nil, services: s)
        XCTAssertEqual(h.actualFileName, name)
        XCTAssertEqual(try h.readToEnd(), Data("hello".utf8))
        XCTAssertNil(try h.readToEnd())
        XCTAssertEqual(try SecureFileSystem.info(env.path("w")).keyClass, 3)

        for bad in ["", "a/b", "..", ".", String(repeating: "x", count: 1025), "nul\u{0}"] {
            let e = nsErrorOf { try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("w2"), cryptoBlock: block, actualFileName: bad) }
            XCTAssertEqual(e?.0, ACErrorDomain, bad)
            XCTAssertEqual(e?.1, ACErrorInvalidArg, bad)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: env.path("w2")))
    }

    /// Wrong or missing group, a plain file, a secure file of another kind: distinct, clear errors.
    func testReadErrors() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        let g1 = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "g1", services: s)
        writePlain(env.path("src"), Array("secret".utf8))
        try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("w"), cryptoBlock: g1)
        for group in [nil, "g2", "G1"] as [String?] {
            let e = nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.path("w"), sharedGroupID: group, services: s) }
            XCTAssertEqual(e?.0, ACErrorDomain, "\(String(describing: group))")
            XCTAssertEqual(e?.1, ACErrorBadKeyOrCorruptData, "\(String(describing: group))")
        }
        XCTAssertEqual(nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.path("w"), sharedGroupID: "", services: s) }?.1,
                       ACErrorInvalidArg)

        // Not wrapped: a plain file, a short file, an empty file, an app secure file.
        writePlain(env.path("plain"), Array(repeating: 65, count: 500))
        writePlain(env.path("short"), Array("ACSF".utf8))
        writePlain(env.path("empty"), [])
        try writeSecure(env.path("appfile"), [1, 2, 3], services: s)
        for name in ["plain", "short", "empty", "appfile"] {
            let e = nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.path(name), sharedGroupID: "g1", services: s) }
            XCTAssertEqual(e?.0, ACWrappedFileReadErrorDomain, name)
            XCTAssertEqual(e?.1, ACWrappedFileReadErrorUnknownWrapperFormat, name)
        }
        let missing = nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.path("nope"), sharedGroupID: nil, services: s) }
        XCTAssertEqual(missing?.0, NSPOSIXErrorDomain)
        XCTAssertEqual(missing?.1, Int(ENOENT))
        let dir = nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.directory, sharedGroupID: nil, services: s) }
        XCTAssertEqual(dir?.1, Int(ACErrorCode.regularFileOnly.rawValue))

        // Locked services: no keys.
        let locked = try env.services("com.example.locked")
        locked.lock()
        XCTAssertEqual(nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.path("w"), sharedGroupID: "g1", services: locked) }?.1,
                       ACErrorNoKeys)
        XCTAssertEqual(nsErrorOf { _ = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: locked) }?.1,
                       ACErrorNoKeys)
    }

    /// Tampering with any byte of the wrapped file is detected; no byte of a damaged file is returned.
    func testTamperingIsDetected() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: s)
        var rng = SplitMix64(seed: 99)
        writePlain(env.path("src"), randomBytes(10_000, &rng))
        try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("w"), cryptoBlock: block, actualFileName: "n")
        let good = readPlain(env.path("w"))
        let first = Int(FileLayout().dataOffset)  // chunk 0, after the header and the tail-copy slots
        for offset in [20, 40, 70, first, first + 16 + 3, first + 4128 + 100, good.count - 5] {
            var bad = good
            bad[offset] ^= 0x40
            writePlain(env.path("bad"), bad)
            let e = nsErrorOf {
                let h = try ACUnwrappedFile.readWrappedFile(atPath: env.path("bad"), sharedGroupID: nil, services: s)
                _ = try h.readToEnd()
            }
            XCTAssertEqual(e?.0, ACErrorDomain, "offset \(offset)")
            XCTAssertEqual(e?.1, ACErrorBadKeyOrCorruptData, "offset \(offset)")
        }
    }

    func testBadCryptoBlocksAreRefused() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        let block = Data(referencing: try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "g", services: s))
        writePlain(env.path("src"), [1])
        writePlain(env.path("w"), Array("previous".utf8))
        var flipped = block; flipped[40] ^= 1      // a key bit: the fingerprint no longer matches
        var version = block; version[4] = 2
        var scope = block; scope[5] = 9
        for bad in [Data(), block.prefix(55), block + [0], flipped, version, scope, Data(repeating: 0, count: 56)] {
            let e = nsErrorOf { try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("w"), cryptoBlock: bad) }
            XCTAssertEqual(e?.0, ACErrorDomain)
            XCTAssertEqual(e?.1, ACErrorInvalidArg)
        }
        XCTAssertEqual(readPlain(env.path("w")), Array("previous".utf8), "a failed wrap leaves toPath unchanged")
        // A source that does not exist, or is a directory: toPath unchanged too.
        XCTAssertEqual(nsErrorOf { try ACWrappedFile.wrapFile(atPath: env.path("nope"), toPath: env.path("w"), cryptoBlock: block) }?.1,
                       Int(ENOENT))
        XCTAssertEqual(nsErrorOf { try ACWrappedFile.wrapFile(atPath: env.directory, toPath: env.path("w"), cryptoBlock: block) }?.1,
                       Int(ACErrorCode.regularFileOnly.rawValue))
        XCTAssertEqual(readPlain(env.path("w")), Array("previous".utf8))
    }

    /// The crypto block's key opens wrapped files only: not the provider's app files, not group files.
    func testCryptoBlockDoesNotOpenAppOrGroupFiles() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        try writeSecure(env.path("app"), [1, 2], services: s)
        try writeSecure(env.path("group"), [3, 4], key: .group("g1"), services: s)
        for scope in [nil, "g1"] as [String?] {
            let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: scope, services: s)
            let kek = try CryptoBlock.parse(UnsafeRawBufferPointer(start: block.bytes, count: block.length)).kek
            for file in ["app", "group"] {
                XCTAssertEqual(aceCode { _ = try readSecure(env.path(file), services: FixedKeyProvider(kek: kek)) }, .badKeyOrCorruptData)
            }
        }
    }

    /// Differential: random reads and seeks on the handle and on a FileHandle over the original file.
    func testReadHandleMatchesFileHandle() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: s)
        var rng = SplitMix64(seed: 2024)
        let plain = randomBytes(50_000, &rng)
        writePlain(env.path("src"), plain)
        try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("w"), cryptoBlock: block)
        let h = try ACUnwrappedFile.readWrappedFile(atPath: env.path("w"), sharedGroupID: nil, services: s)
        let f = try XCTUnwrap(FileHandle(forReadingAtPath: env.path("src")))
        for step in 0..<300 {
            switch Int.random(in: 0..<6, using: &rng) {
            case 0, 1:
                let n = Int.random(in: 0...9000, using: &rng)
                XCTAssertEqual(h.readData(ofLength: n), f.readData(ofLength: n), "step \(step)")
            case 2:
                let o = UInt64.random(in: 0...60_000, using: &rng)
                h.seek(toFileOffset: o)
                f.seek(toFileOffset: o)
            case 3:
                XCTAssertEqual(h.seekToEndOfFile(), f.seekToEndOfFile())
            case 4:
                XCTAssertEqual(try h.read(upToCount: 100), try f.read(upToCount: 100), "step \(step)")
            default:
                XCTAssertEqual(h.readDataToEndOfFile(), f.readDataToEndOfFile(), "step \(step)")
            }
            XCTAssertEqual(try h.offset(), try f.offset(), "step \(step)")
            XCTAssertEqual(h.offsetInFile, f.offsetInFile)
        }
        try h.close()
        try h.close()  // harmless
        XCTAssertEqual(nsErrorOf { _ = try h.read(upToCount: 1) }?.1, Int(EBADF))
    }
}

/// Issue 13: ACWrappedFileReadHandle's plain methods (FileHandle's signatures) do not throw; on an
/// error they stop the program, naming the class, the method, the file, the error and the throwing
/// method to use instead (as ACFileHandle's do). Each case runs in a child process
/// (Tests/ACSecureSharingTestHost `plain-on-error`).
final class WrappedFileReadHandlePlainMethodTests: XCTestCase {
    func testPlainMethodsStopWithAMessageNamingTheThrowingMethod() throws {
        let env = try SharingEnvironment()
        let s = try env.services()
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: s)
        writePlain(env.path("src"), Array("0123456789".utf8))
        let wrapped = env.path("w")
        try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: wrapped, cryptoBlock: block)
        let cases: [(method: String, plain: String, instead: String, error: String)] = [
            ("readData", "readData(ofLength:)", "read(upToCount:)", "ACE_NO_KEYS_ERROR"),
            ("readDataToEndOfFile", "readDataToEndOfFile()", "readToEnd()", "ACE_NO_KEYS_ERROR"),
            ("availableData", "availableData", "readToEnd()", "ACE_NO_KEYS_ERROR"),
            ("seekToEndOfFile", "seekToEndOfFile()", "seekToEnd()", "ACE_NO_KEYS_ERROR"),
            ("seekTooFar", "seek(toFileOffset:)", "seek(toOffset:)", "ACE_FILE_TOO_BIG_ERROR"),
            ("offsetInFile", "offsetInFile", "offset()", "errno \(EBADF)"),
        ]
        for c in cases {
            let r = try TestHost.run(["plain-on-error", env.storeDirectory, "com.example.provider", wrapped, c.method])
            XCTAssertFalse(r.status.succeeded, "\(c.method) did not stop the program: \(r.stdout)")
            XCTAssertFalse(r.stdout.contains("survived"), c.method)
            let expected = "ACWrappedFileReadHandle.\(c.plain) failed on \(wrapped)"
            XCTAssertTrue(r.stderr.contains(expected), "\(c.method): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains(c.error), "\(c.method): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("use the throwing ACWrappedFileReadHandle.\(c.instead)"), "\(c.method): \(r.stderr)")
        }
    }
}
