#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

/// Extension wrapped files on the engine alone, without Foundation: the logic behind ACSecureSharing's
/// `ACWrappedAppKey`/`ACWrappedFile`/`ACUnwrappedFile` (which add the `NSError`/`Data` face) and
/// behind the C API's ACSecureSharing.h (libACSecureFile.so links no Foundation).
package enum WrappedFiles {
    // MARK: the provider app

    /// The crypto block for `sharedGroupID` (nil: every app of the store), in guarded memory.
    /// - Parameters:
    ///   - services: the provider's secure services; nil: `SecureServices.current`, started from the
    ///     environment if needed.
    /// - Throws: `SecureFileError`: `noKeys` while secure services are unavailable, `invalidArgument`
    ///   for an empty group ID.
    package static func cryptoBlock(sharedGroupID: String?, services: SecureServices?) throws(SecureFileError) -> SecureBytes {
        let context = "getCryptoKeysForACFileEncryption(sharedGroupID:)"
        let kek: KeyEncryptionKey
        do throws(SecureServicesError) {
            let provider = try currentServices(services)
            kek = try provider.wrappedFileKeyEncryptionKey(groupID: sharedGroupID)
        } catch {
            throw SecureFileError(error, context)
        }
        return try CryptoBlock(scope: sharedGroupID == nil ? .allApps : .group, kek: kek).encoded()
    }

    /// `services`, or the process's (started from the environment if needed).
    private static func currentServices(_ services: SecureServices?) throws(SecureServicesError) -> SecureServices {
        if let services { return services }
        return try SecureServices.currentOrStartFromEnvironment()
    }

    // MARK: the extension

    /// Encrypts the file at `path` into a wrapped file at `toPath` with the crypto block's key.
    ///
    /// The source is read in 256 KiB pieces. The wrapped file is written to a temporary file in
    /// `toPath`'s directory (mode 0600), synced and renamed over `toPath`, so `toPath` is never a
    /// partial wrapped file; on failure it is unchanged.
    /// - Throws: `SecureFileError`: `invalidArgument` for a bad crypto block or name, `regularFileOnly`
    ///   for a source that is not a regular file, I/O errors naming the path.
    package static func wrap(atPath path: BytePath, toPath: BytePath, cryptoBlock: UnsafeRawBufferPointer,
                             actualFileName: String?) throws(SecureFileError) {
        let block = try CryptoBlock.parse(cryptoBlock)
        guard let defaultName = actualFileName ?? lastComponent(path).string else {
            // The name record is text (the reference's NSString); a byte name is not guessed at.
            throw SecureFileError(code: .invalidArgument, errno: EINVAL,
                                  message: "\(path): the wrapped file's name record is text and this name is not UTF-8; pass the actual file name")
        }
        let name = try WrappedFileLayout.validateName(defaultName)
        guard !toPath.isEmpty, toPath.bytes.last != UInt8(ascii: "/") else {
            throw SecureFileError(code: .invalidArgument, errno: EISDIR, message: "\(toPath): names a directory")
        }
        let source = try openRegularFile(path)
        defer { _ = Sys.close(source) }  // read only: nothing to lose
        let provider = FixedKeyProvider(kek: block.kek)
        let replacement = AtomicReplacement(destination: toPath)
        try replacement.run(write: { (temporary) throws(SecureFileError) in
            func naming(_ error: SecureFileError) -> SecureFileError {
                error.naming(toPath, insteadOf: temporary)
            }
            let out: SecureFile
            do throws(SecureFileError) {
                out = try SecureFile.open(temporary, flags: O_WRONLY | AtomicReplacement.exclusiveCreationFlags, mode: 0o600, services: provider)
            } catch {
                throw naming(error)
            }
            do throws(SecureFileError) {
                let record = WrappedFileLayout.record(name: name)
                _ = try record.withBytes { (b: UnsafeRawBufferPointer) throws(SecureFileError) in try out.write(b) }
                let buffer: SecureBuffer
                do throws(CryptoError) { buffer = try SecureBuffer(count: 256 << 10) } catch { throw .crypto(error, "\(path): read buffer") }
                try buffer.withUnsafeMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) in
                    while true {
                        let n: Int
                        switch Sys.readFull(source, b.baseAddress!, b.count) {
                        case .success(let got): n = got
                        case .failure(let e): throw .posix(e.rawValue, "\(path): read")
                        }
                        if n == 0 { break }
                        try out.writeFully(UnsafeRawBufferPointer(rebasing: b[0..<n]))
                    }
                }
            } catch {
                try? out.close()  // the first error is the one reported; the file is removed
                throw naming(error)
            }
            do throws(SecureFileError) { try out.close() } catch { throw naming(error) }
        }, failure: { SecureFileError.posix($0.errno.rawValue, "\($0.destination): \($0.step)") })
    }

    package static func lastComponent(_ path: BytePath) -> BytePath {
        BytePath(bytes: path.bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).last ?? []) ?? ""
    }

    private static func openRegularFile(_ path: BytePath) throws(SecureFileError) -> Int32 {
        // O_NONBLOCK: a FIFO must not block the open; a read-only open of a directory succeeds, and
        // the check below refuses it.
        let fd: Int32
        switch Sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) {
        case .success(let f): fd = f
        case .failure(let e): throw .posix(e.rawValue, path)
        }
        do throws(SecureFileError) {
            _ = try SecureFileSystem.regularFileStat(fd, path, note: " (only regular files can be wrapped)")
            if case .failure(let e) = Sys.clearNonblocking(fd) { throw .posix(e.rawValue, path) }
        } catch {
            _ = Sys.close(fd)
            throw error
        }
        return fd
    }

    // MARK: the host app

    /// Opens the wrapped file at `path` for reading.
    /// - Parameters:
    ///   - sharedGroupID: the group ID the provider used; nil if it used none.
    ///   - services: the host app's secure services; nil: `SecureServices.current`, started from the
    ///     environment if needed.
    /// - Throws: `WrappedFileOpenError.unknownWrapperFormat` for a file that is not a wrapped file;
    ///   otherwise the engine's error (`badKeyOrCorruptData` for another group's or a damaged file,
    ///   `noKeys`, `invalidArgument`, I/O errors naming the path).
    package static func open(atPath path: BytePath, sharedGroupID: String?, services: SecureServices?) throws(WrappedFileOpenError) -> WrappedFileReader {
        try checkIsWrapped(path)
        let context = "\(path): readWrappedFile"
        do throws(SecureFileError) {
            let provider: SecureServices
            do throws(SecureServicesError) {
                provider = try currentServices(services)
                // Fails early (noKeys, invalidArgument) with the services' own message.
                _ = try provider.wrappedFileKeyEncryptionKey(groupID: sharedGroupID)
            } catch {
                throw SecureFileError(error, context)
            }
            // Through a provider that follows the services' lock state: after lock(), reads fail with
            // noKeys like every other secure handle, and work again after unlock.
            let file = try SecureFile.open(path, flags: O_RDONLY | O_CLOEXEC, services: provider.wrappedFileKeyProvider(groupID: sharedGroupID))
            do throws(SecureFileError) {
                let (name, base) = try readRecord(file)
                return WrappedFileReader(file: file, actualFileName: name, contentOffset: base)
            } catch {
                try? file.close()
                throw error
            }
        } catch {
            throw .secureFile(error)
        }
    }

    /// Looks at the clear header only: is this a secure file of the wrapped-file key class? Through
    /// the engine's system call layer (`Sys`), like the secure file that is opened next.
    private static func checkIsWrapped(_ path: BytePath) throws(WrappedFileOpenError) {
        let fd: Int32
        switch Sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) {
        case .success(let f): fd = f
        case .failure(let e): throw .secureFile(.posix(e.rawValue, path))
        }
        defer { _ = Sys.close(fd) }  // read only: nothing to lose
        do throws(SecureFileError) { _ = try SecureFileSystem.regularFileStat(fd, path) } catch { throw .secureFile(error) }
        let header: FileHeader
        switch FileHeader.read(from: fd) {
        case .success(let h): header = h
        case .failure(.io(let e)): throw .secureFile(.posix(e, "\(path): read"))
        case .failure(.invalid(let why)):
            // A wrapped file whose header was damaged is a damaged file, not a file of another kind.
            if FileHeader.claimedKeyClass(of: fd) == KeyEncryptionKey.KeyClass.cryptoBlock.rawValue {
                throw .secureFile(.ace(.badKeyOrCorruptData, "\(path): damaged wrapped file header (\(why))"))
            }
            throw .unknownWrapperFormat("\(path): not an extension wrapped file (\(why))")
        }
        guard header.keyClass == KeyEncryptionKey.KeyClass.cryptoBlock.rawValue else {
            throw .unknownWrapperFormat("\(path): not an extension wrapped file (a secure file of key class \(header.keyClass), not a wrapped file)")
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

/// Why a wrapped file did not open.
package enum WrappedFileOpenError: Error {
    /// Not an extension wrapped file (a plain file, or a secure file of another kind): use it as it
    /// is. The message names the path.
    case unknownWrapperFormat(String)
    /// The engine's error.
    case secureFile(SecureFileError)
}

/// An open wrapped file: the original file's bytes, at offsets counted from its first byte (the
/// name record is invisible). Reads never return partial or unauthenticated bytes. Stateless apart
/// from being open or closed, so it may be used from several threads; the offset is the caller's.
package final class WrappedFileReader: Sendable {
    /// The name the extension gave the file (authenticated: it was encrypted with the contents).
    package let actualFileName: String
    package let file: SecureFile
    private let contentOffset: Int64
    private let closed = Atomic<Bool>(false)

    init(file: SecureFile, actualFileName: String, contentOffset: Int64) {
        self.file = file
        self.actualFileName = actualFileName
        self.contentOffset = contentOffset
    }

    deinit {
        // Read-only: closing cannot lose data. ACWrappedFileReadHandle closes (and reports) first.
        if !closed.load(ordering: .acquiring) { try? file.close() }
    }

    package var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// The length of the original file.
    package var length: Int64 {
        get throws(SecureFileError) { max(0, try file.size - contentOffset) }
    }

    /// Reads up to `buffer.count` bytes of the original file at `offset` (≥ 0); fewer only at the end,
    /// 0 at or past it.
    package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        precondition(offset >= 0, "WrappedFileReader.read: negative offset")
        guard buffer.count > 0, offset < SecureFile.maximumFileSize else { return 0 }
        let available = try length - offset
        let n = Int(clamping: min(Int64(buffer.count), max(0, available)))
        return try file.preadFully(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<n]), at: contentOffset + offset)
    }

    /// Closes the file; later reads fail with EBADF (the engine's closed-handle error). Closing twice
    /// is harmless.
    package func close() throws(SecureFileError) {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        try file.close()
    }
}

// Array's `withUnsafe*Bytes` are `rethrows`, which erases `SecureFileError` to `any Error`; these keep
// the engine's typed errors.
extension Array where Element == UInt8 {
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try withUnsafeBytes { b in Result { () throws(SecureFileError) in try body(b) } }.get()
    }

    mutating func withMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try withUnsafeMutableBytes { b in Result { () throws(SecureFileError) in try body(b) } }.get()
    }
}
