#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// The write-back run (`SharedFile+WriteBack.swift`): up to `writeBackRunBytes` of contiguous
/// chunks held in memory and written as one span (docs/FORMAT.md "Caching, durability,
/// concurrency and crashes").
final class WriteBackRunTests: XCTestCase {
    override func tearDown() { SecureFileTesting.faultInjector = nil }

    func physical(_ n: Int64) -> Int64 { FileLayout().physicalSize(forPlaintextSize: n) }

    /// Record `k` of `size` bytes: its bytes name the record, so a misplaced one is seen.
    func record(_ k: Int, size: Int) -> [UInt8] { (0..<size).map { UInt8(truncatingIfNeeded: k &* 31 &+ $0 &* 7) } }

    func appendRecords(_ f: SecureFile, _ range: Range<Int>, size: Int) throws {
        for k in range { XCTAssertEqual(try f.write(record(k, size: size)), size) }
    }

    func expected(_ count: Int, size: Int) -> [UInt8] { (0..<count).flatMap { record($0, size: size) } }

    /// 512-byte appends stay in memory until a write goes past a full run (32 chunks of 4 KiB),
    /// which writes the run as one span; reads and fstat see the buffered bytes meanwhile.
    func testAppendsCollectInOneRunUntilAWriteGoesPastItsBound() throws {
        let env = try TestEnvironment()
        let path = env.path("run")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        let perRun = SharedFile.writeBackRunBytes / 512
        XCTAssertEqual(SharedFile.writeBackRunBytes, 32 * 4096)
        try appendRecords(f, 0..<perRun, size: 512)
        XCTAssertEqual(fileSize(path), physical(0), "a full run is still in memory")
        XCTAssertEqual(try f.size, Int64(perRun * 512))
        XCTAssertEqual(try f.pread(count: 1024, at: 4000), Array(expected(perRun, size: 512)[4000..<5024]), "reads see the run")
        try appendRecords(f, perRun..<(perRun + 1), size: 512)
        XCTAssertEqual(fileSize(path), physical(Int64(perRun * 512)), "the next chunk writes the full run, and only it")
        XCTAssertEqual(try f.size, Int64((perRun + 1) * 512))
        try appendRecords(f, (perRun + 1)..<(3 * perRun + 5), size: 512)
        XCTAssertEqual(fileSize(path), physical(Int64(3 * perRun * 512)), "three full runs written, the fourth in memory")
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), expected(3 * perRun + 5, size: 512))
        try g.close()
    }

    /// A write to a chunk that does not continue the run writes the run out first; a pwrite into the
    /// run stays in it; a large aligned write goes straight to the file after the run.
    func testWritesElsewhereWriteTheRunOut() throws {
        let env = try TestEnvironment()
        let path = env.path("elsewhere")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        var model = [UInt8](repeating: 0, count: 20_000)
        func put(_ bytes: [UInt8], at offset: Int) throws {
            XCTAssertEqual(try f.pwrite(bytes, at: Int64(offset)), bytes.count)
            if offset + bytes.count > model.count { model += [UInt8](repeating: 0, count: offset + bytes.count - model.count) }
            model.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        }
        try put(record(1, size: 20_000), at: 0)
        XCTAssertEqual(fileSize(path), physical(0))
        try put(record(2, size: 300), at: 5000)  // inside the run
        XCTAssertEqual(fileSize(path), physical(0))
        try put(record(3, size: 10), at: 100_000)  // a hole after the run: it is written out first
        XCTAssertEqual(fileSize(path), physical(20_000))
        XCTAssertEqual(try f.size, 100_010)
        XCTAssertEqual(try f.pread(count: 100_010, at: 0), model)
        try put(record(4, size: 100), at: 4090)  // back into the file: the run at 96 KiB is written out
        XCTAssertEqual(fileSize(path), physical(100_010))
        try put(record(5, size: 256 << 10), at: 8192)  // a run's worth of whole chunks and more: straight through
        XCTAssertEqual(fileSize(path), physical(Int64(8192 + (256 << 10))))
        XCTAssertEqual(try f.pread(count: model.count, at: 0), model)
        try f.truncate(to: 7000)
        model.removeSubrange(7000...)
        try put(record(6, size: 50), at: 6990)
        XCTAssertEqual(try f.stat().st_size, 7040)
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), model)
        try g.close()
    }

    /// The fast path (`appendToRunIfItFits`) at its bounds, against a plain model: appends that fill
    /// the run to its capacity and one byte past it, writes from inside the run and at its end,
    /// and, in a run that starts inside the file, writes that reach a chunk still on disk only, whose
    /// old bytes must be read into the run first (the fast path must leave those to `addToRun`).
    func testWritesIntoTheRunKeepEveryByteAtItsBounds() throws {
        let env = try TestEnvironment()
        let path = env.path("bounds")
        let capacity = SharedFile.writeBackRunBytes
        var model: [UInt8] = []
        func put(_ f: SecureFile, _ bytes: [UInt8], at offset: Int) throws {
            XCTAssertEqual(try f.pwrite(bytes, at: Int64(offset)), bytes.count)
            if offset + bytes.count > model.count { model += [UInt8](repeating: 0, count: offset + bytes.count - model.count) }
            model.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        }
        func check(_ bytes: [UInt8], _ what: String, line: UInt = #line) {
            let first = (0..<min(bytes.count, model.count)).first { bytes[$0] != model[$0] } ?? min(bytes.count, model.count)
            XCTAssert(bytes == model, "\(what): \(bytes.count) bytes, the model \(model.count), first difference at \(first)", line: line)
        }
        var f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        try put(f, record(0, size: 1000), at: 0)
        for k in 1..<(capacity / 1000) { try put(f, record(k, size: 1000), at: model.count) }
        try put(f, record(200, size: capacity - model.count), at: model.count)  // exactly full
        XCTAssertEqual(fileSize(path), physical(0), "the full run is still in memory")
        try put(f, record(201, size: 1), at: model.count)  // one byte past it: the run is written out
        XCTAssertEqual(fileSize(path), physical(Int64(capacity)))
        try put(f, record(202, size: 5000), at: capacity - 3000)  // back into the written run: out again
        try put(f, record(203, size: 700), at: capacity + 1000)  // inside the new run
        try put(f, record(204, size: 900), at: model.count)  // at its end
        try put(f, record(205, size: 10), at: model.count + 5)  // a gap after its end
        check(try f.pread(count: model.count, at: 0), "new file")
        try f.close()

        // A run that starts inside the file: its chunk 0 was read back whole, chunk 1 is on disk only.
        f = try SecureFile.open(path, flags: O_RDWR, services: env.services, buffering: .writeBack)
        try put(f, record(300, size: 10), at: 100)
        try put(f, record(301, size: 10), at: 4090)  // from chunk 0 into chunk 1, still on disk
        try put(f, record(302, size: 100), at: 8150)  // from chunk 1 into chunk 2, on disk
        try put(f, record(303, size: 3), at: 4096 * 3 - 1)  // from the run's end into chunk 3, on disk
        check(try f.pread(count: model.count, at: 0), "run inside the file")
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        check(try g.readAll(), "reopened")
        try g.close()
    }

    /// When services lock, a run that starts in the file's short last chunk and goes past it (two
    /// runs on disk, the chunk rewritten in place first) is written whole with the key still held,
    /// then its plaintext is wiped.
    func testServicesLockWritesTheRunThenWipesIt() throws {
        let env = try TestEnvironment()
        let path = env.path("lock")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        try appendRecords(f, 0..<10, size: 100)
        try f.flush()
        XCTAssertEqual(fileSize(path), physical(1000))
        try appendRecords(f, 10..<300, size: 100)
        f.shared.lock.withLock { XCTAssertEqual(f.shared.runChunks, 8, "the run holds 8 chunks") }
        env.services.lock()
        XCTAssertEqual(fileSize(path), physical(30_000), "the lock wrote the whole run")
        f.shared.lock.withLock {
            XCTAssertEqual(f.shared.runFirst, -1)
            XCTAssertNil(f.shared.cipher)
            XCTAssertEqual(f.shared.cacheIndex, -1)
            let wiped = f.shared.run?.withUnsafeBytes { $0.allSatisfy { $0 == 0 } } ?? true
            XCTAssertTrue(wiped, "no plaintext of the run is left in memory")
        }
        XCTAssertEqual(aceCode { _ = try f.write([1]) }, .noKeys)
        try env.services.unlock(passcode: nil)
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), expected(300, size: 100))
        try g.close()
    }

    /// A run the lock writes in more than one batch is written whole: since stop 41 an overwrite
    /// of three or more chunks in place that reaches the old end's last two chunks is two batches
    /// (every chunk copied before it is rewritten), and the lock's flush stopped after the first
    /// (regression: the differential test's seed 6000008 then read ACE_NO_KEYS_ERROR).
    func testServicesLockWritesARunOfSeveralBatchesWhole() throws {
        let env = try TestEnvironment()
        let path = env.path("lock-batches")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        try appendRecords(f, 0..<200, size: 100)
        try f.flush()
        var all = expected(200, size: 100)
        let overwrite = record(999, size: 16_000)
        XCTAssertEqual(try f.pwrite(overwrite, at: 3000), overwrite.count)
        all.replaceSubrange(3000..<19_000, with: overwrite)
        env.services.lock()
        try env.services.unlock(passcode: nil)
        XCTAssertTrue(try f.pread(count: 20_000, at: 0) == all, "the lock wrote the whole run, and reported nothing")
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertTrue(try g.readAll() == all)
        try g.close()
    }

    /// A multi-chunk run that cannot be written when services lock is reported by the next call of
    /// every handle and by close; the file is then what the disk holds.
    func testFailedFlushOfARunAtLockIsReportedByTheNextCallAndClose() throws {
        let env = try TestEnvironment()
        let path = env.path("lost")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        try appendRecords(f, 0..<200, size: 100)
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(ENOSPC) : nil }
        env.services.lock()
        SecureFileTesting.faultInjector = nil
        f.shared.lock.withLock {
            XCTAssertEqual(f.shared.runFirst, -1)
            XCTAssertTrue(f.shared.run?.withUnsafeBytes { $0.allSatisfy { $0 == 0 } } ?? true, "wiped all the same")
        }
        try env.services.unlock(passcode: nil)
        XCTAssertEqual(errnoOf { _ = try f.stat() }, ENOSPC, "the next call on the writing handle reports it")
        XCTAssertEqual(errnoOf { _ = try g.pread(count: 10, at: 0) }, ENOSPC, "every handle reports it once")
        XCTAssertEqual(try f.size, 0, "then the file is what the disk holds")
        try g.close()
        try f.close()

        let h = try SecureFile.open(path, flags: O_RDWR, services: env.services, buffering: .writeBack)
        try appendRecords(h, 0..<200, size: 100)
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(EIO) : nil }
        env.services.lock()
        SecureFileTesting.faultInjector = nil
        try env.services.unlock(passcode: nil)
        XCTAssertEqual(errnoOf { try h.close() }, EIO, "a handle that has not reported it does so at close")
    }

    /// A run whose write fails at flush (or at a write that needs it written) is kept and reported:
    /// by that call, by close if it fails again there; a later successful flush writes all of it.
    func testFailedFlushOfARunIsReportedAndKept() throws {
        let env = try TestEnvironment()
        let path = env.path("kept")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        try appendRecords(f, 0..<300, size: 100)
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(ENOSPC) : nil }
        XCTAssertEqual(errnoOf { try f.flush() }, ENOSPC)
        XCTAssertEqual(errnoOf { _ = try f.pwrite([1], at: 100_000) }, ENOSPC, "a write elsewhere needs the run written first")
        SecureFileTesting.faultInjector = nil
        XCTAssertEqual(try f.size, 30_000, "the run is kept")
        XCTAssertEqual(try f.pread(count: 30_000, at: 0), expected(300, size: 100))
        try f.sync()
        XCTAssertEqual(fileSize(path), physical(30_000))

        try appendRecords(f, 300..<600, size: 100)
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(EIO) : nil }
        XCTAssertEqual(errnoOf { try f.close() }, EIO, "close reports the run it could not write")
        SecureFileTesting.faultInjector = nil
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), expected(300, size: 100), "the disk holds what was written")
        try g.close()
    }

    /// A write-through handle on the same file writes the run out before its own change, and sees it.
    func testWriteThroughHandleOnTheSameFileWritesTheRunFirst() throws {
        let env = try TestEnvironment()
        let path = env.path("mixed")
        let wb = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        let wt = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        try appendRecords(wb, 0..<100, size: 100)
        XCTAssertEqual(try wt.pread(count: 10_000, at: 0), expected(100, size: 100))
        XCTAssertEqual(fileSize(path), physical(0))
        XCTAssertEqual(try wt.pwrite([9], at: 10_000), 1)
        XCTAssertEqual(fileSize(path), physical(10_001), "the run, then the write-through byte")
        try wt.close()
        try wb.close()
    }
}
