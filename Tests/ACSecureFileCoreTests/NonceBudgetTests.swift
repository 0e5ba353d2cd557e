#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// Issue 15 #3: the nonce budget (docs/FORMAT.md "Nonces and chunk keys"). A writer seals at most
/// 2^16 chunks and trailers under one key selector, then draws a new one; readers find each chunk's
/// key from its selector.
final class NonceBudgetTests: XCTestCase {
    /// Reads the 4-byte selector of every chunk of a version 2 file with 4 KiB chunks.
    func selectors(_ path: String, chunks: Int) -> [UInt32] {
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        return (0..<chunks).map { i in
            var s: UInt32 = 0
            _ = withUnsafeMutableBytes(of: &s) { Glibc.pread(fd, $0.baseAddress, 4, off_t(FileLayout().chunkOffset(Int64(i)))) }
            return UInt32(bigEndian: s)
        }
    }

    /// 2^16 + 1 chunk writes through one handle use at least two selectors, each at most 2^16
    /// times, and the file reads back (the reader derives every selector's key).
    func testSelectorRotatesAfter2To16Writes() throws {
        let env = try TestEnvironment()
        let path = env.path("rotation")
        let chunks = ChunkKeys.writesPerSelector + 1
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for i in 0..<(chunks * 4096 + block.count - 1) / block.count {
            for j in stride(from: 0, to: block.count, by: 4096) { block[j] = UInt8(truncatingIfNeeded: i &+ j >> 12) }
            try f.pwrite(Array(block.prefix(min(block.count, chunks * 4096 - i * block.count))), at: Int64(i * block.count))
        }
        let drawn = try f.withShared { $0.cipher!.selectorsDrawn }
        try f.close()
        XCTAssertGreaterThanOrEqual(drawn, 2, "the writer drew a new selector after 2^16 seals")
        let found = selectors(path, chunks: chunks)
        let counts = Dictionary(found.map { ($0, 1) }, uniquingKeysWith: +)
        XCTAssertGreaterThanOrEqual(counts.count, 2, "the file names at least two selectors")
        XCTAssertLessThanOrEqual(counts.values.max() ?? 0, ChunkKeys.writesPerSelector)
        XCTAssertLessThanOrEqual(counts.count, 3, "a selector is kept for 2^16 seals, not redrawn per write")
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        for i in [0, 255, 256, chunks / 2, chunks - 2, chunks - 1] {
            let buf = try g.pread(count: 4096, at: Int64(i) * 4096)
            XCTAssertEqual(buf.count, 4096)
            XCTAssertEqual(buf.first, UInt8(truncatingIfNeeded: i / 256 &+ i % 256), "chunk \(i)")
        }
        try g.close()
    }

    /// Each open draws its own random selector: chunks written through different opens name
    /// different selectors, and a reader with a small cache reads a file written in many sessions.
    func testEachWriterDrawsItsOwnSelector() throws {
        let env = try TestEnvironment()
        let path = env.path("sessions")
        let sessions = ChunkKeys.cachedSelectors * 2 + 3
        for i in 0..<sessions {
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
            try f.pwrite([UInt8](repeating: UInt8(i), count: 4096), at: Int64(i) * 4096)
            try f.close()
        }
        XCTAssertEqual(Set(selectors(path, chunks: sessions)).count, sessions)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        for round in 0..<2 {
            for i in (0..<sessions).reversed() {
                XCTAssertEqual(try g.pread(count: 4096, at: Int64(i) * 4096), [UInt8](repeating: UInt8(i), count: 4096), "round \(round), chunk \(i)")
            }
        }
        try g.close()
    }

    /// K_s depends on s: a chunk whose selector is changed on disk fails authentication.
    func testAlteredSelectorFails() throws {
        let env = try TestEnvironment()
        let path = env.path("selector")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.pwrite([UInt8](repeating: 5, count: 8192), at: 0)
        try f.close()
        var raw = readWholeFile(path)
        raw[Int(FileLayout().chunkOffset(1)) + 3] ^= 1
        writeWholeFile(path, raw)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.pread(count: 4096, at: 0), [UInt8](repeating: 5, count: 4096))
        XCTAssertEqual(aceCode { _ = try g.pread(count: 4096, at: 4096) }, .badKeyOrCorruptData)
        try g.close()
    }

    /// FIPS-197 C.3: the AES-256 block cipher behind the selector keys.
    func testAESBlockCipherKnownAnswer() throws {
        let key = try SecureBytes(copying: (0..<32).map { UInt8($0) })
        let plain: [UInt8] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
        var out = [UInt8](repeating: 0, count: 16)
        try plain.withUnsafeBytes { p in try out.withUnsafeMutableBytes { try AESBlockCipher(key: key).encryptBlocks(p, into: $0.baseAddress!) } }
        XCTAssertEqual(out.map { String(format: "%02x", $0) }.joined(), "8ea2b7ca516745bfeafc49904b496089")
    }
}
