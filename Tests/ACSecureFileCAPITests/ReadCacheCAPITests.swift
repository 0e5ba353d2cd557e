#if canImport(Glibc)
import Glibc
#endif
import XCTest
import CACSecureFile
@testable import ACSecureFileCore
@testable import ACSecureFileCAPI

/// ACSECURE_OPEN_READ_CACHE and its size, ACSECURE_READ_CACHE_MIB (ACSecureFile.h).
final class ReadCacheCAPITests: CAPITestCase {
    override class var appID: String { "capi-read-cache" }
    override func tearDownWithError() throws {
        unsetenv("ACSECURE_READ_CACHE_MIB")
        try super.tearDownWithError()
    }

    /// The cache size the file state asked for through descriptor `fd`.
    private func cacheBytes(_ fd: Int32) -> Int? {
        guard let file = DescriptorTable.shared.lookup(fd)?.file else { return nil }
        return file.shared.lock.withLock { file.shared.readCacheBytes }
    }

    private func open(_ name: String, _ options: UInt32) -> Int32 {
        ACSecureFileOpenWithOptions(directory + "/" + name, O_RDWR | O_CREAT, 0o600, options)
    }

    func testSizeComesFromTheEnvironment() {
        let flag = UInt32(ACSECURE_OPEN_READ_CACHE)
        for (value, expected) in [(nil, 16 << 20), ("4", 4 << 20), ("1024", 1 << 30), ("0", 0), ("1", 1 << 20)] as [(String?, Int)] {
            if let value { setenv("ACSECURE_READ_CACHE_MIB", value, 1) } else { unsetenv("ACSECURE_READ_CACHE_MIB") }
            let fd = open("f-\(value ?? "unset")", flag)
            XCTAssertGreaterThanOrEqual(fd, 0, "ACSECURE_READ_CACHE_MIB=\(value ?? "unset")")
            XCTAssertEqual(cacheBytes(fd), expected, "ACSECURE_READ_CACHE_MIB=\(value ?? "unset")")
            let data = [UInt8](repeating: 5, count: 9000)
            XCTAssertEqual(data.withUnsafeBytes { ACSecureFilePwrite(fd, $0.baseAddress, $0.count, 0) }, 9000)
            var back = [UInt8](repeating: 0, count: 9000)
            for _ in 0..<2 { XCTAssertEqual(back.withUnsafeMutableBytes { ACSecureFilePread(fd, $0.baseAddress, $0.count, 0) }, 9000) }
            XCTAssertEqual(back, data)
            XCTAssertEqual(ACSecureFileClose(fd), 0)
        }
        setenv("ACSECURE_READ_CACHE_MIB", "64", 1)
        let fd = open("no-flag", 0)
        XCTAssertEqual(cacheBytes(fd), 0, "the variable alone asks for nothing")
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    func testBadSizesFailTheOpenWithEINVAL() {
        for value in ["abc", "-1", "1025", "99999999", "16MiB", " 16", "1e3"] {
            setenv("ACSECURE_READ_CACHE_MIB", value, 1)
            errno = 0
            XCTAssertEqual(open("bad", UInt32(ACSECURE_OPEN_READ_CACHE)), -1, "ACSECURE_READ_CACHE_MIB=\(value)")
            XCTAssertEqual(errno, EINVAL, "ACSECURE_READ_CACHE_MIB=\(value)")
            var st = stat()
            XCTAssertNotEqual(stat(directory + "/bad", &st), 0, "nothing is created")
        }
        // Set but empty (a shell's VAR=) is unset: the default size, not an error.
        setenv("ACSECURE_READ_CACHE_MIB", "", 1)
        let fd = open("empty", UInt32(ACSECURE_OPEN_READ_CACHE))
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(cacheBytes(fd), 16 << 20)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }
}
