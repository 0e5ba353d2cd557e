#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// The committed test vectors in docs/test-vectors: files written by the engine under a published
/// key-encryption key. They are checked twice: through the engine, and through an independent
/// decoder written from docs/FORMAT.md alone (as another implementation would).
final class FormatVectorTests: XCTestCase {
    /// The published KEK of the vectors (never a real key).
    static let kekHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    static let sizes: [(name: String, size: Int)] = [("empty", 0), ("one-byte", 1), ("one-chunk", 4096), ("chunk-plus-one", 4097), ("multi-chunk", 10_000)]
    /// The version 5 vectors whose last chunk is held in tail records: a first write, then appends
    /// inside its short last chunk (one record each), all in one open (Tests/ACSecureVectorWriter).
    static let recordVectors: [(name: String, writes: [Int])] = [("records", [1000, 100, 200, 300]), ("multi-chunk-records", [10_000, 50, 60])]
    /// Version 5 vectors (the current format) at the top, the version 4, 3, 2 and 1 vectors (written
    /// before the next version existed, never regenerated) in `v4/`, `v3/`, `v2/` and `v1/`: all
    /// must keep decoding.
    static let vectors: [(name: String, size: Int, version: Int)] =
        sizes.map { ($0.name, $0.size, 5) } + recordVectors.map { ($0.name, $0.writes.reduce(0, +), 5) }
        + [4, 3, 2, 1].flatMap { version in sizes.map { ("v\(version)/" + $0.name, $0.size, version) } }

    static var directory: String {
        let file = "\(#filePath)"
        let tests = file[..<file.range(of: "/Tests/")!.lowerBound]
        return String(tests) + "/docs/test-vectors"
    }

    /// Plaintext of a vector: byte i is i mod 251.
    static func plaintext(_ size: Int) -> [UInt8] { (0..<size).map { UInt8($0 % 251) } }

    static func kek() throws -> KeyEncryptionKey {
        let bytes = stride(from: 0, to: kekHex.count, by: 2).map { i -> UInt8 in
            let s = kekHex.index(kekHex.startIndex, offsetBy: i)
            return UInt8(kekHex[s...kekHex.index(after: s)], radix: 16)!
        }
        return try KeyEncryptionKey(key: try SecureBytes(copying: bytes), keyClass: .cryptoBlock)
    }

    /// Tests/ACSecureVectorWriter (which regenerates the committed vectors) writes files that mean
    /// what the committed ones mean: same names and sizes, format version 5, the published plaintext
    /// under the published KEK, a `multi-chunk` whose chunks name three selectors, and record
    /// vectors whose ends are laid out as the committed ones' (same footer: one record per append).
    func testVectorWriterWritesWhatTheCommittedVectorsHold() throws {
        guard let writer = ChildProcess.builtExecutable("ACSecureVectorWriter") else {
            XCTFail("ACSecureVectorWriter is not built next to the tests: run `swift build --build-tests` first")
            return
        }
        let out = try TemporaryDirectory(prefix: "acsecure-vectors")
        let result = try ChildProcess.run(writer, [out.path], environment: [:])
        XCTAssertTrue(result.status.succeeded, "\(result.status): \(result.standardError)")
        let written = Self.sizes + Self.recordVectors.map { ($0.name, $0.writes.reduce(0, +)) }
        for v in written {
            let new = readWholeFile(out.path(v.name + ".acsf"))
            let committed = readWholeFile(Self.directory + "/\(v.name).acsf")
            XCTAssertEqual(new.count, committed.count, v.name)
            XCTAssertNotEqual(new, committed, "\(v.name): fresh nonces, so fresh bytes")
            XCTAssertEqual(new.suffix(8), committed.suffix(8), "\(v.name): the footer")
            XCTAssertEqual(try IndependentDecoder.decrypt(new, kek: Self.kek()), Self.plaintext(v.size), v.name)
            XCTAssertEqual(try SecureFileSystem.info(out.path(v.name + ".acsf")).formatVersion, 5, v.name)
        }
        XCTAssertEqual(FileLayout.currentVersion, 5)
        let multi = readWholeFile(out.path("multi-chunk.acsf"))
        let first = Int(FileLayout(version: 5).dataOffset)
        XCTAssertEqual(first, 8592)
        XCTAssertEqual(Set((0..<3).map { Array(multi[first + $0 * 4128..<first + $0 * 4128 + 4]) }).count, 3)
    }

