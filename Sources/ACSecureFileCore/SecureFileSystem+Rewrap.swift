#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

/// What a secure file's header says, readable without any key.
public struct SecureFileInfo: Sendable, Equatable {
    public var plaintextSize: Int64
    public var physicalSize: Int64
    public var chunkSize: Int
    /// 1 app key, 2 encryption group key, 3 crypto block (extension wrapped file).
    public var keyClass: UInt8
    public var fileID: [UInt8]
    /// Identifies the key-encryption key without revealing it.
    public var keyFingerprint: [UInt8]
    /// The format version (1, or 2 with key selectors: docs/FORMAT.md).
    public var formatVersion: UInt16
    /// The file's layout (chunk size and per-chunk overhead).
    public var layout: FileLayout { FileLayout(chunkShift: UInt8(chunkSize.trailingZeroBitCount), version: formatVersion) }

    public var keyClassName: String {
        switch keyClass {
        case 1: return "app"
        case 2: return "group"
        case 3: return "crypto block"
        default: return "unknown (\(keyClass))"
        }
    }
}

extension SecureFileSystem {
    /// Reads the header of `path` (no key needed). Fails with `badKeyOrCorruptData` for a file that
    /// is not a secure file, or whose length no secure file can have.
    public static func info(_ path: BytePath) throws(SecureFileError) -> SecureFileInfo {
        let fd: Int32
        switch Sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0) {
        case .success(let f): fd = f
        case .failure(let e): throw .posix(e.rawValue, path)
        }
        defer { _ = Sys.close(fd) }
        let st = try regularFileStat(fd, path)
        let header: FileHeader
        switch FileHeader.read(from: fd) {
        case .success(let h): header = h
        case .failure(.io(let e)): throw .posix(e, "\(path): read")
        case .failure(.invalid(let why)): throw .ace(.badKeyOrCorruptData, "\(path): \(why)")
        }
        guard case .success(let end?) = SharedFile.sizeOnDisk(header.layout, fd: fd, physical: Int64(st.st_size)),
              case let size = end.size else {
            throw .ace(.badKeyOrCorruptData, "\(path): length \(st.st_size) is not a valid secure file length (torn or truncated)")
        }
        return SecureFileInfo(plaintextSize: size, physicalSize: Int64(st.st_size), chunkSize: header.layout.chunkSize,
                              keyClass: header.keyClass, fileID: header.fileID, keyFingerprint: header.fingerprint,
                              formatVersion: header.layout.version)
    }

    /// Re-wraps the file's data key under another key-encryption key by rewriting the 128-byte
    /// header only: O(1) in the file size, no chunk is re-encrypted. The header write is a single
    /// `pwrite` inside the first page, followed by `fsync`.
    ///
    /// - Parameters:
    ///   - from: the key that opens the file now.
    ///   - to: the key that will open it afterwards (e.g. `.group("com.example.shared")`).
    public static func rewrap(_ path: BytePath, from: KeySelection = .app, to: KeySelection,
                              services: (any KeyProvider)? = nil) throws(SecureFileError) {
        let provider = try SecureFile.resolveServices(services, path)
        let kek: KeyEncryptionKey
        do { kek = try provider.keyEncryptionKey(for: to) } catch { throw .services(error, path) }
        try rewrap(path, from: from, toKey: kek, recordAs: to, services: provider)
    }

    /// Re-wraps under an explicit key-encryption key (for example one from a crypto block).
    /// Handles this process has open on the file keep working only if `recordAs` names a key their
    /// provider can derive.
    public static func rewrap(_ path: BytePath, from: KeySelection = .app, toKey kek: KeyEncryptionKey,
                              recordAs selection: KeySelection? = nil, services: (any KeyProvider)? = nil) throws(SecureFileError) {
        let file = try SecureFile.open(path, flags: O_RDWR, key: from, services: services)
        do {
            try rewrapHeader(of: file, path, toKey: kek, recordAs: selection)
        } catch {
            // The header write failed: closing cannot make it worse, and that error is the one to report.
            _ = try? file.close()
            throw error
        }
        // A failed close (the flush of cached data) is reported, not swallowed.
        try file.close()
    }

    /// Writes the header of `file` re-wrapped under `kek`. Flags and reserved bytes are written as
    /// zero: `FileHeader.parse` accepted only zeros, and `encoded()` writes the reserved bytes itself.
    private static func rewrapHeader(of file: SecureFile, _ path: BytePath, toKey kek: KeyEncryptionKey,
                                     recordAs selection: KeySelection?) throws(SecureFileError) {
        try file.withShared { (s: SharedFile) throws(SecureFileError) in
            try s.initializeIfNeeded()
            guard var header = s.header, let dataKey = s.dataKey else {
                throw .ace(.internalError, "\(path): file key not loaded")
            }
            try header.wrap(dataKey: dataKey, under: kek)
            let bytes = header.encoded()
            let written = bytes.withUnsafeBytes { Sys.pwriteFull(s.ioFD, $0.baseAddress!, $0.count, 0) }
            try s.checkIO(written, "write header")
            try s.checkIO(Sys.fsync(s.ioFD), "fsync")
            s.header = header
            if let selection { s.keySelection = selection } else { s.keyGeneration = 0; s.cipher = nil; s.dataKey = nil }
        }
    }
}
