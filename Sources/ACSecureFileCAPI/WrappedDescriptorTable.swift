#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import ACCrypto
import CACSecureFile
import ACSecureFileCore
import ACSecureSharingCore

/// The open wrapped file descriptors of the process (ACSecureSharing.h): kernel fd → reader.
///
/// A separate table from `DescriptorTable` on purpose: a wrapped file is read-only and its offsets
/// start after the name record, so none of the `ACSecureFile*` calls apply to it as they stand, and
/// a wrapped descriptor given to them is simply unknown (EBADF), and vice versa.
///
/// The key is `anchor`, a read-only kernel descriptor of the wrapped file that this layer opens
/// itself (the reader's own descriptor is private to the engine): numbers are then unique
/// among all secure and wrapped descriptors, reused as the kernel reuses them, and fstat has a
/// descriptor to report on. The handle is opened through /proc/self/fd/<anchor>, so both are the
/// same inode even if the path is replaced meanwhile.
final class WrappedDescriptorTable: Sendable {
    final class Entry: Sendable {
        let anchor: Int32
        let handle: WrappedFileReader
        /// The descriptor's offset, counted from the first byte of the original file. Held while a
        /// call runs, so read/pread/lseek on one descriptor are atomic with respect to each other.
        let position = LockedValue<Int64>(0)
        let lastError = Atomic<Int32>(ACErrorCode.noError.aceValue)

        init(anchor: Int32, handle: WrappedFileReader) {
            self.anchor = anchor
            self.handle = handle
        }
    }

    static let shared = WrappedDescriptorTable()

    private let entries = LockedValue<[Int32: Entry]>([:])

    func lookup(_ fd: Int32) -> Entry? { entries.withLock { $0[fd] } }

    /// Registers an open wrapped file under its anchor. An entry still under that number was
    /// closed behind our back (plain `close(2)`): its anchor now belongs to someone else and is
    /// not closed; its handle closes its own descriptor when released.
    func insert(_ entry: Entry) -> Int32 {
        _ = entries.withLock { $0.updateValue(entry, forKey: entry.anchor) }
        return entry.anchor
    }

    /// Removes the descriptor; the caller closes it afterwards, so a concurrent open that receives
    /// the same number never finds the old entry.
    func remove(_ fd: Int32) -> Entry? { entries.withLock { $0.removeValue(forKey: fd) } }

    var count: Int { entries.withLock { $0.count } }
}

/// A failure as C sees it: errno and the detail (an `ACE_*` value, or
/// `ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT`).
struct WrappedCError: Error {
    var errno: Int32
    var code: Int32

    init(errno: Int32, code: Int32) {
        self.errno = errno
        self.code = code
    }

    /// An `ACE_*` detail, with the code's errno (`ACErrorTable`) unless a system call gave one.
    init(_ code: ACErrorCode, errno: Int32? = nil) {
        self.init(errno: errno ?? code.defaultErrno, code: code.aceValue)
    }

    init(_ e: SecureFileError) { self.init(e.code, errno: e.errno) }

    /// The one place where the sharing calls' errors become errno + detail.
    init(_ error: any Error) {
        switch error {
        case let e as SecureFileError: self.init(e)
        case let e as WrappedCError: self = e
        case WrappedFileOpenError.unknownWrapperFormat:
            self.init(errno: EILSEQ, code: Int32(ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT.rawValue))
        case WrappedFileOpenError.secureFile(let e): self.init(e)
        default:
            // Every call here throws one of the above; anything else is a bug of this layer.
            self.init(.internalError)
        }
    }

    static func argument(_ errno: Int32) -> WrappedCError {
        WrappedCError(.invalidArgument, errno: errno)
    }
}

enum WrappedCResult {
    /// Runs `body` on the entry behind `fd` with its offset locked. Unknown descriptor: -1/EBADF.
    /// Otherwise records `ACE_NO_ERROR` or the failure's detail, and sets errno on failure.
    static func onEntry<R: SignedInteger>(_ fd: Int32, _ body: (Entry, inout Int64) throws -> R) -> R {
        guard let entry = WrappedDescriptorTable.shared.lookup(fd) else {
            errno = EBADF
            return -1
        }
        do {
            let result = try entry.position.withLock { position in try body(entry, &position) }
            entry.lastError.store(ACErrorCode.noError.aceValue, ordering: .relaxed)
            return result
        } catch {
            let e = WrappedCError(error)
            entry.lastError.store(e.code, ordering: .relaxed)
            LastErrorMessage.set(error)
            errno = e.errno
            return -1
        }
    }

    /// Runs a call without a descriptor: only errno reports a failure.
    static func withoutEntry(_ body: () throws -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch {
            LastErrorMessage.set(error)
            errno = WrappedCError(error).errno
            return -1
        }
    }

    typealias Entry = WrappedDescriptorTable.Entry
}

extension WrappedDescriptorTable.Entry {
    /// Reads up to `buffer.count` bytes of the original file at `offset`; 0 at or past the end.
    /// The plaintext goes straight from the engine's guarded cache into the caller's buffer.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        try handle.read(into: buffer, at: offset)
    }
}
