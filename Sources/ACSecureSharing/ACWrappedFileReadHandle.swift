#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSecureSharingCore

/// Reads a wrapped file's original bytes (the reference's `ACWrappedFileReadHandle`), with the read
/// methods of `ACFileHandle`/`FileHandle`. Offsets count from the first byte of the original file (the
/// name record is invisible). A failed read never returns partial or unauthenticated bytes.
///
/// Spellings follow `ACFileHandle`: the throwing `FileHandle` forms `read(upToCount:)`, `readToEnd()`,
/// `seek(toOffset:)`, `seekToEnd()`, `offset()`, `close()` throw `NSError`s; `offsetInFile` and
/// `closeFile()` are the plain forms. `readData(ofLength:)`, `readDataToEndOfFile()`,
/// `availableData`, `seek(toFileOffset:)` and `seekToEndOfFile()` still throw (the C API's
/// descriptor table calls them with `try`); see docs/PORTING.md.
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

    // MARK: reading

    /// Up to `length` bytes from the current offset; empty at the end of the file.
    public func readData(ofLength length: Int) throws -> Data {
        guard length >= 0 else { throw ACSharingErrors.invalidArgument("\(file.path): negative read length") }
        return try locked { () throws(SecureFileError) in try read(max: length) }
    }

    /// Everything from the current offset to the end.
    public func readDataToEndOfFile() throws -> Data {
        try locked { () throws(SecureFileError) in
            let remaining = max(0, try contentLength() - position)
            return try read(max: Int(clamping: remaining))
        }
    }

    /// `FileHandle.availableData`: for a file, the rest of it.
    public var availableData: Data {
        get throws { try readDataToEndOfFile() }
    }

    /// `FileHandle.read(upToCount:)`: nil at the end of the file.
    public func read(upToCount count: Int) throws -> Data? {
        let d = try readData(ofLength: count)
        return d.isEmpty && count > 0 ? nil : d
    }

    /// `FileHandle.readToEnd()`: nil at the end of the file.
    public func readToEnd() throws -> Data? {
        let d = try readDataToEndOfFile()
        return d.isEmpty ? nil : d
    }

    // MARK: offset

    /// The current offset (0 after the handle is closed).
    public var offsetInFile: UInt64 { lock.withLock { UInt64(position) } }

    public func offset() throws -> UInt64 {
        try locked { () throws(SecureFileError) in UInt64(position) }
    }

    /// Moves to `offset` (it may be past the end: reads there return no bytes).
    public func seek(toFileOffset offset: UInt64) throws {
        guard let o = Int64(exactly: offset), o <= SecureFile.maximumFileSize else {
            throw ACSharingErrors.make(SecureFileError(code: .fileTooBig, errno: EINVAL, message: "\(file.path): offset \(offset) is too large"))
        }
        try locked { () throws(SecureFileError) in position = o }
    }

    public func seek(toOffset offset: UInt64) throws { try seek(toFileOffset: offset) }

    /// Moves to the end; returns the new offset (the file's length).
    @discardableResult
    public func seekToEndOfFile() throws -> UInt64 {
        try locked { () throws(SecureFileError) in
            position = try contentLength()
            return UInt64(position)
        }
    }

    @discardableResult
    public func seekToEnd() throws -> UInt64 { try seekToEndOfFile() }

    // MARK: closing

    /// Closes the handle; later calls fail with `EBADF`. Closing twice is harmless.
    public func close() throws {
        try lock.withLock {
            guard !closed else { return }
            closed = true
            position = 0
            try ACSharingErrors.bridging { () throws(SecureFileError) in try reader.close() }
        }
    }

    /// `FileHandle.closeFile()`. Stops the program on an error (the reference raises an
    /// exception): use the throwing `close()` to handle it.
    public func closeFile() {
        do { try close() } catch {
            fatalError("ACWrappedFileReadHandle.closeFile() failed on \(file.path): \((error as NSError).domain) (\((error as NSError).code)): "
                       + "\((error as NSError).localizedDescription). Use the throwing ACWrappedFileReadHandle.close() and handle the error")
        }
    }

    // MARK: private

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
