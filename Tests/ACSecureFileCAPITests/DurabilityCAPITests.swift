#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import CACSecureFile
@testable import ACSecureFileCAPI

/// When written data is in the file, through the C API: write-through by default, write-back only
/// when asked (ACSecureFileOpenWithOptions), the durability calls, and a recovered interrupted
/// write reported right after open.
final class DurabilityCAPITests: CAPITestCase {
    override class var appID: String { "capi-durability" }

    private func physicalSize(_ name: String) -> Int {
        var st = stat()
        return stat(directory + "/" + name, &st) == 0 ? Int(st.st_size) : -1
    }

    func testWriteThroughIsInTheFileWhenTheCallReturns() {
        let fd = ACSecureFile_openWithMode(directory + "/t", O_RDWR | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(physicalSize("t"), 160, "the header and empty trailer are written by the creating open")
        XCTAssertEqual(Array(repeating: UInt8(7), count: 100).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 100) }, 100)
        XCTAssertEqual(physicalSize("t"), 160 + 100 + 32, "a write-through write is on disk when it returns")
        XCTAssertEqual(ACSecureFileFsync(fd), 0)
        XCTAssertEqual(ACSecureFileFdatasync(fd), 0)
        XCTAssertEqual(ACSecureFileFlush(fd), 0)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    func testWriteBackIsBufferedUntilFlush() {
        let fd = ACSecureFileOpenWithOptions(directory + "/b", O_RDWR | O_CREAT, 0o600, UInt32(ACSECURE_OPEN_WRITE_BACK))
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(Array(repeating: UInt8(7), count: 100).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 100) }, 100)
        XCTAssertEqual(physicalSize("b"), 160, "write-back keeps a small write in memory")
        var st = stat()
        XCTAssertEqual(ACSecureFstat(fd, &st), 0)
        XCTAssertEqual(st.st_size, 100, "but the descriptor sees it")
        XCTAssertEqual(ACSecureFileFlush(fd), 0)
        XCTAssertEqual(physicalSize("b"), 160 + 100 + 32, "flush writes it")
        XCTAssertEqual(Array(repeating: UInt8(8), count: 10).withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, 10) }, 10)
        XCTAssertEqual(ACSecureFileFsync(fd), 0)
        XCTAssertEqual(physicalSize("b"), 160 + 110 + 32, "fsync writes it too")
        XCTAssertEqual(ACSecureFileClose(fd), 0)
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
}
