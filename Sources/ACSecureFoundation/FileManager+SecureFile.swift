#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

// NSFileManager category, reference table 23. Methods that take an error pointer in the
// reference throw NSError here (ACErrorDomain / NSPOSIXErrorDomain / NSCocoaErrorDomain).
// `createSecureFile(atPath:contents:attributes:) -> Bool` and `secureContents(atPath:) -> Data?`
// are spelled as `createFile`/`contents(atPath:)`; their throwing forms take `options:`.

extension FileManager {
    /// `createSecureFileAtPath:contents:attributes:` as `createFile(atPath:contents:attributes:)`:
    /// false on any failure (prefer the throwing `createSecureFile(atPath:contents:attributes:options:)`).
    @discardableResult
    public func createSecureFile(atPath path: String, contents: Data?, attributes: [FileAttributeKey: Any]? = nil) -> Bool {
        succeeds { try createSecureFile(atPath: path, contents: contents, attributes: attributes, options: .atomic) }
    }

    /// `createSecureFileAtPath:contents:attributes:error:` — writes `contents` (nil: empty) as a
    /// secure file, replacing any file at `path` (atomically with `.atomic`, as the Bool form does;
    /// `.withoutOverwriting` fails with `EEXIST` instead); then applies `attributes`
    /// (`.posixPermissions`, `.modificationDate`, ... as `setAttributes(_:ofItemAtPath:)`).
    public func createSecureFile(atPath path: String, contents: Data?, attributes: [FileAttributeKey: Any]? = nil,
                                 options: Data.WritingOptions) throws {
        try bridgingErrors(path) {
            try SecureFileIO.write(contents ?? Data(), to: path, key: .app, atomic: options.contains(.atomic),
                                   withoutOverwriting: options.contains(.withoutOverwriting))
        }
        if let attributes, !attributes.isEmpty {
            var settable = attributes
            settable[.size] = nil  // the size is the contents'
            try setAttributes(settable, ofItemAtPath: path)
        }
    }

    /// `moveSecureFileAtPath:toPath:error:` — renames without re-encrypting (a secure file is bound
    /// to its file ID, not to its path). As `moveItem`, fails with `EEXIST` if `dstPath` exists.
    /// Across file systems the file is copied under a new key, then the source is removed.
    /// - Throws: `ACE_NO_KEYS_ERROR` while secure services are unavailable, `ACE_REGULAR_FILE_ONLY_ERROR`
    ///   for a directory, `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR` when `srcPath` is not a secure file.
    public func moveSecureFile(atPath srcPath: String, toPath dstPath: String) throws {
        try SecureFileIO.requireServices(srcPath)
        try bridgingErrors(srcPath) {
            _ = try SecureFileSystem.info(srcPath)  // regular, and a secure file (no key needed: group files move too)
            if case .success = Sys.lstat(dstPath) { throw SecureFileError.posix(EEXIST, dstPath) }
            // link + unlink refuses an existing destination atomically; rename where links are not supported.
            func removeSource() throws {
                if case .failure(let e) = Sys.unlink(srcPath) {
                    throw SecureFileError.posix(e.rawValue, "\(srcPath): moved to \(dstPath), but removing the old name failed")
                }
            }
            switch Sys.link(srcPath, dstPath) {
            case .success:
                try removeSource()
            case .failure(let e) where e.rawValue == EXDEV:
                try SecureFileIO.copy(srcPath, to: dstPath, key: .app)
                try removeSource()
            case .failure(let e) where e.rawValue == EPERM || e.rawValue == EMLINK || e.rawValue == ENOTSUP:
                try SecureFileSystem.rename(srcPath, dstPath)
            case .failure(let e):
                throw SecureFileError.posix(e.rawValue, "\(srcPath) -> \(dstPath)")
            }
            try SecureFileIO.syncDirectory(of: dstPath)
        }
    }

    /// `moveSecureFileAtURL:toURL:error:` — both URLs must be file URLs.
    public func moveSecureFile(at srcURL: URL, to dstURL: URL) throws {
        try moveSecureFile(atPath: SecureFileIO.path(of: srcURL), toPath: SecureFileIO.path(of: dstURL))
    }

