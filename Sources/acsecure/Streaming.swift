#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

/// Plaintext passes through one guarded buffer of this size: memory stays bounded whatever the
/// file size, and the buffer is zeroed when freed.
let streamBufferSize = 256 * 1024

// MARK: plain descriptors

enum PlainIO {
    static func open(_ path: BytePath, _ flags: Int32, _ mode: mode_t = 0o600) throws(CLIError) -> Int32 {
        switch Sys.open(path, flags | O_CLOEXEC, mode) {
        case .success(let fd): return fd
        case .failure(let e): throw CLIError.posix(e.rawValue, path)
        }
    }

    /// Reads up to `count` bytes, fewer only at end of input.
    static func readFull(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, _ what: String) throws(CLIError) -> Int {
        switch Sys.readFull(fd, buffer, count) {
        case .success(let n): return n
        case .failure(let e): throw CLIError.posix(e.rawValue, what)
        }
    }

    static func writeFull(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ what: String) throws(CLIError) {
        if case .failure(let e) = Sys.writeFull(fd, buffer, count) { throw CLIError.posix(e.rawValue, what) }
    }

    static func fsync(_ fd: Int32, _ what: String) throws(CLIError) {
        if case .failure(let e) = Sys.fsync(fd) { throw CLIError.posix(e.rawValue, "\(what): fsync") }
    }

    /// Closes a descriptor that was written: a failure is reported.
    static func close(_ fd: Int32, _ what: String) throws(CLIError) {
        if case .failure(let e) = Sys.close(fd) { throw CLIError.posix(e.rawValue, "\(what): close") }
    }

    /// Closes a descriptor that was only read (nothing to lose), or on the way out of a failure
    /// that is already being reported.
    static func closeAfterReading(_ fd: Int32) { _ = Sys.close(fd) }

    static func size(_ fd: Int32) -> Int64? {
        guard case .success(let st) = Sys.fstat(fd), st.st_mode & S_IFMT == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    static func exists(_ path: BytePath) -> Bool {
        if case .success = Sys.lstat(path) { return true }
        return false
    }

}

// MARK: output files that appear whole or not at all

/// A temporary file beside `destination` (`AtomicReplacement`), moved into place by `commit`
/// (fsync, rename or link, fsync of the directory): readers never see half an output, and a
/// failure leaves the destination as it was. Removed again unless committed.
final class PendingOutput {
    let destination: BytePath
    private let replacement: AtomicReplacement
    var temporaryPath: BytePath { replacement.temporaryPath }
    /// What the refusal to replace an existing output suggests.
    private let replaceHint: String
    private var committed = false

    /// The flags to create `temporaryPath` with (add the access mode): never through a planted name.
    static let creationFlags = AtomicReplacement.exclusiveCreationFlags

    init(destination: BytePath, force: Bool, replaceHint: String = "use --force to replace it") throws(CLIError) {
        self.replaceHint = replaceHint
        // A directory first: --force cannot replace one, so "already exists (use --force)" would mislead.
        if case .success(let st) = Sys.stat(destination), st.st_mode & S_IFMT == S_IFDIR {
            throw CLIError(.io, "\(destination): is a directory (\(errnoName(EISDIR))); name a file to create, e.g. \(destination)\(destination.bytes.last == UInt8(ascii: "/") ? "" : "/")NAME")
        }
        if !force && PlainIO.exists(destination) {
            throw CLIError(.usage, "\(destination): already exists (\(replaceHint))")
        }
        self.destination = destination
        replacement = AtomicReplacement(destination: destination)
        PendingOutputs.register(replacement.temporaryPath)
    }

