#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls
import CACSecureLinux

/// An open secure file: the equivalent of one POSIX open file description.
///
/// Its `fileDescriptor` is a real kernel descriptor on the encrypted file (never use it for plain
/// I/O). Handles on the same file share state, so each sees the others' writes at once. A handle
/// may be used from many threads: operations on one file are serialised, except `pread`s, which
/// run at once (docs/FORMAT.md "Caching, durability, concurrency and crashes").
public final class SecureFile: @unchecked Sendable {
    public let fileDescriptor: Int32
    public let path: BytePath
    let shared: SharedFile
    /// `shared.lock.raw`, one load from every call instead of three.
    private let lock: OpaquePointer
    let canRead: Bool
    let canWrite: Bool
    let appendMode: Bool
    /// Write-back buffering (opt-in): writes may stay in memory until flush, sync, close, a services
    /// lock or normal exit.
    public let buffering: Buffering
    /// `O_DSYNC` / `O_SYNC`: every write and truncate of this handle ends with `datasync()` /
    /// `sync()` (so it is durable when it returns, as with those flags on a plain file).
    let synchronized: Durability?
    // Guarded by shared.lock (written with it held exclusively):
    private var offset: Int64 = 0
    private var isClosed = false
    /// The last deferred write error of the shared state this handle has reported.
    private var seenErrorGeneration: UInt64

    /// The largest plaintext size of a secure file: 2^44 bytes (16 TiB).
    public static let maximumFileSize: Int64 = 1 << 44

    init(fd: Int32, path: BytePath, shared: SharedFile, accessMode: Int32, append: Bool, buffering: Buffering,
         synchronized: Durability? = nil) {
        self.fileDescriptor = fd
        self.path = path
        self.shared = shared
        self.lock = shared.lock.raw
        self.canRead = accessMode != O_WRONLY
        self.canWrite = accessMode != O_RDONLY
        self.appendMode = append
        self.buffering = buffering
        self.synchronized = synchronized
        self.seenErrorGeneration = shared.lock.withLock { shared.deferredErrorGeneration }
    }

    // MARK: I/O

    /// Runs `body` with the file locked, after the checks every operation shares.
    @inline(__always)
    /// `readEnd`: a read that ends there (pread), which in coordinated mode may skip rereading the length.
    private func locked<R>(_ access: Access, readEnd: Int64? = nil,
                           _ body: (SharedFile) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        // The lock directly: through `RWLock`'s methods (not inlined across modules) each file
        // call paid two calls and a retain and release around each.
        CACSecureLinux_rwlockLock(lock)
        defer { CACSecureLinux_rwlockUnlock(lock) }
        guard !isClosed else { throw .posix(EBADF, "\(path) (closed)") }
        try shared.adoptAfterForkIfNeeded()
        if shared.deferredErrorGeneration != seenErrorGeneration, let deferred = shared.deferredError {
            seenErrorGeneration = shared.deferredErrorGeneration
            throw deferred
        }
        switch access {
        case .read where !canRead:
            throw SecureFileError(code: .readOnWriteOnly, errno: EBADF, message: "\(path): read on a write-only descriptor")
        case .write where !canWrite:
            throw SecureFileError(code: .writeOnReadOnly, errno: EBADF, message: "\(path): write on a read-only descriptor")
        case .truncate where !canWrite:
            throw SecureFileError(code: .truncOnReadOnly, errno: EINVAL, message: "\(path): truncate on a read-only descriptor")
        default: break
        }
        try shared.ensureKeys()
        let writes = access == .write || access == .truncate
        let exclusive = writes || (access == .sync && shared.ioFDWritable)
        guard shared.coordinated else {
            let result = try body(shared)
            if writes, let synchronized { try shared.makeDurable(synchronized) }
            return result
        }
        try shared.beginCoordinated(exclusive: exclusive, readEnd: readEnd)
        let result: R
        do { result = try body(shared) } catch {
            shared.endCoordinated()
            // A read skips the file-ID check (and, inside the known length, the length check): a
            // failed authentication may be a file another process changed. Check and read once more.
            guard !exclusive, error.code == .badKeyOrCorruptData else { throw error }
            try shared.beginCoordinated(exclusive: false, recheckFileID: true)
            do { result = try body(shared) } catch {
                shared.endCoordinated()
                throw error
            }
        }
        try shared.finishCoordinated()
        if writes, let synchronized { try shared.makeDurable(synchronized) }
        return result
    }

