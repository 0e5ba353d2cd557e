#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// The on-disk store: a directory holding the secure services seed (docs/FORMAT.md, "The store").
///
/// Seed file format (`seed`, big-endian, 0600 in a 0700 directory, both owned by the user):
/// - 0 `"ACSS"` (4), 4 version = 1 (u8), 5 protection (u8: 0 = none, 1 = passcode)
/// - protection 0: 6 the 32-byte seed, protected by file permissions only (38 bytes in all)
/// - protection 1: 6 Argon2id ops limit (u64), 14 mem limit in bytes (u64), 22 salt (16), then at 38
///   the seed sealed with AES-256-GCM under the Argon2id key: nonce (12) ‖ ciphertext (32) ‖ tag (16);
///   AAD = bytes 0..<38 (98 bytes in all).
///
/// The store is refused (`.storeIO`, `EACCES`) when the directory or the seed is not owned by this
/// user or is accessible to group or others: whoever can write there can plant or replace the seed.
struct SeedStore {
    static let seedSize = 32
    static let magic: [UInt8] = Array("ACSS".utf8)

    /// Accepted Argon2id limits in a seed file: libsodium's minimum up to 16 passes and 1 GiB, so a
    /// tampered file cannot make an unlock allocate or compute without bound.
    static let opsLimitRange: ClosedRange<UInt64> = Argon2id.Cost.minimum.opsLimit...16
    static let memLimitRange: ClosedRange<UInt64> = UInt64(Argon2id.Cost.minimum.memLimit)...(1 << 30)
    /// Names of temporary seed files (`.seed.acsecure-tmp-*`, `AtomicReplacement`), written before
    /// the rename over `seed`; and `seed.tmp.*`, the name older versions used (still removed by `destroy`).
    static let temporaryPrefixes = ["." + "seed" + AtomicReplacement.temporaryMarker, "seed.tmp."]

    let directory: BytePath
    var seedPath: BytePath { directory.appending("/seed".utf8) }

    enum Protection: UInt8 { case none = 0, passcode = 1 }

    struct Sealed {
        var protection: Protection
        var cost: Argon2id.Cost
        var salt: [UInt8]
        var payload: [UInt8]  // the sealed seed (protection passcode); empty otherwise
        var aad: [UInt8]
        /// The raw seed (protection none), in guarded memory: it is never copied into an array.
        var seed: SecureBytes?
    }

    /// The most a seed file may hold (one is 38 or 98 bytes): the size of the guarded buffer it is read into.
    static let maximumFileSize = 4096

    /// Whether the seed file exists. Only `ENOENT` means no store: any other failure to examine it
    /// (an I/O error, a permission) is an error, since creating a store over an unreadable one would
    /// replace its seed and every file under it would be lost.
    func exists() throws(SecureServicesError) -> Bool {
        switch Sys.lstat(seedPath) {
        case .success: return true
        case .failure(let e) where e.rawValue == ENOENT: return false
        case .failure(let e): throw SecureServicesError(.storeIO, "cannot examine \(seedPath): \(e.text)", errno: e.rawValue)
        }
    }

    // MARK: reading

    /// The seed file, read into guarded memory (it may hold the raw seed) that is wiped before it is
    /// released; only the seed itself is kept, as `SecureBytes`.
    func load() throws(SecureServicesError) -> Sealed {
        try checkDirectoryIsPrivate()
        let buffer: SecureBuffer
        do { buffer = try SecureBuffer(count: Self.maximumFileSize) } catch { throw .crypto(error, "\(seedPath): cannot read the seed file") }
        defer {
            buffer.wipe()
            #if DEBUG
            buffer.withUnsafeBytes { Self.seedFileReadObserver.withLock { $0 }?(.released, $0) }
            #endif
        }
        let count = try readSeedFile(into: buffer)
        return try buffer.withUnsafeBytes { (b: UnsafeRawBufferPointer) throws(SecureServicesError) in
            let bytes = UnsafeRawBufferPointer(rebasing: b[0..<count])
            #if DEBUG
            Self.seedFileReadObserver.withLock { $0 }?(.read, bytes)
            #endif
            return try Self.parse(bytes, seedPath: seedPath.description)
        }
    }

