#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// The tail copies of format version 4 (docs/FORMAT.md "Tail copies"): where each sync puts its copy,
/// what an open restores from one, and what it must not take. The crash-state enumerator checks the
/// promise over every crash state; these pin the mechanism and the bugs it found.
final class TailCopyTests: XCTestCase {
    let layout = FileLayout()

    /// (sequence, size) of the descriptor in `slot`, as written on disk (nil: no copy).
    func descriptor(_ path: String, _ slot: Int) -> (UInt64, Int64)? {
        kindedDescriptor(path, slot).map { ($0.1, $0.2) }
    }

    func plaintext(_ n: Int, _ seed: Int = 0) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ seed) } }

    /// Creation writes copy 0 (size 0) into slot 0; each sync that changed the end writes the next
    /// sequence into the other slot; a sync with nothing changed, or after overwrites that left the
    /// end alone, writes nothing (such an overwrite, of a chunk in part, writes a chunk copy into
    /// the other slot first, which the next sync's copy goes over).
    func testEachSyncCopiesTheEndIntoTheSlotTheNewestCopyIsNotIn() throws {
        let env = try TestEnvironment()
        let path = env.path("slots")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        XCTAssertEqual(descriptor(path, 0)?.0, 0)
        XCTAssertEqual(descriptor(path, 0)?.1, 0)
        XCTAssertNil(descriptor(path, 1))
        _ = try f.pwrite(plaintext(10_000), at: 0)
        try f.sync()
        XCTAssertEqual(descriptor(path, 1)?.0, 1)
        XCTAssertEqual(descriptor(path, 1)?.1, 10_000)
        let before = readWholeFile(path)
        try f.sync()
        _ = try f.pwrite([1, 2, 3], at: 100)  // chunk 0: the end (chunk 2) is not touched
        XCTAssertEqual(kindedDescriptor(path, 0)?.0, .chunk, "a chunk copy of chunk 0 before its rewrite in place")
        XCTAssertEqual(descriptor(path, 0)?.0, 2)
        XCTAssertEqual(descriptor(path, 0)?.1, 4096, "where the copied chunk ends")
        let withChunkCopy = readWholeFile(path)
        try f.datasync()
        XCTAssertEqual(readWholeFile(path), withChunkCopy, "no copy written when the end did not change")
        var after = withChunkCopy
        for range in [Int(layout.chunkOffset(0))..<Int(layout.chunkOffset(1)), Int(layout.tailCopyOffset(0))..<Int(layout.tailCopyOffset(1))] {
            after.replaceSubrange(range, with: before[range])
        }
        XCTAssertEqual(after, before, "the overwrite changed chunk 0 and slot 0 alone")
        _ = try f.pwrite(plaintext(100), at: 10_000)
        try f.sync()
        XCTAssertEqual(descriptor(path, 0)?.0, 4, "over the chunk copy")
        XCTAssertEqual(descriptor(path, 0)?.1, 10_100)
        XCTAssertEqual(descriptor(path, 1)?.1, 10_000, "the previous copy stays until the next sync")
        try f.close()
    }

    /// Regression (found by SQLiteCrashStateTests, sqlite-delete): a creation torn by a power loss.
    /// The file's name and its first write (the header and copy 0 of an empty file, 224 bytes)
    /// persisted, not the trailer after the slots. Slots were read only when whole, so copy 0 was
    /// not seen, no end authenticated, and the file refused every change (SQLite: "disk I/O
    /// error" on its next journal). Now the open takes copy 0: an empty file, restored and
    /// reported, that takes changes. Cut inside copy 0, it is still no secure file to build on.
    func testACreationTornAfterCopyZeroOpensEmptyAndTakesChanges() throws {
        let env = try TestEnvironment()
        let path = env.path("created")
        try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services).close()
        let created = readWholeFile(path)
        let copyZeroEnd = Int(layout.tailCopyOffset(0)) + TailCopyDescriptor.size + layout.trailerSize
        XCTAssertEqual(copyZeroEnd, 232)  // 128 + 64 + a 40-byte trailer (version 5)
        XCTAssertGreaterThan(created.count, copyZeroEnd)
        writeWholeFile(path, Array(created.prefix(copyZeroEnd)))
        let f = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        XCTAssertTrue(try f.endRestoredFromTailCopy)
        XCTAssertEqual(try f.size, 0)
        _ = try f.pwrite(plaintext(5000), at: 0)
        try f.sync()
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertFalse(try g.endRestoredFromTailCopy)
        XCTAssertEqual(try g.pread(count: 6000, at: 0), plaintext(5000))
        try g.close()

        writeWholeFile(path, Array(created.prefix(copyZeroEnd - 1)))
        let h = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        XCTAssertThrowsError(try h.pwrite([1], at: 0), "no copy whole, no end: refused")
        try h.close()
    }

    /// Regression (found by SQLiteCrashStateTests, sqlite-truncate): a slot left by an earlier
    /// generation (the file emptied since) parsed as the newest sequence, so the next copy went over
    /// the only copy of the current generation. The next slot follows the newest copy that
    /// authenticates.
    func testASlotOfAnEarlierGenerationDoesNotDecideWhereTheNextCopyGoes() throws {
        let env = try TestEnvironment()
        let path = env.path("generations")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try f.pwrite(plaintext(5000), at: 0)
        try f.sync()  // copy 1, slot 1
        try f.truncate(to: 0)  // new generation: copy 0 in slot 0; slot 1 is the old generation's
        try f.close()
        XCTAssertEqual(descriptor(path, 1)?.0, 1)
        let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        _ = try g.pwrite(plaintext(300, 9), at: 0)
        try g.sync()
        XCTAssertEqual(descriptor(path, 1)?.0, 1, "copy 1 of the new generation")
        XCTAssertEqual(descriptor(path, 1)?.1, 300)
        XCTAssertEqual(descriptor(path, 0)?.0, 0, "the generation's copy 0 is kept")
        try g.close()
    }

    /// The short last chunk torn by an append after a sync (what a power loss leaves): the open
    /// restores the synced end from the copy and says so; a read-only handle reads the chunk from
    /// the copy and changes nothing; the next change writes the copy back and the file is whole again.
    func testATornLastChunkIsRestoredFromTheCopyAndWrittenBackAtTheNextChange() throws {
        let env = try TestEnvironment()
        let path = env.path("torn")
        let data = plaintext(10_000)
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try f.pwrite(data, at: 0)
        try f.sync()
        _ = try f.pwrite(plaintext(2000, 5), at: 10_000)  // rewrites chunk 2 in place, unsynced
        try f.close()
        var bytes = readWholeFile(path)
        bytes[Int(layout.chunkOffset(2)) + 600] ^= 0x20  // torn inside chunk 2
        writeWholeFile(path, bytes)

        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertTrue(try r.endRestoredFromTailCopy)
        XCTAssertEqual(try r.size, 10_000)
        XCTAssertEqual(try r.bytesAfterAuthenticatedEnd, Int64(2000 + TailShape.recordOverhead), "the append was a record (version 5)")
        XCTAssertEqual(try r.readAll(), data)
        try r.close()
        XCTAssertEqual(readWholeFile(path), bytes, "a read-only open changes nothing")

        let w = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: env.services)
        XCTAssertTrue(try w.endRestoredFromTailCopy)
        _ = try w.write([7, 7, 7])
        XCTAssertFalse(try w.endRestoredFromTailCopy)
        try w.close()
        let again = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertFalse(try again.endRestoredFromTailCopy)
        XCTAssertEqual(try again.bytesAfterAuthenticatedEnd, 0)
        XCTAssertEqual(try again.readAll(), data + [7, 7, 7])
        try again.close()
    }

    /// A copy whose descriptor and tags are whole but whose ciphertext is not (a torn slot) is never
    /// taken: with the chunk in place damaged too, the length stands and reading that chunk fails
    /// (never a wrong byte); the chunks before it read.
    func testACopyTornInsideItsCiphertextIsNotTaken() throws {
        let env = try TestEnvironment()
        let path = env.path("torn-copy")
        let data = plaintext(10_000)
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try f.pwrite(data, at: 0)
        try f.sync()  // copy 1 in slot 1: chunk 2 (1808 bytes) and the trailer
        try f.close()
        var bytes = readWholeFile(path)
        bytes[Int(layout.tailCopyOffset(1)) + TailCopyDescriptor.size + 500] ^= 0x01  // the chunk copy's ciphertext
        bytes[Int(layout.chunkOffset(2)) + 500] ^= 0x01  // and the chunk in place
        writeWholeFile(path, bytes)
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertFalse(try r.endRestoredFromTailCopy)
        XCTAssertEqual(try r.size, 10_000)
        XCTAssertEqual(try r.pread(count: 8192, at: 0), Array(data[0..<8192]))
        XCTAssertThrowsError(try r.pread(count: 100, at: 8192)) { e in
            XCTAssertEqual((e as? SecureFileError)?.code, .badKeyOrCorruptData)
        }
        try r.close()
        // With the chunk copy whole, the same damage in place is restored from it.
        bytes[Int(layout.tailCopyOffset(1)) + TailCopyDescriptor.size + 500] ^= 0x01
        writeWholeFile(path, bytes)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertTrue(try g.endRestoredFromTailCopy)
        XCTAssertEqual(try g.readAll(), data)
        try g.close()
    }

    /// Version 5: appends inside the last chunk are records and write no copy; a sync first seals the
    /// records into one chunk again (after a rewrite's copy of the end it makes, over no sync's copy),
    /// then writes its own copy over that one: the newest sync's copy is never written over.
    func testRecordAppendsWriteNoCopyAndASyncKeepsTheNewestSyncsCopy() throws {
        let env = try TestEnvironment()
        let path = env.path("records")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services)
        defer { try? f.close() }
        _ = try f.write(plaintext(3900))
        try f.sync()
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.sync, 1, 3900))
        let slots = readWholeFile(path).prefix(Int(layout.dataOffset))
        for k in 1...3 { _ = try f.write(plaintext(50, k)) }
        XCTAssertEqual(readWholeFile(path).prefix(Int(layout.dataOffset)), slots, "record appends write no copy")
        try f.sync()
        XCTAssertTrue(kindedDescriptor(path, 0)! == (.sync, 4, 4050), "\(String(describing: kindedDescriptor(path, 0)))")
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.sync, 1, 3900), "the previous sync's copy stays until this one is written")
        XCTAssertEqual(try f.pread(count: 5000, at: 0), plaintext(3900) + (1...3).flatMap { plaintext(50, $0) })
    }

    /// (kind, sequence, size) of the descriptor in `slot`, as written on disk (nil: no copy).
    func kindedDescriptor(_ path: String, _ slot: Int, _ layout: FileLayout = FileLayout()) -> (TailCopyDescriptor.Kind, UInt64, Int64)? {
        let bytes = readWholeFile(path)
        let at = Int(layout.tailCopyOffset(slot))
        guard bytes.count >= at + TailCopyDescriptor.size else { return nil }
        return bytes[at..<at + TailCopyDescriptor.size].withUnsafeBytes { TailCopyDescriptor.parse($0) }.map { ($0.kind, $0.sequence, $0.size) }
    }

    /// A rewrite's copy (kind 2: an append whose rewrite of chunk 0 spans two pages) goes into the
    /// slot the newest sync's copy is not in, and over the previous rewrite's copy (sequence +2),
    /// never over the newest sync's copy, which a power loss still needs; a sync then writes its own
    /// copy over the rewrite's, and the next rewrite's copy goes into the other slot. (A version 4
    /// file: version 5 appends are records, which need no copy; see the next test.)
    func testARewritesCopyNeverGoesOverTheNewestSyncsCopy() throws {
        let env = try TestEnvironment()
        let path = env.path("kinds")
        writeWholeFile(path, readWholeFile(FormatVectorTests.directory + "/v4/empty.acsf"))
        let f = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: FixedKeyProvider(kek: try FormatVectorTests.kek()))
        defer { try? f.close() }
        let layout = FileLayout(version: 4)
        func kindedDescriptor(_ path: String, _ slot: Int) -> (TailCopyDescriptor.Kind, UInt64, Int64)? { self.kindedDescriptor(path, slot, layout) }
        // Chunk 0 is at 8576, 384 bytes into a page: with 3,900 bytes its rewrite spans two pages.
        _ = try f.write(plaintext(3900))
        try f.sync()
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.sync, 1, 3900))
        _ = try f.write(plaintext(50, 1))
        XCTAssertTrue(kindedDescriptor(path, 0)! == (.rewrite, 2, 3950), "\(String(describing: kindedDescriptor(path, 0)))")
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.sync, 1, 3900), "the sync's copy stays")
        _ = try f.write(plaintext(50, 2))
        XCTAssertTrue(kindedDescriptor(path, 0)! == (.rewrite, 4, 4000), "over the previous rewrite's copy: \(String(describing: kindedDescriptor(path, 0)))")
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.sync, 1, 3900), "the sync's copy stays")
        try f.sync()
        XCTAssertTrue(kindedDescriptor(path, 0)! == (.sync, 6, 4000), "the sync's copy over the rewrite's: \(String(describing: kindedDescriptor(path, 0)))")
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.sync, 1, 3900), "the previous sync's copy stays until this one is written")
        _ = try f.write(plaintext(20, 3))
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.rewrite, 7, 4020), "\(String(describing: kindedDescriptor(path, 1)))")
        XCTAssertTrue(kindedDescriptor(path, 0)! == (.sync, 6, 4000), "the newest sync's copy stays")
    }

    /// A kill that cuts an append's rewrite of the last chunk between its two pages: the first page
    /// holds the new chunk's head, the rest is as before (the file's length too), and the chunk
    /// authenticates neither way. The rewrite's copy, written first, holds the end the append was
    /// making — longer than the end in place, in the same chunk — and the open takes it: every byte,
    /// the call's too, reported as restored; the next change writes it back. Nothing was synced, so
    /// without that copy (only the creation's, of an empty file) the chunk was lost.
    func testAKillBetweenTheTwoPagesOfAnAppendsRewriteLosesNothing() throws {
        let env = try TestEnvironment()
        let path = env.path("torn-rewrite")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services)
        _ = try f.write(plaintext(3900))
        try f.close()
        let before = readWholeFile(path)
        let g = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: env.services)
        _ = try g.write(plaintext(50, 1))
        try g.close()
        let after = readWholeFile(path)
        XCTAssertTrue(kindedDescriptor(path, 1)! == (.rewrite, 1, 3950))
        // The torn state: the copy written, the rewrite stopped at the page boundary at 12288.
        var torn = before
        let copyEnd = Int(layout.tailCopyOffset(1)) + layout.tailCopySlotSize
        torn.replaceSubrange(Int(layout.tailCopyOffset(1))..<copyEnd, with: after[Int(layout.tailCopyOffset(1))..<copyEnd])
        torn.replaceSubrange(Int(layout.chunkOffset(0))..<12288, with: after[Int(layout.chunkOffset(0))..<12288])
        XCTAssertEqual(torn.count, before.count)
        writeWholeFile(path, torn)
        let h = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: env.services)
        XCTAssertTrue(try h.endRestoredFromTailCopy, "restored, and reported")
        XCTAssertEqual(try h.readAll(), plaintext(3900) + plaintext(50, 1))
        _ = try h.write([9])
        try h.close()
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertFalse(try r.endRestoredFromTailCopy)
        XCTAssertEqual(try r.readAll(), plaintext(3900) + plaintext(50, 1) + [9])
        try r.close()
    }

    /// Coordinated handles of two processes: this one's knowledge of the newest copy (a rewrite's,
    /// in slot 0) goes stale when the other appends and syncs (its sync's copy goes over that
    /// rewrite's copy, in slot 0). This process's next rewrite's copy must see it — the newest
    /// descriptor on disk is not the one it knows — and go into slot 1, not over the other
    /// process's sync.
    func testACoordinatedRewritesCopyNeverGoesOverAnotherProcesssSync() throws {
        let env = try TestEnvironment()
        let path = env.path("two-processes")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services, sharing: .processes)
        defer { try? f.close() }
        _ = try f.write(plaintext(3900))
        try f.sync()
        _ = try f.write(plaintext(50, 1))
        XCTAssertTrue(kindedDescriptor(path, 0)! == (.rewrite, 2, 3950), "\(String(describing: kindedDescriptor(path, 0)))")
        let child = try ChildProcess.spawn(try crashChild(), ["append-sync", env.directory + "/store", path, "20"],
                                           environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .inherit)
        let out = child.finish()
        XCTAssertTrue(out.status.succeeded && out.standardOutput.contains("S"), "\(out.status) \(out.standardOutput)")
        guard let synced = kindedDescriptor(path, 0), synced.0 == .sync, synced.2 == 3970 else {
            return XCTFail("the other process's sync: \(String(describing: kindedDescriptor(path, 0)))")
        }
        _ = try f.write(plaintext(20, 3))
        XCTAssertTrue(kindedDescriptor(path, 0)! == synced, "the other process's sync's copy stays: \(String(describing: kindedDescriptor(path, 0)))")
        XCTAssertEqual(kindedDescriptor(path, 1)?.0, .rewrite)
        XCTAssertEqual(kindedDescriptor(path, 1)?.2, 3990)
        XCTAssertGreaterThan(kindedDescriptor(path, 1)?.1 ?? 0, synced.1)
    }
}
