#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

/// A handle on a secure (encrypted) regular file: the reference's `ACFileHandle` (table 22), with
/// `FileHandle`'s Swift spellings so ported code reads as it did on iOS.
///
/// ## A class of its own, not a `FileHandle`
/// On Linux most of `FileHandle` cannot be overridden (`readData(ofLength:)`, `write(_:)`,
/// `seek(toFileOffset:)`, `close()`, ... are not `open`), so a subclass would inherit plain
/// methods that either crash or silently do nothing. `ACFileHandle` therefore does not inherit
/// from `FileHandle`: passing one where a `FileHandle` is expected does not compile.
///
/// ## Two spellings of each operation
/// - The reference's plain methods, with `FileHandle`'s signatures: `readDataToEndOfFile()`,
///   `readData(ofLength:)`, `availableData`, `write(_:)`, `seekToEndOfFile()`,
///   `seek(toFileOffset:)`, `offsetInFile`, `truncateFile(atOffset:)`, `synchronizeFile()`,
///   `closeFile()`. They work, and on an I/O or key error they stop the program with a message
///   naming `ACFileHandle`, the error and the throwing method to use instead (the reference: they
///   raise an exception; "use the added method that includes an NSError parameter").
/// - The reference's `…error:` methods, spelled as Foundation spells the throwing `FileHandle`
///   API: `read(upToCount:)`, `readToEnd()`, `write(contentsOf:)`, `seek(toOffset:)`,
///   `seekToEnd()`, `offset()`, `truncate(atOffset:)`, `synchronize()`, `close()`. They throw
///   `NSError`s: `ACErrorDomain` with the `ACE_*` code, or `NSPOSIXErrorDomain` with the errno.
///
/// Handles come from the failable initializers (`ACFileHandle(forReadingAtPath:)`, ... as
/// `FileHandle`), the throwing URL initializers (`ACFileHandle(forReadingFrom:)`, ...) or the
/// throwing factory methods (`ACFileHandle.fileHandleForReading(atPath:)`, ...), each with an
/// `encryptionGroupId:` variant for files shared through an encryption group.
///
/// Asynchronous I/O (`readInBackgroundAndNotify()`, `readabilityHandler`, ...) is not supported, as
/// in the reference: those members are declared unavailable, so using them does not compile.
///
/// A handle released without `close()` writes its cached data and closes the file; an error there
/// cannot be thrown, so it is written to standard error with the path (never dropped silently).
/// Call `close()` to handle it.
///
/// A handle keeps its own file position; a read or write and the position update it makes are one
/// step, so a handle may be shared between threads.
public final class ACFileHandle: @unchecked Sendable {
    /// The path the handle was opened with, byte for byte.
    public let filePath: BytePath
    /// The path the handle was opened with, as text: a name that is not UTF-8 is printed as
    /// `BytePath.description` does (`\xNN` for its other bytes). `filePath` has the exact bytes.
    public var path: String { filePath.description }
    /// The encryption group whose key encrypts the file, or nil for the app's own key.
    public let encryptionGroupId: String?

    private let file: SecureFile
    /// Guards `position` and `closed`; held across each operation.
    private let lock = PThreadMutex()
    private var position: UInt64 = 0
    private var closed = false

    private init(file: SecureFile, path: BytePath, encryptionGroupId: String?) {
        self.file = file
        self.filePath = path
        self.encryptionGroupId = encryptionGroupId
    }

    private static func open(_ filePath: BytePath, _ flags: Int32, _ group: String?) throws -> SecureFile {
        let path = filePath.description
        let key = try SecureFileIO.key(group: group, path: path)
        // A handle for writing takes an existing empty file (FileManager.createFile(atPath:contents: nil),
        // as the reference's examples do) as a new secure file. The engine refuses every other open
        // of a 0-byte file, a creating one too: it may be a secure file cut to 0 bytes.
        if flags & O_ACCMODE != O_RDONLY {
            return try bridgingErrors(path) { try SecureFile.openAdoptingEmptyFile(filePath, flags: flags | O_CLOEXEC, key: key) }
        }
        return try bridgingErrors(path) { try SecureFile.open(filePath, flags: flags | O_CLOEXEC, key: key) }
    }

