#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSecureFoundation
import ACSecureSharingCore

/// Reads a wrapped file's original bytes (the reference's `ACWrappedFileReadHandle`), with the read
/// methods of `ACFileHandle`/`FileHandle`. Offsets count from the first byte of the original file (the
/// name record is invisible). A failed read never returns partial or unauthenticated bytes.
///
/// Spellings follow `ACFileHandle` (docs/PORTING.md):
/// - the reference's plain methods, with `FileHandle`'s signatures: `readData(ofLength:)`,
///   `readDataToEndOfFile()`, `availableData`, `seek(toFileOffset:)`, `seekToEndOfFile()`,
///   `offsetInFile`, `closeFile()`. They work, and on an error they stop the program with a message
///   naming `ACWrappedFileReadHandle`, the error and the throwing method to use instead (the
///   reference raises an exception);
/// - the throwing forms, as Foundation spells them: `read(upToCount:)`, `readToEnd()`,
///   `seek(toOffset:)`, `seekToEnd()`, `offset()`, `close()`, which throw `NSError`s
///   (`ACErrorDomain` with the `ACE_*` code, or `NSPOSIXErrorDomain` with the errno).
/// Safe to use from several threads (calls are serialised).
public final class ACWrappedFileReadHandle: @unchecked Sendable {
    /// The name the extension gave the file (authenticated: it was encrypted with the contents).
    public var actualFileName: String { reader.actualFileName }

    private let reader: WrappedFileReader
    private var file: SecureFile { reader.file }
    private let lock = PThreadMutex()
    private var position: Int64 = 0
    private var closed = false

    init(_ reader: WrappedFileReader) {
        self.reader = reader
    }

    deinit {
        guard !closed else { return }
        do { try reader.close() } catch {
            // Read-only, so nothing is lost; still never dropped silently.
            FileHandle.standardError.write(Data("ACWrappedFileReadHandle: closing \(file.path) on release failed: \((error as NSError).localizedDescription)\n".utf8))
        }
    }

    /// The length of the original file.
    public var length: UInt64 {
        get throws { try locked { () throws(SecureFileError) in UInt64(try contentLength()) } }
    }

    // MARK: the reference's plain methods (FileHandle's signatures; stop the program on an error)

    /// Up to `length` bytes from the current offset; empty at the end of the file. Stops the
    /// program on an error: use `read(upToCount:)`.
    public func readData(ofLength length: Int) -> Data {
        orStop("readData(ofLength:)", instead: "read(upToCount:)") { try performRead(upTo: length) }
    }

    /// Everything from the current offset to the end. Stops the program on an error: use `readToEnd()`.
    public func readDataToEndOfFile() -> Data {
        orStop("readDataToEndOfFile()", instead: "readToEnd()") { try performRead(upTo: Int.max) }
    }

    /// `FileHandle.availableData`: for a file, the rest of it (empty at the end). Stops the program
    /// on an error: use `readToEnd()`.
    public var availableData: Data {
        orStop("availableData", instead: "readToEnd()") { try performRead(upTo: Int.max) }
    }

    /// Moves to `offset` (it may be past the end: reads there return no bytes). Stops the program
    /// on an error: use `seek(toOffset:)`.
    public func seek(toFileOffset offset: UInt64) {
        orStop("seek(toFileOffset:)", instead: "seek(toOffset:)") { try performSeek(to: offset) }
    }

    /// Moves to the end; returns the new offset (the file's length). Stops the program on an
    /// error: use `seekToEnd()`.
    @discardableResult
    public func seekToEndOfFile() -> UInt64 {
        orStop("seekToEndOfFile()", instead: "seekToEnd()") { try performSeekToEnd() }
    }

    /// The current offset. Stops the program on a closed handle: use `offset()`.
    public var offsetInFile: UInt64 {
        orStop("offsetInFile", instead: "offset()") { try offset() }
    }

    /// Closes the handle. Stops the program on an error: use `close()`.
    public func closeFile() {
        orStop("closeFile()", instead: "close()") { try close() }
    }

    // MARK: the throwing forms, spelled as FileHandle's throwing API

    /// Up to `count` bytes from the current offset; nil at the end of the file (`readDataOfLength:error:`).
    public func read(upToCount count: Int) throws -> Data? {
        let d = try performRead(upTo: count)
        return d.isEmpty && count > 0 ? nil : d
    }

    /// Everything from the current offset; nil at the end of the file (`readDataToEndOfFileWithError:`).
    public func readToEnd() throws -> Data? {
        let d = try performRead(upTo: Int.max)
        return d.isEmpty ? nil : d
    }

    /// Moves to `offset` (it may be past the end: reads there return no bytes).
    public func seek(toOffset offset: UInt64) throws { try performSeek(to: offset) }

    /// Moves to the end; returns the new offset (the file's length).
    @discardableResult
    public func seekToEnd() throws -> UInt64 { try performSeekToEnd() }

    /// The current offset; fails with `EBADF` after close.
    public func offset() throws -> UInt64 {
        try locked { () throws(SecureFileError) in UInt64(position) }
    }

    /// Closes the handle; later calls fail with `EBADF`. Closing twice is harmless.
    public func close() throws {
        try lock.withLock {
            guard !closed else { return }
            closed = true
            position = 0
            try ACSharingErrors.bridging { () throws(SecureFileError) in try reader.close() }
        }
    }

    // MARK: implementation

    /// Runs a plain method's body; an error stops the program with a message that names this
    /// class, the method, the file, the error and the throwing method that reports it instead.
    private func orStop<R>(_ method: String, instead: String, _ body: () throws -> R) -> R {
        do { return try body() } catch {
            fatalError("ACWrappedFileReadHandle.\(method) failed on \(file.path): \(ACFileHandle.describe(error)). "
                       + "The plain FileHandle methods cannot report errors; use the throwing ACWrappedFileReadHandle.\(instead) and handle the error")
        }
    }

    private func performRead(upTo count: Int) throws -> Data {
        guard count >= 0 else { throw ACSharingErrors.invalidArgument("\(file.path): negative read length") }
        return try locked { () throws(SecureFileError) in
            let remaining = max(0, try contentLength() - position)
            return try read(max: Int(clamping: min(Int64(count), remaining)))
        }
    }

    private func performSeek(to offset: UInt64) throws {
        guard let o = Int64(exactly: offset), o <= SecureFile.maximumFileSize else {
            throw ACSharingErrors.make(SecureFileError(code: .fileTooBig, errno: EINVAL, message: "\(file.path): offset \(offset) is too large"))
        }
        try locked { () throws(SecureFileError) in position = o }
    }

    private func performSeekToEnd() throws -> UInt64 {
        try locked { () throws(SecureFileError) in
            position = try contentLength()
            return UInt64(position)
        }
    }

    private func locked<R>(_ body: () throws(SecureFileError) -> R) throws -> R {
        try lock.withLock {
            guard !closed else { throw ACSharingErrors.make(.posix(EBADF, "\(file.path) (closed)")) }
            return try ACSharingErrors.bridging(body)
        }
    }

    private func contentLength() throws(SecureFileError) -> Int64 {
        try reader.length
    }

    /// Reads up to `count` bytes at `position` and advances it. Called with the lock held.
    private func read(max count: Int) throws(SecureFileError) -> Data {
        let available = try contentLength() - position
        let n = Int(clamping: min(Int64(count), max(0, available)))
        guard n > 0 else { return Data() }
        var data = Data(count: n)
        let done = try data.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) in
            try reader.read(into: b, at: position)
        }
        if done < n { data.removeSubrange(done..<n) }
        position += Int64(done)
        return data
    }
}
