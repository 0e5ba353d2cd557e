#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

/// The process-wide table of files open through the engine, by device and inode (and key
/// provider, so two stores in one process never share keys).
///
/// The table's mutex guards only the table and the reference counts: it is never held across file
/// I/O, key derivation or a record-lock wait. A file opened for the first time is inserted as an
/// empty state whose own lock is held while it loads, so a second opener of the same file waits
/// for that load alone, and opens and closes of other files go on meanwhile.
enum OpenFiles {
    private struct Key: Hashable { var identity: SharedFile.Identity; var services: ObjectIdentifier }
    private static let table = LockedValue<[Key: SharedFile]>([:])
    /// Providers whose lock handler is installed. Weak, and compared by identity: an address can be
    /// reused by a new provider once the old one is gone.
    private final class WeakProvider: @unchecked Sendable { weak var value: (any KeyProvider)?; init(_ v: any KeyProvider) { value = v } }
    private static let servicesWithHandler = LockedValue<[ObjectIdentifier: WeakProvider]>([:])

    struct Request {
        var identity: SharedFile.Identity
        var services: any KeyProvider
        var key: KeySelection
        var path: BytePath
        var fd: Int32
        var writable: Bool
        /// This open created the file (it is new, and empty).
        var create: Bool
        var truncate: Bool
        var coordinated: Bool
        var readCacheBytes = 0
        /// Partial overwrites are double-written (`SecureFile.PartialOverwrites.doubleWrite`).
        var doubleWrite = false
        /// Whole chunks are rewritten in place with no chunk copy (`SecureFile.WholeChunkOverwrites.inPlace`).
        var wholeChunksInPlace = false
        /// The file's length from the opener's `fstat` (reread under the record lock in coordinated mode).
        var physicalSize: Int64
    }

    static func acquire(_ r: Request) throws(SecureFileError) -> SharedFile {
        registerLockHandler(r.services)
        installExitFlush
        let tableKey = Key(identity: r.identity, services: ObjectIdentifier(r.services))
        while true {
            let (shared, isNew) = try table.withLock { (table) throws(SecureFileError) -> (SharedFile, Bool) in
                if let existing = table[tableKey] {
                    existing.refCount += 1
                    return (existing, false)
                }
                // Out of guarded memory: nothing is in the table yet.
                let fresh = try SharedFile(identity: r.identity, services: r.services, keySelection: r.key, path: r.path)
                fresh.lock.lock()  // held until loaded; a new lock, so this never waits
                fresh.refCount = 1
                table[tableKey] = fresh
                return (fresh, true)
            }
            if isNew {
                defer { shared.lock.unlock() }
                do { try load(shared, r) } catch {
                    shared.loadFailed = true
                    table.withLock { table in
                        shared.refCount -= 1
                        if table[tableKey] === shared { table[tableKey] = nil }
                    }
                    throw error
                }
                return shared
            }
            shared.lock.lock()
            if shared.loadFailed {
                // The first opener could not load it: try again on our own (our flags may differ).
                shared.lock.unlock()
                release(shared)
                continue
            }
            do { try attach(shared, r) } catch {
                shared.lock.unlock()
                release(shared)
                throw error
            }
            shared.lock.unlock()
            return shared
        }
    }

    /// How many handles this process has open on `identity`, whatever their key provider.
    static func handleCount(_ identity: SharedFile.Identity) -> Int {
        table.withLock { $0.reduce(0) { $0 + ($1.key.identity == identity ? $1.value.refCount : 0) } }
    }

    /// The plaintext size of a file this process has open (it may include cached writes), if any.
    static func openSize(device: UInt64, inode: UInt64) -> Int64? {
        let identity = SharedFile.Identity(device: device, inode: inode)
        let files = table.withLock { $0.filter { $0.key.identity == identity }.map(\.value) }
        // A state a forked child inherited and has not used holds none of this process's writes: the disk's length is the truth.
        return files.compactMap { f in
            f.lock.withLock { f.loadFailed || f.header == nil && f.size == 0 || f.forkGeneration != ForkGeneration.current ? nil : f.size }
        }.max()
    }

