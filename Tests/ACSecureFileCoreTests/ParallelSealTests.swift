#if canImport(Glibc)
import Glibc
#endif
import XCTest
import Dispatch
import ACSecureTestSupport
import ACCrypto
import ACSystemCalls
@testable import ACSecureFileCore

/// Large writes sealed by the sealing pool's threads next to the writer (issue 26 item 2,
/// docs/ARCHITECTURE.md "Parallel sealing"): the bytes are those of a plain file, every chunk gets
/// a fresh nonce, a write that fails half way leaves a file that opens, and threads writing large
/// spans to one file or to many at once (the pool then busy with another write) lose nothing.
/// The crash tests (WriteShapeCrashTests' multi-batch append, the crash-state enumerator's
/// `append-large`) kill and tear such writes between their pieces.
final class ParallelSealTests: XCTestCase {
    let layout = FileLayout()

    static var poolExpected: Bool { Sys.processorsAvailable > 1 }

    static func pattern(_ n: Int, _ seed: Int) -> [UInt8] {
        (0..<n).map { UInt8(truncatingIfNeeded: ($0 &* 131) ^ ($0 >> 9) &+ seed &* 17) }
    }

    /// Random large writes (aligned or not, inside the file, across its end, after a hole) and the
    /// occasional cut, on a secure file and a plain one: same sizes and bytes after every step and
    /// after a reopen.
    func testLargeWritesReadBackAsAPlainFileDoes() throws {
        let env = try TestEnvironment()
        let path = env.path("large")
        let plainPath = env.path("large.plain")
        let plain = open(plainPath, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        XCTAssertGreaterThanOrEqual(plain, 0)
        defer { close(plain) }
        var f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let before = SealingPool.piecesSealedByHelpers.load(ordering: .relaxed)
        var rng = SystemRandomNumberGenerator()
        for step in 0..<24 {
            let size = Int(lseek(plain, 0, SEEK_END))
            if step % 7 == 6 {
                let to = Int.random(in: 0...size, using: &rng)
                XCTAssertEqual(ftruncate(plain, off_t(to)), 0)
                try f.truncate(to: Int64(to))
            } else {
                let count = [128 << 10, 200_000, 1 << 20, (1 << 20) + 4095, 2_600_000].randomElement(using: &rng)!
                let offset = [0, size, max(0, size - 5000), size + 70_000, Int.random(in: 0...max(0, size), using: &rng)].randomElement(using: &rng)!
                let data = Self.pattern(count, step)
                XCTAssertEqual(data.withUnsafeBytes { Glibc.pwrite(plain, $0.baseAddress, count, off_t(offset)) }, count)
                XCTAssertEqual(try f.pwrite(data, at: Int64(offset)), count, "step \(step)")
            }
            XCTAssertEqual(try f.size, Int64(lseek(plain, 0, SEEK_END)), "step \(step)")
            if step % 5 == 4 {
                try f.close()
                f = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            }
            XCTAssertEqual(try f.readAll(), readWholeFile(plainPath), "step \(step)")
        }
        try f.close()
        if Self.poolExpected {
            XCTAssertGreaterThan(SealingPool.piecesSealedByHelpers.load(ordering: .relaxed), before, "the helpers sealed no piece")
        }
    }

    /// A write-back run filled by many small writes is sealed on the writing thread: offered to
    /// the pool, its helper's wake-up and watch cost a program of 100-byte writes 10 % a call and
    /// slowed its other calls (BENCHMARKS.md "Write-back appends against the build before issue
    /// 24"). A run filled by writes of 2 KiB or more is offered as before (they gain from it).
    func testWriteBackRunsOfSmallWritesAreSealedOnTheWritingThread() throws {
        let env = try TestEnvironment()
        for (size, offered) in [(100, false), (4096, true)] {
            let path = env.path("write-back-\(size)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services, buffering: .writeBack)
            let before = SealingPool.batchesOffered.load(ordering: .relaxed)
            var expected: [UInt8] = []
            for i in 0..<(300_000 / size) {
                let bytes = Self.pattern(size, i)
                XCTAssertEqual(try f.write(bytes), size)
                expected += bytes
            }
            try f.close()
            let batches = SealingPool.batchesOffered.load(ordering: .relaxed) - before
            if Self.poolExpected {
                if offered { XCTAssertGreaterThan(batches, 0, "\(size) B writes") } else { XCTAssertEqual(batches, 0, "\(size) B writes") }
            }
            let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try r.readAll(), expected, "\(size) B writes")
            try r.close()
        }
    }

    /// Each chunk of a large write gets a nonce of its own, also when the same span is rewritten,
    /// whichever thread sealed it.
    func testEveryChunkSealedInPiecesHasAFreshNonce() throws {
        let env = try TestEnvironment()
        let path = env.path("nonces")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let chunks = 512
        var seen = Set<[UInt8]>()
        for round in 0..<2 {
            _ = try f.pwrite(Self.pattern(chunks * layout.chunkSize, round), at: 0)
            let raw = readWholeFile(path)
            for i in 0..<chunks {
                let at = Int(layout.chunkOffset(Int64(i))) + layout.selectorSize
                XCTAssertTrue(seen.insert(Array(raw[at..<at + FileLayout.nonceSize])).inserted, "round \(round): chunk \(i) reuses a nonce")
            }
        }
        try f.close()
    }

    /// A `pwrite` that fails between the pieces of a batch: the call fails with its errno and the
    /// path, the bytes before it are intact, the file opens and takes the same write again.
    func testAWriteFailingBetweenPiecesIsReportedAndTheFileStillOpens() throws {
        let env = try TestEnvironment()
        let old = Self.pattern(300_000, 1), big = Self.pattern(1 << 20, 2)
        // With one processor there is no pool: the batch is one pwrite beyond the old end and one before it.
        for failing in Self.poolExpected ? [0, 1, 5, 15, 16] : [0, 1] {
            let path = env.path("fail-\(failing)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
            _ = try f.pwrite(old, at: 0)
            let plan = FaultPlan(target: .pwrite, index: failing, fault: .fail(EIO))
            SecureFileTesting.faultInjector = { plan.decide($0) }
            do {
                _ = try f.pwrite(big, at: 300_000)
                XCTFail("pwrite \(failing) of the batch failed, the call did not")
            } catch let error as SecureFileError {
                XCTAssertEqual(error.errno, EIO)
                XCTAssertTrue(error.message.contains(path), error.message)
            }
            SecureFileTesting.faultInjector = nil
            XCTAssertEqual(plan.counts.injected, 1)
            try f.close()
            let g = try SecureFile.open(path, flags: O_RDWR, services: env.services)
            XCTAssertEqual(try g.pread(count: old.count, at: 0), old, "pwrite \(failing) failed")
            XCTAssertEqual(try g.pwrite(big, at: 300_000), big.count)
            XCTAssertEqual(try g.readAll(), old + big)
            try g.close()
        }
    }

    /// Threads writing large spans at once: two to regions of one file (the file's lock orders
    /// them), and one file each (the pool works for one write at a time; the others seal alone).
    func testLargeWritersOnOneFileAndOnManyFilesAtOnce() throws {
        let env = try TestEnvironment()
        let shared = env.path("shared")
        let region = 1 << 19
        let rounds = 3
        try SecureFile.open(shared, flags: O_RDWR | O_CREAT, services: env.services).close()
        let failures = LockedValue<[String]>([])
        let paths = [shared, shared, env.path("own-2"), env.path("own-3")], services = env.services
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            do {
                let f = try SecureFile.open(paths[t], flags: O_RDWR | O_CREAT, services: services)
                let at = Int64(t < 2 ? t * region : 0)
                for r in 0..<rounds {
                    let data = Self.pattern(region - 1000 * t, t * 10 + r)
                    guard try f.pwrite(data, at: at) == data.count, try f.pread(count: data.count, at: at) == data else {
                        failures.withLock { $0.append("thread \(t) round \(r): read back differs") }
                        return
                    }
                }
                try f.close()
            } catch {
                failures.withLock { $0.append("thread \(t): \(error)") }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        let f = try SecureFile.open(shared, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try f.pread(count: region, at: 0), Self.pattern(region, rounds - 1))
        XCTAssertEqual(try f.pread(count: region - 1000, at: Int64(region)), Self.pattern(region - 1000, 10 + rounds - 1))
        try f.close()
    }
}

extension ParallelSealTests {
    /// A large write after a hole, starting and ending inside chunks: two chunks of one batch are
    /// composed (the first after the hole, the last), each must keep its own plaintext.
    func testALargeWriteAfterAHoleStartingAndEndingInsideChunks() throws {
        let env = try TestEnvironment()
        for (size, offset, count) in [(8192, 8192 + 70_000, 200_000), (100, 70_001, 131_073), (0, 5000, 300_000)] {
            let path = env.path("hole-\(size)-\(offset)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
            let old = Self.pattern(size, 3), data = Self.pattern(count, 4)
            if size > 0 { _ = try f.pwrite(old, at: 0) }
            XCTAssertEqual(try f.pwrite(data, at: Int64(offset)), count)
            let expected = old + [UInt8](repeating: 0, count: offset - size) + data
            XCTAssertEqual(try f.readAll(), expected, "size \(size), \(count) bytes at \(offset)")
            try f.close()
            let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try g.readAll(), expected, "size \(size), \(count) bytes at \(offset), reopened")
            try g.close()
        }
    }
}
