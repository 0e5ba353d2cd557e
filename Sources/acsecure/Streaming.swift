#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureFileCore
import ACSecureServices

/// Plaintext passes through one guarded buffer of this size: memory stays bounded whatever the
/// file size, and the buffer is zeroed when freed.
let streamBufferSize = 256 * 1024

// MARK: plain descriptors

enum PlainIO {
    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0o600) throws(CLIError) -> Int32 {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw CLIError.posix(errno, path)
        }
    }

    /// Reads up to `count` bytes, fewer only at end of input.
    static func readFull(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, _ what: String) throws(CLIError) -> Int {
        var done = 0
        while done < count {
            let n = Glibc.read(fd, buffer + done, count - done)
            if n < 0 { if errno == EINTR { continue }; throw CLIError.posix(errno, what) }
            if n == 0 { break }
            done += n
        }
        return done
    }

    static func writeFull(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int, _ what: String) throws(CLIError) {
        var done = 0
        while done < count {
            let n = Glibc.write(fd, buffer + done, count - done)
            if n < 0 { if errno == EINTR { continue }; throw CLIError.posix(errno, what) }
            done += n
        }
    }

    static func size(_ fd: Int32) -> Int64? {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let d = String(path[..<slash])
        return d.isEmpty ? "/" : d
    }

    static func fsyncDirectory(of path: String) {
        let fd = Glibc.open(directory(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { _ = fsync(fd); _ = Glibc.close(fd) }
    }
}

// MARK: output files that appear whole or not at all

/// A temporary file beside `destination`, moved into place by `commit`: readers never see half an
/// output, and a failure leaves the destination as it was. Removed again unless committed.
final class PendingOutput {
    let destination: String
    let temporaryPath: String
    /// What the refusal to replace an existing output suggests.
    private let replaceHint: String
    private var committed = false

    init(destination: String, force: Bool, replaceHint: String = "use --force to replace it") throws(CLIError) {
        self.replaceHint = replaceHint
        if !force && PlainIO.exists(destination) {
            throw CLIError(.usage, "\(destination): already exists (\(replaceHint))")
        }
        var st = stat()
        if lstat(destination, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR {
            throw CLIError(.io, "\(destination): is a directory (\(errnoName(EISDIR)))")
        }
        let name = destination.split(separator: "/").last.map(String.init) ?? destination
        let dir = PlainIO.directory(of: destination)
        self.destination = destination
        self.temporaryPath = (dir == "." && !destination.hasPrefix("./") ? "" : dir + "/") + ".\(name).acsecure-tmp-\(hex(SecureRandom.bytes(6)))"
        PendingOutputs.register(temporaryPath)
    }

    /// Moves the finished file into place. Without `force`, `link` + `unlink` so an output that
    /// appeared meanwhile is not replaced; with it, `rename`.
    /// - Parameter keepOnFailure: when the move fails, leave the finished temporary file and name
    ///   it in the error, for content that cannot be produced again (standard input).
    func commit(force: Bool, keepOnFailure: Bool = false) throws(CLIError) {
        var failure: CLIError?
        if force {
            if rename(temporaryPath, destination) != 0 { failure = CLIError.posix(errno, "\(destination): rename") }
        } else if link(temporaryPath, destination) != 0 {
            let e = errno
            failure = e == EEXIST ? CLIError(.usage, "\(destination): already exists (\(replaceHint))")
                                  : CLIError.posix(e, "\(destination): link")
        } else {
            _ = unlink(temporaryPath)
        }
        if var failure {
            if keepOnFailure {
                committed = true
                PendingOutputs.unregister(temporaryPath)
                failure.message += "; what was written is kept in \(temporaryPath)"
            }
            throw failure
        }
        committed = true
        PendingOutputs.unregister(temporaryPath)
        PlainIO.fsyncDirectory(of: destination)
    }

    /// Gives the finished temporary file the permission bits of the regular file it is about to
    /// replace, so `write --force` onto a 0444 file leaves a 0444 file. Read just before the
    /// rename; nothing to do when there is no such file.
    func keepModeOfReplacedFile() throws(CLIError) {
        var st = stat()
        guard lstat(destination, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return }
        guard chmod(temporaryPath, st.st_mode & 0o777) == 0 else { throw CLIError.posix(errno, "\(destination): chmod") }
    }

    /// Runs `body`, which creates (`creating`) or fills the temporary file. Its errors name the
    /// output the user asked for instead of the temporary name, which the user never chose and
    /// which is gone afterwards: "out.acsf: cannot create a file in dir/: Permission denied".
    func namingDestination<T>(creating: Bool = false, _ body: () throws(CLIError) -> T) throws(CLIError) -> T {
        do { return try body() } catch {
            var text = error.message
            if creating && text.hasPrefix(temporaryPath + ": ") {
                text = "\(destination): cannot create a file in \(PlainIO.directory(of: destination))/: "
                    + text.dropFirst(temporaryPath.count + 2)
            }
            throw CLIError(error.status, text.replacing(temporaryPath, with: destination))
        }
    }

    deinit {
        if !committed {
            _ = unlink(temporaryPath)
            PendingOutputs.unregister(temporaryPath)
        }
    }
}

/// Temporary files to remove if acsecure is interrupted (SIGINT/SIGTERM) in the middle of a write.
enum PendingOutputs {
    private static let maxPaths = 4
    nonisolated(unsafe) private static var paths = [[CChar]?](repeating: nil, count: maxPaths)
    nonisolated(unsafe) private static var installed = false

    static func register(_ path: String) {
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
        if let i = paths.firstIndex(where: { $0 == nil }) { paths[i] = Array(path.utf8CString) }
    }

    static func unregister(_ path: String) {
        let c = Array(path.utf8CString)
        if let i = paths.firstIndex(where: { $0 == c }) { paths[i] = nil }
    }

    /// Async-signal context: only unlink(2) on buffers allocated beforehand.
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
                var done = 0
                while done < n { done += try file.write(UnsafeRawBufferPointer(rebasing: b[done..<n])) }
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
func copySecure(_ file: SecureFile, to fd: Int32, outputName: String, progress: Progress?) throws(CLIError) -> Int64 {
    let buffer = try guardedBytes("\(file.path): copy buffer") { () throws(CryptoError) in try SecureBuffer(count: streamBufferSize) }
    var total: Int64 = 0
    while true {
        let n: Int
        do {
            n = try buffer.withUnsafeMutableBytes { (b) throws(SecureFileError) -> Int in try file.read(into: b) }
        } catch {
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
func openSecure(_ path: String, flags: Int32, mode: mode_t = 0o666, key: KeySelection, services: SecureServices) throws(CLIError) -> SecureFile {
    let file: SecureFile
    do { file = try SecureFile.open(path, flags: flags, mode: mode, key: key, services: services) } catch {
        throw CLIError(error)
    }
    // A recovered interrupted write (or a rolled-back end) is never silent.
    let extra: Int64
    do { extra = try file.bytesAfterAuthenticatedEnd } catch { throw CLIError(error) }
    if extra > 0 {
        let change = flags & O_ACCMODE == O_RDONLY ? "the next change of the file removes them" : "this change removes them"
        let message = "acsecure: warning: \(path): \(extra) bytes after the authenticated end are ignored (an interrupted write, tampering, or an older end put back); \(change)\n"
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

func secureInfo(_ path: String) throws(CLIError) -> SecureFileInfo {
    do { return try SecureFileSystem.info(path) } catch { throw CLIError(error) }
}
