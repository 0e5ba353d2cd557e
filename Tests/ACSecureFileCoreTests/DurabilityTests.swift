#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// When written data is in the file, what other handles see, and what a services lock costs
/// (docs/FORMAT.md "Caching, durability, concurrency and crashes").
final class DurabilityTests: XCTestCase {
    /// The on-disk size of a new file (current format) holding `n` plaintext bytes.
    func physical(_ n: Int64) -> Int64 { FileLayout().physicalSize(forPlaintextSize: n) }

    /// Another process is modelled by an independent key provider on the same store: it gets its own
    /// shared state for the file, exactly as another process would.
    func otherProcess(_ env: TestEnvironment) throws -> SecureServices {
        try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
    }

    /// The first sync of a file this process created fsyncs its directory too (the new name is then
    /// as durable as the data); later syncs, and syncs of files opened without creating them, do not.
    /// A failed directory sync fails the sync and is tried again by the next.
    func testTheFirstSyncOfACreatedFileMakesItsNameDurable() throws {
        let env = try TestEnvironment()
        final class Counts: @unchecked Sendable { var fsyncs = 0; var failAt = 0 }
        let counts = Counts()
        SecureFileTesting.faultInjector = { call in
            guard call == .fsync else { return nil }
            counts.fsyncs += 1
            if counts.fsyncs == counts.failAt { return .fail(EIO) }
            return nil
        }
        defer { SecureFileTesting.faultInjector = nil }
        let path = env.path("new-name")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o600, services: env.services)
        try f.write(Array("durable".utf8))
        try f.sync()
        XCTAssertEqual(counts.fsyncs, 2, "the file, then its directory")
        counts.fsyncs = 0
        try f.sync()
        XCTAssertEqual(counts.fsyncs, 1, "the name is durable already")
        try f.close()
        counts.fsyncs = 0
        let g = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try g.sync()
        XCTAssertEqual(counts.fsyncs, 1, "a file this open did not create")
        try g.close()
        // The directory's fsync fails: the sync reports it (naming the directory), the next retries it.
        let other = env.path("new-name-2")
        let h = try SecureFile.open(other, flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services)
        counts.fsyncs = 0
        counts.failAt = 1  // datasync's own call is fdatasync: the first fsync is the directory's
        XCTAssertThrowsError(try h.datasync()) { error in
            XCTAssertEqual((error as? SecureFileError)?.errno, EIO)
            XCTAssertTrue((error as? SecureFileError)?.message.contains("directory") ?? false, "\(error)")
        }
        counts.failAt = 0
        counts.fsyncs = 0
        try h.datasync()
        XCTAssertEqual(counts.fsyncs, 1, "the directory again (the file's own sync is fdatasync)")
        try h.close()
    }

    func testWhatAnotherProcessSeesInEachMode() throws {
        let env = try TestEnvironment()
        let path = env.path("shared")
        let writer = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try writer.write([1, 2, 3])
        let other = try otherProcess(env)
        let reader = try SecureFile.open(path, flags: O_RDONLY, services: other)
        XCTAssertEqual(try reader.pread(count: 10, at: 0), [1, 2, 3])

        try writer.write([4, 5])  // returns: it is in the file
        // (The second write appends to the short last chunk: a record, version 5.)
        XCTAssertEqual(fileSize(path), FileLayout().physicalSize(forPlaintextSize: 5, shape: TailShape(records: 1, recordBytes: 2)),
                       "write-through: on disk when the call returns")
        let fresh = try SecureFile.open(path, flags: O_RDONLY, services: try otherProcess(env))
        XCTAssertEqual(try fresh.readAll(), [1, 2, 3, 4, 5], "a fresh open elsewhere reads every returned write")
        try fresh.close()
        // Default mode: an already-open handle elsewhere keeps its cached length (documented).
        XCTAssertEqual(try reader.size, 3)
        try reader.close()

        // Coordinated mode: every call rereads, so an open handle sees each completed write.
        let coordinatedWriter = try SecureFile.open(path, flags: O_RDWR, services: env.services, sharing: .processes)
        let coordinatedReader = try SecureFile.open(path, flags: O_RDONLY, services: other, sharing: .processes)
        XCTAssertEqual(try coordinatedReader.readAll(), [1, 2, 3, 4, 5])
        try coordinatedWriter.pwrite([6], at: 5)
        XCTAssertEqual(try coordinatedReader.size, 6)
        XCTAssertEqual(try coordinatedReader.readAll(), [1, 2, 3, 4, 5, 6])
        try coordinatedReader.close()
        try coordinatedWriter.close()
        try writer.close()
    }

    func testWriteBackReachesTheFileOnlyAtFlushSyncOrClose() throws {
        let env = try TestEnvironment()
        let path = env.path("wb")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        try f.write([UInt8](repeating: 9, count: 100))
        XCTAssertEqual(fileSize(path), physical(0), "buffered")
        XCTAssertEqual(try f.size, 100)
        try f.flush()
        XCTAssertEqual(fileSize(path), physical(100))
        try f.write([UInt8](repeating: 8, count: 10))
        try f.datasync()
        XCTAssertEqual(fileSize(path), physical(110))
        try f.write([UInt8](repeating: 7, count: 10))
        try f.close()
        XCTAssertEqual(fileSize(path), physical(120))
    }

    /// A write-back chunk that cannot be written when services lock is not dropped silently: the
    /// handle's next call and its close report the error.
    func testFailedFlushAtLockIsReportedByTheNextCallAndClose() throws {
        let env = try TestEnvironment()
        let path = env.path("lost")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services, buffering: .writeBack)
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        try f.write([UInt8](repeating: 1, count: 100))
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(ENOSPC) : nil }
        env.services.lock()
        SecureFileTesting.faultInjector = nil
        try env.services.unlock(passcode: nil)
        XCTAssertEqual(errnoOf { _ = try f.size }, ENOSPC, "the next call on the writing handle reports it")
        XCTAssertEqual(errnoOf { _ = try g.size }, ENOSPC, "every handle on the file reports it once")
        XCTAssertEqual(try f.size, 0, "then the file is what the disk holds")
        try g.close()
        try f.write([2])
        try f.close()
        // A handle that has not reported it yet does so at close.
        let h = try SecureFile.open(path, flags: O_RDWR, services: env.services, buffering: .writeBack)
        try h.write([3])
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(EIO) : nil }
        env.services.lock()
        SecureFileTesting.faultInjector = nil
        try env.services.unlock(passcode: nil)
        XCTAssertEqual(errnoOf { try h.close() }, EIO)
    }

    /// lock() waits for at most one batch of an in-flight write: the write returns a short count
    /// (or fails with no keys), nothing is left decrypted, and what it reported is in the file.
    func testLockDuringA1GiBWriteReturnsWithinOneBatch() throws {
        let env = try TestEnvironment()
        let path = env.path("big")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let count = 1 << 30
        final class Outcome: @unchecked Sendable {
            let buffer: UnsafeMutableRawBufferPointer
            var written = -1, code: ACErrorCode?, done = false, latency = 0.0
            init(_ count: Int) { buffer = .allocate(byteCount: count, alignment: 4096) }
            deinit { buffer.deallocate() }
        }
        let outcome = Outcome(count)
        memset(outcome.buffer.baseAddress!, 0x5A, 1 << 20)  // the rest is whatever the allocator gave: written as is
        let services = env.services
        DispatchQueueless.concurrentPerform(iterations: 2) { role in
            if role == 0 {
                do throws(SecureFileError) { outcome.written = try f.write(UnsafeRawBufferPointer(outcome.buffer)) } catch { outcome.code = error.code }
                outcome.done = true
                return
            }
            // Wait until the write is under way on disk (its growth is the signal, not a sleep).
            var polls = 0
            while fileSize(path) < 8 << 20 && polls < 20_000 { usleep(1000); polls += 1 }
            var t0 = timespec(), t1 = timespec()
            clock_gettime(CLOCK_MONOTONIC, &t0)
            services.lock()
            clock_gettime(CLOCK_MONOTONIC, &t1)
            outcome.latency = Double(t1.tv_sec - t0.tv_sec) + Double(t1.tv_nsec - t0.tv_nsec) / 1e9
        }
        let latency = outcome.latency
        XCTAssertTrue(outcome.done)
        print("lock() latency during a 1 GiB write: \(String(format: "%.1f", latency * 1000)) ms; the write returned \(outcome.written) bytes")
        XCTAssertLessThan(latency, 0.5, "lock() must not wait for the whole 1 GiB write")
        XCTAssertTrue(outcome.written > 0 && outcome.written < count || outcome.code == .noKeys,
                      "a short count or ACE_NO_KEYS_ERROR, got \(outcome.written) \(String(describing: outcome.code))")
        f.shared.lock.withLock {
            XCTAssertNil(f.shared.cipher, "no key after lock")
            XCTAssertEqual(f.shared.cacheIndex, -1, "no plaintext cached after lock")
        }
        XCTAssertEqual(aceCode { _ = try f.write([1]) }, .noKeys)
        try env.services.unlock(passcode: nil)
        XCTAssertEqual(try f.size, Int64(max(0, outcome.written)), "the reported count is exactly what the file holds")
        try f.close()
        unlink(path)
    }
}