    /// The record vectors end in records, one per append after the first write: their footers say
    /// so (n, base bytes, record bytes, 0), and the decoder finds exactly those records.
    func testRecordVectorsEndInOneRecordPerAppend() throws {
        for v in Self.recordVectors {
            let bytes = readWholeFile(Self.directory + "/\(v.name).acsf")
            let size = v.writes.reduce(0, +), appended = v.writes.dropFirst().reduce(0, +)
            let footer = (0..<4).map { IndependentDecoder.u16(bytes, bytes.count - 8 + 2 * $0) }
            XCTAssertEqual(footer, [v.writes.count - 1, size % 4096 - appended, appended, 0], v.name)
            XCTAssertGreaterThanOrEqual(footer[0], 2, v.name)
            var lengths: [Int] = []
            XCTAssertEqual(try IndependentDecoder.decrypt(bytes, key: Self.kek().key, records: { lengths.append($0) }), Self.plaintext(size), v.name)
            XCTAssertEqual(lengths, Array(v.writes.dropFirst()), v.name)
            let full = size / 4096, base = size % 4096 - appended
            XCTAssertEqual(bytes.count, 8592 + full * 4128 + (base > 0 ? base + 32 : 0) + lengths.map { 34 + $0 }.reduce(0, +) + 40, v.name)
        }
    }