    /// Returns whether that was the file's last handle (then no new handle can reach `shared`).
    @discardableResult
    static func release(_ shared: SharedFile) -> Bool {
        table.withLock { table in
            shared.refCount -= 1
            let key = Key(identity: shared.identity, services: ObjectIdentifier(shared.services))
            if shared.refCount == 0, table[key] === shared { table[key] = nil }
            return shared.refCount == 0
        }
    }

    /// Another handle on a file already open: the same key, a writable descriptor if needed, O_TRUNC.
    private static func attach(_ existing: SharedFile, _ r: Request) throws(SecureFileError) {
        try existing.adoptAfterForkIfNeeded()  // a forked child's first use of a state it inherited
        try verifyKey(of: existing, key: r.key)
        if r.writable && !existing.ioFDWritable {
            // Out of descriptors: fail this open rather than hand out a writer that cannot write.
            switch Sys.dup(r.fd) {
            case .success(let dupFD):
                _ = Sys.close(existing.ioFD)
                existing.ioFD = dupFD
                existing.ioFDWritable = true
                existing.ioFDSharedWithParent = false  // this process's own open
            case .failure(let e):
                throw .posix(e.rawValue, "\(r.path): dup")
            }
        }
        if r.coordinated {
            try existing.ownDescription()  // a forked child's inherited description cannot hold its lock
            // An end checked without the lock may be another process's half-written one: the first
            // locked operation checks it again, even if the length then looks unchanged.
            if !existing.coordinated { existing.endCheckedWithoutLock = true }
            existing.coordinated = true
            existing.dropReadCache()
        }
        existing.requestReadCache(bytes: r.readCacheBytes)
        if r.doubleWrite { existing.doubleWrite = true }
        if !r.wholeChunksInPlace { existing.copiesWholeChunks = true }
        guard r.truncate else { return }
        try existing.ensureKeys()
        if existing.coordinated { try existing.beginCoordinated(exclusive: true) }
        do { try existing.truncate(to: 0) } catch {
            if existing.coordinated { existing.endCoordinated() }
            throw error
        }
        if existing.coordinated { try existing.finishCoordinated() }
    }

    /// A second opener must hold the file's key too: the shared state must not bypass the check.
    private static func verifyKey(of shared: SharedFile, key: KeySelection) throws(SecureFileError) {
        guard let header = shared.header else { return }
        if key == shared.keySelection { return }
        let kek: KeyEncryptionKey
        do { kek = try shared.services.keyEncryptionKey(for: key) } catch { throw .services(error, shared.path) }
        guard try header.unwrap(with: kek, path: shared.path) != nil else {
            throw .ace(.badKeyOrCorruptData, "\(shared.path): not encrypted with the \(key) key")
        }
    }

