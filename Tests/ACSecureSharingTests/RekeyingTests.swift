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

final class RekeyingTests: XCTestCase {
    func testReshareAppToGroupToGroupAndBack() throws {
        let env = try SharingEnvironment()
        let a = try env.services("com.example.a")
        let b = try env.services("com.example.b")
        var rng = SplitMix64(seed: 5)
        let plain = randomBytes(20_000, &rng)
        let path = env.path("f")
        try writeSecure(path, plain, services: a)
        XCTAssertEqual(aceCode { _ = try readSecure(path, key: .group("g1"), services: b) }, .badKeyOrCorruptData)

        try SecureSharing.reshare(path, from: .app, to: .group("g1"), services: a)
        XCTAssertEqual(try readSecure(path, key: .group("g1"), services: b), plain)
        XCTAssertEqual(aceCode { _ = try readSecure(path, services: a) }, .badKeyOrCorruptData, "the app key no longer opens it")

        try SecureSharing.reshare(path, from: .group("g1"), to: .group("g2"), services: b)
        XCTAssertEqual(try readSecure(path, key: .group("g2"), services: a), plain)
        XCTAssertEqual(aceCode { _ = try readSecure(path, key: .group("g1"), services: a) }, .badKeyOrCorruptData)

        try SecureSharing.reshare(path, from: .group("g2"), to: .app, services: b)
        XCTAssertEqual(try readSecure(path, services: b), plain)
        XCTAssertEqual(aceCode { _ = try readSecure(path, services: a) }, .badKeyOrCorruptData, "b's app key, not a's")
        XCTAssertEqual(try SecureFileSystem.info(path).keyClass, 1)
    }

