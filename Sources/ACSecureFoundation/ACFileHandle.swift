#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACSecureFileCore
import ACSecureServices

/// A `FileHandle` whose file contents are encrypted (reference table 22, `ACFileHandle`), for
/// regular files only.
///
/// ## Why the secure methods have their own names
/// On Linux's Foundation only `availableData`, `offsetInFile`, `fileDescriptor` and the
/// readability/writeability handlers of `FileHandle` are `open`. `readData(ofLength:)`,
/// `write(_:)`, `seek(toFileOffset:)`, the throwing `read(upToCount:)`, `write(contentsOf:)`, ...
/// and even the initializers cannot be overridden or shadowed. So:
///
/// - The secure I/O methods are spelled `secure…`: `secureReadData(ofLength:)`,
///   `secureWrite(_:)`, `secureRead(upToCount:)`, `secureWrite(contentsOf:)`, ... They throw
///   `NSError` (`ACErrorDomain`, `NSPOSIXErrorDomain`): the reference's `…error:` variants.
///   The handles come from `ACFileHandle.fileHandleForReading(atPath:)` and friends (throwing;
///   `try?` gives the reference's nil-returning variants).
/// - `availableData` and `offsetInFile` are overridden and secure. `availableData` returns an
///   empty `Data` at the end of the file, never nil (AP-4324); as `FileHandle.availableData`, it
///   traps on an I/O error, so prefer `secureAvailableData()`.
/// - The superclass is given no descriptor (`-1`) and `fileDescriptor` is `-1`: every inherited,
///   non-secure method fails loudly instead of touching the file. The throwing ones
///   (`read(upToCount:)`, `write(contentsOf:)`, `seek(toOffset:)`, `offset()`, `truncate(atOffset:)`,
///   `synchronize()`) throw, and the non-throwing ones (`readData(ofLength:)`, `write(_:)`, ...)
///   trap, as `FileHandle` does on a bad descriptor. The inherited `close()` does nothing (the
///   secure file closes with `secureClose()` or when the handle is released).
///   Nothing ever reads ciphertext as plaintext or writes plaintext to disk through this class.
/// - Asynchronous I/O is not supported, as in the reference: setting a readability or
///   writeability handler traps, and `readInBackgroundAndNotify()` and the other background
///   methods trap (Foundation's "Bad file descriptor" precondition).
///
/// A handle keeps its own file position (as a file handle does); reads and writes at that
/// position are serialised, so a handle may be shared between threads.
public final class ACFileHandle: FileHandle, @unchecked Sendable {
    /// The path the handle was opened with.
    public let path: String
    /// The encryption group whose key encrypts the file, or nil for the app's own key.
    public let encryptionGroupId: String?

    private let file: SecureFile
    /// Guards `position` and `closed`; held across each operation so a read or write and the
    /// position update it makes are one step.
    private let lock = NSLock()
    private var position: UInt64 = 0
    private var closed = false

    private init(path: String, flags: Int32, encryptionGroupId: String?) throws {
        let key = try SecureFileIO.key(group: encryptionGroupId, path: path)
        // A handle for writing takes an existing empty file (FileManager.createFile(atPath:contents: nil),
        // as the reference's examples do) as a new secure file: it opens it as creating (the file
        // exists, so nothing new is created). The engine refuses other opens of a 0-byte file.
        var st = stat()
        let adoptEmpty = flags & O_ACCMODE != O_RDONLY && lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG && st.st_size == 0
        let openFlags = flags | O_CLOEXEC | (adoptEmpty ? O_CREAT : 0)
        self.file = try bridgingErrors(path) { try SecureFile.open(path, flags: openFlags, key: key) }
        self.path = path
        self.encryptionGroupId = encryptionGroupId
        super.init(fileDescriptor: -1, closeOnDealloc: false)
    }

    // MARK: opening (table 22; ACFileHandle(ACSharedSecureFile))

    /// `fileHandleForReadingAtPath:error:` — opens an existing secure file for reading.
    /// - Throws: `NSPOSIXErrorDomain` `ENOENT`/`EACCES`, ...; `ACErrorDomain` `ACE_REGULAR_FILE_ONLY_ERROR`
    ///   for a directory or other non-regular file, `ACE_NO_KEYS_ERROR` while secure services are
    ///   unavailable, `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR` for a file that is not a secure file of this key.
    public static func fileHandleForReading(atPath path: String) throws -> ACFileHandle {
        try ACFileHandle(path: path, flags: O_RDONLY, encryptionGroupId: nil)
    }

    /// `fileHandleForWritingAtPath:error:` — opens an existing file for writing (an empty file becomes a secure file).
    public static func fileHandleForWriting(atPath path: String) throws -> ACFileHandle {
        try ACFileHandle(path: path, flags: O_WRONLY, encryptionGroupId: nil)
    }