    func testEngineReadsTheVectors() throws {
        for v in Self.vectors {
            let path = Self.directory + "/\(v.name).acsf"
            let f = try SecureFile.open(path, flags: O_RDONLY, services: FixedKeyProvider(kek: Self.kek()))
            XCTAssertEqual(try f.readAll(), Self.plaintext(v.size), v.name)
            try f.close()
            XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, UInt16(v.version), v.name)
        }
    }

    /// The v5, v4, v3 and v2 `multi-chunk` vectors were written in three opens: their chunks name three
    /// different selectors, so a decoder that derived one key per file would fail them.
    func testMultiChunkVectorUsesSeveralSelectors() throws {
        for (name, version) in [("multi-chunk", UInt16(5)), ("v4/multi-chunk", 4), ("v3/multi-chunk", 3), ("v2/multi-chunk", 2)] {
            let bytes = readWholeFile(Self.directory + "/\(name).acsf")
            let first = Int(FileLayout(version: version).dataOffset)
            let selectors = (0..<3).map { Array(bytes[first + $0 * 4128..<first + $0 * 4128 + 4]) }
            XCTAssertEqual(Set(selectors).count, 3, name)
        }
    }

    /// A version 2 file stays version 2 when a change needs no pending-end record (an overwrite, a
    /// one-chunk append), and becomes version 3 — its header rewritten, its chunks as they were —
    /// at its first change that does (an append of several chunks from a chunk-aligned end).
    func testVersion2FilesBecomeVersion3AtTheirFirstChangeThatRecordsAPendingEnd() throws {
        let env = try TestEnvironment()
        let path = env.path("v2.acsf")
        writeWholeFile(path, readWholeFile(Self.directory + "/v2/one-chunk.acsf"))
        let services = FixedKeyProvider(kek: try Self.kek())
        var expected = Self.plaintext(4096)
        let f = try SecureFile.open(path, flags: O_RDWR, services: services)
        try f.pwrite([1, 2, 3], at: 100)
        expected.replaceSubrange(100..<103, with: [1, 2, 3])
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, 2)
        let chunks = (0..<9000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try f.pwrite(chunks, at: 4096)
        expected += chunks
        try f.close()
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, 3)
        XCTAssertEqual(try IndependentDecoder.decrypt(readWholeFile(path), kek: Self.kek()), expected)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: services)
        XCTAssertEqual(try g.readAll(), expected)
        try g.close()
    }

    /// A version 1 file keeps its version when it is modified (its chunks stay sealed under the
    /// data key, as its format says), and becomes a current-version file only when it is emptied (a new
    /// generation with a new file ID and data key).
    func testVersion1FilesStayVersion1WhenModifiedAndBecomeCurrentWhenEmptied() throws {
        let env = try TestEnvironment()
        let path = env.path("v1.acsf")
        writeWholeFile(path, readWholeFile(Self.directory + "/v1/multi-chunk.acsf"))
        let services = FixedKeyProvider(kek: try Self.kek())
        var expected = Self.plaintext(10_000)
        let f = try SecureFile.open(path, flags: O_RDWR, services: services)
        try f.pwrite([1, 2, 3], at: 5000)
        expected.replaceSubrange(5000..<5003, with: [1, 2, 3])
        try f.pwrite([7], at: 20_000)
        expected += [UInt8](repeating: 0, count: 10_000) + [7]
        try f.close()
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, 1)
        XCTAssertEqual(try IndependentDecoder.decrypt(readWholeFile(path), kek: Self.kek()), expected)
        let g = try SecureFile.open(path, flags: O_RDWR | O_TRUNC, services: services)
        try g.pwrite([9, 9], at: 0)
        try g.close()
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, FileLayout.currentVersion)
        XCTAssertEqual(try IndependentDecoder.decrypt(readWholeFile(path), kek: Self.kek()), [9, 9])
    }

    /// A version 3 file (no tail copies: its chunks start after the header) keeps its version when
    /// it is modified and synced, and becomes a current-version file when emptied (a new generation).
    func testVersion3FilesStayVersion3WhenModifiedAndBecomeCurrentWhenEmptied() throws {
        let env = try TestEnvironment()
        let path = env.path("v3")
        writeWholeFile(path, readWholeFile(Self.directory + "/v3/multi-chunk.acsf"))
        let services = FixedKeyProvider(kek: try Self.kek())
        let f = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: services)
        try f.write([UInt8](repeating: 7, count: 5000))
        try f.sync()
        try f.truncate(to: 12_345)
        try f.sync()
        try f.close()
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, 3)
        XCTAssertEqual(readWholeFile(path).count, Int(FileLayout(version: 3).physicalSize(forPlaintextSize: 12_345)))
        let again = try SecureFile.open(path, flags: O_RDWR, services: services)
        XCTAssertEqual(try again.readAll(), Self.plaintext(10_000) + Array(repeating: 7, count: 2_345))
        try again.truncate(to: 0)
        try again.write([1, 2, 3])
        try again.close()
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, FileLayout.currentVersion)
        XCTAssertEqual(try IndependentDecoder.decrypt(readWholeFile(path), kek: Self.kek()), [1, 2, 3])
    }

    /// A version 4 file keeps opening, and stays version 4 when appended to — appends inside its
    /// last chunk (which a version 5 file would hold as records), appends that fill it and go on,
    /// in one open and in another — and reads back what was written, through the engine and the
    /// decoder, at the length the version 4 layout gives.
    func testVersion4FilesStayVersion4WhenAppendedTo() throws {
        let env = try TestEnvironment()
        let services = FixedKeyProvider(kek: try Self.kek())
        for v in Self.sizes {
            let path = env.path("v4-" + v.name)
            writeWholeFile(path, readWholeFile(Self.directory + "/v4/\(v.name).acsf"))
            var expected = Self.plaintext(v.size)
            let appends = [[100, 200, 300], [5000, 7], [1]]
            for (round, counts) in appends.enumerated() {
                let f = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: services)
                XCTAssertEqual(try f.readAll(), expected, "\(v.name), open \(round)")
                for count in counts {
                    let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ count) }
                    XCTAssertEqual(try bytes.withUnsafeBytes { try f.write($0) }, count)
                    expected += bytes
                }
                try f.close()
                XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, 4, "\(v.name), open \(round)")
                let file = readWholeFile(path)
                XCTAssertEqual(file.count, Int(FileLayout(version: 4).physicalSize(forPlaintextSize: Int64(expected.count))), v.name)
                XCTAssertEqual(try IndependentDecoder.decrypt(file, kek: Self.kek()), expected, "\(v.name), open \(round)")
            }
            let g = try SecureFile.open(path, flags: O_RDONLY, services: services)
            XCTAssertEqual(try g.readAll(), expected, v.name)
            XCTAssertEqual(try g.bytesAfterAuthenticatedEnd, 0, v.name)
            try g.close()
        }
    }

    /// A version this build does not know fails with a clear version error.
    func testUnknownVersionIsRefusedByName() throws {
        let env = try TestEnvironment()
        let path = env.path("v6.acsf")
        var bytes = readWholeFile(Self.directory + "/one-byte.acsf")
        bytes[5] = 6
        writeWholeFile(path, bytes)
        XCTAssertThrowsError(try SecureFile.open(path, flags: O_RDONLY, services: FixedKeyProvider(kek: Self.kek()))) { error in
            let e = error as? SecureFileError
            XCTAssertEqual(e?.code, .badKeyOrCorruptData)
            XCTAssertTrue(e?.message.contains("unsupported secure file version 6") ?? false, "\(String(describing: e))")
        }
    }

    /// A secure file holds at most 2^44 bytes: a physical length that implies more is not a valid
    /// length (docs/FORMAT.md, "Size limit"), for every chunk size and version.
    func testLengthsBeyondTheSizeLimitAreInvalid() {
        for shift in FileLayout.chunkShiftRange {
            for version in FileLayout.supportedVersions where version < 4 || shift <= FileLayout.largestTailCopyChunkShift {
                let layout = FileLayout(chunkShift: shift, version: version)
                let largest = layout.physicalSize(forPlaintextSize: SecureFile.maximumFileSize)
                XCTAssertEqual(layout.plaintextSize(forPhysicalSize: largest), SecureFile.maximumFileSize)
                XCTAssertNil(layout.plaintextSize(forPhysicalSize: layout.physicalSize(forPlaintextSize: SecureFile.maximumFileSize + 1)),
                             "shift \(shift) version \(version)")
                XCTAssertNil(layout.plaintextSize(forPhysicalSize: Int64.max), "shift \(shift) version \(version)")
            }
        }
        // Version 5 with records: the footer gives the size, and past the limit it is no valid end.
        for shift in FileLayout.chunkShiftRange where shift <= FileLayout.largestTailCopyChunkShift {
            let layout = FileLayout(chunkShift: shift, version: 5)
            let chunk = Int64(layout.chunkSize), shape = TailShape(records: 2, recordBytes: 3)
            for (size, valid) in [(SecureFile.maximumFileSize - 5, true), (SecureFile.maximumFileSize + chunk - 5, false)] {
                let footer = [2, Int(size % chunk) - 3, 3, 0].flatMap { IndependentDecoder.be($0, 2) }
                let physical = layout.physicalSize(forPlaintextSize: size, shape: shape)
                let got = footer.withUnsafeBytes { layout.plaintextSize(forPhysicalSize: physical, footer: $0.baseAddress!) }
                XCTAssertEqual(got?.size, valid ? size : nil, "shift \(shift) size \(size)")
                XCTAssertEqual(got?.shape, valid ? shape : nil, "shift \(shift) size \(size)")
            }
        }
    }

    func testIndependentDecoderReadsTheVectors() throws {
        for v in Self.vectors {
            let bytes = readWholeFile(Self.directory + "/\(v.name).acsf")
            XCTAssertEqual(try IndependentDecoder.decrypt(bytes, kek: Self.kek()), Self.plaintext(v.size), v.name)
        }
    }

    /// Every single-bit flip of the `one-byte` vectors (of every version) and of `records` (version
    /// 5: a base chunk, three records, the footer) is rejected by the decoder, except where the
    /// format says a flip changes nothing read (below).
    func testIndependentDecoderRejectsEverySingleBitFlipOfASmallVector() throws {
        let kek = try Self.kek()
        for name in ["one-byte", "records", "v4/one-byte", "v3/one-byte", "v2/one-byte", "v1/one-byte"] {
            let bytes = readWholeFile(Self.directory + "/\(name).acsf")
            let plaintext = try IndependentDecoder.decrypt(bytes, kek: kek)
            let version = IndependentDecoder.u16(bytes, 4)
            // The tail-copy slots (versions 4 and 5): from 128 to chunk 0, two slots of a 64-byte
            // descriptor, a chunk's room (2^s + 32) and a trailer's (32 bytes; 40 in version 5).
            // Never synced, these files hold in slot 0 only the copy their creation wrote: its
            // descriptor and the empty file's trailer.
            let trailerSize = version >= 5 ? 40 : 32
            let dataOffset = version >= 4 ? 128 + 2 * (64 + 4096 + 32 + trailerSize) : 128
            XCTAssertEqual(dataOffset, Int(FileLayout(version: UInt16(version)).dataOffset), name)
            let slot0Written = 128 + 64 + trailerSize
            for bit in 0..<(bytes.count * 8) {
                var b = bytes
                b[bit / 8] ^= 1 << (bit % 8)
                // The tail copies are a hint: a damaged copy is only ever rejected, never taken, and
                // the decoder does not read them. The engine's side of it is checked for the written
                // part of slot 0 (its descriptor and trailer copy).
                if (128..<dataOffset).contains(bit / 8) {
                    if bit / 8 >= slot0Written && bit % 64 != 0 { continue }  // slot bytes never written: a sample
                    XCTAssertEqual(try IndependentDecoder.decrypt(b, kek: kek), plaintext, "\(name): bit \(bit) (tail copy)")
                    if bit / 8 < slot0Written, bit % 4 == 0 { try assertEngineReads(b, plaintext, kek: kek, "\(name): bit \(bit)") }
                    continue
                }
                // The pending-end record (from version 3, bytes 108..<128) is a hint, not authenticated:
                // a flip that keeps it well-formed must change nothing read (docs/FORMAT.md "Pending end").
                if version >= 3, (108..<128).contains(bit / 8), let decoded = try? IndependentDecoder.decrypt(b, kek: kek) {
                    XCTAssertEqual(decoded, plaintext, "\(name): bit \(bit) (pending-end record)")
                    try assertEngineReads(b, plaintext, kek: kek, "\(name): bit \(bit)")
                    continue
                }
                XCTAssertThrowsError(try IndependentDecoder.decrypt(b, kek: kek), "\(name): bit \(bit)")
            }
        }
    }

    /// The decoder rejects version 5 ends that do not fit their footer: footers that name other
    /// records or bytes under a trailer sealed for them (as only the key holder could: so only
    /// the footer's meaning is wrong), and files cut or extended.
    func testIndependentDecoderRejectsVersion5EndsThatDoNotFitTheirFooter() throws {
        let kek = try Self.kek()
        let records = readWholeFile(Self.directory + "/records.acsf")
        let oneByte = readWholeFile(Self.directory + "/one-byte.acsf")
        for bytes in [records, oneByte] {
            XCTAssertThrowsError(try IndependentDecoder.decrypt(Array(bytes.dropLast()), kek: kek))
            XCTAssertThrowsError(try IndependentDecoder.decrypt(Array(bytes.dropLast(40)), kek: kek))
            XCTAssertThrowsError(try IndependentDecoder.decrypt(bytes + [0], kek: kek))
            XCTAssertThrowsError(try IndependentDecoder.decrypt(bytes + Array(bytes.suffix(40)), kek: kek))
        }
        /// `file` with its trailer sealed again for `size` and `footer`.
        func resealed(_ file: [UInt8], size: Int, footer: [UInt8]) throws -> [UInt8] {
            var f = file
            let t = f.count - 40
            let dataKey = try IndependentDecoder.dataKey(Array(f[0..<128]), kek: kek.key)
            let key = try IndependentDecoder.chunkKey(dataKey, selector: Array(f[t..<t + 4]))
            let aad = Array("ACSF end".utf8) + Array(f[16..<32]) + IndependentDecoder.be(size, 8) + footer
            var tag = [UInt8](repeating: 0, count: 16)
            let nonce = Array(f[t + 4..<t + 16])
            try nonce.withUnsafeBytes { n in try aad.withUnsafeBytes { a in try tag.withUnsafeMutableBytes { g in
                try AESGCMContext(key: key).seal(nonce: n.baseAddress!, aad: a, plaintext: UnsafeRawBufferPointer(start: nil, count: 0),
                                                 ciphertext: g.baseAddress!, tag: g.baseAddress!)
            } } }
            f.replaceSubrange(t + 16..<t + 40, with: tag + footer)
            return f
        }
        // The forger's control: the footers the files have, sealed again, still decode.
        XCTAssertEqual(try IndependentDecoder.decrypt(resealed(oneByte, size: 1, footer: [0, 0, 0, 1, 0, 0, 0, 0]), kek: kek), Self.plaintext(1))
        XCTAssertEqual(try IndependentDecoder.decrypt(resealed(records, size: 1600, footer: [0, 3, 3, 232, 2, 88, 0, 0]), kek: kek), Self.plaintext(1600))
        // one-byte: n = 0, so the base bytes must be size mod 2^s and the record bytes 0.
        for footer: [UInt8] in [[0, 0, 0, 2, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0, 0, 1],
                                [0, 1, 0, 0, 0, 1, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0]] {
            XCTAssertThrowsError(try IndependentDecoder.decrypt(resealed(oneByte, size: 1, footer: footer), kek: kek), "\(footer)")
        }
        // records (base 1000, records of 100, 200, 300): other counts, splits, sizes, a reserved byte.
        for (size, footer): (Int, [UInt8]) in [(1600, [0, 2, 3, 232, 2, 88, 0, 0]), (1600, [0, 4, 3, 232, 2, 88, 0, 0]),
                                              (1600, [0, 3, 3, 132, 2, 188, 0, 0]), (1600, [0, 3, 3, 232, 2, 88, 0, 1]),
                                              (1600, [0, 0, 6, 64, 0, 0, 0, 0]), (1500, [0, 3, 3, 232, 1, 244, 0, 0]),
                                              (1600, [0, 3, 3, 232, 2, 88, 1, 0])] {
            XCTAssertThrowsError(try IndependentDecoder.decrypt(resealed(records, size: size, footer: footer), kek: kek), "\(footer)")
        }
        // The last record dropped: the old trailer does not authenticate the shorter end, a footer
        // that fits it does, sealed again (a key holder's truncation: a valid file of 1300 bytes).
        let last = records.count - 40 - (34 + 300)
        let cut = Array(records[0..<last]) + Array(records.suffix(40))
        XCTAssertThrowsError(try IndependentDecoder.decrypt(cut, kek: kek))
        XCTAssertThrowsError(try IndependentDecoder.decrypt(resealed(cut, size: 1600, footer: [0, 2, 3, 232, 1, 44, 0, 0]), kek: kek))
        XCTAssertEqual(try IndependentDecoder.decrypt(resealed(cut, size: 1300, footer: [0, 2, 3, 232, 1, 44, 0, 0]), kek: kek), Self.plaintext(1300))
        // A version 4 file whose header says 5: the wrap authenticates the version, so it is refused.
        var v4 = readWholeFile(Self.directory + "/v4/one-byte.acsf")
        v4[5] = 5
        XCTAssertThrowsError(try IndependentDecoder.decrypt(v4, kek: kek))
    }
}