    func testReshareWithTheWrongKeyChangesNothing() throws {
        let env = try SharingEnvironment()
        let a = try env.services()
        let path = env.path("f")
        try writeSecure(path, [1, 2, 3], key: .group("g1"), services: a)
        let before = readPlain(path)
        XCTAssertEqual(aceCode { try SecureSharing.reshare(path, from: .group("g9"), to: .app, services: a) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { try SecureSharing.reshare(path, from: .app, to: .group("g2"), services: a) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { try SecureSharing.reshare(path, from: .group("g1"), to: .group(""), services: a) }, .invalidArgument)
        XCTAssertEqual(readPlain(path), before)
        a.lock()
        XCTAssertEqual(aceCode { try SecureSharing.reshare(path, from: .group("g1"), to: .app, services: a) }, .noKeys)
        XCTAssertEqual(readPlain(path), before)
    }

    /// Re-sharing is O(1): for a 64 MiB file exactly as for a 1 KiB file, only the 128-byte header
    /// changes, and the engine makes the same number of write calls (counted in a child process, whose
    /// fault-injection hook no other test shares).
    func testReshareRewritesOnlyTheHeaderWhateverTheSize() throws {
        let env = try SharingEnvironment()
        let a = try env.services()
        var rng = SplitMix64(seed: 64)
        var pwrites: [Int] = []
        for size in [1 << 10, 64 << 20] {
            let path = env.path("f\(size)")
            let f = try SecureFile.open(path, flags: O_WRONLY | O_CREAT, mode: 0o600, services: a)
            let piece = randomBytes(1 << 20, &rng)
            var written = 0
            while written < size {
                let n = min(piece.count, size - written)
                written += try piece.withUnsafeBytes { try f.write(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            }
            try f.close()
            let before = readPlain(path)
            try SecureSharing.reshare(path, from: .app, to: .group("g1"), services: a)
            let after = readPlain(path)
            XCTAssertEqual(after.count, before.count)
            XCTAssertNotEqual(Array(after[0..<128]), Array(before[0..<128]))
            XCTAssertTrue(sameBytes(after, before, from: 128), "size \(size): only the header may change")

            let r = try TestHost.run(["reshare-pwrites", env.storeDirectory, "com.example.provider", "group:g1", "group:g2", path])
            XCTAssertTrue(r.stdout.hasPrefix("OK "), r.stdout + r.stderr)
            pwrites.append(Int(r.stdout.dropFirst(3)) ?? -1)
            XCTAssertTrue(sameBytes(readPlain(path), before, from: 128))
            XCTAssertEqual(try readSecure(path, key: .group("g2"), services: a).count, size)
            unlink(path)
        }
        XCTAssertEqual(pwrites, [1, 1], "one header write, for 1 KiB and for 64 MiB alike")
    }

    func testRotateDataKeyReencryptsEverythingAndKeepsThePlaintext() throws {
        let env = try SharingEnvironment()
        let a = try env.services()
        var rng = SplitMix64(seed: 11)
        let plain = randomBytes(3 << 20 | 123, &rng)  // 3 MiB + a partial chunk: several copy batches
        let path = env.path("f")
        try writeSecure(path, plain, key: .group("g1"), services: a)
        chmod(path, 0o640)
        let infoBefore = try SecureFileSystem.info(path)
        let before = readPlain(path)

        try SecureSharing.rotateDataKey(path, key: .group("g1"), services: a)

        let infoAfter = try SecureFileSystem.info(path)
        let after = readPlain(path)
        XCTAssertEqual(try readSecure(path, key: .group("g1"), services: a), plain)
        XCTAssertNotEqual(infoAfter.fileID, infoBefore.fileID)
        XCTAssertEqual(infoAfter.keyFingerprint, infoBefore.keyFingerprint, "still wrapped under the group key")
        XCTAssertEqual(after.count, before.count)
        // Every chunk's ciphertext changed (new data key, new nonces).
        let physical = 4096 + 32
        var chunk = 0, offset = Int(FileLayout().dataOffset)
        while offset + physical <= after.count {
            XCTAssertFalse(after.withUnsafeBytes { a in before.withUnsafeBytes { b in memcmp(a.baseAddress! + offset, b.baseAddress! + offset, physical) == 0 } },
                           "chunk \(chunk)")
            offset += physical; chunk += 1
        }
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o640, "the mode is kept")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: env.directory).filter { $0.hasPrefix(".") }, [])
    }

    func testRotateRefusesAnOpenFileAndAWrongKey() throws {
        let env = try SharingEnvironment()
        let a = try env.services()
        let path = env.path("f")
        try writeSecure(path, Array(repeating: 7, count: 10_000), services: a)
        let before = readPlain(path)
        let open = try SecureFile.open(path, flags: O_RDONLY, services: a)
        do throws(SecureFileError) {
            try SecureSharing.rotateDataKey(path, services: a)
            XCTFail("rotation of an open file must be refused")
        } catch {
            XCTAssertEqual(error.errno, EBUSY)
            XCTAssertTrue(error.message.contains(path))
        }
        try open.close()
        XCTAssertEqual(aceCode { try SecureSharing.rotateDataKey(path, key: .group("g1"), services: a) }, .badKeyOrCorruptData)
        XCTAssertEqual(readPlain(path), before)
        // A damaged chunk stops the rotation and leaves the original (and no temporary file).
        var bad = before; bad[Int(FileLayout().chunkOffset(1)) + 50] ^= 1
        writePlain(path, bad)
        XCTAssertEqual(aceCode { try SecureSharing.rotateDataKey(path, services: a) }, .badKeyOrCorruptData)
        XCTAssertEqual(readPlain(path), bad)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: env.directory).filter { $0.hasPrefix(".") }, [])
    }

    /// Memory stays bounded: rotating a 64 MiB file in a fresh process raises its peak RSS by far less
    /// than the file's size.
    func testRotateMemoryIsBounded() throws {
        let env = try SharingEnvironment()
        let a = try env.services()
        let path = env.path("big")
        let f = try SecureFile.open(path, flags: O_WRONLY | O_CREAT, mode: 0o600, services: a)
        var rng = SplitMix64(seed: 1)
        let piece = randomBytes(1 << 20, &rng)
        for _ in 0..<64 { _ = try piece.withUnsafeBytes { try f.write($0) } }
        try f.close()
        let r = try TestHost.run(["rotate-rss", env.storeDirectory, "com.example.provider", "app", path])
        let parts = r.stdout.split(separator: " ")
        XCTAssertEqual(parts.first, "OK", r.stdout + r.stderr)
        guard parts.count == 3, let before = Int(parts[1]), let after = Int(parts[2]) else { return }
        XCTAssertLessThan(after - before, 16 << 10, "peak RSS grew by \(after - before) KiB rotating 64 MiB")
        XCTAssertEqual(try readSecure(path, services: a).count, 64 << 20)
    }

    /// Retire destroys the seed and the store: no file of the store opens afterwards, whatever its key.
    func testRetireMakesEveryFileUnreadable() throws {
        let env = try SharingEnvironment()
        let a = try env.services()
        try writeSecure(env.path("app"), [1], services: a)
        try writeSecure(env.path("group"), [2], key: .group("g"), services: a)
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: a)
        writePlain(env.path("src"), [3])
        try ACWrappedFile.wrapFile(atPath: env.path("src"), toPath: env.path("wrapped"), cryptoBlock: block)
        try a.retire()
        XCTAssertFalse(FileManager.default.fileExists(atPath: env.storeDirectory + "/seed"))
        XCTAssertEqual(aceCode { _ = try readSecure(env.path("app"), services: a) }, .noKeys)
        // A new store in the same place has a new seed: nothing old opens.
        let fresh = try env.services()
        XCTAssertEqual(aceCode { _ = try readSecure(env.path("app"), services: fresh) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try readSecure(env.path("group"), key: .group("g"), services: fresh) }, .badKeyOrCorruptData)
        XCTAssertEqual(nsErrorOf { _ = try ACUnwrappedFile.readWrappedFile(atPath: env.path("wrapped"), sharedGroupID: nil, services: fresh) }?.1,
                       ACErrorBadKeyOrCorruptData)
    }
}

/// Two arrays of the same length with the same bytes from `offset` on (ACSecureTestSupport's
/// memcmp: elementwise comparison of 64 MiB is slow in debug builds).
func sameBytes(_ a: [UInt8], _ b: [UInt8], from offset: Int) -> Bool {
    a.count == b.count && sameBytes(a, offset, b, offset, count: a.count - offset)
}
