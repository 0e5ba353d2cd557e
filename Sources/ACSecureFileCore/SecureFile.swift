#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import ACCrypto
import ACSecureServices

/// An open secure file: the equivalent of one POSIX open file description.
///
/// Its `fileDescriptor` is a real kernel descriptor on the encrypted file (never use it for plain
/// I/O). Handles on the same file share state, so each sees the others' writes at once. A handle
/// may be used from many threads: operations on one file are serialised.
public final class SecureFile: @unchecked Sendable {
    public let fileDescriptor: Int32
    public let path: String
    let shared: SharedFile
    let canRead: Bool
    let canWrite: Bool
    let appendMode: Bool
    // Guarded by shared.lock:
    private var offset: Int64 = 0
    private var isClosed = false

    /// The largest plaintext size of a secure file: 2^44 bytes (16 TiB).
    public static let maximumFileSize: Int64 = 1 << 44

    init(fd: Int32, path: String, shared: SharedFile, accessMode: Int32, append: Bool) {
        self.fileDescriptor = fd
        self.path = path
        self.shared = shared
        self.canRead = accessMode != O_WRONLY
        self.canWrite = accessMode != O_RDONLY
        self.appendMode = append
    }

    // MARK: open

    /// Opens (or creates) a secure file, as `open(2)`.
    ///
    /// - Parameters:
    ///   - flags: `O_RDONLY`/`O_WRONLY`/`O_RDWR` with `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_APPEND`,
    ///     `O_CLOEXEC`, `O_NOFOLLOW` (others are refused with `EINVAL`).
    ///   - mode: permissions for a new file (the umask applies).
    ///   - key: the app's key, or an encryption group's key for files shared between apps.
    ///   - sharing: `.thisProcess` (default): this process's handles share state and cache writes;
    ///     `.processes`: other processes may read and write the file at the same time — every
    ///     operation takes a record lock, rereads the length and writes through (slower).
    ///     `ACSECURE_MULTIPROCESS=1` in the environment makes `.processes` the default (C programs).
    ///   - services: the key provider; defaults to `SecureServices.current`, started from the
    ///     environment if needed. A `FixedKeyProvider` opens files with a handed-over key.
    /// - Throws: `SecureFileError` with the errno `open(2)` would give (`ENOENT`, `EEXIST`, `EACCES`, …);
    ///   `EISDIR`/`EINVAL` + `regularFileOnly` for directories and other non-regular files;
    ///   `noKeys` when services are unavailable; `badKeyOrCorruptData` when the file is not a secure
    ///   file or not encrypted with `key`.
    public static func open(_ path: String, flags: Int32, mode: mode_t = 0o666, key: KeySelection = .app,
                            services: (any KeyProvider)? = nil,
                            sharing: Sharing = .environmentDefault) throws(SecureFileError) -> SecureFile {
        let allowed = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | 0o100000 /* O_LARGEFILE */
        guard flags & ~allowed == 0, flags & O_ACCMODE != O_ACCMODE else {
            throw SecureFileError(code: .invalidArgument, errno: EINVAL, message: "\(path): unsupported open flags \(String(flags, radix: 8))")
        }
        let services = try resolveServices(services, path)
        guard services.keyGeneration != 0 else { throw .ace(.noKeys, "\(path): secure services are unavailable") }

        let accessMode = flags & O_ACCMODE
        // The engine reads chunks to modify them, so a writer needs a readable descriptor. O_APPEND
        // and O_TRUNC are done by the engine (pwrite on an O_APPEND descriptor would append).
        // O_NONBLOCK keeps a FIFO from blocking the open; it is cleared once the file is known regular.
        // Linux truncates even with O_RDONLY (after checking write permission): a writable
        // descriptor for the engine gives the same permission check.
        let truncate = flags & O_TRUNC != 0
        var kernelFlags = (accessMode == O_RDONLY && !truncate ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK
        kernelFlags |= flags & (O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY)
        var fd: Int32
        switch Sys.open(path, kernelFlags, mode) {
        case .success(let f): fd = f
        case .failure(let e):
            if e.rawValue == EISDIR { throw SecureFileError(code: .regularFileOnly, errno: EISDIR, message: "\(path): is a directory (secure files are regular files only)") }
            throw .posix(e.rawValue, path)
        }
        let st: stat
        switch Sys.fstat(fd) {
        case .success(let s): st = s
        case .failure(let e): _ = Sys.close(fd); throw .posix(e.rawValue, path)
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            _ = Sys.close(fd)
            let isDirectory = st.st_mode & S_IFMT == S_IFDIR
            throw SecureFileError(code: .regularFileOnly, errno: isDirectory ? EISDIR : EINVAL,
                                  message: "\(path): \(isDirectory ? "is a directory" : "not a regular file") (secure files are regular files only)")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        if flags & O_CLOEXEC == 0 { _ = fcntl(fd, F_SETFD, 0) }

        let identity = SharedFile.Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        let shared: SharedFile
        do {
            shared = try OpenFiles.acquire(identity, services: services, key: key, path: path, fd: fd,
                                           writable: accessMode != O_RDONLY || truncate, truncate: truncate,
                                           coordinated: sharing == .processes)
        } catch {
            _ = Sys.close(fd)
            throw error
        }
        return SecureFile(fd: fd, path: path, shared: shared, accessMode: accessMode, append: flags & O_APPEND != 0)
    }

    /// Who else may use the file while it is open.
    public enum Sharing: Sendable, Equatable {
        /// Only this process (its handles share one state and a write-back cache).
        case thisProcess
        /// Other processes too: record locks, reread, write-through, for each operation.
        case processes

        /// `.processes` when `ACSECURE_MULTIPROCESS=1`, else `.thisProcess`.
        public static var environmentDefault: Sharing {
            if let v = getenv("ACSECURE_MULTIPROCESS"), String(cString: v) == "1" { return .processes }
            return .thisProcess
        }
    }

    static func resolveServices(_ services: (any KeyProvider)?, _ path: String) throws(SecureFileError) -> any KeyProvider {
        if let services { return services }
        do { return try SecureServices.currentOrStartFromEnvironment() } catch {
            throw .ace(.noKeys, "\(path): secure services cannot start (\(error.message))")
        }
    }

    // MARK: I/O

    /// Runs `body` with the file locked, after the checks every operation shares.
    @inline(__always)
    private func locked<R>(_ access: Access, _ body: (SharedFile) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        shared.lock.lock()
        defer { shared.lock.unlock() }
        guard !isClosed else { throw .posix(EBADF, "\(path) (closed)") }
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
        guard shared.coordinated else { return try body(shared) }
        try shared.beginCoordinated(exclusive: access == .write || access == .truncate)
        let result: R
        do { result = try body(shared) } catch {
            shared.endCoordinated()
            throw error
        }
        try shared.finishCoordinated()
        return result
    }

    private enum Access { case read, write, truncate, none }

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
        return try locked(.read) { (s: SharedFile) throws(SecureFileError) -> Int in
            guard let base = buffer.baseAddress else { return 0 }
            return try s.read(into: base, count: buffer.count, at: offset)
        }
    }

    /// `readv(2)`: fills the buffers in order, as one read.
    public func readv(_ buffers: [UnsafeMutableRawBufferPointer]) throws(SecureFileError) -> Int {
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
    public func writev(_ buffers: [UnsafeRawBufferPointer]) throws(SecureFileError) -> Int {
        try locked(.write) { (s: SharedFile) throws(SecureFileError) -> Int in
            if appendMode && buffers.contains(where: { $0.count > 0 }) { offset = s.size }
            var total = 0
            for b in buffers where b.count > 0 {
                let n = try writeChecked(s, b, at: offset + Int64(total))
                total += n
                if n < b.count { break }
            }
            offset += Int64(total)
            return total
        }
    }

    /// The size limit, as POSIX applies RLIMIT_FSIZE: nothing at or past it, a short write up to it.
    private func writeChecked(_ s: SharedFile, _ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        guard buffer.count > 0, let base = buffer.baseAddress else { return 0 }
        guard offset < Self.maximumFileSize else {
            throw .ace(.fileTooBig, "\(path): write past the maximum secure file size (\(Self.maximumFileSize) bytes)")
        }
        let n = Int(min(Int64(buffer.count), Self.maximumFileSize - offset))
        try s.write(from: base, count: n, at: offset)
        return n
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

    /// Runs `body` on the shared state with the file locked and keys loaded (engine extensions).
    func withShared<R>(_ body: (SharedFile) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try locked(.none, body)
    }

    /// The plaintext size.
    public var size: Int64 {
        get throws(SecureFileError) { try locked(.none) { $0.size } }
    }

    /// Writes cached data and `fsync`s the file.
    public func sync() throws(SecureFileError) {
        try locked(.none) { (s: SharedFile) throws(SecureFileError) in
            try s.flushCache()
            try s.checkIO(Sys.fsync(s.ioFD), "fsync")
        }
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
        if shared.cacheDirty {
            // Flushing needs the key; while locked the cache was already flushed and wiped.
            do { try shared.flushCache() } catch { flushError = error }
        }
        shared.lock.unlock()
        OpenFiles.release(shared)
        if case .failure(let e) = Sys.close(fileDescriptor), flushError == nil {
            throw .posix(e.rawValue, "\(path): close")
        }
        if let flushError { throw flushError }
    }

    deinit {
        if !isClosed { try? close() }
    }
}

/// The process-wide table of files open through the engine, by device and inode.
enum OpenFiles {
    /// Keyed by inode and services, so two stores in one process (tests) never share keys.
    private struct Key: Hashable { var identity: SharedFile.Identity; var services: ObjectIdentifier }
    private static let table = Mutex<[Key: SharedFile]>([:])
    /// Providers whose lock handler is installed. Weak, and compared by identity: an address can be
    /// reused by a new provider once the old one is gone.
    private final class WeakProvider: @unchecked Sendable { weak var value: (any KeyProvider)?; init(_ v: any KeyProvider) { value = v } }
    private static let servicesWithHandler = Mutex<[ObjectIdentifier: WeakProvider]>([:])

    static func acquire(_ identity: SharedFile.Identity, services: any KeyProvider, key: KeySelection, path: String,
                        fd: Int32, writable: Bool, truncate: Bool, coordinated: Bool) throws(SecureFileError) -> SharedFile {
        registerLockHandler(services)
        let tableKey = Key(identity: identity, services: ObjectIdentifier(services))
        let result: Result<SharedFile, SecureFileError> = table.withLock { table in
            if let existing = table[tableKey] {
                existing.lock.lock()
                defer { existing.lock.unlock() }
                do {
                    try verifyKey(of: existing, key: key)
                    if writable && !existing.ioFDWritable, case .success(let dupFD) = Sys.dup(fd) {
                        _ = Sys.close(existing.ioFD)
                        existing.ioFD = dupFD
                        existing.ioFDWritable = true
                    }
                    if coordinated { existing.coordinated = true }
                    if truncate {
                        try existing.ensureKeys()
                        if existing.coordinated { try existing.beginCoordinated(exclusive: true) }
                        do { try existing.truncate(to: 0) } catch {
                            if existing.coordinated { existing.endCoordinated() }
                            throw error
                        }
                        if existing.coordinated { try existing.finishCoordinated() }
                    }
                } catch let e as SecureFileError { return .failure(e) } catch { fatalError("unreachable") }
                existing.refCount += 1
                return .success(existing)
            }
            do {
                // Another process may be creating or truncating the file right now: hold the file's
                // lock while its header and length are read (no state of this process exists yet).
                if coordinated, case .failure(let e) = Sys.lockFile(fd, Int16(writable ? F_WRLCK : F_RDLCK)) {
                    throw SecureFileError.posix(e.rawValue, "\(path): lock")
                }
                defer { if coordinated { _ = Sys.lockFile(fd, Int16(F_UNLCK)) } }
                let shared = try load(identity, services: services, key: key, path: path, fd: fd, writable: writable, truncate: truncate)
                shared.coordinated = coordinated
                table[tableKey] = shared
                shared.refCount = 1
                return .success(shared)
            } catch let e as SecureFileError { return .failure(e) } catch { fatalError("unreachable") }
        }
        return try result.get()
    }

    /// How many handles this process has open on `identity`, whatever their key provider.
    static func handleCount(_ identity: SharedFile.Identity) -> Int {
        table.withLock { $0.reduce(0) { $0 + ($1.key.identity == identity ? $1.value.refCount : 0) } }
    }

    /// The plaintext size of a file this process has open (it may include cached writes), if any.
    static func openSize(device: UInt64, inode: UInt64) -> Int64? {
        let identity = SharedFile.Identity(device: device, inode: inode)
        let files = table.withLock { $0.filter { $0.key.identity == identity }.map(\.value) }
        return files.compactMap { f in f.lock.withLock { f.header == nil && f.size == 0 ? nil : f.size } }.max()
    }

    static func release(_ shared: SharedFile) {
        table.withLock { table in
            shared.refCount -= 1
            let key = Key(identity: shared.identity, services: ObjectIdentifier(shared.services))
            if shared.refCount == 0, table[key] === shared { table[key] = nil }
        }
    }

    /// A second opener must hold the file's key too: the shared state must not bypass the check.
    private static func verifyKey(of shared: SharedFile, key: KeySelection) throws(SecureFileError) {
        guard let header = shared.header else { return }
        if key == shared.keySelection { return }
        let kek: KeyEncryptionKey
        do { kek = try shared.services.keyEncryptionKey(for: key) } catch {
            throw .ace(error.code == .noKeys ? .noKeys : .invalidArgument, "\(shared.path): \(error.message)")
        }
        guard header.unwrap(with: kek) != nil else {
            throw .ace(.badKeyOrCorruptData, "\(shared.path): not encrypted with the \(key) key")
        }
    }

    /// Reads the header and length of a file opened for the first time.
    private static func load(_ identity: SharedFile.Identity, services: any KeyProvider, key: KeySelection, path: String,
                             fd: Int32, writable: Bool, truncate: Bool) throws(SecureFileError) -> SharedFile {
        let ioFD: Int32
        switch Sys.dup(fd) {
        case .success(let d): ioFD = d
        case .failure(let e): throw .posix(e.rawValue, "\(path): dup")
        }
        let physical: Int64
        switch Sys.fstat(fd) {
        case .success(let st): physical = Int64(st.st_size)
        case .failure(let e): _ = Sys.close(ioFD); throw .posix(e.rawValue, path)
        }
        var headerBytes = [UInt8](repeating: 0, count: FileLayout.headerSize)
        var parsed: Result<FileHeader, HeaderParseError> = .failure(.tooShort)
        if physical > 0 {
            let got = headerBytes.withUnsafeMutableBytes { Sys.preadFull(fd, $0.baseAddress!, $0.count, 0) }
            switch got {
            case .success(let n): parsed = n == FileLayout.headerSize ? FileHeader.parse(headerBytes) : .failure(.tooShort)
            case .failure(let e): _ = Sys.close(ioFD); throw .posix(e.rawValue, path)
            }
        }
        let layout = (try? parsed.get().layout) ?? FileLayout()
        let shared = SharedFile(identity: identity, services: services, keySelection: key, path: path,
                                ioFD: ioFD, writable: writable, layout: layout)
        switch parsed {
        case .success(let header):
            shared.header = header
            guard let size = layout.plaintextSize(forPhysicalSize: physical) else {
                // A torn last chunk (crash in the middle of a write) or tampering: the file still
                // opens, the intact chunks read, and the tail fails authentication when read.
                shared.diskSize = max(0, (physical - Int64(FileLayout.headerSize) - Int64(FileLayout.trailerSize))
                                      / Int64(layout.physicalChunkSize) * Int64(layout.chunkSize))
                shared.size = shared.diskSize
                try shared.ensureKeys()
                try verifyLengthTolerantly(shared)
                if truncate { try shared.truncate(to: 0) }
                return shared
            }
            shared.diskSize = size
            shared.size = size
            try shared.ensureKeys()
            // The length is authenticated at open (O(1)); a torn tail is recovered here. A file whose
            // length does not authenticate at all still opens: its tail reports the error when read.
            try verifyLengthTolerantly(shared)
            if truncate { try shared.truncate(to: 0) }
        case .failure(let why):
            if physical == 0 {
                // An empty file (new, or `touch`ed): it becomes a secure file on its first write.
                if writable { try shared.ensureKeys(); try shared.initializeIfNeeded() }
            } else if truncate, why == .notASecureFile || why == .tooShort {
                // O_TRUNC of a plain file discards its bytes, as open(2) would; a file that is a
                // secure file we cannot read is never destroyed this way.
                try shared.checkIO(Sys.ftruncate(ioFD, 0), "truncate")
                try shared.ensureKeys()
                try shared.initializeIfNeeded()
            } else {
                throw .ace(.badKeyOrCorruptData, "\(path): \(why)")
            }
        }
        return shared
    }

    /// Authenticates the length at open: I/O errors fail the open, a length that does not
    /// authenticate is left for the reads of the tail to report.
    private static func verifyLengthTolerantly(_ shared: SharedFile) throws(SecureFileError) {
        do { try shared.verifyTrailerIfNeeded() } catch {
            if error.code != .badKeyOrCorruptData { throw error }
        }
    }

    /// Before services lock, every file they serve writes its dirty chunk and forgets keys and plaintext.
    private static func registerLockHandler(_ services: any KeyProvider) {
        let id = ObjectIdentifier(services)
        let isNew = servicesWithHandler.withLock { registered in
            if let known = registered[id]?.value, known === services { return false }
            registered = registered.filter { $0.value.value != nil }
            registered[id] = WeakProvider(services)
            return true
        }
        guard isNew else { return }
        services.addLockHandler { [weak services] in
            guard let services else { return }
            let files = table.withLock { Array($0.values) }.filter { $0.services === services }
            for f in files { f.lock.withLock { f.wipeSecrets() } }
        }
    }
}