    /// `fileHandleForUpdatingAtPath:error:` — opens an existing file for reading and writing.
    public static func fileHandleForUpdating(atPath path: String) throws -> ACFileHandle {
        try ACFileHandle(path: path, flags: O_RDWR, encryptionGroupId: nil)
    }

    /// `fileHandleForReadingFromURL:error:` — `url` must be a file URL (else `ACE_REGULAR_FILE_ONLY_ERROR`).
    public static func fileHandleForReading(from url: URL) throws -> ACFileHandle {
        try ACFileHandle(path: SecureFileIO.path(of: url), flags: O_RDONLY, encryptionGroupId: nil)
    }

    /// `fileHandleForWritingToURL:error:`.
    public static func fileHandleForWriting(to url: URL) throws -> ACFileHandle {
        try ACFileHandle(path: SecureFileIO.path(of: url), flags: O_WRONLY, encryptionGroupId: nil)
    }

    /// `fileHandleForUpdatingURL:error:`.
    public static func fileHandleForUpdating(_ url: URL) throws -> ACFileHandle {
        try ACFileHandle(path: SecureFileIO.path(of: url), flags: O_RDWR, encryptionGroupId: nil)
    }

    /// Shared variant: the file is encrypted with the encryption group's key, so every app that
    /// names the group can open it. An empty group ID fails with `ACE_INVALID_ARG`; a file of
    /// another key with `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR`.
    public static func fileHandleForReading(atPath path: String, withEncryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(path: path, flags: O_RDONLY, encryptionGroupId: groupId)
    }

    public static func fileHandleForWriting(atPath path: String, withEncryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(path: path, flags: O_WRONLY, encryptionGroupId: groupId)
    }

    public static func fileHandleForUpdating(atPath path: String, withEncryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(path: path, flags: O_RDWR, encryptionGroupId: groupId)
    }

    public static func fileHandleForReading(from url: URL, withEncryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(path: SecureFileIO.path(of: url), flags: O_RDONLY, encryptionGroupId: groupId)
    }

    public static func fileHandleForWriting(to url: URL, withEncryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(path: SecureFileIO.path(of: url), flags: O_WRONLY, encryptionGroupId: groupId)
    }

    public static func fileHandleForUpdating(_ url: URL, withEncryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(path: SecureFileIO.path(of: url), flags: O_RDWR, encryptionGroupId: groupId)
    }

    // MARK: overridden FileHandle members

    /// Always -1: an `ACFileHandle` offers no descriptor for plain I/O.
    public override var fileDescriptor: Int32 { -1 }

    /// The bytes from the current position to the end of the file; empty (never nil) at the end.
    /// Traps on an error, as `FileHandle.availableData`: use `secureAvailableData()` instead.
    public override var availableData: Data {
        do { return try secureAvailableData() } catch {
            fatalError("ACFileHandle.availableData failed (use secureAvailableData() to handle errors): \(error.localizedDescription)")
        }
    }

    /// The current position (never fails: the handle keeps it itself).
    public override var offsetInFile: UInt64 { lock.withLock { position } }

    /// Asynchronous I/O is not supported (reference): setting a handler traps.
    public override var readabilityHandler: (@Sendable (FileHandle) -> Void)? {
        get { nil }
        set { if newValue != nil { preconditionFailure("ACFileHandle does not support asynchronous I/O (readabilityHandler)") } }
    }

    public override var writeabilityHandler: (@Sendable (FileHandle) -> Void)? {
        get { nil }
        set { if newValue != nil { preconditionFailure("ACFileHandle does not support asynchronous I/O (writeabilityHandler)") } }
    }

    // MARK: secure I/O, reference spelling (the `…error:` variants)

    /// `availableDataWithError:` — the rest of the file; empty `Data` at the end.
    public func secureAvailableData() throws -> Data { try performRead(upTo: Int.max) }

    /// `readDataToEndOfFileWithError:` — the rest of the file; empty `Data` at the end.
    public func secureReadDataToEndOfFile() throws -> Data { try performRead(upTo: Int.max) }

    /// `readDataOfLength:error:` — up to `length` bytes; empty `Data` at the end.
    public func secureReadData(ofLength length: Int) throws -> Data { try performRead(upTo: length) }

    /// `writeData:error:` — writes at the current position and advances it.
    public func secureWrite(_ data: Data) throws { try performWrite(data) }

    /// `seekToEndOfFile` — moves to the end; returns the new position.
    @discardableResult
    public func secureSeekToEndOfFile() throws -> UInt64 { try performSeekToEnd() }

    /// `seekToFileOffset:` — positions past the end are allowed; a write there fills the gap with zeros.
    public func secureSeek(toFileOffset offset: UInt64) throws { try performSeek(to: offset) }