/// The engine agrees with the decoder: `bytes`, as a file, read `plaintext` whole, nothing after its end.
private func assertEngineReads(_ bytes: [UInt8], _ plaintext: [UInt8], kek: KeyEncryptionKey, _ what: String,
                               file: StaticString = #filePath, line: UInt = #line) throws {
    let env = try TestEnvironment()
    writeWholeFile(env.path("flipped"), bytes)
    let f = try SecureFile.open(env.path("flipped"), flags: O_RDONLY, services: FixedKeyProvider(kek: kek))
    XCTAssertEqual(try f.readAll(), plaintext, "\(what), through the engine", file: file, line: line)
    XCTAssertEqual(try f.bytesAfterAuthenticatedEnd, 0, what, file: file, line: line)
    try f.close()
}

/// A decoder written from docs/FORMAT.md (and, for version 5, from its description: a trailer
/// footer, tail records), sharing nothing with the engine but AES-256-GCM and HKDF.
enum IndependentDecoder {
    struct Invalid: Error { var why: String }

    static func u16(_ b: [UInt8], _ at: Int) -> Int { Int(b[at]) << 8 | Int(b[at + 1]) }
    static func u64(_ b: [UInt8]) -> [UInt8] { b }
    /// `v` as `count` big-endian bytes.
    static func be(_ v: Int, _ count: Int) -> [UInt8] { (0..<count).reversed().map { UInt8(truncatingIfNeeded: UInt64(v) >> (8 * UInt64($0))) } }