    deinit {
        // Nothing else holds `file` (it is private), so this is its last chance to be flushed.
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        closed = true
        do {
            try bridgingErrors(path) { try file.close() }
        } catch {
            let message = "ACFileHandle: \(path) was released without close(); writing its cached data and closing failed: "
                + Self.describe(error) + ". Data written through this handle may be lost; call close() and handle its error.\n"
            FileHandle.standardError.write(Data(message.utf8))
        }
    }

    // MARK: opening — failable initializers, as FileHandle(forReadingAtPath:)

    /// `fileHandleForReadingAtPath:` — nil if the file cannot be opened (use the throwing forms to
    /// learn why).
    public convenience init?(forReadingAtPath path: String) { self.init(path, O_RDONLY, nil) }

    /// `fileHandleForWritingAtPath:` — the file must exist (an empty file becomes a secure file).
    public convenience init?(forWritingAtPath path: String) { self.init(path, O_WRONLY, nil) }

    /// `fileHandleForUpdatingAtPath:`.
    public convenience init?(forUpdatingAtPath path: String) { self.init(path, O_RDWR, nil) }

    /// `fileHandleForReadingAtPath:encryptionGroupId:` (ACFileHandle(ACSharedSecureFile)).
    public convenience init?(forReadingAtPath path: String, encryptionGroupId groupId: String) { self.init(path, O_RDONLY, groupId) }

    public convenience init?(forWritingAtPath path: String, encryptionGroupId groupId: String) { self.init(path, O_WRONLY, groupId) }

    public convenience init?(forUpdatingAtPath path: String, encryptionGroupId groupId: String) { self.init(path, O_RDWR, groupId) }

    private convenience init?(_ path: String, _ flags: Int32, _ group: String?) {
        guard let file = succeeds({ try Self.open(BytePath(path), flags, group) }) else { return nil }
        self.init(file: file, path: BytePath(path), encryptionGroupId: group)
    }

    // MARK: opening — a byte-exact path (any name open(2) takes, UTF-8 or not)

    /// A handle for reading the file at `path`, whatever bytes its name holds.
    /// - Throws: as `init(forReadingFrom:)` (a URL).
    public convenience init(forReadingFrom path: BytePath, encryptionGroupId groupId: String? = nil) throws {
        self.init(file: try Self.open(path, O_RDONLY, groupId), path: path, encryptionGroupId: groupId)
    }

    /// A handle for writing the file at `path` (it must exist; an empty file becomes a secure file).
    public convenience init(forWritingTo path: BytePath, encryptionGroupId groupId: String? = nil) throws {
        self.init(file: try Self.open(path, O_WRONLY, groupId), path: path, encryptionGroupId: groupId)
    }

    /// A handle for reading and writing the file at `path`.
    public convenience init(forUpdating path: BytePath, encryptionGroupId groupId: String? = nil) throws {
        self.init(file: try Self.open(path, O_RDWR, groupId), path: path, encryptionGroupId: groupId)
    }

    // MARK: opening — throwing URL initializers, as FileHandle(forReadingFrom:)

    /// `fileHandleForReadingFromURL:error:` — `url` must be a file URL (else `ACE_REGULAR_FILE_ONLY_ERROR`).
    /// - Throws: `NSPOSIXErrorDomain` `ENOENT`/`EACCES`, ...; `ACErrorDomain` `ACE_REGULAR_FILE_ONLY_ERROR`
    ///   for a directory or other non-regular file, `ACE_NO_KEYS_ERROR` while secure services are
    ///   unavailable, `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR` for a file that is not a secure file of this key.
    public convenience init(forReadingFrom url: URL) throws { try self.init(url, O_RDONLY, nil) }

