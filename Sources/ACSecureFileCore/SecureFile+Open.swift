#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

// Opening a secure file: flags and mode checks, the kernel open, then the shared state of the file
// (OpenFiles) with its header, keys and end check. The handle's I/O is in SecureFile.swift.
extension SecureFile {
    /// Opens (or creates) a secure file, as `open(2)`.
    ///
    /// - Parameters:
    ///   - flags: `O_RDONLY`/`O_WRONLY`/`O_RDWR` with `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_APPEND`,
    ///     `O_CLOEXEC`, `O_NOFOLLOW`, `O_NOCTTY`, `O_DSYNC` (each write and truncate of the handle
    ///     ends with `datasync()`), `O_SYNC` (with `sync()`); others are refused with `EINVAL`.
    ///   - mode: permissions for a new file (the umask applies).
    ///   - key: the app's key, or an encryption group's key for files shared between apps.
    ///   - sharing: `.thisProcess` (default): this process's handles share state and cache writes;
    ///     `.processes`: other processes may read and write the file at the same time — every
    ///     operation takes a record lock, rereads the length and writes through (slower).
    ///     `ACSECURE_MULTIPROCESS=1` in the environment makes `.processes` the default (C programs).
    ///   - buffering: `.writeThrough` (default): every write is in the file when it returns, as
    ///     with `write(2)`; `.writeBack`: small writes are collected in memory and reach the file at
    ///     `flush()`, `sync()`, `close()`, a services lock or normal process exit — faster, but a
    ///     crash, `_exit` or SIGKILL loses them. `ACSECURE_BUFFERING=write-back` makes it the default.
    ///   - readCache: `.off` (default): a chunk read again is read and decrypted again (the kernel's
    ///     page cache still holds its ciphertext); `.bytes(n)`: up to `n` bytes of decrypted chunks
    ///     are kept in guarded memory (allocated at the first read), so reading a chunk again costs a
    ///     copy. The file's state is shared by this process's handles: it gets the largest cache any
    ///     of them asked for. Ignored in coordinated mode (`.processes`), where every operation
    ///     would have to drop it. See docs/FORMAT.md "Caching, durability, concurrency and crashes".
    ///   - partialOverwrites: `.chunkCopy` (default): a write that rewrites part of a chunk copies
    ///     it first, so a kill never tears it, but a power loss before the next sync may lose the
    ///     chunk (its synced bytes too) when neither the rewrite nor its copy reached the device;
    ///     `.doubleWrite`: the copy is on the device before the rewrite, and the rewrite before the
    ///     call returns (two `fdatasync`s per such write), so a power loss costs no synced byte.
    ///     `ACSECURE_DOUBLE_WRITE=1` makes `.doubleWrite` the default. The file's state is shared by
    ///     this process's handles: once one asked for double writes, all of them double-write.
    ///   - wholeChunkOverwrites: `.chunkCopy` (default): a write copies each chunk it rewrites whole
    ///     in place too, so a kill that cuts it never leaves one unreadable; `.inPlace`: no copy
    ///     (one `pwrite` less per chunk, the whole chunks in one `pwrite`), and a kill that cuts
    ///     the write between two pages leaves the chunk unreadable (EIO) until it is rewritten
    ///     whole — for callers that rewrite torn pages from a journal of their own, as SQLite does.
    ///     The file's state is shared by this process's handles: chunks are rewritten in place
    ///     without a copy only when all of them said `.inPlace`.
    ///   - services: the key provider; defaults to `SecureServices.current`, started from the
    ///     environment if needed. A `FixedKeyProvider` opens files with a handed-over key.
    /// - Throws: `SecureFileError` with the errno `open(2)` would give (`ENOENT`, `EEXIST`, `EACCES`, …);
    ///   `EISDIR`/`EINVAL` + `regularFileOnly` for directories and other non-regular files;
    ///   `noKeys` when services are unavailable; `badKeyOrCorruptData` when the file is not a secure
    ///   file or not encrypted with `key`.
    public static func open(_ path: BytePath, flags: Int32, mode: mode_t = 0o666, key: KeySelection = .app,
                            services: (any KeyProvider)? = nil,
                            sharing: Sharing = .environmentDefault,
                            buffering: Buffering = .environmentDefault,
                            readCache: ReadCache = .off,
                            partialOverwrites: PartialOverwrites = .environmentDefault,
                            wholeChunkOverwrites: WholeChunkOverwrites = .chunkCopy) throws(SecureFileError) -> SecureFile {
        try open(path, flags: flags, mode: mode, key: key, services: services, sharing: sharing, buffering: buffering,
                 readCache: readCache, partialOverwrites: partialOverwrites, wholeChunkOverwrites: wholeChunkOverwrites,
                 adoptingEmptyFile: false)
    }

