import Synchronization
import CACSecureSodium

/// Released `SecureBytes` buffers kept for reuse, so that opening a file does not pay for fresh
/// guarded memory each time.
///
/// A `sodium_malloc` costs an `mmap`, four `mprotect`s, an `mlock` and two `madvise`s, and its
/// `sodium_free` as many again: about 30 µs for the five buffers a fresh open of a secure file
/// allocates (its chunk cache and work buffer, the data key, the key schedule's copies), against 4 µs
/// for a plain `open`+`fstat`. A buffer returned here is **zeroed first** and stays what it was:
/// between its guard pages, `mlock`ed, excluded from core dumps. So the promise of docs/FORMAT.md
/// (keys and plaintext live only in guarded memory, zeroed when released) holds; what changes is
/// that the zeroed pages stay mapped and locked for the next buffer of the same size instead of
/// being unmapped at once. libsodium's canary in front of a buffer is checked when it is finally
/// freed (`sodium_free` on a full pool), no longer at each release.
///
/// Bounded: buffers up to `maximumBufferSize` bytes only, at most `maximumBuffersPerSize` per exact
/// size and `maximumPooledBytes` of locked pages in all, so a process never keeps more than that
/// (the `RLIMIT_MEMLOCK` budget is shared with live buffers).
///
/// The pool itself allocates nothing: `sizeClasses` fixed stacks, each claimed by one exact size
/// while it holds buffers (a process mostly uses few sizes: the chunk sizes, 32-byte keys, 16-byte
/// fingerprints, HKDF's scratch). A buffer of yet another size while every stack is in use takes
/// the stack of another size in turn, whose buffers are freed. (A dictionary of arrays here cost a
/// heap allocation per take: every open made a dozen.)
final class GuardedMemoryPool: Sendable {
    static let shared = GuardedMemoryPool()

    static let maximumBufferSize = 64 << 10
    static let maximumBuffersPerSize = Addresses.count
    static let maximumPooledBytes = 1 << 20
    static let sizeClasses = Stacks.count
    typealias Addresses = InlineArray<16, UInt>
    private typealias Stacks = InlineArray<12, Stack>

    /// The buffers of one size: `addresses[0..<count]` (as integers: pointers are not Sendable).
    private struct Stack {
        var size = 0
        var count = 0
        var addresses = Addresses(repeating: 0)
    }

    private struct State {
        var stacks = Stacks(repeating: Stack())
        var pooledBytes = 0
        /// The stack a new size takes next when none is empty.
        var victim = 0

        /// The stack holding `size`, if any.
        func stackIndex(_ size: Int) -> Int? {
            stacks.indices.first { stacks[$0].size == size && stacks[$0].count > 0 }
        }

        /// The stack for a buffer of `size` given back: its own, an empty one, or another size's,
        /// whose buffers are moved to `evicted` (to be freed outside the lock).
        mutating func claimStack(_ size: Int, evicting evicted: inout Stack) -> Int {
            if let i = stackIndex(size) { return i }
            let i = stacks.indices.first { stacks[$0].count == 0 } ?? victim
            if stacks[i].count > 0 {
                evicted = stacks[i]
                pooledBytes -= stacks[i].count * GuardedMemoryPool.footprint(stacks[i].size)
                victim = (victim + 1) % stacks.count
            }
            stacks[i].size = size
            stacks[i].count = 0
            return i
        }
    }

    // Pointers are owned by the pool while they are in it; the mutex serialises every access.
    private let state = LockedValue<State>(State())

    /// The locked pages a buffer of `size` bytes holds (sodium_malloc rounds up to whole pages).
    private static func footprint(_ size: Int) -> Int {
        let page = 4096
        return (size + page - 1) / page * page
    }

    /// A zeroed guarded buffer of exactly `size` (> 0) bytes, or nil if none is pooled.
    func take(_ size: Int) -> UnsafeMutableRawPointer? {
        guard size <= Self.maximumBufferSize, !simulatingExhaustion else { return nil }
        let address: UInt = state.withLock { s in
            guard let i = s.stackIndex(size) else { return 0 }
            s.stacks[i].count -= 1
            s.pooledBytes -= Self.footprint(size)
            return s.stacks[i].addresses[s.stacks[i].count]
        }
        return UnsafeMutableRawPointer(bitPattern: address)
    }

    /// Takes back a guarded buffer of `size` bytes from `sodium_malloc`: zeroes it and keeps it, or
    /// frees it (`sodium_free`) when the pool is full.
    func give(_ p: UnsafeMutableRawPointer, size: Int) {
        sodium_memzero(p, size)
        let address = UInt(bitPattern: p)
        var evicted = Stack()
        let kept = size <= Self.maximumBufferSize && state.withLock { s in
            let footprint = Self.footprint(size)
            let i = s.claimStack(size, evicting: &evicted)
            guard s.pooledBytes + footprint <= Self.maximumPooledBytes, s.stacks[i].count < Self.maximumBuffersPerSize else { return false }
            s.stacks[i].addresses[s.stacks[i].count] = address
            s.stacks[i].count += 1
            s.pooledBytes += footprint
            return true
        }
        if !kept { sodium_free(p) }
        for j in 0..<evicted.count { sodium_free(UnsafeMutableRawPointer(bitPattern: evicted.addresses[j])) }
    }

    /// Tests: while set, the pool hands out nothing and every fresh allocation fails, as when the
    /// process is out of mappings or address space.
    private let exhaustion = Atomic<Bool>(false)
    var simulatingExhaustion: Bool { exhaustion.load(ordering: .relaxed) }
    func simulateExhaustion(_ on: Bool) { exhaustion.store(on, ordering: .relaxed) }

    /// The locked bytes the pool holds now (tests).
    var pooledBytes: Int { state.withLock { $0.pooledBytes } }

    /// How many buffers of `size` bytes are pooled (tests).
    func pooledCount(size: Int) -> Int { state.withLock { s in s.stackIndex(size).map { s.stacks[$0].count } ?? 0 } }
}
