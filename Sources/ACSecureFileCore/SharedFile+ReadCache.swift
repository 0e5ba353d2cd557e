#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

/// The opt-in read cache (`SecureFile.ReadCache`, `ACSECURE_OPEN_READ_CACHE`): decrypted chunks as
/// they are on disk, so a chunk read again costs a copy instead of a `pread` and a decryption.
///
/// One guarded allocation of slots of one chunk each, allocated at the first miss (its pages as they
/// are touched: `LargeSecureBuffer`); 2-way set-associative by chunk index (the set is
/// `index mod sets`), the way not used last is replaced.
/// Every chunk the engine reads whole from disk or writes (`writeRun`) is stored, so it always holds
/// what the disk holds; a slot is zero beyond its chunk's length. Truncation drops the chunks it
/// affects; a new generation, a recovered or resynchronised end, coordinated mode and a services
/// lock drop it all (freed, so wiped); the last close frees it. Failing to allocate it only means
/// reading without it (`readCacheUnavailable`).
///
/// Its own `mutex` guards the slots: readers that hold the file's lock shared
/// (`SharedFile.readConcurrently`) look up, copy out and store at the same time.
final class ChunkReadCache {
    private let mutex = PThreadMutex()
    let buffer: LargeSecureBuffer
    let base: UnsafeMutableRawPointer
    let shift: Int
    let setMask: Int64
    /// Chunk index per slot, -1 when empty; slots `2s` and `2s+1` form set `s`.
    let indices: UnsafeMutablePointer<Int64>
    /// Plaintext length per slot.
    let lengths: UnsafeMutablePointer<Int32>
    /// Per set: the way used last (0 or 1).
    let lastUsed: UnsafeMutablePointer<UInt8>

    /// At least two slots of `1 << chunkShift` bytes, the number of sets a power of two, at most `bytes`.
    init(bytes: Int, chunkShift: Int) throws(CryptoError) {
        var sets = 1
        while (sets * 4) << chunkShift <= bytes { sets *= 2 }
        let slots = sets * 2
        // Cached plaintext may exceed what the process can lock (RLIMIT_MEMLOCK, 8 MiB by default):
        // the cache takes at most half of it, so keys and the other buffers stay locked.
        var limit = rlimit()
        let lock = getrlimit(__rlimit_resource_t(__RLIMIT_MEMLOCK.rawValue), &limit) != 0 || limit.rlim_cur == rlim_t.max
            || UInt64(slots << chunkShift) <= UInt64(limit.rlim_cur) / 2
        buffer = try LargeSecureBuffer(count: slots << chunkShift, lock: lock)
        base = buffer.base
        shift = chunkShift
        setMask = Int64(sets - 1)
        indices = .allocate(capacity: slots)
        indices.initialize(repeating: -1, count: slots)
        lengths = .allocate(capacity: slots)
        lengths.initialize(repeating: 0, count: slots)
        lastUsed = .allocate(capacity: sets)
        lastUsed.initialize(repeating: 0, count: sets)
    }

    deinit {
        indices.deallocate()
        lengths.deallocate()
        lastUsed.deallocate()
    }

    var slotCount: Int { Int(setMask + 1) * 2 }

    @inline(__always) private func slotBase(_ slot: Int) -> UnsafeMutableRawPointer { base + slot << shift }

    /// The slot holding chunk `index`, or nil.
    @inline(__always) private func slot(of index: Int64) -> Int? {
        let first = 2 * Int(index & setMask)
        if indices[first] == index { return first }
        if indices[first + 1] == index { return first + 1 }
        return nil
    }

    /// The cached plaintext of chunk `index` (marks it used), or nil.
    /// The pointer stays valid only while the file's lock is held exclusively.
    @inline(__always) func lookup(_ index: Int64) -> UnsafeMutableRawPointer? {
        mutex.withLock {
            guard let slot = slot(of: index) else { return nil }
            lastUsed[slot >> 1] = UInt8(slot & 1)
            return slotBase(slot)
        }
    }