    #if DEBUG
    enum ReadPhase: Sendable { case read, released }
    /// Tests: sees the guarded buffer a seed file is read into, once with the file's bytes (`.read`)
    /// and once just before the buffer is released (`.released`), when it must be all zeros.
    nonisolated static let seedFileReadObserver = LockedValue<(@Sendable (ReadPhase, UnsafeRawBufferPointer) -> Void)?>(nil)
    #endif

    /// Parses seed file bytes given as an array (the fuzz target FuzzSeedStoreParse, tests).
    static func parse(_ bytes: [UInt8], seedPath: String) throws(SecureServicesError) -> Sealed {
        // Array's withUnsafeBytes rethrows as `any Error`; the Result keeps the typed error.
        try bytes.withUnsafeBytes { b in Result { () throws(SecureServicesError) in try parse(b, seedPath: seedPath.description) } }.get()
    }

    /// Parses the bytes of a seed file (untrusted: the fuzz target FuzzSeedStoreParse feeds it).
    static func parse(_ bytes: UnsafeRawBufferPointer, seedPath: String) throws(SecureServicesError) -> Sealed {
        guard bytes.count >= 6, Array(bytes[0..<4]) == Self.magic else {
            throw SecureServicesError(.corruptStore, "\(seedPath): not a secure services seed file")
        }
        guard bytes[4] == 1 else { throw SecureServicesError(.corruptStore, "\(seedPath): unknown seed file version \(bytes[4])") }
        switch Protection(rawValue: bytes[5]) {
        case .none?:
            guard bytes.count == 6 + Self.seedSize else { throw SecureServicesError(.corruptStore, "\(seedPath): bad length") }
            let seed: SecureBytes
            do { seed = try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: bytes[6...])) } catch {
                throw .crypto(error, "\(seedPath): cannot hold the seed")
            }
            return Sealed(protection: .none, cost: .minimum, salt: [], payload: [], aad: [], seed: seed)
        case .passcode?:
            let fixed = 6 + 8 + 8 + Argon2id.saltSize
            guard bytes.count == fixed + 12 + Self.seedSize + 16 else { throw SecureServicesError(.corruptStore, "\(seedPath): bad length") }
            let ops = bytes[6..<14].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let mem = bytes[14..<22].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            // Bound the cost read from disk: a tampered file must not make us allocate without limit.
            guard Self.opsLimitRange.contains(ops), Self.memLimitRange.contains(mem), let memLimit = Int(exactly: mem) else {
                throw SecureServicesError(.corruptStore, "\(seedPath): Argon2id parameters out of range (ops \(ops), memory \(mem) bytes)")
            }
            return Sealed(protection: .passcode, cost: .init(opsLimit: ops, memLimit: memLimit),
                          salt: Array(bytes[22..<fixed]), payload: Array(bytes[fixed...]), aad: Array(bytes[0..<fixed]))
        case nil:
            throw SecureServicesError(.corruptStore, "\(seedPath): unknown protection \(bytes[5])")
        }
    }

    /// Recovers the seed. `passcode` is ignored when the store has none, unless `requireProtected`:
    /// then an unprotected seed (planted by whoever could write the store) fails with `.noKeys`.
    func openSeed(passcode: SecureBytes?, requireProtected: Bool) throws(SecureServicesError) -> SecureBytes {
        let sealed = try load()
        switch sealed.protection {
        case .none:
            if requireProtected { throw unprotectedSeedRefused() }
            guard let seed = sealed.seed else { throw SecureServicesError(.corruptStore, "\(seedPath): no seed") }
            return seed
        case .passcode:
            guard let passcode else { throw SecureServicesError(.wrongPasscode, "a passcode is required to unlock secure services") }
            do {
                let kek = try Argon2id.deriveKey(passcode: passcode, salt: sealed.salt, cost: sealed.cost)
                let ctx = try AESGCMContext(key: kek)
                guard let seed = try ctx.openSealed(sealed.payload, aad: sealed.aad), seed.count == Self.seedSize else {
                    throw SecureServicesError(.wrongPasscode, "wrong passcode")
                }
                return seed
            } catch let e as SecureServicesError {
                throw e
            } catch let e as CryptoError {
                throw .crypto(e, "cannot derive the passcode key")
            } catch {
                throw SecureServicesError(.storeIO, "cannot derive the passcode key: \(error)")
            }
        }
    }

    func unprotectedSeedRefused() -> SecureServicesError {
        SecureServicesError(.noKeys, "\(seedPath): the seed is not protected by a passcode, but a protected store is required "
                            + "(a passcode is configured): refusing it, as it may have been planted")
    }

    // MARK: checks

    /// The store directory must be a directory of this user that group and others cannot access.
    /// Refused, not repaired: once others could write there, the seed itself is not trustworthy.
    func checkDirectoryIsPrivate() throws(SecureServicesError) {
        let st: stat
        switch Sys.stat(directory) {
        case .success(let s): st = s
        case .failure(let e):
            throw SecureServicesError(e.rawValue == ENOENT ? .noKeys : .storeIO, "cannot examine the store directory \(directory): \(e.text)", errno: e.rawValue)
        }
        try Self.checkPrivate(st, directory, what: "store directory", type: S_IFDIR, repair: "chmod 700")
    }

    /// `st` (of the store directory or the seed) must be of `type`, owned by the effective user and
    /// without any group or other permission.
    static func checkPrivate(_ st: stat, _ path: BytePath, what: String, type: mode_t, repair: String) throws(SecureServicesError) {
        guard st.st_mode & S_IFMT == type else {
            throw SecureServicesError(.storeIO, "\(what) \(path) is not a \(type == S_IFDIR ? "directory" : "regular file")", errno: EACCES)
        }
        guard st.st_uid == geteuid() else {
            throw SecureServicesError(.storeIO, "\(what) \(path) belongs to uid \(st.st_uid), not to this user (uid \(geteuid())): refusing it", errno: EACCES)
        }
        let mode = st.st_mode & 0o7777
        guard mode & 0o077 == 0 else {
            throw SecureServicesError(.storeIO, "\(what) \(path) has mode \(String(mode, radix: 8)): group or others can access it, "
                                      + "so anyone who can write there can plant or replace the seed; refusing it "
                                      + "(if it is yours and was not tampered with: \(repair) \(path))", errno: EACCES)
        }
    }

    /// Reads the seed file into `buffer` and returns its length: not through a symbolic link, from a
    /// private regular file of this user.
    private func readSeedFile(into buffer: SecureBuffer) throws(SecureServicesError) -> Int {
        let fd: Int32
        switch Sys.open(seedPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) {
        case .success(let f): fd = f
        case .failure(let e):
            let why = e.rawValue == ELOOP ? "it is a symbolic link" : e.text
            throw SecureServicesError(e.rawValue == ENOENT ? .noKeys : .storeIO, "cannot open \(seedPath): \(why)", errno: e.rawValue)
        }
        defer { _ = Sys.close(fd) }  // read only: nothing to lose
        let st: stat
        switch Sys.fstat(fd) {
        case .success(let s): st = s
        case .failure(let e): throw SecureServicesError(.storeIO, "cannot examine \(seedPath): \(e.text)", errno: e.rawValue)
        }
        try Self.checkPrivate(st, seedPath, what: "seed file", type: S_IFREG, repair: "chmod 600")
        return try readAll(fd, seedPath, into: buffer)
    }

    // MARK: writing

    /// Writes the seed, sealed under `passcode` (or unprotected), atomically: temp file, fsync, rename.
    /// - Parameter replacing: false for a new store: the seed is published with `link(2)`, which never
    ///   replaces a seed another starter published meanwhile (two processes starting on a missing store).
    /// - Returns: false when `replacing` is false and a seed already existed: nothing was changed.
    @discardableResult
    func save(seed: SecureBytes, passcode: SecureBytes?, cost: Argon2id.Cost,
              replacing: Bool = true) throws(SecureServicesError) -> Bool {
        var out = Self.magic + [1]
        if let passcode, passcode.count > 0 {
            out.append(Protection.passcode.rawValue)
            out += bigEndian(cost.opsLimit) + bigEndian(UInt64(cost.memLimit))
            let salt = SecureRandom.bytes(Argon2id.saltSize)
            out += salt
            do {
                let kek = try Argon2id.deriveKey(passcode: passcode, salt: salt, cost: cost)
                out += try AESGCMContext(key: kek).sealWithRandomNonce(seed, aad: out)
            } catch {
                throw SecureServicesError(.storeIO, "cannot seal the seed: \(error)")
            }
        } else {
            out.append(Protection.none.rawValue)
            seed.withUnsafeBytes { out += $0 }
        }
        defer { out.withUnsafeMutableBytes { secureZero($0) } }
        try makeDirectory()
        return try writeFileAtomically(seedPath, out, replacing: replacing)
    }

    /// Creates the store directory (and its parents) for a new store. An existing directory must
    /// belong to this user; group and other access to it is removed, since the store is created
    /// now and nothing in it is trusted yet (an existing store is refused instead, in `load`).
    func makeDirectory() throws(SecureServicesError) {
        // Relative store directories stay relative (to the working directory).
        var path: BytePath = directory.bytes.first == UInt8(ascii: "/") ? "" : "."
        let parts = directory.bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true)
        for (i, part) in parts.enumerated() {
            path = path.appending("/".utf8).appending(part)
            if case .failure(let e) = Sys.mkdir(path, i == parts.count - 1 ? 0o700 : 0o755), e.rawValue != EEXIST {
                throw SecureServicesError(.storeIO, "cannot create \(path) (for the store \(directory)): \(e.text)", errno: e.rawValue)
            }
        }
        var st: stat
        switch Sys.stat(directory) {
        case .success(let s): st = s
        case .failure(let e): throw SecureServicesError(.storeIO, "cannot examine \(directory): \(e.text)", errno: e.rawValue)
        }
        if st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid(), st.st_mode & 0o077 != 0 {
            switch Sys.chmod(directory, 0o700).flatMap({ Sys.stat(directory) }) {
            case .success(let s): st = s
            case .failure(let e): throw SecureServicesError(.storeIO, "cannot make \(directory) private (mode 700): \(e.text)", errno: e.rawValue)
            }
        }
        try Self.checkPrivate(st, directory, what: "store directory", type: S_IFDIR, repair: "chmod 700")
    }

    /// Overwrites with zeros and removes every seed-related file — `seed` and any temporary seed file
    /// an interrupted write left (`temporaryPrefixes`) — then removes the store directory if nothing else is in it.
    /// Symbolic links are removed, never written through.
    func destroy() throws(SecureServicesError) {
        let names: [String]
        switch Sys.directoryEntries(directory) {
        case .success(let all): names = all.filter { name in name == "seed" || Self.temporaryPrefixes.contains { name.hasPrefix($0) } }
        case .failure(let e) where e.rawValue == ENOENT: return
        case .failure(let e): throw SecureServicesError(.storeIO, "cannot list \(directory): \(e.text)", errno: e.rawValue)
        }
        for name in names.sorted() { try Self.overwriteAndRemove(directory.appending("/".utf8).appending(name.utf8)) }
        if !names.isEmpty, case .failure(let e) = Sys.syncDirectory(directory) {
            throw SecureServicesError(.storeIO, "cannot fsync \(directory): \(e.text)", errno: e.rawValue)
        }
        // Other files (not ours) keep the directory; that is not an error.
        if case .failure(let e) = Sys.rmdir(directory), e.rawValue != ENOTEMPTY, e.rawValue != EEXIST, e.rawValue != ENOENT {
            throw SecureServicesError(.storeIO, "cannot remove \(directory): \(e.text)", errno: e.rawValue)
        }
    }

    private static func overwriteAndRemove(_ path: BytePath) throws(SecureServicesError) {
        func failure(_ what: String, _ e: Errno) -> SecureServicesError {
            SecureServicesError(.storeIO, "cannot \(what) \(path): \(e.text)", errno: e.rawValue)
        }
        switch Sys.open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) {
        case .success(let fd):
            let zeroed = Sys.fstat(fd).mapError { failure("examine", $0) }.flatMap { st -> Result<Void, SecureServicesError> in
                guard st.st_mode & S_IFMT == S_IFREG, st.st_size > 0 else { return .success(()) }
                let zeros = [UInt8](repeating: 0, count: Int(st.st_size))
                return zeros.withUnsafeBytes { Sys.pwriteFull(fd, $0.baseAddress!, $0.count, 0) }.mapError { failure("overwrite", $0) }
                    .flatMap { Sys.fsync(fd).mapError { failure("fsync", $0) } }
            }
            let closed = Sys.close(fd)
            try zeroed.get()
            if case .failure(let e) = closed { throw failure("close", e) }
        case .failure(let e) where e.rawValue == ENOENT:
            return
        case .failure(let e) where e.rawValue != ELOOP:  // ELOOP: a symbolic link, removed below without following it
            throw failure("open", e)
        case .failure:
            break
        }
        if case .failure(let e) = Sys.unlink(path), e.rawValue != ENOENT { throw failure("remove", e) }
    }
}

