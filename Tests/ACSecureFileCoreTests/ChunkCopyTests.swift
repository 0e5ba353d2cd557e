#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
import ACSystemCalls
import ACSecureTestSupport
@testable import ACSecureFileCore

/// Chunk copies (format version 4, kind 3; docs/FORMAT.md "A chunk copy"): an overwrite that
/// rewrites a chunk in part across two pages writes that chunk into a slot first, so a kill that
/// cuts the rewrite between its pages leaves a chunk that reads. The kill sweeps
/// (`WriteShapeCrashTests`, `Benchmarks/c/kill-tear.c` in the C suite) check the promise; these
/// pin the mechanism: which writes get a copy, that a torn chunk reads from it on every path, that
/// a stale copy is never taken, and that a copy is written back before anything goes over it.
final class ChunkCopyTests: XCTestCase {
    let layout = FileLayout()
    let page = 4096

    func plaintext(_ n: Int, _ seed: Int = 0) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ seed) } }

    func kindedDescriptor(_ path: String, _ slot: Int) -> (TailCopyDescriptor.Kind, UInt64, Int64)? {
        let bytes = readWholeFile(path)
        let at = Int(layout.tailCopyOffset(slot))
        guard bytes.count >= at + TailCopyDescriptor.size else { return nil }
        return bytes[at..<at + TailCopyDescriptor.size].withUnsafeBytes { TailCopyDescriptor.parse($0) }.map { ($0.kind, $0.sequence, $0.size) }
    }

    /// A new secure file at `path` holding `plaintext(size)`, open for reading and writing.
    func newFile(_ path: String, size: Int, _ env: TestEnvironment,
                 wholeChunkOverwrites: SecureFile.WholeChunkOverwrites = .chunkCopy) throws -> SecureFile {
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services,
                                    wholeChunkOverwrites: wholeChunkOverwrites)
        _ = try f.pwrite(plaintext(size), at: 0)
        return f
    }

    /// A new file of `plaintext(size)` (synced when `synced`), then `plaintext(count, seed)`
    /// written at `offset` and the file closed: its bytes before and after that write, and the
    /// plaintext it then holds.
    func overwrittenFile(_ path: String, size: Int, _ count: Int, seed: Int, at offset: Int, synced: Bool = false,
                         _ env: TestEnvironment) throws -> (before: [UInt8], after: [UInt8], expected: [UInt8]) {
        let f = try newFile(path, size: size, env)
        if synced { try f.sync() }
        let before = readWholeFile(path)
        _ = try f.pwrite(plaintext(count, seed), at: Int64(offset))
        try f.close()
        var expected = plaintext(size)
        expected.replaceSubrange(offset..<offset + count, with: plaintext(count, seed))
        return (before, readWholeFile(path), expected)
    }

    /// The plaintext of the file at `path`, read through a fresh read-only handle.
    func readBack(_ path: String, _ env: TestEnvironment) throws -> [UInt8] {
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let bytes = try f.readAll()
        try f.close()
        return bytes
    }

    /// The `pwrite`s (offset, count) of `body`.
    func pwrites(_ body: () throws -> Void) rethrows -> [(offset: Int64, count: Int)] {
        final class Writes: @unchecked Sendable { var list: [(offset: Int64, count: Int)] = [] }
        let writes = Writes()
        SecureFileTesting.transferFaultInjector = { call, count, offset in
            if call == .pwrite { writes.list.append((offset, count)) }
            return nil
        }
        defer { SecureFileTesting.transferFaultInjector = nil }
        try body()
        return writes.list
    }

    /// What a kill leaves when it stops the in-place rewrite of chunk `index` at its first page
    /// boundary: the chunk's bytes before it as `after` has them, from it on as `before` had them.
    func tornAtAPage(_ index: Int64, before: [UInt8], after: [UInt8]) -> [UInt8] {
        let start = Int(layout.chunkOffset(index))
        let boundary = (start / page + 1) * page
        let end = min(start + layout.physicalChunkSize, before.count)
        precondition(boundary < end, "chunk \(index) lies in one page")
        var torn = after
        torn.replaceSubrange(boundary..<end, with: before[boundary..<end])
        return torn
    }

    /// Which writes copy a chunk first: a chunk rewritten in part (each of the two an overwrite
    /// keeps old bytes of); a chunk rewritten whole, however many the write rewrites, unless every
    /// handle said `.inPlace`; never a version 3 file (no slots). Each copied chunk is written in a
    /// `pwrite` of its own, right after its copy.
    func testAnOverwriteCopiesEachChunkATearWouldCostFirst() throws {
        let env = try TestEnvironment()
        let path = env.path("shapes")
        let f = try newFile(path, size: 40_900, env)  // its short last chunk spans two pages
        let slots = [layout.tailCopyOffset(0), layout.tailCopyOffset(1)]
        func isChunk(_ w: (offset: Int64, count: Int), _ first: Int64, _ count: Int) -> Bool {
            w.offset == layout.chunkOffset(first) && w.count == count * layout.physicalChunkSize
        }

        var w = try pwrites { _ = try f.pwrite([1, 2, 3], at: 3 * 4096 + 100) }
        XCTAssertEqual(w.count, 2, "\(w)")
        XCTAssertTrue(slots.contains(w[0].offset) && isChunk(w[1], 3, 1), "inside one chunk: its copy, then the chunk: \(w)")
        let newest = [kindedDescriptor(path, 0), kindedDescriptor(path, 1)].compactMap { $0 }.max { $0.1 < $1.1 }
        XCTAssertEqual(newest?.0, .chunk)
        XCTAssertEqual(newest?.2, 4 * 4096, "the descriptor says where the copied chunk ends")

        w = try pwrites { _ = try f.pwrite(plaintext(100, 1), at: 5 * 4096 - 50) }
        XCTAssertEqual(w.count, 4, "\(w)")
        if w.count == 4 {
            XCTAssertTrue(slots.contains(w[0].offset) && isChunk(w[1], 4, 1) && slots.contains(w[2].offset) && isChunk(w[3], 5, 1),
                          "across two chunks: each one's copy before it: \(w)")
            XCTAssertEqual(w[0].offset, w[2].offset, "the second copy goes over the first (not over the sync's slot)")
        }

        /// Each chunk after its own copy, in order, the copies in one slot (not the sync's).
        func eachChunkAfterItsCopy(_ w: [(offset: Int64, count: Int)], first: Int64, chunks: Int) -> Bool {
            w.count == 2 * chunks && (0..<chunks).allSatisfy { j in
                w[2 * j].offset == w[0].offset && slots.contains(w[2 * j].offset) && w[2 * j + 1].offset == layout.chunkOffset(first + Int64(j))
            }
        }
        w = try pwrites { _ = try f.pwrite(plaintext(9000, 2), at: 3000) }
        XCTAssertTrue(eachChunkAfterItsCopy(w, first: 0, chunks: 3), "two chunks in part and a whole one between: each copied: \(w)")

        w = try pwrites { _ = try f.pwrite(plaintext(8192, 3), at: 2 * 4096) }
        XCTAssertEqual(w.count, 4, "\(w)")
        if w.count == 4 {
            XCTAssertTrue(slots.contains(w[0].offset) && isChunk(w[1], 2, 1) && slots.contains(w[2].offset) && isChunk(w[3], 3, 1),
                          "two whole chunks: each one's copy before it: \(w)")
        }
        w = try pwrites { _ = try f.pwrite(plaintext(4096, 4), at: 6 * 4096) }
        XCTAssertEqual(w.count, 2, "\(w)")
        XCTAssertTrue(w.count == 2 && slots.contains(w[0].offset) && isChunk(w[1], 6, 1), "a whole chunk (a page): its copy first: \(w)")
        w = try pwrites { _ = try f.pwrite(plaintext(3 * 4096, 5), at: 4096) }
        XCTAssertTrue(eachChunkAfterItsCopy(w, first: 1, chunks: 3), "three whole chunks: each copied: \(w)")

        // A handle that rewrites whole chunks in place: no copy, once no handle of the process wants them.
        let inPlace = try SecureFile.open(path, flags: O_RDWR, services: env.services, wholeChunkOverwrites: .inPlace)
        w = try pwrites { _ = try inPlace.pwrite(plaintext(4096, 6), at: 6 * 4096) }
        XCTAssertEqual(w.count, 2, "another handle of the process still wants copies: \(w)")

        w = try pwrites { _ = try f.pwrite([9], at: 40_890) }
        XCTAssertEqual(w.count, 2, "inside the short last chunk: \(w)")
        XCTAssertTrue(slots.contains(w[0].offset), "\(w)")
        XCTAssertEqual(try f.pread(count: 40_900, at: 0).count, 40_900)
        try f.close()
        try inPlace.close()
        let alone = try SecureFile.open(path, flags: O_RDWR, services: env.services, wholeChunkOverwrites: .inPlace)
        w = try pwrites { _ = try alone.pwrite(plaintext(4096, 7), at: 6 * 4096) }
        XCTAssertEqual(w.count, 1, "every handle said .inPlace: \(w)")
        w = try pwrites { _ = try alone.pwrite([1], at: 6 * 4096 + 5) }
        XCTAssertEqual(w.count, 2, "a chunk rewritten in part is copied all the same: \(w)")
        w = try pwrites { _ = try alone.pwrite(plaintext(9000, 8), at: 3000) }
        XCTAssertEqual(w.count, 4, "\(w)")
        if w.count == 4 {
            XCTAssertTrue(slots.contains(w[0].offset) && isChunk(w[1], 0, 2) && slots.contains(w[2].offset) && isChunk(w[3], 2, 1),
                          ".inPlace: the partial ends copied, the whole chunk written with the first: \(w)")
        }
        var all = plaintext(40_900)
        for (at, bytes) in [(3 * 4096 + 100, [1, 2, 3] as [UInt8]), (5 * 4096 - 50, plaintext(100, 1)), (3000, plaintext(9000, 2)),
                            (2 * 4096, plaintext(8192, 3)), (4096, plaintext(3 * 4096, 5)), (40_890, [9]),
                            (6 * 4096, plaintext(4096, 7)), (6 * 4096 + 5, [1]), (3000, plaintext(9000, 8))] {
            all.replaceSubrange(at..<at + bytes.count, with: bytes)
        }
        XCTAssertEqual(try alone.readAll(), all)
        try alone.close()

        let v3 = env.path("v3")
        writeWholeFile(v3, readWholeFile(FormatVectorTests.directory + "/v3/multi-chunk.acsf"))
        let g = try SecureFile.open(v3, flags: O_RDWR, services: FixedKeyProvider(kek: try FormatVectorTests.kek()))
        XCTAssertGreaterThan(try g.size, 4096)
        w = try pwrites { _ = try g.pwrite([1, 2, 3], at: 100) }
        XCTAssertEqual(w.count, 1, "a version 3 file has no slots: \(w)")
        try g.close()

        // A write large enough to be sealed by several threads: every chunk it rewrites in place
        // is copied first: its partial ends in batches of their own, the whole chunks as they are sealed.
        let large = env.path("large")
        let big = try SecureFile.open(large, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services)
        _ = try big.pwrite(plaintext(1 << 20), at: 0)
        w = try pwrites { _ = try big.pwrite(plaintext(300_000, 4), at: 1000) }
        let lastChunk = Int64((1000 + 300_000) / 4096)
        XCTAssertTrue(eachChunkAfterItsCopy(w, first: 0, chunks: Int(lastChunk) + 1), "every chunk after its copy: \(w.count) writes")
        var expected = plaintext(1 << 20)
        expected.replaceSubrange(1000..<301_000, with: plaintext(300_000, 4))
        XCTAssertEqual(try big.readAll(), expected)
        try big.close()
    }

    /// A kill that cut the rewrite between its pages: the chunk reads as the call made it, on the
    /// exclusive path and the concurrent one (which hands it to the exclusive path), the end is the
    /// file's own (nothing reported as restored), and the file takes changes. The same for the
    /// last chunk, full or short, which the end check at open reads: the last sync's copy, of a
    /// shorter end in that chunk, must not be taken for it.
    func testAChunkTornByAKillReadsFromItsCopy() throws {
        let env = try TestEnvironment()
        for (size, index) in [(40_000, Int64(3)), (12_288, Int64(2)), (11_992, Int64(2))] {
            let path = env.path("torn-\(size)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services)
            _ = try f.pwrite(Array(plaintext(size)[0..<size - 1000]), at: 0)
            try f.sync()
            _ = try f.pwrite(Array(plaintext(size)[size - 1000..<size]), at: Int64(size - 1000))
            // An append inside the last chunk is a record (version 5), sealed into the chunk before
            // the overwrite changes it; a sync does that now, so the tear below mixes two layouts alike.
            try f.sync()
            var expected = plaintext(size)
            let before = readWholeFile(path)
            let at = Int(index) * 4096 + 500
            _ = try f.pwrite(plaintext(300, 9), at: Int64(at))
            expected.replaceSubrange(at..<at + 300, with: plaintext(300, 9))
            try f.close()
            let torn = tornAtAPage(index, before: before, after: readWholeFile(path))
            XCTAssertNotEqual(torn, readWholeFile(path))
            writeWholeFile(path, torn)

            let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            XCTAssertEqual(try g.size, Int64(size), "\(size)")
            XCTAssertFalse(try g.endRestoredFromTailCopy, "\(size)")
            XCTAssertEqual(try g.bytesAfterAuthenticatedEnd, 0, "\(size)")
            XCTAssertEqual(try g.pread(count: 4096, at: index << 12), Array(expected[Int(index) * 4096..<min(size, Int(index + 1) * 4096)]),
                           "\(size): the torn chunk, on the concurrent path")
            XCTAssertEqual(try g.readAll(), expected, "\(size)")
            _ = try g.pwrite([7], at: Int64(size))
            expected.append(7)
            try g.close()
            XCTAssertEqual(try readBack(path, env), expected, "\(size): after an append")
        }
    }

    /// A kill that cut the rewrite of a chunk written whole between its pages (a database's page:
    /// one chunk, or the second of two): the chunk reads as the call made it, from its copy. With
    /// `.inPlace` (no copy) it fails as corrupt, never reads otherwise, and a whole-chunk write
    /// repairs it.
    func testAWholeChunkTornByAKillReadsFromItsCopy() throws {
        let env = try TestEnvironment()
        for (count, at, torn) in [(4096, 2 * 4096, Int64(2)), (8192, 4096, Int64(2))] {
            let path = env.path("whole-\(count)")
            let (before, after, expected) = try overwrittenFile(path, size: 30_000, count, seed: 4, at: at, synced: true, env)
            writeWholeFile(path, tornAtAPage(torn, before: before, after: after))
            let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            XCTAssertFalse(try g.endRestoredFromTailCopy)
            XCTAssertEqual(try g.readAll(), expected, "\(count) bytes at \(at), chunk \(torn) torn")
            _ = try g.pwrite([1], at: 30_000)
            try g.close()
            XCTAssertEqual(try readBack(path, env), expected + [1], "\(count): after an append")
        }

        let path = env.path("whole-in-place")
        let f = try newFile(path, size: 30_000, env, wholeChunkOverwrites: .inPlace)
        try f.sync()
        let before = readWholeFile(path)
        _ = try f.pwrite(plaintext(4096, 4), at: 2 * 4096)
        try f.close()
        writeWholeFile(path, tornAtAPage(2, before: before, after: readWholeFile(path)))
        let g = try SecureFile.open(path, flags: O_RDWR, services: env.services, wholeChunkOverwrites: .inPlace)
        XCTAssertThrowsError(try g.pread(count: 4096, at: 2 * 4096)) { error in
            XCTAssertEqual((error as? SecureFileError)?.code, .badKeyOrCorruptData)
        }
        XCTAssertEqual(try g.pread(count: 8192, at: 0), Array(plaintext(30_000)[0..<8192]), "the other chunks read")
        _ = try g.pwrite(plaintext(4096, 5), at: 2 * 4096)
        try g.close()
        var expected = plaintext(30_000)
        expected.replaceSubrange(2 * 4096..<3 * 4096, with: plaintext(4096, 5))
        XCTAssertEqual(try readBack(path, env), expected, "a whole-chunk write repairs it")
    }

    /// A power loss tears a rewrite at sectors, in any order: the chunk in place with its first
    /// sector (the head) still old and any one later sector new reads from the copy too, and with
    /// no sector new it is the old chunk, whole. With only the head compared (a mutant), the first
    /// case fails.
    func testAChunkTornByAPowerLossReadsFromItsCopyWhenAnySectorOfTheWriteIsThere() throws {
        let env = try TestEnvironment()
        let path = env.path("sectors")
        let (before, after, expected) = try overwrittenFile(path, size: 40_000, 300, seed: 9, at: 3 * 4096 + 500, env)
        let start = Int(layout.chunkOffset(3)), end = start + layout.physicalChunkSize
        let sectors = stride(from: start / 512 * 512, to: end, by: 512).map { max($0, start)..<min($0 + 512, end) }
        XCTAssertGreaterThanOrEqual(sectors.count, 9)
        for (k, new) in sectors.enumerated().dropFirst() {
            var torn = after  // the copy is down
            torn.replaceSubrange(start..<end, with: before[start..<end])
            torn.replaceSubrange(new, with: after[new])  // one sector of the write, the head old
            writeWholeFile(path, torn)
            let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try g.pread(count: 4096, at: 3 * 4096), Array(expected[3 * 4096..<4 * 4096]), "sector \(k) of the write alone")
            try g.close()
        }
    }

    /// A copy is of one write: taken only when a sector's worth of the chunk in place is the
    /// copy's (every write has a fresh nonce). A chunk rewritten whole since (in place, no copy), then
    /// damaged, fails: the copy's older version is never returned for it.
    func testAStaleChunkCopyIsNeverTaken() throws {
        let env = try TestEnvironment()
        let path = env.path("stale")
        let f = try newFile(path, size: 20_000, env, wholeChunkOverwrites: .inPlace)
        _ = try f.pwrite([1, 2, 3], at: 4096 + 10)  // chunk 1 in part: its copy
        _ = try f.pwrite(plaintext(4096, 5), at: 4096)  // chunk 1 whole, in place: no copy
        try f.close()
        var bytes = readWholeFile(path)
        let middle = Int(layout.chunkOffset(1)) + 2000
        bytes[middle] ^= 0x40
        writeWholeFile(path, bytes)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertThrowsError(try g.pread(count: 4096, at: 4096)) { error in
            XCTAssertEqual((error as? SecureFileError)?.code, .badKeyOrCorruptData)
        }
        XCTAssertEqual(try g.pread(count: 4096, at: 0), Array(plaintext(20_000)[0..<4096]))
        try g.close()
    }

    /// A torn chunk whose copy is the newest (its writer was killed) is written back in place
    /// before another copy goes over the slot: by an overwrite of another chunk, by a sync after an
    /// append, and by an overwrite after a sync and a write that needed no copy.
    func testAChunkCopyIsWrittenBackBeforeACopyGoesOverIt() throws {
        let env = try TestEnvironment()
        for next in ["overwrite", "sync", "sync-whole-overwrite"] {
            let path = env.path("settle-\(next)")
            let written = try overwrittenFile(path, size: 30_000, 200, seed: 3, at: 2 * 4096 + 1000, synced: true, env)
            var expected = written.expected
            writeWholeFile(path, tornAtAPage(2, before: written.before, after: written.after))

            // A whole chunk rewritten in place: a write that needs no copy.
            let g = try SecureFile.open(path, flags: O_RDWR, services: env.services,
                                        wholeChunkOverwrites: next == "sync-whole-overwrite" ? .inPlace : .chunkCopy)
            if next == "overwrite" {
                _ = try g.pwrite([4, 5], at: 5 * 4096 + 7)
                expected.replaceSubrange(5 * 4096 + 7..<5 * 4096 + 9, with: [4, 5])
            } else if next == "sync-whole-overwrite" {
                try g.sync()
                _ = try g.pwrite(plaintext(4096, 8), at: 4 * 4096)
                expected.replaceSubrange(4 * 4096..<5 * 4096, with: plaintext(4096, 8))
                _ = try g.pwrite([4, 5], at: 5 * 4096 + 7)
                expected.replaceSubrange(5 * 4096 + 7..<5 * 4096 + 9, with: [4, 5])
            } else {
                _ = try g.pwrite([6], at: 30_000)
                expected.append(6)
                try g.sync()
            }
            try g.close()
            let descriptors = [kindedDescriptor(path, 0), kindedDescriptor(path, 1)].compactMap { $0 }
            XCTAssertFalse(descriptors.contains { $0.0 == .chunk && $0.2 == 3 * 4096 }, "\(next): the copy of chunk 2 was written over")
            XCTAssertEqual(try readBack(path, env), expected, "\(next): chunk 2 was written back before its copy went")
        }
    }

    /// A rewrite whose `pwrite` fails halfway (here after 2,000 bytes, then EIO) leaves its chunk
    /// torn and its copy the only whole version: the copy is settled before another copy goes over
    /// it, even when writes that need no copy come first (regression: such a write forgot it).
    func testAChunkCopyOutlivesAFailedRewrite() throws {
        let env = try TestEnvironment()
        let path = env.path("failed")
        let f = try newFile(path, size: 30_000, env, wholeChunkOverwrites: .inPlace)
        let old = plaintext(30_000)
        let torn = layout.chunkOffset(2), physical = Int64(layout.physicalChunkSize)
        final class Calls: @unchecked Sendable { var n = 0 }
        let calls = Calls()
        SecureFileTesting.transferFaultInjector = { call, count, offset in
            guard call == .pwrite, offset >= torn, offset < torn + physical else { return nil }
            calls.n += 1
            return calls.n == 1 ? .short(2000) : .fail(EIO)
        }
        XCTAssertThrowsError(try f.pwrite(plaintext(200, 3), at: 2 * 4096 + 1000))
        SecureFileTesting.transferFaultInjector = nil
        XCTAssertEqual(calls.n, 2, "the rewrite of chunk 2 was cut after 2,000 bytes")
        var new = old
        new.replaceSubrange(2 * 4096 + 1000..<2 * 4096 + 1200, with: plaintext(200, 3))
        _ = try f.pwrite(plaintext(4096, 8), at: 4 * 4096)  // a whole chunk, in place: no copy
        _ = try f.pwrite([4, 5], at: 5 * 4096 + 7)  // in part: a copy, over chunk 2's
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let chunk2 = try g.pread(count: 4096, at: 2 * 4096)
        XCTAssertTrue(chunk2 == Array(old[2 * 4096..<3 * 4096]) || chunk2 == Array(new[2 * 4096..<3 * 4096]),
                      "chunk 2 reads as before the failed write or as it made it")
        try g.close()
    }

    /// An attacker who edits the chunk copy's slot of a chunk a kill tore, then keeps using the
    /// file: every bit flipped (a sample of every 5th bit of the descriptor and the copy) leaves
    /// no copy — the torn chunk fails to read, never reads otherwise — and every other chunk reads,
    /// and an append and an overwrite of that chunk (which repairs it) go on to read back.
    func testAnEditedChunkCopyIsNoCopyAndTheFileGoesOn() throws {
        let env = try TestEnvironment()
        let path = env.path("edited")
        let written = try overwrittenFile(path, size: 20_000, 100, seed: 6, at: 2 * 4096 + 10, env)
        var expected = written.expected
        let torn = tornAtAPage(2, before: written.before, after: written.after)
        let copySlot = [0, 1].first { slot in
            let at = Int(layout.tailCopyOffset(slot))
            return torn[at..<at + TailCopyDescriptor.size].withUnsafeBytes { TailCopyDescriptor.parse($0) }?.kind == .chunk
        }
        guard let slot = copySlot else { return XCTFail("no chunk copy in the slots") }
        let from = Int(layout.tailCopyOffset(slot))
        let bits = (TailCopyDescriptor.size + layout.physicalChunkSize) * 8
        var flips = 0
        for bit in stride(from: 0, to: bits, by: 5) {
            var edited = torn
            edited[from + bit / 8] ^= UInt8(1 << (bit % 8))
            writeWholeFile(path, edited)
            let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            do {
                let got = try g.pread(count: 4096, at: 2 * 4096)
                // A flip in the descriptor's reserved or unauthenticated-but-unused bits is still no
                // other copy: what reads must be the write's own chunk.
                XCTAssertEqual(got, Array(expected[2 * 4096..<3 * 4096]), "bit \(bit): chunk 2 read otherwise")
            } catch let e as SecureFileError {
                XCTAssertEqual(e.code, .badKeyOrCorruptData, "bit \(bit)")
            }
            XCTAssertEqual(try g.pread(count: 8192, at: 0), Array(expected[0..<8192]), "bit \(bit)")
            XCTAssertEqual(try g.pread(count: 20_000 - 12_288, at: 12_288), Array(expected[12_288...]), "bit \(bit)")
            try g.close()
            flips += 1
        }
        XCTAssertGreaterThan(flips, 6000)
        // Edited, then used: an append, and an overwrite of the whole torn chunk.
        let h = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        _ = try h.pwrite([1, 2, 3], at: 20_000)
        _ = try h.pwrite(plaintext(4096, 7), at: 2 * 4096)
        expected += [1, 2, 3]
        expected.replaceSubrange(2 * 4096..<3 * 4096, with: plaintext(4096, 7))
        try h.close()
        XCTAssertEqual(try readBack(path, env), expected)
    }

    /// Regression (found by FuzzOperationSequence): a process that found the newest copy to be a
    /// chunk copy, of a chunk a cut to a chunk boundary below it was removing, took that chunk for
    /// torn once the cut's trailer lay over its head, and wrote the copy back over the trailer:
    /// the file then ended without one. A copy of a chunk the cut removes is no longer settled.
    func testACutBelowAChunkCopysChunkDoesNotWriteItBack() throws {
        let env = try TestEnvironment()
        let path = env.path("cut")
        let f = try newFile(path, size: 13_193, env)
        try f.sync()
        _ = try f.pwrite(plaintext(7563, 2), at: 0)  // chunk 1 in part: its copy is the newest
        try f.close()
        let g = try SecureFile.open(path, flags: O_WRONLY, services: env.services)
        try g.truncate(to: 4096)
        try g.close()
        XCTAssertEqual(try readBack(path, env), Array(plaintext(7563, 2)[0..<4096]))
    }

    /// Double writes (`.doubleWrite`, docs/FORMAT.md "Double write"), from the system calls: a chunk
    /// rewritten in part gets its copy, a barrier, the rewrite and a barrier (each of two such
    /// chunks; the first of an overwrite across the end); whole chunks (copied against a kill) and appends get none. The
    /// crash-state enumerator's `overwrite-double-write` checks what this buys against power loss.
    func testDoubleWritesPutEachChunkCopyAndThenItsChunkOnTheDevice() throws {
        let env = try TestEnvironment()
        let path = env.path("double")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services, partialOverwrites: .doubleWrite)
        _ = try f.pwrite(plaintext(40_900), at: 0)
        let slots = [layout.tailCopyOffset(0), layout.tailCopyOffset(1)]
        /// `body`'s file-changing calls: C a chunk copy, W a write in place, S a barrier.
        func calls(_ body: () throws -> Void) throws -> String {
            final class Calls: @unchecked Sendable { var text = "" }
            let seen = Calls()
            try SystemCallRecorder.with(SystemCallRecorder { event in
                switch event {
                case .write(_, let offset, _): seen.text += slots.contains(offset) ? "C" : "W"
                case .sync: seen.text += "S"
                default: break
                }
            }) { try body() }
            return seen.text
        }
        XCTAssertEqual(try calls { _ = try f.pwrite([1, 2, 3], at: 3 * 4096 + 100) }, "CSWS", "inside one chunk")
        XCTAssertEqual(try calls { _ = try f.pwrite(plaintext(100, 1), at: 5 * 4096 - 50) }, "CSWSCSWS", "across two chunks")
        XCTAssertEqual(try calls { _ = try f.pwrite(plaintext(8192, 3), at: 2 * 4096) }, "CWCW", "whole chunks: copies (for a kill), no barrier")
        XCTAssertFalse(try calls { _ = try f.pwrite(plaintext(100, 4), at: 40_900) }.contains("S"), "an append")
        let across = try calls { _ = try f.pwrite(plaintext(3000, 5), at: 39_000) }
        XCTAssertTrue(across.hasPrefix("CS") && across.hasSuffix("S") && across.filter { $0 == "S" }.count == 2,
                      "across the end from a full chunk rewritten in part: \(across)")
        XCTAssertEqual(try calls { _ = try f.pwrite(plaintext(2000, 6), at: 40_000) }, "CSWS",
                       "up to the end, not moving it, from a full chunk rewritten in part: in place (the trailer stays)")
        var expected = plaintext(40_900) + plaintext(100, 4)
        for (at, bytes) in [(3 * 4096 + 100, [1, 2, 3] as [UInt8]), (5 * 4096 - 50, plaintext(100, 1)), (2 * 4096, plaintext(8192, 3))] {
            expected.replaceSubrange(at..<at + bytes.count, with: bytes)
        }
        expected.replaceSubrange(39_000..<41_000, with: plaintext(2000, 5))
        expected += plaintext(3000, 5)[2000...]
        expected.replaceSubrange(40_000..<42_000, with: plaintext(2000, 6))
        XCTAssertEqual(try f.readAll(), expected)
        try f.close()

        // The slots are version 4's: an older file is refused for writing, not written without.
        let v3 = env.path("v3")
        writeWholeFile(v3, readWholeFile(FormatVectorTests.directory + "/v3/multi-chunk.acsf"))
        let services = FixedKeyProvider(kek: try FormatVectorTests.kek())
        XCTAssertThrowsError(try SecureFile.open(v3, flags: O_RDWR, services: services, partialOverwrites: .doubleWrite)) { error in
            let e = error as? SecureFileError
            XCTAssertEqual(e?.errno, EINVAL)
            XCTAssertTrue(e?.message.contains("version 3") == true && e?.message.contains("acsecure rekey") == true, "\(String(describing: e))")
        }
        let reader = try SecureFile.open(v3, flags: O_RDONLY, services: services, partialOverwrites: .doubleWrite)
        XCTAssertGreaterThan(try reader.size, 4096)
        try reader.close()
    }

    /// A double write whose barrier fails fails the call with the barrier's errno (never swallowed):
    /// at the first, before the chunk is touched (the file keeps its old bytes); at the second,
    /// after it (the call's bytes may be there, as after a failed `O_DSYNC` write). Either way every
    /// other byte reads as before and the file takes the next write.
    func testAFailedDoubleWriteBarrierFailsTheCall() throws {
        for failing in 1...2 {
            let env = try TestEnvironment()
            let path = env.path("barrier-\(failing)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services, partialOverwrites: .doubleWrite)
            let old = plaintext(40_900)
            _ = try f.pwrite(old, at: 0)
            final class Syncs: @unchecked Sendable { var count = 0 }
            let syncs = Syncs()
            SecureFileTesting.faultInjector = { call in
                guard call == .fdatasync else { return nil }
                syncs.count += 1
                return syncs.count == failing ? .fail(EIO) : nil
            }
            let at = 3 * 4096 + 100
            XCTAssertThrowsError(try f.pwrite([1, 2, 3], at: Int64(at)), "barrier \(failing)") { error in
                XCTAssertEqual((error as? SecureFileError)?.errno, EIO, "barrier \(failing)")
            }
            SecureFileTesting.faultInjector = nil
            var read = try f.readAll()
            XCTAssertEqual(read.count, old.count)
            if failing == 1 { XCTAssertEqual(read, old, "the first barrier failed: nothing was rewritten") }
            XCTAssertTrue(read[at..<at + 3] == old[at..<at + 3] || read[at..<at + 3] == [1, 2, 3], "barrier \(failing)")
            read.replaceSubrange(at..<at + 3, with: old[at..<at + 3])
            XCTAssertEqual(read, old, "every other byte is as before (barrier \(failing))")
            _ = try f.pwrite([4, 5, 6], at: Int64(at))
            try f.close()
            var expected = old
            expected.replaceSubrange(at..<at + 3, with: [4, 5, 6])
            XCTAssertEqual(try readBack(path, env), expected, "barrier \(failing)")
        }
    }
}