    static func gcmOpen(_ key: SecureBytes, nonce: [UInt8], aad: [UInt8], ciphertext: [UInt8], tag: [UInt8], _ what: String = "") throws -> [UInt8] {
        let ctx = try AESGCMContext(key: key)
        var out = [UInt8](repeating: 0, count: ciphertext.count)
        let ok = nonce.withUnsafeBytes { n in aad.withUnsafeBytes { a in ciphertext.withUnsafeBytes { c in tag.withUnsafeBytes { t in
            out.withUnsafeMutableBytes { o in
                ctx.open(nonce: n.baseAddress!, aad: a, ciphertext: c, tag: t.baseAddress!, plaintext: o.baseAddress ?? UnsafeMutableRawPointer(mutating: t.baseAddress!))
            } } } } }
        guard ok else { throw Invalid(why: "authentication failed \(what)") }
        return out
    }

    static func decrypt(_ file: [UInt8], kek: KeyEncryptionKey) throws -> [UInt8] { try decrypt(file, key: kek.key) }

    /// The data key of `header` (128 bytes): unwrapped under the KEK with the header's first 48 bytes as AAD.
    static func dataKey(_ h: [UInt8], kek: SecureBytes) throws -> SecureBytes {
        try SecureBytes(copying: try gcmOpen(kek, nonce: Array(h[48..<60]), aad: Array(h[0..<48]),
                                             ciphertext: Array(h[60..<92]), tag: Array(h[92..<108]), "wrap"))
    }

