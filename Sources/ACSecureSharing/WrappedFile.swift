#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSecureServices

/// The layout of an extension wrapped file.
///
/// A wrapped file is an ordinary secure file (docs/FORMAT.md: 128-byte header, 4 KiB AES-256-GCM
/// chunks, authenticated length trailer) whose header has key class 3 ("crypto block") and whose data
/// key is wrapped under the crypto block's key-encryption key. Its *plaintext* begins with a name
/// record, so the actual file name is encrypted and authenticated like the contents:
///
///     0   "ACWF"              4
///     4   version = 1         u8
///     5   reserved, zero      u8
///     6   name length n       u16 big-endian, 1…1024
///     8   name                n bytes of UTF-8 (no "/", no NUL, not "." or "..")
///     8+n the original file's bytes
///
/// A reader recognises a wrapped file by the secure file magic and key class 3 in the (clear) header;
/// anything else is `ACWrappedFileReadErrorUnknownWrapperFormat`.
enum WrappedFileLayout {
    static let magic: [UInt8] = Array("ACWF".utf8)
    static let version: UInt8 = 1
    static let recordHeaderSize = 8
    static let maximumNameLength = 1024
    /// `KeyEncryptionKey.KeyClass.cryptoBlock`, at byte 9 of the secure file header.
    static let keyClassOffset = 9

    static func validateName(_ name: String) throws -> [UInt8] {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumNameLength else {
            throw ACSharingErrors.invalidArgument("the actual file name must have 1 to \(maximumNameLength) UTF-8 bytes (it has \(bytes.count))")
        }
        guard !bytes.contains(0), !bytes.contains(UInt8(ascii: "/")), name != ".", name != ".." else {
            throw ACSharingErrors.invalidArgument("the actual file name must be a plain file name (no '/', no NUL, not '.' or '..')")
        }
        return bytes
    }

    static func record(name: [UInt8]) -> [UInt8] {
        magic + [version, 0, UInt8(name.count >> 8), UInt8(name.count & 0xff)] + name
    }
}

/// The extension's side: wraps a file with a crypto block (the reference's `ACWrappedFile`).
/// Needs no secure services: the crypto block carries the key.
public enum ACWrappedFile {
    /// Encrypts the file at `path` into a wrapped file at `toPath` (`+wrapFileAtPath:toPath:withCryptoBlock:actualFileName:error:`).
    ///
    /// The source is read in 256 KiB pieces (memory stays bounded whatever its size). The wrapped file
    /// is written to a temporary file in `toPath`'s directory, synced and renamed over `toPath`, so
    /// `toPath` is never a partial wrapped file. It is created with mode 0600.
    ///
    /// - Parameters:
    ///   - path: the plain file to share (a regular file).
    ///   - toPath: where the wrapped file goes (replaced if it exists).
    ///   - cryptoBlock: from the provider app's `ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID:)`.
    ///   - actualFileName: the name the host app sees; nil: the last component of `path`.
    /// - Throws: `NSError`: `ACErrorInvalidArg` for a bad crypto block or name, `ACErrorRegularFileOnly`
    ///   (`ACE_REGULAR_FILE_ONLY_ERROR`) for a source that is not a regular file, `NSPOSIXErrorDomain`
    ///   errors naming the path for I/O failures. On failure `toPath` is unchanged.
    public static func wrapFile(atPath path: String, toPath: String, cryptoBlock: NSData, actualFileName: String? = nil) throws {
        let block = try CryptoBlock.parse(UnsafeRawBufferPointer(start: cryptoBlock.length == 0 ? nil : cryptoBlock.bytes, count: cryptoBlock.length))
        let name = try WrappedFileLayout.validateName(actualFileName ?? lastComponent(path))
        try ACSharingErrors.bridging { () throws(SecureFileError) in
            try wrap(path, toPath, block.kek, name)
        }
    }

