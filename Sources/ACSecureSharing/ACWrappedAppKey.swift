import Foundation
import ACSecureFileCore
import ACSecureServices
import ACSecureSharingCore

/// The provider app's side of extension sharing (the reference's `ACWrappedAppKey`).
public enum ACWrappedAppKey {
    /// The crypto block the provider app hands to its extension, so that the extension can wrap files
    /// for host apps (`+getCryptoKeysForACFileEncryptionWithSharedGroupID:error:`).
    ///
    /// The crypto block is a secret key: whoever holds it can create wrapped files that the host apps
    /// accept, and read wrapped files of its scope. Hand it over only through a private channel (on
    /// iOS, a shared keychain item; here, e.g., a 0600 file or a pipe) and never log it. It does not
    /// open the provider's own files or the group's secure files. Layout: ACSecureSharingCore's
    /// `CryptoBlock`.
    ///
    /// - Parameters:
    ///   - sharedGroupID: the `MI_AC_SHARED_GROUP_ID` value: only apps that pass the same ID to
    ///     `ACUnwrappedFile.readWrappedFile(atPath:sharedGroupID:)` can read the wrapped files.
    ///     `nil`: every app of the store can.
    ///   - services: the provider's secure services (default: `SecureServices.current`, started from the
    ///     environment if needed).
    /// - Returns: the crypto block, in guarded memory.
    /// - Throws: `NSError` in `ACErrorDomain`: `ACErrorNoKeys` while secure services are unavailable,
    ///   `ACErrorInvalidArg` for an empty group ID.
    public static func getCryptoKeysForACFileEncryption(sharedGroupID: String?, services: SecureServices? = nil) throws -> ACSensitiveData {
        try ACSharingErrors.bridging { () throws(SecureFileError) in
            ACSensitiveData(adopting: try WrappedFiles.cryptoBlock(sharedGroupID: sharedGroupID, services: services))
        }
    }
}
