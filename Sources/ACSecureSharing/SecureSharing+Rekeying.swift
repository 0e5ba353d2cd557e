#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices
import ACSecureSharingCore

/// Re-keying secure files: moving them between keys without re-encryption, and rotating data keys.
public enum SecureSharing {
    /// Re-shares a file: re-wraps its data key from one key-encryption key to another (app → group,
    /// group → group, group → app). Only the 128-byte header is rewritten (one `pwrite` and an
    /// `fsync`): the cost does not depend on the file's size, and no chunk is touched.
    ///
    /// Handles this process has open on the file keep working.
    /// - Throws: `SecureFileError`: `badKeyOrCorruptData` when `from` is not the file's key (the file is
    ///   unchanged), `noKeys` while services are unavailable, `invalidArgument` for an empty group ID.
    public static func reshare(_ path: String, from: KeySelection, to: KeySelection,
                               services: (any KeyProvider)? = nil) throws(SecureFileError) {
        try SecureFileSystem.rewrap(path, from: from, to: to, services: services)
    }

    /// Re-shares a file under a wrapped-file key (the key of a crypto block): afterwards it opens with
    /// `ACUnwrappedFile` only if its plaintext starts with a wrapped-file name record, so this is meant
    /// for files written through a `FixedKeyProvider`.
    public static func reshare(_ path: String, from: KeySelection, toKey kek: KeyEncryptionKey,
                               services: (any KeyProvider)? = nil) throws(SecureFileError) {
        try SecureFileSystem.rewrap(path, from: from, toKey: kek, recordAs: nil, services: services)
    }

    /// Rotates the file's data key: the plaintext is re-encrypted under a fresh data key (and a new
    /// file ID) into a temporary secure file in the same directory, which is synced and renamed over
    /// the original. Memory stays bounded (one 1 MiB guarded buffer) whatever the file's size.
    ///
    /// Rules: the file must not be open in this process (checked: `EBUSY`); other processes that have
    /// it open keep reading the old file (the rename replaces the directory entry), so rotate only when
    /// no other process uses it. A crash leaves either the old or the new file at `path` (plus, at
    /// worst, a `.<name>.acsecure-tmp-*` temporary file to delete).
    ///
    /// - Parameters:
    ///   - key: the file's key selection; the rotated file is wrapped under the same key.
    /// - Throws: `SecureFileError`: `EBUSY` + `invalidArgument` if the file is open in this process,
    ///   `badKeyOrCorruptData` if `key` does not open it or a chunk fails authentication (the original
    ///   is left unchanged), I/O errors naming the path.
    public static func rotateDataKey(_ path: String, key: KeySelection = .app,
                                     services: (any KeyProvider)? = nil) throws(SecureFileError) {
        try rotateDataKey(BytePath(path), key: key, services: services)
    }

    /// `rotateDataKey` for a path of any bytes (a name that is not UTF-8 included).
    public static func rotateDataKey(_ path: BytePath, key: KeySelection = .app,
                                     services: (any KeyProvider)? = nil) throws(SecureFileError) {
        let open = try SecureFileSystem.openHandleCount(path)
        guard open == 0 else {
            throw SecureFileError(code: .invalidArgument, errno: EBUSY,
                                  message: "\(path): open in this process (\(open) handle\(open == 1 ? "" : "s")); close it before rotating its data key")
        }
        let source = try SecureFile.open(path, flags: O_RDONLY | O_CLOEXEC, key: key, services: services)
        defer { try? source.close() }  // read only: nothing to lose
        let st = try source.stat()
        let replacement = AtomicReplacement(destination: path)
        do throws(SecureFileError) {
            let out = try SecureFile.open(replacement.temporaryPath, flags: O_WRONLY | AtomicReplacement.exclusiveCreationFlags,
                                          mode: 0o600, key: key, services: services)
            do throws(SecureFileError) {
                try source.copyPlaintext(to: out)
                if case .failure(let e) = Sys.fchmod(out.fileDescriptor, st.st_mode & 0o7777) { throw SecureFileError.posix(e.rawValue, "\(path): fchmod") }
            } catch {
                try? out.close()  // the first error is the one reported; the file is removed below
                throw error
            }
            try out.close()
            // Re-check just before replacing the file: an open that raced us would be left on the old inode.
            let now = try SecureFileSystem.openHandleCount(path)
            guard now == 1 else {
                throw SecureFileError(code: .invalidArgument, errno: EBUSY, message: "\(path): opened in this process during the rotation; not replaced")
            }
        } catch {
            replacement.discard()
            throw error.naming(path, insteadOf: replacement.temporaryPath)
        }
        if case .failure(let f) = replacement.publish() { throw SecureFileError.posix(f.errno.rawValue, "\(f.destination): \(f.step)") }
    }
}