    /// `sync`: no access check; in coordinated mode the record lock is held exclusively when the
    /// state can write (a sync may seal the records of the last chunk whole first: version 5).
    private enum Access { case read, write, truncate, sync, none }

    /// What `fsync(2)` (`.full`) or `fdatasync(2)` (`.data`) forces to the device.
    enum Durability { case data, full }

    /// `read(2)`: reads at the current offset and advances it.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SecureFileError) -> Int {
        try locked(.read) { (s: SharedFile) throws(SecureFileError) -> Int in
            guard let base = buffer.baseAddress else { return 0 }
            let n = try s.read(into: base, count: buffer.count, at: offset)
            offset += Int64(n)
            return n
        }
    }

    /// `pread(2)`: reads at `offset` without moving the file offset.
    public func pread(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        // Linux checks the offset before the descriptor.
        guard offset >= 0 else { throw SecureFileError(code: .invalidArgument, errno: EINVAL, message: "\(path): negative offset") }
        if let base = buffer.baseAddress, let n = try preadConcurrently(into: base, count: buffer.count, at: offset) { return n }
        let (end, overflow) = offset.addingReportingOverflow(Int64(buffer.count))
        return try locked(.read, readEnd: overflow ? .max : end) { (s: SharedFile) throws(SecureFileError) -> Int in
            guard let base = buffer.baseAddress else { return 0 }
            return try s.read(into: base, count: buffer.count, at: offset)
        }
    }

    /// `pread` with the file's lock held shared, so that reads from many threads (on this handle or
    /// others of the file) run at once, when the state allows it (`SharedFile.concurrentReadKeys`:
    /// default mode, no write-back run, the end authenticated, keys loaded); nil when the read must
    /// take the exclusive path (`locked`), which also reports what this one leaves to it (a closed
    /// handle, a write-only one, a deferred error).
    @inline(__always)
    private func preadConcurrently(into base: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws(SecureFileError) -> Int? {
        guard canRead else { return nil }
        let s = shared
        CACSecureLinux_rwlockLockShared(lock)  // (directly, as in `locked`)
        defer { CACSecureLinux_rwlockUnlockShared(lock) }
        guard !isClosed, s.deferredErrorGeneration == seenErrorGeneration, let keys = s.concurrentReadKeys,
              let reader = try? keys.takeReader() else { return nil }
        defer { keys.giveReader(reader) }
        s.services.noteActivity()
        do {
            return try s.readConcurrently(into: base, count: count, at: offset, reader: reader, keys: keys)
        } catch where error.code == .badKeyOrCorruptData {
            // A chunk that fails to authenticate: the exclusive path takes it from its chunk copy
            // (a write torn by a kill), or reports it.
            return nil
        }
    }

    /// `readv(2)`: fills the buffers in order, as one read.
    public func readv(_ buffers: [UnsafeMutableRawBufferPointer]) throws(SecureFileError) -> Int { try readv(buffers: buffers) }

    /// `readv(2)` on the caller's `iovec` array (the C API: no Swift array per call).
    package func readv(_ vectors: UnsafeBufferPointer<iovec>) throws(SecureFileError) -> Int {
        try readv(buffers: vectors.lazy.map { UnsafeMutableRawBufferPointer(start: $0.iov_base, count: $0.iov_len) })
    }

    private func readv<Buffers: Sequence<UnsafeMutableRawBufferPointer>>(buffers: Buffers) throws(SecureFileError) -> Int {
        try locked(.read) { (s: SharedFile) throws(SecureFileError) -> Int in
            var total = 0
            for b in buffers where b.count > 0 {
                let n = try s.read(into: b.baseAddress!, count: b.count, at: offset + Int64(total))
                total += n
                if n < b.count { break }
            }
            offset += Int64(total)
            return total
        }
    }

    /// `write(2)`: writes at the current offset (at the end with `O_APPEND`) and advances it.
    public func write(_ buffer: UnsafeRawBufferPointer) throws(SecureFileError) -> Int {
        try locked(.write) { (s: SharedFile) throws(SecureFileError) -> Int in
            // An empty write does not move an O_APPEND offset (Linux returns before appending).
            if appendMode && buffer.count > 0 { offset = s.size }
            let n = try writeChecked(s, buffer, at: offset)
            offset += Int64(n)
            return n
        }
    }

    /// `pwrite(2)`: writes at `offset` without moving the file offset. As on Linux, a descriptor
    /// opened with `O_APPEND` appends whatever the offset (a documented Linux deviation from POSIX).
    public func pwrite(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        guard offset >= 0 else { throw SecureFileError(code: .invalidArgument, errno: EINVAL, message: "\(path): negative offset") }
        return try locked(.write) { (s: SharedFile) throws(SecureFileError) -> Int in
            try writeChecked(s, buffer, at: appendMode ? s.size : offset)
        }
    }

    /// `writev(2)`: writes the buffers in order, as one write.
    public func writev(_ buffers: [UnsafeRawBufferPointer]) throws(SecureFileError) -> Int { try writev(buffers: buffers) }

    /// `writev(2)` from the caller's `iovec` array (the C API: no Swift array per call).
    package func writev(_ vectors: UnsafeBufferPointer<iovec>) throws(SecureFileError) -> Int {
        try writev(buffers: vectors.lazy.map { UnsafeRawBufferPointer(start: $0.iov_base, count: $0.iov_len) })
    }

    /// Buffers smaller than this are gathered (`writev`); larger ones are written as they are.
    static let writevGatherLimit = 64 << 10

    private func writev<Buffers: Collection<UnsafeRawBufferPointer>>(buffers: Buffers) throws(SecureFileError) -> Int {
        try locked(.write) { (s: SharedFile) throws(SecureFileError) -> Int in
            if appendMode && buffers.contains(where: { $0.count > 0 }) { offset = s.size }
            // Each write seals every chunk it touches, so small buffers written one by one sealed
            // their chunk once each (4 × 1 KiB into one chunk: 8.6 µs, one 4 KiB write 2.2 µs).
            // They are gathered into a guarded staging buffer (pooled up to 64 KiB) and written
            // together; a buffer of 64 KiB or more goes as it is, between the gathered runs.
            let small = buffers.lazy.filter { $0.count > 0 && $0.count < Self.writevGatherLimit }
            let gathering = small.dropFirst().first != nil  // at least two
            var staging: SecureBuffer?
            if gathering {
                let wanted = min(Self.writevGatherLimit, small.reduce(0) { $0 + $1.count })
                do throws(CryptoError) { staging = try SecureBuffer(count: (wanted + 4095) / 4096 * 4096) } catch {
                    throw .crypto(error, "\(path): writev staging buffer")
                }
            }
            var total = 0, staged = 0
            /// Writes the staged bytes; false when the write was short (a size limit).
            func writeStaged() throws(SecureFileError) -> Bool {
                guard staged > 0, let staging else { return true }
                let n = try staging.withUnsafeMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) -> Int in
                    try writeChecked(s, UnsafeRawBufferPointer(rebasing: b[0..<staged]), at: offset + Int64(total))
                }
                total += n
                let whole = n == staged
                staged = 0
                return whole
            }
            for b in buffers where b.count > 0 {
                if let staging, b.count < Self.writevGatherLimit {
                    if staged + b.count > staging.count, !(try writeStaged()) { break }
                    staging.withUnsafeMutableBytes { $0.baseAddress!.advanced(by: staged).copyMemory(from: b.baseAddress!, byteCount: b.count) }
                    staged += b.count
                    continue
                }
                guard try writeStaged() else { break }
                let n = try writeChecked(s, b, at: offset + Int64(total))
                total += n
                if n < b.count { break }
            }
            _ = try writeStaged()
            offset += Int64(total)
            return total
        }
    }

    /// The size limit, as POSIX applies RLIMIT_FSIZE: nothing at or past it, a short write up to it.
    private func writeChecked(_ s: SharedFile, _ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        guard buffer.count > 0, let base = buffer.baseAddress else { return 0 }
        if buffering == .writeBack, s.appendToRunIfItFits(base, count: buffer.count, at: offset) { return buffer.count }
        guard offset < Self.maximumFileSize else {
            throw .ace(.fileTooBig, "\(path): write past the maximum secure file size (\(Self.maximumFileSize) bytes)")
        }
        let n = Int(min(Int64(buffer.count), Self.maximumFileSize - offset))
        // (An O_DSYNC write is synced at once, which seals records whole again: it makes none.)
        return try s.write(from: base, count: n, at: offset, writeBack: buffering == .writeBack, records: synchronized == nil)
    }

    /// `lseek(2)`: `SEEK_SET`, `SEEK_CUR`, `SEEK_END`, and `SEEK_DATA`/`SEEK_HOLE` (a secure file has no holes on disk).
    public func seek(_ offset: Int64, whence: Int32) throws(SecureFileError) -> Int64 {
        try locked(.none) { (s: SharedFile) throws(SecureFileError) -> Int64 in
            let base: Int64
            switch whence {
            case SEEK_SET: base = 0
            case SEEK_CUR: base = self.offset
            case SEEK_END: base = s.size
            case 3 /* SEEK_DATA */, 4 /* SEEK_HOLE */:
                guard offset >= 0, offset < s.size else { throw .posix(ENXIO, "\(path): seek past end") }
                self.offset = whence == 3 ? offset : s.size
                return self.offset
            default:
                throw SecureFileError(code: .invalidArgument, errno: EINVAL, message: "\(path): invalid whence \(whence)")
            }
            let (target, overflow) = base.addingReportingOverflow(offset)
            guard !overflow else { throw SecureFileError(code: .fileTooBig, errno: EOVERFLOW, message: "\(path): offset overflows") }
            guard target >= 0 else {
                throw SecureFileError(code: .negativeFileLength, errno: EINVAL, message: "\(path): seek to a negative offset")
            }
            guard target <= Self.maximumFileSize else {
                throw SecureFileError(code: .fileTooBig, errno: EINVAL, message: "\(path): seek past the maximum secure file size")
            }
            self.offset = target
            return target
        }
    }

    /// `ftruncate(2)`: shrinks or grows (the new bytes read as zeros, authenticated like any others).
    public func truncate(to length: Int64) throws(SecureFileError) {
        try locked(.truncate) { (s: SharedFile) throws(SecureFileError) in
            guard length >= 0 else {
                throw SecureFileError(code: .negativeFileLength, errno: EINVAL, message: "\(path): negative length")
            }
            guard length <= Self.maximumFileSize else {
                throw .ace(.fileTooBig, "\(path): longer than the maximum secure file size (\(Self.maximumFileSize) bytes)")
            }
            try s.truncate(to: length)
        }
    }

    /// `fstat(2)` with `st_size` the plaintext size.
    public func stat() throws(SecureFileError) -> Glibc.stat {
        try locked(.none) { (s: SharedFile) throws(SecureFileError) -> Glibc.stat in
            var st = try s.checkIO(Sys.fstat(fileDescriptor), "fstat")
            st.st_size = off_t(s.size)
            return st
        }
    }

    /// Bytes that follow the authenticated end of the file: 0 for an intact file. Non-zero after a
    /// torn extension (a crash inside a write that grew the file) or when bytes were appended by
    /// someone else. They are never returned by a read, and the next change of the file removes them;
    /// a verifier should report them.
    public var bytesAfterAuthenticatedEnd: Int64 {
        get throws(SecureFileError) {
            try locked(.none) { (s: SharedFile) throws(SecureFileError) -> Int64 in
                try s.verifyTrailerIfNeeded()
                return s.bytesAfterAuthenticatedEnd
            }
        }
    }

    /// The end was taken from a tail copy when the file was opened (version 4, after a power loss
    /// tore the end or the chunk the copy holds, or tampering there): the file is as it was at the
    /// last `fsync`/`fdatasync` that wrote the copy, every byte after that end is reported in
    /// `bytesAfterAuthenticatedEnd`, and the next change writes the copy back in place. Also true
    /// when a version 5 file was taken back to the chunk boundary where its failing last chunk,
    /// which no sync covered, starts (a torn append from there: docs/FORMAT.md "Trailers that span
    /// two sectors"); the next change seals a trailer there. True until then; never silent.
    public var endRestoredFromTailCopy: Bool {
        get throws(SecureFileError) {
            try locked(.none) { (s: SharedFile) throws(SecureFileError) -> Bool in
                try s.verifyTrailerIfNeeded()
                return s.restoredTail != nil
            }
        }
    }

    /// Takes `size` as the end of a file whose end does not authenticate: a trailer for `size` is
    /// sealed at its place, the file is cut after it, and changes are accepted again. Chunks below
    /// `size` are not checked (the caller restores the ones it knows were being written; any other
    /// damaged chunk still fails when read).
    ///
    /// - Throws: `EINVAL` when the end authenticates (use `truncate`), or when `size` is not a
    ///   multiple of the chunk size or lies beyond the file's bytes, or for a read-only handle (as `ftruncate`).
    public func adoptEnd(vouchedSize size: Int64) throws(SecureFileError) {
        try locked(.truncate) { (s: SharedFile) throws(SecureFileError) in try s.adoptVouchedEnd(size) }
    }

    /// Runs `body` on the shared state with the file locked and keys loaded (engine extensions).
    func withShared<R>(_ body: (SharedFile) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try locked(.none, body)
    }

    /// The plaintext size.
    public var size: Int64 {
        get throws(SecureFileError) { try locked(.none) { $0.size } }
    }

    /// Writes buffered data (write-back handles) to the file, like `fflush`: after it, a fresh open
    /// anywhere reads it. Nothing is forced to the device (see `sync()`).
    public func flush() throws(SecureFileError) {
        try locked(.none) { (s: SharedFile) throws(SecureFileError) in try s.flushRun() }
    }

    /// `fsync(2)`: writes buffered data, then forces the file's data and metadata to the device, so
    /// everything written before survives a power loss.
    public func sync() throws(SecureFileError) {
        try locked(.sync) { (s: SharedFile) throws(SecureFileError) in try s.makeDurable(.full) }
    }

    /// `fdatasync(2)`: as `sync()`, without forcing metadata that reading the data does not need
    /// (the file's length is such metadata, so growth is still made durable).
    public func datasync() throws(SecureFileError) {
        try locked(.sync) { (s: SharedFile) throws(SecureFileError) in try s.makeDurable(.data) }
    }

    /// Writes cached data and closes the descriptor. A second close fails with `EBADF`.
    /// The descriptor is closed even when writing the cache fails (the error is still reported).
    public func close() throws(SecureFileError) {
        shared.lock.lock()
        guard !isClosed else {
            shared.lock.unlock()
            throw .posix(EBADF, "\(path) (already closed)")
        }
        isClosed = true
        var flushError: SecureFileError?
        shared.dropInheritedRun()
        if shared.deferredErrorGeneration != seenErrorGeneration, let deferred = shared.deferredError {
            seenErrorGeneration = shared.deferredErrorGeneration
            flushError = deferred
        }
        if shared.runFirst >= 0 {
            // Flushing needs the key; while locked the run was already flushed and wiped.
            do { try shared.flushRun() } catch { flushError = flushError ?? error }
        }
        shared.lock.unlock()
        if OpenFiles.release(shared) {
            // Closed handles keep the state alive, not its keys, cached plaintext or descriptor.
            shared.lock.withLock { shared.releaseAtLastClose() }
        }
        if case .failure(let e) = Sys.close(fileDescriptor), flushError == nil {
            throw .posix(e.rawValue, "\(path): close")
        }
        if let flushError { throw flushError }
    }

    /// A handle released without `close()` is closed here; an error can no longer be returned, so
    /// it is printed on standard error, naming the file (never dropped silently).
    deinit {
        guard !isClosed else { return }
        do { try close() } catch {
            let message = "ACSecureFile: \(path): error closing a released handle: \(error.message)\n"
            _ = message.withCString { Glibc.write(2, $0, strlen($0)) }
        }
    }
}
