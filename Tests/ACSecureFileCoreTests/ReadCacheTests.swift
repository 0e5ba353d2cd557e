#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// The opt-in read cache (`SharedFile+ReadCache.swift`): decrypted chunks kept in guarded memory
/// (docs/FORMAT.md "Caching, durability, concurrency and crashes"). DifferentialTests runs random
/// sequences with it against plain files.
final class ReadCacheTests: XCTestCase {
    override func tearDown() {
        SecureFileTesting.faultInjector = nil
        SecureFileTesting.simulateGuardedMemoryExhaustion(false)
    }

    func pattern(_ count: Int, seed: UInt8) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ Int(seed)) } }

    /// A file of `bytes` bytes, written through a handle without a cache.
    func makeFile(_ env: TestEnvironment, _ name: String, bytes: Int) throws -> (String, [UInt8]) {
        let path = env.path(name)
        let data = pattern(bytes, seed: 1)
        let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        XCTAssertEqual(try w.write(data), data.count)
        try w.close()
        return (path, data)
    }

    /// A chunk read once is read again without a system call: with every pread failing, cached
    /// chunks still read; an uncached one fails.
    func testCachedChunksAreReadWithoutTheDisk() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "hits", bytes: 10 * 4096 + 100)
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        XCTAssertEqual(try f.pread(count: 8 * 4096, at: 0), Array(data[0..<(8 * 4096)]), "whole chunks, one batch")
        XCTAssertEqual(try f.pread(count: 50, at: 9 * 4096 + 4000), Array(data[(9 * 4096 + 4000)..<(9 * 4096 + 4050)]), "part of a chunk")
        SecureFileTesting.faultInjector = { $0 == .pread ? .fail(EIO) : nil }
        XCTAssertEqual(try f.pread(count: 8 * 4096, at: 0), Array(data[0..<(8 * 4096)]))
        XCTAssertEqual(try f.pread(count: 4096, at: 9 * 4096), Array(data[(9 * 4096)..<(10 * 4096)]))
        XCTAssertEqual(try f.pread(count: 10, at: 3 * 4096 + 5), Array(data[(3 * 4096 + 5)..<(3 * 4096 + 15)]))
        XCTAssertEqual(errnoOf { _ = try f.pread(count: 4096, at: 8 * 4096) }, EIO, "chunk 8 was never read")
        SecureFileTesting.faultInjector = nil
        try f.close()

        // Without the option nothing is cached beyond the one-chunk cache.
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.pread(count: 8 * 4096, at: 0), Array(data[0..<(8 * 4096)]))
        SecureFileTesting.faultInjector = { $0 == .pread ? .fail(EIO) : nil }
        XCTAssertEqual(errnoOf { _ = try g.pread(count: 4096, at: 0) }, EIO)
        SecureFileTesting.faultInjector = nil
        g.shared.lock.withLock { XCTAssertNil(g.shared.readCache) }
        try g.close()
    }

    /// Writes of another handle of the process (without the option) go through the same state:
    /// the cache holds what they wrote, whole or partial chunks, write-back runs included.
    func testWritesOfAnotherHandleAreSeen() throws {
        let env = try TestEnvironment()
        var (path, data) = try makeFile(env, "writes", bytes: 6 * 4096)
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        let w = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        let b = try SecureFile.open(path, flags: O_RDWR, services: env.services, buffering: .writeBack)
        XCTAssertEqual(try r.readAll(), data)
        r.shared.lock.withLock { XCTAssertTrue(r.shared.readCache?.holds(2) == true) }
        func put(_ h: SecureFile, _ bytes: [UInt8], at offset: Int) throws {
            XCTAssertEqual(try h.pwrite(bytes, at: Int64(offset)), bytes.count)
            if offset + bytes.count > data.count { data += [UInt8](repeating: 0, count: offset + bytes.count - data.count) }
            data.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        }
        try put(w, pattern(4096, seed: 2), at: 2 * 4096)  // a whole chunk
        XCTAssertEqual(try r.pread(count: 4096, at: 2 * 4096), Array(data[(2 * 4096)..<(3 * 4096)]))
        try put(w, pattern(10, seed: 3), at: 4 * 4096 + 7)  // part of a chunk
        XCTAssertEqual(try r.readAll(), data)
        try put(b, pattern(300, seed: 4), at: 5 * 4096 + 100)  // write-back, then written out
        XCTAssertEqual(try r.readAll(), data, "reads see the run")
        try b.flush()
        XCTAssertEqual(try r.readAll(), data)
        try put(w, pattern(5000, seed: 5), at: 9 * 4096)  // a hole and a new end
        XCTAssertEqual(try r.readAll(), data)
        for h in [r, w, b] { try h.close() }
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), data)
        try g.close()
    }

    /// Truncation drops the chunks it cuts or shortens: reading after a shrink and a regrow gives zeros.
    func testTruncateThenRead() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "truncate", bytes: 8 * 4096)
        let f = try SecureFile.open(path, flags: O_RDWR, services: env.services, readCache: .bytes(1 << 20))
        XCTAssertEqual(try f.readAll(), data)
        try f.truncate(to: 3 * 4096 + 10)
        XCTAssertEqual(try f.readAll(), Array(data[0..<(3 * 4096 + 10)]))
        try f.truncate(to: 6 * 4096)
        var expected = Array(data[0..<(3 * 4096 + 10)]) + [UInt8](repeating: 0, count: 3 * 4096 - 10)
        XCTAssertEqual(try f.readAll(), expected, "bytes cut and grown again read as zeros")
        try f.truncate(to: 0)
        XCTAssertEqual(try f.readAll(), [])
        f.shared.lock.withLock { XCTAssertNil(f.shared.readCache, "emptying drops the cache with the old generation") }
        XCTAssertEqual(try f.pwrite([9, 9], at: 5000), 2)
        expected = [UInt8](repeating: 0, count: 5002)
        expected[5000] = 9
        expected[5001] = 9
        XCTAssertEqual(try f.readAll(), expected)
        try f.close()
    }

    /// A write that fails leaves the cache holding what the disk holds (the old chunk).
    func testAFailedWriteLeavesTheCacheAsTheDisk() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "failed", bytes: 4 * 4096)
        let f = try SecureFile.open(path, flags: O_RDWR, services: env.services, readCache: .bytes(1 << 20))
        XCTAssertEqual(try f.readAll(), data)
        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(ENOSPC) : nil }
        XCTAssertEqual(errnoOf { _ = try f.pwrite(self.pattern(4096, seed: 9), at: 4096) }, ENOSPC)
        XCTAssertEqual(errnoOf { _ = try f.pwrite(self.pattern(10, seed: 9), at: 2 * 4096 + 3) }, ENOSPC)
        SecureFileTesting.faultInjector = nil
        XCTAssertEqual(try f.readAll(), data)
        try f.close()
    }

    /// A services lock wipes and frees the cache with the keys; reads after the unlock fill it again.
    func testServicesLockWipesTheCache() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "lock", bytes: 5 * 4096)
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        XCTAssertEqual(try f.readAll(), data)
        let cache = try XCTUnwrap(f.shared.lock.withLock { f.shared.readCache })
        XCTAssertFalse(cache.buffer.bytes.allSatisfy { $0 == 0 }, "the cache holds plaintext")
        env.services.lock()
        f.shared.lock.withLock { XCTAssertNil(f.shared.readCache) }
        XCTAssertTrue(cache.buffer.bytes.allSatisfy { $0 == 0 }, "no plaintext is left in it")
        XCTAssertEqual(aceCode { _ = try f.pread(count: 10, at: 0) }, .noKeys)
        try env.services.unlock(passcode: nil)
        XCTAssertEqual(try f.readAll(), data)
        f.shared.lock.withLock { XCTAssertNotNil(f.shared.readCache) }
        try f.close()
    }

    /// The file gets the largest cache any handle asked for; the last close frees it.
    func testTheLargestRequestWinsAndTheLastCloseFreesIt() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "sizes", bytes: 40 * 4096)
        let small = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(64 << 10))
        XCTAssertEqual(try small.readAll(), data)
        small.shared.lock.withLock { XCTAssertEqual(small.shared.readCache?.slotCount, 16) }
        let large = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        let none = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try none.readAll(), data)
        large.shared.lock.withLock { XCTAssertEqual(large.shared.readCache?.slotCount, 256) }
        weak let cache = large.shared.lock.withLock { large.shared.readCache }
        XCTAssertNotNil(cache)
        for h in [small, large, none] { try h.close() }
        XCTAssertNil(cache, "the last close frees it")
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1000)) }, EINVAL)
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(2 << 30)) }, EINVAL)
    }

    /// Without guarded memory for the cache the read succeeds uncached.
    func testNoMemoryForTheCacheReadsWithoutIt() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "nomem", bytes: 3 * 4096)
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        SecureFileTesting.simulateGuardedMemoryExhaustion(true)
        XCTAssertEqual(try f.readAll(), data)
        SecureFileTesting.simulateGuardedMemoryExhaustion(false)
        f.shared.lock.withLock {
            XCTAssertNil(f.shared.readCache)
            XCTAssertTrue(f.shared.readCacheUnavailable)
        }
        XCTAssertEqual(try f.readAll(), data)
        try f.close()
    }

    /// Threads on handles of one cached file (a 64 KiB cache: 16 slots for 64 chunks, so they evict
    /// each other's chunks), each writing and reading back its own chunks, whole and partial.
    func testThreadsOnOneCachedFile() throws {
        let env = try TestEnvironment()
        let (path, _) = try makeFile(env, "threads", bytes: 64 * 4096)
        let threads = 4
        let handles = try (0..<threads).map { _ in
            try SecureFile.open(path, flags: O_RDWR, services: env.services, readCache: .bytes(64 << 10))
        }
        let failures = LockedValue(0)
        DispatchQueueless.concurrentPerform(iterations: threads) { t in
            let h = handles[t]
            for round in 0..<200 {
                let chunk = t * 16 + round % 16
                let offset = Int64(chunk * 4096)
                let data = (0..<(round % 3 == 0 ? 100 : 4096)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ round &+ t) }
                do {
                    _ = try h.pwrite(data, at: offset + (data.count == 100 ? 500 : 0))
                    let back = try h.pread(count: data.count, at: offset + (data.count == 100 ? 500 : 0))
                    if back != data { failures.withLock { $0 += 1 } }
                } catch {
                    failures.withLock { $0 += 1 }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, 0)
        for h in handles { try h.close() }
    }

    /// Another process's change (here: another key provider, so another state) is seen in
    /// coordinated mode, which has no read cache; without it, the cached chunk is what is read
    /// (authentic plaintext of the time it was read: docs/FORMAT.md threat model) until a reopen.
    func testCoordinatedModeHasNoCacheAndSeesOtherWriters() throws {
        let env = try TestEnvironment()
        let (path, data) = try makeFile(env, "coordinated", bytes: 4 * 4096)
        let other = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
        let cached = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        XCTAssertEqual(try cached.readAll(), data)
        let writer = try SecureFile.open(path, flags: O_RDWR, services: other, sharing: .processes)
        let newChunk = pattern(4096, seed: 7)
        XCTAssertEqual(try writer.pwrite(newChunk, at: 4096), 4096)
        XCTAssertEqual(try cached.pread(count: 4096, at: 4096), Array(data[4096..<8192]), "not reread: the cached chunk")
        try cached.close()

        let coordinated = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: .processes,
                                              readCache: .bytes(1 << 20))
        XCTAssertEqual(try coordinated.pread(count: 4096, at: 4096), newChunk)
        XCTAssertEqual(try writer.pwrite(pattern(4096, seed: 8), at: 4096), 4096)
        XCTAssertEqual(try coordinated.pread(count: 4096, at: 4096), pattern(4096, seed: 8))
        coordinated.shared.lock.withLock { XCTAssertNil(coordinated.shared.readCache) }
        try coordinated.close()

        // A cached state joined by a coordinated handle drops its cache.
        let first = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: .bytes(1 << 20))
        _ = try first.readAll()
        first.shared.lock.withLock { XCTAssertNotNil(first.shared.readCache) }
        let second = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: .processes)
        XCTAssertEqual(try second.pread(count: 4096, at: 4096), pattern(4096, seed: 8))
        XCTAssertEqual(try writer.pwrite(pattern(4096, seed: 9), at: 4096), 4096)
        XCTAssertEqual(try first.pread(count: 4096, at: 4096), pattern(4096, seed: 9))
        first.shared.lock.withLock { XCTAssertNil(first.shared.readCache) }
        for h in [first, second, writer] { try h.close() }
    }
}
