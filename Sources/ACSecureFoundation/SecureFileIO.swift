#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSecureServices
import ACSystemCalls

/// The whole-file operations every Foundation extension shares: read all, write (atomically or
/// not), copy with a fresh key, and the URL and group-ID checks. They throw `SecureFileError`
/// (engine) or `NSError`; the public methods bridge with `bridgingErrors`.
///
/// Every operation uses the process-wide secure services (`SecureServices.current`, started from
/// the environment if needed), as the AppConnect categories use the app's secure services.
enum SecureFileIO {

    // MARK: arguments

    /// The path of a file URL; any other URL fails with `ACE_REGULAR_FILE_ONLY_ERROR`.
    static func path(of url: URL) throws -> String {
        guard url.isFileURL else {
            throw aceError(.regularFileOnly, "\(url.absoluteString): not a file URL (secure files are regular files only)")
        }
        return url.path
    }

    /// The key for an optional encryption group ID; an empty ID fails with `ACE_INVALID_ARG`.
    static func key(group: String?, path: String) throws -> KeySelection {
        guard let group else { return .app }
        guard !group.isEmpty else { throw aceError(.invalidArgument, "\(path): the encryption group ID is empty", path: path) }
        return .group(group)
    }

    /// Fails with `ACE_NO_KEYS_ERROR` unless secure services are available.
    static func requireServices(_ path: String) throws {
        let services: SecureServices
        do { services = try SecureServices.currentOrStartFromEnvironment() } catch {
            throw aceError(.noKeys, "\(path): secure services cannot start (\(error.message))", path: path)
        }
        guard services.availability == .available else {
            throw aceError(.noKeys, "\(path): secure services are unavailable", path: path)
        }
    }

    // MARK: reading

    /// The whole plaintext of a secure file.
    static func readAll(_ path: String, key: KeySelection) throws -> Data {
        let file = try SecureFile.open(path, flags: O_RDONLY | O_CLOEXEC, key: key)
        let data: Data
        do { data = try readAll(file) } catch { throw closing(file, after: error) }
        try file.close()
        return data
    }

