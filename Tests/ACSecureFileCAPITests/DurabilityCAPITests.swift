#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import CACSecureFile
@testable import ACSecureFileCAPI
import ACSecureFileCore
import ACSystemCalls

/// When written data is in the file, through the C API: write-through by default, write-back only
/// when asked (ACSecureFileOpenWithOptions), the durability calls, and a recovered interrupted
/// write reported right after open.
final class DurabilityCAPITests: CAPITestCase {
    override class var appID: String { "capi-durability" }

    /// The physical size of a current-version file of `n` plaintext bytes.
    private func physical(_ n: Int64) -> Int { Int(FileLayout().physicalSize(forPlaintextSize: n)) }

    private func physicalSize(_ name: String) -> Int {
        var st = stat()
        return stat(directory + "/" + name, &st) == 0 ? Int(st.st_size) : -1
    }

    func testWriteThroughIsInTheFileWhenTheCallReturns() {
        let fd = ACSecureFile_openWithMode(directory + "/t", O_RDWR | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(physicalSize("t"), physical(0), "the header and empty trailer are written by the creating open")
        XCTAssertEqual(Array(repeating: UInt8(7), count: 100).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 100) }, 100)
        XCTAssertEqual(physicalSize("t"), physical(100), "a write-through write is on disk when it returns")
        XCTAssertEqual(ACSecureFileFsync(fd), 0)
        XCTAssertEqual(ACSecureFileFdatasync(fd), 0)
        XCTAssertEqual(ACSecureFileFlush(fd), 0)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    func testWriteBackIsBufferedUntilFlush() {
        let fd = ACSecureFileOpenWithOptions(directory + "/b", O_RDWR | O_CREAT, 0o600, UInt32(ACSECURE_OPEN_WRITE_BACK))
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(Array(repeating: UInt8(7), count: 100).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 100) }, 100)
        XCTAssertEqual(physicalSize("b"), physical(0), "write-back keeps a small write in memory")
        var st = stat()
        XCTAssertEqual(ACSecureFstat(fd, &st), 0)
        XCTAssertEqual(st.st_size, 100, "but the descriptor sees it")
        XCTAssertEqual(ACSecureFileFlush(fd), 0)
        XCTAssertEqual(physicalSize("b"), physical(100), "flush writes it")
        XCTAssertEqual(Array(repeating: UInt8(8), count: 10).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 10) }, 10)
        XCTAssertEqual(ACSecureFileFsync(fd), 0)
        XCTAssertEqual(physicalSize("b"), physical(110), "fsync writes it too")
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    /// Makes `name` with `size` bytes of 7 (opened with `options`; nil: `ACSecureFileOpen`), then
    /// counts the events that `counted` picks while `count` bytes of 8 are written at `offset`; checks
    /// the file reads back so and closes it.
    func events(_ name: String, options: UInt32?, size: Int, pwrite count: Int, at offset: Int,
                counted: @escaping (SystemCallRecorder.Event) -> Bool) -> Int {
        let path = directory + "/" + name
        let fd = options.map { ACSecureFileOpenWithOptions(path, O_RDWR | O_CREAT, 0o600, $0) } ?? ACSecureFile_openWithMode(path, O_RDWR | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0, name)
        XCTAssertEqual(Array(repeating: UInt8(7), count: size).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, size) }, size)
        final class Count: @unchecked Sendable { var n = 0 }
        let seen = Count()
        SystemCallRecorder.with(SystemCallRecorder { if counted($0) { seen.n += 1 } }) {
            XCTAssertEqual([UInt8](repeating: 8, count: count).withUnsafeBytes { ACSecureFilePwrite(fd, $0.baseAddress, count, off_t(offset)) }, count)
        }
        var back = [UInt8](repeating: 0, count: size)
        XCTAssertEqual(back.withUnsafeMutableBytes { ACSecureFilePread(fd, $0.baseAddress, size, 0) }, size)
        var expected = [UInt8](repeating: 7, count: size)
        expected.replaceSubrange(offset..<offset + count, with: repeatElement(8, count: count))
        XCTAssertEqual(back, expected, name)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        return seen.n
    }

    /// ACSECURE_OPEN_DOUBLE_WRITE, and ACSECURE_DOUBLE_WRITE=1 for ACSecureFileOpen: a write that
    /// rewrites part of a chunk syncs twice (its copy, then the chunk); without them it does not.
    func testDoubleWritesAreAskedForByOptionOrEnvironment() {
        func barriers(_ name: String, options: UInt32?) -> Int {
            events(name, options: options, size: 10_000, pwrite: 100, at: 5000) { if case .sync = $0 { true } else { false } }
        }
        XCTAssertEqual(barriers("plain", options: 0), 0)
        XCTAssertEqual(barriers("option", options: UInt32(ACSECURE_OPEN_DOUBLE_WRITE)), 2)
        setenv("ACSECURE_DOUBLE_WRITE", "1", 1)
        defer { unsetenv("ACSECURE_DOUBLE_WRITE") }
        XCTAssertEqual(barriers("environment", options: nil), 2)
        XCTAssertEqual(barriers("environment-ignored", options: 0), 0, "ACSecureFileOpenWithOptions ignores the environment")
    }

    /// A 4 KiB overwrite of a whole chunk writes its chunk copy first by default (two `pwrite`s);
    /// `ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE` writes it in place alone, and both read back the same.
    func testWholeChunksAreCopiedUnlessTheOpenSaysInPlace() {
        func writes(_ name: String, options: UInt32) -> Int {
            events(name, options: options, size: 20_000, pwrite: 4096, at: 8192) { if case .write = $0 { true } else { false } }
        }
        XCTAssertEqual(writes("copied", options: 0), 2, "the chunk's copy, then the chunk")
        XCTAssertEqual(writes("in-place", options: UInt32(ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE)), 1)
    }

    func testBadArgumentsAndDescriptors() {
        errno = 0
        XCTAssertEqual(ACSecureFileOpenWithOptions(directory + "/x", O_RDWR | O_CREAT, 0o600, 0x80), -1)
        XCTAssertEqual(errno, EINVAL)
        XCTAssertEqual(physicalSize("x"), -1, "nothing is created for a refused option")
        for call in [ACSecureFileFsync, ACSecureFileFdatasync, ACSecureFileFlush] {
            errno = 0
            XCTAssertEqual(call(12345), -1)
            XCTAssertEqual(errno, EBADF)
        }
        errno = 0
        XCTAssertEqual(ACSecureFileRecoveredBytes(12345), -1)
        XCTAssertEqual(errno, EBADF)
    }

    func testRecoveredInterruptedWriteIsReportedAfterOpen() {
        let fd = ACSecureFile_openWithMode(directory + "/r", O_RDWR | O_CREAT, 0o600)
        XCTAssertEqual(Array(repeating: UInt8(1), count: 5000).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 5000) }, 5000)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        // What an interrupted extension leaves: bytes after the complete file.
        let raw = Glibc.open(directory + "/r", O_WRONLY | O_APPEND)
        XCTAssertEqual([UInt8](repeating: 0x5A, count: 700).withUnsafeBytes { Glibc.write(raw, $0.baseAddress, 700) }, 700)
        Glibc.close(raw)
        let again = ACSecureFile_openWithMode(directory + "/r", O_RDWR, 0)
        XCTAssertGreaterThanOrEqual(again, 0)
        XCTAssertEqual(ACSecureFileLastError(again), Int32(ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR.rawValue), "the recovery is visible after open")
        XCTAssertEqual(ACSecureFileRecoveredBytes(again), 700)
        var st = stat()
        XCTAssertEqual(ACSecureFstat(again, &st), 0)
        XCTAssertEqual(st.st_size, 5000)
        XCTAssertEqual(ACSecureFileClose(again), 0)
    }

    /// A version 5 file whose append from 12,288 bytes (an aligned end whose 40-byte trailer spans
    /// two sectors), two chunks after its last sync, was torn by a power loss (only the old
    /// trailer's second sector written back): the open takes it back to 12,288 and says so through
    /// every C call that reports an end (docs/FORMAT.md "Trailers that span two sectors"); the
    /// next write seals a trailer there and goes on.
    func testATornAppendTakenBackToAnAlignedEndIsReportedAfterOpen() throws {
        let path = directory + "/aligned"
        let data = (0..<12_388).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let fd = ACSecureFile_openWithMode(path, O_RDWR | O_CREAT, 0o600)
        XCTAssertEqual(data.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 4000) }, 4000)
        XCTAssertEqual(ACSecureFileFsync(fd), 0)
        XCTAssertEqual(data.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress! + 4000, 8288) }, 8288)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        XCTAssertEqual(data.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress! + 12_288, 100) }, 100)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        var torn = try Data(contentsOf: URL(fileURLWithPath: path))
        let sector = (physical(12_288) - FileLayout().trailerSize) / 512 * 512
        torn.replaceSubrange(sector..<sector + 512, with: before[sector..<sector + 512])
        try torn.write(to: URL(fileURLWithPath: path))

        let again = ACSecureFile_openWithMode(path, O_RDWR, 0)
        XCTAssertGreaterThanOrEqual(again, 0)
        XCTAssertEqual(ACSecureFileLastError(again), Int32(ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR.rawValue), "visible after open")
        XCTAssertEqual(ACSecureFileEndRestored(again), 1)
        XCTAssertEqual(ACSecureFileRecoveredBytes(again), off_t(physical(12_388) - physical(12_288)))
        var st = stat()
        XCTAssertEqual(ACSecureFstat(again, &st), 0)
        XCTAssertEqual(st.st_size, 12_288)
        var back = [UInt8](repeating: 0, count: 12_388)
        XCTAssertEqual(back.withUnsafeMutableBytes { ACSecureFilePread(again, $0.baseAddress, 12_388, 0) }, 12_288)
        XCTAssertEqual(Array(back.prefix(12_288)), Array(data.prefix(12_288)))
        XCTAssertEqual(ACSecureFileLseek(again, 0, SEEK_END), 12_288)
        XCTAssertEqual([UInt8](repeating: 9, count: 50).withUnsafeBytes { ACSecureFileWrite(again, $0.baseAddress, 50) }, 50)
        XCTAssertEqual(ACSecureFileEndRestored(again), 0, "the write sealed a trailer at 12,288 first")
        XCTAssertEqual(ACSecureFileRecoveredBytes(again), 0)
        XCTAssertEqual(ACSecureFileClose(again), 0)
        XCTAssertEqual(physicalSize("aligned"), physical(12_338))
        let reread = ACSecureFile_openWithMode(path, O_RDONLY, 0)
        XCTAssertEqual(ACSecureFileLastError(reread), Int32(ACE_NO_ERROR.rawValue))
        XCTAssertEqual(ACSecureFileEndRestored(reread), 0)
        XCTAssertEqual(back.withUnsafeMutableBytes { ACSecureFilePread(reread, $0.baseAddress, 12_388, 0) }, 12_338)
        XCTAssertEqual(Array(back.prefix(12_338)), Array(data.prefix(12_288)) + [UInt8](repeating: 9, count: 50))
        XCTAssertEqual(ACSecureFileClose(reread), 0)
    }

    /// A file whose end does not authenticate (what a power loss leaves when an append from a
    /// chunk-aligned end tore over the old trailer) takes an end vouched for by the caller, on a
    /// chunk boundary within its bytes, and accepts changes again; the acsecure VFS vouches with a
    /// hot journal's size (SQLiteCrashStateTests). Refused (EINVAL) when the end authenticates, for
    /// another size and on a read-only descriptor.
    func testAnEndVouchedForIsTakenOnlyWhenNoEndAuthenticates() {
        let path = directory + "/vouched"
        let fd = ACSecureFile_openWithMode(path, O_RDWR | O_CREAT, 0o600)
        let data = (0..<12288).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        XCTAssertEqual(data.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 12288) }, 12288)
        XCTAssertEqual(ACSecureFileAdoptEnd(fd, 8192), -1)
        XCTAssertEqual(errno, EINVAL, "the end authenticates: a cut is ftruncate's")
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        // The torn append: the head of a fourth chunk over the old trailer, the new size not there;
        // and no tail copy (as in a version 3 file, or both slots damaged), else the creating open's
        // copy would be the end (an empty file, and these bytes reported after it).
        let raw = Glibc.open(path, O_WRONLY)
        var st = stat()
        XCTAssertEqual(fstat(raw, &st), 0)
        XCTAssertEqual([UInt8](repeating: 0xC3, count: 32).withUnsafeBytes { Glibc.pwrite(raw, $0.baseAddress, 32, st.st_size - 32) }, 32)
        for slot in 0..<2 {
            XCTAssertEqual([UInt8](repeating: 0, count: 64).withUnsafeBytes { Glibc.pwrite(raw, $0.baseAddress, 64, off_t(FileLayout().tailCopyOffset(slot))) }, 64)
        }
        Glibc.close(raw)
        let readOnly = ACSecureFile_openWithMode(path, O_RDONLY, 0)
        XCTAssertEqual(ACSecureFileAdoptEnd(readOnly, 12288), -1)
        XCTAssertEqual(errno, EINVAL, "a read-only descriptor, as ftruncate")
        XCTAssertEqual(ACSecureFileClose(readOnly), 0)
        let damaged = ACSecureFile_openWithMode(path, O_RDWR, 0)
        XCTAssertEqual(ACSecureFileRecoveredBytes(damaged), -1, "no end authenticates")
        XCTAssertEqual([UInt8](repeating: 1, count: 10).withUnsafeBytes { ACSecureFilePwrite(damaged, $0.baseAddress, 10, 0) }, -1, "changes are refused")
        for wrong: off_t in [5000, 16384, -4096] {
            XCTAssertEqual(ACSecureFileAdoptEnd(damaged, wrong), -1, "\(wrong)")
            XCTAssertEqual(errno, EINVAL, "\(wrong): not a chunk boundary within the file")
        }
        XCTAssertEqual(ACSecureFileAdoptEnd(damaged, 12288), 0, String(cString: strerror(errno)))
        XCTAssertEqual(ACSecureFstat(damaged, &st), 0)
        XCTAssertEqual(st.st_size, 12288)
        XCTAssertEqual([UInt8](repeating: 7, count: 100).withUnsafeBytes { ACSecureFilePwrite(damaged, $0.baseAddress, 100, 12288) }, 100, "changes are accepted again")
        XCTAssertEqual(ACSecureFileClose(damaged), 0)
        let reopened = ACSecureFile_openWithMode(path, O_RDONLY, 0)
        XCTAssertEqual(ACSecureFileLastError(reopened), Int32(ACE_NO_ERROR.rawValue), "the end authenticates again")
        var back = [UInt8](repeating: 0, count: 12388)
        XCTAssertEqual(back.withUnsafeMutableBytes { ACSecureFilePread(reopened, $0.baseAddress, 12388, 0) }, 12388)
        XCTAssertTrue(back[0..<12288].elementsEqual(data), "the bytes below the vouched end")
        XCTAssertTrue(back[12288...].allSatisfy { $0 == 7 }, "the bytes written after")
        XCTAssertEqual(ACSecureFileClose(reopened), 0)
    }
}