    /// Copies `count` bytes of chunk `index` from `offset` in it to `destination` (marks it used);
    /// false if it is not cached.
    @inline(__always) func copy(_ index: Int64, from offset: Int, count: Int, to destination: UnsafeMutableRawPointer) -> Bool {
        mutex.withLock {
            guard let slot = slot(of: index) else { return false }
            lastUsed[slot >> 1] = UInt8(slot & 1)
            destination.copyMemory(from: slotBase(slot) + offset, byteCount: count)
            return true
        }
    }

    @inline(__always) func holds(_ index: Int64) -> Bool { mutex.withLock { slot(of: index) != nil } }

    /// Stores `length` bytes of chunk `index` from `plaintext` (its slot if cached, else an empty
    /// way, else the way not used last).
    func store(_ index: Int64, from plaintext: UnsafeRawPointer, length: Int) {
        mutex.lock()
        defer { mutex.unlock() }
        let set = Int(index & setMask)
        let slot = slot(of: index)
            ?? (indices[2 * set] < 0 ? 2 * set : indices[2 * set + 1] < 0 ? 2 * set + 1 : 2 * set + (lastUsed[set] == 0 ? 1 : 0))
        let p = slotBase(slot)
        p.copyMemory(from: plaintext, byteCount: length)
        let old = Int(lengths[slot])
        if old > length { secureZero(UnsafeMutableRawBufferPointer(start: p + length, count: old - length)) }
        indices[slot] = index
        lengths[slot] = Int32(length)
        lastUsed[set] = UInt8(slot & 1)
    }

    /// Forgets (and wipes) every chunk from `index` on.
    func drop(from index: Int64) {
        mutex.lock()
        defer { mutex.unlock() }
        for slot in 0..<slotCount where indices[slot] >= index {
            secureZero(UnsafeMutableRawBufferPointer(start: slotBase(slot), count: Int(lengths[slot])))
            indices[slot] = -1
            lengths[slot] = 0
        }
    }
}

extension SharedFile {
    /// The read cache's plaintext of chunk `index`, if it holds it and may serve it: the disk's last
    /// chunk only once the end is authenticated (an uncached read of it checks the end).
    @inline(__always) func readCacheSlot(_ index: Int64) -> UnsafeMutableRawPointer? {
        guard let readCache, tailVerified || index < diskChunks - 1 else { return nil }
        return readCache.lookup(index)
    }

    /// Keeps chunk `index` (as it is, or is about to be, on disk) in the read cache, allocating the
    /// cache at first use. Without guarded memory for it, the file is read without a cache.
    @inline(__always) func readCacheStore(_ index: Int64, from plaintext: UnsafeRawPointer, length: Int) {
        guard readCacheBytes > 0 else { return }
        if readCache == nil {
            guard !coordinated, !readCacheUnavailable else { return }
            do throws(CryptoError) { readCache = try ChunkReadCache(bytes: readCacheBytes, chunkShift: Int(layout.chunkShift)) } catch {
                readCacheUnavailable = true
                return
            }
        }
        readCache!.store(index, from: plaintext, length: length)
    }

    /// Asks for a read cache of at least `bytes` (the largest any handle asked for); coordinated mode has none.
    func requestReadCache(bytes: Int) {
        guard bytes > readCacheBytes else { return }
        readCacheBytes = bytes
        readCache = nil  // allocated again, larger, at the next miss
        readCacheUnavailable = false
    }

    /// Forgets the cached chunks from `index` on.
    func readCacheDrop(from index: Int64) {
        readCache?.drop(from: max(0, index))
    }

    /// Frees the read cache (its plaintext is wiped); it is allocated again at the next miss.
    func dropReadCache() {
        readCache?.drop(from: 0)
        readCache = nil
    }
}
