#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSystemCalls

/// Path-based operations on secure files.
public enum SecureFileSystem {
    public static var maximumFileSize: Int64 { SecureFile.maximumFileSize }

    /// `lstat(2)` with `st_size` the plaintext size of a secure file, computed from its length and
    /// header alone (no key needed, O(1)), or taken from this process's open state when the file is
    /// open here (cached writes count). Other kinds of file (directories, links, …) are reported
    /// as they are; a regular file that is not a secure file fails with `EIO` + `badKeyOrCorruptData`.
    public static func lstat(_ path: BytePath) throws(SecureFileError) -> Glibc.stat {
        var st: Glibc.stat
        switch Sys.lstat(path) {
        case .success(let s): st = s
        case .failure(let e): throw .posix(e.rawValue, path)
        }
        guard st.st_mode & S_IFMT == S_IFREG else { return st }
        // A file open in this process may have writes still in its cache: its size is the truth.
        if let size = OpenFiles.openSize(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)) {
            st.st_size = off_t(size)
            return st
        }
        guard st.st_size > 0 else { return st }
        let fd: Int32
        switch Sys.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0) {
        case .success(let f): fd = f
        case .failure(let e): throw .posix(e.rawValue, path)
        }
        defer { _ = Sys.close(fd) }
        guard case .success(let header) = FileHeader.read(from: fd),
              case .success(let end?) = SharedFile.sizeOnDisk(header.layout, fd: fd, physical: Int64(st.st_size)),
              case let size = end.size else {
            throw .ace(.badKeyOrCorruptData, "\(path): not a secure file")
        }
        st.st_size = off_t(size)
        return st
    }

    /// How many secure file handles this process has open on the file at `path` (symbolic links are
    /// followed, as `open` follows them). Other processes' handles are not counted.
    public static func openHandleCount(_ path: BytePath) throws(SecureFileError) -> Int {
        let st: Glibc.stat
        switch Sys.stat(path) {
        case .success(let s): st = s
        case .failure(let e): throw .posix(e.rawValue, path)
        }
        return OpenFiles.handleCount(SharedFile.Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)))
    }

    /// `truncate(2)` on a secure file.
    public static func truncate(_ path: BytePath, to length: Int64, key: KeySelection = .app,
                                services: (any KeyProvider)? = nil) throws(SecureFileError) {
        guard length >= 0 else {
            throw SecureFileError(code: .negativeFileLength, errno: EINVAL, message: "\(path): negative length")
        }
        let file = try SecureFile.open(path, flags: O_WRONLY, key: key, services: services)
        do {
            try file.truncate(to: length)
        } catch {
            try? file.close()
            throw error
        }
        try file.close()
    }

    /// `rename(2)`: moves a secure file without re-encrypting it (the AAD binds the file ID, not the path).
    public static func rename(_ old: BytePath, _ new: BytePath) throws(SecureFileError) {
        if case .failure(let e) = Sys.rename(old, new) { throw .posix(e.rawValue, "\(old) -> \(new)") }
    }
}

extension SecureFileSystem {
    /// `fstat` of a descriptor that must be a regular file: anything else is `regularFileOnly`
    /// (EISDIR for a directory, EINVAL for a device, FIFO or socket), the error naming `path` and
    /// ending with `note`. The one check behind open, info and wrapped files.
    package static func regularFileStat(_ fd: Int32, _ path: BytePath, note: String = "") throws(SecureFileError) -> stat {
        let st: stat
        switch Sys.fstat(fd) {
        case .success(let s): st = s
        case .failure(let e): throw .posix(e.rawValue, path)
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            let isDirectory = st.st_mode & S_IFMT == S_IFDIR
            throw SecureFileError(code: .regularFileOnly, errno: isDirectory ? EISDIR : EINVAL,
                                  message: "\(path): \(isDirectory ? "is a directory" : "not a regular file")\(note)")
        }
        return st
    }
}
