import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import ACCrypto

/// The batched nonce source (`NonceGenerator`, `NoncePool`): every nonce is handed out once, also
/// across threads, refills and a fork (docs/FORMAT.md "Nonces and chunk keys").
final class NonceGeneratorTests: XCTestCase {
    private static let nonceSize = 12

    private static func draw(_ count: Int, size: Int = nonceSize) -> [[UInt8]] {
        (0..<count).map { _ in
            var n = [UInt8](repeating: 0, count: size)
            n.withUnsafeMutableBytes { NonceGenerator.fill($0) }
            return n
        }
    }

    func testThePoolIsInUseOnThisKernel() throws {
        // Linux ≥ 4.14 has MADV_WIPEONFORK; without the pool the tests below would not test it.
        let pool = try XCTUnwrap(NoncePool.shared, "MADV_WIPEONFORK unavailable: nonces come from RAND_bytes one call each")
        XCTAssertGreaterThanOrEqual(pool.largestRequest, 2 * Self.nonceSize)
    }

    func testNoncesAreUniqueAcrossRefills() {
        // Many pages' worth, in mixed sizes (one nonce, a chunk and its trailer, a short batch).
        var seen = Set<[UInt8]>()
        var drawn = 0
        for size in [12, 24, 120, 12, 996, 12] {
            for chunk in Self.draw(2000, size: size) {
                for i in stride(from: 0, to: size, by: Self.nonceSize) {
                    seen.insert(Array(chunk[i..<i + Self.nonceSize]))
                    drawn += 1
                }
            }
        }
        XCTAssertEqual(seen.count, drawn, "a nonce was handed out twice")
        XCTAssertFalse(seen.contains([UInt8](repeating: 0, count: Self.nonceSize)), "a zeroed (already taken) byte range was handed out")
    }

    func testLargeRequestsAreFilledDirectly() {
        let size = (NoncePool.shared?.largestRequest ?? 4096) + 12
        let a = Self.draw(1, size: size)[0], b = Self.draw(1, size: size)[0]
        XCTAssertNotEqual(a, b)
        XCTAssertNotEqual(a, [UInt8](repeating: 0, count: size))
    }

    func testConcurrentThreadsNeverShareANonce() {
        let threads = 4, perThread = 5000
        let results = LockedValue<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            let mine = Self.draw(perThread)
            results.withLock { $0 += mine }
        }
        let all = results.withLock { $0 }
        XCTAssertEqual(all.count, threads * perThread)
        XCTAssertEqual(Set(all).count, all.count, "two threads got the same nonce")
    }

    /// The pool's page is copied into a forked child; without MADV_WIPEONFORK parent and child
    /// would hand out the same next bytes.
    func testForkedChildNeverDrawsTheParentsNonces() throws {
        _ = Self.draw(1)  // the pool now holds a page of bytes not yet handed out
        let count = 200
        let bytes = count * Self.nonceSize
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&fds), 0)
        let childOut = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 16)
        defer { childOut.deallocate() }
        let pid = fork()
        if pid == 0 {
            // The child: only draws and writes, then leaves without running any exit handler.
            close(fds[0])
            for i in 0..<count {
                NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: childOut + i * Self.nonceSize, count: Self.nonceSize))
            }
            var off = 0
            while off < bytes {
                let n = Glibc.write(fds[1], childOut + off, bytes - off)
                if n <= 0 { _exit(2) }
                off += n
            }
            _exit(0)
        }
        XCTAssertGreaterThan(pid, 0, "fork failed: \(errno)")
        close(fds[1])
        let parent = Self.draw(count)
        var got = [UInt8](repeating: 0, count: bytes)
        var off = 0
        while off < bytes {
            let n = got.withUnsafeMutableBytes { Glibc.read(fds[0], $0.baseAddress! + off, bytes - off) }
            if n <= 0 { break }
            off += n
        }
        close(fds[0])
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(status, 0, "the child failed")
        XCTAssertEqual(off, bytes, "the child's nonces did not arrive")
        let child = stride(from: 0, to: bytes, by: Self.nonceSize).map { Array(got[$0..<$0 + Self.nonceSize]) }
        XCTAssertEqual(Set(child).count, count)
        XCTAssertTrue(Set(parent).isDisjoint(with: child), "parent and child drew the same nonce after fork")
    }
}
