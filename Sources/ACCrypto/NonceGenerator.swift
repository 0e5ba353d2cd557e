#if canImport(Glibc)
import Glibc
#endif
import CACSecureLibCrypto
import Synchronization

/// Nonces for bulk encryption: OpenSSL's DRBG (seeded from the kernel), drawn a page at a time.
///
/// One `RAND_bytes` call costs about 1 µs (the DRBG takes locks, looks up its parameters and calls
/// getpid(2) to notice a fork), as much as sealing a 4 KiB chunk, while one call for 4 KiB costs
/// little more. So small requests are served from `NoncePool`, a page refilled by one call when it
/// runs out; each byte is handed out once. Requests larger than a quarter of the page, and every
/// request where the kernel cannot wipe the page on fork, call `RAND_bytes` directly.
public enum NonceGenerator {
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        #if DEBUG
        if DeterministicRandomness.fillIfActive(base, buffer.count) { return }
        #endif
        if let pool = NoncePool.shared, pool.take(base, buffer.count) { return }
        drawDirectly(base, buffer.count)
    }

    static func drawDirectly(_ base: UnsafeMutableRawPointer, _ count: Int) {
        // RAND_bytes fails only if the DRBG cannot be seeded; a nonce must never be reused, so stop.
        precondition(RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(count)) == 1, "OpenSSL RAND_bytes failed")
    }
}

/// One page of random bytes not yet handed out, with its lock and fill level in the page itself.
///
/// Fork safety: the page is `MADV_WIPEONFORK`, so a child process (fork, or clone without shared
/// memory) starts with it all zero, which reads as "unlocked, empty": its first request refills
/// from its own DRBG (which OpenSSL reseeds after a fork), and parent and child never hand out the
/// same bytes. A thread that held the lock in the parent does not exist in the child, and the
/// wipe releases the lock with it. `MADV_DONTDUMP` keeps bytes not yet used out of core dumps, and
/// each byte is zeroed as it is taken.
///
/// A struct of pointers into that page, not a class: the one pool lives as long as the process, and
/// reading it from the global then needs no reference count (a retain and a release per nonce
/// request otherwise, on every write).
struct NoncePool: @unchecked Sendable {
    /// nil when the kernel does not support `MADV_WIPEONFORK` (Linux before 4.14) or mmap fails.
    static let shared: NoncePool? = NoncePool()

    /// 0 unlocked, 1 locked.
    private let lockWord: UnsafeMutablePointer<Atomic<Int>>
    /// How many bytes at the end of `bytes` are not handed out yet (guarded by the lock).
    private let available: UnsafeMutablePointer<Int>
    private let bytes: UnsafeMutableRawPointer
    private let capacity: Int
    /// Larger requests go straight to `RAND_bytes`: they are rare (a batch of many chunks) and
    /// would empty the page.
    let largestRequest: Int

    private static let headerSize = 64

    private init?() {
        let size = Int(sysconf(Int32(_SC_PAGESIZE)))
        guard size >= 4 * Self.headerSize,
              let p = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              p != UnsafeMutableRawPointer(bitPattern: -1)
        else { return nil }
        guard madvise(p, size, MADV_WIPEONFORK) == 0 else {
            munmap(p, size)
            return nil
        }
        _ = madvise(p, size, MADV_DONTDUMP)  // best effort: the wipe on fork is what uniqueness needs
        lockWord = p.bindMemory(to: Atomic<Int>.self, capacity: 1)
        lockWord.initialize(to: Atomic(0))  // the same bits as the zeroed page a child sees
        available = (p + MemoryLayout<Int>.stride).bindMemory(to: Int.self, capacity: 1)
        available.initialize(to: 0)
        bytes = p + Self.headerSize
        capacity = size - Self.headerSize
        largestRequest = capacity / 4
    }

    /// Copies `count` fresh random bytes to `out`; false (nothing taken) when `count` is larger
    /// than `largestRequest`.
    func take(_ out: UnsafeMutableRawPointer, _ count: Int) -> Bool {
        guard count <= largestRequest else { return false }
        acquire()
        defer { release() }
        if available.pointee < count {
            NonceGenerator.drawDirectly(bytes, capacity)
            available.pointee = capacity
        }
        let from = bytes + (capacity - available.pointee)
        out.copyMemory(from: from, byteCount: count)
        secureZero(UnsafeMutableRawBufferPointer(start: from, count: count))
        available.pointee -= count
        return true
    }

    private func acquire() {
        var spins = 0
        while !lockWord.pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
            spins += 1
            if spins > 64 { sched_yield() }  // the holder may be refilling (about a microsecond)
        }
    }

    private func release() {
        lockWord.pointee.store(0, ordering: .releasing)
    }
}