    /// `fileHandleForWritingToURL:error:`.
    public convenience init(forWritingTo url: URL) throws { try self.init(url, O_WRONLY, nil) }

    /// `fileHandleForUpdatingURL:error:`.
    public convenience init(forUpdating url: URL) throws { try self.init(url, O_RDWR, nil) }

    /// `fileHandleForReadingFromURL:withEncryptionGroupId:error:`.
    public convenience init(forReadingFrom url: URL, encryptionGroupId groupId: String) throws { try self.init(url, O_RDONLY, groupId) }

    /// `fileHandleForWritingToURL:withEncryptionGroupId:error:`.
    public convenience init(forWritingTo url: URL, encryptionGroupId groupId: String) throws { try self.init(url, O_WRONLY, groupId) }

    /// `fileHandleForUpdatingURL:withEncryptionGroupId:error:`.
    public convenience init(forUpdating url: URL, encryptionGroupId groupId: String) throws { try self.init(url, O_RDWR, groupId) }

    private convenience init(_ url: URL, _ flags: Int32, _ group: String?) throws {
        let path = BytePath(try SecureFileIO.path(of: url))
        self.init(file: try Self.open(path, flags, group), path: path, encryptionGroupId: group)
    }

    // MARK: opening — throwing factory methods (the reference's `…error:` class methods)

    /// `fileHandleForReadingAtPath:error:` — opens an existing secure file for reading.
    /// - Throws: as `init(forReadingFrom:)`.
    public static func fileHandleForReading(atPath path: String) throws -> ACFileHandle {
        ACFileHandle(file: try open(BytePath(path), O_RDONLY, nil), path: BytePath(path), encryptionGroupId: nil)
    }

    /// `fileHandleForWritingAtPath:error:` — opens an existing file for writing (an empty file becomes a secure file).
    public static func fileHandleForWriting(atPath path: String) throws -> ACFileHandle {
        ACFileHandle(file: try open(BytePath(path), O_WRONLY, nil), path: BytePath(path), encryptionGroupId: nil)
    }

    /// `fileHandleForUpdatingAtPath:error:` — opens an existing file for reading and writing.
    public static func fileHandleForUpdating(atPath path: String) throws -> ACFileHandle {
        ACFileHandle(file: try open(BytePath(path), O_RDWR, nil), path: BytePath(path), encryptionGroupId: nil)
    }

    /// `fileHandleForReadingFromURL:error:`.
    public static func fileHandleForReading(from url: URL) throws -> ACFileHandle { try ACFileHandle(forReadingFrom: url) }

    /// `fileHandleForWritingToURL:error:`.
    public static func fileHandleForWriting(to url: URL) throws -> ACFileHandle { try ACFileHandle(forWritingTo: url) }

    /// `fileHandleForUpdatingURL:error:`.
    public static func fileHandleForUpdating(_ url: URL) throws -> ACFileHandle { try ACFileHandle(forUpdating: url) }

    /// Shared variant (`…withEncryptionGroupId:error:`): the file is encrypted with the encryption
    /// group's key, so every app that names the group can open it. An empty group ID fails with
    /// `ACE_INVALID_ARG`; a file of another key with `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR`.
    public static func fileHandleForReading(atPath path: String, encryptionGroupId groupId: String) throws -> ACFileHandle {
        ACFileHandle(file: try open(BytePath(path), O_RDONLY, groupId), path: BytePath(path), encryptionGroupId: groupId)
    }

    public static func fileHandleForWriting(atPath path: String, encryptionGroupId groupId: String) throws -> ACFileHandle {
        ACFileHandle(file: try open(BytePath(path), O_WRONLY, groupId), path: BytePath(path), encryptionGroupId: groupId)
    }

    public static func fileHandleForUpdating(atPath path: String, encryptionGroupId groupId: String) throws -> ACFileHandle {
        ACFileHandle(file: try open(BytePath(path), O_RDWR, groupId), path: BytePath(path), encryptionGroupId: groupId)
    }