    /// `copySecureFileAtPath:toPath:error:` — decrypts and re-encrypts: the copy gets a fresh file
    /// ID and data key (never a byte copy). Fails with `EEXIST` if `dstPath` exists.
    public func copySecureFile(atPath srcPath: String, toPath dstPath: String) throws {
        try bridgingErrors(srcPath) { try SecureFileIO.copy(srcPath, to: dstPath, key: .app) }
    }

    /// Beyond the reference: copies a file shared through an encryption group (the copy uses the same group key).
    public func copySecureFile(atPath srcPath: String, toPath dstPath: String, encryptionGroupId groupId: String) throws {
        let key = try SecureFileIO.key(group: groupId, path: srcPath)
        try bridgingErrors(srcPath) { try SecureFileIO.copy(srcPath, to: dstPath, key: key) }
    }

    /// `copySecureFileAtURL:toURL:error:`.
    public func copySecureFile(at srcURL: URL, to dstURL: URL) throws {
        try copySecureFile(atPath: SecureFileIO.path(of: srcURL), toPath: SecureFileIO.path(of: dstURL))
    }

    /// `secureContentsAtPath:` as `contents(atPath:)`: nil on any failure (prefer the throwing
    /// `secureContents(atPath:options:)`).
    public func secureContents(atPath path: String) -> Data? {
        succeeds { try Data(contentsOfSecureFile: path) }
    }

    /// `secureContentsAtPath:error:` — the decrypted contents.
    public func secureContents(atPath path: String, options: Data.ReadingOptions) throws -> Data {
        try Data(contentsOfSecureFile: path, options: options)
    }

    /// `secureContentsEqualAtPath:andPath:error:` — compares the plaintexts (two encryptions of the
    /// same bytes differ on disk). Both files must be readable secure files.
    public func secureContentsEqual(atPath path1: String, andPath path2: String) throws -> Bool {
        try SecureFileIO.withReadOnlyFile(path1) { a in
            try SecureFileIO.withReadOnlyFile(path2) { b in
                try Self.plaintextsEqual(a, path1, b, path2)
            }
        }
    }

    private static func plaintextsEqual(_ a: SecureFile, _ path1: String, _ b: SecureFile, _ path2: String) throws -> Bool {
        let sizeA = try bridgingErrors(path1) { try a.size }
        let sizeB = try bridgingErrors(path2) { try b.size }
        guard sizeA == sizeB else { return false }
        let chunk = 64 * 1024
        var bufA = [UInt8](repeating: 0, count: chunk), bufB = [UInt8](repeating: 0, count: chunk)
        defer { bufA.withUnsafeMutableBytes { secureZero($0) }; bufB.withUnsafeMutableBytes { secureZero($0) } }
        var offset: Int64 = 0
        while offset < sizeA {
            let count = Int(min(Int64(chunk), sizeA - offset))
            let nA = try bridgingErrors(path1) { try bufA.withUnsafeMutableBytes { try a.preadFully(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<count]), at: offset) } }
            let nB = try bridgingErrors(path2) { try bufB.withUnsafeMutableBytes { try b.preadFully(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<count]), at: offset) } }
            guard nA == nB, nA > 0 else { return nA == nB }
            guard bufA[0..<nA] == bufB[0..<nB] else { return false }
            offset += Int64(nA)
        }
        return true
    }

    /// `attributesOfSecureFileAtPath:error:` — as `attributesOfItem(atPath:)`, with `.size` the
    /// plaintext size. Opens the file, so it fails like a read would (keys, corruption, directory).
    public func attributesOfSecureFile(atPath path: String) throws -> [FileAttributeKey: Any] {
        let size = try SecureFileIO.withReadOnlyFile(path) { try $0.size }
        var attributes = try attributesOfItem(atPath: path)
        attributes[.size] = NSNumber(value: UInt64(size))
        return attributes
    }
}
