#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// Tail records (format version 5, docs/FORMAT.md "Version 5"): appends inside the last chunk sealed
/// alone after it, the footer that describes them, and every other change sealing them into one
/// chunk first.
final class TailRecordTests: XCTestCase {
    let layout = FileLayout()

    func plaintext(_ n: Int, _ seed: Int = 0) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ seed) } }

    func readBack(_ path: String, _ env: TestEnvironment) throws -> [UInt8] {
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        defer { try? r.close() }
        XCTAssertEqual(try r.bytesAfterAuthenticatedEnd, 0)
        XCTAssertFalse(try r.endRestoredFromTailCopy)
        return try r.readAll()
    }

    /// What the footer at the end of the file says (nil when it names no valid end).
    func shape(_ path: String) -> (size: Int64, shape: TailShape)? {
        let bytes = readWholeFile(path)
        guard bytes.count >= TailShape.footerSize else { return nil }
        return Array(bytes.suffix(TailShape.footerSize)).withUnsafeBytes {
            layout.plaintextSize(forPhysicalSize: Int64(bytes.count), footer: $0.baseAddress!)
        }
    }

    /// A file of `base` bytes written at once, then `appends` appended one by one in the same open.
    func fileWithRecords(_ path: String, base: Int, appends: [Int], _ env: TestEnvironment) throws -> [UInt8] {
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services)
        var expected = plaintext(base)
        _ = try f.write(expected)
        for (k, n) in appends.enumerated() {
            let bytes = plaintext(n, k + 1)
            _ = try f.write(bytes)
            expected += bytes
        }
        try f.close()
        return expected
    }

    func testAppendsInsideTheLastChunkAreRecordsThatReadBackAfterReopening() throws {
        XCTAssertEqual(layout.version, 5, "new files are version 5")
        let env = try TestEnvironment()
        let path = env.path("records")
        let expected = try fileWithRecords(path, base: 1000, appends: [1, 100, 2000, 7], env)
        let end = try XCTUnwrap(shape(path))
        XCTAssertEqual(end.size, Int64(expected.count))
        XCTAssertEqual(end.shape, TailShape(records: 4, recordBytes: 2108))
        XCTAssertEqual(fileSize(path), layout.physicalSize(forPlaintextSize: end.size, shape: end.shape))
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try r.readAll(), expected)
        XCTAssertEqual(try r.pread(count: 50, at: 1095), Array(expected[1095..<1145]), "across two records")
        XCTAssertEqual(try r.bytesAfterAuthenticatedEnd, 0)
        XCTAssertFalse(try r.endRestoredFromTailCopy)
        try r.close()
        XCTAssertEqual(try SecureFileSystem.lstat(path).st_size, off_t(expected.count), "lstat reads the footer")
    }

    /// A file of records changed every other way: each change seals the records into one chunk
    /// first (the footer then names none), and the contents are what POSIX gives.
    func testEveryOtherChangeSealsTheRecordsIntoOneChunkFirst() throws {
        let env = try TestEnvironment()
        let changes: [(String, (SecureFile, inout [UInt8]) throws -> Void)] = [
            ("overwrite", { f, e in _ = try f.pwrite([9, 9, 9], at: 1050); e.replaceSubrange(1050..<1053, with: [9, 9, 9]) }),
            ("shrink", { f, e in try f.truncate(to: 1150); e.removeSubrange(1150...) }),
            ("grow", { f, e in try f.truncate(to: 9000); e += [UInt8](repeating: 0, count: 9000 - e.count) }),
            ("fill the chunk", { f, e in let b = self.plaintext(4000, 9); _ = try f.pwrite(b, at: Int64(e.count)); e += b }),
            ("hole", { f, e in _ = try f.pwrite([1], at: 20000); e += [UInt8](repeating: 0, count: 20000 - e.count) + [1] }),
            ("sync", { f, _ in try f.sync() }),
        ]
        for (name, change) in changes {
            let path = env.path(name.replacingOccurrences(of: " ", with: "-"))
            var expected = try fileWithRecords(path, base: 1000, appends: [100, 100, 100], env)
            XCTAssertEqual(try XCTUnwrap(shape(path)).shape.records, 3, name)
            let f = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            try change(f, &expected)
            try f.close()
            XCTAssertEqual(try XCTUnwrap(shape(path), name).shape.records, 0, "\(name): sealed whole")
            XCTAssertEqual(try readBack(path, env), expected, name)
        }
    }

    /// A coordinated handle's sync (the record lock held exclusively) seals records another handle
    /// left into one chunk, so its tail copy holds the end; a read-only coordinated handle's sync
    /// changes nothing (it cannot write) and still reads them.
    func testACoordinatedSyncSealsTheRecordsWhole() throws {
        let env = try TestEnvironment()
        let path = env.path("coordinated")
        let expected = try fileWithRecords(path, base: 1000, appends: [100, 100], env)
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: .processes)
        try r.sync()
        XCTAssertEqual(try r.readAll(), expected)
        try r.close()
        XCTAssertEqual(try XCTUnwrap(shape(path)).shape.records, 2, "a read-only sync writes nothing")
        let f = try SecureFile.open(path, flags: O_RDWR, services: env.services, sharing: .processes)
        try f.sync()
        try f.close()
        XCTAssertEqual(try XCTUnwrap(shape(path)).shape.records, 0)
        XCTAssertEqual(try readBack(path, env), expected)
    }

    /// The file at `path` opens restored to the `size` bytes it had at its last sync (reported), reads
    /// them, and takes an append.
    func assertBackAtTheSyncAndTakingAChange(_ path: String, size: Int, _ env: TestEnvironment,
                                             file: StaticString = #filePath, line: UInt = #line) throws {
        let f = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        XCTAssertTrue(try f.endRestoredFromTailCopy, file: file, line: line)
        XCTAssertEqual(try f.size, Int64(size), file: file, line: line)
        XCTAssertEqual(try f.readAll(), plaintext(size), file: file, line: line)
        _ = try f.pwrite([1], at: Int64(size))
        try f.close()
        XCTAssertEqual(try readBack(path, env), plaintext(size) + [1], file: file, line: line)
    }

    /// Version 5's 40-byte trailer spans two sectors at some chunk-aligned ends (12,288 bytes: at
    /// 20,976, 496 bytes into a sector). Synced there, then appended to: a power loss that kept the
    /// new end and the sector after the old trailer's head, not that head, leaves the new chunk's
    /// head old and both trailers' way broken. The file returns to its last sync (the copy of the
    /// aligned end, a trailer alone), visibly, and takes changes. (Review of stop 42: it refused them.)
    func testAnAppendOverATornTrailerAtAnAlignedEndReturnsToTheSync() throws {
        let env = try TestEnvironment()
        let path = env.path("aligned")
        let alignedEnd = layout.physicalSize(forPlaintextSize: 12_288)
        XCTAssertNotEqual((alignedEnd - Int64(layout.trailerSize)) / 512, (alignedEnd - 1) / 512, "its trailer spans two sectors")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try f.pwrite(plaintext(12_288), at: 0)
        try f.sync()
        let before = readWholeFile(path)
        _ = try f.pwrite(plaintext(100, 3), at: 12_288)
        try f.close()
        let oldTrailer = Int(layout.physicalSize(forPlaintextSize: 12_288)) - layout.trailerSize
        writeWholeFile(path, withSectorFrom(before, readWholeFile(path), at: oldTrailer))
        try assertBackAtTheSyncAndTakingAChange(path, size: 12_288, env)
    }

    /// The same torn append more than one chunk after the last sync (synced at 4,000 bytes, then
    /// two chunks appended unsynced): no copy holds the aligned end. The file had it in place, every
    /// chunk below it authenticating, so it returns to it, visibly, with the unsynced chunks
    /// below it kept, and takes changes; the next change seals a trailer there (the cut's copy and
    /// barriers) and cuts the failing chunk off. (The known gap of stop 42: it stayed at its new
    /// length, that chunk unreadable, and refused appends.)
    func testAnAppendOverATornTrailerAtAnAlignedEndChunksAfterTheSyncReturnsToThatEnd() throws {
        let env = try TestEnvironment()
        // Also through coordinated handles, which check the end again under the record lock.
        for sharing in [SecureFile.Sharing.thisProcess, .processes] {
            let path = env.path("aligned-later-\(sharing)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
            _ = try f.pwrite(plaintext(4_000), at: 0)
            try f.sync()
            _ = try f.pwrite(Array(plaintext(12_288)[4_000...]), at: 4_000)
            let before = readWholeFile(path)
            _ = try f.pwrite(plaintext(100, 3), at: 12_288)
            try f.close()
            let oldTrailer = Int(layout.physicalSize(forPlaintextSize: 12_288)) - layout.trailerSize
            writeWholeFile(path, withSectorFrom(before, readWholeFile(path), at: oldTrailer))
            let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: sharing)
            XCTAssertTrue(try r.endRestoredFromTailCopy, "reported (\(sharing))")
            XCTAssertEqual(try r.size, 12_288)
            XCTAssertEqual(try r.bytesAfterAuthenticatedEnd, 100 + Int64(layout.chunkOverhead), "the failing chunk")
            XCTAssertEqual(try r.readAll(), plaintext(12_288))
            try r.close()
            XCTAssertEqual(Int64(readWholeFile(path).count), layout.physicalSize(forPlaintextSize: 12_388), "a read-only open writes nothing")
            let g = try SecureFile.open(path, flags: O_RDWR, services: env.services, sharing: sharing)
            XCTAssertTrue(try g.endRestoredFromTailCopy, "\(sharing)")
            XCTAssertEqual(try g.readAll(), plaintext(12_288))
            _ = try g.pwrite([1], at: 12_288)
            XCTAssertFalse(try g.endRestoredFromTailCopy, "\(sharing)")
            try g.close()
            XCTAssertEqual(try readBack(path, env), plaintext(12_288) + [1], "\(sharing)")
            XCTAssertEqual(Int64(readWholeFile(path).count), layout.physicalSize(forPlaintextSize: 12_289))
        }
    }

    /// Damage, not a torn append, of a last chunk starting at such a boundary: taken back to the
    /// boundary only when no sync covered a byte of it. Synced (in place and in the sync's copy)
    /// and damaged in place, the copy gives it back at its length; both damaged, it stays at its
    /// length, reading as corrupt, and a whole-chunk write repairs it — the end never moves over
    /// synced bytes. Not synced: back at the boundary, reported.
    func testADamagedLastChunkAtSuchABoundaryMovesTheEndOnlyOverUnsyncedBytes() throws {
        let env = try TestEnvironment()
        let size = 12_288 + 777
        let chunkHead = Int(layout.chunkOffset(3))
        for synced in [true, false] {
            let path = env.path("damaged-\(synced)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
            _ = try f.pwrite(plaintext(size), at: 0)
            if synced { try f.sync() }
            try f.close()
            var bytes = readWholeFile(path)
            bytes[chunkHead + 20] ^= 0x40
            writeWholeFile(path, bytes)
            let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertTrue(try r.endRestoredFromTailCopy, "synced: \(synced)")
            XCTAssertEqual(try r.size, Int64(synced ? size : 12_288), "synced: \(synced)")
            XCTAssertEqual(try r.readAll(), Array(plaintext(size).prefix(synced ? size : 12_288)))
            try r.close()
            guard synced else { continue }
            // The sync's copy damaged too: nothing to take; the length stands.
            let copies = (0..<2).map { Int(layout.tailCopyOffset($0)) + TailCopyDescriptor.size + 20 }
            for at in copies { bytes[at] ^= 0x40 }
            writeWholeFile(path, bytes)
            let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            XCTAssertFalse(try g.endRestoredFromTailCopy)
            XCTAssertEqual(try g.size, Int64(size))
            XCTAssertThrowsError(try g.pread(count: 10, at: 12_288))
            _ = try g.pwrite(plaintext(777, 9), at: 12_288)
            try g.close()
            XCTAssertEqual(try readBack(path, env), plaintext(12_288) + plaintext(777, 9))
        }
    }

    /// A cut to such a boundary with chunks after it: its record and its copy are on the device
    /// before its trailer, which a power loss tears (only the sector after the trailer's head
    /// written back) before the cut. The old end still authenticates around the chunk the trailer's
    /// tail went over; the record and the copy complete the cut instead of leaving that chunk
    /// unreadable inside the old length. A record an attacker sets on an intact file changes nothing.
    func testACutWhoseTrailerATornWriteSplitCompletesFromItsCopy() throws {
        let env = try TestEnvironment()
        let path = env.path("cut")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try f.pwrite(plaintext(40_000), at: 0)
        try f.sync()
        try f.close()
        let before = readWholeFile(path)
        let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        try g.truncate(to: 12_288)
        try g.close()
        let after = readWholeFile(path)
        // The state before the `ftruncate`: everything of the old file, with the header's record of
        // the cut, the cut's copy in its slot, and the trailer's second sector only.
        var torn = before
        torn.replaceSubrange(128..<Int(layout.dataOffset), with: after[128..<Int(layout.dataOffset)])
        let trailerAt = Int(layout.physicalSize(forPlaintextSize: 12_288)) - layout.trailerSize
        let second = (trailerAt / 512 + 1) * 512
        torn.replaceSubrange(second..<trailerAt + layout.trailerSize, with: after[second..<trailerAt + layout.trailerSize])
        torn[108] = 1
        torn.replaceSubrange(112..<120, with: withUnsafeBytes(of: UInt64(12_288).bigEndian, Array.init))
        writeWholeFile(path, torn)
        try assertBackAtTheSyncAndTakingAChange(path, size: 12_288, env)

        // An attacker's record on the intact file: no effect.
        var forged = before
        forged[108] = 1
        forged.replaceSubrange(112..<120, with: withUnsafeBytes(of: UInt64(12_288).bigEndian, Array.init))
        writeWholeFile(path, forged)
        let k = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertFalse(try k.endRestoredFromTailCopy)
        XCTAssertEqual(try k.readAll(), plaintext(40_000))
        try k.close()
    }

    /// At most `TailShape.maximumRecords` records: the next append seals the chunk whole again.
    func testRecordsAreBoundedAndTheNextAppendSealsThemWhole() throws {
        let env = try TestEnvironment()
        let path = env.path("bounded")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services)
        var expected = plaintext(10)
        _ = try f.write(expected)
        var most = 0
        for k in 0..<150 {
            let b = plaintext(10, k)
            _ = try f.write(b)
            expected += b
            most = max(most, try XCTUnwrap(shape(path)).shape.records)
        }
        try f.close()
        XCTAssertEqual(most, TailShape.maximumRecords)
        XCTAssertEqual(try readBack(path, env), expected)
    }

    /// Records moved, swapped, resized or altered anywhere are never read as data: every single-bit
    /// flip of the end region (a base chunk, three records, the trailer and its footer) makes the
    /// file fail to read or visibly return to an earlier end; none reads other bytes silently.
    func testEveryBitFlipOfTheRecordsIsDetected() throws {
        let env = try TestEnvironment()
        let path = env.path("flips")
        let expected = try fileWithRecords(path, base: 300, appends: [100, 100, 100], env)
        let original = readWholeFile(path)
        let from = Int(layout.chunkOffset(0))
        var silent: [Int] = []
        for bit in stride(from: from * 8, to: original.count * 8, by: 3) {
            var bytes = original
            bytes[bit / 8] ^= UInt8(1 << (bit % 8))
            writeWholeFile(path, bytes)
            guard let f = try? SecureFile.open(path, flags: O_RDONLY, services: env.services) else { continue }
            defer { try? f.close() }
            guard let got = try? f.readAll() else { continue }
            let reported = (try? f.endRestoredFromTailCopy) == true || ((try? f.bytesAfterAuthenticatedEnd) ?? 0) > 0
            if !reported && got != expected { silent.append(bit) }
        }
        XCTAssertEqual(silent, [], "bits whose flip reads as other bytes, unreported")
    }

    /// Two records of the same length swapped, or one record copied over another: their AAD binds
    /// each to its offset in the chunk, so the chunk fails to read.
    func testSwappedOrCopiedRecordsAreDetected() throws {
        let env = try TestEnvironment()
        let path = env.path("swapped")
        _ = try fileWithRecords(path, base: 300, appends: [100, 100, 100], env)
        let original = readWholeFile(path)
        let record = 100 + TailShape.recordOverhead
        let first = Int(layout.chunkOffset(0)) + 300 + layout.chunkOverhead
        let r1 = Array(original[first..<first + record]), r2 = Array(original[first + record..<first + 2 * record])
        for (name, a, b) in [("swapped", r2, r1), ("copied", r1, r1)] {
            var bytes = original
            bytes.replaceSubrange(first..<first + 2 * record, with: a + b)
            writeWholeFile(path, bytes)
            let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertThrowsError(try f.readAll(), name) { e in XCTAssertEqual((e as? SecureFileError)?.code, .badKeyOrCorruptData, name) }
            try f.close()
        }
    }
}
