#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable @_spi(Testing) import ACSecureFileCore

/// The end-of-file recovery scan (docs/FORMAT.md "Recovery") stays cheap: a damaged end costs a
/// bounded number of GCM checks, not one per byte of the one-batch window, and the selector rule it
/// relies on (a last chunk that is not full and its trailer share a selector) holds even when the
/// writer's selector runs out between the two seals.
final class RecoveryScanTests: XCTestCase {
    func appendRaw(_ path: String, _ bytes: [UInt8]) {
        let fd = open(path, O_WRONLY | O_APPEND)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, bytes.count)
        close(fd)
    }

    func rawBytes(_ path: String, at offset: Int64, count: Int) -> [UInt8] {
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        var b = [UInt8](repeating: 0, count: count)
        XCTAssertEqual(b.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }, count)
        return b
    }

    /// A 4 MiB file with a spoiled trailer: no end authenticates within the window of
    /// (2^20/4096 + 2) chunks (≈ 10^6 byte positions). The scan may check in full only the ends of
    /// full chunks (258) and positions whose two selectors agree (none here, but for 2^-32 luck).
    func testDamagedEndOfALargeFileCostsFewGCMChecks() throws {
        let env = try TestEnvironment()
        let path = env.path("large")
        let size = 4 << 20 + 1234
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.pwrite((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }, at: 0)
        try f.close()
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        let physical = Int64(st.st_size)
        let fd = open(path, O_RDWR)
        var last: UInt8 = 0
        XCTAssertEqual(pread(fd, &last, 1, off_t(physical - 1)), 1)
        last ^= 0x40
        XCTAssertEqual(pwrite(fd, &last, 1, off_t(physical - 1)), 1)
        close(fd)

        let before = SecureFileTesting.recoveryTrailerChecks
        let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        let checks = SecureFileTesting.recoveryTrailerChecks - before
        XCTAssertLessThanOrEqual(checks, (1 << 20) / 4096 + 2 + 8, "GCM checks for a damaged end: \(checks)")
        XCTAssertGreaterThan(checks, 0, "the scan ran")
        // No end authenticates in place: the file is taken back to its last sync's tail copy (here
        // its creation: empty), reported.
        XCTAssertTrue(try g.endRestoredFromTailCopy)
        XCTAssertEqual(try g.size, 0)
        try g.close()
    }

    /// The writer's selector has one seal left when it seals a new short last chunk: the chunk and
    /// its trailer must still share a selector (a fresh one), and an interrupted extension after that
    /// end recovers to it.
    func testShortEndSealedAtSelectorRolloverSharesOneSelectorAndRecovers() throws {
        let env = try TestEnvironment()
        let path = env.path("rollover")
        // Whole chunks in place: each rewrite of chunk 0 is one seal (a chunk copy would be a second).
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, wholeChunkOverwrites: .inPlace)
        let chunk = [UInt8](repeating: 0x11, count: 4096)
        try f.pwrite(chunk, at: 0)
        // In-place rewrites of chunk 0 seal one chunk each (no trailer) until one seal is left.
        while try f.withShared({ $0.cipher!.writesLeft }) != 1 { try f.pwrite(chunk, at: 0) }
        let tail = [UInt8](repeating: 0x22, count: 100)
        try f.pwrite(tail, at: 4096)
        XCTAssertEqual(try f.withShared { $0.cipher!.selectorsDrawn }, 2, "a fresh selector for the chunk and its trailer")
        try f.close()

        let chunk1 = Int64(128 + 4128)
        let end = chunk1 + 32 + 100 + 32
        XCTAssertEqual(rawBytes(path, at: chunk1, count: 4), rawBytes(path, at: end - 32, count: 4),
                       "the short last chunk and its trailer name one selector")

        // An extension interrupted after 3000 bytes: the old file, then new bytes.
        appendRaw(path, (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
        let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        XCTAssertEqual(try g.size, 4196)
        XCTAssertEqual(try g.bytesAfterAuthenticatedEnd, 3000)
        XCTAssertEqual(try g.pread(count: 200, at: 4096), tail)
        try g.pwrite([0x33], at: 4196)
        try g.close()
        let h = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try h.pread(count: 4, at: 4194), [0x22, 0x22, 0x33])
        XCTAssertEqual(try h.bytesAfterAuthenticatedEnd, 0)
        try h.close()
    }

    /// The same for a shrink inside the last chunk (the chunk is rewritten shorter with its trailer).
    func testShortEndCutAtSelectorRolloverSharesOneSelector() throws {
        let env = try TestEnvironment()
        let path = env.path("rollover-cut")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, wholeChunkOverwrites: .inPlace)
        let chunk = [UInt8](repeating: 0x11, count: 4096)
        try f.pwrite(chunk + [UInt8](repeating: 0x22, count: 100), at: 0)
        while try f.withShared({ $0.cipher!.writesLeft }) != 1 { try f.pwrite(chunk, at: 0) }
        try f.truncate(to: 4150)
        try f.close()
        let chunk1 = Int64(128 + 4128)
        let end = chunk1 + 32 + 54 + 32
        XCTAssertEqual(rawBytes(path, at: chunk1, count: 4), rawBytes(path, at: end - 32, count: 4),
                       "the short last chunk and its trailer name one selector")
        appendRaw(path, [UInt8](repeating: 0xEE, count: 700))
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.size, 4150)
        XCTAssertEqual(try g.bytesAfterAuthenticatedEnd, 700)
        try g.close()
    }

    /// Version 1 has no selectors: every valid position is still a candidate, and an interrupted
    /// extension of a version 1 test vector (10,000 bytes, an end inside a chunk) recovers.
    func testVersion1TornExtensionRecovers() throws {
        let env = try TestEnvironment()
        let path = env.path("v1.acsf")
        writeWholeFile(path, readWholeFile(FormatVectorTests.directory + "/v1/multi-chunk.acsf"))
        appendRaw(path, (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 1) })
        let services = FixedKeyProvider(kek: try FormatVectorTests.kek())
        let before = SecureFileTesting.recoveryTrailerChecks
        let f = try SecureFile.open(path, flags: O_RDONLY, services: services)
        XCTAssertEqual(try f.size, 10_000)
        XCTAssertEqual(try f.bytesAfterAuthenticatedEnd, 3000)
        XCTAssertEqual(try f.pread(count: 20_000, at: 0), FormatVectorTests.plaintext(10_000))
        try f.close()
        XCTAssertGreaterThan(SecureFileTesting.recoveryTrailerChecks - before, 2900, "every position after the end was checked")
    }
}
