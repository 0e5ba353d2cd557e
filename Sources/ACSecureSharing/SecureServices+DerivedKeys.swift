import Foundation
import ACCrypto
import ACSecureServices

/// Encryption keys for custom cryptography, with the reference's names (`-derivedAppKeyWithIdentifier:error:`).
///
/// Both are HKDF-SHA-256 outputs of the store's seed (32 bytes), domain-separated by purpose:
/// the app key from seed + app ID + identifier, the shared key from seed + identifier. They are stable
/// while the store lives (across restarts and passcode changes) and gone for ever once it is retired.
extension SecureServices {
    /// A 32-byte key unique to this app on this store, for `identifier` (use one identifier per purpose).
    /// - Throws: `NSError` in `ACErrorDomain`: `ACErrorNoKeys` while secure services are unavailable,
    ///   `ACErrorInvalidArg` for an empty identifier.
    public func derivedAppKey(withIdentifier identifier: String) throws -> ACSensitiveData {
        do { return ACSensitiveData(adopting: try derivedAppKey(identifier: identifier)) } catch {
            throw ACSharingErrors.make(error, "derivedAppKey(withIdentifier:)")
        }
    }

    /// A 32-byte key that every app of this store computes alike for `identifier`, to share encrypted data.
    /// - Throws: as `derivedAppKey(withIdentifier:)`.
    public func derivedSharedKey(withIdentifier identifier: String) throws -> ACSensitiveData {
        do { return ACSensitiveData(adopting: try derivedSharedKey(identifier: identifier)) } catch {
            throw ACSharingErrors.make(error, "derivedSharedKey(withIdentifier:)")
        }
    }

    /// The deprecated `-derivedAppKey:withIndex:`: the same key as `derivedAppKey(withIdentifier: index)`.
    @available(*, deprecated, renamed: "derivedAppKey(withIdentifier:)")
    public func derivedAppKey(withIndex index: String) throws -> ACSensitiveData {
        try derivedAppKey(withIdentifier: index)
    }

    /// The deprecated `-derivedSharedKey:withIndex:`: the same key as `derivedSharedKey(withIdentifier: index)`.
    @available(*, deprecated, renamed: "derivedSharedKey(withIdentifier:)")
    public func derivedSharedKey(withIndex index: String) throws -> ACSensitiveData {
        try derivedSharedKey(withIdentifier: index)
    }
}
