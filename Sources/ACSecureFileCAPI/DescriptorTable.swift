#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import ACCrypto
import ACSecureFileCore

/// The open secure descriptors of the process: kernel fd → open file and its last `ACE_*` value.
///
/// The key is the `SecureFile`'s own kernel descriptor, so numbers are unique while a file is open
/// and are reused exactly as the kernel reuses them. `close` removes the entry *before* the kernel
/// descriptor is released, so a concurrent open that receives the same number can never find (or
/// have removed) the old entry.
final class DescriptorTable: Sendable {
    /// One open secure descriptor. A class, so a call that looked it up can record its result
    /// even if another thread closes the descriptor meanwhile (the record is then simply dropped).
    final class Entry: Sendable {
        let file: SecureFile
        /// `file`, for a call that must not retain it (the entry holds it).
        let unretainedFile: Unmanaged<SecureFile>
        let lastError = Atomic<Int32>(ACErrorCode.noError.aceValue)
        init(_ file: SecureFile) {
            self.file = file
            unretainedFile = Unmanaged.passUnretained(file)
        }
    }

    static let shared = DescriptorTable()

    struct State {
        /// Entries by descriptor, for the descriptors below `directSlots` (the kernel hands out the
        /// lowest free number, so nearly all): an index instead of hashing on every call.
        var direct: [Entry?] = []
        var others: [Int32: Entry] = [:]
        var count = 0
        /// Files whose kernel descriptor was closed behind our back (plain `close(2)`) and then
        /// reused: kept alive so their teardown can never touch the descriptor's new owner.
        var orphans: [Entry] = []

        func entry(_ fd: Int32) -> Entry? {
            guard fd >= 0 && fd < DescriptorTable.directSlots else { return others[fd] }
            return Int(fd) < direct.count ? direct[Int(fd)] : nil
        }

        /// Sets the entry of `fd` (nil: removes it); returns the one it replaces.
        mutating func set(_ fd: Int32, _ entry: Entry?) -> Entry? {
            let old: Entry?
            if fd >= 0 && fd < DescriptorTable.directSlots {
                if Int(fd) >= direct.count {
                    guard entry != nil else { return nil }
                    direct.append(contentsOf: repeatElement(nil, count: min(max(Int(fd) + 1, 2 * direct.count), Int(DescriptorTable.directSlots)) - direct.count))
                }
                old = direct[Int(fd)]
                direct[Int(fd)] = entry
            } else if let entry {
                old = others.updateValue(entry, forKey: fd)
            } else {
                old = others.removeValue(forKey: fd)
            }
            count += (entry == nil ? 0 : 1) - (old == nil ? 0 : 1)
            return old
        }
    }

    static let directSlots: Int32 = 4096

    // The lookup locks the mutex itself (no generic closure) and reads the state without the
    // runtime's exclusivity check: the mutex makes every access exclusive.
    private let mutex = PThreadMutex()
    @exclusivity(unchecked) private nonisolated(unsafe) var state = State()
    /// Changed (under the mutex) by every insert and remove: a thread's `LookupCache` is valid while
    /// it is unchanged.
    private let generation = Atomic<UInt64>(1)

    func lookup(_ fd: Int32) -> Entry? {
        mutex.lock()
        defer { mutex.unlock() }
        return state.entry(fd)
    }

    /// The entry of `fd` when this thread's last lookup was of `fd` and no descriptor has been
    /// opened or closed since (`LookupCache`): no lock, and no retain or release for the caller,
    /// which uses it through `_withUnsafeGuaranteedRef` (the mutex, the entry's retain and release
    /// were a sixth of a 100-byte write-back append). nil: take `lookup`, which fills the cache.
    /// The cache holds the entry strongly, so an entry that a concurrent close removes stays
    /// valid for a call that found it first (its file then reports EBADF, as when the lookup
    /// precedes the close). `cache.depth` keeps a call made inside another from replacing it.
    @inline(__always)
    func cachedEntry(_ fd: Int32, in cache: LookupCache) -> Unmanaged<Entry>? {
        let current = generation.load(ordering: .acquiring)
        guard cache.fd == fd, cache.generation == current, cache.depth == 0 else { return nil }
        return cache.entry
    }

    /// `lookup`, remembered in `cache` for the next call of this thread.
    func lookup(_ fd: Int32, filling cache: LookupCache) -> Entry? {
        mutex.lock()
        let entry = state.entry(fd)
        let seen = generation.load(ordering: .relaxed)
        mutex.unlock()
        if cache.depth == 0 { cache.remember(fd, generation: seen, entry: entry) }
        return entry
    }

    /// Registers a freshly opened file under its kernel descriptor.
    func insert(_ file: SecureFile, lastError: ACErrorCode = .noError) -> Int32 {
        let fd = file.fileDescriptor
        let entry = Entry(file)
        entry.lastError.store(lastError.aceValue, ordering: .relaxed)
        mutex.withLock {
            if let stale = state.set(fd, entry) { state.orphans.append(stale) }
            generation.add(1, ordering: .releasing)
        }
        return fd
    }

    /// Removes the descriptor; the caller closes the file afterwards. The closing thread's cache lets
    /// go of the entry (other threads' caches do at their next call on another descriptor, or exit).
    func remove(_ fd: Int32) -> Entry? {
        let entry = mutex.withLock {
            let old = state.set(fd, nil)
            generation.add(1, ordering: .releasing)
            return old
        }
        LookupCache.current._withUnsafeGuaranteedRef { cache in
            if cache.depth == 0, cache.fd == fd { cache.remember(-1, generation: 0, entry: nil) }
        }
        return entry
    }

    var count: Int { mutex.withLock { state.count } }
}

/// The last descriptor a thread looked up, its entry and the table's generation then
/// (`DescriptorTable.cachedEntry`). One per thread (a pthread key: released when the thread exits).
final class LookupCache {
    private(set) var fd: Int32 = -1
    private(set) var generation: UInt64 = 0
    private(set) var entry: Unmanaged<DescriptorTable.Entry>?
    /// 1 while a call uses `entry` unretained.
    var depth = 0

    func remember(_ fd: Int32, generation: UInt64, entry: DescriptorTable.Entry?) {
        let old = self.entry
        self.fd = fd
        self.generation = generation
        self.entry = entry.map { Unmanaged.passRetained($0) }
        old?.release()
    }

    deinit { entry?.release() }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        guard pthread_key_create(&key, { Unmanaged<LookupCache>.fromOpaque($0!).release() }) == 0 else {
            fatalError("DescriptorTable: no pthread key left for the lookup cache")
        }
        return key
    }()

    /// This thread's cache (made at its first call).
    static var current: Unmanaged<LookupCache> {
        let key = self.key
        if let raw = pthread_getspecific(key) { return Unmanaged.fromOpaque(raw) }
        let made = Unmanaged.passRetained(LookupCache())
        pthread_setspecific(key, made.toOpaque())
        return made
    }
}
