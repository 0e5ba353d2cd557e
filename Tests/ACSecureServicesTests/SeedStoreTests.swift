#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureServices

/// The seed file is untrusted input: every malformed file must give `.corruptStore`, never a crash.
final class SeedStoreTests: SecureServicesTestCase {

    func testSeedFileAndDirectoryPermissions() throws {
        _ = try makeServices(passcode: passcode("pw"))
        XCTAssertEqual(fileMode(seedPath), 0o600)
        XCTAssertEqual(fileMode(storeDirectory), 0o700)

        let s = try makeServices(passcode: passcode("pw"))
        try s.setPasscode(old: passcode("pw"), new: nil)
        XCTAssertEqual(fileMode(seedPath), 0o600, "still private after a rewrite")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storeDirectory), ["seed"],
                       "no temporary file left behind")
    }

    func testSeedFileModeWithoutPasscodeIgnoresPermissiveUmask() throws {
        let old = umask(0)
        defer { umask(old) }
        _ = try makeServices()
        XCTAssertEqual(fileMode(seedPath), 0o600)
        XCTAssertEqual(fileMode(storeDirectory), 0o700)
    }

    private func assertCorrupt(_ bytes: [UInt8], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        writeBytes(seedPath, bytes)
        // With and without a passcode, at start-up and on unlock.
        assertThrows(.corruptStore, try makeServices(), what + " (no passcode)", file: file, line: line)
        assertThrows(.corruptStore, try makeServices(passcode: passcode("pw")), what + " (passcode)", file: file, line: line)
    }

    func testCorruptPasscodeStoreFiles() throws {
        _ = try makeServices(passcode: passcode("pw"))
        let good = try XCTUnwrap(readBytes(seedPath))
        XCTAssertEqual(good.count, 98)

        func with(_ range: Range<Int>, _ replacement: [UInt8]) -> [UInt8] {
            var b = good
            b.replaceSubrange(range, with: replacement)
            return b
        }
        func be64(_ v: UInt64) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) } }

        assertCorrupt([], "empty file")
        assertCorrupt(Array(good.prefix(3)), "3 bytes")
        assertCorrupt(Array(good.prefix(5)), "5 bytes")
        assertCorrupt(Array(good.prefix(6)), "header only")
        assertCorrupt(Array(good.prefix(40)), "truncated in the middle")
        assertCorrupt(Array(good.dropLast()), "one byte short")
        assertCorrupt(good + [0], "one byte extra")
        assertCorrupt(good + [UInt8](repeating: 0xAB, count: 70_000), "huge file")
        assertCorrupt(with(0..<4, Array("ACSX".utf8)), "bad magic")
        assertCorrupt(with(0..<4, [0, 0, 0, 0]), "zero magic")
        assertCorrupt(with(4..<5, [0]), "version 0")
        assertCorrupt(with(4..<5, [2]), "version 2")
        assertCorrupt(with(4..<5, [0xFF]), "version 255")
        assertCorrupt(with(5..<6, [2]), "unknown protection 2")
        assertCorrupt(with(5..<6, [0xFF]), "unknown protection 255")
        assertCorrupt(with(5..<6, [0]), "protection none with a passcode-store body")
        assertCorrupt(with(6..<14, be64(0)), "ops limit 0")
        assertCorrupt(with(6..<14, be64(17)), "ops limit 17")
        assertCorrupt(with(6..<14, be64(UInt64.max)), "ops limit 2^64-1")
        assertCorrupt(with(14..<22, be64(0)), "mem limit 0")
        assertCorrupt(with(14..<22, be64(4096)), "mem limit below libsodium's minimum")
        assertCorrupt(with(14..<22, be64(1 << 40)), "mem limit 1 TiB")
        assertCorrupt(with(14..<22, be64(UInt64.max)), "mem limit 2^64-1")

        // The good file still works (the helper above overwrote it; put it back).
        writeBytes(seedPath, good)
        XCTAssertEqual(try makeServices(passcode: passcode("pw")).availability, .available)
    }

    func testCorruptUnprotectedStoreFiles() throws {
        _ = try makeServices()
        let good = try XCTUnwrap(readBytes(seedPath))
        XCTAssertEqual(good.count, 38)
        assertCorrupt(Array(good.dropLast()), "seed one byte short")
        assertCorrupt(good + [0], "seed one byte long")
        assertCorrupt(Array(good.prefix(6)), "no seed")
        var v = good
        v[4] = 9
        assertCorrupt(v, "bad version")
        v = good
        v[5] = 1
        assertCorrupt(v, "claims a passcode but has a 32-byte body")

        writeBytes(seedPath, good)
        XCTAssertEqual(try makeServices().availability, .available)
    }

    /// Argon2 parameters within bounds but different from the ones used, or a damaged sealed seed, cannot
    /// be told apart from a wrong passcode (the AAD covers the parameters): they must fail cleanly.
    func testTamperedSealedSeedFailsCleanly() throws {
        _ = try makeServices(passcode: passcode("pw"))
        let good = try XCTUnwrap(readBytes(seedPath))
        for i in [6 + 7, 22, 38, 50, 81, 97] {  // ops, salt, nonce, sealed seed, last seed byte, tag
            var b = good
            b[i] ^= 0x01
            writeBytes(seedPath, b)
            do {
                _ = try makeServices(passcode: passcode("pw"))
                XCTFail("byte \(i) flipped: opened anyway")
            } catch let e as SecureServicesError {
                XCTAssertTrue([.wrongPasscode, .corruptStore].contains(e.code), "byte \(i): \(e)")
            }
        }
    }

    func testCorruptionDetectedOnUnlock() throws {
        let s = try makeServices(passcode: passcode("pw"))
        s.lock()
        let good = try XCTUnwrap(readBytes(seedPath))
        writeBytes(seedPath, Array(good.prefix(10)))
        assertThrows(.corruptStore, try s.unlock(passcode: passcode("pw")))
        XCTAssertEqual(s.availability, .unavailable)
        XCTAssertFalse(s.isPasscodeSet, "an unreadable store reports no passcode")
    }

    func testSeedPathThatIsADirectoryIsAStoreError() throws {
        try FileManager.default.createDirectory(atPath: seedPath, withIntermediateDirectories: true)
        do {
            _ = try makeServices()
            XCTFail("opened a directory as a seed file")
        } catch let e as SecureServicesError {
            XCTAssertTrue([.storeIO, .corruptStore].contains(e.code), "\(e)")
        }
    }
}
