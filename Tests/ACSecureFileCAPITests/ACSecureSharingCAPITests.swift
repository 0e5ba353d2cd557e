#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import CACSecureFile
@testable import ACSecureFileCAPI
import ACSecureFileCore
import ACSecureServices
import ACSecureSharingCore

/// ACSecureSharing.h called as C calls it, in one process (the two-process flow is
/// Tests/CDifferential/wrapped.c): a NULL-group round trip, and the error mapping.
final class ACSecureSharingCAPITests: CAPITestCase {
    override class var appID: String { "capi-sharing-tests" }

    private func cryptoBlock(_ group: String?) throws -> [UInt8] {
        var block = [UInt8](repeating: 0, count: Int(ACSECURE_CRYPTO_BLOCK_SIZE))
        var length = block.count
        let r = block.withUnsafeMutableBufferPointer { b in
            group.map { ACSecureGetCryptoBlock($0, b.baseAddress, &length) } ?? ACSecureGetCryptoBlock(nil, b.baseAddress, &length)
        }
        XCTAssertEqual(r, 0, String(cString: strerror(errno)))
        XCTAssertEqual(length, block.count)
        return block
    }

    func testNilGroupRoundTripWithDefaultNameAndDescriptorBookkeeping() throws {
        let source = directory + "/notes.txt", wrapped = directory + "/notes.wrapped"
        let content = Array("the extension's bytes, not the name record".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: source, contents: Data(content)))
        var block = try cryptoBlock(nil)
        XCTAssertEqual(ACSecureWrapFile(source, wrapped, block, block.count, nil), 0, String(cString: strerror(errno)))
        block.withUnsafeMutableBytes { explicit_bzero($0.baseAddress!, $0.count) }

        let before = WrappedDescriptorTable.shared.count
        var name = [CChar](repeating: 0, count: Int(ACSECURE_WRAPPED_FILE_NAME_MAX) + 1)
        var detail: Int32 = -7
        let fd = ACSecureWrappedFileOpen(wrapped, nil, &name, name.count, &detail)
        XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
        XCTAssertEqual(detail, 0)
        XCTAssertEqual(String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), "notes.txt", "NULL actualFileName means the source's last component")
        XCTAssertEqual(WrappedDescriptorTable.shared.count, before + 1)
        var back = [UInt8](repeating: 0, count: 100)
        XCTAssertEqual(ACSecureWrappedFileRead(fd, &back, back.count), content.count)
        XCTAssertEqual(Array(back.prefix(content.count)), content)
        XCTAssertEqual(ACSecureWrappedFileRead(fd, &back, back.count), 0, "end of file")
        // A wrapped descriptor is not an ACSecureFile descriptor.
        XCTAssertEqual(ACSecureFileLastError(fd), -1)
        XCTAssertEqual(ACSecureWrappedFileClose(fd), 0)
        XCTAssertEqual(WrappedDescriptorTable.shared.count, before)
        XCTAssertEqual(fcntl(fd, F_GETFD), -1, "the kernel descriptor is closed too")

        // A block of one group does not read files of "no group", and the reverse.
        detail = -7
        XCTAssertEqual(ACSecureWrappedFileOpen(wrapped, "some-group", nil, 0, &detail), -1)
        XCTAssertEqual(errno, EIO)
        XCTAssertEqual(detail, Int32(ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR.rawValue))
    }

    func testErrorMappingOfSharingErrors() {
        let unknown = WrappedCError(WrappedFileOpenError.unknownWrapperFormat("f: not a wrapped file"))
        XCTAssertEqual(unknown.errno, EILSEQ)
        XCTAssertEqual(unknown.code, Int32(ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT.rawValue))
        let posix = WrappedCError(WrappedFileOpenError.secureFile(.posix(ENOSPC, "f")))
        XCTAssertEqual(posix.errno, ENOSPC)
        XCTAssertEqual(posix.code, 0)
        let noKeys = WrappedCError(SecureFileError(SecureServicesError(.noKeys, "locked"), "f"))
        XCTAssertEqual(noKeys.errno, EACCES, "the engine's errno for the code when there is no underlying errno")
        XCTAssertEqual(noKeys.code, Int32(ACE_NO_KEYS_ERROR.rawValue))
        let withCause = WrappedCError(SecureFileError(SecureServicesError(.storeIO, "store", errno: EROFS), "f"))
        XCTAssertEqual(withCause.errno, EROFS)
        XCTAssertEqual(withCause.code, Int32(ACE_NO_KEYS_ERROR.rawValue))
        struct Other: Error {}
        let other = WrappedCError(Other())
        XCTAssertEqual(other.errno, EIO)
        XCTAssertEqual(other.code, Int32(ACE_INTERNAL_ERROR.rawValue))

        // No keys: the crypto block needs unlocked services; the call says EACCES.
        XCTAssertEqual(ACSecureServicesLock(), 0)
        var block = [UInt8](repeating: 0, count: 64)
        var length = block.count
        XCTAssertEqual(ACSecureGetCryptoBlock("g", &block, &length), -1)
        XCTAssertEqual(errno, EACCES)
        XCTAssertEqual(ACSecureServicesUnlock(nil), 0)
    }
}
