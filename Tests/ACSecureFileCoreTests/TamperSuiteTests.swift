#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACSecureServices
@testable import ACSecureFileCore

/// Every way of altering a secure file on disk that the format can detect must give
/// ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR on open or on the read that covers the altered data, and no
/// read may ever return bytes that were not written. Plus the ciphertext properties: no plaintext
/// window, fresh randomness per file and per chunk write.
final class TamperSuiteTests: XCTestCase {
    static let chunk = 4096
    static let physicalChunk = chunk + 32  // format version 2: selector (4) ‖ nonce (12) ‖ ciphertext ‖ tag (16)
    static let header = 128
    /// Where chunk 0 starts (format version 4: after the header and the two tail-copy slots).
    static let data = Int(FileLayout().dataOffset)
    static let trailer = 32

    var env: TestEnvironment!
    var rng = SplitMix64(seed: 0x7A3)

    override func setUpWithError() throws { env = try TestEnvironment() }
    override func tearDown() { env = nil }

    /// Writes `plaintext` to a new secure file and returns its raw bytes.
    func encrypt(_ plaintext: [UInt8], name: String) throws -> [UInt8] {
        let path = env.path(name)
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, services: env.services)
        if !plaintext.isEmpty { try f.pwrite(plaintext, at: 0) }
        try f.close()
        let raw = readWholeFile(path)
        unlink(path)
        return raw
    }

    enum Verdict: Equatable { case intact, detected }
    var counts = (cases: 0, detectedOnOpen: 0, detectedOnRead: 0, detectedAfterEnd: 0, restored: 0)

    /// Stores `raw` as a file and reads it back through the engine, chunk by chunk.
    /// - Returns: `.intact` when everything read back equals `plaintext` with the right size,
    ///   `.detected` when open or some read failed with ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, when the
    ///   engine reports bytes after the authenticated end (which reads never return), or when it
    ///   reports the end restored from a tail copy (then the file reads as a prefix of `plaintext`:
    ///   as it was at its last sync, here its creation, so empty, unless the test synced it).
    ///   Any other error, or any wrong byte, is a test failure.
    func readBack(_ raw: [UInt8], expecting plaintext: [UInt8], _ what: @autoclosure () -> String,
                  file: StaticString = #filePath, line: UInt = #line) -> Verdict {
        counts.cases += 1
        let path = env.path("tampered")
        writeWholeFile(path, raw)
        defer { unlink(path) }
        let f: SecureFile
        do throws(SecureFileError) { f = try SecureFile.open(path, flags: O_RDONLY, services: env.services) } catch {
            XCTAssertEqual(error.code, .badKeyOrCorruptData, "\(what()): open failed with \(error.code.name): \(error.message)", file: file, line: line)
            counts.detectedOnOpen += 1
            return .detected
        }
        defer { try? f.close() }
        let restored = (try? f.endRestoredFromTailCopy) ?? false
        var failed = false
        var offset = 0
        // Chunk-sized reads past the end too, so an EOF that is not authenticated would show.
        while offset <= plaintext.count + Self.chunk {
            do {
                let got = try f.pread(count: Self.chunk, at: Int64(offset))
                if got.isEmpty {
                    // An authenticated end of file: it must be the real one.
                    if offset < plaintext.count && !restored {
                        XCTFail("\(what()): the file ends (authenticated) at \(offset), not at \(plaintext.count)", file: file, line: line)
                    }
                    break
                }
                let expected = plaintext[min(offset, plaintext.count)..<min(offset + got.count, plaintext.count)]
                if got.count != expected.count || !got.elementsEqual(expected) {
                    XCTFail("\(what()): WRONG BYTES: read \(got.count) bytes at \(offset) that were never written", file: file, line: line)
                    return .detected
                }
            } catch let e as SecureFileError {
                XCTAssertEqual(e.code, .badKeyOrCorruptData, "\(what()): read at \(offset) failed with \(e.code.name): \(e.message)", file: file, line: line)
                XCTAssertTrue(e.message.contains(path), "\(what()): the error does not name the file: \(e.message)", file: file, line: line)
                failed = true
            } catch { XCTFail("\(error)") }
            offset += Self.chunk
        }
        if failed { counts.detectedOnRead += 1 }
        if !failed, restored {
            counts.restored += 1
            return .detected
        }
        // Bytes after the authenticated end are never read back, but the engine reports them.
        if !failed, let extra = try? f.bytesAfterAuthenticatedEnd, extra > 0 {
            counts.detectedAfterEnd += 1
            return .detected
        }
        return failed ? .detected : .intact
    }

    func assertDetected(_ raw: [UInt8], _ plaintext: [UInt8], _ what: @autoclosure () -> String,
                        file: StaticString = #filePath, line: UInt = #line) {
        let v = readBack(raw, expecting: plaintext, what(), file: file, line: line)
        XCTAssertEqual(v, .detected, "\(what()): the alteration was not detected", file: file, line: line)
    }

    /// Files: empty, 1 byte, one short chunk, exactly one chunk, several chunks with a short last one.
    func sampleFiles() throws -> [(plaintext: [UInt8], raw: [UInt8], name: String)] {
        try [0, 1, 100, Self.chunk, 3 * Self.chunk + 777].map { n in
            let p = randomBytes(n, &rng)
            return (p, try encrypt(p, name: "sample-\(n)"), "\(n)-byte file")
        }
    }

    func testUntouchedFilesReadBack() throws {
        for s in try sampleFiles() {
            XCTAssertEqual(readBack(s.raw, expecting: s.plaintext, s.name), .intact)
        }
    }

    /// Every bit of the header but the pending-end record's: that record (bytes 108..<128) is a hint,
    /// outside the wrap, followed only where a trailer for its size authenticates at its place
    /// (docs/FORMAT.md "Pending end"); a flip there must leave every byte reading as before.
    func testEveryHeaderBitFlipIsDetected() throws {
        for s in try sampleFiles() {
            for bit in 0..<(Self.header * 8) {
                var t = s.raw
                t[bit / 8] ^= 1 << (bit % 8)
                if (108..<128).contains(bit / 8) {
                    // Intact, or refused as malformed (a kind no writer writes); a wrong byte fails in readBack.
                    _ = readBack(t, expecting: s.plaintext, "\(s.name): pending-end record bit \(bit)")
                    continue
                }
                assertDetected(t, s.plaintext, "\(s.name): header bit \(bit)")
            }
        }
        print("TamperSuite: header bit flips: \(counts.cases) cases, \(counts.detectedOnOpen) detected on open, \(counts.detectedOnRead) on read")
    }

    func testEveryTrailerBitFlipIsDetected() throws {
        for s in try sampleFiles() {
            let start = s.raw.count - Self.trailer
            for bit in 0..<(Self.trailer * 8) {
                var t = s.raw
                t[start + bit / 8] ^= 1 << (bit % 8)
                assertDetected(t, s.plaintext, "\(s.name): trailer bit \(bit)")
            }
        }
        print("TamperSuite: trailer bit flips: \(counts.cases) cases")
    }

    /// Every bit of the nonce and tag, and of sampled ciphertext bytes, of every chunk; only the
    /// altered chunk fails, the others still read.
    func testChunkBitFlipsAreDetectedAndLocalised() throws {
        for s in try sampleFiles() where !s.plaintext.isEmpty {
            let chunks = (s.plaintext.count + Self.chunk - 1) / Self.chunk
            for c in 0..<chunks {
                let length = min(Self.chunk, s.plaintext.count - c * Self.chunk)
                let base = Self.data + c * Self.physicalChunk
                var offsets = Array(0..<16) + Array((16 + length)..<(32 + length))  // selector, nonce, tag
                offsets += [16, 17, 16 + length / 2, 16 + length - 1] + (0..<4).map { _ in 16 + Int.random(in: 0..<length, using: &rng) }
                for o in Set(offsets).sorted() {
                    for bit in 0..<8 {
                        var t = s.raw
                        t[base + o] ^= 1 << bit
                        assertDetected(t, s.plaintext, "\(s.name): chunk \(c) byte \(o) bit \(bit)")
                    }
                }
                // Localised: with chunk c altered, every other chunk still reads correctly.
                var t = s.raw
                t[base + 12] ^= 0x80
                let path = env.path("localised")
                writeWholeFile(path, t)
                let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
                for other in 0..<chunks {
                    let at = other * Self.chunk
                    if other == c, try f.endRestoredFromTailCopy {
                        // A last chunk no sync covered, at a boundary where version 5's trailer
                        // spans two sectors: the file is back at its start, reported (see below).
                        XCTAssertEqual(c, chunks - 1, "\(s.name): chunk \(c)")
                        XCTAssertEqual(try f.size, Int64(at), "\(s.name): chunk \(c)")
                    } else if other == c {
                        XCTAssertEqual(aceCode { _ = try f.pread(count: 10, at: Int64(at)) }, .badKeyOrCorruptData)
                    } else {
                        XCTAssertEqual(try f.pread(count: Self.chunk, at: Int64(at)), Array(s.plaintext[at..<min(at + Self.chunk, s.plaintext.count)]),
                                       "\(s.name): chunk \(other) with chunk \(c) altered")
                    }
                }
                try f.close()
                unlink(path)
            }
        }
        print("TamperSuite: chunk bit flips: \(counts.cases) cases")
    }

    /// A chunk damaged on disk (a torn in-place rewrite does this: docs/FORMAT.md "What a crash can
    /// cost") is the only thing lost: a write that needs its old bytes fails, changing nothing; a
    /// write of the whole chunk repairs it, as SQLite's rollback journal rewrites whole pages; the
    /// other chunks and the end stay as they were (issue 24 item 4).
    func testADamagedChunkIsRepairedByAWholeChunkWriteAndRefusedByAPartialOne() throws {
        let plaintext = randomBytes(3 * Self.chunk + 777, &rng)
        let raw = try encrypt(plaintext, name: "repair")
        for c in 0..<4 {
            let length = min(Self.chunk, plaintext.count - c * Self.chunk)
            var t = raw
            t[Self.data + c * Self.physicalChunk + 20] ^= 0x40  // inside the ciphertext: as if torn there
            let path = env.path("repair-\(c)")
            writeWholeFile(path, t)
            let f = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            if c == 3 {
                // Version 5: this last chunk starts at 12,288, where the 40-byte trailer spans two
                // sectors, and no sync covered it. A torn append from there looks the same, so the
                // file is taken back to 12,288, reported (FORMAT.md "Trailers that span two
                // sectors"); a last chunk a sync covered stays, as here (TailRecordTests).
                XCTAssertTrue(try f.endRestoredFromTailCopy, "chunk 3")
                XCTAssertEqual(try f.size, Int64(c * Self.chunk), "chunk 3")
                try f.close()
                unlink(path)
                continue
            }
            XCTAssertEqual(try f.size, Int64(plaintext.count), "chunk \(c): the damage does not move the end")
            XCTAssertEqual(aceCode { _ = try f.pwrite([1, 2, 3], at: Int64(c * Self.chunk + 10)) }, .badKeyOrCorruptData,
                           "chunk \(c): a partial write needs the damaged bytes")
            XCTAssertEqual(readWholeFile(path), t, "chunk \(c): the refused write changed nothing")
            let fresh = randomBytes(length, &rng)
            try f.pwrite(fresh, at: Int64(c * Self.chunk))
            var expected = plaintext
            expected.replaceSubrange((c * Self.chunk)..<(c * Self.chunk + length), with: fresh)
            XCTAssertEqual(try f.readAll(), expected, "chunk \(c): repaired by the whole-chunk write")
            try f.close()
            let reopened = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try reopened.readAll(), expected, "chunk \(c): after reopening")
            XCTAssertEqual(try reopened.bytesAfterAuthenticatedEnd, 0)
            try reopened.close()
            unlink(path)
        }
    }

    func physicalChunk(_ raw: [UInt8], _ c: Int) -> ArraySlice<UInt8> {
        raw[(Self.data + c * Self.physicalChunk)..<(Self.data + (c + 1) * Self.physicalChunk)]
    }

    func testSwappedReorderedAndForeignChunksAreDetected() throws {
        let p = randomBytes(4 * Self.chunk, &rng)  // all chunks the same length, so any swap keeps the layout
        let raw = try encrypt(p, name: "a")
        let other = try encrypt(p, name: "b")  // same plaintext, another file
        for i in 0..<4 {
            for j in (i + 1)..<4 {
                var t = raw
                t.replaceSubrange((Self.data + i * Self.physicalChunk)..<(Self.data + (i + 1) * Self.physicalChunk), with: physicalChunk(raw, j))
                t.replaceSubrange((Self.data + j * Self.physicalChunk)..<(Self.data + (j + 1) * Self.physicalChunk), with: physicalChunk(raw, i))
                assertDetected(t, p, "chunks \(i) and \(j) swapped")
            }
            // The same index from another file (same key, same plaintext): the file ID in the AAD tells.
            var t = raw
            t.replaceSubrange((Self.data + i * Self.physicalChunk)..<(Self.data + (i + 1) * Self.physicalChunk), with: physicalChunk(other, i))
            assertDetected(t, p, "chunk \(i) copied from another file at the same index")
            // A chunk duplicated over its neighbour.
            var d = raw
            d.replaceSubrange((Self.data + ((i + 1) % 4) * Self.physicalChunk)..<(Self.data + ((i + 1) % 4 + 1) * Self.physicalChunk), with: physicalChunk(raw, i))
            assertDetected(d, p, "chunk \(i) duplicated over chunk \((i + 1) % 4)")
        }
        // Rotation: 1 2 3 0.
        var r = Array(raw[0..<Self.data])
        for c in [1, 2, 3, 0] { r += physicalChunk(raw, c) }
        r += raw.suffix(Self.trailer)
        assertDetected(r, p, "chunks rotated")
        // Dropping a whole chunk from the middle, trailer kept.
        var dropped = Array(raw[0..<Self.data]) + physicalChunk(raw, 0) + physicalChunk(raw, 2) + physicalChunk(raw, 3)
        dropped += raw.suffix(Self.trailer)
        assertDetected(dropped, p, "chunk 1 removed")
    }

    func testAppendedForeignChunkOrBytesAreDetected() throws {
        for n in [Self.chunk, 2 * Self.chunk + 5] {
            let p = randomBytes(n, &rng)
            let raw = try encrypt(p, name: "a")
            let bigger = try encrypt(p + randomBytes(2 * Self.chunk, &rng), name: "b")
            let body = Array(raw.dropLast(Self.trailer))
            // Another file's chunk appended (before and after the trailer), and this file's own chunk repeated.
            assertDetected(raw + physicalChunk(bigger, 2), p, "\(n): foreign chunk appended after the trailer")
            assertDetected(body + physicalChunk(bigger, 2) + raw.suffix(Self.trailer), p, "\(n): foreign chunk inserted before the trailer")
            assertDetected(body + physicalChunk(raw, 0) + raw.suffix(Self.trailer), p, "\(n): own chunk 0 appended before the trailer")
            for extra in [29, 100, 4000] {
                assertDetected(raw + randomBytes(extra, &rng), p, "\(n): \(extra) random bytes appended")
            }
            if n % Self.chunk != 0 {
                for extra in [1, 31, 32] { assertDetected(raw + randomBytes(extra, &rng), p, "\(n): \(extra) random bytes appended") }
                assertDetected(raw + raw.suffix(Self.trailer), p, "\(n): trailer repeated")
            }
        }
    }

    /// Short junk after a file whose size is a multiple of the chunk size: what a torn extension
    /// leaves. Reads return the original content (never the junk); the engine reports the junk.
    func testShortJunkAfterAChunkAlignedFile() throws {
        let p = randomBytes(2 * Self.chunk, &rng)
        let raw = try encrypt(p, name: "aligned")
        for junk in [randomBytes(1, &rng), randomBytes(31, &rng), randomBytes(32, &rng), Array(raw.suffix(Self.trailer))] {
            let v = readBack(raw + junk, expecting: p, "\(junk.count) bytes after a chunk-aligned file")
            XCTAssertEqual(v, .detected, "\(junk.count) bytes appended after a chunk-aligned file are not reported")
        }
    }

    /// Cutting the file at every byte near each chunk boundary, at each boundary, and near the end.
    func testTruncationAtEveryOffsetNearBoundariesIsDetected() throws {
        let p = randomBytes(3 * Self.chunk + 500, &rng)
        let raw = try encrypt(p, name: "a")
        var cuts = Set<Int>(1..<(Self.header + 40))
        for c in 0...3 {
            let boundary = Self.data + c * Self.physicalChunk
            for d in -40...40 { cuts.insert(boundary + d) }
        }
        for d in 0...80 { cuts.insert(raw.count - d) }
        cuts = cuts.filter { $0 > 0 && $0 < raw.count }
        for cut in cuts.sorted() {
            assertDetected(Array(raw[0..<cut]), p, "cut at \(cut) of \(raw.count)")
        }
        print("TamperSuite: \(cuts.count) truncation offsets")
    }

    /// A file cut to 0 bytes is not a secure file: opening it without O_CREAT/O_TRUNC fails
    /// (a creating open writes the header in the same call, so no secure file is ever 0 bytes).
    func testTruncationToZeroBytesIsDetected() throws {
        let p = randomBytes(100, &rng)
        XCTAssertEqual(readBack([], expecting: p, "cut to 0 bytes"), .detected)
        let path = env.path("cut-to-zero")
        writeWholeFile(path, [])
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDWR, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(fileSize(path), 0, "a refused open leaves the file as it was")
    }

    /// A secure file cut to 0 bytes, then opened every way a program opens a file: every open that
    /// does not empty the file on purpose refuses it (a creating open above all: how every log file
    /// is opened, O_CREAT | O_APPEND, would otherwise turn the cut into a new valid file and nobody
    /// would ever learn of it). O_TRUNC empties it on purpose and gets a new file.
    func testACutToZeroBytesIsNotLaunderedByAnyOpen() throws {
        let path = env.path("cut-then-open")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, services: env.services)
        try f.pwrite(randomBytes(5000, &rng), at: 0)
        try f.close()
        for (name, flags) in [("O_RDONLY", O_RDONLY), ("O_RDWR", O_RDWR), ("O_WRONLY", O_WRONLY), ("O_RDWR | O_CREAT", O_RDWR | O_CREAT),
                              ("O_RDWR | O_CREAT | O_APPEND", O_RDWR | O_CREAT | O_APPEND), ("O_WRONLY | O_CREAT | O_APPEND", O_WRONLY | O_CREAT | O_APPEND),
                              ("O_RDONLY | O_CREAT", O_RDONLY | O_CREAT)] {
            writeWholeFile(path, [])
            do {
                let g = try SecureFile.open(path, flags: flags, mode: 0o600, services: env.services)
                try? g.close()
                XCTFail("\(name): a secure file cut to 0 bytes opened")
            } catch {
                XCTAssertEqual(error.code, .badKeyOrCorruptData, "\(name): \(error)")
                XCTAssertEqual(error.errno, EIO, "\(name): \(error)")
                XCTAssertTrue(error.message.contains(path) && error.message.contains("O_TRUNC"), "\(name): \(error.message)")
            }
            XCTAssertEqual(fileSize(path), 0, "\(name): a refused open leaves the file as it was")
        }
        for (name, flags) in [("O_RDWR | O_TRUNC", O_RDWR | O_TRUNC), ("O_WRONLY | O_CREAT | O_TRUNC", O_WRONLY | O_CREAT | O_TRUNC)] {
            writeWholeFile(path, [])
            let g = try SecureFile.open(path, flags: flags, mode: 0o600, services: env.services)
            XCTAssertEqual(try g.size, 0, name)
            try g.close()
            XCTAssertEqual(fileSize(path), FileLayout().physicalSize(forPlaintextSize: 0), "\(name): a new secure file, header and empty trailer")
        }
    }

    /// A creating open of a missing file never leaves a 0-byte file: the file appears under its name
    /// with its header (an unnamed O_TMPFILE file, linked once written), so between the kernel's
    /// create and the header no other opener can see it empty.
    func testACreatedFileAppearsWithItsHeader() throws {
        let path = env.path("appears-whole")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o640, services: env.services)
        XCTAssertEqual(fileSize(path), FileLayout().physicalSize(forPlaintextSize: 0))
        var st = stat()
        XCTAssertEqual(lstat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o640 & ~currentUmask())
        XCTAssertEqual(try f.stat().st_ino, st.st_ino, "the handle is the named file's")
        try f.pwrite([1, 2, 3], at: 0)
        try f.close()
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_EXCL, services: env.services) }, EEXIST)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), [1, 2, 3])
        try g.close()
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(env.path("no-such-dir/x"), flags: O_RDWR | O_CREAT, services: env.services) }, ENOENT)
    }

    func currentUmask() -> mode_t {
        let m = umask(0o022)
        umask(m)
        return m
    }

    /// Issue 15 #3: emptying a file (O_TRUNC, ftruncate to 0, in this process or through another
    /// handle) starts a new file ID and data key, so a chunk of the old contents spliced into the
    /// rewritten file at its own position fails authentication (with one key it verified).
    func testEmptyingAFileStartsANewKeyGeneration() throws {
        let old = randomBytes(3 * Self.chunk, &rng), new = randomBytes(3 * Self.chunk, &rng)
        let emptyings: [(String, (String) throws -> SecureFile)] = [
            ("O_TRUNC", { try SecureFile.open($0, flags: O_RDWR | O_TRUNC, services: self.env.services) }),
            ("ftruncate(0)", { let f = try SecureFile.open($0, flags: O_RDWR, services: self.env.services); try f.truncate(to: 0); return f }),
            ("O_TRUNC, coordinated", { try SecureFile.open($0, flags: O_RDWR | O_TRUNC, services: self.env.services, sharing: .processes) }),
        ]
        for (what, emptying) in emptyings {
            let path = env.path("generation")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, services: env.services)
            try f.pwrite(old, at: 0)
            // A second handle stays open across the emptying: it must follow the new generation.
            let other = try SecureFile.open(path, flags: O_RDWR, services: env.services, sharing: .processes)
            let before = readWholeFile(path)
            try f.close()
            let g = try emptying(path)
            XCTAssertEqual(try g.size, 0, what)
            try g.pwrite(new, at: 0)
            try g.close()
            XCTAssertEqual(try other.pread(count: new.count, at: 0), new, "\(what): an open handle reads the new generation")
            try other.close()
            let after = readWholeFile(path)
            XCTAssertNotEqual(Array(before[16..<32]), Array(after[16..<32]), "\(what): new file ID")
            XCTAssertNotEqual(Array(before[48..<108]), Array(after[48..<108]), "\(what): new wrapped data key")
            XCTAssertEqual(readBack(after, expecting: new, "\(what): rewritten"), .intact)
            // Old chunk 1 at its own position in the new file.
            var spliced = after
            let at = Self.data + Self.physicalChunk
            spliced.replaceSubrange(at..<at + Self.physicalChunk, with: before[at..<at + Self.physicalChunk])
            XCTAssertEqual(readBack(spliced, expecting: new, "\(what): old-generation chunk spliced in"), .detected)
            unlink(path)
        }
    }

    /// Issue 15 #1: a file cut at a chunk boundary plus a trailer's length must never authenticate at
    /// the cut. Version 4: the open reports it (`endRestoredFromTailCopy`, bytes after the end) and
    /// takes the file back to the end of its last sync — its tail copy — and every change builds on
    /// that end, never on the cut (issue 24: a power loss leaves the same bytes). Version 3 (no tail
    /// copies): the cut file opens, but no later write, grow, hole fill or coordinated write may seal
    /// a fresh trailer over it.
    func testTruncationIsNotLaunderedByLaterWrites() throws {
        let p = randomBytes(20_000, &rng)
        let path = env.path("laundered")
        // Synced at 10,000 bytes, then 10,000 more written (not synced), then cut after chunk 1.
        let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, services: env.services)
        try w.pwrite(Array(p[0..<10_000]), at: 0)
        try w.sync()
        try w.pwrite(Array(p[10_000...]), at: 10_000)
        try w.close()
        let cut = Array(readWholeFile(path)[0..<(Self.data + 2 * Self.physicalChunk + Self.trailer)])
        let attempts: [(String, (SecureFile) throws -> Void)] = [
            ("append", { _ = try $0.write([UInt8](repeating: 9, count: 9)) }),
            ("grow", { try $0.truncate(to: 30_000) }),
            ("hole", { _ = try $0.pwrite([1], at: 50_000) }),
            ("overwrite inside", { _ = try $0.pwrite([1, 2, 3], at: 10) }),
            ("shrink", { try $0.truncate(to: 100) }),
        ]
        for (what, attempt) in attempts {
            for sharing in [SecureFile.Sharing.thisProcess, .processes] {
                writeWholeFile(path, cut)
                let f = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: env.services, sharing: sharing)
                XCTAssertTrue(try f.endRestoredFromTailCopy, "\(what) (\(sharing)): the cut is reported")
                XCTAssertEqual(try f.size, 10_000, "\(what) (\(sharing)): the end of the last sync, not the cut's 8,192")
                XCTAssertNoThrow(try attempt(f), "\(what) (\(sharing))")
                try f.close()
                let back = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
                XCTAssertFalse(try back.endRestoredFromTailCopy)
                XCTAssertEqual(try back.bytesAfterAuthenticatedEnd, 0)
                let size = Int(try back.size)
                XCTAssertNotEqual(size, 8192, "\(what) (\(sharing)): never sealed at the cut")
                XCTAssertEqual(try back.pread(count: 100, at: 0).count, min(100, size))
                if what == "append" {
                    XCTAssertEqual(try back.readAll(), Array(p[0..<10_000]) + [UInt8](repeating: 9, count: 9), "\(what) (\(sharing))")
                }
                try back.close()
            }
        }
        XCTAssertEqual(readBack(cut, expecting: p, "cut"), .detected)
        // Version 3: every change refused, the file left as it was.
        let kek = try FormatVectorTests.kek()
        let v3 = readWholeFile(FormatVectorTests.directory + "/v3/multi-chunk.acsf")
        let v3Cut = Array(v3[0..<(Self.header + 2 * Self.physicalChunk + Self.trailer)])
        for (what, attempt) in attempts {
            for sharing in [SecureFile.Sharing.thisProcess, .processes] {
                writeWholeFile(path, v3Cut)
                let f = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: FixedKeyProvider(kek: kek), sharing: sharing)
                XCTAssertEqual(aceCode { try attempt(f) }, .badKeyOrCorruptData, "version 3: \(what) (\(sharing)) on a cut file must fail")
                try? f.close()
                XCTAssertEqual(readWholeFile(path), v3Cut, "version 3: \(what) (\(sharing)) left the cut file as it was")
            }
        }
        // Emptying it is allowed: nothing authentic is lost.
        writeWholeFile(path, cut)
        let emptied = try SecureFile.open(path, flags: O_RDWR | O_TRUNC, services: env.services)
        XCTAssertEqual(try emptied.size, 0)
        try emptied.write([1, 2, 3])
        try emptied.close()
        let back = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try back.readAll(), [1, 2, 3])
        try back.close()
    }

    func testSwappedHeadersAreDetected() throws {
        let p1 = randomBytes(2 * Self.chunk + 10, &rng), p2 = randomBytes(2 * Self.chunk + 10, &rng)
        let a = try encrypt(p1, name: "a"), b = try encrypt(p2, name: "b")
        let aWithB = Array(b[0..<Self.header]) + a[Self.header...]
        let bWithA = Array(a[0..<Self.header]) + b[Self.header...]
        assertDetected(aWithB, p1, "file A with file B's header (as A)")
        assertDetected(aWithB, p2, "file A with file B's header (as B)")
        assertDetected(bWithA, p2, "file B with file A's header")
        // Same plaintext in both: the swap must not read as either.
        let c = try encrypt(p1, name: "c")
        assertDetected(Array(c[0..<Self.header]) + a[Self.header...], p1, "same plaintext, headers swapped")
        // The wrong key: another store's services.
        let otherStore = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/other-store", argonCost: .minimum)
        let path = env.path("wrong-key")
        writeWholeFile(path, a)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: otherStore) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, key: .group("g"), services: env.services) }, .badKeyOrCorruptData)
    }

    /// Rollback: a file replaced by an older copy of itself reads the older content without error.
    /// Nothing in a file can tell which of its own versions is newest; NOT detected (docs/TESTING.md).
    func testReplacementByAnOlderCopyIsNotDetected() throws {
        let path = env.path("versions")
        let v1 = randomBytes(2 * Self.chunk, &rng)
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.pwrite(v1, at: 0)
        try f.sync()
        let old = readWholeFile(path)
        let v2 = randomBytes(Self.chunk, &rng)
        try f.pwrite(v2, at: 100)
        try f.close()
        XCTAssertNotEqual(readWholeFile(path), old)
        XCTAssertEqual(readBack(old, expecting: v1, "older copy"), .intact, "rollback to an older copy is not detectable")
        // Mixing versions chunk by chunk IS detected only when the trailer/size disagree; same size
        // and chunk-wise mixing of the same file's versions is also a rollback of those chunks.
        var mixed = readWholeFile(path)
        mixed.replaceSubrange(Self.data..<(Self.data + Self.physicalChunk), with: old[Self.data..<(Self.data + Self.physicalChunk)])
        var expectedMix = v1
        expectedMix.replaceSubrange(100..<(100 + Self.chunk), with: v2)
        expectedMix.replaceSubrange(0..<Self.chunk, with: v1[0..<Self.chunk])
        XCTAssertEqual(readBack(mixed, expecting: expectedMix, "chunk 0 rolled back"), .intact, "a chunk rolled back to an older version of the same file is not detectable")
    }

    // MARK: ciphertext properties

    /// No 16-byte window of the plaintext appears anywhere in the file, for low-entropy plaintexts.
    func testCiphertextContainsNoPlaintextWindow() throws {
        let text = Array(String(repeating: "The quick brown fox jumps over the lazy dog. 0123456789 ", count: 300).utf8)
        let plaintexts: [[UInt8]] = [
            [UInt8](repeating: 0, count: 5 * Self.chunk + 3),
            [UInt8](repeating: 0x41, count: 2 * Self.chunk),
            text,
            randomBytes(3 * Self.chunk, &rng),
        ]
        for (n, p) in plaintexts.enumerated() {
            let raw = try encrypt(p, name: "window-\(n)")
            var windows = Set<[UInt8]>()
            for i in 0...(p.count - 16) { windows.insert(Array(p[i..<i + 16])) }
            var hits = 0
            // Chunks and trailer (the header is not ciphertext: its reserved bytes are zeros by design;
            // nor are the tail-copy slots' unwritten bytes, zeros too; what a slot holds is a copy of
            // chunk and trailer bytes, checked here in place).
            for i in Self.data...(raw.count - 16) where windows.contains(Array(raw[i..<i + 16])) { hits += 1 }
            XCTAssertEqual(hits, 0, "plaintext \(n): \(hits) 16-byte plaintext windows found in the ciphertext")
            XCTAssertGreaterThan(raw.count, p.count)
        }
    }

    /// The same content encrypted twice: different file IDs, data keys, nonces and ciphertexts.
    func testTwoEncryptionsOfTheSameContentDiffer() throws {
        let p = [UInt8](repeating: 7, count: 3 * Self.chunk)
        let a = try encrypt(p, name: "a"), b = try encrypt(p, name: "b")
        XCTAssertEqual(a.count, b.count)
        XCTAssertNotEqual(Array(a[16..<32]), Array(b[16..<32]), "file IDs")
        XCTAssertNotEqual(Array(a[48..<108]), Array(b[48..<108]), "wrapped keys")
        for c in 0..<3 {
            let x = physicalChunk(a, c), y = physicalChunk(b, c)
            XCTAssertNotEqual(Array(x.prefix(12)), Array(y.prefix(12)), "chunk \(c) nonces")
            XCTAssertNotEqual(Array(x.dropFirst(12)), Array(y.dropFirst(12)), "chunk \(c) ciphertexts")
        }
        // Within one file, equal plaintext chunks give different ciphertexts.
        XCTAssertNotEqual(Array(physicalChunk(a, 0).dropFirst(12)), Array(physicalChunk(a, 1).dropFirst(12)))
    }

    /// Rewriting a chunk (same or different content) always draws a fresh nonce: 200 rewrites, 200 nonces.
    func testRewritingAChunkUsesFreshNonces() throws {
        let path = env.path("rewrite")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let content = randomBytes(2 * Self.chunk, &rng)
        var nonces = Set<[UInt8]>()
        var ciphertexts = Set<[UInt8]>()
        let rounds = 200
        for round in 0..<rounds {
            // Alternate whole-chunk writes (direct path) and a one-byte write (cached, flushed by sync).
            if round % 2 == 0 { try f.pwrite(content, at: 0) } else { try f.pwrite([content[5]], at: 5) }
            try f.sync()
            let raw = readWholeFile(path)
            nonces.insert(Array(raw[Self.data..<(Self.data + 12)]))
            ciphertexts.insert(Array(physicalChunk(raw, 0).dropFirst(12)))
        }
        try f.close()
        XCTAssertEqual(nonces.count, rounds, "every rewrite of chunk 0 must use a new nonce")
        XCTAssertEqual(ciphertexts.count, rounds)
        // The trailer is resealed with a fresh nonce too.
        let f2 = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        var trailerNonces = Set<[UInt8]>()
        for i in 0..<50 {
            try f2.truncate(to: Int64(2 * Self.chunk - i))
            try f2.sync()
            trailerNonces.insert(Array(readWholeFile(path).suffix(Self.trailer).prefix(12)))
        }
        try f2.close()
        XCTAssertEqual(trailerNonces.count, 50)
    }
}
