#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSecureServices
import ACSecureSharingCore
import ACSystemCalls

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
        try ACSharingErrors.bridging { () throws(SecureFileError) in
            try WrappedFiles.wrap(atPath: BytePath(path), toPath: BytePath(toPath),
                                  cryptoBlock: UnsafeRawBufferPointer(start: cryptoBlock.length == 0 ? nil : cryptoBlock.bytes, count: cryptoBlock.length),
                                  actualFileName: actualFileName)
        }
    }

    /// The same, for a crypto block that arrived as `Data` (e.g. read from a file or a keychain item).
    public static func wrapFile(atPath path: String, toPath: String, cryptoBlock: Data, actualFileName: String? = nil) throws {
        let sensitive = ACSensitiveData(data: cryptoBlock)
        try wrapFile(atPath: path, toPath: toPath, cryptoBlock: sensitive, actualFileName: actualFileName)
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
        do throws(WrappedFileOpenError) {
            return ACWrappedFileReadHandle(try WrappedFiles.open(atPath: BytePath(path), sharedGroupID: sharedGroupID, services: services))
        } catch {
            switch error {
            case .unknownWrapperFormat(let message): throw ACSharingErrors.unknownWrapperFormat(path, message)
            case .secureFile(let e): throw ACSharingErrors.make(e)
            }
        }
    }
}