    public static func fileHandleForReading(from url: URL, encryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(forReadingFrom: url, encryptionGroupId: groupId)
    }

    public static func fileHandleForWriting(to url: URL, encryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(forWritingTo: url, encryptionGroupId: groupId)
    }

    public static func fileHandleForUpdating(_ url: URL, encryptionGroupId groupId: String) throws -> ACFileHandle {
        try ACFileHandle(forUpdating: url, encryptionGroupId: groupId)
    }

    // MARK: the reference's plain methods (FileHandle's signatures; stop the program on an error)

    /// The rest of the file; empty at the end. Stops the program on an error: use `readToEnd()`.
    public func readDataToEndOfFile() -> Data {
        orStop("readDataToEndOfFile()", instead: "readToEnd()") { try performRead(upTo: Int.max) }
    }

    /// Up to `length` bytes; empty at the end. Stops the program on an error: use `read(upToCount:)`.
    public func readData(ofLength length: Int) -> Data {
        orStop("readData(ofLength:)", instead: "read(upToCount:)") { try performRead(upTo: length) }
    }

    /// For a regular file, the rest of it (empty, never nil, at the end; AP-4324). Stops the
    /// program on an error: use `readToEnd()`.
    public var availableData: Data {
        orStop("availableData", instead: "readToEnd()") { try performRead(upTo: Int.max) }
    }

    /// Writes at the current position and advances it. Stops the program on an error: use `write(contentsOf:)`.
    public func write(_ data: Data) {
        orStop("write(_:)", instead: "write(contentsOf:)") { try performWrite(data) }
    }

    /// Moves to the end of the file and returns the new position. Stops the program on an error:
    /// use `seekToEnd()`.
    @discardableResult
    public func seekToEndOfFile() -> UInt64 {
        orStop("seekToEndOfFile()", instead: "seekToEnd()") { try performSeekToEnd() }
    }

    /// Positions past the end are allowed; a write there fills the gap with zeros. Stops the
    /// program on an error: use `seek(toOffset:)`.
    public func seek(toFileOffset offset: UInt64) {
        orStop("seek(toFileOffset:)", instead: "seek(toOffset:)") { try performSeek(to: offset) }
    }

    /// The current position. Stops the program on a closed handle: use `offset()`.
    public var offsetInFile: UInt64 {
        orStop("offsetInFile", instead: "offset()") { try withOpenFile { position } }
    }

    /// Sets the length (growing with zeros) and moves the position there. Stops the program on an
    /// error: use `truncate(atOffset:)`.
    public func truncateFile(atOffset offset: UInt64) {
        orStop("truncateFile(atOffset:)", instead: "truncate(atOffset:)") { try performTruncate(to: offset) }
    }

    /// Writes cached data and `fsync`s. Stops the program on an error: use `synchronize()`.
    public func synchronizeFile() {
        orStop("synchronizeFile()", instead: "synchronize()") { try performSynchronize() }
    }

    /// Writes cached data and closes. Stops the program on an error (a failed flush loses data):
    /// use `close()`.
    public func closeFile() {
        orStop("closeFile()", instead: "close()") { try performClose() }
    }

    // MARK: the reference's `…error:` methods, spelled as FileHandle's throwing API

    /// Up to `count` bytes from the current position; nil at the end of the file
    /// (`readDataOfLength:error:`).
    public func read(upToCount count: Int) throws -> Data? {
        let data = try performRead(upTo: count)
        return data.isEmpty && count > 0 ? nil : data
    }

    /// The rest of the file; nil at the end (`readDataToEndOfFileWithError:`, `availableDataWithError:`).
    public func readToEnd() throws -> Data? {
        let data = try performRead(upTo: Int.max)
        return data.isEmpty ? nil : data
    }

    /// Writes at the current position and advances it (`writeData:error:`).
    public func write<T: DataProtocol>(contentsOf data: T) throws { try performWrite(data) }

    /// Moves to `offset` (`seekToFileOffset:`, throwing).
    public func seek(toOffset offset: UInt64) throws { try performSeek(to: offset) }