    /// The same, for a crypto block that arrived as `Data` (e.g. read from a file or a keychain item).
    public static func wrapFile(atPath path: String, toPath: String, cryptoBlock: Data, actualFileName: String? = nil) throws {
        let sensitive = ACSensitiveData(data: cryptoBlock)
        try wrapFile(atPath: path, toPath: toPath, cryptoBlock: sensitive, actualFileName: actualFileName)
    }

    private static func wrap(_ path: String, _ toPath: String, _ kek: KeyEncryptionKey, _ name: [UInt8]) throws(SecureFileError) {
        let source = try openRegularFile(path)
        defer { close(source) }
        let provider = FixedKeyProvider(kek: kek)
        let temporary = try SecureSharing.temporarySibling(of: toPath, purpose: "wrap")
        let out = try SecureFile.open(temporary, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode: 0o600, services: provider)
        do throws(SecureFileError) {
            let record = WrappedFileLayout.record(name: name)
            _ = try record.withBytes { (b: UnsafeRawBufferPointer) throws(SecureFileError) in try out.write(b) }
            let buffer = SecureBytes(count: 256 << 10)
            try buffer.withUnsafeMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) in
                while true {
                    let n = Glibc.read(source, b.baseAddress, b.count)
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw .posix(errno, "\(path): read")
                    }
                    if n == 0 { break }
                    var done = 0
                    while done < n { done += try out.write(UnsafeRawBufferPointer(rebasing: b[done..<n])) }
                }
            }
            try out.sync()
            try out.close()
            try SecureFileSystem.rename(temporary, toPath)
        } catch {
            try? out.close()
            unlink(temporary)
            throw error
        }
        SecureSharing.syncDirectory(of: toPath)
    }

    private static func openRegularFile(_ path: String) throws(SecureFileError) -> Int32 {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == EISDIR { throw SecureFileError(code: .regularFileOnly, errno: EISDIR, message: "\(path): is a directory (only regular files can be wrapped)") }
            throw .posix(errno, path)
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else { let e = errno; close(fd); throw .posix(e, path) }
        guard st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw SecureFileError(code: .regularFileOnly, errno: st.st_mode & S_IFMT == S_IFDIR ? EISDIR : EINVAL,
                                  message: "\(path): not a regular file (only regular files can be wrapped)")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    static func lastComponent(_ path: String) -> String {
        String(path.split(separator: "/", omittingEmptySubsequences: true).last ?? "")
    }
}

/// The host app's side: opens a wrapped file (the reference's `ACUnwrappedFile`).
public enum ACUnwrappedFile {
    /// Opens the wrapped file at `path` for reading (`+readWrappedFileAtPath:sharedGroupID:error:`).
    ///
    /// - Parameters:
    ///   - sharedGroupID: the `MI_AC_SHARED_GROUP_ID` value the provider used; nil if it used none.
    ///   - services: the host app's secure services (default: `SecureServices.current`, started from
    ///     the environment if needed).
    /// - Returns: a handle reading the original file's bytes, with `actualFileName`.
    /// - Throws: `NSError`:
    ///   - `ACWrappedFileReadErrorDomain` / `ACWrappedFileReadErrorUnknownWrapperFormat` when the file is
    ///     not a wrapped file (a plain file, or a secure file of another kind): use it directly;
    ///   - `ACErrorDomain` / `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR` when it is a wrapped file for another
    ///     group (or none), or damaged: no byte of it is returned;
    ///   - `ACErrorNoKeys` while secure services are unavailable, `ACErrorInvalidArg` for an empty group ID;
    ///   - `NSPOSIXErrorDomain` errors (e.g. `ENOENT`) naming the path.
    public static func readWrappedFile(atPath path: String, sharedGroupID: String?, services: SecureServices? = nil) throws -> ACWrappedFileReadHandle {
        try checkIsWrapped(path)
        let context = "\(path): readWrappedFile"
        let provider: SecureServices
        if let services { provider = services } else {
            do { provider = try SecureServices.currentOrStartFromEnvironment() } catch { throw ACSharingErrors.make(error, context) }
        }
        let kek: KeyEncryptionKey
        do { kek = try provider.wrappedFileKeyEncryptionKey(groupID: sharedGroupID) } catch { throw ACSharingErrors.make(error, context) }
        return try ACSharingErrors.bridging { () throws(SecureFileError) -> ACWrappedFileReadHandle in
            // Through a provider that follows the services' lock state: after lock(), reads fail with
            // ACErrorNoKeys like every other secure handle, and work again after unlock.
            _ = kek
            let file = try SecureFile.open(path, flags: O_RDONLY | O_CLOEXEC, services: provider.wrappedFileKeyProvider(groupID: sharedGroupID))
            do throws(SecureFileError) {
                let (name, base) = try readRecord(file)
                return ACWrappedFileReadHandle(file: file, actualFileName: name, contentOffset: base)
            } catch {
                try? file.close()
                throw error
            }
        }
    }