    /// `truncateFileAtOffset:` — sets the length (growing with zeros) and moves the position there.
    public func secureTruncateFile(atOffset offset: UInt64) throws { try performTruncate(to: offset) }

    /// `synchronizeFile` — writes cached data and `fsync`s.
    public func secureSynchronizeFile() throws { try performSynchronize() }

    /// `closeFile` — writes cached data and closes. Further calls fail with `EBADF`.
    public func secureCloseFile() throws { try performClose() }

    // MARK: secure I/O, modern spelling (`read(upToCount:)`, `write(contentsOf:)`, ...)

    /// As `read(upToCount:)`: nil at the end of the file.
    public func secureRead(upToCount count: Int) throws -> Data? {
        let data = try performRead(upTo: count)
        return data.isEmpty && count > 0 ? nil : data
    }

    /// As `readToEnd()`: nil at the end of the file.
    public func secureReadToEnd() throws -> Data? {
        let data = try performRead(upTo: Int.max)
        return data.isEmpty ? nil : data
    }

    /// As `write(contentsOf:)`.
    public func secureWrite<T: DataProtocol>(contentsOf data: T) throws { try performWrite(data) }

    /// As `seek(toOffset:)`.
    public func secureSeek(toOffset offset: UInt64) throws { try performSeek(to: offset) }

    /// As `seekToEnd()`.
    @discardableResult
    public func secureSeekToEnd() throws -> UInt64 { try performSeekToEnd() }

    /// As `offset()`; fails with `EBADF` after close.
    public func secureOffset() throws -> UInt64 { try withOpenFile { position } }

    /// As `truncate(atOffset:)`.
    public func secureTruncate(atOffset offset: UInt64) throws { try performTruncate(to: offset) }

    /// As `synchronize()`.
    public func secureSynchronize() throws { try performSynchronize() }

    /// As `close()`.
    public func secureClose() throws { try performClose() }

    // MARK: implementation

    private func closedError() -> NSError {
        SecureFileError.posix(EBADF, "\(path) (closed)").nsError(path: path)
    }

    private func checkedOffset(_ offset: UInt64) throws -> Int64 {
        guard let o = Int64(exactly: offset), o <= SecureFile.maximumFileSize else {
            throw aceError(.fileTooBig, "\(path): offset \(offset) is past the maximum secure file size", path: path)
        }
        return o
    }

    /// Runs `body` under the lock on an open handle, with engine errors bridged to `NSError`.
    private func withOpenFile<R>(_ body: () throws -> R) throws -> R {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { throw closedError() }
        return try bridgingErrors(path, body)
    }

    private func performRead(upTo count: Int) throws -> Data {
        guard count >= 0 else { throw aceError(.invalidArgument, "\(path): negative length", path: path) }
        return try withOpenFile {
            let start = Int64(position)
            let available = max(0, try file.size - start)
            let wanted = Int(min(Int64(count), available))
            // An empty read still goes through the engine, for its access and key checks.
            guard wanted > 0 else {
                _ = try file.pread(into: UnsafeMutableRawBufferPointer(start: nil, count: 0), at: start)
                return Data()
            }
            var data = Data(count: wanted)
            let got = try data.withUnsafeMutableBytes { buffer throws -> Int in
                var done = 0
                while done < wanted {
                    let slice = UnsafeMutableRawBufferPointer(rebasing: buffer[done..<min(wanted, done + SecureFileIO.ioChunk)])
                    let n = try file.pread(into: slice, at: start + Int64(done))
                    if n == 0 { break }
                    done += n
                }
                return done
            }
            if got < wanted { data.count = got }
            position += UInt64(got)
            return data
        }
    }

    private func performWrite<T: DataProtocol>(_ data: T) throws {
        try withOpenFile {
            for region in data.regions {
                try region.withUnsafeBytes { bytes throws in
                    try SecureFileIO.writeAll(file, bytes, at: Int64(position))
                    position += UInt64(bytes.count)
                }
            }
        }
    }

    private func performSeek(to offset: UInt64) throws {
        let o = try checkedOffset(offset)
        try withOpenFile { position = UInt64(o) }
    }

    private func performSeekToEnd() throws -> UInt64 {
        try withOpenFile {
            position = UInt64(try file.size)
            return position
        }
    }

    private func performTruncate(to offset: UInt64) throws {
        let length = try checkedOffset(offset)
        try withOpenFile {
            try file.truncate(to: length)
            position = offset
        }
    }

    private func performSynchronize() throws {
        try withOpenFile { try file.sync() }
    }

    private func performClose() throws {
        try withOpenFile {
            closed = true
            try file.close()
        }
    }
}
