#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import Dispatch
import Synchronization
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// Threads on one handle, threads with a handle each, and services locking while threads do I/O.
/// Run under ThreadSanitizer by scripts/test.d/45-tsan.sh (`--filter Concurrency`).
final class SecureFileConcurrencyTests: XCTestCase {
    static let threads = 6
    static let region = 5000  // not a multiple of the chunk size: neighbours share chunks

    /// Each thread owns `region` bytes; random pwrites and preads inside it, checked against its own model.
    static func hammer(thread t: Int, iterations: Int, file: SecureFile) -> (model: [UInt8], failures: [String]) {
        var rng = SplitMix64(seed: UInt64(t) &* 7919 &+ 1)
        let base = t * Self.region
        var model = [UInt8](repeating: 0, count: Self.region)
        var failures: [String] = []
        do {
            try file.pwrite(model, at: Int64(base))  // the region exists from the start
            for i in 0..<iterations {
                let off = Int.random(in: 0..<Self.region, using: &rng)
                let n = Int.random(in: 1...min(Self.region - off, 4500), using: &rng)
                if i % 3 != 2 {
                    let data = randomBytes(n, &rng)
                    try file.pwrite(data, at: Int64(base + off))
                    model.replaceSubrange(off..<off + n, with: data)
                } else {
                    let got = try file.pread(count: n, at: Int64(base + off))
                    if got != Array(model[off..<off + n]) { failures.append("thread \(t) iteration \(i): pread(\(n) @ \(base + off)) returned other bytes") }
                }
            }
        } catch { failures.append("thread \(t): \(error)") }
        return (model, failures)
    }

    func checkFile(_ path: String, _ models: [[UInt8]], services: SecureServices) throws {
        let f = try SecureFile.open(path, flags: O_RDONLY, services: services)
        let all = try f.readAll()
        try f.close()
        XCTAssertEqual(all.count, Self.threads * Self.region)
        for (t, m) in models.enumerated() where all.count >= (t + 1) * Self.region {
            XCTAssertTrue(all[(t * Self.region)..<((t + 1) * Self.region)].elementsEqual(m), "thread \(t)'s region was lost or torn")
        }
    }

    func testManyThreadsOnOneHandle() throws {
        let env = try TestEnvironment()
        let path = env.path("one-handle")
        let file = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let results = LockedValue<[Int: ([UInt8], [String])]>([:])
        DispatchQueue.concurrentPerform(iterations: Self.threads) { t in
            let r = Self.hammer(thread: t, iterations: 300, file: file)
            results.withLock { $0[t] = r }
        }
        let all = results.withLock { $0 }
        for t in 0..<Self.threads { for f in all[t]!.1.prefix(3) { XCTFail(f) } }
        let live = try file.readAll()
        XCTAssertEqual(live.count, Self.threads * Self.region)
        try file.close()
        try checkFile(path, (0..<Self.threads).map { all[$0]!.0 }, services: env.services)
    }