    /// Looks at the clear header only: is this a secure file of the wrapped-file key class?
    private static func checkIsWrapped(_ path: String) throws {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let e = errno
            if e == EISDIR { throw ACSharingErrors.make(SecureFileError(code: .regularFileOnly, errno: EISDIR, message: "\(path): is a directory")) }
            throw ACSharingErrors.make(.posix(e, path))
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ACSharingErrors.make(.posix(errno, path)) }
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw ACSharingErrors.make(SecureFileError(code: .regularFileOnly, errno: st.st_mode & S_IFMT == S_IFDIR ? EISDIR : EINVAL,
                                                       message: "\(path): not a regular file"))
        }
        var head = [UInt8](repeating: 0, count: 16)
        var got = 0
        while got < head.count {
            let n = head.withUnsafeMutableBytes { Glibc.pread(fd, $0.baseAddress! + got, $0.count - got, off_t(got)) }
            if n < 0 { if errno == EINTR { continue }; throw ACSharingErrors.make(.posix(errno, "\(path): read")) }
            if n == 0 { break }
            got += n
        }
        guard got == head.count, Array(head[0..<4]) == Array("ACSF".utf8) else {
            throw ACSharingErrors.unknownWrapperFormat(path, "no secure file header")
        }
        guard head[WrappedFileLayout.keyClassOffset] == KeyEncryptionKey.KeyClass.cryptoBlock.rawValue else {
            throw ACSharingErrors.unknownWrapperFormat(path, "a secure file of key class \(head[WrappedFileLayout.keyClassOffset]), not a wrapped file")
        }
    }

    /// Reads and checks the (authenticated) name record. Returns the name and the offset of the contents.
    private static func readRecord(_ file: SecureFile) throws(SecureFileError) -> (String, Int64) {
        let path = file.path
        var head = [UInt8](repeating: 0, count: WrappedFileLayout.recordHeaderSize)
        let n = try head.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) in try file.pread(into: b, at: 0) }
        guard n == head.count, Array(head[0..<4]) == WrappedFileLayout.magic else {
            throw .ace(.badKeyOrCorruptData, "\(path): decrypts, but does not start with a wrapped file name record")
        }
        guard head[4] == WrappedFileLayout.version else {
            throw .ace(.badKeyOrCorruptData, "\(path): unsupported wrapped file version \(head[4])")
        }
        let length = Int(head[6]) << 8 | Int(head[7])
        guard head[5] == 0, (1...WrappedFileLayout.maximumNameLength).contains(length) else {
            throw .ace(.badKeyOrCorruptData, "\(path): malformed wrapped file name record")
        }
        var name = [UInt8](repeating: 0, count: length)
        let m = try name.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) in
            try file.pread(into: b, at: Int64(WrappedFileLayout.recordHeaderSize))
        }
        guard m == length, let string = String(validating: name, as: UTF8.self),
              (try? WrappedFileLayout.validateName(string)) != nil else {
            throw .ace(.badKeyOrCorruptData, "\(path): malformed wrapped file name")
        }
        return (string, Int64(WrappedFileLayout.recordHeaderSize + length))
    }
}