    /// K_σ = AES-256(data key, "ACSFkey2" ‖ σ ‖ u32 0) ‖ AES-256(data key, "ACSFkey2" ‖ σ ‖ u32 1).
    static func chunkKey(_ dataKey: SecureBytes, selector: [UInt8]) throws -> SecureBytes {
        let blocks: [UInt8] = (0..<2).flatMap { (j: UInt8) -> [UInt8] in Array("ACSFkey2".utf8) + selector + [0, 0, 0, j] }
        var k = [UInt8](repeating: 0, count: 32)
        try blocks.withUnsafeBytes { b in try k.withUnsafeMutableBytes { try AESBlockCipher(key: dataKey).encryptBlocks(b, into: $0.baseAddress!) } }
        return try SecureBytes(copying: k)
    }

    /// `keyClass`, when given, is the class of `key` (1 app, 2 group, 3 crypto block): the header must name it.
    /// `records`, when given, is told the length of every tail record read (version 5), in order.
    static func decrypt(_ file: [UInt8], key kek: SecureBytes, keyClass: UInt8? = nil, ignoringPendingEnd: Bool = false,
                        records: ((Int) -> Void)? = nil) throws -> [UInt8] {
        guard file.count >= 128 else { throw Invalid(why: "short") }
        let h = Array(file[0..<128])
        let version = u16(h, 4)
        guard h[0..<4].elementsEqual("ACSF".utf8), (1...5).contains(version), u16(h, 6) == 128 else { throw Invalid(why: "header") }
        // From version 2: a 4-byte key selector before every chunk's and the trailer's nonce.
        let sel = version >= 2 ? 4 : 0
        let overhead = sel + 12 + 16
        // Version 5: the trailer ends in an 8-byte footer (u16 records, u16 base bytes, u16 record
        // bytes, u16 zero), which its AAD holds too.
        let trailerSize = overhead + (version >= 5 ? 8 : 0)
        guard file.count >= 128 + trailerSize else { throw Invalid(why: "short") }
        let shift = Int(h[8])
        guard (9...(version >= 4 ? 16 : 20)).contains(shift), (1...3).contains(h[9]), h[10..<16].allSatisfy({ $0 == 0 }) else { throw Invalid(why: "fields") }
        let chunk = 1 << shift, physical = chunk + overhead
        // Versions 4 and 5: two tail-copy slots (a 64-byte descriptor, a chunk's and a trailer's room
        // each) between the header and chunk 0. A decoder of the file as written ignores them.
        let first = 128 + (version >= 4 ? 2 * (64 + physical + trailerSize) : 0)
        // Bytes 108..<128: zero, or from version 3 a pending-end record (kind 1, then a u64 size at 112).
        // Kind 0 is no record (its other bytes are not read); kind 1 has zero reserved bytes.
        var pendingEnd: Int?
        if version >= 3 {
            guard h[108] <= 1, h[108] == 0 || (h[109..<112].allSatisfy({ $0 == 0 }) && h[120..<128].allSatisfy({ $0 == 0 })) else {
                throw Invalid(why: "pending-end record")
            }
            let size = h[112..<120].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            if h[108] == 1, size <= 1 << 44 { pendingEnd = Int(size) }
        } else if !h[108..<128].allSatisfy({ $0 == 0 }) {
            throw Invalid(why: "fields")
        }
        guard keyClass == nil || keyClass == h[9] else { throw Invalid(why: "key class \(h[9])") }
        let fileID = Array(h[16..<32])
        let fingerprint = try HKDF.sha256(key: kek, salt: "ACSF v1", info: "key fingerprint", outputCount: 16)
        guard fingerprint.withUnsafeBytes({ Array($0) }) == Array(h[32..<48]) else { throw Invalid(why: "fingerprint") }
        let dataKey = try dataKey(h, kek: kek)
        // The key of a chunk, record or trailer starting at `at`: the data key (version 1), or K_σ
        // of the selector σ its first 4 bytes hold.
        func key(at: Int) throws -> SecureBytes {
            guard sel > 0 else { return dataKey }
            return try chunkKey(dataKey, selector: Array(file[at..<at + 4]))
        }

        // A pending end whose trailer authenticates at its place, with bytes after it, is the end
        // (the end of a file of that size laid out with no records).
        if let x = pendingEnd, !ignoringPendingEnd {
            let n = x == 0 ? 0 : (x - 1) / chunk + 1
            let end = first + x + n * overhead + trailerSize
            if end < file.count, (try? decrypt(Array(file[0..<end]), key: kek, keyClass: keyClass, ignoringPendingEnd: true)) != nil {
                return try decrypt(Array(file[0..<end]), key: kek, keyClass: keyClass, ignoringPendingEnd: true, records: records)
            }
        }
        guard file.count >= first + trailerSize else { throw Invalid(why: "short") }
        let t = file.count - trailerSize
        var plaintext: [UInt8] = []
        // Chunk i (of `length` plaintext bytes) at first + i·(2^s + o), AAD = file ID ‖ u64 i.
        func openChunk(_ i: Int, length: Int) throws {
            let start = first + i * physical, n = start + sel
            plaintext += try gcmOpen(key(at: start), nonce: Array(file[n..<n + 12]), aad: fileID + be(i, 8),
                                     ciphertext: Array(file[n + 12..<n + 12 + length]),
                                     tag: Array(file[n + 12 + length..<n + 28 + length]), "chunk \(i)")
        }
        let footer = version >= 5 ? Array(file[file.count - 8..<file.count]) : []
        let recordCount = version >= 5 ? u16(footer, 0) : 0
        if version >= 5, u16(footer, 6) != 0 { throw Invalid(why: "footer") }
        if recordCount == 0 {
            // No records: full chunks, then a last chunk of 1…2^s bytes if the length leaves one.
            let body = t - first
            let full = body / physical, rem = body % physical
            guard rem == 0 || rem > overhead else { throw Invalid(why: "length") }
            for i in 0..<full { try openChunk(i, length: chunk) }
            if rem > 0 { try openChunk(full, length: rem - overhead) }
            // Version 5: the footer says the same (base bytes = size mod 2^s, no record bytes).
            if version >= 5, u16(footer, 2) != plaintext.count % chunk || u16(footer, 4) != 0 { throw Invalid(why: "footer") }
        } else {
            // Records (version 5): after the last full chunk, a base chunk of `base` bytes (none when
            // 0), then the records, which hold the rest of the last chunk: base + record bytes bytes,
            // less than a chunk, every record at least one byte.
            let base = u16(footer, 2), recordBytes = u16(footer, 4)
            guard recordBytes >= recordCount, base + recordBytes < chunk else { throw Invalid(why: "footer") }
            let region = (base > 0 ? base + overhead : 0) + recordBytes + recordCount * 34
            let body = t - first - region
            guard body >= 0, body % physical == 0 else { throw Invalid(why: "length") }
            let full = body / physical
            for i in 0..<full { try openChunk(i, length: chunk) }
            var at = first + full * physical
            if base > 0 {
                try openChunk(full, length: base)
                at += base + overhead
            }
            // record = σ (4) ‖ nonce (12) ‖ u16 length ‖ ciphertext ‖ tag (16), AAD = "ACSF rec" ‖
            // file ID ‖ u64 chunk index ‖ u32 offset of its first byte in the chunk ‖ u32 length.
            var offset = base
            for r in 0..<recordCount {
                guard t - at >= 34 else { throw Invalid(why: "record \(r)") }
                let length = u16(file, at + 16)
                guard length > 0, offset + length <= base + recordBytes, at + 34 + length <= t else { throw Invalid(why: "record \(r) length") }
                let aad = Array("ACSF rec".utf8) + fileID + be(full, 8) + be(offset, 4) + be(length, 4)
                plaintext += try gcmOpen(key(at: at), nonce: Array(file[at + 4..<at + 16]), aad: aad,
                                         ciphertext: Array(file[at + 18..<at + 18 + length]),
                                         tag: Array(file[at + 18 + length..<at + 34 + length]), "record \(r)")
                records?(length)
                at += 34 + length
                offset += length
            }
            guard offset == base + recordBytes, at == t else { throw Invalid(why: "records") }
        }
        guard plaintext.count <= 1 << 44 else { throw Invalid(why: "size") }
        // Trailer: σ ‖ nonce ‖ tag [‖ footer], AAD = "ACSF end" ‖ file ID ‖ u64 size [‖ footer].
        let tn = t + sel
        let trailerAAD = Array("ACSF end".utf8) + fileID + be(plaintext.count, 8) + footer
        _ = try gcmOpen(key(at: t), nonce: Array(file[tn..<tn + 12]), aad: trailerAAD, ciphertext: [], tag: Array(file[tn + 12..<tn + 28]), "trailer")
        return plaintext
    }
}
