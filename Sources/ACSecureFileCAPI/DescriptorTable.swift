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

    private struct State {
        var entries: [Int32: Entry] = [:]
        /// Files whose kernel descriptor was closed behind our back (plain `close(2)`) and then
        /// reused: kept alive so their teardown can never touch the descriptor's new owner.
        var orphans: [Entry] = []
    }

    private let state = LockedValue(State())

    func lookup(_ fd: Int32) -> Entry? {
        state.withLock { $0.entries[fd] }
    }

    /// Registers a freshly opened file under its kernel descriptor.
    func insert(_ file: SecureFile, lastError: ACErrorCode = .noError) -> Int32 {
        let fd = file.fileDescriptor
        let entry = Entry(file)
        entry.lastError.store(lastError.aceValue, ordering: .relaxed)
        state.withLock { s in
            if let stale = s.entries.updateValue(entry, forKey: fd) { s.orphans.append(stale) }
        }
        return fd
    }

    /// Removes the descriptor; the caller closes the file afterwards.
    func remove(_ fd: Int32) -> Entry? {
        state.withLock { $0.entries.removeValue(forKey: fd) }
    }

    var count: Int { state.withLock { $0.entries.count } }
}