    /// Moves the finished (written and closed) file into place. Without `force`, `link` + `unlink`
    /// so an output that appeared meanwhile is not replaced; with it, `rename`.
    /// - Parameter keepOnFailure: when the move fails, leave the finished temporary file and name
    ///   it in the error, for content that cannot be produced again (standard input).
    func commit(force: Bool, keepOnFailure: Bool = false) throws(CLIError) {
        let published = replacement.publish(replacing: force, keepOnFailure: keepOnFailure)
        // Whatever happened, the temporary file is now published, removed, or handed to the user.
        committed = true
        PendingOutputs.unregister(temporaryPath)
        guard case .failure(let f) = published else { return }
        var failure = f.step == "link" && f.errno.rawValue == EEXIST
            ? CLIError(.usage, "\(destination): already exists (\(replaceHint))")
            : CLIError.posix(f.errno.rawValue, "\(destination): \(f.step)")
        if keepOnFailure, case .success = Sys.lstat(temporaryPath) {
            failure.message += "; what was written is kept in \(temporaryPath)"
        }
        throw failure
    }

    /// Gives the finished temporary file the permission bits of the regular file it is about to
    /// replace, so `write --force` onto a 0444 file leaves a 0444 file. Read just before the
    /// rename; nothing to do when there is no such file.
    func keepModeOfReplacedFile() throws(CLIError) {
        guard case .success(let st) = Sys.lstat(destination), st.st_mode & S_IFMT == S_IFREG else { return }
        if case .failure(let e) = Sys.chmod(temporaryPath, st.st_mode & 0o777) { throw CLIError.posix(e.rawValue, "\(destination): chmod") }
    }

    /// Runs `body`, which creates (`creating`) or fills the temporary file. Its errors name the
    /// output the user asked for instead of the temporary name, which the user never chose and
    /// which is gone afterwards: "out.acsf: cannot create a file in dir/: Permission denied".
    func namingDestination<T>(creating: Bool = false, _ body: () throws(CLIError) -> T) throws(CLIError) -> T {
        do { return try body() } catch {
            var text = error.message
            let temporary = temporaryPath.description
            if creating && text.hasPrefix(temporary + ": ") {
                text = "\(destination): cannot create a file in \(destination.directory)/: "
                    + text.dropFirst(temporary.count + 2)
            }
            throw CLIError(error.status, text.replacing(temporary, with: destination.description))
        }
    }

    deinit {
        if !committed {
            replacement.discard()
            PendingOutputs.unregister(temporaryPath)
        }
    }
}

/// Temporary files to remove if acsecure is interrupted (SIGINT/SIGTERM) in the middle of a write.
enum PendingOutputs {
    private static let maxPaths = 4
    nonisolated(unsafe) private static var paths = [[CChar]?](repeating: nil, count: maxPaths)
    nonisolated(unsafe) private static var installed = false

    static func register(_ path: BytePath) {
        if !installed {
            installed = true
            for sig in [SIGINT, SIGTERM, SIGHUP] {
                signal(sig) { sig in
                    PendingOutputs.removeAll()
                    signal(sig, SIG_DFL)
                    raise(sig)
                }
            }
        }
        if let i = paths.firstIndex(where: { $0 == nil }) { paths[i] = cString(path) }
    }

    private static func cString(_ path: BytePath) -> [CChar] { path.bytes.map { CChar(bitPattern: $0) } + [0] }

    static func unregister(_ path: BytePath) {
        let c = cString(path)
        if let i = paths.firstIndex(where: { $0 == c }) { paths[i] = nil }
    }

    /// Async-signal context: only unlink(2) on buffers allocated beforehand (the one file-system call
    /// of the CLI outside the system-call layer, which may allocate).
    static func removeAll() {
        for i in 0..<maxPaths {
            if let p = paths[i] { p.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) } }
        }
    }
}

// MARK: copying

/// Copies a plain descriptor into a secure file, through guarded memory.
func copyPlain(_ fd: Int32, name: String, into file: SecureFile, progress: Progress?) throws(CLIError) -> Int64 {
    let buffer = try guardedBytes("\(file.path): copy buffer") { () throws(CryptoError) in try SecureBuffer(count: streamBufferSize) }
    var total: Int64 = 0
    while true {
        let n = try buffer.withUnsafeMutableBytes { (b) throws(CLIError) -> Int in
            try PlainIO.readFull(fd, b.baseAddress!, b.count, name)
        }
        if n == 0 { break }
        do {
            try buffer.withUnsafeBytes { (b) throws(SecureFileError) in
                try file.writeFully(UnsafeRawBufferPointer(rebasing: b[0..<n]))
            }
        } catch {
            throw CLIError(error)
        }
        total += Int64(n)
        progress?.update(total)
    }
    return total
}

