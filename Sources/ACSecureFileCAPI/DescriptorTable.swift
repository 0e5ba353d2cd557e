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
        let lastError = Atomic<Int32>(ACErrorCode.noError.aceValue)
        init(_ file: SecureFile) { self.file = file }
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

    // The lookup of every call locks the mutex itself (no generic closure) and reads the state
    // without the runtime's exclusivity check: the mutex makes every access exclusive.
    private let mutex = PThreadMutex()
    @exclusivity(unchecked) private nonisolated(unsafe) var state = State()

    func lookup(_ fd: Int32) -> Entry? {
        mutex.lock()
        defer { mutex.unlock() }
        return state.entry(fd)
    }

    /// Registers a freshly opened file under its kernel descriptor.
    func insert(_ file: SecureFile, lastError: ACErrorCode = .noError) -> Int32 {
        let fd = file.fileDescriptor
        let entry = Entry(file)
        entry.lastError.store(lastError.aceValue, ordering: .relaxed)
        mutex.withLock {
            if let stale = state.set(fd, entry) { state.orphans.append(stale) }
        }
        return fd
    }

    /// Removes the descriptor; the caller closes the file afterwards.
    func remove(_ fd: Int32) -> Entry? {
        mutex.withLock { state.set(fd, nil) }
    }

    var count: Int { mutex.withLock { state.count } }
}