    /// Moves to the end; returns the new position (`seekToEndOfFile`, throwing).
    @discardableResult
    public func seekToEnd() throws -> UInt64 { try performSeekToEnd() }

    /// The current position; fails with `EBADF` after close (`offsetInFile`, throwing).
    public func offset() throws -> UInt64 { try withOpenFile { position } }

    /// Sets the length and moves the position there (`truncateFileAtOffset:`, throwing).
    public func truncate(atOffset offset: UInt64) throws { try performTruncate(to: offset) }

    /// Writes cached data and `fsync`s the file (`synchronizeFile`, throwing).
    public func synchronize() throws { try performSynchronize() }

    /// Writes cached data and closes (`closeFile`, throwing). Later calls fail with `EBADF`.
    public func close() throws { try performClose() }

    // MARK: asynchronous I/O: not supported (reference: "throws an exception")

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference); read in a Task or on a queue instead")
    public func readInBackgroundAndNotify() { fatalError("unavailable") }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference); read in a Task or on a queue instead")
    public func readInBackgroundAndNotify(forModes modes: [RunLoop.Mode]?) { fatalError("unavailable") }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference); read in a Task or on a queue instead")
    public func readToEndOfFileInBackgroundAndNotify() { fatalError("unavailable") }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference); read in a Task or on a queue instead")
    public func readToEndOfFileInBackgroundAndNotify(forModes modes: [RunLoop.Mode]?) { fatalError("unavailable") }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference)")
    public func waitForDataInBackgroundAndNotify() { fatalError("unavailable") }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference)")
    public func acceptConnectionInBackgroundAndNotify() { fatalError("unavailable") }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference)")
    public var readabilityHandler: (@Sendable (ACFileHandle) -> Void)? {
        get { fatalError("unavailable") }
        set { fatalError("unavailable") }
    }

    @available(*, unavailable, message: "ACFileHandle does not support asynchronous I/O (as in the AppConnect reference)")
    public var writeabilityHandler: (@Sendable (ACFileHandle) -> Void)? {
        get { fatalError("unavailable") }
        set { fatalError("unavailable") }
    }

    @available(*, unavailable, message: "an ACFileHandle has no descriptor for plain I/O: plain reads and writes would bypass the encryption")
    public var fileDescriptor: Int32 { fatalError("unavailable") }

    // MARK: earlier spellings (renamed; the compiler offers the fix)

    @available(*, unavailable, renamed: "fileHandleForReading(atPath:encryptionGroupId:)")
    public static func fileHandleForReading(atPath path: String, withEncryptionGroupId groupId: String) throws -> ACFileHandle { fatalError("unavailable") }
    @available(*, unavailable, renamed: "fileHandleForWriting(atPath:encryptionGroupId:)")
    public static func fileHandleForWriting(atPath path: String, withEncryptionGroupId groupId: String) throws -> ACFileHandle { fatalError("unavailable") }
    @available(*, unavailable, renamed: "fileHandleForUpdating(atPath:encryptionGroupId:)")
    public static func fileHandleForUpdating(atPath path: String, withEncryptionGroupId groupId: String) throws -> ACFileHandle { fatalError("unavailable") }
    @available(*, unavailable, renamed: "fileHandleForReading(from:encryptionGroupId:)")
    public static func fileHandleForReading(from url: URL, withEncryptionGroupId groupId: String) throws -> ACFileHandle { fatalError("unavailable") }
    @available(*, unavailable, renamed: "fileHandleForWriting(to:encryptionGroupId:)")
    public static func fileHandleForWriting(to url: URL, withEncryptionGroupId groupId: String) throws -> ACFileHandle { fatalError("unavailable") }
    @available(*, unavailable, renamed: "fileHandleForUpdating(_:encryptionGroupId:)")
    public static func fileHandleForUpdating(_ url: URL, withEncryptionGroupId groupId: String) throws -> ACFileHandle { fatalError("unavailable") }
    @available(*, unavailable, renamed: "readToEnd()")
    public func secureAvailableData() throws -> Data { fatalError("unavailable") }
    @available(*, unavailable, renamed: "readToEnd()")
    public func secureReadDataToEndOfFile() throws -> Data { fatalError("unavailable") }
    @available(*, unavailable, renamed: "read(upToCount:)")
    public func secureReadData(ofLength length: Int) throws -> Data { fatalError("unavailable") }
    @available(*, unavailable, renamed: "write(contentsOf:)")
    public func secureWrite(_ data: Data) throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "seekToEnd()")
    public func secureSeekToEndOfFile() throws -> UInt64 { fatalError("unavailable") }
    @available(*, unavailable, renamed: "seek(toOffset:)")
    public func secureSeek(toFileOffset offset: UInt64) throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "truncate(atOffset:)")
    public func secureTruncateFile(atOffset offset: UInt64) throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "synchronize()")
    public func secureSynchronizeFile() throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "close()")
    public func secureCloseFile() throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "read(upToCount:)")
    public func secureRead(upToCount count: Int) throws -> Data? { fatalError("unavailable") }
    @available(*, unavailable, renamed: "readToEnd()")
    public func secureReadToEnd() throws -> Data? { fatalError("unavailable") }
    @available(*, unavailable, renamed: "write(contentsOf:)")
    public func secureWrite<T: DataProtocol>(contentsOf data: T) throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "seek(toOffset:)")
    public func secureSeek(toOffset offset: UInt64) throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "seekToEnd()")
    public func secureSeekToEnd() throws -> UInt64 { fatalError("unavailable") }
    @available(*, unavailable, renamed: "offset()")
    public func secureOffset() throws -> UInt64 { fatalError("unavailable") }
    @available(*, unavailable, renamed: "truncate(atOffset:)")
    public func secureTruncate(atOffset offset: UInt64) throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "synchronize()")
    public func secureSynchronize() throws { fatalError("unavailable") }
    @available(*, unavailable, renamed: "close()")
    public func secureClose() throws { fatalError("unavailable") }

    // MARK: implementation

    /// Runs a plain method's body; an error stops the program with a message that names this
    /// class, the method, the file, the error and the throwing method that reports it instead
    /// (the reference raises an exception here).
    private func orStop<R>(_ method: String, instead: String, _ body: () throws -> R) -> R {
        do { return try body() } catch {
            fatalError("ACFileHandle.\(method) failed on \(path): \(Self.describe(error)). "
                       + "The plain FileHandle methods cannot report errors; use the throwing ACFileHandle.\(instead) and handle the error")
        }
    }

    /// `ACErrorDomain ACE_NO_KEYS_ERROR (1): message`,
    /// `NSPOSIXErrorDomain errno 9 (Bad file descriptor): message`.
    package static func describe(_ error: Error) -> String {
        let e = error as NSError
        func posix(_ code: Int) -> String { "errno \(code) (\(String(cString: strerror(Int32(truncatingIfNeeded: code)))))" }
        var detail = "(\(e.code))"
        if let ace = e.userInfo[ACErrorNameKey] as? String {
            detail = "\(ace) (\(e.code))"
            if let underlying = e.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
                detail += ", " + posix(underlying.code)
            }
        } else if e.domain == NSPOSIXErrorDomain {
            detail = posix(e.code)
        }
        return "\(e.domain) \(detail): \(e.localizedDescription)"
    }

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
            let got = try data.withUnsafeMutableBytes { buffer throws -> Int in try file.preadFully(into: buffer, at: start) }
            if got < wanted { data.count = got }
            position += UInt64(got)
            return data
        }
    }

    private func performWrite<T: DataProtocol>(_ data: T) throws {
        try withOpenFile {
            for region in data.regions {
                try region.withUnsafeBytes { bytes throws in
                    try file.pwriteFully(bytes, at: Int64(position))
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