/// Copies a secure file (from its current offset) to a plain descriptor, through guarded memory.
/// Every chunk is authenticated before any of its bytes is written, and the length at the end.
/// Reads go in blocks of `streamBufferSize`; when a block does not authenticate, it is read again
/// one chunk at a time, so every chunk before the bad one is written, in order, before the error
/// (the bad chunk's error, which names it, is the one thrown).
func copySecure(_ file: SecureFile, chunkSize: Int, to fd: Int32, outputName: String, progress: Progress?) throws(CLIError) -> Int64 {
    let buffer = try guardedBytes("\(file.path): copy buffer") { () throws(CryptoError) in try SecureBuffer(count: streamBufferSize) }
    var total: Int64 = 0
    var chunkByChunk = false
    while true {
        // A read that fails leaves the offset where it was (read(2)), so the same bytes can be
        // read again in smaller pieces.
        let n: Int
        do {
            n = try buffer.withUnsafeMutableBytes { (b) throws(SecureFileError) -> Int in
                guard chunkByChunk else { return try file.read(into: b) }
                let offset = try file.seek(0, whence: SEEK_CUR)
                let toBoundary = chunkSize - Int(offset % Int64(chunkSize))
                return try file.read(into: UnsafeMutableRawBufferPointer(rebasing: b[0..<min(b.count, toBoundary)]))
            }
        } catch {
            if error.code == .badKeyOrCorruptData && !chunkByChunk {
                chunkByChunk = true
                continue
            }
            throw CLIError(error)
        }
        if n == 0 { break }
        try buffer.withUnsafeBytes { (b) throws(CLIError) in try PlainIO.writeFull(fd, b.baseAddress!, n, outputName) }
        total += Int64(n)
        progress?.update(total)
    }
    return total
}

/// Opens a secure file, turning errors into CLI errors.
func openSecure(_ path: BytePath, flags: Int32, mode: mode_t = 0o666, key: KeySelection, services: SecureServices) throws(CLIError) -> SecureFile {
    let file: SecureFile
    do { file = try SecureFile.open(path, flags: flags, mode: mode, key: key, services: services) } catch {
        throw CLIError(error)
    }
    // A recovered interrupted write (or a rolled-back end) is never silent.
    let extra: Int64
    do { extra = try file.bytesAfterAuthenticatedEnd } catch { throw CLIError(error) }
    let restored: Bool
    do { restored = try file.endRestoredFromTailCopy } catch { throw CLIError(error) }
    if restored {
        let message = "acsecure: warning: \(path): its end was restored from the last sync's tail copy (a power loss or tampering)\n"
        _ = message.withCString { Glibc.write(2, $0, strlen($0)) }
    }
    if extra > 0 {
        let change = flags & O_ACCMODE == O_RDONLY ? "the next change of the file removes them" : "this change removes them"
        let message = "acsecure: warning: \(path): \(counted(extra, "byte")) after the authenticated end \(extra == 1 ? "is" : "are") ignored (an interrupted write, tampering, or an older end put back); \(change)\n"
        _ = message.withCString { Glibc.write(2, $0, strlen($0)) }
    }
    return file
}

func closeSecure(_ file: SecureFile, sync: Bool) throws(CLIError) {
    do {
        if sync { try file.sync() }
        try file.close()
    } catch {
        throw CLIError(error)
    }
}

func secureInfo(_ path: BytePath) throws(CLIError) -> SecureFileInfo {
    do { return try SecureFileSystem.info(path) } catch { throw CLIError(error) }
}