    func testOneHandlePerThreadOnOneFile() throws {
        let env = try TestEnvironment()
        let path = env.path("many-handles")
        try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services).close()
        let services = env.services
        let results = LockedValue<[Int: ([UInt8], [String])]>([:])
        DispatchQueue.concurrentPerform(iterations: Self.threads) { t in
            do {
                let file = try SecureFile.open(path, flags: O_RDWR, services: services)
                let r = Self.hammer(thread: t, iterations: 300, file: file)
                try file.close()
                results.withLock { $0[t] = r }
            } catch {
                results.withLock { $0[t] = ([], ["thread \(t): \(error)"]) }
            }
        }
        let all = results.withLock { $0 }
        for t in 0..<Self.threads { for f in all[t]!.1.prefix(3) { XCTFail(f) } }
        try checkFile(path, (0..<Self.threads).map { all[$0]!.0 }, services: env.services)
    }

    /// lock() while threads write and read: no crash; once locked every call fails with
    /// ACE_NO_KEYS_ERROR; no acknowledged write is lost (the lock flushes); the engine's chunk buffers
    /// hold no plaintext and no key afterwards.
    func testLockWhileThreadsDoIO() throws {
        let env = try TestEnvironment()
        let path = env.path("locking")
        let marker = Array("PLAINTEXT-MARKER".utf8)  // 16 bytes, written everywhere
        let files = try (0..<3).map { _ in try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services) }
        // Each thread signals once it has done `warmUp` calls, so the lock lands in the middle of I/O.
        let warmUp = 100
        let warmedUp = DispatchSemaphore(value: 0)
        let locked = Atomic<Bool>(false)
        struct ThreadResult { var model: [UInt8]; var failures: [String]; var noKeys = 0; var okAfterLock = 0 }
        let results = LockedValue<[Int: ThreadResult]>([:])  // a pthread lock: ThreadSanitizer sees it
        let group = DispatchGroup()
        for t in 0..<Self.threads {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                let file = files[t % files.count]
                var r = ThreadResult(model: [UInt8](repeating: 0, count: Self.region), failures: [])
                var rng = SplitMix64(seed: UInt64(t) + 100)
                let base = t * Self.region
                var i = 0
                while r.noKeys < 50 && i < 200_000 {
                    i += 1
                    if i == warmUp + 1 { warmedUp.signal() }
                    let wasLocked = locked.load(ordering: .acquiring)
                    let off = Int.random(in: 0..<(Self.region - 64), using: &rng)
                    let n = Int.random(in: 16...64, using: &rng)
                    do {
                        if i % 2 == 0 {
                            var data = [UInt8](repeating: 0, count: n)
                            for j in 0..<n { data[j] = marker[(off + j) % 16] ^ UInt8(truncatingIfNeeded: i & 1) }
                            try file.pwrite(data, at: Int64(base + off))
                            r.model.replaceSubrange(off..<off + n, with: data)
                        } else {
                            let got = try file.pread(count: n, at: Int64(base + off))
                            let want = Array(r.model[off..<min(off + n, r.model.count)])
                            if !got.isEmpty && got != Array(want.prefix(got.count)) { r.failures.append("thread \(t): wrong bytes") }
                        }
                        if wasLocked { r.okAfterLock += 1 }
                    } catch let e as SecureFileError {
                        if e.code == .noKeys { r.noKeys += 1 } else { r.failures.append("thread \(t): \(e.code.name) \(e.message)") }
                        if !locked.load(ordering: .acquiring) && e.code == .noKeys { r.failures.append("thread \(t): noKeys before lock") }
                    } catch { r.failures.append("\(error)") }
                }
                results.withLock { $0[t] = r }
            }
        }
        for _ in 0..<Self.threads {
            XCTAssertEqual(warmedUp.wait(timeout: .now() + 120), .success, "a thread did not start its I/O")
        }
        locked.store(true, ordering: .releasing)
        env.services.lock()
        group.wait()
        let all = results.withLock { $0 }
        for t in 0..<Self.threads {
            let r = all[t]!
            for f in r.failures.prefix(3) { XCTFail(f) }
            XCTAssertGreaterThanOrEqual(r.noKeys, 50, "thread \(t) did not see ACE_NO_KEYS_ERROR after lock")
            XCTAssertTrue(r.model.contains { $0 != 0 }, "thread \(t) wrote nothing before the lock")
        }
        // Every call fails now, on every handle.
        for f in files {
            XCTAssertEqual(aceCode { _ = try f.pread(count: 10, at: 0) }, .noKeys)
            XCTAssertEqual(aceCode { try f.pwrite([1], at: 0) }, .noKeys)
            XCTAssertEqual(aceCode { _ = try f.seek(0, whence: SEEK_END) }, .noKeys)
        }
        // No plaintext (and no key) left in the engine's buffers.
        let shared = files[0].shared
        shared.lock.withLock {
            for (name, buffer) in [("cache", shared.cache), ("work", shared.work)] {
                let bytes = buffer.withUnsafeBytes { Array($0) }
                XCTAssertTrue(bytes.allSatisfy { $0 == 0 }, "the \(name) buffer still holds data after lock")
                XCTAssertFalse(containsWindow(bytes, of: marker), "the \(name) buffer holds plaintext after lock")
            }
            XCTAssertNil(shared.cipher, "the AES context survived lock")
            XCTAssertNil(shared.dataKey, "the data key survived lock")
            XCTAssertEqual(shared.cacheIndex, -1)
        }
        // Unlock: every acknowledged write is there.
        try env.services.unlock(passcode: nil)
        for f in files { try f.close() }
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let content = try f.readAll()
        try f.close()
        for t in 0..<Self.threads {
            let m = all[t]!.model
            let start = t * Self.region
            let got = content.count >= start ? Array(content[start..<min(content.count, start + Self.region)]) : []
            // The region's untouched tail may be beyond the file end: compare what the model wrote.
            let written = m.lastIndex(where: { $0 != 0 }).map { $0 + 1 } ?? 0
            XCTAssertTrue(got.count >= written && got.prefix(written).elementsEqual(m.prefix(written)), "thread \(t): acknowledged writes lost across lock")
        }
    }

    func containsWindow(_ haystack: [UInt8], of needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
            if haystack[i..<i + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}
