#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// Issue 15, finding 5: the header's flags (bytes 10..<12) and reserved bytes (12..<16, 108..<128)
/// must be zero (docs/FORMAT.md). Someone holding the key can re-wrap a header with other values so
/// the wrap still authenticates: the parser must refuse them before any key is used.
final class ReservedHeaderFieldTests: XCTestCase {
    private let plaintext = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 7) }

    /// A secure file holding `plaintext`, its raw header, its data key and its app KEK.
    private func makeFile(_ env: TestEnvironment, _ name: String) throws -> (path: String, header: FileHeader, dataKey: SecureBytes, kek: KeyEncryptionKey) {
        let path = env.path(name)
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services)
        _ = try f.write(plaintext)
        try f.close()
        let raw = readWholeFile(path)
        let header = try FileHeader.parse(Array(raw[0..<FileLayout.headerSize])).get()
        let kek = try env.services.keyEncryptionKey(for: .app)
        let dataKey = try XCTUnwrap(try header.unwrap(with: kek), "the app KEK opens the file")
        return (path, header, dataKey, kek)
    }

    private func replaceHeader(_ path: String, with header: [UInt8]) {
        precondition(header.count == FileLayout.headerSize)
        var raw = readWholeFile(path)
        raw.replaceSubrange(0..<FileLayout.headerSize, with: header)
        writeWholeFile(path, raw)
    }

    /// Opening (Swift engine) and `info` both fail with ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR and a
    /// message naming the path and `what`.
    private func assertRejected(_ path: String, _ what: String, _ env: TestEnvironment,
                                file: StaticString = #filePath, line: UInt = #line) {
        do {
            let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            let got = try? f.readAll()
            try? f.close()
            XCTFail("\(what): the file opened (read \(got?.count ?? -1) bytes)", file: file, line: line)
        } catch {
            XCTAssertEqual(error.code, .badKeyOrCorruptData, error.message, file: file, line: line)
            XCTAssertEqual(error.errno, EIO, error.message, file: file, line: line)
            XCTAssertTrue(error.message.contains(path), "the message names the file: \(error.message)", file: file, line: line)
            XCTAssertTrue(error.message.contains(what), "the message says what is wrong (\(what)): \(error.message)", file: file, line: line)
        }
        do {
            _ = try SecureFileSystem.info(path)
            XCTFail("\(what): info accepted the header", file: file, line: line)
        } catch {
            XCTAssertEqual(error.code, .badKeyOrCorruptData, error.message, file: file, line: line)
        }
    }

    /// The attack of the review: flags 0x8001, re-wrapped so that the wrap authenticates.
    func testRewrappedHeaderWithNonZeroFlagsIsRejected() throws {
        let env = try TestEnvironment()
        for flags: UInt16 in [0x8001, 0x0001, 0x0100] {
            var (path, header, dataKey, kek) = try makeFile(env, "flags-\(flags)")
            header.flags = flags
            try header.wrap(dataKey: dataKey, under: kek)
            XCTAssertNotNil(try header.unwrap(with: kek), "the forged header's wrap authenticates")
            replaceHeader(path, with: header.encoded())
            assertRejected(path, "flags", env)
        }
    }

    /// Bytes 12..<16 are inside the wrap's AAD: forged with a valid wrap over them.
    func testRewrappedHeaderWithNonZeroReservedBytes12To16IsRejected() throws {
        let env = try TestEnvironment()
        for position in 12..<16 {
            let (path, header, dataKey, kek) = try makeFile(env, "reserved-\(position)")
            var prefix = header.authenticatedPrefix
            prefix[position] = 0x80
            let wrapped = try AESGCMContext(key: kek.key).sealWithRandomNonce(dataKey, aad: prefix)
            var bytes = prefix + wrapped
            bytes += [UInt8](repeating: 0, count: FileLayout.headerSize - bytes.count)
            replaceHeader(path, with: bytes)
            assertRejected(path, "reserved", env)
        }
    }

    /// Bytes 108..<128 are outside the wrap's AAD: in version 3 they are the pending-end record, a
    /// hint the parser bounds. A kind other than 0 and 1, or a non-zero reserved byte of a record,
    /// is refused; the size bytes of kind 0 (a cleared record) are not read; a record whose size is
    /// no end of this file changes nothing read (docs/FORMAT.md "Pending end").
    func testPendingEndRecordIsParsedDefensively() throws {
        let env = try TestEnvironment()
        for (position, value) in [(108, UInt8(2)), (108, 0xFF), (109, 1), (111, 1), (120, 1), (127, 1)] {
            let (path, header, _, _) = try makeFile(env, "tail-\(position)-\(value)")
            var bytes = header.encoded()
            bytes[108] = 1
            bytes[position] = value
            replaceHeader(path, with: bytes)
            assertRejected(path, "pending-end record", env)
        }
        for (name, record) in [("cleared with a size", [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x30, 0] + [UInt8](repeating: 0, count: 8)),
                               ("a size that is no end", [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0] + [UInt8](repeating: 0, count: 8)),
                               ("past the size limit", [1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF] + [UInt8](repeating: 0, count: 8))] {
            let (path, header, _, _) = try makeFile(env, "record-\(name)")
            var bytes = header.encoded()
            bytes.replaceSubrange(108..<128, with: record)
            replaceHeader(path, with: bytes)
            let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try f.readAll(), plaintext, name)
            XCTAssertEqual(try f.bytesAfterAuthenticatedEnd, 0, name)
            try f.close()
        }
    }

    /// Versions 1 and 2 have no record: bytes 108..<128 are reserved, zero, and only the parser protects them.
    func testNonZeroReservedBytes108To128AreRejectedInVersion2() throws {
        let env = try TestEnvironment()
        for position in [108, 117, 127] {
            let (path, header, _, _) = try makeFile(env, "tail-v2-\(position)")
            var bytes = header.encoded()
            bytes[5] = 2  // outside nothing: the version is in the wrap's AAD, so re-wrap as version 2
            var v2 = header
            v2.layout = FileLayout(chunkShift: header.layout.chunkShift, version: 2)
            let kek = try env.services.keyEncryptionKey(for: .app)
            let dataKey = try XCTUnwrap(try header.unwrap(with: kek))
            try v2.wrap(dataKey: dataKey, under: kek)
            bytes = v2.encoded()
            bytes[position] = 1
            replaceHeader(path, with: bytes)
            assertRejected(path, "reserved", env)
        }
    }

    /// Re-wrapping (sharing with a group and back) writes flags and reserved bytes as zero.
    func testRewrapKeepsReservedFieldsZero() throws {
        let env = try TestEnvironment()
        let (path, _, _, _) = try makeFile(env, "rewrap")
        for (from, to) in [(KeySelection.app, KeySelection.group("com.example.group")), (.group("com.example.group"), .app)] {
            try SecureFileSystem.rewrap(path, from: from, to: to, services: env.services)
            let raw = readWholeFile(path)
            XCTAssertEqual(Array(raw[10..<16]), [0, 0, 0, 0, 0, 0], "flags and reserved bytes 12..<16 after rewrap to \(to)")
            XCTAssertEqual(Array(raw[108..<128]), [UInt8](repeating: 0, count: 20), "reserved bytes 108..<128 after rewrap to \(to)")
            let f = try SecureFile.open(path, flags: O_RDONLY, key: to, services: env.services)
            XCTAssertEqual(try f.readAll(), plaintext)
            try f.close()
        }
    }

    /// The key class (byte 9) names the class of the KEK the data key is wrapped under (docs/FORMAT.md,
    /// "Key hierarchy"): a header re-wrapped by the KEK holder with another class is refused, and the
    /// same key bytes offered as a key of another class do not open the file.
    func testKeyClassMustBeTheClassOfTheKey() throws {
        let env = try TestEnvironment()
        let (path, header, dataKey, kek) = try makeFile(env, "class")
        var relabelled = header
        relabelled.keyClass = KeyEncryptionKey.KeyClass.group.rawValue
        relabelled.wrappedKey = try AESGCMContext(key: kek.key).sealWithRandomNonce(dataKey, aad: relabelled.authenticatedPrefix)
        replaceHeader(path, with: relabelled.encoded())
        XCTAssertNil(try relabelled.unwrap(with: kek), "the wrap authenticates, but the class is not the key's")
        do {
            let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            try? f.close()
            XCTFail("a header naming key class 2 opened with the app key")
        } catch {
            XCTAssertEqual(error.code, .badKeyOrCorruptData)
        }
        let sameKeyOtherClass = try KeyEncryptionKey(key: kek.key, keyClass: .cryptoBlock)
        XCTAssertNil(try header.unwrap(with: sameKeyOtherClass))
        XCTAssertNotNil(try header.unwrap(with: kek))
    }
}