    private static func readAll(_ file: SecureFile) throws -> Data {
        // A whole-file read has no way to say "this is the file as at its last sync, not all of
        // it": an end restored from the tail copy (a power loss or tampering) is an error here,
        // as a damaged end was before tail copies; SecureFile and ACFileHandle read the restored file.
        if try file.endRestoredFromTailCopy {
            throw SecureFileError.ace(.badKeyOrCorruptData, "\(file.path): its end did not authenticate and was restored from its last sync's tail copy (a power loss or tampering); read it with ACFileHandle to take the restored contents")
        }
        let size = try file.size
        guard let count = Int(exactly: size) else { throw SecureFileError.ace(.lowMemory, "\(file.path): \(size) bytes do not fit in memory") }
        var data = Data(count: count)
        // Short when the file shrank meanwhile.
        let got = try data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) throws -> Int in try file.preadFully(into: buffer, at: 0) }
        if got < count { data.count = got }
        return data
    }

    /// Opens `path` read-only, runs `body`, closes: a close failure is thrown (after success) or
    /// added to the body's error (after failure), never dropped. Errors are bridged to NSError.
    static func withReadOnlyFile<R>(_ path: String, key: KeySelection = .app, _ body: (SecureFile) throws -> R) throws -> R {
        try bridgingErrors(path) {
            let file = try SecureFile.open(path, flags: O_RDONLY | O_CLOEXEC, key: key)
            let result: R
            do { result = try body(file) } catch { throw closing(file, after: error) }
            try file.close()
            return result
        }
    }

    /// Closes `file` after its operation failed with `error`, and returns the error to throw. The
    /// first error stays the one reported (the close failure is its consequence); a close failure
    /// is added to its message rather than dropped.
    static func closing(_ file: SecureFile, after error: Error) -> Error {
        do {
            try file.close()
            return error
        } catch let closeError {
            let note = "; closing \(file.path) afterwards also failed: \(closeError.message)"
            switch error {
            case let e as SecureFileError:
                return e.withMessage(e.message + note)
            case let e as NSError:
                var info = e.userInfo
                info[NSLocalizedDescriptionKey] = e.localizedDescription + note
                return NSError(domain: e.domain, code: e.code, userInfo: info)
            }
        }
    }

    // MARK: writing

    /// Writes `data` as the whole content of the secure file at `path`.
    ///
    /// - Parameters:
    ///   - atomic: write a temporary secure file in the same directory, `fsync` it, rename it over
    ///     `path` and `fsync` the directory: a crash leaves the old or the new contents, never a mix.
    ///   - withoutOverwriting: fail with `EEXIST` if `path` exists (for an atomic write, the final
    ///     step is `link(2)`, which refuses an existing name, instead of `rename(2)`).
    static func write<D: DataProtocol>(_ data: D, to path: String, key: KeySelection, atomic: Bool,
                                       withoutOverwriting: Bool = false) throws {
        let contiguous = data.withContiguousStorageIfAvailable { _ in true } ?? false
        let bytes: Data = contiguous ? Data() : Data(data)
        func run(_ buffer: UnsafeRawBufferPointer) throws {
            if atomic {
                try writeAtomically(buffer, to: path, key: key, withoutOverwriting: withoutOverwriting)
            } else {
                var flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC
                if withoutOverwriting { flags |= O_EXCL }
                let file = try SecureFile.open(path, flags: flags, mode: 0o666, key: key)
                do { try file.pwriteFully(buffer, at: 0) } catch { throw closing(file, after: error) }
                try file.close()
            }
        }
        if contiguous {
            try data.withContiguousStorageIfAvailable { try run(UnsafeRawBufferPointer($0)) }
        } else {
            try bytes.withUnsafeBytes { try run($0) }
        }
    }

    static func writeAtomically(_ bytes: UnsafeRawBufferPointer, to requestedPath: String, key: KeySelection,
                                withoutOverwriting: Bool) throws {
        let path = try resolvedTarget(requestedPath)
        var existingMode: mode_t?
        if case .success(let st) = Sys.lstat(path) {
            if withoutOverwriting { throw SecureFileError.posix(EEXIST, path) }
            guard st.st_mode & S_IFMT == S_IFREG else {
                let isDirectory = st.st_mode & S_IFMT == S_IFDIR
                throw SecureFileError(code: .regularFileOnly, errno: isDirectory ? EISDIR : EINVAL,
                                      message: "\(path): \(isDirectory ? "is a directory" : "not a regular file") (secure files are regular files only)")
            }
            existingMode = st.st_mode & 0o7777
        }
        try publish(to: path, replacing: !withoutOverwriting, mode: existingMode, key: key) { file in
            try file.pwriteFully(bytes, at: 0)
        }
    }

    /// Writes a new secure file at `path` through `AtomicReplacement` (temporary file beside it,
    /// fsync, rename — or link when not `replacing` — and fsync of the directory): `path` holds the
    /// old or the new content, never a mix, and no temporary file is left. `fill` writes the
    /// content. The file gets permission bits `mode` exactly (the mode of the file it replaces, or
    /// of its source); nil: 0666 less the umask, as a new file.
    static func publish(to path: String, replacing: Bool, mode: mode_t?, key: KeySelection,
                        _ fill: (SecureFile) throws -> Void) throws {
        let replacement = AtomicReplacement(destination: path)
        // Errors name the file the caller asked for, not the temporary name it never chose.
        func naming(_ error: Error) -> Error {
            guard let e = error as? SecureFileError else { return error }
            return e.naming(path, insteadOf: replacement.temporaryPath)
        }
        try replacement.run(replacing: replacing, write: { temporary in
            let file: SecureFile
            do {
                file = try SecureFile.open(temporary, flags: O_WRONLY | AtomicReplacement.exclusiveCreationFlags, mode: mode ?? 0o666, key: key)
            } catch {
                throw naming(error)
            }
            do {
                try fill(file)
                if let mode, case .failure(let e) = Sys.fchmod(file.fileDescriptor, mode) { throw SecureFileError.posix(e.rawValue, "\(path): fchmod") }
            } catch {
                throw naming(closing(file, after: error))
            }
            do { try file.close() } catch { throw naming(error) }
        }, failure: { SecureFileError.posix($0.errno.rawValue, "\($0.destination): \($0.step)") })
    }

    static func syncDirectory(of path: String) throws {
        let directory = Sys.directory(of: path)
        if case .failure(let e) = Sys.syncDirectory(directory) { throw SecureFileError.posix(e.rawValue, "\(directory): fsync") }
    }

    /// An atomic write replaces the file a symbolic link points to, not the link.
    static func resolvedTarget(_ path: String) throws -> String {
        guard case .success(let st) = Sys.lstat(path), st.st_mode & S_IFMT == S_IFLNK else { return path }
        return URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    }

    // MARK: copying

    /// Decrypts `source` and encrypts it into `destination` under a fresh file ID and data key
    /// (never a byte copy: two files must never share a data key and nonce sequence). The copy is
    /// atomic and fails with `EEXIST` if `destination` exists, as `FileManager.copyItem`.
    static func copy(_ source: String, to destination: String, key: KeySelection) throws {
        let input = try SecureFile.open(source, flags: O_RDONLY | O_CLOEXEC, key: key)
        do { try copy(input, to: destination, key: key) } catch { throw closing(input, after: error) }
        try input.close()
    }

    private static func copy(_ input: SecureFile, to destination: String, key: KeySelection) throws {
        if case .success = Sys.lstat(destination) { throw SecureFileError.posix(EEXIST, destination) }
        let sourceStat = try input.stat()
        try publish(to: destination, replacing: false, mode: sourceStat.st_mode & 0o7777, key: key) { output in
            try input.copyPlaintext(to: output)
        }
    }
}