func bigEndian(_ v: UInt64) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) } }

/// Reads a small file to its end straight into `buffer` (no other copy) and returns its length; a
/// file that fills the buffer is not a seed file.
func readAll(_ fd: Int32, _ path: BytePath, into buffer: SecureBuffer) throws(SecureServicesError) -> Int {
    let n: Int
    switch buffer.withUnsafeMutableBytes({ Sys.readFull(fd, $0.baseAddress!, $0.count) }) {
    case .success(let got): n = got
    case .failure(let e): throw SecureServicesError(.storeIO, "cannot read \(path): \(e.text)", errno: e.rawValue)
    }
    guard n < buffer.count else { throw SecureServicesError(.corruptStore, "\(path): too large for a seed file") }
    return n
}

/// Writes `bytes` to `path` atomically (`AtomicReplacement`: a temporary file created with
/// `O_EXCL | O_NOFOLLOW`, so a planted file or link is never written through; fsync, rename, fsync
/// of the directory). Every failure is reported, naming `path`; the temporary file is removed.
/// - Parameter replacement: the temporary name to use (a test plants a link there).
/// - Returns: false when `replacing` is false and `path` already existed (left as it was).
@discardableResult
func writeFileAtomically(_ path: BytePath, _ bytes: [UInt8], replacing: Bool = true,
                         through replacement: AtomicReplacement? = nil) throws(SecureServicesError) -> Bool {
    func failure(_ step: String, _ e: Errno) -> SecureServicesError {
        SecureServicesError(.storeIO, "cannot write \(path): \(step): \(e.text)", errno: e.rawValue)
    }
    // Publishing without replacing: only its link(2) can fail with EEXIST (a failure to create the
    // temporary file is the write closure's error, not a publishing failure).
    var destinationExisted = false
    do {
        try (replacement ?? AtomicReplacement(destination: path)).run(replacing: replacing, write: { (temporary) throws(SecureServicesError) in
            let fd: Int32
            switch Sys.open(temporary, O_WRONLY | AtomicReplacement.exclusiveCreationFlags, 0o600) {
            case .success(let f): fd = f
            case .failure(let e):
                throw SecureServicesError(.storeIO, "cannot create \(temporary) (to write \(path)): \(e.text)", errno: e.rawValue)
            }
            let written = bytes.withUnsafeBytes { Sys.writeFull(fd, $0.baseAddress!, $0.count) }
            let closed = Sys.close(fd)
            if case .failure(let e) = written { throw failure("write", e) }
            if case .failure(let e) = closed { throw failure("close", e) }
        }, failure: { f in
            destinationExisted = !replacing && f.errno.rawValue == EEXIST
            return failure(f.step, f.errno)
        })
    } catch {
        if destinationExisted { return false }
        throw error
    }
    return true
}
