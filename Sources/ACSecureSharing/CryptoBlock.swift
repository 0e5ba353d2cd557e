import Foundation
import ACCrypto
import ACSecureServices

/// The key material a provider app hands to its extension (`ACWrappedAppKey`'s "crypto block").
///
/// **It is a secret key.** Whoever holds it can create wrapped files that the host apps accept, and
/// read wrapped files of its scope. Hand it over only through a private channel (on iOS, a shared
/// keychain item; here, e.g., a 0600 file or a pipe), never log it, and keep it in guarded memory
/// (`ACSensitiveData`). It does not open the provider's own files or the group's secure files: the key
/// it carries is derived for wrapped files only.
///
/// Layout (version 1, 56 bytes, big-endian):
///
///     0   "ACCB"              4
///     4   version = 1         u8
///     5   scope               u8   0 = every app of the store (nil group), 1 = one encryption group
///     6   reserved, zero      u16
///     8   KEK fingerprint     16   HKDF(KEK, "key fingerprint"), the value stored in file headers
///     24  KEK                 32   the wrapped-file key-encryption key
///
/// The fingerprint doubles as a checksum: a damaged block is refused instead of producing files
/// nobody can read.
struct CryptoBlock {
    static let magic: [UInt8] = Array("ACCB".utf8)
    static let version: UInt8 = 1
    static let size = 56

    enum Scope: UInt8 { case allApps = 0, group = 1 }

    let scope: Scope
    let kek: KeyEncryptionKey

    /// Encodes into guarded memory.
    func encoded() -> ACSensitiveData {
        let out = ACSensitiveMutableData(capacity: Self.size)
        var head = Self.magic + [Self.version, scope.rawValue, 0, 0] + kek.fingerprint
        head.withUnsafeBytes { out.append($0) }
        kek.key.withUnsafeBytes { out.append($0) }
        head.withUnsafeMutableBytes { secureZero($0) }
        return out
    }

    /// Parses untrusted bytes.
    /// - Throws: an `NSError` (`ACErrorInvalidArg`) saying what is wrong; never echoes the bytes.
    static func parse(_ bytes: UnsafeRawBufferPointer) throws -> CryptoBlock {
        guard bytes.count >= 5, Array(bytes[0..<4]) == magic else {
            throw ACSharingErrors.invalidArgument("the crypto block is not an ACSecureSharing crypto block")
        }
        guard bytes[4] == version else {
            throw ACSharingErrors.invalidArgument("unsupported crypto block version \(bytes[4])")
        }
        guard bytes.count == size else {
            throw ACSharingErrors.invalidArgument("the crypto block has \(bytes.count) bytes, expected \(size)")
        }
        guard let scope = Scope(rawValue: bytes[5]), bytes[6] == 0, bytes[7] == 0 else {
            throw ACSharingErrors.invalidArgument("malformed crypto block (scope or reserved bytes)")
        }
        let key = SecureBytes(copying: UnsafeRawBufferPointer(rebasing: bytes[24..<56]))
        let kek: KeyEncryptionKey
        do { kek = try KeyEncryptionKey(key: key, keyClass: .cryptoBlock) } catch {
            throw ACSharingErrors.make(.ace(.internalError, "crypto block key setup failed"))
        }
        let stored = UnsafeRawBufferPointer(rebasing: bytes[8..<24])
        guard kek.fingerprint.withUnsafeBytes({ constantTimeEqual($0, stored) }) else {
            throw ACSharingErrors.invalidArgument("the crypto block is damaged (its key does not match its fingerprint)")
        }
        return CryptoBlock(scope: scope, kek: kek)
    }
}

/// The provider app's side of extension sharing (the reference's `ACWrappedAppKey`).
public enum ACWrappedAppKey {
    /// The crypto block the provider app hands to its extension, so that the extension can wrap files
    /// for host apps (`+getCryptoKeysForACFileEncryptionWithSharedGroupID:error:`).
    ///
    /// - Parameters:
    ///   - sharedGroupID: the `MI_AC_SHARED_GROUP_ID` value: only apps that pass the same ID to
    ///     `ACUnwrappedFile.readWrappedFile(atPath:sharedGroupID:)` can read the wrapped files.
    ///     `nil`: every app of the store can.
    ///   - services: the provider's secure services (default: `SecureServices.current`, started from the
    ///     environment if needed).
    /// - Returns: the crypto block, in guarded memory. It is key material: see `CryptoBlock`'s notes.
    /// - Throws: `NSError` in `ACErrorDomain`: `ACErrorNoKeys` while secure services are unavailable,
    ///   `ACErrorInvalidArg` for an empty group ID.
    public static func getCryptoKeysForACFileEncryption(sharedGroupID: String?, services: SecureServices? = nil) throws -> ACSensitiveData {
        let context = "getCryptoKeysForACFileEncryption(sharedGroupID:)"
        let provider: SecureServices
        if let services { provider = services } else {
            do { provider = try SecureServices.currentOrStartFromEnvironment() } catch { throw ACSharingErrors.make(error, context) }
        }
        do {
            let kek = try provider.wrappedFileKeyEncryptionKey(groupID: sharedGroupID)
            return CryptoBlock(scope: sharedGroupID == nil ? .allApps : .group, kek: kek).encoded()
        } catch {
            throw ACSharingErrors.make(error, context)
        }
    }
}