    /// `open`, for the Foundation layer's writing handles (`ACFileHandle(forWritingAtPath:)`): a
    /// file that is 0 bytes long when the engine reads it is taken as a new secure file (its header
    /// written), as the reference's examples create a file with `FileManager.createFile` and then
    /// open it for writing. No other open does that: a 0-byte file is otherwise a cut secure file.
    package static func openAdoptingEmptyFile(_ path: BytePath, flags: Int32, key: KeySelection) throws(SecureFileError) -> SecureFile {
        try open(path, flags: flags, mode: 0o666, key: key, services: nil, sharing: .environmentDefault,
                 buffering: .environmentDefault, readCache: .off, partialOverwrites: .environmentDefault,
                 wholeChunkOverwrites: .chunkCopy, adoptingEmptyFile: true)
    }

    private static func open(_ path: BytePath, flags: Int32, mode: mode_t, key: KeySelection, services: (any KeyProvider)?,
                             sharing: Sharing, buffering: Buffering, readCache: ReadCache,
                             partialOverwrites: PartialOverwrites, wholeChunkOverwrites: WholeChunkOverwrites,
                             adoptingEmptyFile: Bool) throws(SecureFileError) -> SecureFile {
        let allowed = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_SYNC | O_DSYNC
            | 0o100000 /* O_LARGEFILE */
        guard flags & ~allowed == 0, flags & O_ACCMODE != O_ACCMODE else {
            throw SecureFileError(code: .invalidArgument, errno: EINVAL, message: "\(path): unsupported open flags \(String(flags, radix: 8))")
        }
        if case .bytes(let n) = readCache, !ReadCache.validBytes.contains(n) {
            throw SecureFileError(code: .invalidArgument, errno: EINVAL,
                                  message: "\(path): read cache of \(n) bytes (allowed: \(ReadCache.validBytes.lowerBound) to \(ReadCache.validBytes.upperBound))")
        }
        let services = try resolveServices(services, path)
        guard services.keyGeneration != 0 else { throw .servicesUnavailable(path) }

        let accessMode = flags & O_ACCMODE
        // The engine reads chunks to modify them, so a writer needs a readable descriptor. O_APPEND
        // and O_TRUNC are done by the engine (pwrite on an O_APPEND descriptor would append).
        // O_NONBLOCK keeps a FIFO from blocking the open; it is cleared once the file is known regular.
        // Linux truncates even with O_RDONLY (after checking write permission): a writable
        // descriptor for the engine gives the same permission check.
        let truncate = flags & O_TRUNC != 0
        var kernelFlags = (accessMode == O_RDONLY && !truncate ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK
        kernelFlags |= flags & (O_NOFOLLOW | O_NOCTTY)
        let opened = try openOrCreate(path, kernelFlags: kernelFlags, create: flags & O_CREAT != 0, exclusive: flags & O_EXCL != 0, mode: mode)
        let fd = opened.fd
        let kernelWritable = opened.writable
        let st: stat
        do throws(SecureFileError) {
            st = try SecureFileSystem.regularFileStat(fd, path, note: " (secure files are regular files only)")
            // O_NONBLOCK kept a FIFO from blocking the open; the descriptor the caller gets has only
            // the flags it asked for (O_APPEND is the engine's, never the kernel's).
            if case .failure(let e) = Sys.clearNonblocking(fd) { throw .posix(e.rawValue, path) }
            if flags & O_CLOEXEC == 0, case .failure(let e) = Sys.clearCloseOnExec(fd) { throw .posix(e.rawValue, path) }
        } catch {
            _ = Sys.close(fd)
            throw error
        }

        let identity = SharedFile.Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        let shared: SharedFile
        do {
            shared = try OpenFiles.acquire(.init(identity: identity, services: services, key: key, path: path, fd: fd,
                                                 writable: kernelWritable, create: opened.created || adoptingEmptyFile,
                                                 truncate: truncate, coordinated: sharing == .processes,
                                                 readCacheBytes: readCache.bytes, doubleWrite: partialOverwrites == .doubleWrite,
                                                 wholeChunksInPlace: wholeChunkOverwrites == .inPlace,
                                                 physicalSize: Int64(st.st_size)))
        } catch {
            _ = Sys.close(fd)
            throw error
        }
        // O_SYNC is O_DSYNC plus a bit of its own on Linux.
        let synchronized: Durability? = flags & O_SYNC == O_SYNC ? .full : flags & O_DSYNC != 0 ? .data : nil
        let file = SecureFile(fd: fd, path: path, shared: shared, accessMode: accessMode, append: flags & O_APPEND != 0,
                              buffering: sharing == .processes ? .writeThrough : buffering, synchronized: synchronized)
        if opened.created { shared.lock.withLock { shared.directoryToSync = Sys.directory(of: path) } }
        if partialOverwrites == .doubleWrite && accessMode != O_RDONLY {
            // Double writes use the chunk-copy slots of version 4: an older file would silently go without.
            let layout = shared.lock.withLock { shared.layout }
            guard layout.hasTailCopies else {
                do { try file.close() } catch {
                    // Nothing was written through it.
                }
                throw SecureFileError(code: .invalidArgument, errno: EINVAL, message: "\(path): double writes need a file of format version 4 or later with chunks of at most \(1 << Int(FileLayout.largestTailCopyChunkShift)) bytes (this one: version \(layout.version), chunks of \(1 << Int(layout.chunkShift)) bytes); `acsecure rekey` rewrites it in the current format")
            }
        }
        guard opened.unnamed else { return file }
        // The new file has its header: now it gets its name (and exists for others).
        switch Sys.linkDescriptor(fd, to: path) {
        case .success:
            return file
        case .failure(let e):
            do { try file.close() } catch {
                // An unnamed file vanishes with its last descriptor: nothing of it can be lost.
            }
            // Another process created the name meanwhile: open(2) would have opened its file.
            if e.rawValue == EEXIST, flags & O_EXCL == 0 {
                return try open(path, flags: flags & ~O_CREAT, mode: mode, key: key, services: services,
                                sharing: sharing, buffering: buffering, readCache: readCache, partialOverwrites: partialOverwrites)
            }
            throw .posix(e.rawValue, path)
        }
    }

    /// What `openOrCreate` opened: the descriptor, whether it is writable, whether this open
    /// created the file, and whether it has no name yet.
    private struct KernelOpen { var fd: Int32; var writable: Bool; var created: Bool; var unnamed: Bool }

    /// The kernel open. Without `create`, `path` as it is. With it, an existing file is opened as it
    /// is — a 0-byte one is then refused like any other cut secure file, unless O_TRUNC empties it
    /// on purpose — and a missing one is created as an unnamed file (`O_TMPFILE`) in its directory,
    /// which `open` gives its header and only then its name (`linkat`): a 0-byte file is never the
    /// engine's, so a cut to 0 bytes cannot be laundered by a creating open, and of two processes
    /// creating one name, one links it and the other opens its file. Where unnamed files are not
    /// supported (`EOPNOTSUPP`, `EISDIR`, `EINVAL`, `ENOSYS`: some file systems, the in-memory
    /// backend) the file is created by name with `O_EXCL`, as before: a crash before its header then
    /// leaves a 0-byte file, refused as above.
    private static func openOrCreate(_ path: BytePath, kernelFlags: Int32, create: Bool, exclusive: Bool,
                                     mode: mode_t) throws(SecureFileError) -> KernelOpen {
        func failure(_ e: Errno) -> SecureFileError {
            if e.rawValue == EISDIR {
                return SecureFileError(code: .regularFileOnly, errno: EISDIR, message: "\(path): is a directory (secure files are regular files only)")
            }
            return .posix(e.rawValue, path)
        }
        let writable = kernelFlags & O_ACCMODE == O_RDWR
        guard create else {
            switch Sys.open(path, kernelFlags, 0) {
            case .success(let fd): return KernelOpen(fd: fd, writable: writable, created: false, unnamed: false)
            case .failure(let e): throw failure(e)
            }
        }
        let readWrite = kernelFlags & ~O_ACCMODE | O_RDWR
        // Three rounds at most: a name another process creates between the two steps is opened in
        // the next round.
        for _ in 0..<3 {
            if !exclusive {
                switch Sys.open(path, kernelFlags, 0) {
                case .success(let fd): return KernelOpen(fd: fd, writable: writable, created: false, unnamed: false)
                case .failure(let e) where e.rawValue == ENOENT: break
                case .failure(let e): throw failure(e)
                }
            }
            switch Sys.open(Sys.directory(of: path), Sys.unnamedFileFlag | O_RDWR | O_CLOEXEC, mode) {
            case .success(let fd):
                return KernelOpen(fd: fd, writable: true, created: true, unnamed: true)
            case .failure(let e) where [EOPNOTSUPP, EISDIR, EINVAL, ENOSYS].contains(e.rawValue):
                switch Sys.open(path, readWrite | O_CREAT | O_EXCL, mode) {
                case .success(let fd): return KernelOpen(fd: fd, writable: true, created: true, unnamed: false)
                case .failure(let e) where e.rawValue == EEXIST && !exclusive: continue
                case .failure(let e): throw failure(e)
                }
            case .failure(let e):
                throw failure(e)
            }
        }
        // The name exists but does not open (a symbolic link to a missing file): open(2) creates
        // the link's target; a 0-byte file this open found there is taken as the one it created.
        switch Sys.open(path, readWrite | O_CREAT, mode) {
        case .success(let fd):
            let empty: Bool
            if case .success(let st) = Sys.fstat(fd) { empty = st.st_size == 0 } else { empty = false }
            return KernelOpen(fd: fd, writable: true, created: empty, unnamed: false)
        case .failure(let e):
            throw failure(e)
        }
    }


    /// When writes reach the file.
    public enum Buffering: Sendable, Equatable {
        /// Each write is in the file when it returns (as `write(2)`): it survives the writer's
        /// exit, `_exit` or SIGKILL, and a fresh open anywhere reads it. `sync()` makes it durable.
        case writeThrough
        /// Small writes are collected in memory (the write-back run: up to 128 KiB of contiguous
        /// chunks), like stdio's buffer: they reach the file at `flush()`, `sync()`, `close()`, a
        /// write that does not continue the run, a services lock and normal process exit; `_exit`,
        /// a crash or SIGKILL lose them. A failed deferred write is
        /// reported by the handle's next call and by its close.
        case writeBack

        /// `.writeBack` when `ACSECURE_BUFFERING=write-back`, else `.writeThrough`.
        public static var environmentDefault: Buffering {
            if let v = getenv("ACSECURE_BUFFERING"), ["write-back", "writeback"].contains(String(cString: v)) { return .writeBack }
            return .writeThrough
        }
    }

    /// How a write that rewrites part of a chunk in place keeps the chunk's other bytes safe
    /// (docs/FORMAT.md "A chunk copy" and "Double write").
    public enum PartialOverwrites: Sendable, Equatable {
        /// The chunk, as it is about to be rewritten, goes to a chunk copy first: a kill never
        /// tears it. A power loss before the next sync may, when the copy did not reach the device
        /// either: the chunk then reads as corrupt (EIO), its synced bytes too, until rewritten whole.
        case chunkCopy
        /// The chunk copy is on the device before the chunk is rewritten, and the rewrite before the
        /// call returns (two `fdatasync`s per such write, as InnoDB's doublewrite buffer): a power
        /// loss costs no synced byte. Writes of whole chunks and appends are not slowed.
        case doubleWrite

        /// `.doubleWrite` when `ACSECURE_DOUBLE_WRITE=1`, else `.chunkCopy`.
        public static var environmentDefault: PartialOverwrites {
            if let v = getenv("ACSECURE_DOUBLE_WRITE"), String(cString: v) == "1" { return .doubleWrite }
            return .chunkCopy
        }
    }

    /// How a write that rewrites whole chunks in place keeps a kill from leaving one unreadable
    /// (docs/FORMAT.md "A chunk copy"). Every chunk spans two pages on disk, and Linux stops a
    /// `write` between two pages when SIGKILL is pending: the chunk is then half new, half old.
    public enum WholeChunkOverwrites: Sendable, Equatable {
        /// A write puts each chunk it rewrites whole in place in a chunk copy first, then writes it
        /// (two `pwrite`s per chunk): a kill that cuts the write leaves every chunk as it was or as
        /// the write made it. A large overwrite in place pays for it (1 MiB: 2.3 times the time of
        /// `.inPlace`, docs/BENCHMARKS.md "Every chunk rewritten in place copied first").
        case chunkCopy
        /// No copy: a kill that cuts the write may leave a chunk it rewrote whole unreadable (EIO)
        /// until it is written whole again. For callers that rewrite torn pages from a journal of
        /// their own (SQLite's rollback journal and WAL; the acsecure VFS opens its files so).
        case inPlace
    }

    /// Whether decrypted chunks are kept for reading again (per file and process).
    public enum ReadCache: Sendable, Equatable {
        /// Every read of a chunk not in the one-chunk cache reads and decrypts it.
        case off
        /// Up to this many bytes of decrypted chunks (`validBytes`), in guarded memory.
        case bytes(Int)

        /// 64 KiB to 1 GiB.
        public static let validBytes = (64 << 10)...(1 << 30)
        /// The size the C API uses when `ACSECURE_READ_CACHE_MIB` is not set: 16 MiB.
        public static let defaultMiB = 16

        var bytes: Int { if case .bytes(let n) = self { n } else { 0 } }
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

    static func resolveServices(_ services: (any KeyProvider)?, _ path: BytePath) throws(SecureFileError) -> any KeyProvider {
        if let services { return services }
        do { return try SecureServices.currentOrStartFromEnvironment() } catch {
            throw .ace(.noKeys, "\(path): secure services cannot start (\(error.message))")
        }
    }
}
