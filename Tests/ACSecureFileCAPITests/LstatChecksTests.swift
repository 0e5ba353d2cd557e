#if canImport(Glibc)
import Glibc
#endif
import XCTest
import CACSecureFile
import ACSecureFileCAPI
import ACSecureFileCore

/// ACSecureLstat checks what ACSecureFile.h says it checks, and nothing more: a well-formed header
/// and a length that layout can have. Nothing is authenticated, so a header altered into another
/// well-formed one still gets a size (computed for what it now says), while ACSecureFileOpen refuses it.
final class LstatChecksTests: CAPITestCase {
    override class var appID: String { "capi-lstat-checks" }

    private let plaintextSize = 3 * 4096 + 1000

    /// A fresh secure file of `plaintextSize` bytes (format version 3, 4 KiB chunks); its path.
    private func makeFile(_ name: String) throws -> String {
        let path = directory + "/" + name
        let fd = ACSecureFile_openWithMode(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
        let bytes = [UInt8](repeating: 0x5a, count: plaintextSize)
        XCTAssertEqual(bytes.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, $0.count) }, plaintextSize)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        return path
    }

    /// The header byte at `offset`.
    private func peek(_ path: String, _ offset: off_t) -> UInt8 {
        let fd = Glibc.open(path, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var v: UInt8 = 0
        XCTAssertEqual(pread(fd, &v, 1, offset), 1)
        close(fd)
        return v
    }

    /// Sets the header byte at `offset` with a plain pwrite (what tampering does).
    private func poke(_ path: String, _ offset: off_t, _ value: UInt8) {
        let fd = Glibc.open(path, O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var v = value
        XCTAssertEqual(pwrite(fd, &v, 1, offset), 1)
        close(fd)
    }

    private func physicalSize(_ path: String) -> Int64 {
        var st = stat()
        XCTAssertEqual(Glibc.lstat(path, &st), 0)
        return Int64(st.st_size)
    }

    /// ACSecureLstat's result: the size, or nil with errno EIO.
    private func lstatSize(_ path: String, file: StaticString = #filePath, line: UInt = #line) -> Int64? {
        var st = stat()
        errno = 0
        if ACSecureLstat(path, &st) == 0 { return Int64(st.st_size) }
        XCTAssertEqual(errno, EIO, "ACSecureLstat fails only with EIO on a regular file", file: file, line: line)
        return nil
    }

    private func opens(_ path: String) -> Bool {
        let fd = ACSecureFile_openWithMode(path, O_RDONLY, 0)
        if fd >= 0 { ACSecureFileClose(fd) }
        return fd >= 0
    }

    func testAnUntouchedFileGetsItsPlaintextSize() throws {
        let path = try makeFile("plain-case")
        XCTAssertEqual(lstatSize(path), Int64(plaintextSize))
        XCTAssertTrue(opens(path))
    }

    /// Version 1 and every chunk shift from 9 to 20 are well-formed: the size is what that layout
    /// gives for the file's length (or EIO where no file of that layout has this length).
    func testAnotherWellFormedVersionOrChunkShiftGetsTheSizeOfThatLayout() throws {
        var sized = 0
        for version in FileLayout.supportedVersions {
            for shift in FileLayout.chunkShiftRange {
                if version == FileLayout.currentVersion && shift == FileLayout.defaultChunkShift { continue }
                // Version 4 takes chunks of at most 2^16 bytes: a larger shift is a malformed header.
                if version >= 4 && shift > FileLayout.largestTailCopyChunkShift { continue }
                let path = try makeFile("layout-\(version)-\(shift)")
                poke(path, 5, UInt8(version))
                poke(path, 8, shift)
                let layout = FileLayout(chunkShift: shift, version: version)
                let expected = (layout.hasTailRecords ? sizeFromFooter(path, layout) : nil) ?? layout.plaintextSize(forPhysicalSize: physicalSize(path))
                XCTAssertEqual(lstatSize(path), expected, "version \(version), chunk shift \(shift)")
                if expected != nil { sized += 1 }
                XCTAssertFalse(opens(path), "ACSecureFileOpen authenticates the header (version \(version), shift \(shift))")
            }
        }
        XCTAssertGreaterThan(sized, 0, "some altered headers still get a size")
    }

    /// The key class (1, 2 or 3) and the key fingerprint are not checked: the size is unchanged.
    func testAnotherKeyClassOrFingerprintKeepsTheSize() throws {
        for keyClass: UInt8 in [2, 3] {
            let path = try makeFile("class-\(keyClass)")
            poke(path, 9, keyClass)
            XCTAssertEqual(lstatSize(path), Int64(plaintextSize), "key class \(keyClass)")
            XCTAssertFalse(opens(path), "key class \(keyClass)")
        }
        // Complemented, not set: the fingerprint is random per store, and a fixed value was already
        // there once in 256 runs (the file then opened and the test failed).
        let path = try makeFile("fingerprint")
        poke(path, 40, ~peek(path, 40))
        XCTAssertEqual(lstatSize(path), Int64(plaintextSize))
        XCTAssertFalse(opens(path))
    }

    /// A cut at a chunk boundary leaves a valid length: a smaller size, no error (version 5: the
    /// cut leaves ciphertext where the footer was, and the length is read as an end with no records).
    func testACutAtAChunkBoundaryGetsTheSmallerSize() throws {
        let path = try makeFile("cut")
        XCTAssertEqual(truncate(path, off_t(physicalSize(path) - Int64(4096 + 32))), 0)
        XCTAssertEqual(lstatSize(path), Int64(plaintextSize - 4096), "version 5")
        let v4 = try makeFile("cut-v4")
        poke(v4, 5, 4)
        let layout = FileLayout(chunkShift: FileLayout.defaultChunkShift, version: 4)
        XCTAssertEqual(truncate(v4, off_t(physicalSize(v4) - Int64(4096 + 32))), 0)
        XCTAssertEqual(lstatSize(v4), layout.plaintextSize(forPhysicalSize: physicalSize(v4)), "version 4")
    }

    /// What a version 5 file's footer (its last 8 bytes) says its size is, for `layout`.
    private func sizeFromFooter(_ path: String, _ layout: FileLayout) -> Int64? {
        let fd = Glibc.open(path, O_RDONLY)
        defer { Glibc.close(fd) }
        var footer = [UInt8](repeating: 0, count: TailShape.footerSize)
        let physical = physicalSize(path)
        guard pread(fd, &footer, footer.count, off_t(physical - Int64(footer.count))) == footer.count else { return nil }
        return footer.withUnsafeBytes { layout.plaintextSize(forPhysicalSize: physical, footer: $0.baseAddress!)?.size }
    }

    /// What is checked: magic, version, header size, chunk shift, key class, flags, reserved bytes, the
    /// pending-end record's kind (version 3: bytes 108..<128 are that record), length.
    func testMalformedHeadersAndImpossibleLengthsAreEIO() throws {
        let cases: [(String, off_t, UInt8)] = [
            ("magic", 0, 0x00), ("version 6", 5, 6), ("version 0", 5, 0), ("header size", 7, 0x81),
            ("chunk shift 8", 8, 8), ("chunk shift 21", 8, 21), ("key class 0", 9, 0), ("key class 4", 9, 4),
            ("flags", 11, 1), ("reserved byte 12", 12, 1), ("pending-end record kind 2", 108, 2),
        ]
        for (name, offset, value) in cases {
            let path = try makeFile("bad-\(offset)-\(value)")
            poke(path, offset, value)
            XCTAssertNil(lstatSize(path), name)
        }
        let path = try makeFile("length")
        XCTAssertEqual(truncate(path, off_t(128 + 10)), 0)
        XCTAssertNil(lstatSize(path), "a length no file has")
        let empty = directory + "/empty"
        XCTAssertEqual(Glibc.close(Glibc.open(empty, O_WRONLY | O_CREAT, 0o600)), 0)
        XCTAssertEqual(lstatSize(empty), 0, "an empty regular file")
    }
}
