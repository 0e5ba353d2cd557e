#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import CACSecureFile
import ACSecureFileCore
import ACSystemCalls
@testable import ACSecureFileCAPI

/// File names are bytes: every name `open(2)` takes, the C API takes, byte for byte (never
/// refused as "not UTF-8", never repaired into another name), with POSIX's errors.
final class ByteNameTests: CAPITestCase {
    override class var appID: String { "byte-name-tests" }

    /// `directory/` + `name` as a C string.
    private func cName(_ name: [UInt8]) -> [CChar] { (Array(directory.utf8) + [UInt8(ascii: "/")] + name + [0]).map { CChar(bitPattern: $0) } }

    /// The names in the test directory, as the kernel lists them.
    private func entries() -> Set<[UInt8]> {
        guard case .success(let names) = Sys.directoryEntryNames(BytePath(directory)) else { XCTFail("readdir"); return [] }
        return Set(names.map(\.bytes))
    }

    // Latin-1, Shift-JIS, a lone continuation byte, a truncated sequence, an overlong '/', a surrogate.
    static let names: [[UInt8]] = [
        Array("caf".utf8) + [0xE9],
        [0x83, 0x65, 0x83, 0x58, 0x83, 0x67],
        [0x80, 0x78],
        Array("bad".utf8) + [0xFF, 0xFE] + Array("name".utf8),
        [0xE2, 0x82],
        [0xC0, 0xAF],
        [0xED, 0xA0, 0x80],
    ]

    func testEveryNameTheKernelTakesIsCreatedReadRenamedAndTruncatedByteForByte() throws {
        for (i, name) in Self.names.enumerated() {
            let path = cName(name)
            let fd = ACSecureFile_openWithMode(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
            XCTAssertGreaterThanOrEqual(fd, 0, "name \(i): errno \(errno)")
            guard fd >= 0 else { continue }
            let text = Array("secret \(i)".utf8)
            XCTAssertEqual(text.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, $0.count) }, text.count)
            XCTAssertEqual(ACSecureFileClose(fd), 0)
            XCTAssertTrue(entries().contains(name), "name \(i) is on disk byte for byte")
            // The name a String would have made of it does not exist.
            let repaired = Array(String(decoding: name, as: UTF8.self).utf8)
            XCTAssertFalse(entries().contains(repaired), "name \(i) was not repaired")

            var st = stat()
            XCTAssertEqual(ACSecureLstat(path, &st), 0)
            XCTAssertEqual(st.st_size, off_t(text.count))
            XCTAssertEqual(ACSecureTruncate(path, 6), 0)
            let renamed = cName(name + [0xFF])
            XCTAssertEqual(ACSecureFileRename(path, renamed), 0)
            errno = 0
            XCTAssertEqual(ACSecureFile_openWithMode(path, O_RDONLY, 0), -1)
            XCTAssertEqual(errno, ENOENT)
            let again = ACSecureFile_openWithMode(renamed, O_RDONLY, 0)
            var out = [UInt8](repeating: 0, count: 32)
            XCTAssertEqual(out.withUnsafeMutableBytes { ACSecureFileRead(again, $0.baseAddress, $0.count) }, 6)
            XCTAssertEqual(Array(out.prefix(6)), Array(text.prefix(6)))
            XCTAssertEqual(ACSecureFileClose(again), 0)
        }
        XCTAssertEqual(DescriptorTable.shared.count, 0)
    }

    func testPOSIXErrorsForByteNamesAreTheKernels() {
        // A component of 256 bytes: ENAMETOOLONG, as open(2) says, not EILSEQ or EINVAL.
        errno = 0
        XCTAssertEqual(ACSecureFile_openWithMode(cName([UInt8](repeating: 0xFF, count: 256)), O_RDWR | O_CREAT, 0o600), -1)
        XCTAssertEqual(errno, ENAMETOOLONG)
        // A missing name that is not UTF-8: ENOENT.
        errno = 0
        XCTAssertEqual(ACSecureFile_openWithMode(cName([0xFF]), O_RDONLY, 0), -1)
        XCTAssertEqual(errno, ENOENT)
        // The longest component the kernel takes works.
        let fd = ACSecureFile_openWithMode(cName([UInt8](repeating: 0xFE, count: 255)), O_RDWR | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    func testErrorMessagesPrintUndecodableNamesEscapedNeverLossy() {
        let a = BytePath(bytes: Array("x".utf8) + [0xFF])!
        let b = BytePath(bytes: Array("x".utf8) + [0xFE])!
        XCTAssertEqual(a.description, "x\\xFF")
        XCTAssertNotEqual(a.description, b.description)
        XCTAssertEqual(BytePath(bytes: Array("café".utf8))!.description, "café", "UTF-8 as it is")
        // A backslash is escaped, so a name that holds the text "\xFF" does not print like a 0xFF byte.
        XCTAssertEqual(BytePath("x\\xFF").description, "x\\\\xFF")
        XCTAssertEqual(BytePath(bytes: [0xE2, 0x82, 0x41])!.description, "\\xE2\\x82A")
        do {
            _ = try SecureFile.open(BytePath(bytes: Array("\(directory)/missing".utf8) + [0xFF])!, flags: O_RDONLY)
            XCTFail("opened a missing file")
        } catch {
            XCTAssertTrue(error.message.contains("missing\\xFF"), error.message)
            XCTAssertEqual(error.errno, ENOENT)
        }
    }

    func testANameWithNULFromSwiftIsRefusedNotTruncated() {
        // C cannot pass such a name; from Swift it would name a different file if cut at the NUL.
        XCTAssertNil(BytePath(bytes: Array("a".utf8) + [0] + Array("b".utf8)))
        do {
            _ = try SecureFile.open("\(directory)/a\u{0}b", flags: O_RDWR | O_CREAT)
            XCTFail("opened a name holding NUL")
        } catch {
            XCTAssertEqual(error.errno, EINVAL)
        }
        XCTAssertFalse(entries().contains(Array("a".utf8)))
    }
}
