#if canImport(Glibc)
import Glibc
#endif
import CACSecureLinux
import CACSecureSodium

/// Guarded memory for a large plaintext cache (a file's read cache, 16 MiB by default).
///
/// Like `SecureBuffer` it is its own mapping between guard pages, out of core dumps, zero-filled
/// when created and zeroed when released. Unlike `sodium_malloc`'s memory, its pages are allocated
/// when first touched: a cache of which a small file uses a few pages costs a few pages, not a fault
/// and two wipes of every page. Measured: a database reopened after another process's commit spent
/// 8 of its 9 ms locking, zeroing and wiping an untouched 16 MiB cache.
/// - Locked: its pages are locked as they are touched (`mlock2(MLOCK_ONFAULT)`), so they never reach
///   swap. Pass `lock: false` for a cache larger than the process's lock budget (`RLIMIT_MEMLOCK`)
///   should give it, which keys need; its pages may then be swapped out.
/// - Released: the pages in memory are zeroed (`mincore` says which; the others were never written
///   or are in swap, where locking would have kept them from), then the mapping is removed.
///
/// Not thread-safe, and so not `Sendable`: the owner serialises its use.
public final class LargeSecureBuffer {
    public let count: Int
    public let base: UnsafeMutableRawPointer
    /// The mapping: `count` rounded up to pages, with a guard page on either side.
    private let mapping: UnsafeMutableRawPointer
    private let mappedBytes: Int
    private static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// `count` (> 0) zero bytes, locked as touched if `lock` and the kernel allows it.
    /// - Throws: `CryptoError.outOfMemory` when the mapping cannot be made.
    public init(count: Int, lock: Bool) throws(CryptoError) {
        precondition(count > 0)
        let page = Self.pageSize
        let inner = (count + page - 1) / page * page
        let total = inner + 2 * page
        guard !GuardedMemoryPool.shared.simulatingExhaustion,
              let p = mmap(nil, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), p != MAP_FAILED
        else { throw CryptoError.outOfMemory(count) }
        guard mprotect(p + page, inner, PROT_READ | PROT_WRITE) == 0 else {
            munmap(p, total)
            throw CryptoError.outOfMemory(count)
        }
        _ = madvise(p, total, MADV_DONTDUMP)  // best effort, as sodium_malloc does
        // Pages of 4 KiB: a transparent huge page would fault in, and be wiped as, 2 MiB at a time.
        _ = madvise(p, total, MADV_NOHUGEPAGE)
        // Best effort too: a lock refused (the budget spent) leaves pages that may be swapped.
        if lock { _ = CACSecureLinux_lockOnFault(p + page, UInt(inner)) }
        self.count = count
        self.base = p + page
        self.mapping = p
        self.mappedBytes = total
    }

    /// The whole buffer; valid while `self` is alive (its owner keeps it so).
    public var bytes: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: base, count: count) }

    deinit {
        wipeResidentPages()
        munmap(mapping, mappedBytes)  // also unlocks
    }

    /// Zeroes every page in memory (`mincore`), all of them if it cannot tell.
    func wipeResidentPages() {
        let page = Self.pageSize
        let pages = (mappedBytes - 2 * page) / page
        let resident = UnsafeMutablePointer<UInt8>.allocate(capacity: pages)
        defer { resident.deallocate() }
        guard mincore(base, pages * page, resident) == 0 else {
            sodium_memzero(base, pages * page)
            return
        }
        var first = 0
        while first < pages {
            guard resident[first] & 1 != 0 else { first += 1; continue }
            var end = first + 1
            while end < pages, resident[end] & 1 != 0 { end += 1 }
            sodium_memzero(base + first * page, (end - first) * page)
            first = end
        }
    }
}