    /// Reads the header and authenticates the end of a file opened for the first time (with the
    /// file's record lock in coordinated mode: another process may be creating or truncating it).
    private static func load(_ shared: SharedFile, _ r: Request) throws(SecureFileError) {
        switch Sys.dup(r.fd) {
        case .success(let d): shared.ioFD = d
        case .failure(let e): throw .posix(e.rawValue, "\(r.path): dup")
        }
        shared.ioFDWritable = r.writable
        shared.coordinated = r.coordinated
        shared.requestReadCache(bytes: r.readCacheBytes)
        shared.doubleWrite = r.doubleWrite
        shared.copiesWholeChunks = !r.wholeChunksInPlace
        if r.coordinated, case .failure(let e) = Sys.lockFile(r.fd, Int16(r.writable ? F_WRLCK : F_RDLCK)) {
            throw SecureFileError.posix(e.rawValue, "\(r.path): lock")
        }
        defer { if r.coordinated { _ = Sys.lockFile(r.fd, Int16(F_UNLCK)) } }
        // The opener's fstat is current unless another process may have changed the file before the lock.
        var physical = r.physicalSize
        if r.coordinated {
            switch Sys.fstat(r.fd) {
            case .success(let st): physical = Int64(st.st_size)
            case .failure(let e): throw .posix(e.rawValue, r.path)
            }
        }
        var parsed: Result<FileHeader, HeaderParseError> = .failure(.tooShort)
        if physical > 0 {
            switch FileHeader.read(from: r.fd) {
            case .success(let header): parsed = .success(header)
            case .failure(.invalid(let why)): parsed = .failure(why)
            case .failure(.io(let e)): throw .posix(e, r.path)
            }
        }
        switch parsed {
        case .success(let header):
            try shared.setLayout(header.layout)
            shared.adoptHeader(header)
            // A length that is not a valid file length (an interrupted write or tampering) is
            // resolved by the end check below: recovered, or refused for changes.
            switch SharedFile.sizeOnDisk(header.layout, fd: r.fd, physical: physical) {
            case .success(let end):
                shared.diskSize = end?.size ?? 0
                shared.diskShape = end?.shape ?? .none
            case .failure(let e): throw .posix(e.rawValue, r.path)
            }
            shared.size = shared.diskSize
            try shared.ensureKeys()
            // The end is authenticated at open (O(1)); an interrupted write is recovered here. A
            // file whose end does not authenticate still opens: its tail reports the error when
            // read, and every change but a cut to 0 is refused.
            do { try shared.verifyTrailerIfNeeded(physicalSize: physical) } catch {
                if error.code != .badKeyOrCorruptData { throw error }
            }
            if r.truncate {
                try shared.truncate(to: 0)
                // As `finishCoordinated` does before the lock is released.
                if r.coordinated { try shared.settleCut() }
            }
        case .failure(let why):
            if physical == 0 {
                // Only the open that created the file, or an O_TRUNC open (which empties on purpose),
                // may take a 0-byte file as a new secure file (it writes the header now); otherwise an
                // empty file is a cut secure file, or not one — also for O_CREAT: a creating open
                // must not launder a cut (the engine never leaves a 0-byte file of its own).
                guard r.create || r.truncate else {
                    throw .ace(.badKeyOrCorruptData, "\(r.path): the file is empty, not a secure file (cut to 0 bytes, or its creation was interrupted); open it with O_TRUNC to start it anew")
                }
                if r.writable { try shared.ensureKeys(); try shared.initializeIfNeeded() }
            } else if r.truncate, why == .notASecureFile || why == .tooShort {
                // O_TRUNC of a plain file discards its bytes, as open(2) would; a file that is a
                // secure file we cannot read is never destroyed this way.
                try shared.checkIO(Sys.ftruncate(shared.ioFD, 0), "truncate")
                try shared.ensureKeys()
                try shared.initializeIfNeeded()
            } else {
                throw .ace(.badKeyOrCorruptData, "\(r.path): \(why)")
            }
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

    /// Write-back handles keep data in memory, as stdio does: a normal exit (`exit`, return from
    /// `main`) writes it, like `fflush` at exit. A failure cannot be returned any more, so it is
    /// printed on standard error, naming the file. `_exit` and signals lose it (documented).
    private static let installExitFlush: Void = {
        // Handlers run in reverse order of registration: OpenSSL's cleanup (registered when it
        // first initialises) must run after this flush, which still encrypts. So initialise it
        // (a random draw does) before registering.
        var probe = [UInt8](repeating: 0, count: FileLayout.nonceSize)
        probe.withUnsafeMutableBytes { NonceGenerator.fill($0) }
        atexit { OpenFiles.flushAllAtExit() }
    }()

    /// Before fork(2) (the parent's `pthread_atfork` prepare handler): every write-back buffer is
    /// written, as `flush()` would. A failure cannot be returned from fork: like a failed flush when
    /// services lock, it is reported by each handle's next call and its close.
    static func flushAllBeforeFork() {
        let files = table.withLock { Array($0.values) }
        for f in files {
            f.lock.withLock {
                guard f.runFirst >= 0, f.forkGeneration == ForkGeneration.current else { return }
                do throws(SecureFileError) { try f.flushRun() } catch {
                    f.deferError(error, "buffered data could not be written before fork()")
                }
            }
        }
    }

    static func flushAllAtExit() {
        let files = table.withLock { Array($0.values) }
        for f in files {
            f.lock.withLock {
                f.dropInheritedRun()
                guard f.runFirst >= 0 else { return }
                do throws(SecureFileError) { try f.flushRun() } catch {
                    let message = "ACSecureFile: \(f.path): buffered writes lost at exit: \(error.message)\n"
                    _ = message.withCString { Glibc.write(2, $0, strlen($0)) }
                }
            }
        }
    }
}
