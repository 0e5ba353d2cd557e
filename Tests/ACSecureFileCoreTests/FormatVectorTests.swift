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
    /// Version 4 vectors (the current format) at the top, the version 3, 2 and 1 vectors (written
    /// before the next version existed, never regenerated) in `v3/`, `v2/` and `v1/`: all must keep
    /// decoding.
    static let vectors: [(name: String, size: Int, version: Int)] =
        sizes.map { ($0.name, $0.size, 4) } + sizes.map { ("v3/" + $0.name, $0.size, 3) }
        + sizes.map { ("v2/" + $0.name, $0.size, 2) } + sizes.map { ("v1/" + $0.name, $0.size, 1) }

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
    /// what the committed ones mean: same names and sizes, format version 4, the published plaintext
    /// under the published KEK, and a `multi-chunk` whose chunks name three selectors.
    func testVectorWriterWritesWhatTheCommittedVectorsHold() throws {
        guard let writer = ChildProcess.builtExecutable("ACSecureVectorWriter") else {
            XCTFail("ACSecureVectorWriter is not built next to the tests: run `swift build --build-tests` first")
            return
        }
        let out = try TemporaryDirectory(prefix: "acsecure-vectors")
        let result = try ChildProcess.run(writer, [out.path], environment: [:])
        XCTAssertTrue(result.status.succeeded, "\(result.status): \(result.standardError)")
        for v in Self.sizes {
            let written = readWholeFile(out.path(v.name + ".acsf"))
            let committed = readWholeFile(Self.directory + "/\(v.name).acsf")
            XCTAssertEqual(written.count, committed.count, v.name)
            XCTAssertNotEqual(written, committed, "\(v.name): fresh nonces, so fresh bytes")
            XCTAssertEqual(try IndependentDecoder.decrypt(written, kek: Self.kek()), Self.plaintext(v.size), v.name)
            XCTAssertEqual(try SecureFileSystem.info(out.path(v.name + ".acsf")).formatVersion, 4, v.name)
        }
        let multi = readWholeFile(out.path("multi-chunk.acsf"))
        let first = Int(FileLayout().dataOffset)
        XCTAssertEqual(Set((0..<3).map { Array(multi[first + $0 * 4128..<first + $0 * 4128 + 4]) }).count, 3)
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

    /// The v4, v3 and v2 `multi-chunk` vectors were written in three opens: their chunks name three
    /// different selectors, so a decoder that derived one key per file would fail them.
    func testMultiChunkVectorUsesSeveralSelectors() throws {
        for (name, version) in [("multi-chunk", UInt16(4)), ("v3/multi-chunk", 3), ("v2/multi-chunk", 2)] {
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
    /// it is modified and synced, and becomes version 4 when emptied (a new generation).
    func testVersion3FilesStayVersion3WhenModifiedAndBecomeVersion4WhenEmptied() throws {
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
        XCTAssertEqual(try SecureFileSystem.info(path).formatVersion, 4)
        XCTAssertEqual(try IndependentDecoder.decrypt(readWholeFile(path), kek: Self.kek()), [1, 2, 3])
    }

    /// A version this build does not know fails with a clear version error.
    func testUnknownVersionIsRefusedByName() throws {
        let env = try TestEnvironment()
        let path = env.path("v4.acsf")
        var bytes = readWholeFile(Self.directory + "/one-byte.acsf")
        bytes[5] = 5
        writeWholeFile(path, bytes)
        XCTAssertThrowsError(try SecureFile.open(path, flags: O_RDONLY, services: FixedKeyProvider(kek: Self.kek()))) { error in
            let e = error as? SecureFileError
            XCTAssertEqual(e?.code, .badKeyOrCorruptData)
            XCTAssertTrue(e?.message.contains("unsupported secure file version 5") ?? false, "\(String(describing: e))")
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
    }

    func testIndependentDecoderReadsTheVectors() throws {
        for v in Self.vectors {
            let bytes = readWholeFile(Self.directory + "/\(v.name).acsf")
            XCTAssertEqual(try IndependentDecoder.decrypt(bytes, kek: Self.kek()), Self.plaintext(v.size), v.name)
        }
    }

    func testIndependentDecoderRejectsEverySingleBitFlipOfASmallVector() throws {
        for name in ["one-byte", "v3/one-byte", "v2/one-byte", "v1/one-byte"] {
        let bytes = readWholeFile(Self.directory + "/\(name).acsf")
        let kek = try Self.kek()
        let plaintext = try IndependentDecoder.decrypt(bytes, kek: kek)
        for bit in 0..<(bytes.count * 8) {
            var b = bytes
            b[bit / 8] ^= 1 << (bit % 8)
            // The pending-end record (version 3, bytes 108..<128) is a hint, not authenticated: a
            // flip that keeps it well-formed must change nothing read (docs/FORMAT.md "Pending end").
            // So are the tail copies (version 4, bytes 128 up to chunk 0): a damaged copy is only
            // ever rejected, never taken, and the decoder does not read them. The engine's side of it
            // is checked for the written part of slot 0 (its descriptor and trailer copy).
            let dataOffset = Int(FileLayout().dataOffset)
            if !name.hasPrefix("v"), (128..<dataOffset).contains(bit / 8) {
                if bit / 8 >= 224 && bit % 64 != 0 { continue }  // slot bytes never written: a sample
                XCTAssertEqual(try IndependentDecoder.decrypt(b, kek: kek), plaintext, "\(name): bit \(bit) (tail copy)")
                if bit / 8 < 224, bit % 4 == 0 { try assertEngineReads(b, plaintext, kek: kek, "\(name): bit \(bit)") }
                continue
            }
            if !name.hasPrefix("v1"), !name.hasPrefix("v2"), (108..<128).contains(bit / 8), let decoded = try? IndependentDecoder.decrypt(b, kek: kek) {
                XCTAssertEqual(decoded, plaintext, "\(name): bit \(bit) (pending-end record)")
                try assertEngineReads(b, plaintext, kek: kek, "\(name): bit \(bit)")
                continue
            }
            XCTAssertThrowsError(try IndependentDecoder.decrypt(b, kek: kek), "\(name): bit \(bit)")
        }
        }
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

/// A decoder written from docs/FORMAT.md, sharing nothing with the engine but AES-256-GCM and HKDF.
enum IndependentDecoder {
    struct Invalid: Error { var why: String }

    static func u16(_ b: [UInt8], _ at: Int) -> Int { Int(b[at]) << 8 | Int(b[at + 1]) }
    static func u64(_ b: [UInt8]) -> [UInt8] { b }

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

    /// `keyClass`, when given, is the class of `key` (1 app, 2 group, 3 crypto block): the header must name it.
    static func decrypt(_ file: [UInt8], key kek: SecureBytes, keyClass: UInt8? = nil, ignoringPendingEnd: Bool = false) throws -> [UInt8] {
        guard file.count >= 128 else { throw Invalid(why: "short") }
        let h = Array(file[0..<128])
        let version = u16(h, 4)
        guard h[0..<4].elementsEqual("ACSF".utf8), (1...4).contains(version), u16(h, 6) == 128 else { throw Invalid(why: "header") }
        // From version 2: a 4-byte key selector before every chunk's and the trailer's nonce.
        let sel = version >= 2 ? 4 : 0
        let overhead = sel + 12 + 16
        guard file.count >= 128 + overhead else { throw Invalid(why: "short") }
        let shift = Int(h[8])
        guard (9...(version >= 4 ? 16 : 20)).contains(shift), (1...3).contains(h[9]), h[10..<16].allSatisfy({ $0 == 0 }) else { throw Invalid(why: "fields") }
        // Version 4: two tail-copy slots (a 64-byte descriptor, a chunk's and a trailer's room each)
        // between the header and chunk 0. A decoder of the file as written ignores them.
        let first = 128 + (version >= 4 ? 2 * (64 + (1 << shift) + 2 * overhead) : 0)
        // Bytes 108..<128: zero, or in version 3 a pending-end record (kind 1, then a u64 size at 112).
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
        let dataKeyBytes = try gcmOpen(kek, nonce: Array(h[48..<60]), aad: Array(h[0..<48]),
                                  ciphertext: Array(h[60..<92]), tag: Array(h[92..<108]))
        let dataKey = try SecureBytes(copying: dataKeyBytes)
        // The key of a chunk or trailer starting at `at`: the data key (version 1), or
        // K_s = AES-256(data key, "ACSFkey2" ‖ s ‖ u32 0) ‖ AES-256(data key, "ACSFkey2" ‖ s ‖ u32 1).
        func key(at: Int) throws -> SecureBytes {
            guard sel > 0 else { return dataKey }
            let blocks: [UInt8] = (0..<2).flatMap { (j: UInt8) -> [UInt8] in Array("ACSFkey2".utf8) + Array(file[at..<at + 4]) + [0, 0, 0, j] }
            var k = [UInt8](repeating: 0, count: 32)
            try blocks.withUnsafeBytes { b in try k.withUnsafeMutableBytes { try AESBlockCipher(key: dataKey).encryptBlocks(b, into: $0.baseAddress!) } }
            return try SecureBytes(copying: k)
        }

        let chunk = 1 << shift, physical = chunk + overhead
        // A pending end whose trailer authenticates at its place, with bytes after it, is the end.
        if let x = pendingEnd, !ignoringPendingEnd {
            let n = x == 0 ? 0 : (x - 1) / chunk + 1
            let end = first + x + n * overhead + overhead
            if end < file.count, (try? decrypt(Array(file[0..<end]), key: kek, keyClass: keyClass, ignoringPendingEnd: true)) != nil {
                return try decrypt(Array(file[0..<end]), key: kek, keyClass: keyClass, ignoringPendingEnd: true)
            }
        }
        guard file.count >= first + overhead else { throw Invalid(why: "short") }
        let body = file.count - first - overhead
        let full = body / physical, rem = body % physical
        guard rem == 0 || rem > overhead else { throw Invalid(why: "length") }
        let chunks = full + (rem > 0 ? 1 : 0)
        var plaintext: [UInt8] = []
        for i in 0..<chunks {
            let start = first + i * physical, n = start + sel
            let length = (i == chunks - 1 && rem > 0) ? rem - overhead : chunk
            let aad = fileID + (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(i) >> (8 * UInt64($0))) }
            plaintext += try gcmOpen(key(at: start), nonce: Array(file[n..<n + 12]), aad: aad,
                                     ciphertext: Array(file[n + 12..<n + 12 + length]),
                                     tag: Array(file[n + 12 + length..<n + 28 + length]), "chunk \(i)")
        }
        let t = file.count - overhead, tn = t + sel
        let size = UInt64(plaintext.count)
        let trailerAAD = Array("ACSF end".utf8) + fileID + (0..<8).reversed().map { UInt8(truncatingIfNeeded: size >> (8 * UInt64($0))) }
        _ = try gcmOpen(key(at: t), nonce: Array(file[tn..<tn + 12]), aad: trailerAAD, ciphertext: [], tag: Array(file[tn + 12..<tn + 28]), "trailer")
        return plaintext
    }
}
